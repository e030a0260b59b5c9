// Chamfer distance and nearest neighbours on the CPU: for every point of one cloud the nearest point
// of the paired cloud (index and squared distance), both directions, and the backward pass that routes
// gradients through the saved argmin. Plain C++ (no Node-API), like engine.h and train.h.
//
// Clouds come in pairs: cloud b of P goes with cloud b of Q. Points are fp32 rows of d <= 8
// coordinates, described by spans (first row, row count) like token sets. Per-point outputs are
// "compact": pair by pair, point by point (entry off[b] + i, off = running sum of the cloud sizes).
//
// Search: the expanded form |q|^2 - 2 p.q on coordinates shifted by a per-pair centre (the midpoint of
// the pair's bounding box, so points far from the origin do not cancel), fp32, ties to the lowest
// index. Reported distance: sum_k (p_k - q*_k)^2 in double, rounded once to fp32, whichever ISA ran.
// An empty target cloud gives index -1 and distance +inf.
//
// Determinism: every output has one owner and a fixed order, so results are bitwise identical for any
// thread count.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "../common/maxsim_constants.h"

namespace maxsim_cpu {

constexpr int kChamferMaxDim = MAXSIM_CHAMFER_MAX_DIM;  // native/common/constants.json

struct PointSpans {
  const float* data = nullptr;  // rows of `dim` floats
  const double* starts = nullptr;
  const int32_t* lengths = nullptr;
  int64_t count = 0;
  int64_t dim = 0;
};

// One nearest-neighbour tile: sources src[i * stride ...] for i < n (n <= tile_points(dim)), targets
// dst[j * stride ...] for j < m with dst[j * stride + dim] = |q_j|^2 (both centred); writes the
// local index of each source's nearest target to out[i]. m >= 1.
using NearestTileFn = void (*)(const float* src, int64_t n, const float* dst, int64_t m, int64_t dim,
                               int32_t* out);

struct ChamferKernels {
  const char* name;
  int (*tile_points)(int64_t dim);  // sources per tile
  NearestTileFn nearest_tile;
};

// Defined in chamfer_<isa>.cc; null where the TU was compiled out.
const ChamferKernels* ChamferAvx512();
const ChamferKernels* ChamferAvx2();
const ChamferKernels* ChamferPortable();

// Usable on this CPU, best first.
std::vector<const ChamferKernels*> UsableChamferKernels();
// `requested` empty or "auto": the best; null and *error set when unknown or unusable here.
const ChamferKernels* SelectChamferKernels(const std::string& requested, std::string* error);

// Nearest of every P point in its paired Q cloud (idx_pq, dist_pq: compact over P) and, when idx_qp
// is non-null, the reverse direction (compact over Q). `threads` <= 0: all.
void ChamferForward(const ChamferKernels& k, const PointSpans& p, const PointSpans& q, int32_t* idx_pq,
                    float* dist_pq, int32_t* idx_qp, float* dist_qp, int threads);

// Gradients of L = sum_i w_p[i] * dist_pq[i] + sum_j w_q[j] * dist_qp[j] (w_q / idx_qp null: the
// forward direction only). dp / dq have the layout of the input buffers and must be zero on entry;
// only rows of real points are written. Indices must come from ChamferForward on the same inputs
// (range-checked by the caller). Spans must not overlap, so each gradient row has one owner.
//   dP_i = 2 w_p[i] (p_i - q*_i) + sum_{j : idx_qp[j] = i} 2 w_q[j] (p_i - q_j)
// and symmetrically for dQ; the sums run through a CSR inverse of the argmin, sources in ascending
// order, in double.
void ChamferBackward(const PointSpans& p, const PointSpans& q, const int32_t* idx_pq, const double* w_p,
                     const int32_t* idx_qp, const double* w_q, float* dp, float* dq, int threads);

}  // namespace maxsim_cpu
