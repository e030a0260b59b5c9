// The residual codec and search stages over the per-ISA kernels (residual.h): packing, threading on
// the engine's pool, the encode's bucketing, and the candidate pipeline of one query.
#include "residual.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "../common/half_bits.h"
#include "cpu_features.h"
#include "engine.h"
#include "thread_pool.h"

namespace maxsim_cpu {

namespace {

// Calls fn(worker, item) for items [0, count) handed out one at a time over the pool.
template <class Fn>
void ForEach(int64_t count, int threads, const Fn& fn) {
  if (count <= 0) return;
  ThreadPool& pool = GlobalPool();
  const int64_t wanted = threads > 0 ? threads : pool.size();
  const int workers = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({wanted, pool.size(), count})));
  std::atomic<int64_t> next{0};
  pool.Run(workers, [&](int w) {
    for (;;) {
      const int64_t item = next.fetch_add(1);
      if (item >= count) break;
      fn(w, item);
    }
  });
}

int Workers(int threads) {
  const int n = GlobalPool().size();
  return threads > 0 ? std::min(threads, n) : n;
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Centroids in lane blocks [kp / lanes][d][lanes] (zero past nc) and their bias (-inf past nc).
void PackCentroids(const float* c, int64_t nc, int64_t d, int lanes, bool l2, std::vector<float>* pack,
                   std::vector<float>* bias) {
  const int64_t kp = RoundUp(nc, lanes);
  pack->assign(static_cast<size_t>(kp * d), 0.0f);
  bias->assign(static_cast<size_t>(kp), -INFINITY);
  for (int64_t j = 0; j < nc; j++) {
    double sq = 0.0;
    for (int64_t k = 0; k < d; k++) {
      const float v = c[j * d + k];
      (*pack)[(j / lanes) * d * lanes + k * lanes + j % lanes] = v;
      sq += static_cast<double>(v) * v;
    }
    (*bias)[j] = l2 ? static_cast<float>(-0.5 * sq) : 0.0f;
  }
}

// Row `t` of a token set's data as float32 into dst.
void LoadRow(const TokenSet& s, int64_t t, float* dst) {
  const int64_t d = s.dim;
  if (s.dtype == DType::Float32) {
    std::memcpy(dst, static_cast<const float*>(s.data) + t * d, static_cast<size_t>(d) * 4);
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(s.data) + t * d;
    for (int64_t k = 0; k < d; k++)
      dst[k] = static_cast<float>(s.dtype == DType::Float16 ? F16BitsValue(p[k]) : Bf16BitsValue(p[k]));
  }
}

// The query transposed and zero-padded to lqp lanes, packed in lane blocks for the dots kernel.
void PackQuery(const float* q, int64_t lq, int64_t d, int64_t lqp, int lanes, std::vector<float>* qpack,
               std::vector<float>* qt) {
  qpack->assign(static_cast<size_t>(lqp * d), 0.0f);
  qt->assign(static_cast<size_t>(std::max<int64_t>(1, lq * d)), 0.0f);
  for (int64_t i = 0; i < lq; i++)
    for (int64_t k = 0; k < d; k++) {
      const float v = q[i * d + k];
      (*qpack)[(i / lanes) * d * lanes + k * lanes + i % lanes] = v;
      (*qt)[k * lq + i] = v;
    }
}

// qct [k][lqp] by the dots kernel over the pool.
void QueryCentroids(const ResidualKernels& kern, const ResidualIndex& ix, const std::vector<float>& qpack,
                    int64_t lqp, int threads, std::vector<float>* qct) {
  qct->assign(static_cast<size_t>(ix.k * lqp), 0.0f);
  constexpr int64_t kChunk = 256;
  ForEach((ix.k + kChunk - 1) / kChunk, threads, [&](int, int64_t item) {
    const int64_t c0 = item * kChunk;
    kern.dots(qpack.data(), lqp, ix.centroids, c0, std::min(ix.k, c0 + kChunk), ix.d, qct->data());
  });
}

// Symmetric int8 of v / scale (round to nearest even, clamped to +-127).
int8_t ToInt8(float v, float scale) {
  const float r = std::nearbyint(v / scale);
  return static_cast<int8_t>(std::max(-127.0f, std::min(127.0f, r)));
}

// One query as every stage reads it: packed and transposed, its centroid scores, and (kernel sets
// with int8 residual scoring) its int8 form and the int8 residual table (residual.h, ResidualQuery).
struct QueryForm {
  int64_t lqp = 16;
  std::vector<float> qpack, qt, qct, qscale;
  std::vector<uint8_t> q8;
  std::vector<int8_t> tab8;
  ResidualQuery rq;
};

void PrepareQuery(const ResidualKernels& kern, const ResidualIndex& ix, const float* query, int64_t lq, int threads,
                  QueryForm* f) {
  const int64_t d = ix.d;
  f->lqp = std::max<int64_t>(16, RoundUp(lq, 16));
  if (ix.k * f->lqp >= (int64_t{1} << 31))
    throw std::invalid_argument("Expected centroids x query tokens (rounded up to 16) below 2^31 but received " +
                                std::to_string(ix.k) + " x " + std::to_string(f->lqp));
  PackQuery(query, lq, d, f->lqp, kern.lanes, &f->qpack, &f->qt);
  QueryCentroids(kern, ix, f->qpack, f->lqp, threads, &f->qct);
  f->rq = ResidualQuery{};
  f->rq.qt = f->qt.data();
  f->rq.qct = f->qct.data();
  f->rq.lq = lq;
  f->rq.lqp = f->lqp;
  f->rq.k = ix.k;
  f->rq.d = d;
  const int bits = ix.codes.bits;
  if (!(kern.int8_residual & (1 << bits)) || d > 1024) return;
  const int64_t dq = (d + 3) / 4;
  const int levels = 1 << bits;
  float wmax = 0.0f;
  for (int64_t k = 0; k < d; k++)
    for (int e = 0; e < levels; e++) wmax = std::max(wmax, std::fabs(ix.codes.tables[k * kResidualTable + e]));
  const float sw = wmax > 0.0f ? wmax / 127.0f : 1.0f;
  f->tab8.assign(static_cast<size_t>(dq * 16), 0);
  for (int64_t k = 0; k < d; k++)
    for (int e = 0; e < levels; e++)
      f->tab8[(k / 4) * 16 + (k % 4) * 4 + e] = ToInt8(ix.codes.tables[k * kResidualTable + e], sw);
  f->q8.assign(static_cast<size_t>(f->lqp * dq * 4), 128);
  f->qscale.assign(static_cast<size_t>(f->lqp), 0.0f);
  for (int64_t i = 0; i < lq; i++) {
    float qmax = 0.0f;
    for (int64_t k = 0; k < d; k++) qmax = std::max(qmax, std::fabs(query[i * d + k]));
    const float sq = qmax > 0.0f ? qmax / 127.0f : 1.0f;
    f->qscale[i] = sq * sw;
    for (int64_t k = 0; k < d; k++)
      f->q8[((i / 16) * dq + k / 4) * 64 + (i % 16) * 4 + k % 4] =
          static_cast<uint8_t>(ToInt8(query[i * d + k], sq) + 128);
  }
  f->rq.q8 = f->q8.data();
  f->rq.qscale = f->qscale.data();
  f->rq.tab8 = f->tab8.data();
  f->rq.dq = dq;
}

bool Better(float sa, int32_t ia, float sb, int32_t ib) { return sa > sb || (sa == sb && ia < ib); }

// The groups of a two-level assignment, packed for the kernels: coarse bias, and per group its
// members' centroids in lane blocks (pack from pack_at[grp], kp[grp] lanes) with their bias.
struct GroupPlan {
  const ResidualGroups* g = nullptr;
  int64_t d = 0;
  std::vector<float> coarse_bias;
  std::vector<float> pack, bias;
  std::vector<int64_t> pack_at, bias_at, kp;
};

void PlanGroups(const ResidualKernels& kern, const float* centroids, int64_t d, const ResidualGroups& g,
                GroupPlan* plan) {
  plan->g = &g;
  plan->d = d;
  std::vector<float> cp, cb;
  PackCentroids(g.coarse, g.g, d, kern.lanes, true, &cp, &cb);
  plan->coarse_bias.assign(cb.begin(), cb.begin() + g.g);
  plan->pack_at.resize(g.g);
  plan->bias_at.resize(g.g);
  plan->kp.resize(g.g);
  std::vector<float> rows;
  for (int64_t j = 0; j < g.g; j++) {
    const int64_t m = g.offsets[j + 1] - g.offsets[j];
    rows.resize(static_cast<size_t>(std::max<int64_t>(1, m * d)));
    for (int64_t i = 0; i < m; i++)
      std::memcpy(rows.data() + i * d, centroids + static_cast<int64_t>(g.members[g.offsets[j] + i]) * d,
                  static_cast<size_t>(d) * 4);
    plan->pack_at[j] = static_cast<int64_t>(plan->pack.size());
    plan->bias_at[j] = static_cast<int64_t>(plan->bias.size());
    plan->kp[j] = RoundUp(m, kern.lanes);
    if (m == 0) continue;
    PackCentroids(rows.data(), m, d, kern.lanes, true, &cp, &cb);
    plan->pack.insert(plan->pack.end(), cp.begin(), cp.end());
    plan->bias.insert(plan->bias.end(), cb.begin(), cb.end());
  }
}

// Rows [n][d] through the groups (one worker): coarse scores by the dots kernel, each row's probe
// best non-empty groups, then per group the rows that chose it against its members.
void AssignRowsGrouped(const ResidualKernels& kern, const GroupPlan& plan, const float* x, int64_t n, int32_t* ids,
                       float* scores) {
  const ResidualGroups& g = *plan.g;
  const int64_t d = plan.d;
  const int64_t np = std::max<int64_t>(16, RoundUp(n, 16));
  std::vector<float> xpack, xt;
  PackQuery(x, n, d, np, kern.lanes, &xpack, &xt);
  std::vector<float> qct(static_cast<size_t>(g.g * np));
  kern.dots(xpack.data(), np, g.coarse, 0, g.g, d, qct.data());
  const int64_t probe = std::max<int64_t>(1, std::min(g.probe, g.g));
  std::vector<int32_t> pick(static_cast<size_t>(n * probe), -1);
  std::vector<float> ps(static_cast<size_t>(probe));
  std::vector<int64_t> count(static_cast<size_t>(g.g + 1), 0);
  int32_t first_nonempty = 0;
  while (g.offsets[first_nonempty + 1] == g.offsets[first_nonempty]) first_nonempty++;
  for (int64_t r = 0; r < n; r++) {
    int32_t* top = pick.data() + r * probe;
    int64_t have = 0;
    for (int64_t j = 0; j < g.g; j++) {
      if (g.offsets[j + 1] == g.offsets[j]) continue;
      const float s = qct[j * np + r] + plan.coarse_bias[j];
      // insertion into the sorted top list (groups arrive in ascending id, so ties keep the lower)
      int64_t at = have;
      while (at > 0 && Better(s, static_cast<int32_t>(j), ps[at - 1], top[at - 1])) at--;
      if (at >= probe) continue;
      for (int64_t m = std::min(have, probe - 1); m > at; m--) {
        ps[m] = ps[m - 1];
        top[m] = top[m - 1];
      }
      ps[at] = s;
      top[at] = static_cast<int32_t>(j);
      have = std::min(probe, have + 1);
    }
    if (have == 0) top[have++] = first_nonempty;  // NaN scores: any valid group
    for (int64_t m = 0; m < have; m++) count[top[m] + 1]++;
  }
  for (int64_t j = 0; j < g.g; j++) count[j + 1] += count[j];
  std::vector<int32_t> rows_of(static_cast<size_t>(count[g.g]));
  std::vector<int64_t> cursor(count.begin(), count.end() - 1);
  for (int64_t r = 0; r < n; r++)
    for (int64_t m = 0; m < probe && pick[r * probe + m] >= 0; m++)
      rows_of[cursor[pick[r * probe + m]]++] = static_cast<int32_t>(r);
  std::vector<float> best(static_cast<size_t>(n), -INFINITY);
  std::fill(ids, ids + n, -1);
  std::vector<float> buf, sc;
  std::vector<int32_t> pos;
  for (int64_t j = 0; j < g.g; j++) {
    const int64_t m = count[j + 1] - count[j];
    if (m == 0) continue;
    buf.resize(static_cast<size_t>(m * d));
    for (int64_t i = 0; i < m; i++)
      std::memcpy(buf.data() + i * d, x + rows_of[count[j] + i] * d, static_cast<size_t>(d) * 4);
    pos.resize(static_cast<size_t>(m));
    sc.resize(static_cast<size_t>(m));
    kern.assign(buf.data(), m, plan.pack.data() + plan.pack_at[j], plan.bias.data() + plan.bias_at[j], plan.kp[j],
                d, pos.data(), sc.data());
    for (int64_t i = 0; i < m; i++) {
      const int32_t r = rows_of[count[j] + i];
      const int32_t id = g.members[g.offsets[j] + pos[i]];
      if (ids[r] < 0 || Better(sc[i], id, best[r], ids[r])) {
        ids[r] = id;
        best[r] = sc[i];
      }
    }
  }
  if (scores) std::copy(best.begin(), best.end(), scores);
}

// Candidates (lists): for each query token, the documents of its probed centroids' lists, best
// centroid first, so a document's first visit by token i carries max over its bag of the probed
// centroids' scores for i; a token that reaches the document through none of its lists counts its
// np-th best centroid score (no unprobed centroid scores more: the sum bounds the bag interaction
// from above, and equals it for documents every token reaches). Cost: the probed lists' length.
void CandidatesByLists(const ResidualIndex& ix, const std::vector<float>& qct, int64_t lq, int64_t lqp, int64_t np,
                       const std::vector<int32_t>& probe_ids, std::vector<int32_t>* cand, std::vector<float>* ci) {
  // per-thread buffers over the documents: stamp base + i + 1 marks a visit by token i
  thread_local std::vector<uint32_t> stamp;
  thread_local std::vector<float> acc;
  thread_local uint32_t base = 0;
  if (static_cast<int64_t>(stamp.size()) != ix.docs || base > 0xF0000000u - static_cast<uint32_t>(lq)) {
    stamp.assign(static_cast<size_t>(ix.docs), 0);
    acc.assign(static_cast<size_t>(ix.docs), 0.0f);
    base = 0;
  }
  cand->clear();
  double floor_sum = 0.0;
  for (int64_t i = 0; i < lq && np > 0; i++) {
    const uint32_t mine = base + static_cast<uint32_t>(i) + 1;
    const float floor = qct[static_cast<int64_t>(probe_ids[i * np + np - 1]) * lqp + i];
    floor_sum += floor;
    for (int64_t j = 0; j < np; j++) {
      const int64_t c = probe_ids[i * np + j];
      const float gain = qct[c * lqp + i] - floor;
      for (int64_t e = static_cast<int64_t>(ix.ivf_offsets[c]); e < static_cast<int64_t>(ix.ivf_offsets[c + 1]); e++) {
        const int32_t b = ix.ivf[e];
        const uint32_t sb = stamp[b];
        if (sb == mine) continue;  // reached by a better centroid of this token
        if (sb <= base) {          // first visit in this query
          acc[b] = 0.0f;
          cand->push_back(b);
        }
        acc[b] += gain;
        stamp[b] = mine;
      }
    }
  }
  base += static_cast<uint32_t>(lq) + 1;
  ci->resize(cand->size());
  for (size_t n = 0; n < cand->size(); n++) (*ci)[n] = static_cast<float>(floor_sum + acc[(*cand)[n]]);
}

void BagScores(const ResidualKernels& kern, const ResidualIndex& ix, const std::vector<float>& qct, int64_t lq,
               int64_t lqp, const std::vector<uint8_t>& keep, int threads, const std::vector<int32_t>& cand,
               std::vector<float>* ci);

// Candidates (bags): the union of the probed lists, each scored by centroid interaction over its
// whole bag (PLAID's stage; keep: the pruning threshold's centroids, empty for all).
void CandidatesByBags(const ResidualKernels& kern, const ResidualIndex& ix, const std::vector<float>& qct, int64_t lq,
                      int64_t lqp, const std::vector<uint8_t>& probed, const std::vector<uint8_t>& keep, int threads,
                      std::vector<int32_t>* cand, std::vector<float>* ci) {
  std::vector<uint8_t> mark(static_cast<size_t>(ix.docs), 0);
  for (int64_t c = 0; c < ix.k; c++) {
    if (!probed[c]) continue;
    for (int64_t j = static_cast<int64_t>(ix.ivf_offsets[c]); j < static_cast<int64_t>(ix.ivf_offsets[c + 1]); j++)
      mark[ix.ivf[j]] = 1;
  }
  cand->clear();
  for (int64_t b = 0; b < ix.docs; b++)
    if (mark[b]) cand->push_back(static_cast<int32_t>(b));
  BagScores(kern, ix, qct, lq, lqp, keep, threads, *cand, ci);
}

// The best n of cand by ci (ties to the lower id), in no particular order.
void KeepBest(int64_t n, std::vector<int32_t>* cand, std::vector<float>* ci) {
  const int64_t nc = static_cast<int64_t>(cand->size());
  if (n >= nc) return;
  std::vector<int64_t> pick(static_cast<size_t>(nc));
  for (int64_t i = 0; i < nc; i++) pick[i] = i;
  std::nth_element(pick.begin(), pick.begin() + n, pick.end(), [&](int64_t a, int64_t b) {
    return Better((*ci)[a], (*cand)[a], (*ci)[b], (*cand)[b]);
  });
  std::vector<int32_t> c2(static_cast<size_t>(n));
  std::vector<float> s2(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) {
    c2[i] = (*cand)[pick[i]];
    s2[i] = (*ci)[pick[i]];
  }
  cand->swap(c2);
  ci->swap(s2);
}

// Centroid interaction over the whole bag of each listed document.
void BagScores(const ResidualKernels& kern, const ResidualIndex& ix, const std::vector<float>& qct, int64_t lq,
               int64_t lqp, const std::vector<uint8_t>& keep, int threads, const std::vector<int32_t>& cand,
               std::vector<float>* ci) {
  ci->resize(cand.size());
  std::vector<std::vector<float>> scratch(static_cast<size_t>(Workers(threads)), std::vector<float>(lqp));
  constexpr int64_t kDocs = 256;
  const int64_t nc = static_cast<int64_t>(cand.size());
  ForEach((nc + kDocs - 1) / kDocs, threads, [&](int w, int64_t item) {
    for (int64_t i = item * kDocs; i < std::min(nc, item * kDocs + kDocs); i++) {
      const int64_t b0 = static_cast<int64_t>(ix.bag_offsets[cand[i]]);
      const int64_t b1 = static_cast<int64_t>(ix.bag_offsets[cand[i] + 1]);
      (*ci)[i] = kern.centroid_doc(qct.data(), lqp, lq, ix.bags + b0, b1 - b0, keep.empty() ? nullptr : keep.data(),
                                   scratch[w].data());
    }
  });
}

}  // namespace

std::vector<const ResidualKernels*> UsableResidualKernels() {
  std::vector<const ResidualKernels*> out;
  bool avx512 = false, avx2 = false;
  for (const IsaKernels* k : UsableIsas()) {
    const std::string name = k->name;
    if (name == "avx512") avx512 = true;
    if (name == "avx2") avx2 = true;
  }
  // the int8 residual set runs in the int8 engine's VNNI translation unit: admitted like it
  if (avx512 && ResidualAvx512() && ResidualAvx512Vnni() && Admitted("int8", "avx512-vnni"))
    out.push_back(ResidualAvx512Vnni());
  if (avx512 && ResidualAvx512()) out.push_back(ResidualAvx512());
  if (avx2 && ResidualAvx2()) out.push_back(ResidualAvx2());
  out.push_back(ResidualPortable());
  return out;
}

const ResidualKernels* SelectResidualKernels(const std::string& requested, std::string* error) {
  const auto usable = UsableResidualKernels();
  if (requested.empty() || requested == "auto") return usable.front();
  for (const ResidualKernels* k : usable)
    if (requested == k->name) return k;
  std::string names;
  for (const ResidualKernels* k : usable) names += std::string(names.empty() ? "'" : ", '") + k->name + "'";
  *error = "Expected one of " + names + " (usable here) for isa but received '" + requested + "'";
  return nullptr;
}

void ResidualAssign(const ResidualKernels& kern, const float* x, int64_t n, const float* centroids, int64_t nc,
                    int64_t d, bool l2, int32_t* ids, float* scores, int threads) {
  std::vector<float> pack, bias;
  PackCentroids(centroids, nc, d, kern.lanes, l2, &pack, &bias);
  const int64_t kp = RoundUp(nc, kern.lanes);
  constexpr int64_t kRows = 256;
  ForEach((n + kRows - 1) / kRows, threads, [&](int, int64_t item) {
    const int64_t r0 = item * kRows;
    const int64_t m = std::min(kRows, n - r0);
    kern.assign(x + r0 * d, m, pack.data(), bias.data(), kp, d, ids + r0, scores ? scores + r0 : nullptr);
  });
}

void ResidualAssignGrouped(const ResidualKernels& kern, const float* x, int64_t n, const float* centroids, int64_t,
                           int64_t d, const ResidualGroups& groups, int32_t* ids, float* scores, int threads) {
  GroupPlan plan;
  PlanGroups(kern, centroids, d, groups, &plan);
  constexpr int64_t kRows = 4096;
  ForEach((n + kRows - 1) / kRows, threads, [&](int, int64_t item) {
    const int64_t r0 = item * kRows;
    AssignRowsGrouped(kern, plan, x + r0 * d, std::min(kRows, n - r0), ids + r0, scores ? scores + r0 : nullptr);
  });
}

void ResidualEncode(const ResidualKernels& kern, const TokenSet& docs, int64_t first_token, const float* centroids,
                    int64_t nc, const ResidualGroups* groups, const float* cutoffs, const float* weights, int bits,
                    int32_t* cids, uint8_t* codes, double* sq_error, int threads) {
  const int64_t d = docs.dim;
  const int64_t ncut = (1 << bits) - 1;
  std::vector<double> first(static_cast<size_t>(docs.count + 1), 0.0);  // part offset of each document
  for (int64_t b = 0; b < docs.count; b++) first[b + 1] = first[b] + docs.lengths[b];
  const int64_t total = static_cast<int64_t>(first[docs.count]);
  std::vector<float> pack, bias;
  GroupPlan plan;
  if (groups) PlanGroups(kern, centroids, d, *groups, &plan);
  else PackCentroids(centroids, nc, d, kern.lanes, true, &pack, &bias);
  const int64_t kp = RoundUp(nc, kern.lanes);
  // Chunks are whole blocks of the stream, so every code word has one owner within a call.
  constexpr int64_t kChunk = 256 * kResidualBlock;
  const int64_t c_first = first_token / kChunk;
  const int64_t chunks = total == 0 ? 0 : (first_token + total - 1) / kChunk - c_first + 1;
  std::vector<double> err(static_cast<size_t>(Workers(threads)), 0.0);
  const int64_t block_bytes = d * 2 * bits;
  ForEach(chunks, threads, [&](int w, int64_t item) {
    const int64_t g0 = std::max(first_token, (c_first + item) * kChunk);  // stream index
    const int64_t t0 = g0 - first_token;                                 // part index
    const int64_t n = std::min((c_first + item + 1) * kChunk - g0, total - t0);
    std::vector<float> rows(static_cast<size_t>(n * d));
    // The document holding part token t0, then a walk forward through the chunk.
    int64_t doc = std::upper_bound(first.begin(), first.end(), static_cast<double>(t0)) - first.begin() - 1;
    for (int64_t t = 0; t < n; t++) {
      while (static_cast<double>(t0 + t) >= first[doc + 1]) doc++;
      const int64_t src = static_cast<int64_t>(docs.starts[doc]) + (t0 + t - static_cast<int64_t>(first[doc]));
      LoadRow(docs, src, rows.data() + t * d);
    }
    if (groups) AssignRowsGrouped(kern, plan, rows.data(), n, cids + g0, nullptr);
    else kern.assign(rows.data(), n, pack.data(), bias.data(), kp, d, cids + g0, nullptr);
    double e = 0.0;
    for (int64_t t = 0; t < n; t++) {
      const int64_t g = g0 + t;
      const float* c = centroids + static_cast<int64_t>(cids[g]) * d;
      uint8_t* block = codes + (g / kResidualBlock) * block_bytes;
      const int lane = static_cast<int>(g % kResidualBlock);
      for (int64_t k = 0; k < d; k++) {
        const float r = rows[t * d + k] - c[k];
        const float* cut = cutoffs + k * ncut;
        int code = 0;
        while (code < ncut && cut[code] < r) code++;
        const int bit = lane * bits;
        block[k * 2 * bits + bit / 8] |= static_cast<uint8_t>(code << (bit % 8));
        const double diff = static_cast<double>(rows[t * d + k]) - (static_cast<double>(c[k]) + weights[k * kResidualTable + code]);
        e += diff * diff;
      }
    }
    err[w] += e;
  });
  if (sq_error) {
    double s = 0.0;
    for (double e : err) s += e;
    *sq_error = s;
  }
}

void ResidualScoreDocs(const ResidualKernels& kern, const ResidualIndex& ix, const float* query, int64_t lq,
                       const int32_t* docs, int64_t n, float* out, int threads) {
  QueryForm f;
  PrepareQuery(kern, ix, query, lq, threads, &f);
  constexpr int64_t kDocs = 16;
  ForEach((n + kDocs - 1) / kDocs, threads, [&](int, int64_t item) {
    for (int64_t i = item * kDocs; i < std::min(n, item * kDocs + kDocs); i++) {
      const int64_t s = static_cast<int64_t>(ix.doc_offsets[docs[i]]);
      const int64_t e = static_cast<int64_t>(ix.doc_offsets[docs[i] + 1]);
      out[i] = kern.residual_doc(f.rq, ix.codes, s, e - s);
    }
  });
}

void CentroidScoreDocs(const ResidualKernels& kern, const ResidualIndex& ix, const float* query, int64_t lq,
                       const uint8_t* keep, const int32_t* docs, int64_t n, float* out, int threads) {
  QueryForm f;
  PrepareQuery(kern, ix, query, lq, threads, &f);
  const int64_t lqp = f.lqp;
  std::vector<std::vector<float>> scratch(static_cast<size_t>(Workers(threads)), std::vector<float>(lqp));
  constexpr int64_t kDocs = 256;
  ForEach((n + kDocs - 1) / kDocs, threads, [&](int w, int64_t item) {
    for (int64_t i = item * kDocs; i < std::min(n, item * kDocs + kDocs); i++) {
      const int64_t b0 = static_cast<int64_t>(ix.bag_offsets[docs[i]]);
      const int64_t b1 = static_cast<int64_t>(ix.bag_offsets[docs[i] + 1]);
      out[i] = kern.centroid_doc(f.qct.data(), lqp, lq, ix.bags + b0, b1 - b0, keep, scratch[w].data());
    }
  });
}

// Each query token's np best centroids (ties to the lower id) marked in probed: one pass over qct's
// rows, a row skipped unless one of its scores beats its token's current np-th best.
// id [lq][np]: each token's probed centroids, best first.
void ProbeCentroids(const std::vector<float>& qct, int64_t k, int64_t lq, int64_t lqp, int64_t np,
                    std::vector<uint8_t>* probed, std::vector<int32_t>* probe_ids) {
  std::vector<int32_t>& id = *probe_ids;
  id.assign(static_cast<size_t>(std::max<int64_t>(0, lq * np)), 0);
  if (np <= 0 || lq == 0) return;
  if (np > 64) {  // wide probes: a selection per token
    std::vector<int32_t> order(static_cast<size_t>(k));
    std::vector<float> col(static_cast<size_t>(k));
    for (int64_t i = 0; i < lq; i++) {
      for (int64_t c = 0; c < k; c++) {
        order[c] = static_cast<int32_t>(c);
        col[c] = qct[c * lqp + i];
      }
      auto by = [&](int32_t a, int32_t b) { return Better(col[a], a, col[b], b); };
      std::nth_element(order.begin(), order.begin() + (np - 1), order.end(), by);
      std::sort(order.begin(), order.begin() + np, by);
      for (int64_t j = 0; j < np; j++) {
        (*probed)[order[j]] = 1;
        id[i * np + j] = order[j];
      }
    }
    return;
  }
  // per token its best np (value, id), best first; the first np centroids start every list
  std::vector<float> val(static_cast<size_t>(lq * np));
  std::vector<float> worst(static_cast<size_t>(lqp), INFINITY);
  for (int64_t i = 0; i < lq; i++) {
    float* v = val.data() + i * np;
    int32_t* d = id.data() + i * np;
    for (int64_t c = 0; c < np; c++) {
      int64_t at = c;
      const float s = qct[c * lqp + i];
      while (at > 0 && Better(s, static_cast<int32_t>(c), v[at - 1], d[at - 1])) {
        v[at] = v[at - 1];
        d[at] = d[at - 1];
        at--;
      }
      v[at] = s;
      d[at] = static_cast<int32_t>(c);
    }
    worst[i] = v[np - 1];
  }
  for (int64_t c = np; c < k; c++) {
    const float* row = qct.data() + c * lqp;
    bool any = false;
    for (int64_t i = 0; i < lqp; i++) any |= row[i] > worst[i];  // vectorizes; +inf past lq
    if (!any) continue;
    for (int64_t i = 0; i < lq; i++) {
      const float s = row[i];
      if (!(s > worst[i])) continue;  // equal: the earlier (lower) id stays
      float* v = val.data() + i * np;
      int32_t* d = id.data() + i * np;
      int64_t at = np - 1;
      while (at > 0 && s > v[at - 1]) {
        v[at] = v[at - 1];
        d[at] = d[at - 1];
        at--;
      }
      v[at] = s;
      d[at] = static_cast<int32_t>(c);
      worst[i] = v[np - 1];
    }
  }
  for (int64_t j = 0; j < lq * np; j++) (*probed)[id[j]] = 1;
}

void ResidualSearch(const ResidualKernels& kern, const ResidualIndex& ix, const float* query, int64_t lq,
                    const ResidualSearchParams& p, std::vector<int32_t>* ids, std::vector<float>* scores,
                    ResidualSearchStats* st) {
  using Clock = std::chrono::steady_clock;
  auto t = Clock::now();
  QueryForm f;
  PrepareQuery(kern, ix, query, lq, p.threads, &f);
  const int64_t lqp = f.lqp;
  const std::vector<float>& qct = f.qct;
  // Probe: each query token's nprobe best centroids; pruning (bags, a finite threshold only): the
  // centroids whose best query-token score reaches the threshold.
  const int64_t np = std::min(p.nprobe, ix.k);
  std::vector<uint8_t> probed(static_cast<size_t>(ix.k), 0), keep;
  std::vector<int32_t> probe_ids;
  ProbeCentroids(qct, ix.k, lq, lqp, np, &probed, &probe_ids);
  for (int64_t c = 0; c < ix.k; c++) st->probed += probed[c];
  if (p.threshold == -INFINITY || (p.lists && p.refine == 0)) {  // the pruning mask serves the bag stage
    st->kept_centroids = ix.k;
  } else {
    keep.assign(static_cast<size_t>(ix.k), 0);
    for (int64_t c = 0; c < ix.k; c++) {
      float best = -INFINITY;
      for (int64_t i = 0; i < lq; i++) best = std::max(best, qct[c * lqp + i]);
      keep[c] = best >= p.threshold ? 1 : 0;
      st->kept_centroids += keep[c];
    }
  }
  st->ms_centroids = MsSince(t);
  t = Clock::now();
  std::vector<int32_t> cand;
  std::vector<float> ci;
  if (p.lists) CandidatesByLists(ix, qct, lq, lqp, np, probe_ids, &cand, &ci);
  else CandidatesByBags(kern, ix, qct, lq, lqp, probed, keep, p.threads, &cand, &ci);
  st->generated = static_cast<int64_t>(cand.size());
  if (p.lists && p.refine > 0) {  // hybrid: the lists' best `refine`, re-scored on their whole bags
    KeepBest(std::max(p.refine, p.candidates), &cand, &ci);
    BagScores(kern, ix, qct, lq, lqp, keep, p.threads, cand, &ci);
  }
  st->ms_candidates = MsSince(t);
  t = Clock::now();
  // The best `candidates` documents by their interaction score.
  const int64_t nc = static_cast<int64_t>(cand.size());
  std::vector<int64_t> pick(cand.size());
  for (int64_t i = 0; i < nc; i++) pick[i] = i;
  const int64_t keep_n = std::min(nc, std::max<int64_t>(0, p.candidates));
  auto by_ci = [&](int64_t a, int64_t b) { return Better(ci[a], cand[a], ci[b], cand[b]); };
  if (keep_n < nc) std::nth_element(pick.begin(), pick.begin() + keep_n, pick.end(), by_ci);
  pick.resize(static_cast<size_t>(keep_n));
  st->ms_interaction = MsSince(t);
  t = Clock::now();
  // The fused residual MaxSim of the survivors.
  const ResidualQuery& rq = f.rq;
  std::vector<float> rs(static_cast<size_t>(keep_n));
  constexpr int64_t kResDocs = 8;
  ForEach((keep_n + kResDocs - 1) / kResDocs, p.threads, [&](int, int64_t item) {
    for (int64_t i = item * kResDocs; i < std::min(keep_n, item * kResDocs + kResDocs); i++) {
      const int32_t doc = cand[pick[i]];
      const int64_t s = static_cast<int64_t>(ix.doc_offsets[doc]);
      rs[i] = kern.residual_doc(rq, ix.codes, s, static_cast<int64_t>(ix.doc_offsets[doc + 1]) - s);
    }
  });
  std::vector<int64_t> ord(static_cast<size_t>(keep_n));
  for (int64_t i = 0; i < keep_n; i++) ord[i] = i;
  std::sort(ord.begin(), ord.end(),
            [&](int64_t a, int64_t b) { return Better(rs[a], cand[pick[a]], rs[b], cand[pick[b]]); });
  ids->resize(static_cast<size_t>(keep_n));
  scores->resize(static_cast<size_t>(keep_n));
  for (int64_t i = 0; i < keep_n; i++) {
    (*ids)[i] = cand[pick[ord[i]]];
    (*scores)[i] = rs[ord[i]];
  }
  st->scored = keep_n;
  st->ms_residual = MsSince(t);
}

}  // namespace maxsim_cpu
