// Score and kernel timing jobs of the CUDA engine (engine.h), and the query handling every scoring
// job shares.
#include <algorithm>
#include <cmath>
#include <utility>

#include "engine.h"

namespace maxsim_cuda {

QuerySource DeviceQueries(std::shared_ptr<DeviceTokens> set) {
  QuerySource q;
  q.dtype = set->dtype;
  q.e4m3 = set->e4m3;
  q.dim = set->dim;
  q.count = set->count;
  q.device = std::move(set);
  return q;
}

QuerySource HostQueries(TokenSet host) {
  QuerySource q;
  q.count = host.count;
  q.is_host = true;
  q.dtype = host.dtype;
  q.dim = host.dim;
  q.host = std::move(host);
  return q;
}

void ConvertHostQueriesFor(QuerySource& q, DType docs_dtype, bool docs_e4m3) {
  if (!q.is_host || q.dtype == DType::Int8) return;
  if (docs_e4m3) return;
  if (docs_dtype == DType::Int8) {
    q.quantize_int8 = true;
    q.dtype = DType::Int8;
  } else if (q.dtype == DType::Float32 && (docs_dtype == DType::Float16 || docs_dtype == DType::BFloat16)) {
    q.cast_from_f32 = true;
    q.dtype = docs_dtype;
  }
}

std::shared_ptr<DeviceTokens> ResolveQueries(Runtime& rt, QuerySource& q, const DeviceTokens& docs) {
  std::shared_ptr<DeviceTokens> t = q.device;
  if (q.is_host) {
    int64_t tokens = 0;
    for (int64_t i = 0; i < q.host.count; i++) tokens += q.host.lengths[i];
    t = rt.AllocTokens(q.host.dtype, q.host.dim, tokens, q.host.count);
    rt.Append(*t, q.host, /*synchronize=*/false);
    if (q.cast_from_f32) t = CastSet(rt, *t, q.dtype);
    if (q.quantize_int8) t = Quantize8(rt, *t, /*e4m3=*/false);
  }
  return docs.e4m3 ? Quantize8(rt, *t, true) : t;
}

std::vector<float> Score(Runtime& rt, QuerySource& queries, const DeviceTokens& docs, const LaunchSpec& launch) {
  rt.EnsureReady();
  IdleAtExit idle(rt);
  rt.ValidateLaunch(launch);
  std::shared_ptr<DeviceTokens> q = ResolveQueries(rt, queries, docs);
  const uint64_t n = static_cast<uint64_t>(q->count) * static_cast<uint64_t>(docs.count);
  std::vector<float> scores(n);
  if (n > 0) {
    ScopedBlock out(rt.allocator(), n * sizeof(float));
    rt.FillNaN(out.get(), n);
    rt.Launch(*q, docs, launch, out.get());
    rt.Download(scores.data(), out.get(), n * sizeof(float));
  }
  return scores;
}

BenchResult BenchLaunches(Runtime& rt, QuerySource& queries, const std::vector<std::shared_ptr<DeviceTokens>>& docs,
                          const LaunchSpec& launch, const BenchSpec& spec) {
  rt.EnsureReady();
  IdleAtExit idle(rt);
  rt.ValidateLaunch(launch);
  const int64_t warmup = spec.warmup, iters = spec.iters;
  const double warmup_ms = spec.warmup_ms;
  const Driver& d = Api();
  std::shared_ptr<DeviceTokens> q = ResolveQueries(rt, queries, *docs[0]);
  int64_t max_docs = 1;
  for (const auto& s : docs) max_docs = std::max(max_docs, s->count);
  const uint64_t n = static_cast<uint64_t>(std::max<int64_t>(q->count, 1)) * static_cast<uint64_t>(max_docs);
  ScopedBlock out(rt.allocator(), n * sizeof(float));
  rt.FillNaN(out.get(), n);
  rt.allocator().ResetPeak();
  struct Events {
    std::vector<cu::CUevent> list;
    ~Events() {
      for (cu::CUevent e : list) Api().cuEventDestroy(e);
    }
  } events;
  events.list.reserve(static_cast<size_t>(2 * iters));
  for (int64_t i = 0; i < 2 * iters; i++) {
    cu::CUevent e = nullptr;
    Check(d.cuEventCreate(&e, cu::CU_EVENT_DEFAULT), "cuEventCreate");
    events.list.push_back(e);
  }
  const size_t nd = docs.size();
  int64_t at = 0;  // launches so far (the doc set rotates with it)
  for (; at < warmup; at++) rt.Launch(*q, *docs[static_cast<size_t>(at) % nd], launch, out.get());
  if (warmup_ms > 0 && iters > 0) {
    // one launch timed to size the rest; the timed launches then follow them with no idle gap
    Check(d.cuEventRecord(events.list[0], rt.stream()), "cuEventRecord");
    rt.Launch(*q, *docs[static_cast<size_t>(at++) % nd], launch, out.get());
    Check(d.cuEventRecord(events.list[1], rt.stream()), "cuEventRecord");
    rt.Synchronize();
    float one = 0;
    Check(d.cuEventElapsedTime(&one, events.list[0], events.list[1]), "cuEventElapsedTime");
    const int64_t more = std::min<int64_t>(1000000, static_cast<int64_t>(std::ceil(warmup_ms / std::max(one, 1e-3f))));
    for (int64_t i = 0; i < more; i++, at++) rt.Launch(*q, *docs[static_cast<size_t>(at) % nd], launch, out.get());
  }
  for (int64_t i = 0; i < iters; i++) {
    Check(d.cuEventRecord(events.list[2 * i], rt.stream()), "cuEventRecord");
    rt.Launch(*q, *docs[static_cast<size_t>(at + i) % nd], launch, out.get());
    Check(d.cuEventRecord(events.list[2 * i + 1], rt.stream()), "cuEventRecord");
  }
  rt.Synchronize();
  BenchResult r;
  r.ms.resize(static_cast<size_t>(iters));
  for (int64_t i = 0; i < iters; i++) {
    Check(d.cuEventElapsedTime(&r.ms[i], events.list[2 * i], events.list[2 * i + 1]), "cuEventElapsedTime");
  }
  r.peak_bytes = rt.allocator().stats().peak;
  return r;
}

}  // namespace maxsim_cuda
