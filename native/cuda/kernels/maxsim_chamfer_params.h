// The argument block of every Chamfer kernel (native/cuda/kernels/maxsim_chamfer.cu), by value.
// Shared by the kernels (nvcc) and by the binding that launches them (g++): fixed-width plain types only.
//
// Points are compact on the device: pair by pair, point by point (p_off / q_off [B+1] are the running
// sums of the cloud sizes). Gradient rows: P's points are rows [0, tp), Q's are rows [tp, tp + tq);
// sources: P's point i is source i (its choice lands on a Q row), Q's point j is source tp + j.
#pragma once
#include <stdint.h>

struct ChamferParams {
  const float* p_raw;       // [tp, dim] the input coordinates
  const float* q_raw;       // [tq, dim]
  float* p_cen;             // [tp, dim + 1] centred coordinates and |x - c|^2
  float* q_cen;             // [tq, dim + 1]
  const int64_t* p_off;     // [num_pairs + 1]
  const int64_t* q_off;     // [num_pairs + 1]
  float* centers;           // [num_pairs, dim]
  // [num_tiles, 6]: direction (0: P -> Q, 1: Q -> P), pair, first source, target range [begin, end),
  // split (which slice of the target cloud: the partial results' slot)
  const int64_t* tiles;
  int32_t* idx_pq;          // [tp] nearest Q point of each P point (local index; -1: empty cloud)
  float* dist_pq;           // [tp]
  int32_t* idx_qp;          // [tq]
  float* dist_qp;           // [tq]
  // [num_splits, rows]: per split of the target cloud and source row (P's point i: row i; Q's point
  // j: row tp + j), the smallest search key and its target; with one split these are dist / idx
  float* part_key;
  int32_t* part_idx;
  const double* w_p;        // [tp] d loss / d dist_pq
  const double* w_q;        // [tq] d loss / d dist_qp (null: forward direction only)
  float* dp;                // [tp, dim]
  float* dq;                // [tq, dim]
  uint32_t* counts;         // [rows]: sources per row, then the placement cursor
  uint32_t* offsets;        // [rows + 1]: exclusive scan of counts
  uint32_t* block_sums;     // [ceil(rows / 1024)] scan scratch
  uint32_t* sources;        // [sources]: per row, ascending after chamfer_csr_sort
  void* pad_ptr;
  int64_t num_pairs;
  int64_t tp;
  int64_t tq;
  int64_t num_tiles;
  int64_t rows;             // tp + tq
  int32_t dim;              // 1..8
  int32_t bidirectional;    // 1: the Q -> P direction exists (idx_qp, w_q)
  int32_t num_splits;       // slices of every target cloud (tiles' split field < num_splits)
  int32_t pad0;
};

// chamfer_nearest_d<D>: kChamferTile sources per tile, ChamferRows(D) per thread in registers, so
// ChamferThreads(D) threads per block; ChamferBlocksPerSm(D) blocks resident per SM (the kernels'
// __launch_bounds__ minimum, which caps their registers: 48 up to d = 4, 64 above), the host sizing
// its plan in whole waves of them. Measured on the H200 against 8 rows x 128 threads at 64 registers
// and 4 rows at 40 registers (bench/NOTES.md, 'Chamfer distance').
#ifdef __CUDACC__
#define MAXSIM_CHAMFER_HD __host__ __device__
#else
#define MAXSIM_CHAMFER_HD
#endif
constexpr int64_t kChamferTile = 1024;
MAXSIM_CHAMFER_HD constexpr int ChamferRows(int /*dim*/) { return 4; }
MAXSIM_CHAMFER_HD constexpr int ChamferThreads(int dim) { return static_cast<int>(kChamferTile) / ChamferRows(dim); }
MAXSIM_CHAMFER_HD constexpr int ChamferBlocksPerSm(int dim) { return dim <= 4 ? 5 : 4; }

// nvcc and g++ must agree on the layout the driver copies (23 pointers, 5 int64, 4 int32).
static_assert(sizeof(ChamferParams) == 240, "ChamferParams layout changed: update both sides");
