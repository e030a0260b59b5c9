// Score and kernel timing jobs of the CUDA engine (engine.h), and the query handling every scoring
// job shares.
#include <algorithm>
#include <cmath>
#include <cstring>
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

namespace {

// Whether kernels on this device can write pinned host memory at its host address (mapped host
// memory under unified addressing), queried once per runtime.
bool HostMappable(Runtime& rt) {
  int& known = rt.staging().host_mappable;
  if (known < 0) {
    constexpr int kCanMapHostMemory = 19, kUnifiedAddressing = 41;  // CU_DEVICE_ATTRIBUTE_*
    const Driver& d = Api();
    cu::CUdevice dev = 0;
    int can = 0, uva = 0;
    known = d.cuDeviceGet(&dev, rt.props().index) == cu::CUDA_SUCCESS &&
            d.cuDeviceGetAttribute(&can, kCanMapHostMemory, dev) == cu::CUDA_SUCCESS &&
            d.cuDeviceGetAttribute(&uva, kUnifiedAddressing, dev) == cu::CUDA_SUCCESS && can == 1 && uva == 1;
  }
  return known == 1;
}

}  // namespace

bool UseMappedScores(Runtime& rt, const JobOptions& options, int64_t rows, int64_t cols, int64_t max_query_length) {
  const int64_t n = rows * cols;
  return options.mapped_scores && n > 0 && static_cast<uint64_t>(n) * sizeof(float) <= Staging::kScoresBytes &&
         rows * ((max_query_length + 15) / 16 * 16) <= kMappedQueryTokens && HostMappable(rt);
}

int64_t MaxQueryLength(const QuerySource& q) {
  if (!q.is_host) return q.device ? q.device->max_length : 0;
  int32_t m = 0;
  for (int64_t i = 0; i < q.host.count; i++) m = std::max(m, q.host.lengths[i]);
  return m;
}

float* MappedNaNScores(Runtime& rt, uint64_t floats) {
  float* m = rt.staging().Scores();
  const uint32_t nan = 0x7fc00000u;  // Runtime::FillNaN's quiet NaN
  for (uint64_t i = 0; i < floats; i++) std::memcpy(m + i, &nan, sizeof(nan));
  return m;
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

cu::CUdeviceptr JobScratch::NaNMatrix(uint64_t floats) {
  if (folded != 0 && floats == fold_fill) {
    const cu::CUdeviceptr p = folded;
    folded = 0;  // one matrix per upload
    return p;
  }
  const cu::CUdeviceptr p = Take(floats * sizeof(float));
  rt_.FillNaN(p, floats);
  return p;
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

// The dtype a host batch goes up in: its own, or (a small finite float32 batch that the job would
// convert on the device) the converted one, made on the worker while packing (query_convert.h):
// float16 / bfloat16 for cast_from_f32, int8 for quantize_int8. For cast_from_f32 it refuses, before
// any copy, a finite value that would become +-Infinity (the values encodeFloats refuses; the
// TypeScript caller then names them as encodeFloats does).
DType HostTarget(const QuerySource& q) {
  const TokenSet& h = q.host;
  if (h.dtype != DType::Float32 || !(q.cast_from_f32 || q.quantize_int8)) return h.dtype;
  uint64_t values = 0;
  for (int64_t i = 0; i < h.count; i++) values += static_cast<uint64_t>(h.lengths[i]) * static_cast<uint64_t>(h.dim);
  const bool small = values <= kHostConvertMaxValues;
  if (!small && !q.cast_from_f32) return h.dtype;  // nothing to look at: the device quantizes
  const uint32_t over = q.cast_from_f32 ? OverflowBits(q.dtype) : 0;
  bool finite = true;
  for (int64_t i = 0; i < h.count; i++) {
    const uint64_t n = static_cast<uint64_t>(h.lengths[i]) * static_cast<uint64_t>(h.dim);
    const float* row = static_cast<const float*>(h.data) + static_cast<uint64_t>(h.starts[i]) * h.dim;
    const F32Scan r = ScanF32(row, n, over);
    finite = finite && r.finite;
    if (r.first_over >= 0) {
      const float x = row[r.first_over];
      throw std::invalid_argument(std::string("Expected finite values within the ") + DTypeName(q.dtype) +
                                  " range (larger ones would become +-Infinity) for queries.data but received " +
                                  std::to_string(x) + " in item " + std::to_string(i) + ", token " +
                                  std::to_string(r.first_over / h.dim) + ", component " + std::to_string(r.first_over % h.dim));
    }
  }
  if (!small || !finite) return h.dtype;  // the device converts (a NaN or an infinity keeps its path)
  return q.cast_from_f32 ? q.dtype : DType::Int8;
}

// Host queries on the device in one copy: tokens (items packed), int8 scales, starts and lengths laid
// out in one scratch block and written through one pinned staging buffer, so that the driver sees one
// host-to-device copy per 16 MiB (Staging::kBytes) instead of one per part. No synchronize: the bytes
// are in pinned memory when this returns (the JS arrays are free), the copy completes in stream order.
// as != host.dtype: float32 tokens converted (float16 / bfloat16) or quantized (int8, per-token
// scales) on the way (HostTarget). With scratch.fold_fill set and small enough, the block ends with
// that many NaN floats for the job's score matrix (scratch.folded).
std::shared_ptr<DeviceTokens> UploadQueries(Runtime& rt, const TokenSet& host, JobScratch& scratch, DType as) {
  static const uint8_t kZeros[256] = {};
  const bool convert = as != host.dtype;
  const bool quantize = convert && as == DType::Int8;
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
  const bool int8 = as == DType::Int8;
  const uint64_t t1 = static_cast<uint64_t>(std::max<int64_t>(tokens, 1)), n1 = static_cast<uint64_t>(std::max<int64_t>(host.count, 1));
  const uint64_t data_bytes = RoundUp256(t1 * row), scale_bytes = int8 ? RoundUp256(t1 * sizeof(float)) : 0,
                 start_bytes = RoundUp256(n1 * sizeof(int64_t));
  const uint64_t fill_floats =
      scratch.folded == 0 && scratch.fold_fill * sizeof(float) <= JobScratch::kFoldedFillBytes ? scratch.fold_fill : 0;
  const uint64_t length_bytes = fill_floats > 0 ? RoundUp256(n1 * sizeof(int32_t)) : n1 * sizeof(int32_t);
  const uint64_t total = data_bytes + scale_bytes + start_bytes + length_bytes + fill_floats * sizeof(float);
  const cu::CUdeviceptr base = scratch.Take(total);
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
  // one contiguous stream of bytes (the gaps zero-filled), so that it goes up as one copy: packed
  // straight into the job's own pinned buffer when it fits (Staging::JobUpload, no event fences), else
  // through the staging buffers
  uint8_t* direct = nullptr;
  if (!scratch.job_upload_used && total <= Staging::kJobUploadBytes) {
    direct = rt.staging().JobUpload();
    scratch.job_upload_used = true;
  }
  StagedWriter w(rt.staging(), rt.stream(), base);
  uint64_t written = 0;
  const auto put = [&](const void* p, uint64_t bytes) {
    if (direct) std::memcpy(direct + written, p, bytes);
    else w.Write(p, bytes);
    written += bytes;
  };
  const auto pad_to = [&](uint64_t offset) {
    while (written < offset) put(kZeros, std::min<uint64_t>(offset - written, sizeof(kZeros)));
  };
  // converted tokens: into the pinned buffer itself, or a scratch vector staged from there
  std::vector<uint8_t> converted;
  const auto out_for = [&](uint64_t bytes) -> uint8_t* {
    if (direct) return direct + written;
    converted.resize(bytes);
    return converted.data();
  };
  const auto commit = [&](const uint8_t* p, uint64_t bytes) {
    if (direct) written += bytes;
    else put(p, bytes);
  };
  const auto* src = static_cast<const uint8_t*>(host.data);
  std::vector<float> scales(quantize ? static_cast<size_t>(tokens) : 0);  // packed order
  int64_t packed = 0;
  for (int64_t i = 0; i < host.count; i++) {
    const uint64_t bytes = static_cast<uint64_t>(host.lengths[i]) * row;
    const float* f32 = convert ? static_cast<const float*>(host.data) + static_cast<uint64_t>(host.starts[i]) * host.dim : nullptr;
    if (quantize) {
      auto* codes = reinterpret_cast<int8_t*>(out_for(bytes));
      for (int32_t j = 0; j < host.lengths[i]; j++) {
        scales[static_cast<size_t>(packed++)] = QuantizeTokenInt8(f32 + static_cast<uint64_t>(j) * host.dim,
                                                                  codes + static_cast<uint64_t>(j) * host.dim, static_cast<uint64_t>(host.dim));
      }
      commit(reinterpret_cast<const uint8_t*>(codes), bytes);
    } else if (convert) {
      uint8_t* half = out_for(bytes);  // 2-byte aligned: written is a multiple of the row here
      ConvertF32(f32, reinterpret_cast<uint16_t*>(half), static_cast<uint64_t>(host.lengths[i]) * static_cast<uint64_t>(host.dim), as);
      commit(half, bytes);
    } else {
      put(src + static_cast<uint64_t>(static_cast<int64_t>(host.starts[i])) * row, bytes);
    }
  }
  if (int8) {
    pad_to(data_bytes);
    if (quantize) {
      put(scales.data(), scales.size() * sizeof(float));
    } else {
      for (int64_t i = 0; i < host.count; i++) {
        put(host.scales + static_cast<int64_t>(host.starts[i]), static_cast<uint64_t>(host.lengths[i]) * sizeof(float));
      }
    }
  }
  pad_to(t->starts - base);
  int64_t at = 0;
  for (int64_t i = 0; i < host.count; i++) {
    put(&at, sizeof(at));
    at += host.lengths[i];
  }
  pad_to(t->lengths - base);
  put(host.lengths, static_cast<uint64_t>(host.count) * sizeof(int32_t));
  if (fill_floats > 0) {
    // the quiet NaN of Runtime::FillNaN, so a score a kernel skipped shows as it would after a memset
    static const uint32_t kNaNs[64] = {
#define MAXSIM_NAN8 0x7fc00000u, 0x7fc00000u, 0x7fc00000u, 0x7fc00000u, 0x7fc00000u, 0x7fc00000u, 0x7fc00000u, 0x7fc00000u
        MAXSIM_NAN8, MAXSIM_NAN8, MAXSIM_NAN8, MAXSIM_NAN8, MAXSIM_NAN8, MAXSIM_NAN8, MAXSIM_NAN8, MAXSIM_NAN8,
#undef MAXSIM_NAN8
    };
    pad_to(t->lengths - base + length_bytes);
    for (uint64_t left = fill_floats; left > 0;) {
      const uint64_t take = std::min<uint64_t>(left, 64);
      put(kNaNs, take * sizeof(float));
      left -= take;
    }
    scratch.folded = t->lengths + length_bytes;
  }
  if (direct) {
    // the previous job that used the buffer synchronized before it ended, so its copy is complete
    if (written > 0) Check(Api().cuMemcpyHtoDAsync(base, direct, written, rt.stream()), "cuMemcpyHtoDAsync");
  } else {
    w.Finish();
  }
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
    // a small batch for a float16 / bfloat16 / int8 corpus is converted on the host while it is packed
    const DType as = HostTarget(q);
    const bool same = scratch.uploaded && scratch.uploaded->dtype == as && u.data == h.data && u.scales == h.scales &&
                      u.count == h.count && u.dtype == h.dtype && u.dim == h.dim &&
                      std::equal(h.starts, h.starts + h.count, u.starts) && std::equal(h.lengths, h.lengths + h.count, u.lengths);
    if (!same) {
      scratch.uploaded = UploadQueries(rt, h, scratch, as);
      scratch.uploaded_from = h;
    }
    t = scratch.uploaded;
    if (q.cast_from_f32 && t->dtype == DType::Float32) t = CastQueries(rt, *t, q.dtype, scratch);
    if (q.quantize_int8 && t->dtype != DType::Int8) t = QuantizeQueries8(rt, *t, /*e4m3=*/false, scratch);
  }
  return docs.e4m3 ? QuantizeQueries8(rt, *t, true, scratch) : t;
}

std::vector<float> Score(Runtime& rt, QuerySource& queries, const DeviceTokens& docs, const LaunchSpec& launch,
                         const JobOptions& options) {
  rt.EnsureReady();
  IdleAtExit idle(rt);
  JobScratch scratch(rt);
  rt.ValidateLaunch(launch);
  // a host batch's shape is known before its upload: no folded fill when the scores go to host memory
  if (!queries.is_host || !UseMappedScores(rt, options, queries.count, docs.count, MaxQueryLength(queries))) {
    scratch.fold_fill = static_cast<uint64_t>(queries.count) * static_cast<uint64_t>(docs.count);
  }
  std::shared_ptr<DeviceTokens> q = ResolveQueries(rt, queries, docs, scratch);
  const uint64_t n = static_cast<uint64_t>(q->count) * static_cast<uint64_t>(docs.count);
  std::vector<float> scores(n);
  if (UseMappedScores(rt, options, q->count, docs.count, q->max_length)) {
    const float* m = MappedNaNScores(rt, n);
    rt.Launch(*q, docs, launch, MappedPtr(m));
    rt.Synchronize();
    std::memcpy(scores.data(), m, n * sizeof(float));
  } else if (n > 0) {
    const cu::CUdeviceptr out = scratch.NaNMatrix(n);
    rt.Launch(*q, docs, launch, out);
    rt.Download(scores.data(), out, n * sizeof(float));  // synchronizes
  } else {
    rt.Synchronize();
  }
  scratch.CheckDeferred();
  idle.Idle();
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
