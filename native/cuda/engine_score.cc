// Score and kernel timing jobs of the CUDA engine (engine.h), and the query handling every scoring
// job shares.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine.h"
#include "query_convert.h"

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

cu::CUdeviceptr JobScratch::Take(uint64_t bytes) {
  blocks_.push_back(std::make_unique<ScopedBlock>(rt_.allocator(), std::max<uint64_t>(bytes, 1)));
  return blocks_.back()->get();
}

void JobScratch::Defer(cu::CUdeviceptr flag, uint64_t ok, std::string (*message)(uint64_t)) {
  if (used_slots_ == Staging::kFlagSlots) {  // never in today's jobs (at most 2 flags): judge it now
    uint64_t value = ok;
    rt_.Download(&value, flag, sizeof(value));
    if (value != ok) throw std::invalid_argument(message(value));
    return;
  }
  const int slot = used_slots_++;
  uint64_t* host = rt_.staging().Flags() + slot;
  Check(Api().cuMemcpyDtoHAsync(host, flag, sizeof(uint64_t), rt_.stream()), "cuMemcpyDtoHAsync");
  pending_.push_back({slot, ok, message});
}

void JobScratch::CheckDeferred() {
  const uint64_t* flags = rt_.staging().flags;
  for (const Pending& p : pending_) {
    if (flags[p.slot] != p.ok) {
      const uint64_t value = flags[p.slot];
      pending_.clear();
      throw std::invalid_argument(p.message(value));
    }
  }
  pending_.clear();
}

namespace {

constexpr uint64_t RoundUp256(uint64_t b) { return (b + 255) / 256 * 256; }

// Host queries on the device in one copy: tokens (items packed), int8 scales, starts and lengths laid
// out in one scratch block and written through one pinned staging buffer, so that the driver sees one
// host-to-device copy per 16 MiB (Staging::kBytes) instead of one per part. No synchronize: the bytes
// are in pinned memory when this returns (the JS arrays are free), the copy completes in stream order.
// Whether a float32 host batch is small and finite enough to convert on the host (query_convert.h).
bool HostConvertible(const TokenSet& h) {
  if (h.dtype != DType::Float32) return false;
  uint64_t values = 0;
  for (int64_t i = 0; i < h.count; i++) values += static_cast<uint64_t>(h.lengths[i]) * static_cast<uint64_t>(h.dim);
  if (values > kHostConvertMaxValues) return false;
  for (int64_t i = 0; i < h.count; i++) {
    const float* row = static_cast<const float*>(h.data) + static_cast<uint64_t>(h.starts[i]) * h.dim;
    if (!AllFinite(row, static_cast<uint64_t>(h.lengths[i]) * static_cast<uint64_t>(h.dim))) return false;
  }
  return true;
}

std::shared_ptr<DeviceTokens> UploadQueries(Runtime& rt, const TokenSet& host, JobScratch& scratch, DType as) {
  static const uint8_t kZeros[256] = {};
  // as != host.dtype: float32 tokens converted to `as` on the way (HostConvertible)
  const bool convert = as != host.dtype;
  const uint64_t row = static_cast<uint64_t>(host.dim) * DTypeSize(as);
  int64_t tokens = 0;
  int32_t max_length = 0;
  for (int64_t i = 0; i < host.count; i++) {
    tokens += host.lengths[i];
    max_length = std::max(max_length, host.lengths[i]);
  }
  if (host.dtype == DType::Int8 && !host.scales) {
    throw std::invalid_argument("Expected per-token scales for the int8 queries but received none");
  }
  const bool int8 = host.dtype == DType::Int8;
  const uint64_t t1 = static_cast<uint64_t>(std::max<int64_t>(tokens, 1)), n1 = static_cast<uint64_t>(std::max<int64_t>(host.count, 1));
  const uint64_t data_bytes = RoundUp256(t1 * row), scale_bytes = int8 ? RoundUp256(t1 * sizeof(float)) : 0,
                 start_bytes = RoundUp256(n1 * sizeof(int64_t));
  const cu::CUdeviceptr base = scratch.Take(data_bytes + scale_bytes + start_bytes + n1 * sizeof(int32_t));
  auto t = std::make_shared<DeviceTokens>();  // no runtime: the scratch owns its memory
  t->dtype = as;
  t->dim = host.dim;
  t->capacity_tokens = t->tokens = tokens;
  t->capacity_items = t->count = host.count;
  t->max_length = max_length;
  t->data = base;
  t->scales = int8 ? base + data_bytes : 0;
  t->starts = base + data_bytes + scale_bytes;
  t->lengths = t->starts + start_bytes;
  // one contiguous stream of bytes (the gaps zero-filled), so the writer sends it as one copy
  StagedWriter w(rt.staging(), rt.stream(), base);
  uint64_t written = 0;
  const auto pad_to = [&](uint64_t offset) {
    for (; written < offset;) {
      const uint64_t take = std::min<uint64_t>(offset - written, sizeof(kZeros));
      w.Write(kZeros, take);
      written += take;
    }
  };
  const auto* src = static_cast<const uint8_t*>(host.data);
  std::vector<uint16_t> converted;
  for (int64_t i = 0; i < host.count; i++) {
    const uint64_t bytes = static_cast<uint64_t>(host.lengths[i]) * row;
    if (convert) {
      const uint64_t values = static_cast<uint64_t>(host.lengths[i]) * static_cast<uint64_t>(host.dim);
      converted.resize(values);
      ConvertF32(static_cast<const float*>(host.data) + static_cast<uint64_t>(host.starts[i]) * host.dim, converted.data(),
                 values, as);
      w.Write(converted.data(), bytes);
    } else {
      w.Write(src + static_cast<uint64_t>(static_cast<int64_t>(host.starts[i])) * row, bytes);
    }
    written += bytes;
  }
  if (int8) {
    pad_to(data_bytes);
    for (int64_t i = 0; i < host.count; i++) {
      const uint64_t bytes = static_cast<uint64_t>(host.lengths[i]) * sizeof(float);
      w.Write(host.scales + static_cast<int64_t>(host.starts[i]), bytes);
      written += bytes;
    }
  }
  pad_to(t->starts - base);
  int64_t at = 0;
  for (int64_t i = 0; i < host.count; i++) {
    w.Write(&at, sizeof(at));
    at += host.lengths[i];
  }
  written += static_cast<uint64_t>(host.count) * sizeof(int64_t);
  pad_to(t->lengths - base);
  w.Write(host.lengths, static_cast<uint64_t>(host.count) * sizeof(int32_t));
  w.Finish();
  return t;
}

// The float16 / bfloat16 copy of uploaded float32 queries (the cast kernel: encodeFloats' bits); it
// shares their starts and lengths, which a cast leaves unchanged.
std::shared_ptr<DeviceTokens> CastQueries(Runtime& rt, const DeviceTokens& src, DType to, JobScratch& scratch) {
  auto t = std::make_shared<DeviceTokens>();  // no runtime: the scratch owns its memory
  t->dtype = to;
  t->dim = src.dim;
  t->capacity_tokens = t->tokens = src.tokens;
  t->capacity_items = t->count = src.count;
  t->max_length = src.max_length;
  const uint64_t values = static_cast<uint64_t>(src.tokens) * static_cast<uint64_t>(src.dim);
  t->data = scratch.Take(std::max<uint64_t>(values, 1) * DTypeSize(to));
  t->starts = src.starts;
  t->lengths = src.lengths;
  rt.CastFromF32(src.data, t->data, to, values);
  return t;
}

}  // namespace

std::shared_ptr<DeviceTokens> ResolveQueries(Runtime& rt, QuerySource& q, const DeviceTokens& docs, JobScratch& scratch) {
  std::shared_ptr<DeviceTokens> t = q.device;
  if (q.is_host) {
    // the same token memory and spans as the job's earlier upload (the binding parses each argument
    // into its own copy of the spans, sharing the JS arrays' memory): the same bytes, one device copy
    const TokenSet& h = q.host;
    const TokenSet& u = scratch.uploaded_from;
    // a small batch for a float16 / bfloat16 corpus is converted on the host while it is packed
    const DType as = q.cast_from_f32 && HostConvertible(h) ? q.dtype : h.dtype;
    const bool same = scratch.uploaded && scratch.uploaded->dtype == as && u.data == h.data && u.scales == h.scales &&
                      u.count == h.count && u.dtype == h.dtype && u.dim == h.dim &&
                      std::equal(h.starts, h.starts + h.count, u.starts) && std::equal(h.lengths, h.lengths + h.count, u.lengths);
    if (!same) {
      scratch.uploaded = UploadQueries(rt, h, scratch, as);
      scratch.uploaded_from = h;
    }
    t = scratch.uploaded;
    if (q.cast_from_f32 && t->dtype == DType::Float32) t = CastQueries(rt, *t, q.dtype, scratch);
    if (q.quantize_int8) t = QuantizeQueries8(rt, *t, /*e4m3=*/false, scratch);
  }
  return docs.e4m3 ? QuantizeQueries8(rt, *t, true, scratch) : t;
}

std::vector<float> Score(Runtime& rt, QuerySource& queries, const DeviceTokens& docs, const LaunchSpec& launch) {
  rt.EnsureReady();
  IdleAtExit idle(rt);
  JobScratch scratch(rt);
  rt.ValidateLaunch(launch);
  std::shared_ptr<DeviceTokens> q = ResolveQueries(rt, queries, docs, scratch);
  const uint64_t n = static_cast<uint64_t>(q->count) * static_cast<uint64_t>(docs.count);
  std::vector<float> scores(n);
  if (n > 0) {
    const cu::CUdeviceptr out = scratch.Take(n * sizeof(float));
    rt.FillNaN(out, n);
    rt.Launch(*q, docs, launch, out);
    rt.Download(scores.data(), out, n * sizeof(float));  // synchronizes
  } else {
    rt.Synchronize();
  }
  scratch.CheckDeferred();
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
  JobScratch scratch(rt);
  std::shared_ptr<DeviceTokens> q = ResolveQueries(rt, queries, *docs[0], scratch);
  rt.Synchronize();
  scratch.CheckDeferred();  // a bad query fails before the timed launches
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
