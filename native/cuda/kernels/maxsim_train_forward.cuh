// maxsim_train_forward.cuh: the argmax forwards: CUDA cores (fwd_body), tensor cores (mma.sync, wgmma) and the
// score-only sum forward.
// Included by maxsim_train.cu only, after its shared helpers (namespace maxsim_train, kThreads,
// load_f32, store_am / load_am, ...); the kernels' extern "C" entry points stay in maxsim_train.cu.
#pragma once

namespace maxsim_train {

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

}  // namespace maxsim_train
