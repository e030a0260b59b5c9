// maxsim_simt.cu: the correct any-d fallback (fp32 / fp16 / bf16), CUDA cores only, fp32 math.
// It is the reference the tensor-core kernels are tested against; it is not tuned for speed.
//
// LAUNCH CONTRACT (all three entry points: maxsim_simt_f32, maxsim_simt_f16, maxsim_simt_bf16)
//   block       = (128, 1, 1)
//   grid        = (num_docs, num_queries - query_tile_offset, 1)   [grid.y <= 65535: split the
//                 launch over queries with query_tile_offset if needed]
//   dynamic smem= 0
//   requires    : dim >= 1 (any), any lengths (0 allowed), 64-bit starts; tokens 2-byte aligned
//                 (4 for f32). No alignment beyond the element size.
//   semantics   : block (b, y) computes query q = query_tile_offset + y against document b and
//                 writes scores[q * num_docs + b]. Zero-length document -> -INFINITY; zero-length
//                 query -> 0. Deterministic: fixed reduction order, no atomics.
#include "maxsim_common.cuh"

namespace maxsim {

constexpr int kSimtThreads = 128;
constexpr int kSimtQT = 4;  // query tokens per pass

template <typename T>
__device__ __forceinline__ void simt_body(const MaxsimParams& p) {
  const int b = blockIdx.x;
  const int q = p.query_tile_offset + blockIdx.y;
  if (b >= p.num_docs || q >= p.num_queries) return;
  const int tid = threadIdx.x;
  const int64_t dim = p.dim;
  const int ld = p.doc_lengths[b];
  const int lq = p.query_lengths[q];
  const T* __restrict__ D = static_cast<const T*>(p.docs) + p.doc_starts[b] * dim;
  const T* __restrict__ Q = static_cast<const T*>(p.queries) + p.query_starts[q] * dim;
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
    const T* qrow[kSimtQT];
#pragma unroll
    for (int t = 0; t < kSimtQT; ++t) qrow[t] = Q + (int64_t)min(i0 + t, lq - 1) * dim;
    for (int j = tid; j < ld; j += kSimtThreads) {
      const T* drow = D + (int64_t)j * dim;
      float acc[kSimtQT];
#pragma unroll
      for (int t = 0; t < kSimtQT; ++t) acc[t] = 0.f;
      for (int64_t k = 0; k < dim; ++k) {
        const float x = to_f32(drow[k]);
#pragma unroll
        for (int t = 0; t < kSimtQT; ++t) acc[t] = fmaf(to_f32(qrow[t][k]), x, acc[t]);
      }
#pragma unroll
      for (int t = 0; t < kSimtQT; ++t) m[t] = fmaxf(m[t], acc[t]);
    }
    simt_block_rows<kSimtQT, kSimtThreads>(m, red, i0, lq, total, [](int) { return 1.f; });
  }
  if (tid == 0) *out = total;
}

}  // namespace maxsim

extern "C" __global__ void __launch_bounds__(128) maxsim_simt_f32(const MaxsimParams p) {
  maxsim::simt_body<float>(p);
}
extern "C" __global__ void __launch_bounds__(128) maxsim_simt_f16(const MaxsimParams p) {
  maxsim::simt_body<__half>(p);
}
extern "C" __global__ void __launch_bounds__(128) maxsim_simt_bf16(const MaxsimParams p) {
  maxsim::simt_body<__nv_bfloat16>(p);
}
