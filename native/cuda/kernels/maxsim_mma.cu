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
// LAUNCH CONTRACT (every entry point below; the numbers: maxsim_registry.h):
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
#include "maxsim_mma.cuh"

#include "maxsim_registry.h"

#define MAXSIM_MMA_ENTRY(NAME, E, G, NGRP, TN, S, KD, KSPLIT, CTAS)                              \
  extern "C" __global__ void __launch_bounds__(MAXSIM_MMA_BLOCK(G, NGRP), CTAS) NAME(const MaxsimParams p) { \
    maxsim::mma_body<maxsim::E, G, NGRP, TN, S, KD, KSPLIT>(p);                                          \
  }
// one registry row (MAXSIM_MMA_VARIANTS in maxsim_registry.h, with the numbers) -> the f16 and bf16 entry points
#define MAXSIM_MMA_ROW(SFX, G, NGRP, TN, S, KD, KSPLIT, CTAS)                 \
  MAXSIM_MMA_ENTRY(maxsim_mma_##SFX##_f16, F16, G, NGRP, TN, S, KD, KSPLIT, CTAS) \
  MAXSIM_MMA_ENTRY(maxsim_mma_##SFX##_bf16, BF16, G, NGRP, TN, S, KD, KSPLIT, CTAS)
MAXSIM_MMA_VARIANTS(MAXSIM_MMA_ROW)
