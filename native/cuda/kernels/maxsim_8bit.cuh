// maxsim_8bit.cuh: the 8-bit MaxSim family shared by maxsim_int8.cu (int8 x int8, exact int32
// dots) and maxsim_fp8.cu (e4m3 x e4m3, fp32 accumulation), and the device quantizer. The math, the
// structure and the launch contract are described in maxsim_int8.cu; the element type is a policy
// (S8 / E4M3 in maxsim_policy.cuh): how fragments multiply, what the accumulator starts at, how it
// becomes fp32. The mma.sync body is the one of every element type (maxsim_mma.cuh), and so is the
// warp-specialized wgmma body (maxsim_wgmma.cuh); here are the quantizer and the family's entry points.
#pragma once
#include <cuda_fp8.h>

#include <climits>

#include "maxsim_epilogue.cuh"
#include "maxsim_registry.h"
#include "maxsim_mma.cuh"
#include "maxsim_simt.cuh"
#include "maxsim_sm90.cuh"
#include "maxsim_wgmma.cuh"

namespace maxsim {

// ---- device quantizer: one warp per token ----

// One warp per work item, grid-stride: this thread's lane, its warp's first item, the stride.
struct WarpGrid {
  int lane;
  int64_t first, step;
  __device__ __forceinline__ WarpGrid()
      : lane(threadIdx.x & 31),
        first((int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)),
        step((int64_t)gridDim.x * (blockDim.x >> 5)) {}
};

// The scale of a token (or document) whose largest |x| is m > 0: int8 as the host,
// Math.fround(m / 127); fp8 maps m to 448, the largest finite e4m3. Both are monotone in m.
template <class E>
__device__ __forceinline__ float scale_of(float m) {
  if constexpr (E::kFp8) return __fdiv_rn(m, 448.f);
  else return (float)((double)m / 127.0);
}

// Writes token x quantized with `scale` (> 0) to y, lanes over the dimension. fp8: x / scale in fp32,
// then the round-to-nearest-even saturating conversion; int8: rint(x / scale) in double (as the host)
// clamped to [-127, 127]; NaN -> 0.
template <class E, typename T>
__device__ __forceinline__ void quantize_token(const T* x, uint8_t* y, int dim, int lane, float scale) {
  if constexpr (E::kFp8) {
    for (int k = lane; k < dim; k += 32) {
      const float v = __fdiv_rn(to_f32(x[k]), scale);
      y[k] = v == v ? (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3) : 0;
    }
  } else {
    const double ds = (double)scale;
    for (int k = lane; k < dim; k += 32) {
      const double v = (double)to_f32(x[k]) / ds;
      int qv = 0;
      if (v == v) qv = (int)fmin(127.0, fmax(-127.0, rint(v)));
      y[k] = (uint8_t)(int8_t)qv;
    }
  }
}

template <class E, typename T>
__device__ __forceinline__ void quantize8_body(const QuantizeParams& p) {
  const WarpGrid g;
  const int lane = g.lane;
  const int64_t warps = g.step, w0 = g.first;
  const int dim = p.dim;
  const T* __restrict__ src = static_cast<const T*>(p.src);
  // the item table is copied unchanged (the int8 set has the same packing as the source)
  for (int64_t i = w0 * 32 + lane; i < p.count; i += warps * 32) {
    p.dst_starts[i] = p.src_starts[i];
    p.dst_lengths[i] = p.src_lengths[i];
  }
  for (int64_t t = w0; t < p.tokens; t += warps) {
    const T* x = src + t * (int64_t)dim;
    float m = 0.f;
    for (int k = lane; k < dim; k += 32) {
      const float a = fabsf(to_f32(x[k]));
      m = a > m ? a : m;  // NaN never wins (as the host's `a > m`)
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float y = __shfl_xor_sync(0xffffffffu, m, o);
      m = y > m ? y : m;
    }
    uint8_t* y = reinterpret_cast<uint8_t*>(p.dst) + t * (int64_t)dim;
    if (isinf(m)) {
      if (lane == 0) atomicMin(p.bad_token, (unsigned long long)t);
      m = 0.f;  // the result is rejected; write zeros
    }
    if (m == 0.f) {
      for (int k = lane; k < dim; k += 32) y[k] = 0;
      if (lane == 0) p.dst_scales[t] = 0.f;
      continue;
    }
    const float scale = scale_of<E>(m);
    quantize_token<E, T>(x, y, dim, lane, scale);
    if (lane == 0) p.dst_scales[t] = scale;
  }
}

// Document scales: two launches after quantize8_body. First one warp per item of the (packed) set:
// the item's scale is the largest of its tokens' scales (scale_of is monotone, so it is the scale of
// the item's largest |x|), and every token with another scale is marked for requantization by storing
// the item's scale negated (scales are otherwise >= 0). Then one warp per token, over all tokens in
// parallel however long an item is: a marked token is quantized again with its item's scale.
__device__ __forceinline__ void mark_document_scales_body(const QuantizeParams& p) {
  const WarpGrid g;
  const int lane = g.lane;
  for (int64_t i = g.first; i < p.count; i += g.step) {
    float* sc = p.dst_scales + p.dst_starts[i];
    const int len = p.dst_lengths[i];
    float sd = 0.f;
    for (int t = lane; t < len; t += 32) sd = fmaxf(sd, sc[t]);
    sd = warp_max(sd);
    for (int t = lane; t < len; t += 32)
      if (sc[t] != sd) sc[t] = -sd;
  }
}

template <class E, typename T>
__device__ __forceinline__ void requantize_documents_body(const QuantizeParams& p) {
  const WarpGrid g;
  const int lane = g.lane;
  const int dim = p.dim;
  const T* __restrict__ src = static_cast<const T*>(p.src);
  for (int64_t t = g.first; t < p.tokens; t += g.step) {
    const float s = p.dst_scales[t];
    if (!(s < 0.f)) continue;  // warp-uniform
    quantize_token<E, T>(src + t * (int64_t)dim, reinterpret_cast<uint8_t*>(p.dst) + t * (int64_t)dim, dim, lane, -s);
    __syncwarp();  // every lane read the mark before lane 0 replaces it
    if (lane == 0) p.dst_scales[t] = -s;
  }
}


// The quantizer entry points of a family (PREFIX maxsim_int8 or maxsim_fp8, element policy E):
// PREFIX_quantize_{f32,f16,bf16} (per token), then for document scales PREFIX_quantize_mark_documents
// and PREFIX_quantize_documents_{f32,f16,bf16}. Block 256 (8 warps), any grid.
#define MAXSIM_8BIT_QUANTIZE_ENTRIES(PREFIX, E)                                                          \
  MAXSIM_8BIT_QUANTIZE_SOURCE(PREFIX, E, f32, float)                                                     \
  MAXSIM_8BIT_QUANTIZE_SOURCE(PREFIX, E, f16, __half)                                                    \
  MAXSIM_8BIT_QUANTIZE_SOURCE(PREFIX, E, bf16, __nv_bfloat16)                                            \
  extern "C" __global__ void __launch_bounds__(256) PREFIX##_quantize_mark_documents(const QuantizeParams p) { \
    maxsim::mark_document_scales_body(p);                                                                 \
  }
#define MAXSIM_8BIT_QUANTIZE_SOURCE(PREFIX, E, SFX, T)                                                  \
  extern "C" __global__ void __launch_bounds__(256) PREFIX##_quantize_##SFX(const QuantizeParams p) {     \
    maxsim::quantize8_body<maxsim::E, T>(p);                                                              \
  }                                                                                                        \
  extern "C" __global__ void __launch_bounds__(256) PREFIX##_quantize_documents_##SFX(const QuantizeParams p) { \
    maxsim::requantize_documents_body<maxsim::E, T>(p);                                                   \
  }


// The wgmma kernels (sm_90a) are the one body of maxsim_wgmma.cuh with the S8 / E4M3 policies: one
// 128-byte K atom per token plus the tile's TN document scales per stage, wgmma.m64nTNk32, the
// column's scale applied in the fold and the query row's after the quad max.

}  // namespace maxsim

// ---- the 8-bit family's kernels: one table for int8 (maxsim_int8.cu) and fp8 (maxsim_fp8.cu) ----
// MAXSIM_8BIT_KERNELS(PREFIX, E, KS_CTAS) defines PREFIX_mma_<row> (sm_80+) from the rows of
// MAXSIM_8BIT_MMA_VARIANTS (KS_CTAS: CTAs per SM of the K-split variant), PREFIX_simt, the quantizers,
// and PREFIX_wgmma_<row> (sm_90a) from MAXSIM_8BIT_WGMMA_VARIANTS with their TMA twins
// PREFIX_wgmma_tma_* (the documents' tensor map the second parameter; variants.json "tmaBox":
// [128, TN]) and document-scale twins PREFIX_wgmma_tma_ds_* (DSCALE above) where the row says so.
// The numbers and the smem formulas: maxsim_registry.h.
#define MAXSIM_8BIT_MMA_ENTRY(NAME, E, G, NGRP, TN, S, KD, KSPLIT, CTAS)                          \
  extern "C" __global__ void __launch_bounds__(MAXSIM_MMA_BLOCK(G, NGRP), CTAS) NAME(const MaxsimParams p) { \
    maxsim::mma_body<maxsim::E, G, NGRP, TN, S, KD, KSPLIT>(p);                                  \
  }
#define MAXSIM_8BIT_WGMMA_ENTRY(NAME, E, NCONS, MB, TN, S)                                        \
  extern "C" __global__ void __launch_bounds__(MAXSIM_WGMMA_BLOCK(NCONS), 1) NAME(const MaxsimParams p) { \
    maxsim::wgmma_body<maxsim::E, NCONS, MB, TN, S, false>(p);                                          \
  }
#define MAXSIM_8BIT_WGMMA_TMA_ENTRY(NAME, E, NCONS, MB, TN, S, DSCALE)                            \
  extern "C" __global__ void __launch_bounds__(MAXSIM_WGMMA_BLOCK(NCONS), 1)                              \
      NAME(const MaxsimParams p, const __grid_constant__ maxsim::TmaMap docs_map) {               \
    maxsim::wgmma_body<maxsim::E, NCONS, MB, TN, S, false, true, DSCALE>(p, &docs_map);                 \
  }
#define MAXSIM_8BIT_MMA_ROW(PREFIX, E, SFX, G, NGRP, TN, S, KD, KSPLIT, CTAS) \
  MAXSIM_8BIT_MMA_ENTRY(PREFIX##_mma_##SFX, E, G, NGRP, TN, S, KD, KSPLIT, CTAS)
#define MAXSIM_8BIT_WGMMA_ROW(PREFIX, E, SFX, NCONS, MB, TN, S, TMA, DS) \
  MAXSIM_8BIT_WGMMA_ENTRY(PREFIX##_wgmma_##SFX, E, NCONS, MB, TN, S)
#define MAXSIM_8BIT_WGMMA_TMA_ROW(PREFIX, E, SFX, NCONS, MB, TN, S, TMA, DS) \
  MAXSIM_IF_##TMA(MAXSIM_8BIT_WGMMA_TMA_ENTRY(PREFIX##_wgmma_tma_##SFX, E, NCONS, MB, TN, S, false))
#define MAXSIM_8BIT_WGMMA_DS_ROW(PREFIX, E, SFX, NCONS, MB, TN, S, TMA, DS) \
  MAXSIM_IF_##DS(MAXSIM_8BIT_WGMMA_TMA_ENTRY(PREFIX##_wgmma_tma_ds_##SFX, E, NCONS, MB, TN, S, true))
#define MAXSIM_8BIT_KERNELS(PREFIX, E, KS_CTAS)                                                  \
  MAXSIM_8BIT_MMA_VARIANTS(MAXSIM_8BIT_MMA_ROW, PREFIX, E, KS_CTAS)                              \
  extern "C" __global__ void __launch_bounds__(MAXSIM_SIMT_BLOCK) PREFIX##_simt(const MaxsimParams p) { \
    maxsim::simt_body<maxsim::E>(p);                                                             \
  }                                                                                              \
  MAXSIM_8BIT_QUANTIZE_ENTRIES(PREFIX, E)                                                        \
  MAXSIM_8BIT_WGMMA_VARIANTS(MAXSIM_8BIT_WGMMA_ROW, PREFIX, E)                                   \
  MAXSIM_8BIT_WGMMA_VARIANTS(MAXSIM_8BIT_WGMMA_TMA_ROW, PREFIX, E)                               \
  MAXSIM_8BIT_WGMMA_VARIANTS(MAXSIM_8BIT_WGMMA_DS_ROW, PREFIX, E)
