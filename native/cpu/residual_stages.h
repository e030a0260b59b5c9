// What the single-query search (residual_search.cc) and the batched one (residual_batch.cc) share:
// a query's forms as every stage reads them, its centroid scores, and the stages that follow those.
#pragma once
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

#include "residual.h"

namespace maxsim_cpu {
namespace residual_detail {

// Cache-line aligned storage for the centroid scores: the residual stage reads random rows of them a
// 64-byte piece at a time (a row of 32 query tokens is two lines when aligned, three at malloc's
// 16-byte offset).
template <class T>
struct LineAligned {
  using value_type = T;
  LineAligned() = default;
  template <class U>
  LineAligned(const LineAligned<U>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t{64}); }
  // resize(n) leaves new elements unset: the dots kernel writes every score before any stage reads
  // it, and the zero fill was a memory pass of its own (8 MB a query at K = 65,536: ~2 ms on a
  // 2-core VM, bench/NOTES.md)
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
  template <class U>
  bool operator==(const LineAligned<U>&) const { return true; }
  template <class U>
  bool operator!=(const LineAligned<U>&) const { return false; }
};
using ScoreRows = std::vector<float, LineAligned<float>>;

// One query as every stage reads it: packed and transposed, its centroid scores, and (kernel sets
// with int8 residual scoring) its int8 form and the int8 residual table (residual.h, ResidualQuery).
struct QueryForm {
  int64_t lqp = 16;
  std::vector<float> qpack, qt, qscale;
  ScoreRows qct;
  // each token's probe_np best centroids, best first, found with qct (probe_np 0: not yet)
  int64_t probe_np = 0;
  std::vector<int32_t> probe_ids;
  std::vector<uint8_t> q8;
  std::vector<int8_t> tab8;
  ResidualQuery rq;
};

// lq rounded up to a multiple of 16 (at least 16): the row length of a query's centroid scores.
inline int64_t QueryLanes(int64_t lq) { return std::max<int64_t>(16, (lq + 15) / 16 * 16); }

// Everything of the form but qct, which is left empty (rq.qct null); throws when k x lqp reaches 2^31.
void FormQuery(const ResidualKernels& kern, const ResidualIndex& ix, const float* query, int64_t lq, QueryForm* f);

// The stages after the centroid scores (f.qct filled, f.rq.qct pointing at it): probe, candidates,
// selection, residual MaxSim; adds the probe's time to st->ms_centroids. Results do not depend on
// p.threads (every stage's work items are independent), and p.threads == 1 never enters the pool.
void SearchStages(const ResidualKernels& kern, const ResidualIndex& ix, const QueryForm& f,
                  const ResidualSearchParams& p, std::vector<int32_t>* ids, std::vector<float>* scores,
                  ResidualSearchStats* st);

}  // namespace residual_detail
}  // namespace maxsim_cpu
