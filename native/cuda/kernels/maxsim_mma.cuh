// The mma.sync MaxSim body (sm_80+), one for every element type: maxsim_mma.cu instantiates it for
// F16 / BF16, maxsim_8bit.cuh (maxsim_int8.cu, maxsim_fp8.cu) for S8 / E4M3, whose tokens carry one
// float32 scale each (SCALED: the stage also holds the tile's document scales, the fold multiplies
// each dot by its document token's scale, and the sum weights each row by its query token's). The
// design and the launch contract are described in maxsim_mma.cu and maxsim_int8.cu.
#pragma once
#include "maxsim_epilogue.cuh"
#include "maxsim_mainloop.cuh"
#include "maxsim_producer.cuh"
#include "maxsim_rowmax.cuh"

namespace maxsim {

// The shared-memory layout of one group (G warps) and its producer's split of a stage into copies.
template <class E, int G, int NGRP, int TN, int S, int KD>
struct MmaCfg {
  static constexpr bool SCALED = sizeof(typename E::Elem) == 1;  // 8-bit tokens carry scales
  static constexpr int EB = sizeof(typename E::Elem);  // bytes per element
  static constexpr int EPW = 4 / EB;                   // elements per 32-bit fragment register
  static constexpr int KSTEP = 8 * EPW;                // elements per mma k step (16 or 32)
  static constexpr int KSHIFT = EB == 2 ? 4 : 5;       // log2(KSTEP)
  static constexpr int RS = KD + 16 / EB;  // smem row stride (elements): 16 B pad -> conflict-free ldmatrix
  static constexpr int TILE = TN * RS * EB;            // token bytes of one stage
  static constexpr int STAGE = TILE + (SCALED ? TN * 4 : 0);  // + the TN document scales
  static constexpr int NKS = KD / KSTEP;               // k steps per stage
  static constexpr int NT = TN / 8;
  static constexpr int CPR = KD / (16 / EB);  // 16-byte chunks per row
  static constexpr int GT = G * 32;           // threads per group
  static constexpr int RSTEP = GT / CPR;      // producer: rows between one thread's copies
  static constexpr int NIT = TN * CPR / GT;   // producer: copies per thread and stage
  static_assert(GT % CPR == 0 && (TN * CPR) % GT == 0, "copies split evenly over the group");
  static constexpr int SMEM_GROUP = S * STAGE + 128;  // + partial-sum slots, keeps 128 B alignment
  static_assert(STAGE % 16 == 0, "stage alignment");
  static_assert(2 * G * 4 <= 128, "partial slots");
  static constexpr int SMEM = NGRP * SMEM_GROUP;
  static constexpr int kKD = KD;
};

// The two steps of the mainloop that every mma.sync walk shares (this body's documents x query
// slices, and the training forward's pairs: maxsim_train.cu):
// One stage's token copies by a group thread (pr, pc = its row and 16-byte chunk): rows tok0 + pr,
// + RSTEP, ... of the document (start, len), K chunk kbase, into the stage at sstage (zero-filled past
// the document and past dim; chunks past the k steps that carry data are never read, not copied).
template <class C, typename Elem>
__device__ __forceinline__ void mma_copy_tile(uint32_t sstage, const Elem* docs, int64_t start, int len, int tok0,
                                              int kbase, int dim, int64_t rstep, int pr, int pc) {
  const int krem = dim - kbase;                                                       // > 0
  const int need = min(C::CPR, ((min(krem, C::kKD) + C::KSTEP - 1) >> C::KSHIFT) * 2);  // chunks to fill
  if (pc < need) {
    const int k = kbase + pc * (16 / C::EB);
    const bool kok = k < dim;
    const int row0 = tok0 + pr;
    const int rows_left = len - row0;  // copy `it` holds row row0 + RSTEP * it
    const Elem* src = docs + (start + row0) * (int64_t)dim + k;
    const uint32_t dst = sstage + (pr * C::RS + pc * (16 / C::EB)) * C::EB;
    copy_chunk_rows<C::NIT, C::RSTEP, C::RSTEP * C::RS * C::EB>(dst, src, rstep, rows_left, kok, docs);
  }
}
// A stage's MMAs when dim <= KD (one stage per tile, A in registers): the n16 blocks in ascending
// column order, each from accumulators set to init, then fold(acc, c0) with c0 its first tile column.
template <class E, class C, class Fold>
__device__ __forceinline__ void mma_tile_blocks(const uint32_t (&a)[2][C::NKS][4], uint32_t sb, int nks_run, int lane,
                                                typename E::Acc init, Fold&& fold) {
#pragma unroll
  for (int np = 0; np < C::NT / 2; ++np) {
    typename E::Acc acc[2][2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[mt][nt][r] = init;
    mma_n16<E, C::NKS, C::RS, C::EPW>(acc, a, sb, np, nks_run, lane);
    fold(acc, np * 16);
  }
}

template <class E, int G, int NGRP, int TN, int S, int KD, bool KSPLIT>
__device__ __forceinline__ void mma_body(const MaxsimParams& p) {
  using C = MmaCfg<E, G, NGRP, TN, S, KD>;
  using Acc = typename E::Acc;
  using Elem = typename E::Elem;
  constexpr bool SCALED = C::SCALED;
  static_assert(TN % 16 == 0, "TN must be a multiple of 16");
  static_assert(KD % C::KSTEP == 0, "KD must be a multiple of the k step");
  constexpr bool BIAS = SCALED && !E::kFp8 && !KSPLIT;  // int8, dim <= KD = 128: |acc| <= 127^2 * 128 < 2^22
  static_assert(!BIAS || KD <= 256, "bias conversion needs dim <= 256");
  extern __shared__ __align__(16) unsigned char smem_raw[];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int grp = warp / G, wig = warp % G;
  const int gtid = wig * 32 + lane;
  unsigned char* stages = smem_raw + grp * C::SMEM_GROUP;
  float* part = reinterpret_cast<float*>(stages + S * C::STAGE);
  const uint32_t stages_s = smem_u32(stages);

  const int total_groups = gridDim.x * NGRP;
  const int gid = blockIdx.x * NGRP + grp;
  const int dim = p.dim;
  const int nkc = (dim + KD - 1) / KD;
  const int nq = p.num_queries - p.query_tile_offset;
  const int cpq = max(1, (p.max_query_length + 31) >> 5);
  const int nslices = nq * cpq;
  const int npass = (nslices + G - 1) / G;
  const int num_docs = p.num_docs;
  if (nq <= 0) return;
  if (!KSPLIT && dim > KD) return;  // contract violation: the dispatcher must pick a K-split variant
  const Elem* __restrict__ docs = static_cast<const Elem*>(p.docs);
  const Elem* __restrict__ queries = static_cast<const Elem*>(p.queries);
  const float* __restrict__ dscales = p.doc_scales;
  const float* __restrict__ qscales = p.query_scales;

  // ---------------- producer: flat iterator over (doc, pass, tile, kchunk) ----------------
  DocCursor pcur(p, gid, total_groups);
  int ppass = 0, ptile = 0, pkc = 0, pnt = 0;
  auto pload_doc = [&]() {
    pcur.next();
    pnt = (pcur.len + TN - 1) / TN;
  };
  pload_doc();
  // Each thread copies one 16-byte chunk (pc) of rows pr, pr + RSTEP, ... of a stage (copy_chunk_rows).
  const int pr = gtid / C::CPR, pc = gtid % C::CPR;
  const int64_t rstep = (int64_t)C::RSTEP * dim;
  auto issue = [&](int slot) {
    if (pcur.doc < num_docs) {
      const uint32_t sbase = stages_s + slot * C::STAGE;
      const int tok0 = ptile * TN;
      mma_copy_tile<C>(sbase, docs, pcur.start, pcur.len, tok0, pkc * KD, dim, rstep, pr, pc);
      if constexpr (SCALED) {
        // the tile's document scales (every k chunk carries them: the fold reads the last one)
#pragma unroll
        for (int it = 0; it < (TN + C::GT - 1) / C::GT; ++it) {
          const int r = it * C::GT + gtid;
          if (r < TN) {
            const bool ok = tok0 + r < pcur.len;
            cp_async4(sbase + C::TILE + r * 4, ok ? dscales + pcur.start + tok0 + r : dscales, ok ? 4 : 0);
          }
        }
      }
      if (++pkc == nkc) {
        pkc = 0;
        if (++ptile == pnt) {
          ptile = 0;
          if (++ppass == npass) {
            ppass = 0;
            pload_doc();
          }
        }
      }
    }
    cp_async_commit();
  };
  auto group_sync = [&]() {
    if (G == 1) __syncwarp();
    else named_bar(1 + grp, C::GT);
  };

#pragma unroll
  for (int s = 0; s < S - 1; ++s) issue(s);

  uint32_t a[2][C::NKS][4];
  int cstage = 0;   // consumer slot
  int cur_slice = -1;
  float run = 0.f;  // running per-query sum (combining thread only)
  float qs[2][2];   // SCALED: the scales of this thread's 4 query rows (rows past the query: 0, dropped)

  for (int doc = gid; doc < num_docs; doc += total_groups) {
    const int len = p.doc_lengths[doc];
    if (len <= 0) {
      for (int ql = gtid; ql < nq; ql += C::GT)
        p.scores[(int64_t)(p.query_tile_offset + ql) * num_docs + doc] = -INFINITY;
      continue;
    }
    const int ntiles = (len + TN - 1) / TN;
    for (int pass = 0; pass < npass; ++pass) {
      const int slice = pass * G + wig;
      const QuerySlice<32> sl(p, slice, nslices, cpq);
      const Elem* qbase = queries + sl.start * (int64_t)dim;
      auto load_a = [&](int kc) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) load_a16<C::NKS, C::EPW>(a[mt], qbase, sl.row0 + mt * 16, sl.qlen, kc * KD, dim, lane);
      };
      // A new slice: its A fragments (the K-split variants load them per K chunk instead) and, 8-bit,
      // its rows' query scales (kept for the K-split variant too, hence its own test of the slice).
      if (!SCALED && !KSPLIT && slice != cur_slice) {
        load_a(0);
        cur_slice = slice;
      }
      if (SCALED && slice != cur_slice) {
        if (!KSPLIT) load_a(0);
        if constexpr (SCALED) {
#pragma unroll
          for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int row = sl.row0 + mt * 16 + h * 8 + (lane >> 2);
              qs[mt][h] = row < sl.qlen ? qscales[sl.start + row] : 0.f;
            }
        }
        cur_slice = slice;
      }
      float rmax[2][2];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) rmax[mt][0] = rmax[mt][1] = -INFINITY;

      for (int tile = 0; tile < ntiles; ++tile) {
        const int rem = len - tile * TN;  // valid columns in this tile (mask when < TN)
        // fold a finished accumulator block (2 m16 x 2 n8, tile columns c0..c0+15) into rmax
        auto fold = [&](Acc (&acc)[2][2][4], const float* sc, int c0) {
          if constexpr (SCALED) fold_n16_scaled<E, BIAS, TN>(rmax, acc, sc, c0, rem, lane);
          else fold_n16<TN>(rmax, acc, c0, rem, lane);
        };
        auto zero = [&](Acc (&acc)[2][2][4]) {  // (the K-split path's accumulators)
#pragma unroll
          for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
              for (int r = 0; r < 4; ++r) acc[mt][nt][r] = E::template init<BIAS>();
        };
        auto stage_scales = [&](int st) {
          return reinterpret_cast<const float*>(stages + st * C::STAGE + C::TILE);
        };
        if constexpr (!KSPLIT) {
          // dim <= KD: one stage per tile, A fragments stay in registers
          cp_async_wait<S - 2>();
          group_sync();
          issue((cstage + S - 1) % S);
          const int nks_run = min(C::NKS, (dim + C::KSTEP - 1) >> C::KSHIFT);
          const uint32_t sb = stages_s + cstage * C::STAGE;
          const float* sc = SCALED ? stage_scales(cstage) : nullptr;
          mma_tile_blocks<E, C>(a, sb, nks_run, lane, E::template init<BIAS>(),
                                [&](Acc (&acc)[2][2][4], int c0) { fold(acc, sc, c0); });
          cstage = (cstage + 1 == S) ? 0 : cstage + 1;
        } else {
          static_assert(!KSPLIT || TN == 16, "K-split path keeps one n16 block of accumulators");
          Acc acc[2][2][4];
          zero(acc);
          const float* sc = nullptr;
          for (int kc = 0; kc < nkc; ++kc) {
            cp_async_wait<S - 2>();
            group_sync();
            issue((cstage + S - 1) % S);
            load_a(kc);
            const int nks_run = min(C::NKS, (dim - kc * KD + C::KSTEP - 1) >> C::KSHIFT);
            mma_n16<E, C::NKS, C::RS, C::EPW>(acc, a, stages_s + cstage * C::STAGE, 0, nks_run, lane);
            // the scales of this stage stay valid until the next group_sync (the next issue targets it)
            if constexpr (SCALED) sc = stage_scales(cstage);
            cstage = (cstage + 1 == S) ? 0 : cstage + 1;
          }
          fold(acc, sc, 0);
        }
      }
      // ---- end of (doc, pass): row max over the quad, rows past the query dropped, fixed-order sum ----
      const float partial = slice_sum32(rmax, sl.row0, sl.qlen, lane, [&](int mt, int h, float v) {
        if constexpr (SCALED) return qs[mt][h] * v;
        else return v;
      });
      combine_group<G>(p, part, partial, run, pass, wig, gtid, lane, sl, cpq, nslices, doc, num_docs, group_sync);
    }
  }
  cp_async_wait<0>();
}

}  // namespace maxsim
