// Token-set operations of the CUDA engine (engine.h): upload, download, quantize, select.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "engine.h"
#include "kernels/maxsim_params.h"

namespace maxsim_cuda {

std::shared_ptr<DeviceTokens> UploadSet(Runtime& rt, const TokenSet& host) {
  rt.EnsureReady();
  int64_t tokens = 0;
  for (int64_t i = 0; i < host.count; i++) tokens += host.lengths[i];
  std::shared_ptr<DeviceTokens> t = rt.AllocTokens(host.dtype, host.dim, tokens, host.count);
  rt.Append(*t, host);
  return t;
}

HostCopy DownloadSet(Runtime& rt, const DeviceTokens& t) {
  rt.EnsureReady();
  if (t.parent) {
    throw std::invalid_argument("Expected a corpus made by upload(), alloc() or quantize() for download() but received a view (select())");
  }
  HostCopy h;
  h.dtype = t.dtype;
  h.e4m3 = t.e4m3;
  h.dim = t.dim;
  h.data.resize(static_cast<size_t>(t.tokens * t.dim * DTypeSize(t.dtype)));
  h.starts.resize(static_cast<size_t>(t.count));
  h.lengths.resize(static_cast<size_t>(t.count));
  if (!h.data.empty()) rt.Download(h.data.data(), t.data, h.data.size());
  if (t.count > 0) {
    rt.Download(h.starts.data(), t.starts, h.starts.size() * sizeof(int64_t));
    rt.Download(h.lengths.data(), t.lengths, h.lengths.size() * sizeof(int32_t));
  }
  if (t.dtype == DType::Int8) {
    h.scales.resize(static_cast<size_t>(t.tokens));
    if (!h.scales.empty()) rt.Download(h.scales.data(), t.scales, h.scales.size() * sizeof(float));
  }
  return h;
}

std::vector<int32_t> SetLengths(Runtime& rt, const DeviceTokens& t, int64_t count) {
  rt.EnsureReady();
  if (count < 0 || count > t.count) {
    throw std::logic_error("SetLengths: " + std::to_string(count) + " items of a set of " + std::to_string(t.count));
  }
  if (t.HostSpans()) return std::vector<int32_t>(t.host_lengths.begin(), t.host_lengths.begin() + count);
  std::vector<int32_t> out(static_cast<size_t>(count));
  if (count > 0) rt.Download(out.data(), t.lengths, out.size() * sizeof(int32_t));
  return out;
}

std::shared_ptr<DeviceTokens> ViewShell(Runtime& rt, const std::shared_ptr<DeviceTokens>& src, int64_t n) {
  auto v = std::make_shared<DeviceTokens>();
  v->parent = src;
  v->runtime = &rt;
  v->dtype = src->dtype;
  v->e4m3 = src->e4m3;
  v->dim = src->dim;
  v->data = src->data;
  v->scales = src->scales;
  v->tokens = v->capacity_tokens = src->tokens;
  v->count = v->capacity_items = n;
  v->max_length = src->max_length;
  v->starts = rt.allocator().Alloc(static_cast<uint64_t>(std::max<int64_t>(n, 1)) * sizeof(int64_t));
  v->lengths = rt.allocator().Alloc(static_cast<uint64_t>(std::max<int64_t>(n, 1)) * sizeof(int32_t));
  return v;
}

std::shared_ptr<DeviceTokens> Select(Runtime& rt, const std::shared_ptr<DeviceTokens>& src, const std::vector<int64_t>& indices) {
  for (size_t i = 0; i < indices.size(); i++) {
    if (indices[i] < 0 || indices[i] >= src->count) {
      throw std::invalid_argument("Expected item indices in [0, " + std::to_string(src->count) + ") for indices[" +
                                  std::to_string(i) + "] but received " + std::to_string(indices[i]));
    }
  }
  // The parent's spans from its host mirror; a set without one (none reaches JS today) downloads them.
  std::vector<int64_t> downloaded_starts;
  std::vector<int32_t> downloaded_lengths;
  const int64_t* starts = src->host_starts.data();
  const int32_t* lengths = src->host_lengths.data();
  if (!src->HostSpans()) {
    downloaded_starts.resize(static_cast<size_t>(src->count));
    downloaded_lengths.resize(static_cast<size_t>(src->count));
    if (src->count > 0) {
      rt.Download(downloaded_starts.data(), src->starts, downloaded_starts.size() * sizeof(int64_t));
      rt.Download(downloaded_lengths.data(), src->lengths, downloaded_lengths.size() * sizeof(int32_t));
    }
    starts = downloaded_starts.data();
    lengths = downloaded_lengths.data();
  }
  const int64_t n = static_cast<int64_t>(indices.size());
  std::vector<int64_t> view_starts(static_cast<size_t>(n));
  std::vector<int32_t> view_lengths(static_cast<size_t>(n));
  int32_t longest = 0;
  for (int64_t i = 0; i < n; i++) {
    view_starts[i] = starts[indices[i]];
    view_lengths[i] = lengths[indices[i]];
    longest = std::max(longest, view_lengths[i]);
  }
  std::shared_ptr<DeviceTokens> v = ViewShell(rt, src, n);
  v->max_length = longest;
  if (n > 0) {
    // through pinned staging: the host vectors may go once the writer has them
    StagedWriter w(rt.staging(), rt.stream(), v->starts);
    w.Write(view_starts.data(), n * sizeof(int64_t));
    w.Retarget(v->lengths);
    w.Write(view_lengths.data(), n * sizeof(int32_t));
    w.Finish();
  }
  v->host_starts = std::move(view_starts);
  v->host_lengths = std::move(view_lengths);
  return v;
}

namespace {

std::string NonFiniteToken(uint64_t token) {
  return "Expected finite values to quantize but received a non-finite value at token " + std::to_string(token);
}

// Enqueues the quantize of src into dst (tokens, scales and the item table, which the kernel copies)
// and the reset of `bad` (two words: the first non-finite token, ~0 for none). dst has room for src.
void EnqueueQuantize8(Runtime& rt, const DeviceTokens& src, const DeviceTokens& dst, bool e4m3, bool per_document,
                      cu::CUdeviceptr bad) {
  const char* suffix = src.dtype == DType::Float32    ? "f32"
                       : src.dtype == DType::Float16  ? "f16"
                       : src.dtype == DType::BFloat16 ? "bf16"
                                                      : nullptr;
  if (!suffix) {
    throw std::invalid_argument("Expected a float32, float16 or bfloat16 token set to quantize but received one of dtype " +
                                std::string(src.e4m3 ? "fp8" : DTypeName(src.dtype)));
  }
  const std::string kernel = std::string(e4m3 ? "maxsim_fp8_quantize_" : "maxsim_int8_quantize_") + suffix;
  Check(Api().cuMemsetD32Async(bad, 0xffffffffu, 2, rt.stream()), "cuMemsetD32Async");
  QuantizeParams p;
  std::memset(&p, 0, sizeof(p));
  p.src = reinterpret_cast<const void*>(static_cast<uintptr_t>(src.data));
  p.src_starts = reinterpret_cast<const int64_t*>(static_cast<uintptr_t>(src.starts));
  p.src_lengths = reinterpret_cast<const int32_t*>(static_cast<uintptr_t>(src.lengths));
  p.dst = reinterpret_cast<int8_t*>(static_cast<uintptr_t>(dst.data));
  p.dst_scales = reinterpret_cast<float*>(static_cast<uintptr_t>(dst.scales));
  p.dst_starts = reinterpret_cast<int64_t*>(static_cast<uintptr_t>(dst.starts));
  p.dst_lengths = reinterpret_cast<int32_t*>(static_cast<uintptr_t>(dst.lengths));
  p.bad_token = reinterpret_cast<unsigned long long*>(static_cast<uintptr_t>(bad));
  p.tokens = src.tokens;
  p.count = static_cast<int32_t>(src.count);
  p.dim = static_cast<int32_t>(src.dim);
  if (src.tokens > 0 || src.count > 0) {
    LaunchSpec spec;
    spec.kernel = kernel;
    spec.block[0] = 256;  // 8 warps, one token each per step (maxsim_8bit.cuh)
    const int64_t want = std::max<int64_t>((std::max(src.tokens, src.count) + 7) / 8, 1);
    spec.grid[0] = static_cast<unsigned>(std::min<int64_t>(want, static_cast<int64_t>(rt.props().sms) * 16));
    rt.LaunchWithParams(spec, &p);
    if (per_document && src.count > 0) {
      // document scales (maxsim_8bit.cuh): mark with one warp per item, requantize with one per token
      const std::string family = e4m3 ? "maxsim_fp8_quantize_" : "maxsim_int8_quantize_";
      const unsigned token_grid = spec.grid[0];
      spec.kernel = family + "mark_documents";
      spec.grid[0] = static_cast<unsigned>(std::min<int64_t>((src.count + 7) / 8, static_cast<int64_t>(rt.props().sms) * 16));
      rt.LaunchWithParams(spec, &p);
      spec.kernel = family + "documents_" + suffix;
      spec.grid[0] = token_grid;
      rt.LaunchWithParams(spec, &p);
    }
  }
}

// dst's counts after a quantize of src.
void TakeCounts(DeviceTokens& dst, const DeviceTokens& src) {
  dst.tokens = src.tokens;
  dst.count = src.count;
  dst.max_length = src.max_length;
}

}  // namespace

std::shared_ptr<DeviceTokens> Quantize8(Runtime& rt, const DeviceTokens& src, bool e4m3, bool per_document) {
  // Tight: the tokens and items in use (appended sets are packed, so tokens [0, src.tokens) are all real).
  std::shared_ptr<DeviceTokens> dst = rt.AllocTokens(DType::Int8, src.dim, src.tokens, src.count);
  dst->e4m3 = e4m3;
  ScopedBlock bad(rt.allocator(), sizeof(unsigned long long));
  EnqueueQuantize8(rt, src, *dst, e4m3, per_document, bad.get());
  unsigned long long first_bad = ~0ull;
  rt.Download(&first_bad, bad.get(), sizeof(first_bad));  // synchronizes
  if (first_bad != ~0ull) throw std::invalid_argument(NonFiniteToken(first_bad));
  TakeCounts(*dst, src);
  if (src.HostSpans()) {  // the kernel copies the item table unchanged
    dst->host_starts = src.host_starts;
    dst->host_lengths = src.host_lengths;
  }
  return dst;
}

std::shared_ptr<DeviceTokens> QuantizeQueries8(Runtime& rt, const DeviceTokens& src, bool e4m3, JobScratch& scratch) {
  auto dst = std::make_shared<DeviceTokens>();  // no runtime: the scratch owns its memory
  dst->dtype = DType::Int8;
  dst->e4m3 = e4m3;
  dst->dim = src.dim;
  dst->capacity_tokens = src.tokens;
  dst->capacity_items = src.count;
  const uint64_t tokens = static_cast<uint64_t>(std::max<int64_t>(src.tokens, 1));
  const uint64_t items = static_cast<uint64_t>(std::max<int64_t>(src.count, 1));
  // one block: codes, scales, starts, lengths, the flag (each part 256-byte aligned)
  const auto up = [](uint64_t b) { return (b + 255) / 256 * 256; };
  const uint64_t codes = up(tokens * static_cast<uint64_t>(src.dim)), scales = up(tokens * 4), starts = up(items * 8),
                 lengths = up(items * 4);
  const cu::CUdeviceptr base = scratch.Take(codes + scales + starts + lengths + 8);
  dst->data = base;
  dst->scales = base + codes;
  dst->starts = dst->scales + scales;
  dst->lengths = dst->starts + starts;
  const cu::CUdeviceptr bad = dst->lengths + lengths;
  EnqueueQuantize8(rt, src, *dst, e4m3, /*per_document=*/false, bad);
  scratch.Defer(bad, ~0ull, NonFiniteToken);
  TakeCounts(*dst, src);
  return dst;
}

}  // namespace maxsim_cuda
