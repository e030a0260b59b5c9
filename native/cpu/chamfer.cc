#include "chamfer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "cpu_features.h"
#include "engine.h"
#include "thread_pool.h"

namespace maxsim_cpu {

namespace {

// Calls fn(item) for every item on the pool; items are handed out one at a time and results never
// depend on which worker takes one.
template <class Fn>
void ForEach(int64_t count, int threads, const Fn& fn) {
  if (count <= 0) return;
  ThreadPool& pool = GlobalPool();
  const int64_t wanted = threads > 0 ? threads : pool.size();
  const int workers = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({wanted, pool.size(), count})));
  std::atomic<int64_t> next{0};
  pool.Run(workers, [&](int) {
    for (;;) {
      const int64_t item = next.fetch_add(1);
      if (item >= count) break;
      fn(item);
    }
  });
}

// off[b] = points of the clouds before b (compact order); off[count] = all points.
std::vector<int64_t> CompactOffsets(const PointSpans& s) {
  std::vector<int64_t> off(static_cast<size_t>(s.count + 1), 0);
  for (int64_t b = 0; b < s.count; b++) off[b + 1] = off[b] + s.lengths[b];
  return off;
}

const float* Row(const PointSpans& s, int64_t b, int64_t i) {
  return s.data + (static_cast<int64_t>(s.starts[b]) + i) * s.dim;
}

// The reported distance: in double from the fp32 inputs, rounded once, so every ISA (and the CUDA
// engine) reports the same bits for the same neighbour.
float ExactDistance(const float* p, const float* q, int64_t d) {
  double s = 0.0;
  for (int64_t k = 0; k < d; k++) {
    const double t = static_cast<double>(p[k]) - static_cast<double>(q[k]);
    s += t * t;
  }
  return static_cast<float>(s);
}

// A range of one directed search: sources [begin, end) of cloud `pair` of the source side.
struct Item {
  int dir;  // 0: P -> Q, 1: Q -> P
  int64_t pair;
  int64_t begin;
  int64_t end;
};

}  // namespace

std::vector<const ChamferKernels*> UsableChamferKernels() {
  std::vector<const ChamferKernels*> out;
  for (const ChamferKernels* k : {ChamferAvx512(), ChamferAvx2()}) {
    if (k && Admitted("chamfer", k->name)) out.push_back(k);
  }
  out.push_back(ChamferPortable());
  return out;
}

const ChamferKernels* SelectChamferKernels(const std::string& requested, std::string* error) {
  const auto usable = UsableChamferKernels();
  if (requested.empty() || requested == "auto") return usable.front();
  for (const ChamferKernels* k : usable) {
    if (requested == k->name) return k;
  }
  std::string names;
  for (const ChamferKernels* k : usable) names += std::string(names.empty() ? "" : ", ") + k->name;
  *error = "Expected one of auto, " + names + " for isa but received '" + requested + "' (not usable on this CPU)";
  return nullptr;
}

void ChamferForward(const ChamferKernels& kern, const PointSpans& p, const PointSpans& q, int32_t* idx_pq,
                    float* dist_pq, int32_t* idx_qp, float* dist_qp, int threads) {
  const int64_t B = p.count;
  const int64_t d = p.dim;
  const int64_t S = d + 1;
  if (B == 0) return;
  const std::vector<int64_t> off_p = CompactOffsets(p);
  const std::vector<int64_t> off_q = CompactOffsets(q);

  // Centred copies, compact order, rows of [x - c, ..., |x - c|^2] with c the midpoint of the pair's
  // bounding box: the expanded form then cancels only at the clouds' own scale, not their offset.
  std::vector<float> cp(static_cast<size_t>(off_p[B] * S));
  std::vector<float> cq(static_cast<size_t>(off_q[B] * S));
  ForEach(B, threads, [&](int64_t b) {
    float lo[kChamferMaxDim], hi[kChamferMaxDim], c[kChamferMaxDim];
    std::fill(lo, lo + d, INFINITY);
    std::fill(hi, hi + d, -INFINITY);
    for (const PointSpans* s : {&p, &q}) {
      for (int64_t i = 0; i < s->lengths[b]; i++) {
        const float* r = Row(*s, b, i);
        for (int64_t k = 0; k < d; k++) {
          lo[k] = std::min(lo[k], r[k]);
          hi[k] = std::max(hi[k], r[k]);
        }
      }
    }
    // Empty pairs and unchecked non-finite input keep the origin.
    for (int64_t k = 0; k < d; k++) {
      c[k] = std::isfinite(lo[k]) && std::isfinite(hi[k]) ? lo[k] * 0.5f + hi[k] * 0.5f : 0.0f;
    }
    for (int side = 0; side < 2; side++) {
      const PointSpans& s = side == 0 ? p : q;
      float* out = (side == 0 ? cp.data() + off_p[b] * S : cq.data() + off_q[b] * S);
      for (int64_t i = 0; i < s.lengths[b]; i++) {
        const float* r = Row(s, b, i);
        float* o = out + i * S;
        float sq = 0.0f;
        for (int64_t k = 0; k < d; k++) {
          o[k] = r[k] - c[k];
          sq += o[k] * o[k];
        }
        o[d] = sq;
      }
    }
  });

  // Work items: ranges of whole tiles, small enough to balance ragged clouds over the workers.
  const int64_t tile = kern.tile_points(d);
  std::vector<Item> items;
  for (int dir = 0; dir < (idx_qp ? 2 : 1); dir++) {
    const PointSpans& src = dir == 0 ? p : q;
    for (int64_t b = 0; b < B; b++) {
      const int64_t n = src.lengths[b];
      const int64_t m = (dir == 0 ? q : p).lengths[b];
      // ~2M pair evaluations per item, at least one tile.
      const int64_t per = std::max<int64_t>(1, (int64_t{1} << 21) / std::max<int64_t>(1, m * tile)) * tile;
      for (int64_t i0 = 0; i0 < n; i0 += per) items.push_back({dir, b, i0, std::min(n, i0 + per)});
    }
  }
  ForEach(static_cast<int64_t>(items.size()), threads, [&](int64_t it) {
    const Item& w = items[static_cast<size_t>(it)];
    const bool fwd = w.dir == 0;
    const PointSpans& src = fwd ? p : q;
    const PointSpans& dst = fwd ? q : p;
    const int64_t so = (fwd ? off_p : off_q)[w.pair];
    const int64_t to = (fwd ? off_q : off_p)[w.pair];
    const float* csrc = (fwd ? cp : cq).data() + so * S;
    const float* cdst = (fwd ? cq : cp).data() + to * S;
    int32_t* idx = (fwd ? idx_pq : idx_qp) + so;
    float* dist = (fwd ? dist_pq : dist_qp) + so;
    const int64_t m = dst.lengths[w.pair];
    if (m == 0) {
      std::fill(idx + w.begin, idx + w.end, -1);
      std::fill(dist + w.begin, dist + w.end, INFINITY);
      return;
    }
    for (int64_t i0 = w.begin; i0 < w.end; i0 += tile) {
      const int64_t n = std::min(tile, w.end - i0);
      kern.nearest_tile(csrc + i0 * S, n, cdst, m, d, idx + i0);
    }
    for (int64_t i = w.begin; i < w.end; i++) dist[i] = ExactDistance(Row(src, w.pair, i), Row(dst, w.pair, idx[i]), d);
  });
}

namespace {

// CSR inverse of one direction's argmin: for every destination row (compact over the destination
// side) the sources that chose it, in ascending source order.
struct Inverse {
  std::vector<int64_t> row_begin;  // [dst rows + 1]
  std::vector<int64_t> sources;    // compact source indices
};

Inverse Invert(const PointSpans& src, const std::vector<int64_t>& src_off, const std::vector<int64_t>& dst_off,
               const int32_t* idx) {
  Inverse inv;
  const int64_t rows = dst_off.back();
  inv.row_begin.assign(static_cast<size_t>(rows + 1), 0);
  for (int64_t b = 0; b < src.count; b++) {
    for (int64_t i = src_off[b]; i < src_off[b + 1]; i++) {
      if (idx[i] >= 0) inv.row_begin[dst_off[b] + idx[i] + 1]++;
    }
  }
  for (int64_t r = 0; r < rows; r++) inv.row_begin[r + 1] += inv.row_begin[r];
  inv.sources.resize(static_cast<size_t>(inv.row_begin[rows]));
  std::vector<int64_t> fill(inv.row_begin.begin(), inv.row_begin.end() - 1);
  for (int64_t b = 0; b < src.count; b++) {
    for (int64_t i = src_off[b]; i < src_off[b + 1]; i++) {
      if (idx[i] >= 0) inv.sources[fill[dst_off[b] + idx[i]]++] = i;
    }
  }
  return inv;
}

// Gradient rows of side X (compact rows [begin, end) of cloud b): the own term through idx_x into Y,
// then every Y source in X's CSR row, in double, written once as fp32 into the X buffer layout.
void GradientRows(const PointSpans& x, const PointSpans& y, const std::vector<int64_t>& x_off,
                  const std::vector<int64_t>& y_off, int64_t b, int64_t begin, int64_t end, const int32_t* idx_x,
                  const double* w_x, const Inverse* inv, const double* w_y, float* dx) {
  const int64_t d = x.dim;
  double acc[kChamferMaxDim];
  for (int64_t i = begin; i < end; i++) {
    const int64_t local = i - x_off[b];
    const float* xi = Row(x, b, local);
    std::fill(acc, acc + d, 0.0);
    if (idx_x != nullptr && idx_x[i] >= 0 && w_x[i] != 0.0) {
      const float* yn = Row(y, b, idx_x[i]);
      for (int64_t k = 0; k < d; k++) acc[k] += w_x[i] * (static_cast<double>(xi[k]) - yn[k]);
    }
    if (inv != nullptr) {
      for (int64_t e = inv->row_begin[i]; e < inv->row_begin[i + 1]; e++) {
        const int64_t j = inv->sources[e];
        if (w_y[j] == 0.0) continue;
        const float* yj = Row(y, b, j - y_off[b]);
        for (int64_t k = 0; k < d; k++) acc[k] += w_y[j] * (static_cast<double>(xi[k]) - yj[k]);
      }
    }
    float* out = dx + (static_cast<int64_t>(x.starts[b]) + local) * d;
    for (int64_t k = 0; k < d; k++) out[k] = static_cast<float>(2.0 * acc[k]);
  }
}

}  // namespace

void ChamferBackward(const PointSpans& p, const PointSpans& q, const int32_t* idx_pq, const double* w_p,
                     const int32_t* idx_qp, const double* w_q, float* dp, float* dq, int threads) {
  const int64_t B = p.count;
  if (B == 0) return;
  const std::vector<int64_t> off_p = CompactOffsets(p);
  const std::vector<int64_t> off_q = CompactOffsets(q);
  // dQ gathers the P -> Q choices that landed on each Q point; dP those of Q -> P.
  const Inverse into_q = Invert(p, off_p, off_q, idx_pq);
  Inverse into_p;
  if (idx_qp) into_p = Invert(q, off_q, off_p, idx_qp);

  constexpr int64_t kRowsPerItem = 4096;
  std::vector<Item> items;
  for (int side = 0; side < 2; side++) {
    const PointSpans& s = side == 0 ? p : q;
    for (int64_t b = 0; b < B; b++) {
      const int64_t base = (side == 0 ? off_p : off_q)[b];
      for (int64_t i0 = 0; i0 < s.lengths[b]; i0 += kRowsPerItem) {
        items.push_back({side, b, base + i0, base + std::min<int64_t>(s.lengths[b], i0 + kRowsPerItem)});
      }
    }
  }
  ForEach(static_cast<int64_t>(items.size()), threads, [&](int64_t it) {
    const Item& w = items[static_cast<size_t>(it)];
    if (w.dir == 0) {
      GradientRows(p, q, off_p, off_q, w.pair, w.begin, w.end, idx_pq, w_p, idx_qp ? &into_p : nullptr, w_q, dp);
    } else {
      GradientRows(q, p, off_q, off_p, w.pair, w.begin, w.end, idx_qp, w_q, &into_q, w_p, dq);
    }
  });
}

}  // namespace maxsim_cpu
