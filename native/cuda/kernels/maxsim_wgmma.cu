// maxsim_wgmma.cu: warp-specialized Hopper MaxSim (sm_90a only) for the compute-bound regime
// (long queries, ColPali shapes, all-pairs). On sm_80 the bodies compile empty (never launch there).
//
// Design. CTA = 1 producer warpgroup + NCONS consumer warpgroups. The producer streams document
// tiles of TN tokens x 128 dims (fp16/bf16) into an S-stage shared-memory ring with 16-byte cp.async,
// written in the 128-byte-swizzled K-major layout that wgmma reads directly (two 64-element K halves
// per stage; zero-fill past the document and past dim); each producer thread then arrives on the
// stage's "full" mbarrier through cp.async.mbarrier.arrive, which fires when its copies have landed.
// Consumers wait on "full", issue fence.proxy.async (generic-proxy writes -> async-proxy reads), run 8
// wgmma.m64nTNk16 per m-block (A = query tokens from registers, B = document tile from shared memory;
// MB m-blocks per warpgroup issued as separate commit groups so the fold of block 0 overlaps the
// HGMMAs of block 1), arrive on "empty" (one per warp of the tile's group), and fold the
// accumulator tile into a per-row running max (columns past the document length -> -inf, never
// multiplied).
// Query rows: each consumer warp owns MB 16-row slices = (query, 16-token chunk), so one pass covers
// 64*NCONS*MB query rows, packing several queries for all-pairs scoring. Loop order is pass-outer:
// a CTA loads the A fragments of a pass once, then streams all of its documents; per-(query, doc)
// sums that span passes are carried in the scores array itself (written and re-read by the same
// warp: no extra device memory). End of each (document, pass): quad max, rows past the query
// dropped, warp sum, one named barrier over the consumers (PP: over the group), then lanes of the
// first consumer warp (one lane per query segment) sum the slices in slice order: fixed order, no
// atomics, bitwise deterministic.
// Registers: with two consumer warpgroups the producer gives registers to the consumers (setmaxnreg,
// 40 / 232 per thread; maxsim_sm90.cuh), which is what lets w2m2n128 hold two m-blocks of 128-column
// accumulators plus their A fragments without spilling.
// Persistent: CTA c handles documents c, c + gridDim.x, ...; zero-length documents get -inf and cost
// no tile. The K loop always runs all 8 k16 steps (dim < 128 is zero-filled): a runtime guard there
// splits the HGMMA chain and ptxas serializes every wgmma (seen in SASS, ~3x slower).
//
// LAUNCH CONTRACT (the numbers: maxsim_registry.h, and variants.json made from it)
//   block       = (128 * (NCONS + 1), 1, 1)            [384, or 640 for w4n64]
//   grid        = (num_sms, 1, 1)                       (persistent, 1 CTA per SM; any grid >= 1 is correct)
//   dynamic smem= S * TN * 256 + 1024 bytes (1024 = alignment slack); host raises
//                 CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to it. Static smem: 1 KiB (total per CTA = dynamic + 1 KiB).
//   requires    : sm_90a device (cc 9.0) ONLY: the sm_80 cubin in the fatbin has an empty body and
//                 would silently write nothing; dim % 8 == 0 && 8 <= dim <= 128 (returns without
//                 writing otherwise; cost is that of dim = 128);
//                 tokens 16-byte aligned; fp16/bf16.
//                 queries q in [query_tile_offset, num_queries) are scored into scores[q*num_docs + b].
//   semantics   : zero-length document -> -INFINITY; zero-length query -> 0.
//   params      : max_query_length MUST be >= every query length of the launch (the query slicing
//                 uses it; tokens past it would be ignored). max_doc_length is not read.
#include "maxsim_epilogue.cuh"
#include "maxsim_mainloop.cuh"
#include "maxsim_producer.cuh"
#include "maxsim_registry.h"
#include "maxsim_rowmax.cuh"

namespace maxsim {

#if MAXSIM_HAS_WGMMA
// The producer's walk, shared by the TMA and cp.async producers: for each pass, each non-empty
// document of this CTA (under PP the consumer groups take turns), each tile: wait until its stage is
// free, then copy(stage, group, start, len, tile). Called by whole warps (DocWindow).
template <int NGRP, int TN, int S, class Copy>
__device__ __forceinline__ void produce_tiles(const MaxsimParams& p, int num_docs, int npass, uint64_t* empty_bar,
                                              Copy&& copy) {
  int t = 0;
  for (int pass = 0; pass < npass; ++pass) {
    int owner = 0;  // the consumer group of the next non-empty document (always 0 unless PP)
    DocWindow<true> win(p);
    for (int doc = blockIdx.x, i = 0; doc < num_docs; doc += gridDim.x, ++i) {
      int64_t start;
      const int len = win.at(p, i, &start);
      if (len <= 0) continue;
      const int grp = owner;
      owner = owner + 1 == NGRP ? 0 : owner + 1;
      const int ntiles = (len + TN - 1) / TN;
      for (int tile = 0; tile < ntiles; ++tile, ++t) {
        const int s = t % S;
        if (t >= S) mbar_wait(smem_u32(&empty_bar[s]), ((t / S) - 1) & 1);
        copy(s, grp, start, len, tile);
      }
    }
  }
}

#endif

// PP ("ping-pong"): instead of splitting the query rows of every document between the consumer
// warpgroups (which then meet at a barrier after each document and fold in lockstep, leaving the
// tensor cores idle meanwhile), each warpgroup holds all the rows of a pass and takes every NCONS-th
// non-empty document, so one warpgroup's fold and combine overlap the other's wgmma. The ring stays
// one sequence of tiles, but each group has its own "full" barrier per stage, signalled only for its
// tiles, and tracks that barrier's parity per stage itself: a group never waits on a phase that
// belongs to another group's tile (which would make the parity ambiguous), and it releases only its
// own tiles, so the ring is not held back until a group has finished its current document.
// TMA: the documents come through a tensor map (one elected producer lane issues two box loads per
// tile, the two 64-element K halves, and arms the "full" barrier with the tile's bytes) instead of
// 16-byte cp.async by every producer thread. map is null otherwise.
template <class E, int NCONS, int MB, int TN, int S, bool PP, bool TMA = false>
__device__ __forceinline__ void wgmma_body(const MaxsimParams& p, const TmaMap* map = nullptr) {
#if MAXSIM_HAS_WGMMA
  using T = typename E::Elem;
  constexpr int HALF = TN * 128;    // bytes of one 64-element K half of the tile
  constexpr int STAGE = 2 * HALF;   // bytes per stage (TN tokens x 128 dims x 2 B)
  constexpr int NCW = NCONS * 4;    // consumer warps
  constexpr int NGRP = PP ? NCONS : 1;  // consumer groups working on different documents
  constexpr int GW = NCW / NGRP;        // warps per group
  constexpr int SPP = GW * MB;          // 16-row query slices per pass (each group covers them all)
  constexpr int NACC = TN / 2;
  static_assert(TN % 64 == 0 && TN <= 256, "tile");
  extern __shared__ __align__(1024) unsigned char smem_dyn[];
  __shared__ __align__(8) uint64_t full_bar[NGRP][S];
  __shared__ __align__(8) uint64_t empty_bar[S];
  __shared__ float part[NGRP][2 * SPP];
  static_assert(SPP <= 32, "combine uses one lane per slice");
  static_assert(S <= 32, "consumers keep one parity bit per stage");

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const uint32_t sbase = (smem_u32(smem_dyn) + 1023u) & ~1023u;
  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      for (int g = 0; g < NGRP; ++g)
        // one (copy-completion) arrive per producer thread; TMA: the one armed arrive of the issuing lane
        mbar_init(smem_u32(&full_bar[g][s]), TMA ? 1 : 128);
      mbar_init(smem_u32(&empty_bar[s]), GW);        // one arrive per warp of the tile's group
    }
  }
  __syncthreads();

  const int dim = p.dim;
  const int num_docs = p.num_docs;
  const int nq = p.num_queries - p.query_tile_offset;
  if (nq <= 0 || dim > 128) return;
  const int cpq = max(1, (p.max_query_length + 15) >> 4);
  const int nslices = nq * cpq;
  const int npass = (nslices + SPP - 1) / SPP;
  const T* __restrict__ docs = static_cast<const T*>(p.docs);

  if (warp < 4) {
    // ------------------------------ producer warpgroup ------------------------------
    if constexpr (RegSplit<NCONS>::producer > 0) setmaxnreg_dec<RegSplit<NCONS>::producer>();
    if constexpr (TMA) {
      // one warp walks the documents (DocWindow shuffles need the whole warp), lane 0 issues
      if (warp == 0)
        produce_tiles<NGRP, TN, S>(p, num_docs, npass, empty_bar, [&](int s, int grp, int64_t start, int, int tile) {
          if (lane == 0) {
            // rows past the document are the next document's (masked by the consumers' fold) or
            // past the set (zeros); dims past dim are zeros
            const uint32_t fb = smem_u32(&full_bar[grp][s]);
            const int row = static_cast<int>(start) + tile * TN;  // < 2^31: the runtime checks
            mbar_arrive_expect_tx(fb, STAGE);
            tma_load_2d(sbase + s * STAGE, map, 0, row, fb);
            tma_load_2d(sbase + s * STAGE + HALF, map, 64, row, fb);
          }
          __syncwarp();
        });
    } else {
      // Each thread copies one 16-byte chunk (dims 8c .. 8c+7) of rows prow, prow + 8, ... of a tile
      // (copy_chunk_rows): with 128-byte rows the swizzle term (chunk ^ row % 8) is the same for all
      // of them, so the destination is fixed per thread up to a 1024-byte step.
      const int prow = tid >> 4, pchunk = tid & 15;
      const bool kok = pchunk * 8 < dim;  // wgmma reads all 128 dims: zero-fill past dim
      const uint32_t pdst = (pchunk >> 3) * HALF + prow * 128 + (((pchunk & 7) ^ prow) << 4);
      const int64_t row_step = 8 * (int64_t)dim;
      produce_tiles<NGRP, TN, S>(p, num_docs, npass, empty_bar, [&](int s, int grp, int64_t start, int len, int tile) {
        const uint32_t dst = sbase + s * STAGE + pdst;
        const int row0 = tile * TN + prow;
        const int rows_left = len - row0;  // copy `it` holds row row0 + 8 * it
        const T* src = docs + (start + row0) * (int64_t)dim + pchunk * 8;
        copy_chunk_rows<TN / 8, 8, 8 * 128>(dst, src, row_step, rows_left, kok, docs);
        // the tile is "full" when the copies land, whatever the producer does next: consumers are
        // not held back until later tiles are issued
        cp_async_mbar_arrive(smem_u32(&full_bar[grp][s]));
      });
      cp_async_wait<0>();
    }
  } else {
    // ------------------------------ consumer warpgroups ------------------------------
    if constexpr (RegSplit<NCONS>::consumer > 0) setmaxnreg_inc<RegSplit<NCONS>::consumer>();
    const int cw = warp - 4;          // consumer warp 0 .. NCW-1
    const int grp = cw / GW;          // consumer group (always 0 unless PP)
    const int gw = cw % GW;           // warp within the group
    const int gtid = tid - 128 - grp * GW * 32;  // thread within the group
    const T* __restrict__ queries = static_cast<const T*>(p.queries);
    const uint64_t desc_base = (1ull << 62) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 16);
    uint32_t a[MB][8][4];
    float acc[MB][NACC];
#pragma unroll
    for (int m = 0; m < MB; ++m)
#pragma unroll
      for (int i = 0; i < NACC; ++i) acc[m][i] = 0.f;
    int t = 0;   // ring tile counter (all groups' tiles: the stage is t % S)
    int dp = 0;  // (document, pass) counter: parity selects the part[] half
    uint32_t full_phase = 0;  // bit s: parity of this group's next wait on full_bar[grp][s]
    // Pass-outer order: the A fragments of a pass are loaded once per CTA (not once per document);
    // documents are re-streamed once per pass. Per-(query, doc) sums that span passes are carried in
    // the scores array itself (written and re-read by the same thread: no extra memory, fixed order).
    for (int pass = 0; pass < npass; ++pass) {
      // slice of m-block m of this warp: pass * SPP + m * GW + gw (SPP = slices per pass)
      int qlen[MB], row0[MB];
#pragma unroll
      for (int m = 0; m < MB; ++m) {
        const QuerySlice<16> sl(p, pass * SPP + m * GW + gw, nslices, cpq);
        qlen[m] = sl.qlen;
        row0[m] = sl.row0;
        const T* qbase = queries + sl.start * (int64_t)dim;
#pragma unroll
        for (int ks = 0; ks < 8; ++ks)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int row = row0[m] + (lane >> 2) + (r & 1) * 8;
            const int k = ks * 16 + (lane & 3) * 2 + (r >> 1) * 8;
            uint32_t v = 0;
            if (row < qlen[m] && k < dim) v = *reinterpret_cast<const uint32_t*>(qbase + (int64_t)row * dim + k);
            a[m][ks][r] = v;
          }
      }
      int owner = 0;  // PP: the group of the next non-empty document (they take turns, as for the producer)
      DocWindow<false> win(p);
      for (int doc = blockIdx.x, i = 0; doc < num_docs; doc += gridDim.x, ++i) {
        const int len = win.at(p, i, nullptr);
        if (len <= 0) {
          if (pass == 0 && grp == 0)
            for (int ql = gtid; ql < nq; ql += GW * 32)
              p.scores[(int64_t)(p.query_tile_offset + ql) * num_docs + doc] = -INFINITY;
          continue;
        }
        const int ntiles = (len + TN - 1) / TN;
        if (PP) {
          const bool mine = owner == grp;
          owner = owner + 1 == NGRP ? 0 : owner + 1;
          if (!mine) {
            t += ntiles;  // another group's document: its tiles pass this group by
            continue;
          }
        }
        float rmax[MB][2];
#pragma unroll
        for (int m = 0; m < MB; ++m) rmax[m][0] = rmax[m][1] = -INFINITY;
        for (int tile = 0; tile < ntiles; ++tile, ++t) {
          const int s = t % S;
          mbar_wait(smem_u32(&full_bar[grp][s]), (full_phase >> s) & 1);
          full_phase ^= 1u << s;
          // cp.async writes through the generic proxy, wgmma reads through the async one (TMA writes
          // through the async proxy already)
          if constexpr (!TMA) fence_proxy_async();
          const uint32_t st = sbase + s * STAGE;
#pragma unroll
          for (int m = 0; m < MB; ++m)
#pragma unroll
            for (int i = 0; i < NACC; ++i) reg_fence(acc[m][i]);
          wgmma_fence();
          // all 8 K steps unconditionally (zero-filled past dim): a runtime guard here splits the
          // HGMMA chain into basic blocks and ptxas then serializes every wgmma (seen in SASS, 3x slower)
          const uint64_t desc0 = desc_base | (uint64_t)((st >> 4) & 0x3FFF);
          // k step ks: K half ks / 4, 32 bytes per k16 step within it
          wgmma_tile<E, TN, MB, 8>(acc, a, desc0, [](int ks) { return ((ks >> 2) * HALF) + (ks & 3) * 32; });
          const int rem = len - tile * TN;
          auto value = [&](int m, int j) { return acc[m][j]; };
          float before[MB][2];  // the row maxima before this tile, for the exact redo below
#pragma unroll
          for (int m = 0; m < MB; ++m) before[m][0] = rmax[m][0], before[m][1] = rmax[m][1];
#pragma unroll
          for (int m = 0; m < MB; ++m) {
            // m-block m done when at most MB-1-m groups are pending: fold it while later ones run
            wgmma_mblock_done<MB, NACC>(acc, m, lane, smem_u32(&empty_bar[s]));
            if (rem >= TN) {
              // one VIMNMX3 per two values on their bit patterns (max3_bits), checked below
              fold_full_bits<MB, NACC>(rmax, m, value);
            } else {
              fold_masked<MB, NACC>(rmax, m, rem, lane, value);
            }
          }
          // a negative (or NaN) row maximum left the bit-pattern max inexact: redo the tile with fmaxf
          // (the accumulators stay intact until the next tile's wgmma)
          if (rem >= TN) redo_inexact_rows<MB, NACC>(rmax, before, value);
        }
        // row max over the quad, drop rows past the query, warp sum (fixed order)
#pragma unroll
        for (int m = 0; m < MB; ++m) {
          float r0 = rmax[m][0], r1 = rmax[m][1];
          r0 = fmaxf(r0, __shfl_xor_sync(0xffffffffu, r0, 1));
          r0 = fmaxf(r0, __shfl_xor_sync(0xffffffffu, r0, 2));
          r1 = fmaxf(r1, __shfl_xor_sync(0xffffffffu, r1, 1));
          r1 = fmaxf(r1, __shfl_xor_sync(0xffffffffu, r1, 2));
          const int rowa = row0[m] + (lane >> 2);
          float partial = 0.f;
          if ((lane & 3) == 0) {
            if (rowa < qlen[m]) partial += r0;
            if (rowa + 8 < qlen[m]) partial += r1;
          }
          partial = warp_sum(partial);
          if (lane == 0) part[grp][(dp & 1) * SPP + m * GW + gw] = partial;
        }
        // One barrier per (document, pass); part[] is double-buffered by dp parity, so the next
        // writes to this half come after the next barrier, which the combining warp reaches only
        // after its reads. Combine: lane w of the group's first warp ends a segment (query) -> sums
        // that query's slices of this pass in slice order (continuing the carried partial from the
        // scores array if the query began in an earlier pass). Same order as a sequential sum:
        // deterministic.
        named_bar(1 + grp, GW * 32);
        if (gw == 0 && lane < SPP) combine_pass<SPP>(p, part[grp], dp, pass, nslices, cpq, lane, doc, num_docs);
        ++dp;
      }
    }
  }
#else
  // Built for a GPU without wgmma (the sm_80 cubin): the dispatcher never picks this variant there,
  // and a launch that does anyway must fail loudly rather than leave the scores unwritten.
  __trap();
#endif
}

}  // namespace maxsim

#define MAXSIM_WGMMA_ENTRY(NAME, E, NCONS, MB, TN, S, PP)                                          \
  extern "C" __global__ void __launch_bounds__(MAXSIM_WGMMA_BLOCK(NCONS), 1) NAME(const MaxsimParams p) { \
    maxsim::wgmma_body<maxsim::E, NCONS, MB, TN, S, PP>(p);                                               \
  }
// TMA variants: the documents' tensor map is the second parameter (variants.json "tmaBox": [64, TN])
#define MAXSIM_WGMMA_TMA_ENTRY(NAME, E, NCONS, MB, TN, S, PP)                                           \
  extern "C" __global__ void __launch_bounds__(MAXSIM_WGMMA_BLOCK(NCONS), 1)                                    \
      NAME(const MaxsimParams p, const __grid_constant__ maxsim::TmaMap docs_map) {                     \
    maxsim::wgmma_body<maxsim::E, NCONS, MB, TN, S, PP, true>(p, &docs_map);                                    \
  }

// one registry row (MAXSIM_WGMMA_VARIANTS in maxsim_registry.h, with the numbers and the smem formula)
// -> the f16 and bf16 entry points; then, for the rows that say so, their TMA twins
#define MAXSIM_WGMMA_ROW(SFX, NCONS, MB, TN, S, PP, TMA)                  \
  MAXSIM_WGMMA_ENTRY(maxsim_wgmma_##SFX##_f16, F16, NCONS, MB, TN, S, PP) \
  MAXSIM_WGMMA_ENTRY(maxsim_wgmma_##SFX##_bf16, BF16, NCONS, MB, TN, S, PP)
#define MAXSIM_WGMMA_TMA_ROW(SFX, NCONS, MB, TN, S, PP, TMA)                                     \
  MAXSIM_IF_##TMA(MAXSIM_WGMMA_TMA_ENTRY(maxsim_wgmma_tma_##SFX##_f16, F16, NCONS, MB, TN, S, PP) \
                      MAXSIM_WGMMA_TMA_ENTRY(maxsim_wgmma_tma_##SFX##_bf16, BF16, NCONS, MB, TN, S, PP))
MAXSIM_WGMMA_VARIANTS(MAXSIM_WGMMA_ROW)
MAXSIM_WGMMA_VARIANTS(MAXSIM_WGMMA_TMA_ROW)
