// maxsim_train.cu: MaxSim training on the GPU, correctness first (CUDA cores, no tensor cores).
//
// Arithmetic mirrors the CPU engine (native/cpu/train.cc) operation for operation, so results are
// deterministic and normally bitwise equal to it: every dot product is summed over k in ascending
// order with separately rounded fp32 multiplies and adds (__fmul_rn / __fadd_rn: no FMA contraction),
// the argmax is the lowest document token that attains the maximum (strict > in ascending order),
// scores sum the per-token maxima in fp64 in token order, and the gradients accumulate in fp64 in a
// fixed order (dQ: documents ascending; dD: sources in ascending (query, query token) order) before one
// rounding to fp32. No float atomics except in the opt-in atomic dD path.
//
// LAUNCH CONTRACTS (MaxsimTrainParams by value, dynamic smem 0 everywhere; every index is 64-bit):
//   maxsim_train_fwd_{f32,f16,bf16}  (element type of the documents; queries: params.query_dtype)
//       block (128,1,1), grid (min(num_pairs, 2^20),1,1): blocks stride over pairs. Per pair: warps
//       stride over query tokens, lanes over document tokens; writes argmax[p*stride + s] (-1 past the
//       query length and for empty documents), best[] (scratch) and scores[p] (-inf: empty document).
//   maxsim_train_dq        block (128,1,1), grid (min(num_queries, 2^20),1,1): blocks stride over
//       queries, threads over k; writes every real query token row of dq (packed).
//   maxsim_train_dd_count  block (128,1,1), grid (min(ceil(num_docs/4), 2^20),1,1): one warp owns a
//       document and adds its sources to counts[] (zeroed first).
//   maxsim_train_dd_scan   block (1024,1,1), grid (1,1,1): offsets = exclusive scan of counts
//       (offsets[doc_tokens] = total), cursor = offsets.
//   maxsim_train_dd_place  as dd_count: the owner warp writes each source at cursor[row] in order.
//   maxsim_train_dd_gather block (128,1,1), grid (min(doc_tokens, 2^20),1,1): blocks stride over
//       document token rows, threads over k; writes every row of dd (zero without sources).
//   maxsim_train_dd_atomic block (128,1,1), grid (min(ceil(num_pairs*stride/4), 2^20),1,1): one warp
//       per argmax slot, float atomicAdd into dd (zeroed first). NOT deterministic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "maxsim_train_params.h"

namespace maxsim_train {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kScanThreads = 1024;
constexpr unsigned kFull = 0xffffffffu;

template <typename T> __device__ __forceinline__ float to_f32(T x);
template <> __device__ __forceinline__ float to_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_f32<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

// Element idx of a token buffer of run-time dtype, as fp32 (exact for every dtype).
__device__ __forceinline__ float load_f32(const void* base, int32_t dtype, int64_t idx) {
  if (dtype == kTrainF16) return __half2float(static_cast<const __half*>(base)[idx]);
  if (dtype == kTrainBF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[idx]);
  return static_cast<const float*>(base)[idx];
}

__device__ __forceinline__ int64_t query_of(const MaxsimTrainParams& P, int64_t p) {
  return P.pairs == 0 ? p / P.num_docs : p;
}
__device__ __forceinline__ int64_t doc_of(const MaxsimTrainParams& P, int64_t p) {
  return P.pairs == 0 ? p % P.num_docs : p;
}

// ---- forward with argmax ----------------------------------------------------------------------

template <typename T>
__device__ __forceinline__ void fwd_body(const MaxsimTrainParams& P) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t dim = P.dim;
  for (int64_t p = blockIdx.x; p < P.num_pairs; p += gridDim.x) {
    const int64_t i = query_of(P, p);
    const int64_t b = doc_of(P, p);
    const int lq = P.query_lengths[i];
    const int ld = P.doc_lengths[b];
    const int64_t q_first = P.query_starts[i];
    int32_t* am = P.argmax + p * P.stride;
    float* best = P.best + p * P.stride;
    for (int64_t s = static_cast<int64_t>(lq) + tid; s < P.stride; s += kThreads) am[s] = -1;
    if (ld <= 0) {  // uniform over the block: no barrier is skipped by part of it
      for (int64_t s = tid; s < lq; s += kThreads) am[s] = -1;
      if (tid == 0) P.scores[p] = -INFINITY;
      continue;
    }
    const T* D = static_cast<const T*>(P.docs) + P.doc_starts[b] * dim;
    for (int s = warp; s < lq; s += kWarps) {
      const int64_t q_off = (q_first + s) * dim;
      float bv = -INFINITY;
      int32_t bt = -1;  // -1 exactly when bv == -inf (bv only grows through a strict >)
      for (int t = lane; t < ld; t += 32) {
        const T* drow = D + static_cast<int64_t>(t) * dim;
        float acc = 0.f;
        for (int64_t k = 0; k < dim; ++k) {
          acc = __fadd_rn(acc, __fmul_rn(load_f32(P.queries, P.query_dtype, q_off + k), to_f32(drow[k])));
        }
        if (acc > bv) {  // ascending t per lane: the lane's lowest index wins its ties
          bv = acc;
          bt = t;
        }
      }
      // (value desc, index asc) is a total order on the lanes' candidates: every lane ends with the
      // global maximum at its lowest index, i.e. what one ascending strict-> scan finds.
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(kFull, bv, o);
        const int32_t ot = __shfl_xor_sync(kFull, bt, o);
        if (ov > bv || (ov == bv && ot < bt)) {
          bv = ov;
          bt = ot;
        }
      }
      if (lane == 0) {
        am[s] = bt;
        best[s] = bv;
      }
    }
    __syncthreads();  // best[0, lq) written by lane 0 of every warp, read by thread 0 below
    if (tid == 0) {
      double sum = 0.0;  // in token order, like the CPU engine
      for (int s = 0; s < lq; ++s) sum = __dadd_rn(sum, static_cast<double>(best[s]));
      P.scores[p] = __double2float_rn(sum);
    }
    __syncthreads();
  }
}

// ---- dQ: a gather over the documents of each query ---------------------------------------------

__device__ __forceinline__ void dq_body(const MaxsimTrainParams& P) {
  const int64_t dim = P.dim;
  for (int64_t i = blockIdx.x; i < P.num_queries; i += gridDim.x) {
    const int lq = P.query_lengths[i];
    const int64_t q_first = P.query_starts[i];
    const int64_t j_begin = P.pairs == 0 ? 0 : i;
    const int64_t j_end = P.pairs == 0 ? P.num_docs : i + 1;
    for (int s = 0; s < lq; ++s) {
      for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) {
        double a = 0.0;
        for (int64_t j = j_begin; j < j_end; ++j) {
          const int64_t p = P.pairs == 0 ? i * P.num_docs + j : i;
          const double g = P.grad_scores[p];
          const int32_t t = P.argmax[p * P.stride + s];
          if (g == 0.0 || t < 0 || t >= P.doc_lengths[j]) continue;
          const float x = load_f32(P.docs, P.doc_dtype, (P.doc_starts[j] + t) * dim + k);
          a = __dadd_rn(a, __dmul_rn(g, static_cast<double>(x)));
        }
        P.dq[(q_first + s) * dim + k] = __double2float_rn(a);
      }
    }
  }
}

// ---- dD, deterministic: CSR of sources per document token row ---------------------------------
//
// The sources of row (j, t) are the slots (p, s) with argmax[p * stride + s] == t, p a pair of
// document j with g[p] != 0. One warp owns document j and visits its pairs in ascending query order,
// query tokens in ascending order, 32 at a time (lane = s - s0). __match_any_sync groups the lanes
// with the same destination row; a lane's rank in its group is the number of lower lanes in it.
// In count mode the group's lowest lane adds the group size to counts[row]; in place mode every lane
// writes its source at cursor[row] + rank and the lowest lane advances cursor[row] by the group size.
// Rows of document j are touched by its owner warp only (items are packed, so rows are disjoint), so
// no atomics are needed and each row's segment is in ascending (query, token) order by construction:
// the same order as the CPU engine sums in.

template <bool kPlace>
__device__ __forceinline__ void walk_sources(const MaxsimTrainParams& P) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); j < P.num_docs; j += warps) {
    const int ld = P.doc_lengths[j];
    if (ld <= 0) continue;  // uniform over the warp
    const int64_t row0 = P.doc_starts[j];
    const int64_t i_begin = P.pairs == 0 ? 0 : j;
    const int64_t i_end = P.pairs == 0 ? P.num_queries : j + 1;
    for (int64_t i = i_begin; i < i_end; ++i) {
      const int64_t p = P.pairs == 0 ? i * P.num_docs + j : i;
      if (P.grad_scores[p] == 0.0) continue;  // uniform
      const int lq = P.query_lengths[i];
      for (int s0 = 0; s0 < lq; s0 += 32) {  // uniform trip count: all 32 lanes reach the match
        const int s = s0 + lane;
        const int32_t t = s < lq ? P.argmax[p * P.stride + s] : -1;
        const bool valid = t >= 0 && t < ld;
        const long long row = valid ? static_cast<long long>(row0 + t) : -1LL;
        const unsigned peers = __match_any_sync(kFull, row);
        const unsigned lower = peers & ((1u << lane) - 1u);
        const int rank = __popc(lower);
        const int n = __popc(peers);
        if (kPlace) {
          const int64_t base = valid ? P.cursor[row] : 0;
          __syncwarp();  // every lane has read cursor[row] before the group's leader moves it
          if (valid) {
            P.sources[base + rank] = p * P.stride + s;
            if (lower == 0) P.cursor[row] = base + n;
          }
        } else if (valid && lower == 0) {
          P.counts[row] += n;
        }
        __syncwarp();  // the updates are visible to the next round's reads (possibly other lanes)
      }
    }
  }
}

__device__ __forceinline__ void scan_body(const MaxsimTrainParams& P) {
  __shared__ int64_t buf[kScanThreads];
  const int tid = threadIdx.x;
  const int64_t n = P.doc_tokens;
  int64_t carry = 0;
  for (int64_t base = 0; base < n; base += kScanThreads) {
    const int64_t idx = base + tid;
    const int64_t v = idx < n ? P.counts[idx] : 0;
    buf[tid] = v;
    __syncthreads();
    for (int o = 1; o < kScanThreads; o <<= 1) {  // Hillis-Steele inclusive scan (integers: exact)
      const int64_t add = tid >= o ? buf[tid - o] : 0;
      __syncthreads();
      buf[tid] += add;
      __syncthreads();
    }
    const int64_t excl = carry + buf[tid] - v;
    if (idx < n) {
      P.offsets[idx] = excl;
      P.cursor[idx] = excl;
    }
    carry += buf[kScanThreads - 1];
    __syncthreads();  // everyone has read buf before the next chunk overwrites it
  }
  if (tid == 0) P.offsets[n] = carry;
}

__device__ __forceinline__ void gather_body(const MaxsimTrainParams& P) {
  const int64_t dim = P.dim;
  for (int64_t r = blockIdx.x; r < P.doc_tokens; r += gridDim.x) {
    const int64_t begin = P.offsets[r];
    const int64_t end = P.offsets[r + 1];
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) {
      double a = 0.0;
      for (int64_t e = begin; e < end; ++e) {  // ascending (query, query token): fixed order
        const int64_t slot = P.sources[e];
        const int64_t p = slot / P.stride;
        const int64_t s = slot - p * P.stride;
        const double g = P.grad_scores[p];
        const float x = load_f32(P.queries, P.query_dtype, (P.query_starts[query_of(P, p)] + s) * dim + k);
        a = __dadd_rn(a, __dmul_rn(g, static_cast<double>(x)));
      }
      P.dd[r * dim + k] = __double2float_rn(a);
    }
  }
}

// ---- dD, atomic scatter (not deterministic: float atomics in arrival order) ---------------------

__device__ __forceinline__ void atomic_body(const MaxsimTrainParams& P) {
  const int lane = threadIdx.x & 31;
  const int64_t dim = P.dim;
  const int64_t total = P.num_pairs * P.stride;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t slot = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); slot < total; slot += warps) {
    const int64_t p = slot / P.stride;
    const int64_t s = slot - p * P.stride;
    const int64_t i = query_of(P, p);
    const int64_t j = doc_of(P, p);
    if (s >= P.query_lengths[i]) continue;
    const double g = P.grad_scores[p];
    const int32_t t = P.argmax[slot];
    if (g == 0.0 || t < 0 || t >= P.doc_lengths[j]) continue;
    const int64_t q_off = (P.query_starts[i] + s) * dim;
    float* out = P.dd + (P.doc_starts[j] + t) * dim;
    for (int64_t k = lane; k < dim; k += 32) {
      const float x = load_f32(P.queries, P.query_dtype, q_off + k);
      atomicAdd(out + k, __double2float_rn(__dmul_rn(g, static_cast<double>(x))));
    }
  }
}

}  // namespace maxsim_train

extern "C" __global__ void __launch_bounds__(128) maxsim_train_fwd_f32(const MaxsimTrainParams p) {
  maxsim_train::fwd_body<float>(p);
}
extern "C" __global__ void __launch_bounds__(128) maxsim_train_fwd_f16(const MaxsimTrainParams p) {
  maxsim_train::fwd_body<__half>(p);
}
extern "C" __global__ void __launch_bounds__(128) maxsim_train_fwd_bf16(const MaxsimTrainParams p) {
  maxsim_train::fwd_body<__nv_bfloat16>(p);
}
extern "C" __global__ void __launch_bounds__(128) maxsim_train_dq(const MaxsimTrainParams p) {
  maxsim_train::dq_body(p);
}
extern "C" __global__ void __launch_bounds__(128) maxsim_train_dd_count(const MaxsimTrainParams p) {
  maxsim_train::walk_sources<false>(p);
}
extern "C" __global__ void __launch_bounds__(1024) maxsim_train_dd_scan(const MaxsimTrainParams p) {
  maxsim_train::scan_body(p);
}
extern "C" __global__ void __launch_bounds__(128) maxsim_train_dd_place(const MaxsimTrainParams p) {
  maxsim_train::walk_sources<true>(p);
}
extern "C" __global__ void __launch_bounds__(128) maxsim_train_dd_gather(const MaxsimTrainParams p) {
  maxsim_train::gather_body(p);
}
extern "C" __global__ void __launch_bounds__(128) maxsim_train_dd_atomic(const MaxsimTrainParams p) {
  maxsim_train::atomic_body(p);
}
