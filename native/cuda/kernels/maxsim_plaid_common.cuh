// The helpers both compressed-index kernel files share (maxsim_plaid.cu, maxsim_plaid_search.cu):
// element loads of the three float dtypes, the SIMT dot tile (one fp32 fma chain per output in k
// order: the CPU codec's arithmetic) and the warp max of 64-bit keys.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "maxsim_plaid_params.h"

namespace {

__device__ __forceinline__ float LoadElem(const void* x, int dtype, int64_t i) {
  if (dtype == 0) return static_cast<const float*>(x)[i];
  const uint16_t h = static_cast<const uint16_t*>(x)[i];
  if (dtype == 1) return __half2float(__ushort_as_half(h));
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

constexpr int kPad = PLAID_TILE_M + 4;  // rows stay 16-byte aligned for the float4 reads

// acc[i][j] = x_row(4 ty + i) . cent(col 4 tx + j), one fma chain over k ascending. rows / cols:
// the tile's row indices into x and centroid ids (-1: none; zeros are loaded, results unused).
__device__ __forceinline__ void DotTile(const void* x, int dtype, const float* cent, int64_t d, const int64_t* rows,
                                        const int32_t* cols, float (*xs)[kPad], float (*cs)[kPad],
                                        float acc[4][4]) {
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
  for (int64_t k0 = 0; k0 < d; k0 += PLAID_TILE_K) {
    const int kn = static_cast<int>(d - k0 < PLAID_TILE_K ? d - k0 : PLAID_TILE_K);
    __syncthreads();
    for (int e = tid; e < PLAID_TILE_M * PLAID_TILE_K; e += PLAID_THREADS) {
      const int r = e / PLAID_TILE_K, kk = e % PLAID_TILE_K;
      const int64_t row = rows[r];
      xs[kk][r] = (row >= 0 && kk < kn) ? LoadElem(x, dtype, row * d + k0 + kk) : 0.0f;
      const int32_t c = cols[r];
      cs[kk][r] = (c >= 0 && kk < kn) ? cent[static_cast<int64_t>(c) * d + k0 + kk] : 0.0f;
    }
    __syncthreads();
    for (int kk = 0; kk < kn; kk++) {
      const float4 av = *reinterpret_cast<const float4*>(&xs[kk][4 * ty]);
      const float4 bv = *reinterpret_cast<const float4*>(&cs[kk][4 * tx]);
      const float a[4] = {av.x, av.y, av.z, av.w};
      const float b[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
  }
}

// qc[i] of the search, float32 or (precision 'float16') float16.
__device__ __forceinline__ float QcAt(const PlaidSearchParams& p, int64_t i) {
  return p.qc_half ? __half2float(reinterpret_cast<const __half*>(p.qc)[i]) : p.qc[i];
}

__device__ __forceinline__ unsigned long long WarpMaxKey(unsigned long long v, int width) {
  for (int o = width / 2; o > 0; o /= 2) {
    const unsigned long long u = __shfl_xor_sync(0xffffffffu, v, o);
    v = u > v ? u : v;
  }
  return v;
}

}  // namespace
