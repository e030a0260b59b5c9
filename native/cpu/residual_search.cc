// The search stages of one query over the per-ISA kernels (residual.h): the query's packed and
// int8 forms, its centroid scores and probes, candidates by the lists or the bags, the selection,
// and the fused residual MaxSim of the survivors.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "residual.h"
#include "residual_pool.h"
#include "residual_stages.h"

namespace maxsim_cpu {

using namespace residual_detail;

namespace {

// (s, c) into a list best first (v / d) at slot `at` and up past every worse entry (Better: ties to
// the lower id): both probes' step
void InsertBest(float* v, int32_t* d, int64_t at, float s, int32_t c) {
  while (at > 0 && Better(s, c, v[at - 1], d[at - 1])) {
    v[at] = v[at - 1];
    d[at] = d[at - 1];
    at--;
  }
  v[at] = s;
  d[at] = c;
}

// Each token's np best centroids by Better (best first) among those offered: what one worker keeps
// over the chunks of centroid scores it computes, while they are in its cache. Without NaN, Better
// is a total order and the np best are one set whatever the order of the offers, so the lists
// merged over the workers are ProbeCentroids'. A NaN score is noted instead: where it lands in
// ProbeCentroids' lists depends on the order of the whole pass, so such a query is probed there.
struct TokenBest {
  int64_t lq = 0, lqp = 0, np = 0;
  std::vector<float> val, worst;  // [lq][np]; [lqp] the np-th best so far (+inf past lq)
  std::vector<int32_t> id, n;     // [lq][np]; [lq] entries so far
  int64_t filling = 0;            // tokens with fewer than np entries
  bool nan = false;               // a NaN score was offered

  void Init(int64_t lq_, int64_t lqp_, int64_t np_) {
    lq = lq_, lqp = lqp_, np = np_;
    val.assign(static_cast<size_t>(lq * np), 0.0f);
    id.assign(static_cast<size_t>(lq * np), 0);
    n.assign(static_cast<size_t>(lq), 0);
    worst.assign(static_cast<size_t>(lqp), INFINITY);
    filling = lq;
  }
  // (s, c) into token i's list: at its end while it fills, else over its worst; then up past every
  // worse entry
  void Insert(int64_t i, float s, int32_t c) {
    int64_t at = np - 1;
    if (n[i] < np) {
      at = n[i]++;
      if (n[i] == np) filling--;
    }
    InsertBest(val.data() + i * np, id.data() + i * np, at, s, c);
    if (n[i] == np) worst[i] = val[i * np + np - 1];
  }
  void Offer(const float* qct, int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1 && !nan; c++) {
      const float* row = qct + c * lqp;
      if (filling > 0) {
        for (int64_t i = 0; i < lq; i++) {
          nan |= row[i] != row[i];
          if (n[i] < np || Better(row[i], static_cast<int32_t>(c), val[i * np + np - 1], id[i * np + np - 1]))
            Insert(i, row[i], static_cast<int32_t>(c));
        }
        continue;
      }
      bool any = false, odd = false;
      for (int64_t i = 0; i < lqp; i++) {  // vectorizes; +inf past lq
        any |= row[i] >= worst[i];
        odd |= row[i] != row[i];
      }
      nan |= odd;
      if (!any) continue;
      for (int64_t i = 0; i < lq; i++)
        if (row[i] >= worst[i] && Better(row[i], static_cast<int32_t>(c), worst[i], id[i * np + np - 1]))
          Insert(i, row[i], static_cast<int32_t>(c));
    }
  }
};

// qct [k][lqp] by the dots kernel over the pool; with np in [1, 64], also each token's np best
// centroids (probe_ids [lq][np], best first: ProbeCentroids' lists) from each chunk of scores as it
// is computed, so the probe reads no 8 MB of scores back from memory (K = 65,536).
void QueryCentroids(const ResidualKernels& kern, const ResidualIndex& ix, const std::vector<float>& qpack,
                    int64_t lqp, int threads, ScoreRows* qct, int64_t lq = 0, int64_t np = 0,
                    std::vector<int32_t>* probe_ids = nullptr) {
  qct->resize(static_cast<size_t>(ix.k * lqp));  // every score written below
  constexpr int64_t kChunk = 256;
  const bool probe = probe_ids && np >= 1 && np <= 64 && np <= ix.k && lq > 0;
  std::vector<TokenBest> best(probe ? static_cast<size_t>(Workers(threads)) : 0);
  for (TokenBest& b : best) b.Init(lq, lqp, np);
  ForEach((ix.k + kChunk - 1) / kChunk, threads, [&](int w, int64_t item) {
    const int64_t c0 = item * kChunk, c1 = std::min(ix.k, c0 + kChunk);
    kern.dots(qpack.data(), lqp, ix.centroids, c0, c1, ix.d, qct->data());
    if (probe) best[w].Offer(qct->data(), c0, c1);
  });
  if (!probe) return;
  for (const TokenBest& b : best)
    if (b.nan) return;  // probe_ids left empty: SearchStages probes the whole table
  // each token's np best of the workers' lists (each sorted, at most np long)
  probe_ids->assign(static_cast<size_t>(lq * np), 0);
  std::vector<std::pair<float, int32_t>> all;
  for (int64_t i = 0; i < lq; i++) {
    all.clear();
    for (const TokenBest& b : best)
      for (int64_t j = 0; j < b.n[i]; j++) all.emplace_back(b.val[i * np + j], b.id[i * np + j]);
    const auto by = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
      return Better(a.first, a.second, b.first, b.second);
    };
    // (the workers were offered all K >= np centroids, so they hold at least np entries)
    const int64_t take = std::min<int64_t>(np, static_cast<int64_t>(all.size()));
    std::partial_sort(all.begin(), all.begin() + take, all.end(), by);
    for (int64_t j = 0; j < take; j++) (*probe_ids)[i * np + j] = all[j].second;
  }
}

// Symmetric int8 of v / scale (round to nearest even, clamped to +-lim).
int8_t ToInt8(float v, float scale, float lim = 127.0f) {
  const float r = std::nearbyint(v / scale);
  return static_cast<int8_t>(std::max(-lim, std::min(lim, r)));
}

}  // namespace

void residual_detail::FormQuery(const ResidualKernels& kern, const ResidualIndex& ix, const float* query, int64_t lq,
                                QueryForm* f) {
  const int64_t d = ix.d;
  f->lqp = QueryLanes(lq);
  if (ix.k * f->lqp >= (int64_t{1} << 31))
    throw std::invalid_argument("Expected centroids x query tokens (rounded up to 16) below 2^31 but received " +
                                std::to_string(ix.k) + " x " + std::to_string(f->lqp));
  PackQuery(query, lq, d, f->lqp, kern.lanes, &f->qpack, &f->qt);
  f->qct.clear();
  f->rq = ResidualQuery{};
  f->rq.qt = f->qt.data();
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
  const float wlim = static_cast<float>(kern.int8_weight_max);
  const float sw = wmax > 0.0f ? wmax / wlim : 1.0f;
  f->tab8.assign(static_cast<size_t>(dq * 16), 0);
  for (int64_t k = 0; k < d; k++)
    for (int e = 0; e < levels; e++)
      f->tab8[(k / 4) * 16 + (k % 4) * 4 + e] = ToInt8(ix.codes.tables[k * kResidualTable + e], sw, wlim);
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

namespace {

// The whole form of one query: FormQuery and its centroid scores over the pool (with np > 0, also
// its probe lists where QueryCentroids finds them).
void PrepareQuery(const ResidualKernels& kern, const ResidualIndex& ix, const float* query, int64_t lq, int threads,
                  QueryForm* f, int64_t np = 0) {
  FormQuery(kern, ix, query, lq, f);
  QueryCentroids(kern, ix, f->qpack, f->lqp, threads, &f->qct, lq, std::min(np, ix.k), &f->probe_ids);
  f->probe_np = f->probe_ids.empty() ? 0 : std::min(np, ix.k);
  f->rq.qct = f->qct.data();
}

// Candidates (lists): for each query token, the documents of its probed centroids' lists, best
// centroid first, so a document's first visit by token i carries max over its bag of the probed
// centroids' scores for i; a token that reaches the document through none of its lists counts its
// np-th best centroid score (no unprobed centroid scores more: the sum bounds the bag interaction
// from above, and equals it for documents every token reaches). Cost: the probed lists' length.
void CandidatesByLists(const ResidualIndex& ix, const ScoreRows& qct, int64_t lq, int64_t lqp, int64_t np,
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

void BagScores(const ResidualKernels& kern, const ResidualIndex& ix, const ScoreRows& qct, int64_t lq,
               int64_t lqp, const std::vector<uint8_t>& keep, int threads, const std::vector<int32_t>& cand,
               std::vector<float>* ci);

// Candidates (bags): the union of the probed lists, each scored by centroid interaction over its
// whole bag (PLAID's stage; keep: the pruning threshold's centroids, empty for all).
void CandidatesByBags(const ResidualKernels& kern, const ResidualIndex& ix, const ScoreRows& qct, int64_t lq,
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
void BagScores(const ResidualKernels& kern, const ResidualIndex& ix, const ScoreRows& qct, int64_t lq,
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

void ResidualScoreDocs(const ResidualKernels& kern, const ResidualIndex& ix, const float* query, int64_t lq,
                       const int32_t* docs, int64_t n, float* out, int threads, const uint8_t* keepc) {
  QueryForm f;
  PrepareQuery(kern, ix, query, lq, threads, &f);
  f.rq.keepc = keepc;
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
void ProbeCentroids(const ScoreRows& qct, int64_t k, int64_t lq, int64_t lqp, int64_t np,
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
  auto insert = [&](int64_t i, int64_t at, float s, int32_t c) {
    InsertBest(val.data() + i * np, id.data() + i * np, at, s, c);
  };
  for (int64_t i = 0; i < lq; i++) {
    for (int64_t c = 0; c < np; c++) insert(i, c, qct[c * lqp + i], static_cast<int32_t>(c));
    worst[i] = val[i * np + np - 1];
  }
  for (int64_t c = np; c < k; c++) {
    const float* row = qct.data() + c * lqp;
    bool any = false;
    for (int64_t i = 0; i < lqp; i++) any |= row[i] > worst[i];  // vectorizes; +inf past lq
    if (!any) continue;
    for (int64_t i = 0; i < lq; i++) {
      const float s = row[i];
      if (!(s > worst[i])) continue;  // equal: the earlier (lower) id stays
      insert(i, np - 1, s, static_cast<int32_t>(c));  // over the worst
      worst[i] = val[i * np + np - 1];
    }
  }
  for (int64_t j = 0; j < lq * np; j++) (*probed)[id[j]] = 1;
}

void ResidualPrunePlan(const float* qct, int64_t k, int64_t lq, int64_t lqp, int64_t np, const int32_t* probe_ids,
                       float prune, int threads, std::vector<uint8_t>* keepc) {
  keepc->assign(static_cast<size_t>(k), 0);
  // each token's cut: its best centroid score (its first probe) less prune times its magnitude;
  // +inf past lq
  std::vector<float> cut(static_cast<size_t>(lqp), INFINITY);
  for (int64_t i = 0; i < lq; i++) {
    const float best = qct[static_cast<int64_t>(probe_ids[i * np]) * lqp + i];
    cut[i] = best - prune * std::fabs(best);
  }
  constexpr int64_t kChunk = 1024;
  uint8_t* out = keepc->data();
  const float* ct = cut.data();
  ForEach((k + kChunk - 1) / kChunk, threads, [&](int, int64_t item) {
    for (int64_t c = item * kChunk; c < std::min(k, item * kChunk + kChunk); c++) {
      const float* row = qct + c * lqp;
      bool any = false;
      for (int64_t i = 0; i < lqp; i++) any |= row[i] >= ct[i];  // vectorizes
      out[c] = any ? 1 : 0;
    }
  });
}

void ResidualPrunePlanOf(const ResidualKernels& kern, const ResidualIndex& ix, const float* query, int64_t lq,
                         int64_t np, float prune, std::vector<uint8_t>* keepc) {
  QueryForm f;
  PrepareQuery(kern, ix, query, lq, 1, &f);
  np = std::min(np, ix.k);
  std::vector<uint8_t> probed(static_cast<size_t>(ix.k), 0);
  std::vector<int32_t> probe_ids;
  ProbeCentroids(f.qct, ix.k, lq, f.lqp, np, &probed, &probe_ids);
  ResidualPrunePlan(f.qct.data(), ix.k, lq, f.lqp, np, probe_ids.data(), prune, 1, keepc);
}

void ResidualSearch(const ResidualKernels& kern, const ResidualIndex& ix, const float* query, int64_t lq,
                    const ResidualSearchParams& p, std::vector<int32_t>* ids, std::vector<float>* scores,
                    ResidualSearchStats* st) {
  const auto t = std::chrono::steady_clock::now();
  QueryForm f;
  PrepareQuery(kern, ix, query, lq, p.threads, &f, p.nprobe);
  st->ms_centroids = MsSince(t);
  SearchStages(kern, ix, f, p, ids, scores, st);
}

void residual_detail::SearchStages(const ResidualKernels& kern, const ResidualIndex& ix, const QueryForm& f,
                                   const ResidualSearchParams& p, std::vector<int32_t>* ids,
                                   std::vector<float>* scores, ResidualSearchStats* st) {
  using Clock = std::chrono::steady_clock;
  auto t = Clock::now();
  const int64_t lq = f.rq.lq;
  const int64_t lqp = f.lqp;
  const ScoreRows& qct = f.qct;
  // Probe: each query token's nprobe best centroids; pruning (bags, a finite threshold only): the
  // centroids whose best query-token score reaches the threshold.
  const int64_t np = std::min(p.nprobe, ix.k);
  std::vector<uint8_t> probed(static_cast<size_t>(ix.k), 0), keep;
  std::vector<int32_t> probe_ids;
  if (np > 0 && f.probe_np == np) {
    probe_ids = f.probe_ids;
    for (const int32_t c : probe_ids) probed[c] = 1;
  } else {
    ProbeCentroids(qct, ix.k, lq, lqp, np, &probed, &probe_ids);
  }
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
  st->ms_centroids += MsSince(t);
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
  ResidualQuery rq = f.rq;
  std::vector<uint8_t> keepc;
  if (p.prune < INFINITY && np > 0 && lq > 0) {
    ResidualPrunePlan(qct.data(), ix.k, lq, lqp, np, probe_ids.data(), p.prune, p.threads, &keepc);
    rq.keepc = keepc.data();
  }
  std::vector<float> rs(static_cast<size_t>(keep_n));
  constexpr int64_t kResDocs = 8;
  ForEach((keep_n + kResDocs - 1) / kResDocs, p.threads, [&](int, int64_t item) {
    const int64_t end = std::min(keep_n, item * kResDocs + kResDocs);
    for (int64_t i = item * kResDocs; i < end; i++) {
      // the next document's centroid ids and the offset of the one after (random documents: a miss
      // per line, which the kernel's first loads would otherwise wait on)
      if (i + 2 < end) __builtin_prefetch(ix.doc_offsets + cand[pick[i + 2]]);
      if (i + 1 < end) {
        const int32_t next = cand[pick[i + 1]];
        const int64_t t0 = static_cast<int64_t>(ix.doc_offsets[next]), t1 = static_cast<int64_t>(ix.doc_offsets[next + 1]);
        for (int64_t t = t0; t < t1; t += 16) __builtin_prefetch(ix.codes.cids + t);
      }
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
