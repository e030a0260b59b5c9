// The argument block of every Chamfer kernel (native/cuda/kernels/maxsim_chamfer.cu), by value.
// Shared by the kernels (nvcc) and by the binding that launches them (g++): fixed-width plain types only.
//
// Points are compact on the device: pair by pair, point by point (p_off / q_off [B+1] are the running
// sums of the cloud sizes). Rows: P's point i is row i, Q's point j is row tp + j (gradient rows and
// sources alike). The forward pass sorts every cloud along a Morton curve of its cells (a permutation
// within the cloud's own rows, so a cloud keeps its range of positions) and searches in that order.
#pragma once
#include <stdint.h>

#include "../../common/maxsim_constants.h"

struct ChamferParams {
  const float* p_raw;       // [tp, dim] the input coordinates
  const float* q_raw;       // [tq, dim]
  float* p_cen;             // [tp, dim + 1] centred coordinates and |x - c|^2, in sorted order
  float* q_cen;             // [tq, dim + 1] (p_cen + tp * (dim + 1): one array of the tp + tq rows)
  const int64_t* p_off;     // [num_pairs + 1]
  const int64_t* q_off;     // [num_pairs + 1]
  uint32_t* bounds;         // [2, num_pairs, dim]: the bounding boxes (lo keys, then hi keys; chamfer_bounds)
  float* centers;           // [num_pairs, dim]
  float* extent;            // [num_pairs] half the longest side of the pair's bounding box (the cell grid)
  uint32_t* pair_x2;        // [num_pairs] bits of the largest centred |x|^2 of the pair (the key's error bound)
  // [2 num_pairs, 4]: per cloud (P's clouds, then Q's, pair order): first cell, cell bits per axis,
  // first chunk (kChamferChunk sorted points), first group (kChamferGroup sorted points)
  const int64_t* clouds;
  uint32_t* perm;           // [tp + tq] sorted position -> row
  float* boxes;             // [num_chunks + groups, 2, dim]: bounding boxes (lo, hi) of chunks, then groups
  const int64_t* units;     // [num_units, 3]: direction (0: P -> Q, 1: Q -> P), pair, first sorted source
  int32_t* idx_pq;          // [tp] nearest Q point of each P point (local index; -1: empty cloud)
  float* dist_pq;           // [tp]
  int32_t* idx_qp;          // [tq]
  float* dist_qp;           // [tq]
  const double* w_p;        // [tp] d loss / d dist_pq
  const double* w_q;        // [tq] d loss / d dist_qp (null: forward direction only)
  float* dp;                // [tp, dim]
  float* dq;                // [tq, dim]
  // A CSR of `rows` rows: the backward's (rows: gradient rows, sources: sources) and the cell sort's
  // (rows: cells, sources: perm)
  uint32_t* counts;         // [rows]: entries per row, then the placement cursor
  uint32_t* offsets;        // [rows + 1]: exclusive scan of counts (chamfer_nearest_d*: the cells')
  uint32_t* block_sums;     // [ceil(rows / 1024)] scan scratch
  uint32_t* sources;        // [entries]: per row, ascending after chamfer_csr_sort
  int64_t num_pairs;
  int64_t tp;
  int64_t tq;
  int64_t num_units;
  int64_t rows;             // tp + tq (the cell sort's scan: the number of cells)
  int64_t num_chunks;       // chunk boxes before the group boxes in `boxes`
  int32_t dim;              // 1..8
  int32_t bidirectional;    // 1: the Q -> P direction exists (idx_qp, w_q)
  int32_t prune;            // 1: skip chunks that provably hold no nearer target; 0: visit every target
  int32_t pad0;
};

// chamfer_nearest_d<D>: each warp searches for kChamferUnit sorted sources of one cloud (ChamferRows
// per lane, in registers), kChamferChunk targets at a time; ChamferThreads(D) threads per block,
// ChamferBlocksPerSm(D) blocks resident per SM (the kernels' __launch_bounds__ minimum, which caps
// their registers).
#ifdef __CUDACC__
#define MAXSIM_CHAMFER_HD __host__ __device__
#else
#define MAXSIM_CHAMFER_HD
#endif
// The plan's numbers (chunk, group, unit, cell bits) come from native/common/constants.json, which the
// TypeScript planner (src/backends/cuda-chamfer-plan.ts) reads too.
constexpr int64_t kChamferChunk = MAXSIM_CHAMFER_CHUNK;  // targets per bounding box, per running minimum, per load
constexpr int64_t kChamferGroup = MAXSIM_CHAMFER_GROUP;  // targets per coarse bounding box (32 chunks: one per lane)
constexpr int64_t kChamferBoundsRun = 512;   // rows per warp in chamfer_bounds
MAXSIM_CHAMFER_HD constexpr int ChamferRows(int /*dim*/) { return 4; }
constexpr int64_t kChamferUnit = MAXSIM_CHAMFER_UNIT;  // sources per warp: 32 lanes x ChamferRows
static_assert(kChamferUnit == 32 * ChamferRows(1) && kChamferGroup == 32 * kChamferChunk, "the Chamfer plan's units");
MAXSIM_CHAMFER_HD constexpr int ChamferThreads(int /*dim*/) { return 128; }
MAXSIM_CHAMFER_HD constexpr int ChamferBlocksPerSm(int dim) { return dim <= 4 ? 8 : 6; }

// nvcc and g++ must agree on the layout the driver copies (26 pointers, 6 int64, 4 int32).
static_assert(sizeof(ChamferParams) == 272, "ChamferParams layout changed: update both sides");
