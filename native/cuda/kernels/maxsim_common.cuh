// Shared device helpers for the MaxSim kernels (every family: SIMT, mma.sync, wgmma, 8-bit): element
// conversion, warp reductions, the SIMT row pass, cp.async / ldmatrix / named barriers. The pieces of the
// tensor-core kernels live beside it: maxsim_policy.cuh (element types), maxsim_producer.cuh (document
// loads), maxsim_mainloop.cuh (MMA issue), maxsim_rowmax.cuh (row-max fold), maxsim_epilogue.cuh (sums).
#pragma once
#include <stdint.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "maxsim_params.h"
#include "maxsim_policy.cuh"

namespace maxsim {

// ---- element conversion -------------------------------------------------------------------
template <typename T> __device__ __forceinline__ float to_f32(T x);
template <> __device__ __forceinline__ float to_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_f32<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

// ---- warp reductions (fixed butterfly order: deterministic) -------------------------------
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The end of one query-row pass of the SIMT kernels (one CTA of THREADS per (document, query)):
// the block max of each row's per-thread maxima m[t] (row i0 + t), then thread 0 adds
// weight(row) * max of the rows < lq to total, in row order. Every thread must call it (two
// __syncthreads); red is the CTA's [THREADS / 32][QT] shared scratch.
template <int QT, int THREADS, class Weight>
__device__ __forceinline__ void simt_block_rows(const float (&m)[QT], float (&red)[THREADS / 32][QT], int i0, int lq,
                                                float& total, Weight weight) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
#pragma unroll
  for (int t = 0; t < QT; ++t) {
    const float v = warp_max(m[t]);
    if (lane == 0) red[warp][t] = v;
  }
  __syncthreads();
  if (tid == 0) {
#pragma unroll
    for (int t = 0; t < QT; ++t) {
      if (i0 + t < lq) {
        float v = red[0][t];
#pragma unroll
        for (int w = 1; w < THREADS / 32; ++w) v = fmaxf(v, red[w][t]);
        total += weight(i0 + t) * v;
      }
    }
  }
  __syncthreads();
}

// ---- async copy / tensor-core primitives (sm_80+) -----------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// The L2 prefetch size hint of the 16-byte cp.async ("", ".L2::64B", ".L2::128B" or ".L2::256B"):
// a build-time knob for measuring it on the streaming kernels (bench/NOTES.md, 'L2 prefetch size').
#ifndef MAXSIM_CP_ASYNC_L2_PREFETCH
#define MAXSIM_CP_ASYNC_L2_PREFETCH ""
#endif

// 16-byte cp.async; src_bytes in {0,16}: 0 zero-fills the destination without reading src.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global" MAXSIM_CP_ASYNC_L2_PREFETCH " [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
// Named barrier over `threads` threads (multiple of 32). id 0 is __syncthreads.
__device__ __forceinline__ void named_bar(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace maxsim
