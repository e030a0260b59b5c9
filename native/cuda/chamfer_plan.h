// The nearest-neighbour launch plan of the Chamfer engine (native/cuda/chamfer.h), header-only so
// that the host emulation of the kernels (native/cuda/test/chamfer_emulate.cc) runs the same plan.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/maxsim_chamfer_params.h"

namespace maxsim_cuda {

// The nearest-neighbour launch plan: tiles of kChamferTile sources per pair and direction, each
// against one of `splits` equal slices of its target cloud. The tile count is sized in whole waves
// of `slots` resident blocks (SMs x ChamferBlocksPerSm(d)), since a last, partial wave leaves SMs
// idle: the fewest splits whose wave fill is within 2% of the best, with slices of at least
// `min_slice` targets (each slice costs a rescan and a partial result per source) and the partial
// results ([splits, T] key and index, 8 bytes each) within `max_partial_bytes`.
struct ChamferPlan {
  std::vector<int64_t> tiles;  // [num_tiles, 6], the layout of ChamferParams::tiles
  int32_t splits = 1;
};

inline ChamferPlan PlanChamfer(const std::vector<int64_t>& p_off, const std::vector<int64_t>& q_off, bool both, int64_t slots,
                               int64_t min_slice = 2048, int64_t max_partial_bytes = int64_t(32) << 20) {
  ChamferPlan plan;
  const int64_t pairs = static_cast<int64_t>(p_off.size()) - 1;
  int64_t base = 0, max_targets = 0;
  for (int dir = 0; dir < (both ? 2 : 1); dir++) {
    const std::vector<int64_t>& s = dir == 0 ? p_off : q_off;
    const std::vector<int64_t>& t = dir == 0 ? q_off : p_off;
    for (int64_t b = 0; b < pairs; b++) {
      const int64_t n = s[b + 1] - s[b], m = t[b + 1] - t[b];
      if (n == 0 || m == 0) continue;  // chamfer_finalize writes an empty target's -1 / +inf itself
      base += (n + kChamferTile - 1) / kChamferTile;
      max_targets = std::max(max_targets, m);
    }
  }
  const int64_t points = p_off.back() + q_off.back();
  const int64_t max_splits = std::max<int64_t>(
      1, std::min({int64_t(16), max_targets / std::max<int64_t>(min_slice, 1), max_partial_bytes / std::max<int64_t>(8 * points, 1)}));
  if (base > 0 && slots > 0) {
    auto fill = [&](int64_t k) {
      const int64_t tiles = base * k, waves = (tiles + slots - 1) / slots;
      return static_cast<double>(tiles) / static_cast<double>(waves * slots);
    };
    double best = 0;
    for (int64_t k = 1; k <= max_splits; k++) best = std::max(best, fill(k));
    for (int64_t k = 1; k <= max_splits; k++) {
      if (fill(k) >= best - 0.02) {
        plan.splits = static_cast<int32_t>(k);
        break;
      }
    }
  }
  const int64_t S = plan.splits;
  for (int dir = 0; dir < (both ? 2 : 1); dir++) {
    const std::vector<int64_t>& s = dir == 0 ? p_off : q_off;
    const std::vector<int64_t>& t = dir == 0 ? q_off : p_off;
    for (int64_t b = 0; b < pairs; b++) {
      const int64_t n = s[b + 1] - s[b], m = t[b + 1] - t[b];
      if (n == 0 || m == 0) continue;
      for (int64_t i = 0; i < n; i += kChamferTile) {
        for (int64_t k = 0; k < S; k++) plan.tiles.insert(plan.tiles.end(), {dir, b, i, m * k / S, m * (k + 1) / S, k});
      }
    }
  }
  return plan;
}

}  // namespace maxsim_cuda
