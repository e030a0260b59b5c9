// maxsim_wgmma.cuh: the one warp-specialized Hopper MaxSim body (sm_90a only), over an element-type
// policy E (maxsim_policy.cuh): fp16 / bf16 (maxsim_wgmma.cu) and int8 / fp8 e4m3 (maxsim_8bit.cuh).
// On sm_80 it compiles to a trap (never dispatched there).
//
// Design. CTA = 1 producer warpgroup + NCONS consumer warpgroups. The producer streams document
// tiles of TN tokens x 128 elements into an S-stage shared-memory ring with 16-byte cp.async (or one
// TMA box per 128-byte K atom), written in the 128-byte-swizzled K-major layout that wgmma reads
// directly (a token row is 128 * E::kBytes bytes: two 128-byte K atoms for 16-bit types, one for
// 8-bit; zero-fill past the document and past dim); each producer thread then arrives on the stage's
// "full" mbarrier through cp.async.mbarrier.arrive, which fires when its copies have landed. Scaled
// types (E::kScaled: int8, fp8) also copy the tile's TN document scales into a per-stage array.
// Consumers wait on "full", fence the async proxy, run 128 * kBytes / 32 wgmma k steps per m-block
// (m64nTNk16 for 16-bit, m64nTNk32 for 8-bit; A = query tokens from registers, B = the tile by
// descriptor; MB m-blocks per warpgroup issued as separate commit groups so the fold of block 0
// overlaps the wgmma of block 1), arrive on "empty" (one per warp of the tile's group), and fold the
// accumulator tile into a per-row running max (value = float(acc), times the column's document
// scale for scaled types; columns past the document length -> -inf, never multiplied). Every type
// accumulates from zero (scale-d = 0 on the first k step): int8 in int32 (converted by I2FP), the
// others in fp32.
// Query rows: each consumer warp owns MB 16-row slices = (query, 16-token chunk), so one pass covers
// 64*NCONS*MB query rows, packing several queries for all-pairs scoring. Loop order is pass-outer:
// a CTA loads the A fragments of a pass once, then streams all of its documents; per-(query, doc)
// sums that span passes are carried in the scores array itself (written and re-read by the same
// warp: no extra device memory). End of each (document, pass): quad max, times the query-row scale
// (scaled types), rows past the query dropped, warp sum, one named barrier over the consumers (PP:
// over the group), then lanes of the first consumer warp (one lane per query segment) sum the slices
// in slice order: fixed order, no atomics, bitwise deterministic.
// Registers: with two consumer warpgroups the producer gives registers to the consumers (setmaxnreg,
// 40 / 232 per thread; maxsim_sm90.cuh), which is what lets w2m2n128 hold two m-blocks of 128-column
// accumulators plus their A fragments without spilling.
// Persistent: CTA c handles documents c, c + gridDim.x, ...; zero-length documents get -inf and cost
// no tile. The K loop always runs every k step (dim < 128 is zero-filled): a runtime guard there
// splits the wgmma chain and ptxas serializes every wgmma (seen in SASS, ~3x slower).
//
// PP ("ping-pong", 16-bit rows only): instead of splitting the query rows of every document between
// the consumer warpgroups (which then meet at a barrier after each document and fold in lockstep,
// leaving the tensor cores idle meanwhile), each warpgroup holds all the rows of a pass and takes
// every NCONS-th non-empty document, so one warpgroup's fold and combine overlap the other's wgmma.
// The ring stays one sequence of tiles, but each group has its own "full" barrier per stage,
// signalled only for its tiles, and tracks that barrier's parity per stage itself: a group never
// waits on a phase that belongs to another group's tile, and it releases only its own tiles.
// TMA: the documents come through a 2-D tensor map (box [128 bytes, TN rows], 128-byte swizzle): one
// elected producer lane arms "full" with the tile's bytes and issues one box per K atom; for scaled
// types the producer warp's 32 lanes copy the tile's scales with 4-byte cp.async. (A 1-D tensor map
// of the scales raised an illegal instruction on inputs whose documents start off a multiple of four
// tokens: bench/NOTES.md, '8-bit through TMA'.) map is null otherwise.
// DSCALE (scaled types, TMA rows): the document-scale twins, for corpora whose documents each have
// one scale shared by all their tokens (quantize(..., { scales: 'document' })). The producer copies
// one scale per stage (the document's first token's) instead of TN; the fold takes the row max of the
// raw dots (int8: an exact integer max, any sign; fp8: on bit patterns, as the per-token fold) and
// multiplies by the scale once per row, at the document's end. float(max_j acc_j) * s equals
// max_j float(acc_j) * s for s >= 0 (conversion and product round monotonically), so on such corpora
// the scores are the per-token kernels', bit for bit.
//
// LAUNCH CONTRACT (the numbers: maxsim_registry.h, and variants.json made from it)
//   block       = (128 * (NCONS + 1), 1, 1)            [384, 512 for w3, 640 for w4n64]
//   grid        = (num_sms, 1, 1)                       (persistent, 1 CTA per SM; any grid >= 1 is correct)
//   dynamic smem= S * TN * (128 * kBytes + 4 * kScaled) + 1024 bytes (1024 = alignment slack): 16-bit
//                 S * TN * 256 + 1024, 8-bit S * TN * 132 + 1024; the host raises
//                 CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to it. Static smem about 1 KiB.
//   requires    : sm_90a device (cc 9.0) ONLY: the sm_80 cubin in the fatbin traps;
//                 dim <= 128 and dim % 8 == 0 (16-bit) / dim % 16 == 0 (8-bit) (returns without
//                 writing when dim > 128; cost is that of dim = 128); tokens 16-byte aligned, scales
//                 4-byte aligned (query_scales / doc_scales set for scaled types).
//                 queries q in [query_tile_offset, num_queries) are scored into scores[q*num_docs + b].
//   semantics   : zero-length document -> -INFINITY; zero-length query -> 0.
//   params      : max_query_length MUST be >= every query length of the launch (the query slicing
//                 uses it; tokens past it would be ignored). max_doc_length is not read.
#pragma once
#include <climits>
#include <type_traits>

#include "maxsim_epilogue.cuh"
#include "maxsim_mainloop.cuh"
#include "maxsim_producer.cuh"
#include "maxsim_rowmax.cuh"
#include "maxsim_sm90.cuh"

namespace maxsim {

// The scaled types' producer document lookup, one load per document (it also copies scales, and a
// DocWindow's registers spill at w3m2n64's producer budget of 24); the producer runs S tiles ahead,
// which hides the loads' latency. at() takes the document itself, not DocWindow's index.
struct DocDirect {
  __device__ __forceinline__ DocDirect(const MaxsimParams&, int, int) {}
  __device__ __forceinline__ int at(const MaxsimParams& p, int doc, int64_t* start) const {
    const int len = p.doc_lengths[doc];
    if (len > 0) *start = p.doc_starts[doc];
    return len;
  }
};

// A CTA's work units (pass, document group: documents first, first + step(), ...), unit u = pass *
// groups + first taking CTA u % gridDim.x. GROUPED (training): groups given, 64-bit unit arithmetic;
// else one group per CTA (groups = gridDim.x: pass 0, 1, ... over the documents blockIdx.x,
// blockIdx.x + gridDim.x, ...), which costs no division and no registers beyond the pass.
// Pass-inner (inner = npass > 0, scoring where no query's slices span passes): unit u = group *
// npass + pass, so the CTAs of a wave stream the same documents in different passes and all but the
// first read them from L2; the walk ends (pass = inner) past the last group.
template <bool GROUPED>
struct UnitWalk {
  int64_t u;
  int groups, pass, first, inner;
  __device__ __forceinline__ UnitWalk(int g, int in) : u(blockIdx.x), groups(g), inner(in) { place(); }
  __device__ __forceinline__ int step() const { return GROUPED || inner ? groups : (int)gridDim.x; }
  __device__ __forceinline__ void place() {
    if (inner) {
      pass = static_cast<int>(u % inner);
      first = static_cast<int>(u / inner);
      if (first >= groups) pass = inner;
    } else {
      pass = GROUPED ? static_cast<int>(u / groups) : 0;
      first = GROUPED ? static_cast<int>(u % groups) : (int)blockIdx.x;
    }
  }
  __device__ __forceinline__ void next() {
    if (GROUPED || inner) {
      u += gridDim.x;
      place();
    } else {
      ++pass;
    }
  }
};

#if MAXSIM_HAS_WGMMA
// The producer's walk: for each work unit of this CTA (a pass over a document group: see the body),
// each non-empty document of the unit (under PP the consumer groups take turns), each tile: wait
// until its stage is free, then copy(stage, group, start, len, tile). Called by whole warps (DocWindow).
template <int NGRP, int TN, int S, bool GROUPED, class Docs, class Copy>
__device__ __forceinline__ void produce_tiles(const MaxsimParams& p, int num_docs, int npass, int groups, int inner,
                                              uint64_t* empty_bar, Copy&& copy) {
  int t = 0;
  for (UnitWalk<GROUPED> w(groups, inner); w.pass < npass; w.next()) {
    int owner = 0;  // the consumer group of the next non-empty document (always 0 unless PP)
    Docs win(p, w.first, w.step());
    for (int doc = w.first, i = 0; doc < num_docs; doc += w.step(), ++i) {
      int64_t start;
      int len;
      if constexpr (std::is_same_v<Docs, DocDirect>) len = win.at(p, doc, &start);
      else len = win.at(p, i, &start);
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

// The scoring kernels' epilogue: sum_i max_j into scores (the default of wgmma_body's Out).
struct ScoreSum {};
// The training forward's epilogue (maxsim_train.cu): per (query q, document b, query token i) the
// row's maximum and its lowest document token, into best[slot] and argmax[slot] (int16 when
// argmax16), slot = (q * num_docs + b) * stride + i; the fp64 score sum is maxsim_train_fwd_sum's.
// The work units deal each pass's documents into doc_groups groups (documents g, g + doc_groups, ...)
// instead of one per CTA, so that few passes still fill the GPU.
struct ArgmaxOut {
  float* best;
  void* argmax;
  int64_t stride;
  int argmax16;
  int doc_groups;
};

// The body's numbers, from its template parameters.
template <class E_, int NCONS_, int MB_, int TN_, int S_, bool PP_, bool TMA_, bool DSCALE_, class Out_>
struct WgCfg {
  using E = E_;
  using Out = Out_;
  using T = typename E::Elem;
  using Acc = typename E::Acc;
  static constexpr int NCONS = NCONS_, MB = MB_, TN = TN_, S = S_;
  static constexpr bool PP = PP_, TMA = TMA_, DSCALE = DSCALE_;
  static constexpr bool SCALED = E::kScaled;
  static constexpr int NATOM = E::kBytes;      // 128-byte K atoms per token row (128 elements)
  static constexpr int EPC = 16 / E::kBytes;   // elements per 16-byte chunk
  static constexpr int NKS = 4 * NATOM;        // wgmma k steps of 32 bytes per tile
  static constexpr int HALF = TN * 128;        // bytes of one K atom of the tile
  static constexpr int STAGE = NATOM * HALF;   // bytes per stage (the scales live after the S stages)
  static constexpr int NCW = NCONS * 4;        // consumer warps
  static constexpr int NGRP = PP ? NCONS : 1;  // consumer groups working on different documents
  static constexpr int GW = NCW / NGRP;        // warps per group
  static constexpr int SPP = GW * MB;          // 16-row query slices per pass (each group covers them all)
  static constexpr int NACC = TN / 2;
  // int8 dots convert with I2FP (full rate on sm_90) from an accumulator that starts at zero: no bias
  // to set after each fold (the mma.sync bodies' FADD trick costs a MOV per value here; H200: 1.152
  // vs 1.285 ms at 32,32,300; bench/NOTES.md, 'Format and exact conversion')
  static constexpr bool BIAS = false;
  static constexpr bool IMAX = DSCALE && !E::kFp8 && SCALED;  // int8 document scales: row max on int32 dots
  static constexpr bool ARGMAX = std::is_same_v<Out, ArgmaxOut>;
  static_assert(TN % 64 == 0 && TN <= 256, "tile");
  static_assert(!DSCALE || (TMA && SCALED), "document-scale twins exist for the scaled TMA kernels only");
  static_assert(!PP || !SCALED, "no scaled ping-pong row: add one with its tests");
  static_assert(!ARGMAX || (!SCALED && !PP), "the argmax epilogue is the 16-bit training forward's");
  static_assert(SPP <= 32, "combine uses one lane per slice");
  static_assert(S <= 32, "consumers keep one parity bit per stage");
  // Pass-inner work units (UnitWalk) for scoring; not under ping-pong, whose groups hold all rows of
  // one pass (a second pass there means more than 128 query rows, where the rules take w2/w3), nor
  // where the walk's registers spill (w4n64, the 8-bit n128 tiles; long queries span passes there)
  static constexpr bool INNER = !PP && !ARGMAX && NCONS <= 3 && TN == 64;
  // the walks' first document and step: the constructor's (registers) where units are groups
  static constexpr bool WALK = ARGMAX || INNER;
  // the producer walk's document lookup (DocDirect: see above)
  using Docs = std::conditional_t<SCALED, DocDirect, DocWindow<true, WALK>>;
};

// What the warpgroups share: the ring's barriers and the consumers' partial sums (static shared
// memory, one block per kernel: wg_shared<C>() returns it), and the ring itself (sbase: 1024-aligned
// shared address of the dynamic shared memory; the scaled types' [S][TN] document scales after it).
template <class C>
struct WgShared {
  alignas(8) uint64_t full_bar[C::NGRP][C::S];
  alignas(8) uint64_t empty_bar[C::S];
  float part[C::NGRP][2 * C::SPP];
};
template <class C>
__device__ __forceinline__ WgShared<C>& wg_shared() {
  __shared__ WgShared<C> sh;
  return sh;
}
template <class C>
__device__ __forceinline__ uint32_t wg_ring() {
  extern __shared__ __align__(1024) unsigned char smem_dyn[];
  return (smem_u32(smem_dyn) + 1023u) & ~1023u;
}
template <class C>
__device__ __forceinline__ const float* wg_scales() {  // the scaled types' [S][TN] document scales
  extern __shared__ __align__(1024) unsigned char smem_dyn[];
  return reinterpret_cast<const float*>(smem_dyn + (wg_ring<C>() + C::S * C::STAGE - smem_u32(smem_dyn)));
}

#if MAXSIM_HAS_WGMMA
// ------------------------------ producer warpgroup ------------------------------
template <class C>
__device__ __forceinline__ void wgmma_produce(const MaxsimParams& p, const TmaMap* map, int npass, int groups,
                                              int inner) {
  constexpr int TN = C::TN, S = C::S, NGRP = C::NGRP, HALF = C::HALF, STAGE = C::STAGE;
  using T = typename C::T;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int dim = p.dim, num_docs = p.num_docs;
  const T* __restrict__ docs = static_cast<const T*>(p.docs);
  const float* __restrict__ dscales = p.doc_scales;
  WgShared<C>& sh = wg_shared<C>();
  const uint32_t sbase = wg_ring<C>(), scbase = sbase + S * STAGE;
  if constexpr (RegSplit<C::NCONS>::producer > 0) setmaxnreg_dec<RegSplit<C::NCONS>::producer>();
  // the tile's document scales from (start, tile): TN per stage, or the document's one (DSCALE)
  auto copy_scales = [&](int s, int64_t start, int len, int tile, int r0, int rstep) {
    if constexpr (C::DSCALE) {
      if (r0 == 0) cp_async4(scbase + s * TN * 4, dscales + start, 4);
    } else {
      for (int r = r0; r < TN; r += rstep) {
        const bool ok = tile * TN + r < len;
        cp_async4(scbase + (s * TN + r) * 4, ok ? dscales + start + tile * TN + r : dscales, ok ? 4 : 0);
      }
    }
  };
  if constexpr (C::TMA) {
    // one warp walks the documents (DocWindow shuffles need the whole warp), lane 0 issues; rows
    // past the document are the next document's (masked by the consumers' fold) or past the set
    // (zeros); dims past dim are zeros
    if (warp == 0) {
      produce_tiles<NGRP, TN, S, C::ARGMAX, typename C::Docs>(
          p, num_docs, npass, groups, inner, sh.empty_bar, [&](int s, int grp, int64_t start, int len, int tile) {
            const uint32_t fb = smem_u32(&sh.full_bar[grp][s]);
            if (lane == 0) {
              const int row = static_cast<int>(start) + tile * TN;  // < 2^31: the runtime checks
              mbar_arrive_expect_tx(fb, STAGE);
#pragma unroll
              for (int h = 0; h < C::NATOM; ++h)
                tma_load_2d(sbase + s * STAGE + h * HALF, map, h * (128 / C::E::kBytes), row, fb);
            }
            if constexpr (C::SCALED) {
              copy_scales(s, start, len, tile, lane, 32);
              cp_async_mbar_arrive(fb);
            } else {
              __syncwarp();
            }
          });
      if constexpr (C::SCALED) cp_async_wait<0>();
    }
  } else {
    // Each thread copies one 16-byte chunk of rows prow, prow + RPI, ... of a tile
    // (copy_chunk_rows): with 128-byte K atoms the swizzle term (chunk ^ row % 8) is the same for
    // all of them, so the destination is fixed per thread up to a 1024-byte step.
    constexpr int CPR = 8 * C::NATOM;  // 16-byte chunks per token row
    constexpr int RPI = 128 / CPR;     // rows per copy step of the warpgroup
    const int prow = tid / CPR, pchunk = tid % CPR;
    const bool kok = pchunk * C::EPC < dim;  // wgmma reads all 128 elements: zero-fill past dim
    const uint32_t pdst = (pchunk >> 3) * HALF + prow * 128 + (((pchunk & 7) ^ (prow & 7)) << 4);
    const int64_t row_step = RPI * (int64_t)dim;
    produce_tiles<NGRP, TN, S, C::ARGMAX, typename C::Docs>(
        p, num_docs, npass, groups, inner, sh.empty_bar, [&](int s, int grp, int64_t start, int len, int tile) {
          const uint32_t dst = sbase + s * STAGE + pdst;
          const int row0 = tile * TN + prow;
          const int rows_left = len - row0;  // copy `it` holds row row0 + RPI * it
          const T* src = docs + (start + row0) * (int64_t)dim + pchunk * C::EPC;
          copy_chunk_rows<TN / RPI, RPI, RPI * 128>(dst, src, row_step, rows_left, kok, docs);
          if constexpr (C::SCALED) copy_scales(s, start, len, tile, tid, 128);
          // the tile is "full" when the copies land, whatever the producer does next: consumers are
          // not held back until later tiles are issued
          cp_async_mbar_arrive(smem_u32(&sh.full_bar[grp][s]));
        });
    cp_async_wait<0>();
  }
}

// One consumer warp's view of a pass: per m-block its query slice's rows and first row, its query
// (ARGMAX), the A fragments and (scaled types) the rows' query scales.
template <class C>
struct WgSlices {
  int qlen[C::MB], row0[C::MB], qidx[C::MB];
  uint32_t a[C::MB][C::NKS][4];
  float qs[C::MB][2];
};

// A document's running row maxima (rmax; IMAX: imax on the raw int32 dots; ARGMAX: amax, the lowest
// document token holding rmax, -1 while none), and DSCALE's document scale.
template <class C>
struct WgRows {
  float rmax[C::MB][2];
  int32_t amax[C::MB][2];
  int imax[C::MB][2];
  float sdoc = 0.f;
  __device__ __forceinline__ WgRows() {
#pragma unroll
    for (int m = 0; m < C::MB; ++m) {
      rmax[m][0] = rmax[m][1] = -INFINITY;
      amax[m][0] = amax[m][1] = -1;
      imax[m][0] = imax[m][1] = INT_MIN;
    }
  }
};

// One tile of a document, after its wgmma were issued: m-block by m-block (each as soon as its
// commit group is done, while later ones run), the fold into the row maxima; the last m-block also
// releases the stage. rem: the document's tokens from this tile on; sc: this thread's column scales.
template <class C>
__device__ __forceinline__ void wgmma_fold_tile(typename C::Acc (&acc)[C::MB][C::NACC], WgRows<C>& r,
                                                const float2 (&sc)[C::TN / 8], int rem, int tile, int lane,
                                                uint32_t empty_bar) {
  constexpr int MB = C::MB, NACC = C::NACC, TN = C::TN;
  using E = typename C::E;
  // value j of m-block m: float(acc), times its column's document scale (DSCALE: the raw dot; the
  // scale comes at the document's end)
  auto value = [&](int m, int j) {
    if constexpr (C::SCALED && !C::DSCALE)
      return E::template to_f32<C::BIAS>(acc[m][j]) * ((j & 1) ? sc[j >> 2].y : sc[j >> 2].x);
    else
      return E::template to_f32<C::BIAS>(acc[m][j]);
  };
  float before[MB][2];  // the row maxima before this tile, for the exact redo below
#pragma unroll
  for (int m = 0; m < MB; ++m) before[m][0] = r.rmax[m][0], before[m][1] = r.rmax[m][1];
#pragma unroll
  for (int m = 0; m < MB; ++m) {
    // m-block m done when at most MB-1-m groups are pending: fold it while later ones run
    wgmma_mblock_done<MB, NACC>(acc, m, lane, empty_bar);
    if constexpr (C::ARGMAX) {
      // padding columns -inf in place (the next tile's first wgmma overwrites them), then per row the
      // tile max and, only on a strict improvement, its lowest column
      if (rem < TN) mask_tail<NACC>(acc[m], rem, lane);
#pragma unroll
      for (int h = 0; h < 2; ++h) fold_argmax_row<NACC>(acc[m], h, lane, tile * TN, r.rmax[m][h], r.amax[m][h]);
    } else if (rem >= TN) {
      // Full tiles take a path without the column test (the select and compare per element were a
      // quarter of the 8-bit fold's instructions: bench/NOTES.md, 'The 8-bit fold').
      if constexpr (C::IMAX) {
#pragma unroll
        for (int i = 0; i < TN / 8; ++i) {
          r.imax[m][0] = max(r.imax[m][0], max(acc[m][4 * i], acc[m][4 * i + 1]));
          r.imax[m][1] = max(r.imax[m][1], max(acc[m][4 * i + 2], acc[m][4 * i + 3]));
        }
      } else if constexpr (E::kRowMaxBits) {
        // one VIMNMX3 per two values on their bit patterns (max3_bits), checked below
        fold_full_bits<MB, NACC>(r.rmax, m, value);
      } else {
#pragma unroll
        for (int i = 0; i < TN / 8; ++i) {
          r.rmax[m][0] = fmaxf(r.rmax[m][0], fmaxf(value(m, 4 * i), value(m, 4 * i + 1)));
          r.rmax[m][1] = fmaxf(r.rmax[m][1], fmaxf(value(m, 4 * i + 2), value(m, 4 * i + 3)));
        }
      }
    } else if constexpr (C::IMAX) {
#pragma unroll
      for (int i = 0; i < TN / 8; ++i) {
        const int col = i * 8 + (lane & 3) * 2;
        const bool ok0 = col < rem, ok1 = col + 1 < rem;
        r.imax[m][0] = max(r.imax[m][0], max(ok0 ? acc[m][4 * i] : INT_MIN, ok1 ? acc[m][4 * i + 1] : INT_MIN));
        r.imax[m][1] = max(r.imax[m][1], max(ok0 ? acc[m][4 * i + 2] : INT_MIN, ok1 ? acc[m][4 * i + 3] : INT_MIN));
      }
    } else {
      fold_masked<MB, NACC>(r.rmax, m, rem, lane, value);
    }
  }
  // A row whose maximum so far is negative (or a NaN) left the bit-pattern max inexact: the warp
  // redoes this tile with fmaxf from the maxima before it (the accumulators stay intact until the
  // next tile's wgmma). Rare for embeddings: a query token's best match is >= 0.
  if (E::kRowMaxBits && !C::IMAX && !C::ARGMAX && rem >= TN)
    redo_inexact_rows<MB, NACC>(r.rmax, before, value);
}

// The end of a (document, pass) for one consumer warp. ARGMAX: each row's (max, lowest argmax) over
// its quad, stored at its slot; no cross-warp combine. Otherwise: the row max over the quad, times the
// query-row scale, rows past the query dropped, the warp sum (fixed order) into part[], one barrier
// over the group, and the fixed-order combine (combine_pass) into the scores.
template <class C>
__device__ __forceinline__ void wgmma_finish_doc(const MaxsimParams& p, const typename C::Out& out,
                                                 const WgSlices<C>& sl, WgRows<C>& r, int doc, int pass, int dp,
                                                 int grp, int gw, int lane, int nslices, int cpq) {
  constexpr int MB = C::MB, SPP = C::SPP, GW = C::GW;
  const int num_docs = p.num_docs;
  if constexpr (C::DSCALE) {
    // the document's scale, once per row (a thread whose columns were all past the document keeps
    // -inf: 0 * -inf would be a NaN)
#pragma unroll
    for (int m = 0; m < MB; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int im = r.imax[m][h];
        const float v = C::IMAX ? (im == INT_MIN ? -INFINITY : __int2float_rn(im)) : r.rmax[m][h];
        r.rmax[m][h] = v == -INFINITY ? v : v * r.sdoc;
      }
  }
  if constexpr (C::ARGMAX) {
#pragma unroll
    for (int m = 0; m < MB; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float v = r.rmax[m][h];
        int32_t tk = r.amax[m][h];
        quad_argmax(v, tk);
        const int row = sl.row0[m] + h * 8 + (lane >> 2);
        if ((lane & 3) == 0 && row < sl.qlen[m]) {
          const int64_t slot = ((int64_t)sl.qidx[m] * num_docs + doc) * out.stride + row;
          if (out.argmax16) static_cast<int16_t*>(out.argmax)[slot] = static_cast<int16_t>(tk);
          else static_cast<int32_t*>(out.argmax)[slot] = tk;
          out.best[slot] = v;
        }
      }
  } else {
#pragma unroll
    for (int m = 0; m < MB; ++m) {
      float r0 = r.rmax[m][0], r1 = r.rmax[m][1];
      r0 = fmaxf(r0, __shfl_xor_sync(0xffffffffu, r0, 1));
      r0 = fmaxf(r0, __shfl_xor_sync(0xffffffffu, r0, 2));
      r1 = fmaxf(r1, __shfl_xor_sync(0xffffffffu, r1, 1));
      r1 = fmaxf(r1, __shfl_xor_sync(0xffffffffu, r1, 2));
      if constexpr (C::SCALED) r0 *= sl.qs[m][0], r1 *= sl.qs[m][1];
      const int rowa = sl.row0[m] + (lane >> 2);
      float partial = 0.f;
      if ((lane & 3) == 0) {
        if (rowa < sl.qlen[m]) partial += r0;
        if (rowa + 8 < sl.qlen[m]) partial += r1;
      }
      partial = warp_sum(partial);
      if (lane == 0) wg_shared<C>().part[grp][(dp & 1) * SPP + m * GW + gw] = partial;
    }
    // One barrier per (document, pass); part[] is double-buffered by dp parity, so the next writes to
    // this half come after the next barrier, which the combining warp reaches only after its reads.
    // Combine: lane w of the group's first warp ends a segment (query) -> sums that query's slices of
    // this pass in slice order (continuing the carried partial from the scores array if the query
    // began in an earlier pass). Same order as a sequential sum: deterministic.
    named_bar(1 + grp, GW * 32);
    if (gw == 0 && lane < SPP)
      combine_pass<SPP>(p, wg_shared<C>().part[grp], dp, pass, nslices, cpq, lane, doc, num_docs);
  }
}

// ------------------------------ consumer warpgroups ------------------------------
template <class C>
__device__ __forceinline__ void wgmma_consume(const MaxsimParams& p, const typename C::Out& out, int npass, int groups,
                                              int inner, int nq, int cpq, int nslices) {
  constexpr int MB = C::MB, TN = C::TN, S = C::S, NACC = C::NACC, SPP = C::SPP, GW = C::GW, NGRP = C::NGRP;
  constexpr int HALF = C::HALF;
  using E = typename C::E;
  using T = typename C::T;
  WgShared<C>& sh = wg_shared<C>();
  if constexpr (RegSplit<C::NCONS>::consumer > 0) setmaxnreg_inc<RegSplit<C::NCONS>::consumer>();
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int dim = p.dim, num_docs = p.num_docs;
  const int cw = warp - 4;          // consumer warp 0 .. NCW-1
  const int grp = cw / GW;          // consumer group (always 0 unless PP)
  const int gw = cw % GW;           // warp within the group
  const int gtid = tid - 128 - grp * GW * 32;  // thread within the group
  const T* __restrict__ queries = static_cast<const T*>(p.queries);
  // 128-byte swizzle, stride between 8-row groups 1024 bytes
  const uint64_t desc_base = (1ull << 62) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 16);
  WgSlices<C> sl;
  typename C::Acc acc[MB][NACC];
#pragma unroll
  for (int m = 0; m < MB; ++m)
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[m][i] = E::template init<C::BIAS>();
  int t = 0;   // ring tile counter (all groups' tiles: the stage is t % S)
  int dp = 0;  // (document, pass) counter: parity selects the part[] half
  uint32_t full_phase = 0;  // PP: bit s, parity of this group's next wait on full_bar[grp][s]
  // Pass-outer order: the A fragments of a pass are loaded once per work unit (not once per
  // document); documents are re-streamed once per pass. Per-(query, doc) sums that span passes are
  // carried in the scores array itself (written and re-read by the same thread: no extra memory,
  // fixed order).
  for (UnitWalk<C::ARGMAX> w(groups, inner); w.pass < npass; w.next()) {
    const int pass = w.pass;
    // slice of m-block m of this warp: pass * SPP + m * GW + gw (SPP = slices per pass)
#pragma unroll
    for (int m = 0; m < MB; ++m) {
      const QuerySlice<16> q(p, pass * SPP + m * GW + gw, nslices, cpq);
      sl.qlen[m] = q.qlen;
      sl.row0[m] = q.row0;
      sl.qidx[m] = q.q;
      load_a16<C::NKS, 4 / E::kBytes>(sl.a[m], queries + q.start * (int64_t)dim, q.row0, q.qlen, 0, dim, lane);
      if constexpr (C::SCALED) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = q.row0 + (lane >> 2) + h * 8;
          sl.qs[m][h] = row < q.qlen ? p.query_scales[q.start + row] : 0.f;
        }
      }
    }
    int owner = 0;  // PP: the group of the next non-empty document (they take turns, as for the producer)
    DocWindow<false, C::WALK> win(p, w.first, w.step());
    for (int doc = w.first, i = 0; doc < num_docs; doc += w.step(), ++i) {
      const int len = win.at(p, i, nullptr);
      if (len <= 0) {
        // (training: maxsim_train_fwd_sum writes an empty document's slots)
        if (!C::ARGMAX && pass == 0 && grp == 0)
          for (int ql = gtid; ql < nq; ql += GW * 32)
            p.scores[(int64_t)(p.query_tile_offset + ql) * num_docs + doc] = -INFINITY;
        continue;
      }
      const int ntiles = (len + TN - 1) / TN;
      if (C::PP) {
        const bool mine = owner == grp;
        owner = owner + 1 == NGRP ? 0 : owner + 1;
        if (!mine) {
          t += ntiles;  // another group's document: its tiles pass this group by
          continue;
        }
      }
      WgRows<C> r;
      for (int tile = 0; tile < ntiles; ++tile, ++t) {
        const int s = t % S;
        // one group: the (t / S)-th use of stage s (no register); PP: the group's own count
        mbar_wait(smem_u32(&sh.full_bar[grp][s]), C::PP ? (full_phase >> s) & 1 : (t / S) & 1);
        if (C::PP) full_phase ^= 1u << s;
        // cp.async writes through the generic proxy, wgmma reads through the async one (TMA writes
        // through the async proxy already)
        if constexpr (!C::TMA) fence_proxy_async();
        const uint32_t st = wg_ring<C>() + s * C::STAGE;
        // this thread's column scales, read before the stage is released to the producer
        float2 sc[TN / 8];
        if constexpr (C::DSCALE) {
          r.sdoc = wg_scales<C>()[s * TN];
        } else if constexpr (C::SCALED) {
#pragma unroll
          for (int i2 = 0; i2 < TN / 8; ++i2)
            sc[i2] = *reinterpret_cast<const float2*>(wg_scales<C>() + s * TN + i2 * 8 + (lane & 3) * 2);
        }
#pragma unroll
        for (int m = 0; m < MB; ++m)
#pragma unroll
          for (int i2 = 0; i2 < NACC; ++i2) reg_fence(acc[m][i2]);
        wgmma_fence();
        // every k step unconditionally (zero-filled past dim); k step ks: K atom ks / 4, 32 bytes per
        // step within it
        const uint64_t desc0 = desc_base | (uint64_t)((st >> 4) & 0x3FFF);
        wgmma_tile<E, TN, MB, C::NKS>(acc, sl.a, desc0, [](int ks) { return ((ks >> 2) * HALF) + (ks & 3) * 32; });
        wgmma_fold_tile<C>(acc, r, sc, len - tile * TN, tile, lane, smem_u32(&sh.empty_bar[s]));
      }
      wgmma_finish_doc<C>(p, out, sl, r, doc, pass, dp, grp, gw, lane, nslices, cpq);
      ++dp;
    }
  }
}
#endif

// The body: barrier setup, then the producer warpgroup (warps 0-3) or a consumer warpgroup.
template <class E, int NCONS, int MB, int TN, int S, bool PP, bool TMA = false, bool DSCALE = false,
          class Out = ScoreSum>
__device__ __forceinline__ void wgmma_body(const MaxsimParams& p, const TmaMap* map = nullptr, const Out& out = Out{}) {
#if MAXSIM_HAS_WGMMA
  using C = WgCfg<E, NCONS, MB, TN, S, PP, TMA, DSCALE, Out>;
  WgShared<C>& sh = wg_shared<C>();
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      for (int g = 0; g < C::NGRP; ++g)
        // one (copy-completion) arrive per producer thread; TMA: the issuing lane's armed arrive, and
        // for scaled types one per lane of the producer warp for its scale copies
        mbar_init(smem_u32(&sh.full_bar[g][s]), TMA ? 1 + (C::SCALED ? 32 : 0) : 128);
      mbar_init(smem_u32(&sh.empty_bar[s]), C::GW);  // one arrive per warp of the tile's group
    }
  }
  __syncthreads();

  const int nq = p.num_queries - p.query_tile_offset;
  if (nq <= 0 || p.dim > 128) return;
  const int cpq = max(1, (p.max_query_length + 15) >> 4);
  const int nslices = nq * cpq;
  const int npass = (nslices + C::SPP - 1) / C::SPP;
  // Work units (UnitWalk): scoring takes one document group per CTA (CTA c streams documents c,
  // c + gridDim.x, ... once per pass, so the sums spanning passes stay with one warp); training deals
  // them into out.doc_groups groups. Scoring pass-inner (p.unit_order 1, every query inside one
  // pass): npass x G units, G a whole number of waves where that takes at most 8 (else ~8 waves).
  int groups = gridDim.x, inner = 0;
  if constexpr (C::ARGMAX) {
    groups = max(1, out.doc_groups);
  } else if (C::INNER && p.unit_order == 1 && npass > 1 && C::SPP % cpq == 0) {
    const int g = (int)gridDim.x;
    int a = g, b = npass;
    while (b) {
      const int r = a % b;
      a = b;
      b = r;
    }
    const int lcm_waves = npass / a;  // lcm(g, npass) / g
    groups = lcm_waves <= 8 ? lcm_waves * g / npass : (8 * g + npass - 1) / npass;
    inner = npass;
  }
  if ((tid >> 5) < 4) wgmma_produce<C>(p, map, npass, groups, inner);
  else wgmma_consume<C>(p, out, npass, groups, inner, nq, cpq, nslices);
#else
  // Built for a GPU without wgmma (the sm_80 cubin): the dispatcher never picks this variant there,
  // and a launch that does anyway must fail loudly rather than leave the scores unwritten.
  __trap();
#endif
}

}  // namespace maxsim
