// maxsim_train.cu: MaxSim training on the GPU: a tensor-core argmax forward (fwd_mma_body) and
// CUDA-core kernels for everything else (and as the forward's fallback).
//
// The tensor-core forward (maxsim_train_fwd_mma_*) computes the dot products with mma.sync (fp32
// accumulate, its own rounding), so its scores agree with the CPU engine to fp32 rounding and its
// argmax may differ from the CPU's at near-ties only; it keeps the same tie rule (lowest index among
// equal maxima), the same -1 slots and the same fp64 token-order score sum, and is deterministic.
// Everywhere else the arithmetic mirrors the CPU engine (native/cpu/train.cc) operation for operation, so results are
// deterministic and normally bitwise equal to it: every dot product is summed over k in ascending
// order with separately rounded fp32 multiplies and adds (__fmul_rn / __fadd_rn: no FMA contraction),
// the argmax is the lowest document token that attains the maximum (strict > in ascending order),
// scores sum the per-token maxima in fp64 in token order, and the gradients accumulate in fp64 in a
// fixed order (dQ: documents ascending; dD: sources in ascending (query, query token) order) before one
// rounding to fp32. No float atomics except in the opt-in atomic dD path.
//
// LAUNCH CONTRACTS (MaxsimTrainParams by value, dynamic smem 0 except fwd_mma; every index is 64-bit):
//   maxsim_train_fwd_mma_{f16,bf16}  (queries and documents both of that type; dim % 8 == 0,
//       8 <= dim <= 128; sm_80+) block (128,1,1), grid (min(num_pairs, 2^20),1,1), dynamic smem
//       kMmaSmem = 52224 bytes (above the default 48 KiB: the limit must be raised). One CTA per pair
//       (blocks stride over pairs); same outputs as maxsim_train_fwd_* below. Token arrays 16-byte aligned.
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

#include "maxsim_common.cuh"
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

// ---- forward with argmax on tensor cores (mma.sync m16n8k16, fp16 / bf16, fp32 accumulate) -------
//
// One CTA (kMmaWarps warps) per pair, blocks striding over pairs. Each warp owns 32-row slices of the
// query (rows 32 * (pass * kMmaWarps + warp) ...) whose A fragments it keeps in registers; the CTA
// streams the document through an S-stage cp.async ring of TN-token tiles (zero-filled past the
// document and past dim), once per pass, all warps in lock step (trip counts depend on the pair only,
// so every thread reaches every __syncthreads). Per accumulator row element a thread keeps
// (max, argmax) over its own columns, visited in ascending document-token order with a strict >
// (its lowest index wins its ties); columns >= the document length are skipped (never selected).
// The quad (4 lanes of a row) then merges with "larger value, on equal values the lower index", a
// total order on the candidates, so every lane ends with the row's maximum at its lowest index.
// Rows past the query length are computed on zero A fragments and dropped. The slot maxima go to
// best[] and warp 0 sums them in fp64 in token order, the same operations as fwd_body's thread 0.

constexpr int kMmaWarps = 4;
constexpr int kMmaThreads = kMmaWarps * 32;
constexpr int kTN = 64;    // document tokens per tile
constexpr int kKD = 128;   // max dim
constexpr int kStages = 3;
constexpr int kRS = kKD + 8;  // smem row stride (elements): 16 B pad -> conflict-free ldmatrix
constexpr int kStage = kTN * kRS;
constexpr int kNKS = kKD / 16;
constexpr int kCPR = kKD / 8;  // 16-byte chunks per row
constexpr int kMmaSmem = kStages * kStage * 2;  // 52224 bytes (dynamic)
static_assert(kMmaSmem == 52224, "update the binding's dynamic smem for maxsim_train_fwd_mma_*");

template <typename T>
__device__ __forceinline__ void fwd_mma_body(const MaxsimTrainParams& P) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int dim = P.dim;
  if (dim <= 0 || dim > kKD || (dim & 7) != 0) return;  // contract: the binding never launches these
  const T* __restrict__ docs = static_cast<const T*>(P.docs);
  const T* __restrict__ queries = static_cast<const T*>(P.queries);
  const uint32_t stages_s = maxsim::smem_u32(smem_raw);
  const int nks_run = (dim + 15) >> 4;                       // k16 steps that carry data
  const int need = min(kCPR, nks_run * 2);                   // 16-byte chunks per row to fill

  // Passes over the document for pair p: 0 when the document or the query is empty.
  auto passes_of = [&](int64_t p, int& ld, int& lq) {
    ld = P.doc_lengths[doc_of(P, p)];
    lq = P.query_lengths[query_of(P, p)];
    if (ld <= 0 || lq <= 0) return 0;
    const int slices = (lq + 31) >> 5;
    return (slices + kMmaWarps - 1) / kMmaWarps;
  };

  // ---- producer: flat iterator over (pair, pass, tile) of this CTA, skipping pairs without tiles
  int64_t pp = blockIdx.x;
  int ppass = 0, ptile = 0, pnt = 0, pnp = 0, plen = 0;
  int64_t pstart = 0;
  auto pseek = [&]() {
    while (pp < P.num_pairs) {
      int lq;
      pnp = passes_of(pp, plen, lq);
      if (pnp > 0) break;
      pp += gridDim.x;
    }
    if (pp < P.num_pairs) {
      pstart = P.doc_starts[doc_of(P, pp)];
      pnt = (plen + kTN - 1) / kTN;
    }
  };
  pseek();
  auto issue = [&](int slot) {
    if (pp < P.num_pairs) {
      const uint32_t sbase = stages_s + slot * (kStage * 2);
      const int tok0 = ptile * kTN;
#pragma unroll
      for (int it = 0; it < (kTN * kCPR) / kMmaThreads; ++it) {
        const int idx = it * kMmaThreads + tid;
        const int r = idx / kCPR, c = idx % kCPR;
        if (c < need) {
          const int tok = tok0 + r;
          const int k = c * 8;
          const bool ok = (tok < plen) && (k < dim);
          const T* src = ok ? docs + (pstart + tok) * static_cast<int64_t>(dim) + k : docs;
          maxsim::cp_async16(sbase + (r * kRS + c * 8) * 2, src, ok ? 16 : 0);
        }
      }
      if (++ptile == pnt) {
        ptile = 0;
        if (++ppass == pnp) {
          ppass = 0;
          pp += gridDim.x;
          pseek();
        }
      }
    }
    maxsim::cp_async_commit();  // always one group per call (possibly empty): uniform wait counts
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s);
  int cstage = 0;

  for (int64_t p = blockIdx.x; p < P.num_pairs; p += gridDim.x) {
    int ld, lq;
    const int npass = passes_of(p, ld, lq);
    int32_t* am = P.argmax + p * P.stride;
    float* best = P.best + p * P.stride;
    const int lq_c = lq > 0 ? lq : 0;
    for (int64_t s = static_cast<int64_t>(lq_c) + tid; s < P.stride; s += kMmaThreads) am[s] = -1;
    if (ld <= 0) {  // uniform over the block; no tiles were issued for this pair
      for (int64_t s = tid; s < lq_c; s += kMmaThreads) am[s] = -1;
      if (tid == 0) P.scores[p] = -INFINITY;
      continue;
    }
    if (npass == 0) {  // empty query: no slots, score = empty sum
      if (tid == 0) P.scores[p] = 0.f;
      continue;
    }
    const int ntiles = (ld + kTN - 1) / kTN;
    const int64_t q_first = P.query_starts[query_of(P, p)];
    for (int pass = 0; pass < npass; ++pass) {
      const int row0 = (pass * kMmaWarps + warp) * 32;  // may be >= lq: the warp computes on zeros
      const T* qbase = queries + q_first * static_cast<int64_t>(dim);
      uint32_t a[2][kNKS][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int ks = 0; ks < kNKS; ++ks)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int row = row0 + mt * 16 + (lane >> 2) + (r & 1) * 8;
            const int k = ks * 16 + (lane & 3) * 2 + (r >> 1) * 8;
            uint32_t v = 0;
            if (row < lq && k < dim) v = *reinterpret_cast<const uint32_t*>(qbase + static_cast<int64_t>(row) * dim + k);
            a[mt][ks][r] = v;
          }
      float bv[2][2];
      int32_t bt[2][2];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          bv[mt][h] = -INFINITY;
          bt[mt][h] = -1;  // -1 exactly when bv == -inf (bv only grows through a strict >)
        }

      for (int tile = 0; tile < ntiles; ++tile) {
        maxsim::cp_async_wait<kStages - 2>();
        __syncthreads();  // the stage is visible to all; everyone is done with the slot refilled next
        issue((cstage + kStages - 1) % kStages);
        const uint32_t sb = stages_s + cstage * (kStage * 2);
        const int rem = ld - tile * kTN;  // valid columns of this tile (mask when < kTN)
        const int colbase = tile * kTN + (lane & 3) * 2;
#pragma unroll
        for (int np = 0; np < kTN / 16; ++np) {
          float acc[2][2][4];
#pragma unroll
          for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
              for (int r = 0; r < 4; ++r) acc[mt][nt][r] = 0.f;
#pragma unroll
          for (int ks = 0; ks < kNKS; ++ks) {
            if (ks < nks_run) {
              const int n = np * 16 + (lane & 7) + ((lane >> 4) << 3);
              const int k = ks * 16 + ((lane >> 3) & 1) * 8;
              uint32_t b0, b1, b2, b3;
              maxsim::ldmatrix_x4(sb + (n * kRS + k) * 2, b0, b1, b2, b3);
#pragma unroll
              for (int mt = 0; mt < 2; ++mt) {
                maxsim::MmaOp<T>::run(acc[mt][0], a[mt][ks], b0, b1);
                maxsim::MmaOp<T>::run(acc[mt][1], a[mt][ks], b2, b3);
              }
            }
          }
          // Fold in ascending column order per thread: nt, then element 0 before 1.
          if (rem >= kTN) {
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int32_t col = colbase + np * 16 + nt * 8 + e;
#pragma unroll
                for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                  for (int h = 0; h < 2; ++h) {
                    const float v = acc[mt][nt][2 * h + e];
                    if (v > bv[mt][h]) {
                      bv[mt][h] = v;
                      bt[mt][h] = col;
                    }
                  }
              }
          } else {
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int32_t col = colbase + np * 16 + nt * 8 + e;
                const bool real = col < ld;  // padding columns are never selected
#pragma unroll
                for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                  for (int h = 0; h < 2; ++h) {
                    const float v = acc[mt][nt][2 * h + e];
                    if (real && v > bv[mt][h]) {
                      bv[mt][h] = v;
                      bt[mt][h] = col;
                    }
                  }
              }
          }
        }
        cstage = (cstage + 1 == kStages) ? 0 : cstage + 1;
      }
      // ---- quad merge (lanes 4r..4r+3 hold row r's columns): larger value, equal -> lower index
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float v = bv[mt][h];
          int32_t t = bt[mt][h];
#pragma unroll
          for (int o = 1; o <= 2; o <<= 1) {
            const float ov = __shfl_xor_sync(kFull, v, o);
            const int32_t ot = __shfl_xor_sync(kFull, t, o);
            if (ov > v || (ov == v && ot < t)) {
              v = ov;
              t = ot;
            }
          }
          const int row = row0 + mt * 16 + h * 8 + (lane >> 2);
          if ((lane & 3) == 0 && row < lq) {
            am[row] = t;
            best[row] = v;
          }
        }
    }
    __syncthreads();  // best[0, lq) written by the quads of every warp, read by warp 0 below
    if (warp == 0) {
      // The same fp64 sum in token order as fwd_body (0.0 + best[0] + best[1] + ...), with the loads
      // spread over the warp: lane j holds best[s0 + j] and every lane adds them in order (uniform).
      double sum = 0.0;
      for (int s0 = 0; s0 < lq; s0 += 32) {
        const float v = s0 + lane < lq ? best[s0 + lane] : 0.f;
        const int n = min(32, lq - s0);
        for (int j = 0; j < n; ++j) sum = __dadd_rn(sum, static_cast<double>(__shfl_sync(kFull, v, j)));
      }
      if (lane == 0) P.scores[p] = __double2float_rn(sum);
    }
  }
  maxsim::cp_async_wait<0>();
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
// Tensor-core forward (fwd_mma_body): queries and documents of one dtype, dim % 8 == 0, 8 <= dim <= 128.
extern "C" __global__ void __launch_bounds__(maxsim_train::kMmaThreads, 3) maxsim_train_fwd_mma_f16(const MaxsimTrainParams p) {
  maxsim_train::fwd_mma_body<__half>(p);
}
extern "C" __global__ void __launch_bounds__(maxsim_train::kMmaThreads, 3) maxsim_train_fwd_mma_bf16(const MaxsimTrainParams p) {
  maxsim_train::fwd_mma_body<__nv_bfloat16>(p);
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
