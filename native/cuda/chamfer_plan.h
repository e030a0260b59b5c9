// The plan of the Chamfer engine's forward pass (native/cuda/chamfer.h), made in TypeScript
// (src/backends/cuda-chamfer-plan.ts) and checked here: the engine runs only tables that its kernels
// can run on the given clouds. Header-only and Node-free, so that the host emulation of the kernels
// (native/cuda/test/chamfer_emulate.cc) checks its plans the same way.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
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

// Throws std::invalid_argument naming the table when `plan` is not one the kernels can run on clouds
// of these offsets: the cell, chunk and group ranges must be the running sums of the clouds' sizes,
// each grid at most MAXSIM_CHAMFER_CELL_BITS bits and no more cells than points (the bits are the
// plan's choice), and the units every (direction, pair, first source) to search, in order, once.
inline void CheckChamferPlan(const ChamferPlan& plan, const std::vector<int64_t>& p_off, const std::vector<int64_t>& q_off,
                             int64_t dim, bool both) {
  auto fail = [](const std::string& field, const std::string& expected, const std::string& received) {
    throw std::invalid_argument("Expected " + expected + " for plan." + field + " but received " + received);
  };
  auto str = [](int64_t v) { return std::to_string(v); };
  const int64_t pairs = static_cast<int64_t>(p_off.size()) - 1;
  if (plan.clouds.size() != static_cast<size_t>((2 * pairs + 1) * 4)) {
    fail("clouds", str((2 * pairs + 1) * 4) + " numbers (4 per cloud and the totals)", str(static_cast<int64_t>(plan.clouds.size())));
  }
  int64_t cell = 0, chunk = 0, group = 0;
  auto size = [&](int64_t c) { return c < pairs ? p_off[c + 1] - p_off[c] : q_off[c - pairs + 1] - q_off[c - pairs]; };
  for (int64_t c = 0; c <= 2 * pairs; c++) {
    const int64_t* row = plan.clouds.data() + 4 * c;
    const std::string at = "clouds[" + str(c) + "]";
    if (row[0] != cell || row[2] != chunk || row[3] != group) {
      fail(at, "first cell " + str(cell) + ", chunk " + str(chunk) + " and group " + str(group) + " (the running sums)",
           str(row[0]) + ", " + str(row[2]) + " and " + str(row[3]));
    }
    if (c == 2 * pairs) {
      if (row[1] != 0) fail(at, "0 cell bits in the totals row", str(row[1]));
      break;
    }
    const int64_t n = size(c), bits = row[1];
    if (bits < 0 || bits * dim > MAXSIM_CHAMFER_CELL_BITS || (bits > 0 && (int64_t(1) << (bits * dim)) > n)) {
      fail(at, "cell bits b with b * dim <= " + str(MAXSIM_CHAMFER_CELL_BITS) + " and at most " + str(n) +
                   " cells (the cloud's points)", str(bits));
    }
    if (n > 0) cell += int64_t(1) << (bits * dim);
    chunk += (n + kChamferChunk - 1) / kChamferChunk;
    group += (n + kChamferGroup - 1) / kChamferGroup;
  }
  if (plan.units.size() % 3 != 0) fail("units", "3 numbers per unit", str(static_cast<int64_t>(plan.units.size())));
  // every unit in (direction, pair, source) order, each a multiple of kChamferUnit in its cloud: then
  // a count equal to the needed one means each source is searched exactly once
  int64_t needed = 0;
  for (int dir = 0; dir < (both ? 2 : 1); dir++) {
    for (int64_t b = 0; b < pairs; b++) {
      const int64_t n = size(dir * pairs + b), m = size((1 - dir) * pairs + b);
      if (n > 0 && m > 0) needed += (n + kChamferUnit - 1) / kChamferUnit;
    }
  }
  const int64_t units = static_cast<int64_t>(plan.units.size() / 3);
  if (units != needed) fail("units", str(needed) + " units (one per " + str(kChamferUnit) + " sources to search)", str(units));
  int64_t prev_dir = -1, prev_b = -1, prev_i = -1;
  for (int64_t u = 0; u < units; u++) {
    const int64_t dir = plan.units[3 * u], b = plan.units[3 * u + 1], i = plan.units[3 * u + 2];
    const bool in = (dir == 0 || (both && dir == 1)) && b >= 0 && b < pairs;
    const int64_t n = in ? size(dir * pairs + b) : 0, m = in ? size((1 - dir) * pairs + b) : 0;
    const bool after = dir > prev_dir || (dir == prev_dir && (b > prev_b || (b == prev_b && i > prev_i)));
    if (!in || m == 0 || i < 0 || i >= n || i % kChamferUnit != 0 || !after) {
      fail("units[" + str(u) + "]",
           "a direction (0" + std::string(both ? " or 1" : "") + "), a pair with both clouds non-empty and a first source, a multiple of " +
               str(kChamferUnit) + " below the cloud's size, after the unit before it",
           str(dir) + ", " + str(b) + ", " + str(i));
    }
    prev_dir = dir;
    prev_b = b;
    prev_i = i;
  }
}

}  // namespace maxsim_cuda
