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
// LAUNCH CONTRACTS (MaxsimTrainParams by value, dynamic smem 0 except fwd_mma; every index is 64-bit;
// every buffer 16-byte aligned: the backward's dim % 4 == 0 paths and scan_down use vector accesses):
//   maxsim_train_fwd_mma_{f16,bf16}  (queries and documents both of that type; dim % 8 == 0,
//       8 <= dim <= 128; sm_80+) block (128,1,1), grid (min(num_pairs, 2^20),1,1), dynamic smem
//       MAXSIM_TRAIN_FWD_MMA_SMEM bytes (maxsim_train_params.h; above 48 KiB: the limit is raised). One CTA per pair
//       (blocks stride over pairs); same outputs as maxsim_train_fwd_* below. Token arrays 16-byte aligned.
//   maxsim_train_fwd_{f32,f16,bf16}  (element type of the documents; queries: params.query_dtype)
//       block (128,1,1), grid (min(num_pairs, 2^20),1,1): blocks stride over pairs. Per pair: warps
//       stride over query tokens, lanes over document tokens; writes argmax[p*stride + s] (-1 past the
//       query length and for empty documents), best[] (scratch) and scores[p] (-inf: empty document).
//   The forward kernels write argmax as int16 when params.argmax16 (else int32) and use best[] as one
//       stride-long stripe per CTA (blockIdx.x * stride): the host sizes it for its grid, not per pair.
//   maxsim_train_dq_{f32,f16,bf16} (element type of the documents) block (256,1,1), grid
//       (min(num_queries * ceil(stride / 8), 2^20),1,1): one warp per query token (8 consecutive tokens
//       of one query per block); writes every real query token row of dq (packed).
//   dD (CSR), per document block [doc_begin, doc_end) with rows [row_begin, row_end), cells = rows * qblocks:
//   maxsim_train_dd_count  block (128,1,1), grid (min(ceil((doc_end - doc_begin) * qblocks / 4), 2^20),1,1):
//       one warp per (document, query block) adds its sources to counts[] (zeroed first).
//   maxsim_train_dd_scan_reduce / _scan_down  block (1024,1,1), grid (min(ceil(cells / 4096), 2^20),1,1);
//   maxsim_train_dd_scan_top  block (1024,1,1), grid (1,1,1): offsets = exclusive scan of counts
//       (offsets[cells] = total), counts = offsets (the cursor). block_sums holds ceil(cells / 4096).
//   maxsim_train_dd_stats  block (256,1,1), any grid: stats[0] += rows of the block with sources.
//   maxsim_train_dd_place  as dd_count: the owner warp writes each source at its cell's cursor, in order.
//   maxsim_train_dd_count_block / _place_block  (documents of at most MAXSIM_TRAIN_WALK_MAX_LENGTH
//       tokens) block (32 * MAXSIM_TRAIN_WALK_WARPS,1,1), grid (min((doc_end - doc_begin) * qblocks, 2^20),1,1),
//       dynamic smem 4 * longest document bytes (count) or 2 * MAXSIM_TRAIN_WALK_WARPS times that (place):
//       one CTA per (document, query block); count writes every cell of its unit (no zeroing needed),
//       place is dd_place's CSR, bit for bit.
//   maxsim_train_dd_gather_{f32,f16,bf16} (element type of the queries) block (128,1,1), grid
//       (min(ceil(rows / 4), 2^20),1,1): one warp per row of the block; writes every row of the block
//       with at most params.chunk sources (zero without sources).
//   Split rows (more than params.chunk sources), after dd_gather: maxsim_train_dd_chunk_count and
//       _chunk_map block (256,1,1), any grid (threads over rows); the scan kernels above with
//       offsets = chunk_off and cells = rows in between; then per 128-column slice (k_begin):
//       maxsim_train_dd_gather_split_{f32,f16,bf16} block (128,1,1), grid (min(ceil(chunk bound / 4),
//       2^20),1,1) (one warp per chunk), then maxsim_train_dd_combine block (128,1,1), grid
//       (min(ceil(rows / 4), 2^20),1,1) (one warp per row; writes the split rows' slice once).
//   maxsim_train_dd_atomic block (128,1,1), grid (min(ceil(num_pairs*stride/4), 2^20),1,1): one warp
//       per argmax slot, float atomicAdd into dd (zeroed first). NOT deterministic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

#include "maxsim_common.cuh"
#include "maxsim_mainloop.cuh"
#include "maxsim_mma.cuh"
#include "maxsim_producer.cuh"
#include "maxsim_rowmax.cuh"
#include "maxsim_scan.cuh"
#include "maxsim_wgmma.cuh"
#include "maxsim_train_params.h"

namespace maxsim_train {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;

using maxsim::to_f32;

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

// argmax entries are int16 when every document has fewer than 32768 tokens (P.argmax16), else int32.
__device__ __forceinline__ void store_am(const MaxsimTrainParams& P, int64_t idx, int32_t t) {
  if (P.argmax16) {
    static_cast<int16_t*>(P.argmax)[idx] = static_cast<int16_t>(t);
  } else {
    static_cast<int32_t*>(P.argmax)[idx] = t;
  }
}
__device__ __forceinline__ int32_t load_am(const MaxsimTrainParams& P, int64_t idx) {
  return P.argmax16 ? static_cast<int32_t>(static_cast<const int16_t*>(P.argmax)[idx])
                    : static_cast<const int32_t*>(P.argmax)[idx];
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
    const int64_t am = p * P.stride;
    float* best = P.best + static_cast<int64_t>(blockIdx.x) * P.stride;  // this CTA's stripe
    for (int64_t s = static_cast<int64_t>(lq) + tid; s < P.stride; s += kThreads) store_am(P, am + s, -1);
    if (ld <= 0) {  // uniform over the block: no barrier is skipped by part of it
      for (int64_t s = tid; s < lq; s += kThreads) store_am(P, am + s, -1);
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
        store_am(P, am + s, bt);
        best[s] = bv;
      }
    }
    __syncthreads();  // best[0, lq) written by lane 0 of every warp, read by thread 0 below
    if (tid == 0) {
      double sum = 0.0;  // in token order, like the CPU engine
      for (int s = 0; s < lq; ++s) sum = __dadd_rn(sum, static_cast<double>(best[s]));
      P.scores[p] = __double2float_rn(sum);
    }
    __syncthreads();  // thread 0 is done with the stripe before the next pair overwrites it
  }
}

// ---- shared by the argmax forwards ------------------------------------------------------------

using maxsim::quad_argmax;  // (maxsim_rowmax.cuh)

// A pair's score from its slot maxima best[0, lq): the same fp64 sum in token order as fwd_body
// (0.0 + best[0] + best[1] + ...), with the loads spread over the warp: lane j holds best[s0 + j] and
// every lane adds them in order (uniform). Called by a whole warp; lane 0 writes.
__device__ __forceinline__ void write_score(const MaxsimTrainParams& P, int64_t p, const float* best, int lq, int lane) {
  double sum = 0.0;
  for (int s0 = 0; s0 < lq; s0 += 32) {
    const float v = s0 + lane < lq ? best[s0 + lane] : 0.f;
    const int n = min(32, lq - s0);
    for (int j = 0; j < n; ++j) sum = __dadd_rn(sum, static_cast<double>(__shfl_sync(kFull, v, j)));
  }
  if (lane == 0) P.scores[p] = __double2float_rn(sum);
}

// ---- forward with argmax on tensor cores (mma.sync m16n8k16, fp16 / bf16, fp32 accumulate) -------
//
// The scoring mma.sync body's mainloop (maxsim_mma.cuh: its stage layout, mma_copy_tile and
// mma_tile_blocks) with a pair walk and an argmax fold. One CTA (kMmaWarps warps, one group) per
// pair, blocks striding over pairs (diagonal pairs too, which the scoring walk over documents x
// queries has no notion of). Each warp owns 32-row slices of the query (rows 32 * (pass * kMmaWarps +
// warp) ...) whose A fragments it keeps in registers; the CTA streams the document through an S-stage
// cp.async ring of TN-token tiles (zero-filled past the document and past dim), once per pass, all
// warps in lock step (trip counts depend on the pair only, so every thread reaches every
// __syncthreads). Per accumulator row element a thread keeps
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
// the scoring mma.sync body's stage layout and copy split, one group of kMmaWarps warps
template <typename T>
using MmaC = maxsim::MmaCfg<std::conditional_t<std::is_same_v<T, __half>, maxsim::F16, maxsim::BF16>, kMmaWarps, 1, kTN,
                            kStages, kKD>;
constexpr int kMmaSmem = kStages * MmaC<__half>::STAGE;  // 52224 bytes (dynamic; no partial-sum slots)
static_assert(kMmaSmem == MAXSIM_TRAIN_FWD_MMA_SMEM && kMmaThreads == MAXSIM_TRAIN_FWD_THREADS &&
                  kKD == MAXSIM_TRAIN_MMA_MAX_DIM,
              "maxsim_train_params.h states the mma forward's launch: keep it equal to the kernel");

template <typename T>
__device__ __forceinline__ void fwd_mma_body(const MaxsimTrainParams& P) {
  using C = MmaC<T>;
  using E = std::conditional_t<std::is_same_v<T, __half>, maxsim::F16, maxsim::BF16>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int dim = P.dim;
  if (dim <= 0 || dim > kKD || (dim & 7) != 0) return;  // contract: the binding never launches these
  const T* __restrict__ docs = static_cast<const T*>(P.docs);
  const T* __restrict__ queries = static_cast<const T*>(P.queries);
  const uint32_t stages_s = maxsim::smem_u32(smem_raw);
  const int nks_run = (dim + 15) >> 4;  // k16 steps that carry data

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
  const int pr = tid / C::CPR, pc = tid % C::CPR;
  const int64_t rstep = static_cast<int64_t>(C::RSTEP) * dim;
  auto issue = [&](int slot) {
    if (pp < P.num_pairs) {
      maxsim::mma_copy_tile<C>(stages_s + slot * C::STAGE, docs, pstart, plen, ptile * kTN, 0, dim, rstep, pr, pc);
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
    const int64_t am = p * P.stride;
    // This CTA's stripe: the previous pair's warp-0 sum read it before the first tile barrier below,
    // which every thread passes before any quad writes it again.
    float* best = P.best + static_cast<int64_t>(blockIdx.x) * P.stride;
    const int lq_c = lq > 0 ? lq : 0;
    for (int64_t s = static_cast<int64_t>(lq_c) + tid; s < P.stride; s += kMmaThreads) store_am(P, am + s, -1);
    if (ld <= 0) {  // uniform over the block; no tiles were issued for this pair
      for (int64_t s = tid; s < lq_c; s += kMmaThreads) store_am(P, am + s, -1);
      if (tid == 0) P.scores[p] = -INFINITY;
      continue;
    }
    if (npass == 0) {  // empty query: no slots, score = empty sum
      if (tid == 0) P.scores[p] = 0.f;
      continue;
    }
    const int ntiles = (ld + kTN - 1) / kTN;
    const T* qbase = queries + P.query_starts[query_of(P, p)] * static_cast<int64_t>(dim);
    for (int pass = 0; pass < npass; ++pass) {
      const int row0 = (pass * kMmaWarps + warp) * 32;  // may be >= lq: the warp computes on zeros
      uint32_t a[2][C::NKS][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) maxsim::load_a16<C::NKS, 2>(a[mt], qbase, row0 + mt * 16, lq, 0, dim, lane);
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
        const int rem = ld - tile * kTN;  // valid columns of this tile (mask when < kTN)
        maxsim::mma_tile_blocks<E, C>(a, stages_s + cstage * C::STAGE, nks_run, lane, 0.f,
                                      [&](const float (&acc)[2][2][4], int c0) {
                                        maxsim::fold_n16_argmax<kTN>(bv, bt, acc, tile * kTN, c0, rem, lane);
                                      });
        cstage = (cstage + 1 == kStages) ? 0 : cstage + 1;
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float v = bv[mt][h];
          int32_t t = bt[mt][h];
          quad_argmax(v, t);
          const int row = row0 + mt * 16 + h * 8 + (lane >> 2);
          if ((lane & 3) == 0 && row < lq) {
            store_am(P, am + row, t);
            best[row] = v;
          }
        }
    }
    __syncthreads();  // best[0, lq) written by the quads of every warp, read by warp 0 below
    if (warp == 0) write_score(P, p, best, lq, lane);
  }
  maxsim::cp_async_wait<0>();
}

// ---- forward with argmax on Hopper tensor cores (wgmma, sm_90a; all pairs) ----------------------
//
// The scoring kernel's body (maxsim_wgmma.cuh, the w2m2n128 shape: a producer warpgroup streaming
// 128-token document tiles into a 6-stage swizzled ring, two consumer warpgroups of two m-blocks
// running wgmma.m64n128k16 on query fragments held in registers) with the argmax epilogue
// (ArgmaxOut): per row and tile the tile maximum of the thread's columns on the bit patterns and,
// only when it beats the running maximum strictly, the lowest of the thread's columns holding it
// (fold_argmax_row: the strict-> ascending scan of fwd_mma_body, lowest index among equal maxima, NaN
// and padding never chosen); at a document's end fwd_mma_body's quad merge, and each row's (max,
// argmax) goes to best[] and argmax[] at its pair's slot. Work units are (slab of 256 query rows,
// document group): P.doc_groups groups, 1 unless there are too few slabs to fill the GPU.
// maxsim_train_fwd_sum then adds best[] per pair in fp64 in token order and writes the -1 slots
// (past the query, empty documents) and the scores. With the same dot products as mma.sync's (fp32
// accumulate of k16 steps), scores and argmax equal fwd_mma_body's.
constexpr int kWgCons = 2;                 // consumer warpgroups
constexpr int kWgMB = 2;                   // m-blocks (64 rows) per consumer warpgroup
constexpr int kWgTN = 128;                 // document tokens per tile
constexpr int kWgStages = 6;
constexpr int kWgThreads = 128 * (kWgCons + 1);
constexpr int kWgSmem = kWgStages * kWgTN * 256 + 1024;  // MAXSIM_WGMMA16_SMEM: + 1024 alignment slack
static_assert(kWgThreads == MAXSIM_TRAIN_FWD_WGMMA_THREADS && kWgSmem == MAXSIM_TRAIN_FWD_WGMMA_SMEM &&
                  kWgCons * 4 * kWgMB * 16 == MAXSIM_TRAIN_FWD_WGMMA_SLAB_ROWS && kWgTN == MAXSIM_TRAIN_FWD_WGMMA_TILE,
              "maxsim_train_params.h states the wgmma forward's launch: keep it equal to the kernel");

template <class E, bool TMA>
__device__ __forceinline__ void fwd_wgmma_body(const MaxsimTrainParams& P, const maxsim::TmaMap* map) {
  if (P.dim <= 0 || P.dim > 128 || (P.dim & 7) != 0) return;  // contract: never launched so
  // the scoring body's view of the launch: all pairs of these queries and documents, every query
  // sliced by the argmax stride (>= every query length)
  MaxsimParams s{};
  s.queries = P.queries;
  s.query_starts = P.query_starts;
  s.query_lengths = P.query_lengths;
  s.docs = P.docs;
  s.doc_starts = P.doc_starts;
  s.doc_lengths = P.doc_lengths;
  s.num_queries = P.num_queries;
  s.num_docs = P.num_docs;
  s.dim = P.dim;
  s.max_query_length = static_cast<int32_t>(P.stride);  // < 2^31: the engine checks the slices
  const maxsim::ArgmaxOut out{P.best, P.argmax, P.stride, P.argmax16, P.doc_groups};
  maxsim::wgmma_body<E, kWgCons, kWgMB, kWgTN, kWgStages, false, TMA, false>(s, map, out);
}

// After fwd_wgmma_body: per pair (one warp each), the fp64 token-order sum of best[] (write_score,
// as fwd_mma_body's warp 0) and the slots the forward did not write.
__device__ __forceinline__ void fwd_sum_body(const MaxsimTrainParams& P) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * 4 + warp; p < P.num_pairs; p += static_cast<int64_t>(gridDim.x) * 4) {
    const int lq = max(0, P.query_lengths[query_of(P, p)]);
    const int ld = P.doc_lengths[doc_of(P, p)];
    const int64_t am = p * P.stride;
    for (int64_t s = lq + lane; s < P.stride; s += 32) store_am(P, am + s, -1);
    if (ld <= 0) {
      for (int s = lane; s < lq; s += 32) store_am(P, am + s, -1);
      if (lane == 0) P.scores[p] = -INFINITY;
      continue;
    }
    write_score(P, p, P.best + am, lq, lane);
  }
}

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

// ---- dD, deterministic: CSR of sources per document token row, one document block at a time ------
//
// The sources of row (j, t) are the slots (p, s) with argmax[p * stride + s] == t, p a pair of
// document j with g[p] != 0. The CSR covers the rows of documents [doc_begin, doc_end) only (the host
// walks the blocks in order; every row of dD belongs to exactly one block and is written once, so the
// result does not depend on the blocking). Its cells are (row, query block): warp (j, qb) visits the
// queries of block qb in ascending order, query tokens ascending, 32 at a time (lane = s - s0);
// __match_any_sync groups the lanes with the same destination cell (within a warp's walk the cell is
// a function of the token t, so the match is on t: 32 bits) and a lane's rank in its group is the
// number of lower lanes in it. Count mode: the group's lowest lane adds the group size to the cell
// (an integer red: no round trip, and the sum does not depend on the order). Place mode: every lane
// writes its source at cursor[cell] + rank and the lowest lane advances the cursor. A cell is touched
// by its owner warp only; cells of a row are adjacent in query-block order, so each row's segment
// lists its sources in ascending (query, query token) order: the order the CPU engine sums in,
// independent of qblocks. Place mode keeps a small per-warp cache of (token, cursor) in shared memory,
// written through with every advance: under contention the same few cells come back every round, and
// a hit saves the dependent global round trip.

constexpr int kCursorSlots = 64;  // per warp, direct-mapped on t
constexpr unsigned long long kNoCursor = ~0ull;  // key t = -1: never looked up

template <bool kPlace>
__device__ __forceinline__ void walk_sources(const MaxsimTrainParams& P) {
  __shared__ unsigned long long cursor_cache[kPlace ? kWarps : 1][kCursorSlots];
  const int lane = threadIdx.x & 31;
  unsigned long long* cache = cursor_cache[kPlace ? threadIdx.x >> 5 : 0];
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t qblocks = P.qblocks;
  const int64_t units = static_cast<int64_t>(P.doc_end - P.doc_begin) * qblocks;
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); w < units; w += warps) {
    const int64_t j = P.doc_begin + w / qblocks;
    const int64_t qb = w - (j - P.doc_begin) * qblocks;
    const int ld = P.doc_lengths[j];
    if (ld <= 0) continue;  // uniform over the warp
    const int64_t row0 = P.doc_starts[j] - P.row_begin;  // block-local row of token 0
    const int64_t i_begin = P.pairs == 0 ? qb * P.qblock_size : j;
    const int64_t i_end = P.pairs == 0 ? min(static_cast<int64_t>(P.num_queries), i_begin + P.qblock_size) : j + 1;
    if (kPlace) {  // keys are tokens of this unit's document: start empty
      for (int k = lane; k < kCursorSlots; k += 32) cache[k] = kNoCursor;
      __syncwarp();
    }
    for (int64_t i = i_begin; i < i_end; ++i) {
      const int64_t p = P.pairs == 0 ? i * P.num_docs + j : i;
      const int64_t am = p * P.stride;
      // The first round's argmax (in bounds for lane < stride) goes out with g and the length.
      int32_t t_next = lane < P.stride ? load_am(P, am + lane) : -1;
      const int lq = P.query_lengths[i];
      if (P.grad_scores[p] == 0.0) continue;  // uniform
      for (int s0 = 0; s0 < lq; s0 += 32) {  // uniform trip count: all 32 lanes reach the match
        const int s = s0 + lane;
        const int32_t t_read = s < lq ? t_next : -1;
        if (s0 + 32 < lq) t_next = s + 32 < lq ? load_am(P, am + s + 32) : -1;  // in flight meanwhile
        const bool valid = t_read >= 0 && t_read < ld;
        const int32_t t = valid ? t_read : -1;
        const long long cell = static_cast<long long>((row0 + t) * qblocks + qb);  // used when valid
        const unsigned peers = __match_any_sync(kFull, t);
        const unsigned lower = peers & ((1u << lane) - 1u);
        const uint32_t rank = __popc(lower);
        const uint32_t n = __popc(peers);
        if (kPlace) {
          unsigned long long* slot = cache + (t & (kCursorSlots - 1));
          uint32_t base = 0u;
          if (valid) {
            const unsigned long long e = *slot;
            base = static_cast<uint32_t>(e >> 32) == static_cast<uint32_t>(t) ? static_cast<uint32_t>(e) : P.counts[cell];
          }
          __syncwarp();  // every lane has read the cursor before the group's leader moves it
          if (valid) {
            P.sources[base + rank] = static_cast<uint32_t>(am + s);
            if (lower == 0) {
              P.counts[cell] = base + n;  // write-through: an evicted cell is read back from here
              // Atomic so that two groups of one round mapped to one slot leave one whole entry.
              atomicExch(slot, (static_cast<unsigned long long>(static_cast<uint32_t>(t)) << 32) | (base + n));
            }
          }
          __syncwarp();  // the updates are visible to the next round's reads (possibly other lanes)
        } else if (valid && lower == 0) {
          atomicAdd(P.counts + cell, n);
        }
      }
    }
  }
}

// The same count and placement with one CTA per (document, query block) unit instead of one warp,
// for documents of at most MAXSIM_TRAIN_WALK_MAX_LENGTH tokens (the per-token state lives in shared
// memory). The unit's argmax slots in (query, query token) order, padded to the stride, are cut into
// kWalkWarps consecutive runs, one per warp; a warp walks its run query by query, 32 real query
// tokens per round. Count mode: a shared histogram of the unit's tokens, then each cell's count
// written once (no global atomics; counts need no zeroing). Place mode: each warp counts its run into
// its own histogram; per token, the warps' cursors are the cell's offset plus the counts of the lower
// warps; then each warp walks its run again and places a round's sources at its private cursors, a
// lane after the lower lanes of its round with the same token (the lanes sharing a token are found
// with one shared-memory atomicOr of lane bits per token). Each cell's segment is thus in ascending
// slot order: the same CSR, bit for bit, as walk_sources.
constexpr int kWalkWarps = MAXSIM_TRAIN_WALK_WARPS;
constexpr int kWalkThreads = 32 * kWalkWarps;
constexpr int kWalkAhead = 4;  // rounds of 32 slots whose loads a warp issues before using them

// Walks the run [f0, f1) of the unit's padded slots (queries from i_begin, document j of ld tokens):
// for every round of up to 32 real query tokens of one query with a nonzero score gradient, in slot
// order, the whole warp calls visit(t, slot) (t: the lane's document token, or -1 when the lane has no
// source; slot: its argmax slot index).
template <class Visit>
__device__ __forceinline__ void walk_run(const MaxsimTrainParams& P, int64_t i_begin, int64_t j, int ld, uint32_t f0,
                                         uint32_t f1, Visit&& visit) {
  if (f0 >= f1) return;
  const int lane = threadIdx.x & 31;
  const uint32_t stride = static_cast<uint32_t>(P.stride);
  const uint32_t q0 = f0 / stride, q1 = (f1 - 1) / stride;
  for (uint32_t q = q0; q <= q1; ++q) {  // uniform
    const int64_t i = i_begin + q;
    const int64_t p = P.pairs == 0 ? i * P.num_docs + j : i;
    if (P.grad_scores[p] == 0.0) continue;
    const uint32_t lo = q == q0 ? f0 - q * stride : 0u;
    const uint32_t hi = min(static_cast<uint32_t>(max(P.query_lengths[i], 0)), q == q1 ? f1 - q * stride : stride);
    const int64_t base = p * P.stride;  // the slots' indices are < 2^32 (the host checks): u32 sources
    for (uint32_t s = lo; s < hi; s += 32 * kWalkAhead) {
      int32_t t[kWalkAhead];
#pragma unroll
      for (int a = 0; a < kWalkAhead; ++a) {  // the loads first, all in flight together
        const uint32_t x = s + 32 * a + lane;
        const int32_t v = x < hi ? load_am(P, base + x) : -1;
        t[a] = v >= 0 && v < ld ? v : -1;
      }
#pragma unroll
      for (int a = 0; a < kWalkAhead; ++a) {  // uniform: the round exists
        if (s + 32 * a < hi) visit(t[a], static_cast<uint32_t>(base + s + 32 * a + lane));
      }
    }
  }
}

template <bool kPlace>
__device__ __forceinline__ void walk_block(const MaxsimTrainParams& P) {
  // count: [longest document] histogram; place: [kWalkWarps][longest] cursors, then as many lane masks
  extern __shared__ uint32_t words[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t qblocks = P.qblocks;
  const int64_t units = static_cast<int64_t>(P.doc_end - P.doc_begin) * qblocks;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t j = P.doc_begin + u / qblocks;
    const int64_t qb = u - (j - P.doc_begin) * qblocks;
    const int ld = P.doc_lengths[j];
    if (ld <= 0) continue;  // uniform over the block
    const int64_t row0 = P.doc_starts[j] - P.row_begin;
    const int64_t i_begin = P.pairs == 0 ? qb * P.qblock_size : j;
    const int64_t i_end = P.pairs == 0 ? min(static_cast<int64_t>(P.num_queries), i_begin + P.qblock_size) : j + 1;
    const uint32_t n = static_cast<uint32_t>((i_end - i_begin) * P.stride);  // < 2^32: the host bounds sources
    const uint32_t per = (n + kWalkWarps - 1) / kWalkWarps;
    const uint32_t f0 = min(n, per * warp), f1 = min(n, f0 + per);
    const int used = kPlace ? 2 * kWalkWarps * ld : ld;
    for (int k = threadIdx.x; k < used; k += kWalkThreads) words[k] = 0u;
    __syncthreads();
    uint32_t* hist = words + (kPlace ? warp * ld : 0);  // this warp's (place) or the block's (count)
    walk_run(P, i_begin, j, ld, f0, f1, [&](int32_t t, uint32_t) {
      if (t >= 0) atomicAdd(hist + t, 1u);
    });
    __syncthreads();
    if (!kPlace) {
      for (int t = threadIdx.x; t < ld; t += kWalkThreads) P.counts[(row0 + t) * qblocks + qb] = words[t];
    } else {
      for (int t = threadIdx.x; t < ld; t += kWalkThreads) {  // warp cursors, in warp order
        uint32_t at = P.offsets[(row0 + t) * qblocks + qb];
#pragma unroll
        for (int w = 0; w < kWalkWarps; ++w) {
          const uint32_t c = words[w * ld + t];
          words[w * ld + t] = at;
          at += c;
        }
      }
      __syncthreads();
      uint32_t* cursor = hist;
      uint32_t* mask = words + (kWalkWarps + warp) * ld;  // zero between rounds
      walk_run(P, i_begin, j, ld, f0, f1, [&](int32_t t, uint32_t slot) {
        if (t >= 0) atomicOr(mask + t, 1u << lane);
        __syncwarp();
        uint32_t peers = 0u, at = 0u;
        if (t >= 0) {
          peers = mask[t];
          at = cursor[t];
        }
        __syncwarp();  // every lane has read before the group's lowest lane moves the cursor
        if (t >= 0) {
          const uint32_t lower = peers & ((1u << lane) - 1u);
          P.sources[at + __popc(lower)] = slot;
          if (lower == 0u) {
            cursor[t] = at + __popc(peers);
            mask[t] = 0u;
          }
        }
        __syncwarp();
      });
    }
    __syncthreads();  // the shared words are free for the next unit
  }
}

// Three-kernel scan of counts[0, cells) (every total < 2^32: the host bounds a block's sources):
// scan_reduce: block_sums[b] = sum of tile b; scan_top (one block): block_sums exclusive in place,
// offsets[cells] = total; scan_down: offsets = counts turned exclusive, and counts = offsets (cursor).
__device__ __forceinline__ void scan_reduce_body(const MaxsimTrainParams& P) {
  const int64_t tiles = (P.cells + kScanTile - 1) / kScanTile;
  for (int64_t b = blockIdx.x; b < tiles; b += gridDim.x) {
    uint32_t v = 0;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t idx = b * kScanTile + r * kScanThreads + threadIdx.x;
      if (idx < P.cells) v += P.counts[idx];
    }
    uint32_t total;
    block_exclusive_scan<kScanThreads>(v, &total);
    if (threadIdx.x == 0) P.block_sums[b] = total;
  }
}

__device__ __forceinline__ void scan_top_body(const MaxsimTrainParams& P) {
  const int64_t tiles = (P.cells + kScanTile - 1) / kScanTile;
  uint32_t carry = 0;
  for (int64_t base = 0; base < tiles; base += kScanThreads) {  // uniform trip count
    const int64_t idx = base + threadIdx.x;
    const uint32_t v = idx < tiles ? P.block_sums[idx] : 0u;
    uint32_t total;
    const uint32_t excl = block_exclusive_scan<kScanThreads>(v, &total);
    if (idx < tiles) P.block_sums[idx] = carry + excl;
    carry += total;
  }
  if (threadIdx.x == 0) P.offsets[P.cells] = carry;
}

// The 4 counts of a thread are one 16-byte load and its offsets / cursors one store each when all 4
// exist (first is a multiple of 4 and the buffers are 16-byte aligned).
__device__ __forceinline__ void scan_down_body(const MaxsimTrainParams& P) {
  const int64_t tiles = (P.cells + kScanTile - 1) / kScanTile;
  for (int64_t b = blockIdx.x; b < tiles; b += gridDim.x) {
    const int64_t first = b * kScanTile + 4 * static_cast<int64_t>(threadIdx.x);
    const bool whole = first + 4 <= P.cells;
    uint32_t v[4];
    if (whole) {
      const uint4 c = *reinterpret_cast<const uint4*>(P.counts + first);
      v[0] = c.x;
      v[1] = c.y;
      v[2] = c.z;
      v[3] = c.w;
    } else {
#pragma unroll
      for (int r = 0; r < 4; ++r) v[r] = first + r < P.cells ? P.counts[first + r] : 0u;
    }
    const uint32_t sum = v[0] + v[1] + v[2] + v[3];
    uint32_t total;
    uint32_t at[4];
    at[0] = P.block_sums[b] + block_exclusive_scan<kScanThreads>(sum, &total);
#pragma unroll
    for (int r = 1; r < 4; ++r) at[r] = at[r - 1] + v[r - 1];
    if (whole) {
      const uint4 o = make_uint4(at[0], at[1], at[2], at[3]);
      *reinterpret_cast<uint4*>(P.offsets + first) = o;
      *reinterpret_cast<uint4*>(P.counts + first) = o;  // the placement cursor
    } else {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        if (first + r < P.cells) {
          P.offsets[first + r] = at[r];
          P.counts[first + r] = at[r];
        }
      }
    }
  }
}

// Contention of the block: stats[0] += rows with at least one source (stats[1] = sources is read from
// offsets[cells] by the host). Integer atomics: the result does not depend on their order.
__device__ __forceinline__ void stats_body(const MaxsimTrainParams& P) {
  const int64_t rows = P.row_end - P.row_begin;
  unsigned long long distinct = 0;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (P.offsets[(r + 1) * P.qblocks] > P.offsets[r * P.qblocks]) ++distinct;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) distinct += __shfl_xor_sync(kFull, distinct, o);
  if ((threadIdx.x & 31) == 0 && distinct > 0) atomicAdd(P.stats, distinct);
}

// Sums, in source order, the sources [e_begin, e_end) of the CSR (ascending (query, query token)) for
// the columns k0 + lane + 32 m into acc (fp64: acc += g * Q[q_row, k], separately rounded multiply and
// add), 32 sources' metadata per round.
template <typename T>
__device__ __forceinline__ void sum_sources(const MaxsimTrainParams& P, int64_t e_begin, int64_t e_end, int64_t k0,
                                            int lane, double (&acc)[kVec]) {
  const int64_t dim = P.dim;
  const T* __restrict__ queries = static_cast<const T*>(P.queries);
  const uint32_t stride = static_cast<uint32_t>(P.stride);
  // The next batch's source indices are loaded before this batch is summed (rows with many sources,
  // as under contention, are a serial walk: hide one round trip per batch).
  uint32_t next = e_begin + lane < e_end ? P.sources[e_begin + lane] : 0u;
  for (int64_t e0 = e_begin; e0 < e_end; e0 += 32) {
    const int64_t e = e0 + lane;
    const uint32_t slot = next;
    if (e + 32 < e_end) next = P.sources[e + 32];
    double g = 0.0;
    long long off = -1;
    if (e < e_end) {
      const uint32_t p = slot / stride;
      const uint32_t s = slot - p * stride;
      g = P.grad_scores[p];
      off = (P.query_starts[query_of(P, p)] + s) * dim;
    }
    accumulate_sources<T>(queries, off, g, static_cast<int>(e_end - e0 < 32 ? e_end - e0 : 32), k0, dim, lane, acc);
  }
}

// The metadata of CSR source slot (= p * stride + s): its weight, its query's first row and s, kept
// apart until staged (adding them at load time would wait for the load). p < 2^32: 32-bit division.
struct CsrMeta {
  double g;
  int64_t start;
  uint32_t s;
};
__device__ __forceinline__ CsrMeta csr_meta(const MaxsimTrainParams& P, uint32_t slot, bool valid, uint32_t stride) {
  CsrMeta m{0.0, 0, 0u};
  if (valid) {
    const uint32_t p = slot / stride;
    m.s = slot - p * stride;
    m.g = P.grad_scores[p];
    m.start = P.query_starts[P.pairs == 0 ? p / static_cast<uint32_t>(P.num_docs) : p];
  }
  return m;
}

// Fast path of sum_sources (source indices are u32 like the offsets): the lane's columns col + m
// (m < 4); st = the warp's 32 staging slots. Per batch b: its (row, weight) are staged, then the
// metadata of batch b + 1 (whose slot indices arrived during batch b - 1) and the slot indices of
// batch b + 2 are requested, then b is summed while they are in flight.
template <typename T>
__device__ __forceinline__ void sum_sources_vec(const MaxsimTrainParams& P, uint32_t e_begin, uint32_t e_end, int col,
                                                bool active, Src* st, int lane, double (&acc)[kVec]) {
  const int64_t dim = P.dim;
  const T* queries = static_cast<const T*>(P.queries);
  const uint32_t stride = static_cast<uint32_t>(P.stride);
  const uint32_t* sources = P.sources;
  const uint32_t e = e_begin + lane;  // no wrap: e_end + 64 < 2^32 (a block's sources are bounded)
  CsrMeta m = csr_meta(P, e < e_end ? sources[e] : 0u, e < e_end, stride);
  uint32_t slot = e + 32 < e_end ? sources[e + 32] : 0u;
  for (uint32_t e0 = e_begin; e0 < e_end; e0 += 32) {
    const int n = static_cast<int>(min(e_end - e0, 32u));
    __syncwarp();  // the previous batch is summed before its slots are overwritten
    if (lane < n) st[lane] = Src{queries + (m.start + m.s) * dim, m.g};
    __syncwarp();
    const uint32_t en = e0 + 32 + lane;  // this lane's source in the next batch
    if (e0 + 32 < e_end) {               // uniform
      m = csr_meta(P, slot, en < e_end, stride);
      slot = en + 32 < e_end ? sources[en + 32] : 0u;
    }
    accumulate_vec<T>(st, n, col, active, acc);
  }
}

// A row's sources [begin, end) and whether it is split (more than P.chunk sources).
__device__ __forceinline__ bool row_is_split(const MaxsimTrainParams& P, int64_t begin, int64_t end) {
  return end - begin > P.chunk;
}

// One warp per document row of the block: walks its segment (ascending (query, query token)) and
// writes the row once. Rows without sources are written as zeros. Split rows (more than P.chunk
// sources) are left to gather_split / combine: for a row of one chunk both definitions below agree.
//
// The value of a row (whatever the warps, the blocking or the GPU): cut its sources, in CSR order,
// into chunks of P.chunk from its first source; each chunk's sum in fp64 from +0.0 in source order;
// the chunk sums added in chunk order in fp64 (starting from the first); one rounding to fp32.
template <typename T>
__device__ __forceinline__ void gather_scalar(const MaxsimTrainParams& P) {
  const int lane = threadIdx.x & 31;
  const int64_t dim = P.dim;
  const int64_t rows = P.row_end - P.row_begin;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); w < rows; w += warps) {
    const int64_t begin = P.offsets[w * P.qblocks];
    const int64_t end = P.offsets[(w + 1) * P.qblocks];
    if (row_is_split(P, begin, end)) continue;  // uniform over the warp
    const int64_t r = P.row_begin + w;
    for (int64_t k0 = 0; k0 < dim; k0 += kChunk) {
      double acc[kVec];
#pragma unroll
      for (int m = 0; m < kVec; ++m) acc[m] = 0.0;
      sum_sources<T>(P, begin, end, k0, lane, acc);
#pragma unroll
      for (int m = 0; m < kVec; ++m) {
        const int64_t k = k0 + lane + 32 * m;
        if (k < dim) P.dd[r * dim + k] = __double2float_rn(acc[m]);
      }
    }
  }
}

template <typename T>
__device__ __forceinline__ void gather_vec(const MaxsimTrainParams& P) {
  __shared__ Src staged[kWarps][32];
  const int lane = threadIdx.x & 31;
  Src* st = staged[threadIdx.x >> 5];
  const int dim = P.dim;
  const int64_t rows = P.row_end - P.row_begin;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); w < rows; w += warps) {
    const uint32_t begin = P.offsets[w * P.qblocks];
    const uint32_t end = P.offsets[(w + 1) * P.qblocks];
    if (row_is_split(P, begin, end)) continue;  // uniform over the warp
    const int64_t r = P.row_begin + w;
    for (int k0 = 0; k0 < dim; k0 += kChunk) {
      const int col = k0 + 4 * lane;
      const bool active = col < dim;
      double acc[kVec];
#pragma unroll
      for (int m = 0; m < kVec; ++m) acc[m] = 0.0;
      sum_sources_vec<T>(P, begin, end, col, active, st, lane, acc);
      if (active) {
        store_rounded4(P.dd + r * dim + col, acc);
      }
    }
  }
}

template <typename T>
__device__ __forceinline__ void gather_body(const MaxsimTrainParams& P) {
  if ((P.dim & 3) == 0) {
    gather_vec<T>(P);
  } else {
    gather_scalar<T>(P);
  }
}

// Split rows, step 1 (one thread per row of the block): counts[r] = chunks of row r (0 when the row
// is not split). The scan kernels then turn counts into chunk_off (exclusive, chunk_off[rows] = total).
__device__ __forceinline__ void chunk_count_body(const MaxsimTrainParams& P) {
  const int64_t rows = P.row_end - P.row_begin;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = static_cast<int64_t>(P.offsets[(r + 1) * P.qblocks]) - static_cast<int64_t>(P.offsets[r * P.qblocks]);
    P.counts[r] = n > P.chunk ? static_cast<uint32_t>((n + P.chunk - 1) / P.chunk) : 0u;
  }
}

// Step 2 (one thread per row): chunk_row[c] = r for the chunks c of row r. The host bounds the
// chunks by max_chunks (sum over split rows of ceil(n / chunk) <= 2 * sources / chunk); the guard
// only keeps a wrong bound from writing out of bounds.
__device__ __forceinline__ void chunk_map_body(const MaxsimTrainParams& P) {
  const int64_t rows = P.row_end - P.row_begin;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c1 = min(static_cast<int64_t>(P.chunk_off[r + 1]), P.max_chunks);
    for (int64_t c = P.chunk_off[r]; c < c1; ++c) P.chunk_row[c] = static_cast<uint32_t>(r);
  }
}

// Step 3 (one warp per chunk): the fp64 sum of chunk c of its row over the columns [k_begin,
// k_begin + kChunk), into partials[c * kChunk + column - k_begin] (every column of the slice, also
// those >= dim: combine never stores them).
template <typename T>
__device__ __forceinline__ void gather_split_scalar(const MaxsimTrainParams& P) {
  const int lane = threadIdx.x & 31;
  const int64_t rows = P.row_end - P.row_begin;
  const int64_t total = min(static_cast<int64_t>(P.chunk_off[rows]), P.max_chunks);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); c < total; c += warps) {
    const int64_t r = P.chunk_row[c];
    const int64_t begin = P.offsets[r * P.qblocks];
    const int64_t end = P.offsets[(r + 1) * P.qblocks];
    const int64_t e_begin = begin + (c - static_cast<int64_t>(P.chunk_off[r])) * P.chunk;
    const int64_t e_end = min(end, e_begin + P.chunk);
    double acc[kVec];
#pragma unroll
    for (int m = 0; m < kVec; ++m) acc[m] = 0.0;
    sum_sources<T>(P, e_begin, e_end, P.k_begin, lane, acc);
#pragma unroll
    for (int m = 0; m < kVec; ++m) P.partials[c * kChunk + lane + 32 * m] = acc[m];
  }
}

template <typename T>
__device__ __forceinline__ void gather_split_vec(const MaxsimTrainParams& P) {
  __shared__ Src staged[kWarps][32];
  const int lane = threadIdx.x & 31;
  Src* st = staged[threadIdx.x >> 5];
  const int col = static_cast<int>(P.k_begin) + 4 * lane;
  const bool active = col < P.dim;
  const int64_t rows = P.row_end - P.row_begin;
  const int64_t total = min(static_cast<int64_t>(P.chunk_off[rows]), P.max_chunks);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); c < total; c += warps) {
    const int64_t r = P.chunk_row[c];
    const int64_t begin = P.offsets[r * P.qblocks];
    const int64_t end = P.offsets[(r + 1) * P.qblocks];
    const int64_t e_begin = begin + (c - static_cast<int64_t>(P.chunk_off[r])) * P.chunk;
    const int64_t e_end = min(end, e_begin + P.chunk);
    double acc[kVec];
#pragma unroll
    for (int m = 0; m < kVec; ++m) acc[m] = 0.0;
    sum_sources_vec<T>(P, static_cast<uint32_t>(e_begin), static_cast<uint32_t>(e_end), col, active, st, lane, acc);
    double2* out = reinterpret_cast<double2*>(P.partials + c * kChunk + 4 * lane);
    out[0] = make_double2(acc[0], acc[1]);
    out[1] = make_double2(acc[2], acc[3]);
  }
}

template <typename T>
__device__ __forceinline__ void gather_split_body(const MaxsimTrainParams& P) {
  if ((P.dim & 3) == 0) {
    gather_split_vec<T>(P);
  } else {
    gather_split_scalar<T>(P);
  }
}

// Step 4 (one warp per row of the block, lane l over the columns k_begin + 4 l + m, whatever dim: the
// partials are by column): split rows add their chunk sums in chunk order (kCombineAhead chunks'
// loads in flight) and write the columns [k_begin, k_begin + kChunk) of the row once.
constexpr int kCombineAhead = 4;
__device__ __forceinline__ void combine_body(const MaxsimTrainParams& P) {
  const int lane = threadIdx.x & 31;
  const int64_t dim = P.dim;
  const int64_t rows = P.row_end - P.row_begin;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t k = P.k_begin + 4 * lane;
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); w < rows; w += warps) {
    const int64_t c0 = P.chunk_off[w];
    const int64_t c1 = min(static_cast<int64_t>(P.chunk_off[w + 1]), P.max_chunks);
    if (c0 >= c1) continue;  // not split (uniform over the warp)
    const int64_t r = P.row_begin + w;
    const double2* part = reinterpret_cast<const double2*>(P.partials + 4 * lane);  // chunk c: part[c * kChunk / 2 + h]
    double t[kVec];
    {
      const double2 a = part[c0 * (kChunk / 2)], b = part[c0 * (kChunk / 2) + 1];
      t[0] = a.x;
      t[1] = a.y;
      t[2] = b.x;
      t[3] = b.y;
    }
    for (int64_t c = c0 + 1; c < c1; c += kCombineAhead) {
      double2 v[kCombineAhead][2];
#pragma unroll
      for (int u = 0; u < kCombineAhead; ++u) {
        if (c + u < c1) {
          v[u][0] = part[(c + u) * (kChunk / 2)];
          v[u][1] = part[(c + u) * (kChunk / 2) + 1];
        }
      }
#pragma unroll
      for (int u = 0; u < kCombineAhead; ++u) {
        if (c + u < c1) {  // uniform
          t[0] = __dadd_rn(t[0], v[u][0].x);
          t[1] = __dadd_rn(t[1], v[u][0].y);
          t[2] = __dadd_rn(t[2], v[u][1].x);
          t[3] = __dadd_rn(t[3], v[u][1].y);
        }
      }
    }
    if ((dim & 3) == 0) {
      if (k < dim) {
        *reinterpret_cast<float4*>(P.dd + r * dim + k) =
            make_float4(__double2float_rn(t[0]), __double2float_rn(t[1]), __double2float_rn(t[2]), __double2float_rn(t[3]));
      }
    } else {
#pragma unroll
      for (int m = 0; m < kVec; ++m) {
        if (k + m < dim) P.dd[r * dim + k + m] = __double2float_rn(t[m]);
      }
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
    const int32_t t = load_am(P, slot);
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
// The gathers (dq, dd_gather, dd_gather_split): at most 64 registers, 32 warps per SM.
extern "C" __global__ void __launch_bounds__(256, 4) maxsim_train_dq_f32(const MaxsimTrainParams p) {
  maxsim_train::dq_body<float>(p);
}
extern "C" __global__ void __launch_bounds__(maxsim_train::kWgThreads, 1) maxsim_train_fwd_wgmma_f16(const MaxsimTrainParams p) {
  maxsim_train::fwd_wgmma_body<maxsim::F16, false>(p, nullptr);
}
extern "C" __global__ void __launch_bounds__(maxsim_train::kWgThreads, 1) maxsim_train_fwd_wgmma_bf16(const MaxsimTrainParams p) {
  maxsim_train::fwd_wgmma_body<maxsim::BF16, false>(p, nullptr);
}
// the documents' tensor map (box [64, MAXSIM_TRAIN_FWD_WGMMA_TILE]) is the second parameter
extern "C" __global__ void __launch_bounds__(maxsim_train::kWgThreads, 1)
    maxsim_train_fwd_wgmma_tma_f16(const MaxsimTrainParams p, const __grid_constant__ maxsim::TmaMap docs_map) {
  maxsim_train::fwd_wgmma_body<maxsim::F16, true>(p, &docs_map);
}
extern "C" __global__ void __launch_bounds__(maxsim_train::kWgThreads, 1)
    maxsim_train_fwd_wgmma_tma_bf16(const MaxsimTrainParams p, const __grid_constant__ maxsim::TmaMap docs_map) {
  maxsim_train::fwd_wgmma_body<maxsim::BF16, true>(p, &docs_map);
}
extern "C" __global__ void __launch_bounds__(128) maxsim_train_fwd_sum(const MaxsimTrainParams p) {
  maxsim_train::fwd_sum_body(p);
}
extern "C" __global__ void __launch_bounds__(256, 4) maxsim_train_dq_f16(const MaxsimTrainParams p) {
  maxsim_train::dq_body<__half>(p);
}
extern "C" __global__ void __launch_bounds__(256, 4) maxsim_train_dq_bf16(const MaxsimTrainParams p) {
  maxsim_train::dq_body<__nv_bfloat16>(p);
}
extern "C" __global__ void __launch_bounds__(128) maxsim_train_dd_count(const MaxsimTrainParams p) {
  maxsim_train::walk_sources<false>(p);
}
extern "C" __global__ void __launch_bounds__(maxsim_train::kWalkThreads) maxsim_train_dd_count_block(const MaxsimTrainParams p) {
  maxsim_train::walk_block<false>(p);
}
extern "C" __global__ void __launch_bounds__(maxsim_train::kWalkThreads) maxsim_train_dd_place_block(const MaxsimTrainParams p) {
  maxsim_train::walk_block<true>(p);
}
extern "C" __global__ void __launch_bounds__(1024) maxsim_train_dd_scan_reduce(const MaxsimTrainParams p) {
  maxsim_train::scan_reduce_body(p);
}
extern "C" __global__ void __launch_bounds__(1024) maxsim_train_dd_scan_top(const MaxsimTrainParams p) {
  maxsim_train::scan_top_body(p);
}
extern "C" __global__ void __launch_bounds__(1024) maxsim_train_dd_scan_down(const MaxsimTrainParams p) {
  maxsim_train::scan_down_body(p);
}
extern "C" __global__ void __launch_bounds__(256) maxsim_train_dd_stats(const MaxsimTrainParams p) {
  maxsim_train::stats_body(p);
}
extern "C" __global__ void __launch_bounds__(128) maxsim_train_dd_place(const MaxsimTrainParams p) {
  maxsim_train::walk_sources<true>(p);
}
extern "C" __global__ void __launch_bounds__(128, 8) maxsim_train_dd_gather_f32(const MaxsimTrainParams p) {
  maxsim_train::gather_body<float>(p);
}
extern "C" __global__ void __launch_bounds__(128, 8) maxsim_train_dd_gather_f16(const MaxsimTrainParams p) {
  maxsim_train::gather_body<__half>(p);
}
extern "C" __global__ void __launch_bounds__(128, 8) maxsim_train_dd_gather_bf16(const MaxsimTrainParams p) {
  maxsim_train::gather_body<__nv_bfloat16>(p);
}
extern "C" __global__ void __launch_bounds__(256) maxsim_train_dd_chunk_count(const MaxsimTrainParams p) {
  maxsim_train::chunk_count_body(p);
}
extern "C" __global__ void __launch_bounds__(256) maxsim_train_dd_chunk_map(const MaxsimTrainParams p) {
  maxsim_train::chunk_map_body(p);
}
extern "C" __global__ void __launch_bounds__(128, 8) maxsim_train_dd_gather_split_f32(const MaxsimTrainParams p) {
  maxsim_train::gather_split_body<float>(p);
}
extern "C" __global__ void __launch_bounds__(128, 8) maxsim_train_dd_gather_split_f16(const MaxsimTrainParams p) {
  maxsim_train::gather_split_body<__half>(p);
}
extern "C" __global__ void __launch_bounds__(128, 8) maxsim_train_dd_gather_split_bf16(const MaxsimTrainParams p) {
  maxsim_train::gather_split_body<__nv_bfloat16>(p);
}
extern "C" __global__ void __launch_bounds__(128) maxsim_train_dd_combine(const MaxsimTrainParams p) {
  maxsim_train::combine_body(p);
}
extern "C" __global__ void __launch_bounds__(128) maxsim_train_dd_atomic(const MaxsimTrainParams p) {
  maxsim_train::atomic_body(p);
}
