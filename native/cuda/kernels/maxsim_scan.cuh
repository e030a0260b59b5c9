// The block-wide exclusive scan of 32-bit counts that the CSR builders share (training's dD and
// Chamfer's cell sort and backward): inclusive warp scans, then one warp scans the warps' totals.
// Integers, so any order is exact. Plain CUDA (no other maxsim header): the Chamfer kernels also run
// on the host under native/cuda/test/cuda_shim.h.
#pragma once
#include <stdint.h>

// Exclusive scan of v over a block of THREADS threads (a multiple of 32, at most 1024); *total is the
// block's sum. Every thread of the block must call it (three barriers).
template <int THREADS>
__device__ __forceinline__ uint32_t block_exclusive_scan(uint32_t v, uint32_t* total) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, at most 32 of them");
  __shared__ uint32_t warp_sums[THREADS / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t x = v;
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    uint32_t w = lane < THREADS / 32 ? warp_sums[lane] : 0u;
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    if (lane < THREADS / 32) warp_sums[lane] = w;
  }
  __syncthreads();
  const uint32_t excl = (warp > 0 ? warp_sums[warp - 1] : 0u) + x - v;
  *total = warp_sums[THREADS / 32 - 1];
  __syncthreads();  // everyone has read warp_sums before a later call overwrites it
  return excl;
}
