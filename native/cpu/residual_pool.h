// What the residual codec (residual.cc) and the search stages (residual_search.cc) share: work
// handed out over the engine's pool, timing, rounding, the query-side packing (queries and, for the
// grouped assignment, token rows), and the (score, id) order of every ranking.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "thread_pool.h"

namespace maxsim_cpu {
namespace residual_detail {

// Calls fn(worker, item) for items [0, count) handed out one at a time over the pool. One worker runs
// on the calling thread without the pool, so it may be called from inside a pool job (the batched
// search runs each query's stages single-threaded in a worker; the pool does not nest).
template <class Fn>
inline void ForEach(int64_t count, int threads, const Fn& fn) {
  if (count <= 0) return;
  ThreadPool& pool = GlobalPool();
  const int64_t wanted = threads > 0 ? threads : pool.size();
  const int workers = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({wanted, pool.size(), count})));
  if (workers == 1) {
    for (int64_t item = 0; item < count; item++) fn(0, item);
    return;
  }
  std::atomic<int64_t> next{0};
  pool.Run(workers, [&](int w) {
    for (;;) {
      const int64_t item = next.fetch_add(1);
      if (item >= count) break;
      fn(w, item);
    }
  });
}

inline int Workers(int threads) {
  const int n = GlobalPool().size();
  return threads > 0 ? std::min(threads, n) : n;
}

inline double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The query transposed and zero-padded to lqp lanes, packed in lane blocks for the dots kernel.
inline void PackQuery(const float* q, int64_t lq, int64_t d, int64_t lqp, int lanes, std::vector<float>* qpack,
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

// Higher score first, ties to the lower id.
inline bool Better(float sa, int32_t ia, float sb, int32_t ib) { return sa > sb || (sa == sb && ia < ib); }

}  // namespace residual_detail
}  // namespace maxsim_cpu
