// The search stages of a batch of queries (residual.h, ResidualSearchBatch): the centroid matrix
// (k x d fp32: 32 MB at 65,536 x 128) streamed once per pass of queries instead of once per query,
// and the later stages, each of which is short and partly serial for one query (probe, list walk,
// selection), run one query per worker instead of handing out each stage's small work items.
#include <algorithm>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "residual.h"
#include "residual_pool.h"
#include "residual_stages.h"

namespace maxsim_cpu {

using namespace residual_detail;

namespace {

// Centroids per work item of the shared dots: 256 x d = 128 floats is 128 KB, which stays in L2
// while every query of the pass is scored against it.
constexpr int64_t kChunk = 256;

// ForEach over n items whose exceptions (bad_alloc) must not leave a pool thread: each is kept and
// the first rethrown on the calling thread.
template <class Fn>
void ForEachQuery(int64_t n, int threads, const Fn& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  ForEach(n, threads, [&](int, int64_t j) {
    try {
      fn(j);
    } catch (...) {
      errors[j] = std::current_exception();
    }
  });
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Queries [q0, q1) of the batch (rows: each query's first row), their results into out[q0 ..).
void SearchPass(const ResidualKernels& kern, const ResidualIndex& ix, const float* queries, const int64_t* lengths,
                const std::vector<int64_t>& rows, int64_t q0, int64_t q1, const ResidualSearchParams& p,
                std::vector<ResidualSearchResult>* out) {
  const auto t = std::chrono::steady_clock::now();
  const int64_t n = q1 - q0;
  std::vector<QueryForm> forms(static_cast<size_t>(n));
  // over the pool; the scores are left unset (every one is written by the dots below)
  ForEachQuery(n, p.threads, [&](int64_t j) {
    QueryForm& f = forms[j];
    FormQuery(kern, ix, queries + rows[q0 + j] * ix.d, lengths[q0 + j], &f);
    f.qct.resize(static_cast<size_t>(ix.k * f.lqp));
    f.rq.qct = f.qct.data();
  });
  // the same dots calls as QueryCentroids (same chunks, same kernel), so every score is the same bits
  ForEach((ix.k + kChunk - 1) / kChunk, p.threads, [&](int, int64_t item) {
    const int64_t c0 = item * kChunk;
    const int64_t c1 = std::min(ix.k, c0 + kChunk);
    for (QueryForm& f : forms) kern.dots(f.qpack.data(), f.lqp, ix.centroids, c0, c1, ix.d, f.qct.data());
  });
  const double share = MsSince(t) / static_cast<double>(n);
  auto one = [&](int64_t j, const ResidualSearchParams& pj) {
    ResidualSearchResult& r = (*out)[q0 + j];
    r.stats.ms_centroids = share;
    SearchStages(kern, ix, forms[j], pj, &r.ids, &r.scores, &r.stats);
    ScoreRows().swap(forms[j].qct);  // the pass's largest buffer, done with
  };
  if (n < Workers(p.threads)) {
    for (int64_t j = 0; j < n; j++) one(j, p);
    return;
  }
  ResidualSearchParams single = p;
  single.threads = 1;  // never re-enters the pool (ForEach runs one worker inline)
  ForEachQuery(n, p.threads, [&](int64_t j) { one(j, single); });
}

}  // namespace

void ResidualSearchBatch(const ResidualKernels& kern, const ResidualIndex& ix, const float* queries,
                         const int64_t* lengths, int64_t nq, const ResidualSearchParams& p,
                         std::vector<ResidualSearchResult>* out, int64_t scratch) {
  if (nq < 0) throw std::invalid_argument("Expected a query count >= 0 for nq but received " + std::to_string(nq));
  // every query checked before any memory is taken
  std::vector<int64_t> rows(static_cast<size_t>(nq) + 1, 0);
  for (int64_t i = 0; i < nq; i++) {
    const std::string name = "lengths[" + std::to_string(i) + "]";
    if (lengths[i] < 0)
      throw std::invalid_argument("Expected a length >= 0 for " + name + " but received " + std::to_string(lengths[i]));
    if (ix.k * QueryLanes(lengths[i]) >= (int64_t{1} << 31))
      throw std::invalid_argument("Expected centroids x query tokens (rounded up to 16) below 2^31 for " + name +
                                  " but received " + std::to_string(ix.k) + " x " +
                                  std::to_string(QueryLanes(lengths[i])));
    rows[i + 1] = rows[i] + lengths[i];
  }
  out->assign(static_cast<size_t>(nq), ResidualSearchResult{});
  if (nq == 1) {
    ResidualSearchResult& r = (*out)[0];
    ResidualSearch(kern, ix, queries, lengths[0], p, &r.ids, &r.scores, &r.stats);
    return;
  }
  // passes: queries while their centroid scores fit the scratch budget (at least one per pass)
  for (int64_t q0 = 0; q0 < nq;) {
    int64_t q1 = q0;
    int64_t bytes = 0;
    while (q1 < nq) {
      const int64_t b = ix.k * QueryLanes(lengths[q1]) * static_cast<int64_t>(sizeof(float));
      if (q1 > q0 && bytes + b > scratch) break;
      bytes += b;
      q1++;
    }
    SearchPass(kern, ix, queries, lengths, rows, q0, q1, p, out);
    q0 = q1;
  }
}

}  // namespace maxsim_cpu
