// Node-API glue for the out-of-core scan (native/cuda/stream_scan.h):
//   cuda.streamScan(device, queries, plan, launch, progress, cancel?) -> Promise<{ k, scores, indices, ... }>
// `plan` is what src/backends/cuda-stream.ts computed: the segment files, the blocks, the document
// spans, the slot capacities, depth, readers and k. `progress` is a Float64Array(2) the scan updates
// (documents done, bytes done) so the JS side can report progress while the promise is pending.
// `cancel`, an optional Int32Array(1), aborts the scan before its next block once set non-zero.
#include <napi.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../common/maxsim_constants.h"
#include "../cuda/stream_scan.h"
#include "cuda_task.h"
#include "token_set.h"

namespace {

using maxsim_binding::ArgError;
using maxsim_binding::CudaTask;
using maxsim_binding::Describe;
using maxsim_binding::GetInteger;
using maxsim_binding::TaskChannel;
using maxsim_cuda::DeviceTokens;
using maxsim_cuda::Runtime;
using maxsim_cuda::StreamBlock;
using maxsim_cuda::StreamScanResult;
using maxsim_cuda::StreamScanSpec;

// What a JS pin handle holds: the pinned files, until released or garbage-collected.
struct PinHolder {
  std::shared_ptr<maxsim_cuda::PinnedFiles> pin;
};

constexpr int kBlockFields = MAXSIM_STREAM_BLOCK_FIELDS;  // file, tokensOffset, tokens, firstDoc, docs, maxLength, spansAt, scalesOffset

template <typename T>
T GetTyped(Napi::Env env, Napi::Object o, const char* key, napi_typedarray_type type, const char* type_name) {
  Napi::Value v = o.Get(key);
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != type) {
    throw ArgError(env, std::string("plan.") + key, std::string("a ") + type_name, Describe(v));
  }
  return v.As<T>();
}

class StreamScanTask : public CudaTask {
 public:
  StreamScanTask(Napi::Env env, Runtime* rt) : CudaTask(env, "CUDA corpus scan failed: "), rt_(rt) {}
  TokenSet queries;
  StreamScanSpec spec;

  void Run() override {
    rt_->EnsureReady();
    rt_->ValidateLaunch(spec.launch);
    int64_t tokens = 0;
    for (int64_t i = 0; i < queries.count; i++) tokens += queries.lengths[i];
    std::shared_ptr<DeviceTokens> q = rt_->AllocTokens(queries.dtype, queries.dim, std::max<int64_t>(tokens, 1), std::max<int64_t>(queries.count, 1));
    rt_->Append(*q, queries);
    result_ = maxsim_cuda::RunStreamScan(*rt_, *q, spec);
  }

  Napi::Value Result(Napi::Env env) override {
    Napi::Object o = Napi::Object::New(env);
    const size_t n = result_.scores.size();
    Napi::Float32Array scores = Napi::Float32Array::New(env, n);
    Napi::Float64Array indices = Napi::Float64Array::New(env, n);
    for (size_t i = 0; i < n; i++) {
      scores[i] = result_.scores[i];
      indices[i] = static_cast<double>(result_.indices[i]);
    }
    o.Set("k", Napi::Number::New(env, static_cast<double>(result_.k)));
    o.Set("scores", scores);
    o.Set("indices", indices);
    o.Set("bytes", Napi::Number::New(env, static_cast<double>(result_.bytes)));
    o.Set("devicePeakBytes", Napi::Number::New(env, static_cast<double>(result_.device_peak)));
    o.Set("pinnedBytes", Napi::Number::New(env, static_cast<double>(result_.pinned_bytes)));
    o.Set("firstBlockSeconds", Napi::Number::New(env, result_.first_block_seconds));
    o.Set("seconds", Napi::Number::New(env, result_.seconds));
    o.Set("transferMode", Napi::String::New(env, result_.transfer_mode));
    o.Set("transferNote", Napi::String::New(env, result_.transfer_note));
    o.Set("registeredBytes", Napi::Number::New(env, static_cast<double>(result_.registered_bytes)));
    return o;
  }

 private:
  Runtime* rt_;
  StreamScanResult result_;
};

Napi::Value StreamScan(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  Runtime* rt = maxsim_binding::ParseDevice(env, info[0]);
  auto task = std::make_unique<StreamScanTask>(env, rt);

  task->queries = ParseTokenSet(env, info[1], "queries");
  Napi::Object qo = info[1].As<Napi::Object>();
  if (task->queries.dtype == DType::Int8) task->Keep(qo.Get("scales"));
  task->Keep(qo.Get("data"));
  task->Keep(qo.Get("starts"));
  task->Keep(qo.Get("lengths"));

  if (!info[2].IsObject()) throw ArgError(env, "plan", "an object", Describe(info[2]));
  Napi::Object plan = info[2].As<Napi::Object>();
  StreamScanSpec& spec = task->spec;
  Napi::Value files = plan.Get("files");
  if (!files.IsArray()) throw ArgError(env, "plan.files", "an array of file paths", Describe(files));
  for (uint32_t i = 0; i < files.As<Napi::Array>().Length(); i++) {
    Napi::Value f = files.As<Napi::Array>().Get(i);
    if (!f.IsString()) throw ArgError(env, "plan.files[" + std::to_string(i) + "]", "a file path", Describe(f));
    spec.files.push_back(f.As<Napi::String>().Utf8Value());
  }
  spec.dtype = task->queries.dtype;
  spec.dim = task->queries.dim;
  spec.capacity_tokens = GetInteger(env, plan.Get("capacityTokens"), "plan.capacityTokens", 0, int64_t(1) << 40);
  spec.capacity_docs = GetInteger(env, plan.Get("capacityDocs"), "plan.capacityDocs", 1, int64_t(1) << 31);
  spec.depth = static_cast<int>(GetInteger(env, plan.Get("depth"), "plan.depth", 1, 8));
  spec.readers = static_cast<int>(GetInteger(env, plan.Get("readers"), "plan.readers", 1, 64));
  spec.k = GetInteger(env, plan.Get("k"), "plan.k", 0, int64_t(1) << 31);
  spec.register_pages = plan.Get("registerPages").ToBoolean().Value();
  spec.direct_io = plan.Get("directIo").ToBoolean().Value();
  spec.direct_io_unless_cached = plan.Get("directIoUnlessCached").ToBoolean().Value();
  Napi::Value pin = plan.Get("pinned");
  if (!pin.IsUndefined() && !pin.IsNull()) {
    if (!pin.IsExternal()) throw ArgError(env, "plan.pinned", "a handle from cuda.pinFiles()", Describe(pin));
    auto* holder = pin.As<Napi::External<PinHolder>>().Data();
    if (!holder->pin) throw ArgError(env, "plan.pinned", "a live pin", "one that was released");
    if (holder->pin->paths != spec.files) throw ArgError(env, "plan.pinned", "a pin of the same files", "another file list");
    spec.pinned = holder->pin;
  }

  auto blocks = GetTyped<Napi::Float64Array>(env, plan, "blocks", napi_float64_array, "Float64Array");
  auto starts = GetTyped<Napi::Float64Array>(env, plan, "starts", napi_float64_array, "Float64Array");
  auto lengths = GetTyped<Napi::Int32Array>(env, plan, "lengths", napi_int32_array, "Int32Array");
  if (blocks.ElementLength() % kBlockFields != 0) throw ArgError(env, "plan.blocks", std::to_string(kBlockFields) + " numbers per block", std::to_string(blocks.ElementLength()));
  if (starts.ElementLength() != lengths.ElementLength()) throw ArgError(env, "plan.starts", "one start per length", std::to_string(starts.ElementLength()));
  task->Keep(starts);
  task->Keep(lengths);
  spec.doc_starts = starts.Data();
  spec.doc_lengths = lengths.Data();
  const int64_t ndocs = static_cast<int64_t>(lengths.ElementLength());
  for (size_t i = 0; i < blocks.ElementLength(); i += kBlockFields) {
    const double* f = blocks.Data() + i;
    for (int j = 0; j < kBlockFields; j++) {
      if (!(f[j] >= 0 && f[j] == std::floor(f[j]) && f[j] < 9007199254740992.0)) {
        throw ArgError(env, "plan.blocks", "non-negative integers", std::to_string(f[j]));
      }
    }
    StreamBlock b;
    b.file = static_cast<int>(f[0]);
    b.tokens_offset = static_cast<uint64_t>(f[1]);
    b.tokens = static_cast<int64_t>(f[2]);
    b.first_doc = static_cast<int64_t>(f[3]);
    b.docs = static_cast<int64_t>(f[4]);
    b.max_length = static_cast<int32_t>(f[5]);
    b.spans_at = static_cast<int64_t>(f[6]);
    b.scales_offset = static_cast<uint64_t>(f[7]);
    const std::string at = "plan.blocks[" + std::to_string(i / kBlockFields) + "]";
    if (b.file >= static_cast<int>(spec.files.size())) throw ArgError(env, at, "a file index < files.length", std::to_string(b.file));
    if (b.tokens > spec.capacity_tokens || b.docs > spec.capacity_docs) throw ArgError(env, at, "a block within the capacities", "a larger one");
    if (b.spans_at + b.docs > ndocs) throw ArgError(env, at, "document spans within plan.lengths", "spans past the end");
    // The spans of the block must lie inside its tokens (the kernel trusts them).
    for (int64_t j = 0; j < b.docs; j++) {
      const double s = spec.doc_starts[b.spans_at + j];
      const int32_t len = spec.doc_lengths[b.spans_at + j];
      if (!(s >= 0 && len >= 0 && len <= b.max_length && s + len <= static_cast<double>(b.tokens))) {
        throw ArgError(env, at, "document spans inside the block's tokens", "document " + std::to_string(j) + " outside");
      }
    }
    spec.blocks.push_back(b);
  }

  // The launch as the dispatcher planned it (a TMA variant carries its box: the runtime encodes the
  // tensor map of each block's tokens).
  spec.launch = maxsim_binding::ParseLaunch(env, info[3], spec.dtype, false);

  if (!info[4].IsUndefined()) {
    if (!info[4].IsTypedArray() || info[4].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array ||
        info[4].As<Napi::TypedArray>().ElementLength() < 2) {
      throw ArgError(env, "progress", "a Float64Array(2)", Describe(info[4]));
    }
    task->Keep(info[4]);
    spec.progress = info[4].As<Napi::Float64Array>().Data();
  }
  // info[5]: an optional Int32Array(1) the JS side sets to abort the scan between blocks.
  if (info.Length() > 5 && !info[5].IsUndefined()) {
    if (!info[5].IsTypedArray() || info[5].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array ||
        info[5].As<Napi::TypedArray>().ElementLength() < 1) {
      throw ArgError(env, "cancel", "an Int32Array(1)", Describe(info[5]));
    }
    task->Keep(info[5]);
    spec.cancel = info[5].As<Napi::Int32Array>().Data();
  }
  return channel->Submit(env, rt, std::move(task));
}

// The pinned host-to-device copy rate, the ceiling a streamed scan is measured against: `iters` copies
// of `bytes` from one pinned buffer, each timed with device events; returns the seconds of each.
class HostToDeviceTask : public CudaTask {
 public:
  HostToDeviceTask(Napi::Env env, Runtime* rt, uint64_t bytes, int iters) : CudaTask(env), rt_(rt), bytes_(bytes), iters_(iters) {}
  void Run() override {
    rt_->EnsureReady();
    const maxsim_cuda::Driver& d = maxsim_cuda::Api();
    void* host = nullptr;
    maxsim_cuda::Check(d.cuMemHostAlloc(&host, bytes_, cu::CU_MEMHOSTALLOC_DEFAULT), "cuMemHostAlloc");
    std::memset(host, 1, bytes_);  // touch every page before timing
    cu::CUevent start = nullptr, stop = nullptr;
    try {
      maxsim_cuda::ScopedBlock dst(rt_->allocator(), bytes_);
      maxsim_cuda::Check(d.cuEventCreate(&start, cu::CU_EVENT_DEFAULT), "cuEventCreate");
      maxsim_cuda::Check(d.cuEventCreate(&stop, cu::CU_EVENT_DEFAULT), "cuEventCreate");
      for (int i = -1; i < iters_; i++) {  // one untimed warm-up copy
        maxsim_cuda::Check(d.cuEventRecord(start, rt_->stream()), "cuEventRecord");
        maxsim_cuda::Check(d.cuMemcpyHtoDAsync(dst.get(), host, bytes_, rt_->stream()), "cuMemcpyHtoDAsync");
        maxsim_cuda::Check(d.cuEventRecord(stop, rt_->stream()), "cuEventRecord");
        maxsim_cuda::Check(d.cuEventSynchronize(stop), "cuEventSynchronize");
        float ms = 0;
        maxsim_cuda::Check(d.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
        if (i >= 0) seconds_.push_back(ms / 1000.0);
      }
    } catch (...) {
      if (start) d.cuEventDestroy(start);
      if (stop) d.cuEventDestroy(stop);
      d.cuMemFreeHost(host);
      throw;
    }
    d.cuEventDestroy(start);
    d.cuEventDestroy(stop);
    d.cuMemFreeHost(host);
  }
  Napi::Value Result(Napi::Env env) override {
    Napi::Float64Array a = Napi::Float64Array::New(env, seconds_.size());
    for (size_t i = 0; i < seconds_.size(); i++) a[i] = seconds_[i];
    return a;
  }

 private:
  Runtime* rt_;
  uint64_t bytes_;
  int iters_;
  std::vector<double> seconds_;
};

Napi::Value MeasureHostToDevice(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  Runtime* rt = maxsim_binding::ParseDevice(env, info[0]);
  const int64_t bytes = GetInteger(env, info[1], "bytes", 1, int64_t(1) << 36);
  const int64_t iters = GetInteger(env, info[2], "iters", 1, 1000);
  return channel->Submit(env, rt, std::make_unique<HostToDeviceTask>(env, rt, static_cast<uint64_t>(bytes), static_cast<int>(iters)));
}

class PinFilesTask : public CudaTask {
 public:
  PinFilesTask(Napi::Env env, Runtime* rt, std::vector<std::string> paths, uint64_t chunk)
      : CudaTask(env, "pinning the corpus failed: "), rt_(rt), paths_(std::move(paths)), chunk_(chunk) {}
  void Run() override {
    rt_->EnsureReady();
    pin_ = maxsim_cuda::PinFiles(*rt_, paths_, chunk_);
  }
  Napi::Value Result(Napi::Env env) override {
    auto* holder = new PinHolder{pin_};
    Napi::External<PinHolder> ext = Napi::External<PinHolder>::New(env, holder, [](Napi::Env, PinHolder* h) { delete h; });
    return ext;
  }

 private:
  Runtime* rt_;
  std::vector<std::string> paths_;
  uint64_t chunk_;
  std::shared_ptr<maxsim_cuda::PinnedFiles> pin_;
};

// pinFiles(device, files, chunkBytes?) -> Promise<handle>: maps and page-locks the files whole; with
// chunkBytes (a multiple of 4096), maps them only, and scans register them chunk by chunk (pin-ahead).
Napi::Value PinFilesFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  Runtime* rt = maxsim_binding::ParseDevice(env, info[0]);
  if (!info[1].IsArray()) throw ArgError(env, "files", "an array of file paths", Describe(info[1]));
  std::vector<std::string> paths;
  for (uint32_t i = 0; i < info[1].As<Napi::Array>().Length(); i++) {
    Napi::Value f = info[1].As<Napi::Array>().Get(i);
    if (!f.IsString()) throw ArgError(env, "files[" + std::to_string(i) + "]", "a file path", Describe(f));
    paths.push_back(f.As<Napi::String>().Utf8Value());
  }
  uint64_t chunk = 0;
  if (info.Length() > 2 && !info[2].IsUndefined()) {
    chunk = static_cast<uint64_t>(GetInteger(env, info[2], "chunkBytes", 4096, int64_t(1) << 40));
    if (chunk % 4096 != 0) throw ArgError(env, "chunkBytes", "a multiple of 4096", std::to_string(chunk));
  }
  return channel->Submit(env, rt, std::make_unique<PinFilesTask>(env, rt, std::move(paths), chunk));
}

// pinnedBytes(handle) -> the bytes the pin holds page-locked now (0 once released).
Napi::Value PinnedBytesFn(const Napi::CallbackInfo& info) {
  if (!info[0].IsExternal()) throw ArgError(info.Env(), "handle", "a handle from cuda.pinFiles()", Describe(info[0]));
  const auto& pin = info[0].As<Napi::External<PinHolder>>().Data()->pin;
  return Napi::Number::New(info.Env(), pin ? static_cast<double>(pin->registered.load()) : 0.0);
}

// unpinFiles(handle): drops the pin now (the pages unlock once no scan uses them).
Napi::Value UnpinFiles(const Napi::CallbackInfo& info) {
  if (!info[0].IsExternal()) throw ArgError(info.Env(), "handle", "a handle from cuda.pinFiles()", Describe(info[0]));
  info[0].As<Napi::External<PinHolder>>().Data()->pin.reset();
  return info.Env().Undefined();
}

}  // namespace

void InitCudaStream(Napi::Env env, Napi::Object exports) {
  TaskChannel* channel = TaskChannel::Create(env, "maxsim.cuda.stream");
  Napi::Value cuda = exports.Get("cuda");
  if (!cuda.IsObject()) throw Napi::Error::New(env, "InitCudaStream must run after InitCuda (exports.cuda is missing)");
  cuda.As<Napi::Object>().Set("streamScan", Napi::Function::New(env, StreamScan, "streamScan", channel));
  cuda.As<Napi::Object>().Set("pinFiles", Napi::Function::New(env, PinFilesFn, "pinFiles", channel));
  cuda.As<Napi::Object>().Set("unpinFiles", Napi::Function::New(env, UnpinFiles, "unpinFiles"));
  cuda.As<Napi::Object>().Set("pinnedBytes", Napi::Function::New(env, PinnedBytesFn, "pinnedBytes"));
  cuda.As<Napi::Object>().Set("measureHostToDevice", Napi::Function::New(env, MeasureHostToDevice, "measureHostToDevice", channel));
}
