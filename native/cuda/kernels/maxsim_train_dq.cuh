// maxsim_train_dq.cuh: the backward pass: its shared gather helpers and dQ.
// Included by maxsim_train.cu only, after its shared helpers (namespace maxsim_train, kThreads,
// load_f32, store_am / load_am, ...); the kernels' extern "C" entry points stay in maxsim_train.cu.
#pragma once

namespace maxsim_train {

// ---- the backward pass --------------------------------------------------------------------------
//
// Both gradients are gathers of token rows weighted by score gradients, accumulated in fp64 in a
// fixed order and rounded once. One warp owns one output row and walks its sources in order, 32 at a
// time (one source's metadata per lane: score gradient, argmax, row), several rows in flight per lane
// (the loads of a group are issued before its adds). Per element the arithmetic is fixed (acc = acc +
// g * x, separately rounded, sources in order, one rounding to fp32); only the lane that computes a
// column depends on the path, so both paths give the same bits:
//  - fast path (dim % 4 == 0): lane l holds the 4 consecutive columns k0 + 4 l + m (m < 4) of a
//    128-wide chunk and reads them with ONE 8-byte (fp16 / bf16) or 16-byte (fp32) load per row: row
//    bases are row * dim elements of 16-byte aligned buffers, so the loads (and the float4 stores)
//    are aligned. The batch's (row pointer, weight) pairs are staged in shared memory (one broadcast
//    load each instead of four 32-bit shuffles per source), and the next batch's metadata is in
//    flight while a batch is summed (under contention a row's sources are one long serial walk).
//  - fallback (other dims): the scalar code, lane l holds columns k0 + l + 32 m (m < kVec).
// The gather kernels are bounded to 64 registers (32 warps per SM; the fast path needs about 64, the
// fallback fits with kScalarUnroll = 2).

constexpr int kVec = 4;
constexpr int kChunk = 32 * kVec;  // columns per pass over the sources
constexpr int kScalarUnroll = 2;   // fallback rows in flight per lane (divides 32); more would spill at 64
constexpr int kDqWarps = 8;        // query tokens per dQ block
constexpr int kScanThreads = 1024;
constexpr int kScanTile = 4 * kScanThreads;  // counts per scan block (4 consecutive per thread)
static_assert(kChunk == MAXSIM_TRAIN_PARTIAL_COLS && kScanTile == MAXSIM_TRAIN_SCAN_TILE,
              "maxsim_train_params.h states the dD passes' column slice and scan tile: keep them equal");

// Fallback: adds the sources held by lanes [0, n) (n uniform, <= 32), in lane order: off = element
// offset of the source row (-1: skip), g = its weight. Rows have element type T; acc[m] is column
// k0 + lane + 32 m (32-bit: k < dim + kChunk).
template <typename T>
__device__ __forceinline__ void accumulate_sources(const T* __restrict__ base, long long off, double g, int n,
                                                   int k0, int dim, int lane, double (&acc)[kVec]) {
#pragma unroll 1
  for (int c = 0; c < n; c += kScalarUnroll) {  // lanes in [n, 32) hold off = -1: a partial group is safe
    long long o[kScalarUnroll];
    double w[kScalarUnroll];
    float x[kScalarUnroll][kVec];
#pragma unroll
    for (int u = 0; u < kScalarUnroll; ++u) {
      o[u] = __shfl_sync(kFull, off, c + u);
      w[u] = __shfl_sync(kFull, g, c + u);
#pragma unroll
      for (int m = 0; m < kVec; ++m) {
        const int k = k0 + lane + 32 * m;
        x[u][m] = (o[u] >= 0 && k < dim) ? to_f32(base[o[u] + k]) : 0.f;
      }
    }
#pragma unroll
    for (int u = 0; u < kScalarUnroll; ++u) {
      if (o[u] >= 0) {  // uniform over the warp
#pragma unroll
        for (int m = 0; m < kVec; ++m) acc[m] = __dadd_rn(acc[m], __dmul_rn(w[u], static_cast<double>(x[u][m])));
      }
    }
  }
}

// A staged source of the fast path: the start of its row and its weight.
struct __align__(16) Src {
  const void* row;
  double g;
};

// 4 consecutive elements of a row with one aligned load (at(m) / at64(m): element m as fp32 / fp64,
// exact). kRows:
// rows in flight per lane (64 bytes of loads either way; 8 float4 rows would not fit in 64 registers).
template <typename T> struct Vec4;
template <> struct Vec4<float> {
  using Raw = float4;
  static constexpr int kRows = 4;
  static __device__ __forceinline__ Raw zero() { return make_float4(0.f, 0.f, 0.f, 0.f); }
  static __device__ __forceinline__ Raw load(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
  static __device__ __forceinline__ float at(const Raw& r, int m) {
    return m == 0 ? r.x : m == 1 ? r.y : m == 2 ? r.z : r.w;
  }
  static __device__ __forceinline__ double at64(const Raw& r, int m) { return static_cast<double>(at(r, m)); }
};
template <> struct Vec4<__half> {
  using Raw = uint2;  // little endian: element m is the 16 bits at 16 * (m & 1) of word m >> 1
  static constexpr int kRows = 8;
  static __device__ __forceinline__ Raw zero() { return make_uint2(0u, 0u); }
  static __device__ __forceinline__ Raw load(const __half* p) { return __ldg(reinterpret_cast<const uint2*>(p)); }
  static __device__ __forceinline__ float at(const Raw& r, int m) {
    const uint32_t w = m < 2 ? r.x : r.y;
    return __half2float(__ushort_as_half(static_cast<unsigned short>((m & 1) ? w >> 16 : w & 0xffffu)));
  }
  // Straight to fp64 (exact, like the float in between): one conversion instead of two.
  static __device__ __forceinline__ double at64(const Raw& r, int m) {
    const uint32_t w = m < 2 ? r.x : r.y;
    const unsigned short h = static_cast<unsigned short>((m & 1) ? w >> 16 : w & 0xffffu);
    double x;
    asm("cvt.f64.f16 %0, %1;" : "=d"(x) : "h"(h));
    return x;
  }
};
template <> struct Vec4<__nv_bfloat16> {
  using Raw = uint2;
  static constexpr int kRows = 8;
  static __device__ __forceinline__ Raw zero() { return make_uint2(0u, 0u); }
  static __device__ __forceinline__ Raw load(const __nv_bfloat16* p) {
    return __ldg(reinterpret_cast<const uint2*>(p));
  }
  static __device__ __forceinline__ float at(const Raw& r, int m) {
    const uint32_t w = m < 2 ? r.x : r.y;
    return __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>((m & 1) ? w >> 16 : w & 0xffffu)));
  }
  static __device__ __forceinline__ double at64(const Raw& r, int m) { return static_cast<double>(at(r, m)); }
};

// The lane's 4 fp64 sums, each rounded to nearest float, as one 16-byte store (dst 16-byte aligned).
__device__ __forceinline__ void store_rounded4(float* dst, const double (&acc)[kVec]) {
  *reinterpret_cast<float4*>(dst) = make_float4(__double2float_rn(acc[0]), __double2float_rn(acc[1]),
                                                __double2float_rn(acc[2]), __double2float_rn(acc[3]));
}

// Fast path: adds the staged sources src[first, first + kRows) or, when kTail, src[first, n) (n
// uniform), in order, to the lane's columns col + m. active = col < dim (then all 4 are: dim % 4 ==
// 0); inactive lanes add zeros and are never stored.
template <typename T, bool kTail>
__device__ __forceinline__ void accumulate_rows(const Src* src, int first, int n, int col, bool active,
                                                double (&acc)[kVec]) {
  constexpr int kRows = Vec4<T>::kRows;
  typename Vec4<T>::Raw x[kRows];
#pragma unroll
  for (int u = 0; u < kRows; ++u) {
    x[u] = Vec4<T>::zero();
    if (active && (!kTail || first + u < n)) x[u] = Vec4<T>::load(static_cast<const T*>(src[first + u].row) + col);
  }
#pragma unroll
  for (int u = 0; u < kRows; ++u) {
    if (!kTail || first + u < n) {  // uniform over the warp
      const double w = src[first + u].g;
#pragma unroll
      for (int m = 0; m < kVec; ++m) acc[m] = __dadd_rn(acc[m], __dmul_rn(w, Vec4<T>::at64(x[u], m)));
    }
  }
}

// Adds the staged sources src[0, n) in order: whole groups of kRows without per-row tests, then the
// rest (the same operations in the same order either way).
template <typename T>
__device__ __forceinline__ void accumulate_vec(const Src* src, int n, int col, bool active, double (&acc)[kVec]) {
  constexpr int kRows = Vec4<T>::kRows;
  int c = 0;
#pragma unroll 1
  for (; c + kRows <= n; c += kRows) accumulate_rows<T, false>(src, c, n, col, active, acc);
  if (c < n) accumulate_rows<T, true>(src, c, n, col, active, acc);
}

// dQ[i, s] = sum over documents j ascending of g[i, j] * D[j, argmax(i, j, s)] (pairs with g = 0, empty
// documents and -1 slots skipped): the same terms in the same order as the CPU engine.
// One warp per query token; a block holds kDqWarps consecutive tokens of one query, so the argmax
// entries the block reads for one document are adjacent.
template <typename T>
__device__ __forceinline__ void dq_scalar(const MaxsimTrainParams& P) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t dim = P.dim;
  const T* __restrict__ docs = static_cast<const T*>(P.docs);
  const int64_t groups = (P.stride + kDqWarps - 1) / kDqWarps;
  const int64_t units = static_cast<int64_t>(P.num_queries) * groups;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t i = u / groups;
    const int64_t s = (u - i * groups) * kDqWarps + warp;
    if (s >= P.query_lengths[i]) continue;  // warp-uniform; this kernel has no block barrier
    const int64_t q_row = P.query_starts[i] + s;
    const int64_t j_begin = P.pairs == 0 ? 0 : i;
    const int64_t j_end = P.pairs == 0 ? P.num_docs : i + 1;
    for (int64_t k0 = 0; k0 < dim; k0 += kChunk) {
      double acc[kVec];
#pragma unroll
      for (int m = 0; m < kVec; ++m) acc[m] = 0.0;
      for (int64_t j0 = j_begin; j0 < j_end; j0 += 32) {
        const int64_t j = j0 + lane;
        double g = 0.0;
        long long off = -1;
        if (j < j_end) {
          const int64_t p = P.pairs == 0 ? i * P.num_docs + j : i;
          g = P.grad_scores[p];
          const int32_t t = load_am(P, p * P.stride + s);
          if (g != 0.0 && t >= 0 && t < P.doc_lengths[j]) off = (P.doc_starts[j] + t) * dim;
        }
        accumulate_sources<T>(docs, off, g, static_cast<int>(j_end - j0 < 32 ? j_end - j0 : 32), k0, dim, lane, acc);
      }
#pragma unroll
      for (int m = 0; m < kVec; ++m) {
        const int64_t k = k0 + lane + 32 * m;
        if (k < dim) P.dq[q_row * dim + k] = __double2float_rn(acc[m]);
      }
    }
  }
}

// The dQ metadata of document j for query token (i, s), all four loads issued together (no chain).
struct DqMeta {
  double g;
  int64_t start;  // the document's first row
  int32_t t, ld;  // argmax, document length
};
__device__ __forceinline__ DqMeta dq_meta(const MaxsimTrainParams& P, int64_t i, int64_t s, int j, int j_end) {
  DqMeta m{0.0, 0, -1, 0};
  if (j < j_end) {
    const int64_t p = P.pairs == 0 ? i * P.num_docs + j : i;
    m.g = P.grad_scores[p];
    m.t = load_am(P, p * P.stride + s);
    m.ld = P.doc_lengths[j];
    m.start = P.doc_starts[j];
  }
  return m;
}

// Fast path of dQ: the same sources (ballot-compacted in ascending j: the skipped ones added nothing).
template <typename T>
__device__ __forceinline__ void dq_vec(const MaxsimTrainParams& P) {
  __shared__ Src staged[kDqWarps][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const unsigned below = (1u << lane) - 1u;
  const int dim = P.dim;
  const T* docs = static_cast<const T*>(P.docs);
  Src* st = staged[warp];
  const int64_t groups = (P.stride + kDqWarps - 1) / kDqWarps;
  const int64_t units = static_cast<int64_t>(P.num_queries) * groups;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t i = u / groups;
    const int64_t s = (u - i * groups) * kDqWarps + warp;
    if (s >= P.query_lengths[i]) continue;  // warp-uniform; this kernel has no block barrier
    const int64_t q_row = P.query_starts[i] + s;
    const int j_begin = P.pairs == 0 ? 0 : static_cast<int>(i);  // documents: int32
    const int j_end = P.pairs == 0 ? P.num_docs : static_cast<int>(i) + 1;
    for (int k0 = 0; k0 < dim; k0 += kChunk) {
      const int col = k0 + 4 * lane;
      const bool active = col < dim;
      double acc[kVec];
#pragma unroll
      for (int m = 0; m < kVec; ++m) acc[m] = 0.0;
      DqMeta m = dq_meta(P, i, s, j_begin + lane, j_end);
      for (int j0 = j_begin; j0 < j_end; j0 += 32) {
        const bool use = m.g != 0.0 && m.t >= 0 && m.t < m.ld;
        const unsigned mask = __ballot_sync(kFull, use);
        __syncwarp();  // the previous batch is summed before its slots are overwritten
        if (use) st[__popc(mask & below)] = Src{docs + (m.start + m.t) * dim, m.g};
        __syncwarp();
        if (j0 + 32 < j_end) m = dq_meta(P, i, s, j0 + 32 + lane, j_end);  // in flight during the sum
        accumulate_vec<T>(st, __popc(mask), col, active, acc);
      }
      if (active) {
        store_rounded4(P.dq + q_row * dim + col, acc);
      }
    }
  }
}

template <typename T>
__device__ __forceinline__ void dq_body(const MaxsimTrainParams& P) {
  if ((P.dim & 3) == 0) {
    dq_vec<T>(P);
  } else {
    dq_scalar<T>(P);
  }
}

}  // namespace maxsim_train
