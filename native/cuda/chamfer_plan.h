// The launch plan of the Chamfer engine's forward pass (native/cuda/chamfer.h), header-only so that
// the host emulation of the kernels (native/cuda/test/chamfer_emulate.cc) runs the same plan.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/maxsim_chamfer_params.h"

namespace maxsim_cuda {

struct ChamferPlan {
  // [2B + 1, 4], ChamferParams::clouds: per cloud (P's, then Q's) its first cell, cell bits per axis,
  // first chunk and first group; the closing row holds the totals
  std::vector<int64_t> clouds;
  std::vector<int64_t> units;  // [num_units, 3], ChamferParams::units
  int64_t cells() const { return clouds[clouds.size() - 4]; }
  int64_t chunks() const { return clouds[clouds.size() - 2]; }
  int64_t groups() const { return clouds[clouds.size() - 1]; }
};

// Cell bits per axis for a cloud of n points: about two points per cell or more (a finer grid does
// not shorten the sorted runs' boxes), 24 bits at most in all.
inline int ChamferCellBits(int64_t n, int64_t dim) {
  int L = 0;
  while ((L + 1) * dim <= 24 && (int64_t(2) << ((L + 1) * dim)) <= n) L++;
  return L;
}

inline ChamferPlan PlanChamfer(const std::vector<int64_t>& p_off, const std::vector<int64_t>& q_off, int64_t dim, bool both) {
  ChamferPlan plan;
  const int64_t pairs = static_cast<int64_t>(p_off.size()) - 1;
  int64_t cell = 0, chunk = 0, group = 0;
  for (int side = 0; side < 2; side++) {
    const std::vector<int64_t>& off = side == 0 ? p_off : q_off;
    for (int64_t b = 0; b < pairs; b++) {
      const int64_t n = off[b + 1] - off[b];
      const int L = ChamferCellBits(n, dim);
      plan.clouds.insert(plan.clouds.end(), {cell, L, chunk, group});
      if (n > 0) cell += int64_t(1) << (L * dim);
      chunk += (n + kChamferChunk - 1) / kChamferChunk;
      group += (n + kChamferGroup - 1) / kChamferGroup;
    }
  }
  plan.clouds.insert(plan.clouds.end(), {cell, 0, chunk, group});
  for (int dir = 0; dir < (both ? 2 : 1); dir++) {
    const std::vector<int64_t>& s = dir == 0 ? p_off : q_off;
    const std::vector<int64_t>& t = dir == 0 ? q_off : p_off;
    for (int64_t b = 0; b < pairs; b++) {
      const int64_t n = s[b + 1] - s[b], m = t[b + 1] - t[b];
      if (n == 0 || m == 0) continue;  // chamfer_finalize writes an empty target's -1 / +inf itself
      for (int64_t i = 0; i < n; i += kChamferUnit) plan.units.insert(plan.units.end(), {dir, b, i});
    }
  }
  return plan;
}

}  // namespace maxsim_cuda
