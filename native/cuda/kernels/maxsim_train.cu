// maxsim_train.cu: MaxSim training on the GPU: a tensor-core argmax forward (fwd_mma_body) and
// CUDA-core kernels for everything else (and as the forward's fallback).
// The bodies live by job in maxsim_train_forward.cuh, _dq.cuh, _dd_csr.cuh (building dD's CSR) and
// _dd_gather.cuh (summing it; the atomic dD); this file holds the shared helpers and the entry points.
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

}  // namespace maxsim_train

// The kernel bodies, by job (each header reopens namespace maxsim_train).
#include "maxsim_train_forward.cuh"
#include "maxsim_train_dq.cuh"
#include "maxsim_train_dd_csr.cuh"
#include "maxsim_train_dd_gather.cuh"

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
