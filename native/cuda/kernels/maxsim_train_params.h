// The argument block of every MaxSim training kernel (native/cuda/kernels/maxsim_train.cu), by value.
// Shared by the kernels (nvcc) and by the binding that launches them (g++): fixed-width plain types only.
//
// Token sets are packed on the device ([T, d] rows, items back to back in item order, int64 starts,
// int32 lengths). Pair p is (i = p / num_docs, b = p % num_docs) for pairs == 0 ('all') and (i = p, b = p)
// for pairs == 1 ('diagonal'). argmax[p * stride + s] is the winning document token of query token s,
// stored as int16 when argmax16 != 0 (every document shorter than 32768 tokens: half the bytes of the
// largest buffer of the backward) and as int32 otherwise.
#pragma once
#include <stdint.h>

#include "../../common/maxsim_constants.h"

// Launch constants the kernels are written for, stated once: the training engine (native/cuda/
// train_plan.cc) checks plans against them and the addon hands them to the TypeScript planner
// (cuda.trainKernelInfo, src/backends/cuda-train-plan.ts); maxsim_train.cu static_asserts its own.
// maxsim_train_fwd_mma_*: block size, dynamic shared memory (3 stages of 64 rows x (128 + 8) halves,
// above the default 48 KiB), and where it applies: dim a multiple of 8 up to 128, sm_80 or newer.
#define MAXSIM_TRAIN_FWD_THREADS 128
#define MAXSIM_TRAIN_FWD_MMA_SMEM 52224
#define MAXSIM_TRAIN_MMA_DIM_MULTIPLE 8
#define MAXSIM_TRAIN_MMA_MAX_DIM 128
#define MAXSIM_TRAIN_MMA_MIN_CC 8
// maxsim_train_fwd_wgmma_* (all pairs, sm_90 only, same dims as mma): one producer and two consumer
// warpgroups, six stages of 128 rows x 128 dims (+ 1 KiB alignment slack); a slab is the query rows
// one CTA holds at a time (best[] holds a float per argmax slot of the pairs of one launch).
#define MAXSIM_TRAIN_FWD_WGMMA_THREADS 384
#define MAXSIM_TRAIN_FWD_WGMMA_SMEM 197632
#define MAXSIM_TRAIN_FWD_WGMMA_SLAB_ROWS 256
// its TMA twin (maxsim_train_fwd_wgmma_tma_*) reads tiles of this many document tokens (box [64, rows])
#define MAXSIM_TRAIN_FWD_WGMMA_TILE 128
#define MAXSIM_TRAIN_WGMMA_CC 9
// maxsim_train_dd_{count,place}_block: MAXSIM_TRAIN_WALK_WARPS warps per CTA, documents of at most
// MAXSIM_TRAIN_WALK_MAX_LENGTH tokens (the placement's dynamic shared memory is 2 * WARPS words per
// token of the block's longest document): native/common/constants.json, which the backward planner
// (src/backends/cuda-train-backward-plan.ts) reads too.
// Columns per pass of the split-row dD passes (kChunk) and counts per scan block (kScanTile).
#define MAXSIM_TRAIN_PARTIAL_COLS 128
#define MAXSIM_TRAIN_SCAN_TILE 4096

// Element types, as the token sets use them (DType in native/binding/token_set.h).
enum : int32_t { kTrainF32 = 0, kTrainF16 = 1, kTrainBF16 = 2 };

struct MaxsimTrainParams {
  const void* queries;           // query tokens [Tq, d], dtype query_dtype
  const int64_t* query_starts;   // [num_queries], packed rows
  const int32_t* query_lengths;  // [num_queries]
  const void* docs;              // document tokens [Td, d], dtype doc_dtype
  const int64_t* doc_starts;     // [num_docs], packed rows (ascending in document order)
  const int32_t* doc_lengths;    // [num_docs]
  float* scores;                 // forward: [num_pairs]
  float* best;                   // forward scratch: [gridDim.x * stride] slot maxima, one stripe per CTA
  void* argmax;                  // [num_pairs * stride] int16 or int32 (argmax16)
  const double* grad_scores;     // backward: [num_pairs]
  float* dq;                     // backward: [Tq, d] packed
  float* dd;                     // backward: [Td, d] packed
  // CSR of the sources of the document rows [row_begin, row_end) (one document block), by cells:
  // cell (r - row_begin) * qblocks + qb holds the sources of row r from query block qb.
  uint32_t* counts;              // [cells]: counted, then turned into the placement cursor by the scan
  uint32_t* offsets;             // [cells + 1]: exclusive scan of counts (offsets[cells] = total)
  uint32_t* block_sums;          // scan scratch: [ceil(cells / kScanTile)]
  uint32_t* sources;             // [total]: argmax slot index p * stride + s (< 2^32), per row ascending
  unsigned long long* stats;     // [2]: rows with sources, sources (contention measure; zeroed by the host)
  // Split rows (more than `chunk` sources): cut into chunks of `chunk` sources from the row's first
  // source; one warp per chunk sums it (fp64) into partials, a second pass adds a row's partials in
  // chunk order. Both passes work on the columns [k_begin, k_begin + 128) (one slice per launch).
  double* partials;              // [max_chunks * 128]: fp64 partial sums of one column slice
  uint32_t* chunk_off;           // [rows + 1]: exclusive scan of chunks per row (0 for unsplit rows)
  uint32_t* chunk_row;           // [max_chunks]: block-local row of each chunk
  int64_t num_pairs;
  int64_t stride;                // argmax slots per pair (>= every query length)
  int64_t doc_tokens;            // Td
  int64_t row_begin;             // first packed document row of the block
  int64_t row_end;               // one past its last row
  int64_t cells;                 // (row_end - row_begin) * qblocks
  int64_t chunk;                 // sources per chunk (> 0): rows with more sources are split
  int64_t max_chunks;            // capacity of partials / chunk_row (>= chunks of any block)
  int64_t k_begin;               // first column of the slice the split passes work on
  int32_t num_queries;
  int32_t num_docs;
  int32_t dim;
  int32_t pairs;                 // 0 = all, 1 = diagonal
  int32_t query_dtype;           // kTrainF32 / kTrainF16 / kTrainBF16
  int32_t doc_dtype;
  int32_t argmax16;              // 1: argmax entries are int16
  int32_t doc_begin;             // documents [doc_begin, doc_end) of the block
  int32_t doc_end;
  int32_t qblocks;               // query blocks of the CSR cells (1 for diagonal)
  int32_t qblock_size;           // queries per query block
  int32_t doc_groups;            // fwd_wgmma: a slab's documents are dealt into this many groups (>= 1)
};

// nvcc and g++ must agree on the layout the driver copies (20 pointers, 9 int64, 12 int32).
static_assert(sizeof(MaxsimTrainParams) == 280, "MaxsimTrainParams layout changed: update both sides");
