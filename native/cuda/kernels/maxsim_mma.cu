// maxsim_mma.cu: tensor-core MaxSim with mma.sync.m16n8k16 (fp16 / bf16 in, fp32 accumulate), sm_80+.
//
// Design. A "group" of G warps shares one stream of document tiles through a multi-stage cp.async
// pipeline in shared memory (16-byte copies, zero-filled past the document / past dim). Each warp of
// the group owns one 32-token "slice" of the queries (2 m16 tiles) whose A fragments it keeps in
// registers, and computes S = Q_slice . D_tile^T for the tile (B fragments via ldmatrix.x4 from a
// padded, bank-conflict-free layout). The running max per query row lives in the accumulator layout
// (per-thread partial max over its columns); columns past the document length are set to -inf before
// the max (never multiplied). At the end of a document the quad reduces the row max, rows past the
// query length are dropped, the warp sums its rows (fixed butterfly order), and the group combines
// its slices in slice order (fixed order, no atomics: bitwise deterministic).
//
// Query slices enumerate (query, 32-token chunk) pairs of all queries of the launch, so several short
// queries (all-pairs scoring) or one long query are packed into the G warps; if there are more slices
// than G warps, the group makes several passes over the document (re-read from L2). dim is processed
// in K chunks of KD (A fragments re-loaded per chunk when dim > KD, so any dim % 8 == 0 works).
// Persistent grid: group gid handles documents gid, gid + total_groups, ...; the producer runs ahead
// across document boundaries, so short documents keep the pipeline full. Work is proportional to
// real tokens (ragged documents are not padded). All token offsets are 64-bit.
//
// LAUNCH CONTRACT (every entry point below; see variants.json for the numbers):
//   block       = (32 * G * NGRP, 1, 1)
//   grid        = (num_sms * CTAS, 1, 1)       (persistent; any grid >= 1 is correct)
//   dynamic smem= NGRP * (S * TN * (KD + 8) * 2 + 128) bytes; the host must raise
//                 CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to this value when > 48 KiB
//   requires    : dim % 8 == 0, dim >= 8, and for g1/g4/g8 dim <= 128 (they return without writing
//                 otherwise; the ks variants take any such dim); token arrays 16-byte aligned
//                 (cudaMalloc'd); starts 64-bit;
//                 queries q in [query_tile_offset, num_queries) are scored, scores[q*num_docs + b].
//   semantics   : zero-length document -> -INFINITY; zero-length query -> 0.
//   params      : max_query_length MUST be >= every query length of the launch (the query slicing
//                 uses it; tokens past it would be ignored). max_doc_length is not read.
// The document stream asks L2 for 128-byte prefetches: 2-3% faster on the H200's memory-bound rows
// (1,32,128 and 1,32,512 x 100000), 256 B slower (bench/NOTES.md, 'L2 prefetch size').
#define MAXSIM_CP_ASYNC_L2_PREFETCH ".L2::128B"
#include "maxsim_common.cuh"

namespace maxsim {

template <typename T, int G, int NGRP, int TN, int S, int KD>
struct MmaCfg {
  static constexpr int RS = KD + 8;  // smem row stride (elements): 16 B pad -> conflict-free ldmatrix
  static constexpr int STAGE = TN * RS;
  static constexpr int NKS = KD / 16;
  static constexpr int NT = TN / 8;
  static constexpr int CPR = KD / 8;  // 16-byte chunks per row
  static constexpr int GT = G * 32;   // threads per group
  static constexpr int RSTEP = GT / CPR;  // producer: rows between one thread's copies
  static constexpr int NIT = TN * CPR / GT;  // producer: copies per thread and stage
  static_assert(GT % CPR == 0 && (TN * CPR) % GT == 0, "copies split evenly over the group");
  static constexpr int SMEM_GROUP = S * STAGE * 2 + 128;  // + partial-sum slots, keeps 128 B alignment
  static_assert(2 * G * 4 <= 128, "partial slots");
  static constexpr int SMEM = NGRP * SMEM_GROUP;
};

template <typename T, int G, int NGRP, int TN, int S, int KD, bool KSPLIT>
__device__ __forceinline__ void mma_body(const MaxsimParams& p) {
  using C = MmaCfg<T, G, NGRP, TN, S, KD>;
  static_assert(TN % 16 == 0, "TN must be a multiple of 16");
  static_assert(KD % 16 == 0, "KD must be a multiple of 16");
  extern __shared__ __align__(16) unsigned char smem_raw[];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int grp = warp / G, wig = warp % G;
  const int gtid = wig * 32 + lane;
  T* stages = reinterpret_cast<T*>(smem_raw + grp * C::SMEM_GROUP);
  float* part = reinterpret_cast<float*>(smem_raw + grp * C::SMEM_GROUP + S * C::STAGE * 2);
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
  const T* __restrict__ docs = static_cast<const T*>(p.docs);
  const T* __restrict__ queries = static_cast<const T*>(p.queries);

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
  const int64_t rstep_elems = (int64_t)C::RSTEP * dim;
  auto issue = [&](int slot) {
    if (pcur.doc < num_docs) {
      const int kbase = pkc * KD;
      const int krem = dim - kbase;                                   // > 0
      const int need = min(C::CPR, ((min(krem, KD) + 15) >> 4) * 2);  // chunks to fill (16-padded)
      if (pc < need) {
        const int k = kbase + pc * 8;
        const bool kok = k < dim;
        const int row0 = ptile * TN + pr;
        const int rows_left = pcur.len - row0;  // copy `it` holds row row0 + RSTEP * it
        const T* src = docs + (pcur.start + row0) * (int64_t)dim + k;
        const uint32_t dst = stages_s + slot * (C::STAGE * 2) + (pr * C::RS + pc * 8) * 2;
        copy_chunk_rows<C::NIT, C::RSTEP, C::RSTEP * C::RS * 2>(dst, src, rstep_elems, rows_left, kok, docs);
      }
      // advance
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
  int cur_slice = -1;
  int cstage = 0;     // consumer slot
  float run = 0.f;    // running per-query sum (combining thread only)

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
      const bool svalid = slice < nslices;
      const int qi = svalid ? slice / cpq : 0;
      const int chunk = svalid ? slice % cpq : 0;
      const int q = p.query_tile_offset + qi;
      const int qlen = svalid ? p.query_lengths[q] : 0;
      const int row0 = chunk * 32;
      const T* qbase = queries + (svalid ? p.query_starts[q] : 0) * (int64_t)dim;
      auto load_a = [&](int kc) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int ks = 0; ks < C::NKS; ++ks)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
              const int row = row0 + mt * 16 + (lane >> 2) + (r & 1) * 8;
              const int k = kc * KD + ks * 16 + (lane & 3) * 2 + (r >> 1) * 8;
              uint32_t v = 0;
              if (row < qlen && k < dim)
                v = *reinterpret_cast<const uint32_t*>(qbase + (int64_t)row * dim + k);
              a[mt][ks][r] = v;
            }
      };
      if (!KSPLIT && slice != cur_slice) {
        load_a(0);
        cur_slice = slice;
      }
      float rmax[2][2];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) rmax[mt][0] = rmax[mt][1] = -INFINITY;

      for (int tile = 0; tile < ntiles; ++tile) {
        const int rem = len - tile * TN;  // valid columns in this tile (mask when < TN)
        // fold a finished accumulator block (2 m16 x 2 n8, columns c0..c0+15 of the tile) into rmax
        auto fold = [&](float (&acc)[2][2][4], int c0) {
          if (rem >= TN) {
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
              for (int nt = 0; nt < 2; ++nt) {
                rmax[mt][0] = fmaxf(rmax[mt][0], fmaxf(acc[mt][nt][0], acc[mt][nt][1]));
                rmax[mt][1] = fmaxf(rmax[mt][1], fmaxf(acc[mt][nt][2], acc[mt][nt][3]));
              }
          } else {
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
              for (int nt = 0; nt < 2; ++nt) {
                const int col = c0 + nt * 8 + (lane & 3) * 2;
                const float v0 = col < rem ? acc[mt][nt][0] : -INFINITY;
                const float v1 = col + 1 < rem ? acc[mt][nt][1] : -INFINITY;
                const float v2 = col < rem ? acc[mt][nt][2] : -INFINITY;
                const float v3 = col + 1 < rem ? acc[mt][nt][3] : -INFINITY;
                rmax[mt][0] = fmaxf(rmax[mt][0], fmaxf(v0, v1));
                rmax[mt][1] = fmaxf(rmax[mt][1], fmaxf(v2, v3));
              }
          }
        };
        auto zero = [&](float (&acc)[2][2][4]) {
#pragma unroll
          for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
              for (int r = 0; r < 4; ++r) acc[mt][nt][r] = 0.f;
        };
        // one n16 block of the tile over the K steps of one stage
        auto mma_n16 = [&](float (&acc)[2][2][4], uint32_t sb, int np, int nks_run) {
#pragma unroll
          for (int ks = 0; ks < C::NKS; ++ks) {
            if (ks < nks_run) {
              const int n = np * 16 + (lane & 7) + ((lane >> 4) << 3);
              const int k = ks * 16 + ((lane >> 3) & 1) * 8;
              uint32_t b0, b1, b2, b3;
              ldmatrix_x4(sb + (n * C::RS + k) * 2, b0, b1, b2, b3);
#pragma unroll
              for (int mt = 0; mt < 2; ++mt) {
                MmaOp<T>::run(acc[mt][0], a[mt][ks], b0, b1);
                MmaOp<T>::run(acc[mt][1], a[mt][ks], b2, b3);
              }
            }
          }
        };
        if constexpr (!KSPLIT) {
          // dim <= KD: one stage per tile, A fragments stay in registers
          cp_async_wait<S - 2>();
          group_sync();
          issue((cstage + S - 1) % S);
          const int nks_run = min(C::NKS, (dim + 15) >> 4);
          const uint32_t sb = stages_s + cstage * (C::STAGE * 2);
#pragma unroll
          for (int np = 0; np < C::NT / 2; ++np) {
            float acc[2][2][4];
            zero(acc);
            mma_n16(acc, sb, np, nks_run);
            fold(acc, np * 16);
          }
          cstage = (cstage + 1 == S) ? 0 : cstage + 1;
        } else {
          static_assert(!KSPLIT || TN == 16, "K-split path keeps one n16 block of accumulators");
          float acc[2][2][4];
          zero(acc);
          for (int kc = 0; kc < nkc; ++kc) {
            cp_async_wait<S - 2>();
            group_sync();
            issue((cstage + S - 1) % S);
            load_a(kc);
            const int nks_run = min(C::NKS, (dim - kc * KD + 15) >> 4);
            mma_n16(acc, stages_s + cstage * (C::STAGE * 2), 0, nks_run);
            cstage = (cstage + 1 == S) ? 0 : cstage + 1;
          }
          fold(acc, 0);
        }
      }
      // ---- end of (doc, pass): row max over the quad, drop rows past the query, sum ----
      float partial = 0.f;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float v = rmax[mt][h];
          v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
          v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
          const int row = row0 + mt * 16 + h * 8 + (lane >> 2);
          partial += ((lane & 3) == 0 && row < qlen) ? v : 0.f;
        }
      partial = warp_sum(partial);
      if (G == 1) {
        if (lane == 0 && svalid) {
          run = (chunk == 0) ? partial : run + partial;
          if (chunk == cpq - 1) p.scores[(int64_t)q * num_docs + doc] = run;
        }
      } else {
        if (lane == 0) part[(pass & 1) * G + wig] = partial;
        group_sync();
        if (gtid == 0) {
          for (int w = 0; w < G; ++w) {
            const int s2 = pass * G + w;
            if (s2 >= nslices) break;
            const int c2 = s2 % cpq;
            const float pv = part[(pass & 1) * G + w];
            run = (c2 == 0) ? pv : run + pv;
            if (c2 == cpq - 1)
              p.scores[(int64_t)(p.query_tile_offset + s2 / cpq) * num_docs + doc] = run;
          }
        }
      }
    }
  }
  cp_async_wait<0>();
}

}  // namespace maxsim

#define MAXSIM_MMA_ENTRY(NAME, T, G, NGRP, TN, S, KD, KSPLIT, CTAS)                              \
  extern "C" __global__ void __launch_bounds__(32 * G * NGRP, CTAS) NAME(const MaxsimParams p) { \
    maxsim::mma_body<T, G, NGRP, TN, S, KD, KSPLIT>(p);                                          \
  }

// smem bytes = NGRP * (S * TN * (KD + 8) * 2 + 128)
//               name                   type           G NGRP TN  S  KD  KSPLIT CTAS/SM   smem bytes
MAXSIM_MMA_ENTRY(maxsim_mma_g1_f16,     __half,        1, 4, 16, 3, 128, false, 4)  // 52736
MAXSIM_MMA_ENTRY(maxsim_mma_g1_bf16,    __nv_bfloat16, 1, 4, 16, 3, 128, false, 4)
// 32-token tiles at 2 CTAs/SM: needs 2 x 105 KB per SM (sm_90, sm_100); H200 1,32,128: 0.760 vs 0.790 ms
MAXSIM_MMA_ENTRY(maxsim_mma_g1t32_f16,  __half,        1, 4, 32, 3, 128, false, 2)  // 104960
MAXSIM_MMA_ENTRY(maxsim_mma_g1t32_bf16, __nv_bfloat16, 1, 4, 32, 3, 128, false, 2)
MAXSIM_MMA_ENTRY(maxsim_mma_g4_f16,     __half,        4, 2, 32, 4, 128, false, 2)  // 69888
MAXSIM_MMA_ENTRY(maxsim_mma_g4_bf16,    __nv_bfloat16, 4, 2, 32, 4, 128, false, 2)
MAXSIM_MMA_ENTRY(maxsim_mma_g8_f16,     __half,        8, 1, 64, 3, 128, false, 2)  // 52352
MAXSIM_MMA_ENTRY(maxsim_mma_g8_bf16,    __nv_bfloat16, 8, 1, 64, 3, 128, false, 2)
MAXSIM_MMA_ENTRY(maxsim_mma_ks_f16,     __half,        4, 2, 16, 4, 128, true,  2)  // 35072
MAXSIM_MMA_ENTRY(maxsim_mma_ks_bf16,    __nv_bfloat16, 4, 2, 16, 4, 128, true,  2)
