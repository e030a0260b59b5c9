// The SIMT MaxSim body (CUDA cores only, any dim, one CTA per (document, query)): the reference the
// tensor-core kernels are tested against, for every element type. E is a storage type (float,
// __half, __nv_bfloat16: fp32 fma dots) or an 8-bit policy (S8: exact int32 dots, E4M3: software
// decode and fp32 fma), whose tokens carry scales: the document token's goes in before the max, the
// query token's after it. Launch contracts: maxsim_simt.cu and maxsim_int8.cu.
#pragma once
#include "maxsim_common.cuh"

namespace maxsim {

constexpr int kSimtThreads = 128;
constexpr int kSimtQT = 4;  // query tokens per pass

template <class E>
__device__ __forceinline__ void simt_body(const MaxsimParams& p) {
  constexpr bool SCALED = std::is_same_v<E, S8> || std::is_same_v<E, E4M3>;
  using Elem = std::conditional_t<SCALED, uint8_t, E>;
  const int b = blockIdx.x;
  const int q = p.query_tile_offset + blockIdx.y;
  if (b >= p.num_docs || q >= p.num_queries) return;
  const int tid = threadIdx.x;
  const int64_t dim = p.dim;
  const int ld = p.doc_lengths[b];
  const int lq = p.query_lengths[q];
  const int64_t dstart = p.doc_starts[b], qstart = p.query_starts[q];
  const Elem* __restrict__ D = static_cast<const Elem*>(p.docs) + dstart * dim;
  const Elem* __restrict__ Q = static_cast<const Elem*>(p.queries) + qstart * dim;
  float* out = p.scores + (int64_t)q * p.num_docs + b;
  if (ld <= 0) {
    if (tid == 0) *out = -INFINITY;
    return;
  }
  __shared__ float red[kSimtThreads / 32][kSimtQT];
  float total = 0.f;  // meaningful in thread 0 only
  for (int i0 = 0; i0 < lq; i0 += kSimtQT) {
    float m[kSimtQT];
#pragma unroll
    for (int t = 0; t < kSimtQT; ++t) m[t] = -INFINITY;
    // rows of the query tile beyond lq are clamped to a valid row; their max is discarded below
    const Elem* qrow[kSimtQT];
#pragma unroll
    for (int t = 0; t < kSimtQT; ++t) qrow[t] = Q + (int64_t)min(i0 + t, lq - 1) * dim;
    for (int j = tid; j < ld; j += kSimtThreads) {
      const Elem* drow = D + (int64_t)j * dim;
      // dot[t] = <query row t, document row>, fp32 (int8: exact in int32, then rounded)
      float dot[kSimtQT];
      if constexpr (std::is_same_v<E, S8>) {
        int acc[kSimtQT];
#pragma unroll
        for (int t = 0; t < kSimtQT; ++t) acc[t] = 0;
        for (int64_t k = 0; k < dim; ++k) {
          const int x = static_cast<int8_t>(drow[k]);
#pragma unroll
          for (int t = 0; t < kSimtQT; ++t) acc[t] += int(static_cast<int8_t>(qrow[t][k])) * x;
        }
#pragma unroll
        for (int t = 0; t < kSimtQT; ++t) dot[t] = __int2float_rn(acc[t]);
      } else {
        // one element as fp32: e4m3 decoded in software, the float types converted
        auto f32 = [](Elem v) {
          if constexpr (std::is_same_v<E, E4M3>) return e4m3_to_f32(v);
          else return to_f32(v);
        };
#pragma unroll
        for (int t = 0; t < kSimtQT; ++t) dot[t] = 0.f;
        for (int64_t k = 0; k < dim; ++k) {
          const float x = f32(drow[k]);
#pragma unroll
          for (int t = 0; t < kSimtQT; ++t) dot[t] = fmaf(f32(qrow[t][k]), x, dot[t]);
        }
      }
      if constexpr (SCALED) {
        const float sd = p.doc_scales[dstart + j];
#pragma unroll
        for (int t = 0; t < kSimtQT; ++t) m[t] = fmaxf(m[t], dot[t] * sd);
      } else {
#pragma unroll
        for (int t = 0; t < kSimtQT; ++t) m[t] = fmaxf(m[t], dot[t]);
      }
    }
    // 8-bit: the query token's scale applies after the max
    if constexpr (SCALED)
      simt_block_rows<kSimtQT, kSimtThreads>(m, red, i0, lq, total,
                                             [&](int row) { return p.query_scales[qstart + row]; });
    else
      simt_block_rows<kSimtQT, kSimtThreads>(m, red, i0, lq, total, [](int) { return 1.f; });
  }
  if (tid == 0) *out = total;
}

}  // namespace maxsim
