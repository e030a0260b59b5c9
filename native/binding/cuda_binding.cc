// Node-API glue for the CUDA engine's jobs (native/cuda/engine.h): upload, alloc, append, quantize,
// select, download, score, topK, twoStage, and the internal (benchmark and test) entries; the device
// handles, token-set handles and status / info live in cuda_handles.*. Each job only
// unpacks its arguments here, calls the engine on the device's worker thread (runtime.h, in call
// order) and wraps the result; it comes back to the JS thread through one thread-safe function per
// environment and settles a promise. The JS thread never waits on the GPU.
#include <napi.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../common/maxsim_constants.h"
#include "../cuda/engine.h"
#include "../cuda/runtime.h"
#include "cuda_handles.h"
#include "cuda_task.h"
#include "token_set.h"

namespace {

using maxsim_cuda::DeviceTokens;
using maxsim_cuda::LaunchSpec;
using maxsim_cuda::Runtime;

using maxsim_binding::ArgError;
using maxsim_binding::Describe;
using maxsim_binding::GetInteger;
using maxsim_binding::ParseLaunch;
using maxsim_binding::AsTokenSet;
using maxsim_binding::NewTokenSet;
using maxsim_binding::SetDTypeName;
using maxsim_binding::Submit;
using maxsim_binding::TokenSetHandle;
using maxsim_binding::UnwrapDevice;
using maxsim_binding::UnwrapTokenSet;
using maxsim_cuda::QuerySource;
using Task = maxsim_binding::CudaTask;
template <typename R>
using Job = maxsim_binding::JobTask<R>;

// A host TokenBatch for the CUDA engine, bounds-checked by ParseTokenSet (int8 with its per-token
// scales, which ParseTokenSet requires and checks for length).
TokenSet ParseHostBatch(Napi::Env env, const Napi::Value& v, const std::string& name, Task* task) {
  TokenSet t = ParseTokenSet(env, v, name);
  Napi::Object o = v.As<Napi::Object>();
  task->Keep(o.Get("data"));
  task->Keep(o.Get("starts"));
  task->Keep(o.Get("lengths"));
  if (t.dtype == DType::Int8) task->Keep(o.Get("scales"));
  return t;
}

void CheckDevice(Napi::Env env, const TokenSetHandle* h, Runtime* rt, const std::string& name) {
  if (h->snapshot().device != rt->props().index) {
    throw ArgError(env, name, "a token set on device " + std::to_string(rt->props().index),
                   "one on device " + std::to_string(h->snapshot().device));
  }
}

// ---------------------------------------------------------------------------------------------
// upload(device, batch), alloc(device, spec), append(tokenSet, batch)

using SetJob = Job<std::shared_ptr<DeviceTokens>>;

Napi::Value WrapSet(Napi::Env env, std::shared_ptr<DeviceTokens>& set) { return NewTokenSet(env, std::move(set)); }

Napi::Value Upload(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Runtime* rt = UnwrapDevice(env, info[0]);
  auto task = std::make_unique<SetJob>(env);
  TokenSet host = ParseHostBatch(env, info[1], "batch", task.get());
  task->run = [rt, host] { return maxsim_cuda::UploadSet(*rt, host); };
  task->wrap = WrapSet;
  return Submit(env, rt, std::move(task));
}

Napi::Value Alloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Runtime* rt = UnwrapDevice(env, info[0]);
  if (!info[1].IsObject()) throw ArgError(env, "spec", "an object { dtype, dim, tokens, items }", Describe(info[1]));
  Napi::Object spec = info[1].As<Napi::Object>();
  const DType dtype = ParseDType(env, "spec", spec.Get("dtype"));
  const int64_t dim = GetInteger(env, spec.Get("dim"), "spec.dim", 1, MAXSIM_MAX_DIM);
  const int64_t tokens = GetInteger(env, spec.Get("tokens"), "spec.tokens", 0, int64_t(1) << 50);
  const int64_t items = GetInteger(env, spec.Get("items"), "spec.items", 0, 2147483646);
  auto task = std::make_unique<SetJob>(env);
  task->run = [rt, dtype, dim, tokens, items] {
    rt->EnsureReady();
    return rt->AllocTokens(dtype, dim, tokens, items);
  };
  task->wrap = WrapSet;
  return Submit(env, rt, std::move(task));
}

// Resolves with the handle itself, its snapshot refreshed on the JS thread.
class AppendTask : public Task {
 public:
  AppendTask(Napi::Env env, Runtime* rt, std::shared_ptr<DeviceTokens> dst, Napi::Object handle)
      : Task(env), rt_(rt), dst_(std::move(dst)), handle_(Napi::Persistent(handle)) {}
  TokenSet host;
  void Run() override {
    rt_->EnsureReady();
    rt_->Append(*dst_, host);
  }
  Napi::Value Result(Napi::Env env) override {
    TokenSetHandle::Unwrap(handle_.Value())->Refresh();
    return handle_.Value();
  }

 private:
  Runtime* rt_;
  std::shared_ptr<DeviceTokens> dst_;
  Napi::ObjectReference handle_;
};

Napi::Value Append(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  TokenSetHandle* h = UnwrapTokenSet(env, info[0], "tokenSet");
  std::shared_ptr<DeviceTokens> dst = h->Live(env, "tokenSet");
  auto task = std::make_unique<AppendTask>(env, dst->runtime, dst, info[0].As<Napi::Object>());
  task->host = ParseHostBatch(env, info[1], "batch", task.get());
  if (task->host.dim != h->snapshot().dim || task->host.dtype != h->snapshot().dtype) {
    throw ArgError(env, "batch", std::string("tokens of dtype '") + DTypeName(h->snapshot().dtype) + "' and dim " + std::to_string(h->snapshot().dim),
                   std::string("dtype '") + DTypeName(task->host.dtype) + "' and dim " + std::to_string(task->host.dim));
  }
  return Submit(env, dst->runtime, std::move(task));
}

// ---------------------------------------------------------------------------------------------
// quantize(tokenSet, mode, scales): a new device token set, quantized on the GPU (mode 'int8' or 'fp8';
// scales 'token', the default, or 'document')

Napi::Value Quantize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  TokenSetHandle* h = UnwrapTokenSet(env, info[0], "tokenSet");
  std::shared_ptr<DeviceTokens> src = h->Live(env, "tokenSet");
  const std::string mode = info[1].IsString() ? info[1].As<Napi::String>().Utf8Value() : std::string();
  if (mode != "int8" && mode != "fp8") throw ArgError(env, "mode", "'int8' or 'fp8'", Describe(info[1]));
  const std::string scales = info[2].IsUndefined() ? std::string("token")
                             : info[2].IsString()  ? info[2].As<Napi::String>().Utf8Value()
                                                   : std::string();
  if (scales != "token" && scales != "document") throw ArgError(env, "scales", "'token' or 'document'", Describe(info[2]));
  if (h->snapshot().dtype == DType::Int8) {
    throw ArgError(env, "tokenSet.dtype", "'float32', 'float16' or 'bfloat16' (a float set to quantize)",
                   std::string("'") + SetDTypeName(h->snapshot().dtype, h->snapshot().e4m3) + "'");
  }
  Runtime* rt = src->runtime;
  auto task = std::make_unique<SetJob>(env);
  task->run = [rt, src, e4m3 = mode == "fp8", per_document = scales == "document"] {
    rt->EnsureReady();
    if (src->parent) {
      throw std::invalid_argument("Expected a corpus made by upload() or alloc() for quantize() but received a view (select()); quantize the corpus, then select");
    }
    return maxsim_cuda::Quantize8(*rt, *src, e4m3, per_document);
  };
  task->wrap = WrapSet;
  return Submit(env, rt, std::move(task));
}

// ---------------------------------------------------------------------------------------------
// select(tokenSet, indices): a view of some items (their own spans, the same token memory)

Napi::Value Select(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  TokenSetHandle* h = UnwrapTokenSet(env, info[0], "tokenSet");
  std::shared_ptr<DeviceTokens> src = h->Live(env, "tokenSet");
  if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) {
    throw ArgError(env, "indices", "a Float64Array of item indices", Describe(info[1]));
  }
  Napi::Float64Array a = info[1].As<Napi::Float64Array>();
  std::vector<int64_t> indices(a.ElementLength());
  for (size_t i = 0; i < indices.size(); i++) {
    const double x = a[i];
    if (!(x >= 0 && x < static_cast<double>(h->snapshot().count) && x == std::floor(x))) {
      throw ArgError(env, "indices[" + std::to_string(i) + "]",
                     "an item index in [0, " + std::to_string(h->snapshot().count) + ")", std::to_string(x));
    }
    indices[i] = static_cast<int64_t>(x);
  }
  Runtime* rt = src->runtime;
  auto task = std::make_unique<SetJob>(env);
  task->run = [rt, src, indices = std::move(indices)] {
    rt->EnsureReady();
    std::shared_ptr<DeviceTokens> view = maxsim_cuda::Select(*rt, src, indices);
    rt->Synchronize();  // a job leaves the stream idle (runtime.h)
    return view;
  };
  task->wrap = WrapSet;
  return Submit(env, rt, std::move(task));
}

// ---------------------------------------------------------------------------------------------
// download(tokenSet): the set's items back on the host, as a ragged batch
// { dtype, dim, count, data, offsets (Float64Array [count + 1]), lengths, scales? }

Napi::Value WrapHostCopy(Napi::Env env, maxsim_cuda::HostCopy& h) {
  const size_t tokens = h.dim > 0 ? h.data.size() / (static_cast<size_t>(h.dim) * DTypeSize(h.dtype)) : 0;
  Napi::ArrayBuffer buf = Napi::ArrayBuffer::New(env, h.data.size());
  if (!h.data.empty()) std::memcpy(buf.Data(), h.data.data(), h.data.size());
  Napi::Value data;
  if (h.dtype == DType::Float32) data = Napi::Float32Array::New(env, tokens * h.dim, buf, 0);
  else if (h.e4m3) data = Napi::Uint8Array::New(env, tokens * h.dim, buf, 0);
  else if (h.dtype == DType::Int8) data = Napi::Int8Array::New(env, tokens * h.dim, buf, 0);
  else data = Napi::Uint16Array::New(env, tokens * h.dim, buf, 0);
  Napi::Float64Array offsets = Napi::Float64Array::New(env, h.starts.size() + 1);
  Napi::Int32Array lengths = Napi::Int32Array::New(env, h.lengths.size());
  offsets[0] = 0;
  for (size_t i = 0; i < h.starts.size(); i++) {
    // items are packed in order on the device, so starts[i] + lengths[i] == starts[i + 1]
    offsets[i + 1] = static_cast<double>(h.starts[i] + h.lengths[i]);
    lengths[i] = h.lengths[i];
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("dtype", SetDTypeName(h.dtype, h.e4m3));
  o.Set("dim", static_cast<double>(h.dim));
  o.Set("count", static_cast<double>(h.starts.size()));
  o.Set("data", data);
  o.Set("offsets", offsets);
  o.Set("lengths", lengths);
  if (h.dtype == DType::Int8) {
    Napi::Float32Array sc = Napi::Float32Array::New(env, h.scales.size());
    if (!h.scales.empty()) std::memcpy(sc.Data(), h.scales.data(), h.scales.size() * sizeof(float));
    o.Set("scales", sc);
  }
  return o;
}

Napi::Value Download(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  TokenSetHandle* h = UnwrapTokenSet(env, info[0], "tokenSet");
  std::shared_ptr<DeviceTokens> src = h->Live(env, "tokenSet");
  Runtime* rt = src->runtime;
  auto task = std::make_unique<Job<maxsim_cuda::HostCopy>>(env);
  task->run = [rt, src] { return maxsim_cuda::DownloadSet(*rt, *src); };
  task->wrap = WrapHostCopy;
  return Submit(env, rt, std::move(task));
}

// setLengths(tokenSet): Int32Array of the lengths of the set's items as of the call (for the plans
// that TypeScript makes from them: the training backward's CSR blocks).
Napi::Value SetLengths(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  TokenSetHandle* h = UnwrapTokenSet(env, info[0], "tokenSet");
  std::shared_ptr<DeviceTokens> src = h->Live(env, "tokenSet");
  const int64_t count = h->snapshot().count;  // the JS thread reads the snapshot, never the live set
  Runtime* rt = src->runtime;
  auto task = std::make_unique<Job<std::vector<int32_t>>>(env);
  task->run = [rt, src, count] { return maxsim_cuda::SetLengths(*rt, *src, count); };
  task->wrap = [](Napi::Env env, std::vector<int32_t>& v) -> Napi::Value {
    Napi::Int32Array out = Napi::Int32Array::New(env, v.size());
    if (!v.empty()) std::memcpy(out.Data(), v.data(), v.size() * sizeof(int32_t));
    return out;
  };
  return Submit(env, rt, std::move(task));
}

// ---------------------------------------------------------------------------------------------
// score(device, queries, docs, launch, options?), topK(device, queries, docs, launch, k, select, options?),
// twoStage(...), and internal.bench(...): queries are a device token set or a host batch the job
// uploads itself.

QuerySource ParseQueries(Napi::Env env, Runtime* rt, const Napi::Value& v, Task* task, const std::string& name = "queries") {
  QuerySource q;
  if (TokenSetHandle* h = AsTokenSet(env, v)) {
    CheckDevice(env, h, rt, name);
    q.device = h->Live(env, name);
    q.dtype = h->snapshot().dtype;
    q.e4m3 = h->snapshot().e4m3;
    q.dim = h->snapshot().dim;
    q.count = h->snapshot().count;  // the JS thread reads the snapshot, never the live set
  } else {
    q = maxsim_cuda::HostQueries(ParseHostBatch(env, v, name, task));
  }
  return q;
}

std::shared_ptr<DeviceTokens> ParseDocs(Napi::Env env, Runtime* rt, const Napi::Value& v, const QuerySource& q, const std::string& name,
                                        const std::string& qname = "queries") {
  TokenSetHandle* h = UnwrapTokenSet(env, v, name);
  CheckDevice(env, h, rt, name);
  std::shared_ptr<DeviceTokens> d = h->Live(env, name);
  const auto& s = h->snapshot();
  if (s.dim != q.dim) {
    throw ArgError(env, qname + ".dim", std::to_string(s.dim) + " (the dimension of " + name + ")", std::to_string(q.dim));
  }
  if (s.e4m3) {
    // fp8 documents: float queries, quantized to e4m3 on the device by the scoring job
    if (q.dtype == DType::Int8) {
      throw ArgError(env, qname + ".dtype", std::string("'float32', 'float16' or 'bfloat16' (") + name + " is fp8; queries are quantized to fp8 on the GPU)",
                     std::string("'") + SetDTypeName(q.dtype, q.e4m3) + "'");
    }
    return d;
  }
  if (s.dtype != q.dtype || q.e4m3) {
    throw ArgError(env, qname + ".dtype", std::string("'") + DTypeName(s.dtype) + "' (the dtype of " + name + ")",
                   std::string("'") + SetDTypeName(q.dtype, q.e4m3) + "'");
  }
  return d;
}

// The queries and documents of a job: host queries converted for the documents (engine.h,
// ConvertHostQueriesFor), then the documents checked against them.
std::shared_ptr<DeviceTokens> ParsePair(Napi::Env env, Runtime* rt, const Napi::CallbackInfo& info, size_t at, Task* task, QuerySource& q,
                                        const std::string& qname = "queries", const std::string& dname = "docs") {
  q = ParseQueries(env, rt, info[at], task, qname);
  if (TokenSetHandle* h = AsTokenSet(env, info[at + 1])) maxsim_cuda::ConvertHostQueriesFor(q, h->snapshot().dtype, h->snapshot().e4m3);
  return ParseDocs(env, rt, info[at + 1], q, dname, qname);
}

// The benchmark-only switches of a job ({ phases?: boolean, handoff?: boolean, mapped?: boolean },
// from maxsim/internal), when given; `handoff` asks the task for its handoff times (cuda_task.h),
// `mapped: false` keeps small score matrices on the device (JobOptions::mapped_scores).
maxsim_cuda::JobOptions ParseJobOptions(Napi::Env env, const Napi::Value& v, const std::string& name, Task* task) {
  maxsim_cuda::JobOptions o;
  if (v.IsUndefined()) return o;
  if (!v.IsObject()) throw ArgError(env, name, "an object { phases?, handoff?, mapped? }", Describe(v));
  const auto flag = [&](const char* key, bool otherwise) {
    Napi::Value f = v.As<Napi::Object>().Get(key);
    if (!f.IsUndefined() && !f.IsBoolean()) throw ArgError(env, name + "." + key, "a boolean", Describe(f));
    return f.IsBoolean() ? f.As<Napi::Boolean>().Value() : otherwise;
  };
  o.time_phases = flag("phases", false);
  task->report_handoff = flag("handoff", false);
  o.mapped_scores = flag("mapped", true);
  return o;
}

Napi::Value Score(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Runtime* rt = UnwrapDevice(env, info[0]);
  auto task = std::make_unique<Job<std::vector<float>>>(env);
  QuerySource q;
  std::shared_ptr<DeviceTokens> docs = ParsePair(env, rt, info, 1, task.get(), q);
  LaunchSpec launch = ParseLaunch(env, info[3], docs->dtype, docs->e4m3);
  // a score job has no phases: handoff and mapped only
  const maxsim_cuda::JobOptions options = ParseJobOptions(env, info[4], "options", task.get());
  task->run = [rt, q, docs, launch, options]() mutable { return maxsim_cuda::Score(*rt, q, *docs, launch, options); };
  task->wrap = [](Napi::Env env, std::vector<float>& scores) -> Napi::Value {
    Napi::Float32Array a = Napi::Float32Array::New(env, scores.size());
    if (!scores.empty()) std::memcpy(a.Data(), scores.data(), scores.size() * sizeof(float));
    return a;  // `handoff`, when asked for, is set on the array
  };
  return Submit(env, rt, std::move(task));
}

// Heaps as { n, scores: Float32Array [rows * n], indices: Int32Array [rows * n] } (engine.h, Heaps),
// plus `phases` when the job timed them and `onDevice` for internal.deviceTopK.
Napi::Value WrapHeaps(Napi::Env env, maxsim_cuda::Heaps& h) {
  Napi::Object o = Napi::Object::New(env);
  Napi::Float32Array s = Napi::Float32Array::New(env, h.scores.size());
  Napi::Int32Array i = Napi::Int32Array::New(env, h.indices.size());
  if (!h.scores.empty()) std::memcpy(s.Data(), h.scores.data(), h.scores.size() * sizeof(float));
  if (!h.indices.empty()) std::memcpy(i.Data(), h.indices.data(), h.indices.size() * sizeof(int32_t));
  o.Set("n", static_cast<double>(h.n));
  o.Set("scores", s);
  o.Set("indices", i);
  if (!h.phases.empty()) o.Set("phases", h.phases);
  return o;
}

// Where a selection runs, as the TypeScript plan chose it (src/backends/cuda-select-plan.ts).
maxsim_cuda::SelectWhere ParseSelect(Napi::Env env, const Napi::Value& v, const std::string& name) {
  const std::string s = v.IsString() ? v.As<Napi::String>().Utf8Value() : std::string();
  if (s != "device" && s != "host") throw ArgError(env, name, "'device' or 'host'", Describe(v));
  return s == "device" ? maxsim_cuda::SelectWhere::kDevice : maxsim_cuda::SelectWhere::kHost;
}

// topK(device, queries, docs, launch, k, select, options?)
Napi::Value TopK(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Runtime* rt = UnwrapDevice(env, info[0]);
  auto task = std::make_unique<Job<maxsim_cuda::Heaps>>(env);
  QuerySource q;
  std::shared_ptr<DeviceTokens> docs = ParsePair(env, rt, info, 1, task.get(), q);
  LaunchSpec launch = ParseLaunch(env, info[3], docs->dtype, docs->e4m3);
  const int64_t k = GetInteger(env, info[4], "k", 0, 2147483647);
  const maxsim_cuda::SelectWhere select = ParseSelect(env, info[5], "select");
  const maxsim_cuda::JobOptions options = ParseJobOptions(env, info[6], "options", task.get());
  task->run = [rt, q, docs, launch, k, select, options]() mutable {
    return maxsim_cuda::TopK(*rt, q, *docs, launch, k, select, options);
  };
  task->wrap = WrapHeaps;
  return Submit(env, rt, std::move(task));
}

// twoStage(device, scanQueries, scanDocs, scanLaunch, exactQueries, exactDocs, exactLaunch,
// { k, candidates, count, select, exactGroup? }, options?)
Napi::Value TwoStage(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Runtime* rt = UnwrapDevice(env, info[0]);
  auto task = std::make_unique<Job<maxsim_cuda::Heaps>>(env);
  maxsim_cuda::TwoStageJob job;
  job.scan_docs = ParsePair(env, rt, info, 1, task.get(), job.scan_queries, "scanQueries", "scanDocs");
  job.scan_launch = ParseLaunch(env, info[3], job.scan_docs->dtype, job.scan_docs->e4m3);
  job.exact_docs = ParsePair(env, rt, info, 4, task.get(), job.exact_queries, "exactQueries", "exactDocs");
  job.exact_launch = ParseLaunch(env, info[6], job.exact_docs->dtype, job.exact_docs->e4m3);
  if (job.exact_queries.count != job.scan_queries.count) {
    throw ArgError(env, "exactQueries", std::to_string(job.scan_queries.count) + " queries (as scanQueries)",
                   std::to_string(job.exact_queries.count));
  }
  if (!info[7].IsObject()) throw ArgError(env, "spec", "an object { k, candidates, count, select }", Describe(info[7]));
  Napi::Object spec = info[7].As<Napi::Object>();
  job.k = GetInteger(env, spec.Get("k"), "spec.k", 0, 2147483647);
  job.candidates = GetInteger(env, spec.Get("candidates"), "spec.candidates", 0, 2147483647);
  job.count = GetInteger(env, spec.Get("count"), "spec.count", 0, 2147483647);
  job.select = ParseSelect(env, spec.Get("select"), "spec.select");
  // queries per exact launch (absent: all in one)
  const Napi::Value group = spec.Get("exactGroup");
  job.exact_group = group.IsUndefined() ? 0 : GetInteger(env, group, "spec.exactGroup", 1, 2147483647);
  const maxsim_cuda::JobOptions options = ParseJobOptions(env, info[8], "options", task.get());
  task->run = [rt, job, options]() mutable { return maxsim_cuda::TwoStage(*rt, job, options); };
  task->wrap = WrapHeaps;
  return Submit(env, rt, std::move(task));
}

// ---------------------------------------------------------------------------------------------
// internal: entries for benchmarks and tests only (src/backends/cuda.ts reaches them through
// maxsim/internal), kept off the product's entries.

// internal.bench(device, queries, docs, launch, { warmup, warmupMs, iters, rotate }): kernel timing
// (engine.h, BenchLaunches) -> { ms, peakBytes }.
Napi::Value Bench(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Runtime* rt = UnwrapDevice(env, info[0]);
  auto task = std::make_unique<Job<maxsim_cuda::BenchResult>>(env);
  QuerySource q = ParseQueries(env, rt, info[1], task.get());
  std::vector<std::shared_ptr<DeviceTokens>> docs{ParseDocs(env, rt, info[2], q, "docs")};
  LaunchSpec launch = ParseLaunch(env, info[3], docs[0]->dtype, docs[0]->e4m3);
  maxsim_cuda::BenchSpec spec;
  if (info.Length() > 4 && !info[4].IsUndefined()) {
    if (!info[4].IsObject()) throw ArgError(env, "options", "an object { warmup, warmupMs, iters, rotate }", Describe(info[4]));
    Napi::Object o = info[4].As<Napi::Object>();
    if (!o.Get("warmup").IsUndefined()) spec.warmup = GetInteger(env, o.Get("warmup"), "options.warmup", 0, 1000000);
    if (!o.Get("iters").IsUndefined()) spec.iters = GetInteger(env, o.Get("iters"), "options.iters", 1, 1000000);
    if (!o.Get("warmupMs").IsUndefined()) {
      Napi::Value w = o.Get("warmupMs");
      if (!w.IsNumber() || !(w.As<Napi::Number>().DoubleValue() >= 0) || w.As<Napi::Number>().DoubleValue() > 600000) {
        throw ArgError(env, "options.warmupMs", "a number of milliseconds in [0, 600000]", Describe(w));
      }
      spec.warmup_ms = w.As<Napi::Number>().DoubleValue();
    }
    Napi::Value rotate = o.Get("rotate");
    if (!rotate.IsUndefined()) {
      if (!rotate.IsArray()) throw ArgError(env, "options.rotate", "an array of device token sets", Describe(rotate));
      Napi::Array a = rotate.As<Napi::Array>();
      for (uint32_t i = 0; i < a.Length(); i++) {
        const std::string name = "options.rotate[" + std::to_string(i) + "]";
        docs.push_back(ParseDocs(env, rt, a.Get(i), q, name));
        const DeviceTokens& r = *docs.back();
        if (r.dtype != docs[0]->dtype || r.e4m3 != docs[0]->e4m3) {
          throw ArgError(env, name, std::string("a token set of dtype '") + SetDTypeName(docs[0]->dtype, docs[0]->e4m3) + "' (as docs)",
                         std::string("'") + SetDTypeName(r.dtype, r.e4m3) + "'");
        }
      }
    }
  }
  task->run = [rt, q, docs, launch, spec]() mutable { return maxsim_cuda::BenchLaunches(*rt, q, docs, launch, spec); };
  task->wrap = [](Napi::Env env, maxsim_cuda::BenchResult& r) -> Napi::Value {
    Napi::Object o = Napi::Object::New(env);
    Napi::Array ms = Napi::Array::New(env, r.ms.size());
    for (size_t i = 0; i < r.ms.size(); i++) ms.Set(static_cast<uint32_t>(i), Napi::Number::New(env, r.ms[i]));
    o.Set("ms", ms);
    o.Set("peakBytes", static_cast<double>(r.peak_bytes));
    return o;
  };
  return Submit(env, rt, std::move(task));
}

// The rows and column count of a host Float32Array [rows * cols] argument pair.
struct HostMatrix {
  Napi::Float32Array a;
  int64_t rows = 0, cols = 0;
};
HostMatrix ParseHostMatrix(Napi::Env env, const Napi::Value& scores, const Napi::Value& cols_v) {
  if (!scores.IsTypedArray() || scores.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) {
    throw ArgError(env, "scores", "a Float32Array", Describe(scores));
  }
  HostMatrix m;
  m.a = scores.As<Napi::Float32Array>();
  const int64_t len = static_cast<int64_t>(m.a.ElementLength());
  m.cols = GetInteger(env, cols_v, "cols", len > 0 ? 1 : 0, 2147483647);
  if (m.cols > 0 && len % m.cols != 0) {
    throw ArgError(env, "cols", "a divisor of scores.length (" + std::to_string(len) + ")", std::to_string(m.cols));
  }
  m.rows = m.cols > 0 ? len / m.cols : 0;
  return m;
}

// internal.deviceTopK(device, scores, cols, k, select): engine.h, SelectMatrix; heaps plus onDevice.
Napi::Value DeviceTopK(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Runtime* rt = UnwrapDevice(env, info[0]);
  HostMatrix m = ParseHostMatrix(env, info[1], info[2]);
  const int64_t k = GetInteger(env, info[3], "k", 0, 2147483647);
  const maxsim_cuda::SelectWhere select = ParseSelect(env, info[4], "select");
  std::vector<float> matrix(m.a.Data(), m.a.Data() + m.a.ElementLength());
  auto task = std::make_unique<Job<maxsim_cuda::Heaps>>(env);
  task->run = [rt, matrix = std::move(matrix), rows = m.rows, cols = m.cols, k, select] {
    return maxsim_cuda::SelectMatrix(*rt, matrix, rows, cols, k, select);
  };
  task->wrap = [](Napi::Env env, maxsim_cuda::Heaps& h) -> Napi::Value {
    Napi::Object o = WrapHeaps(env, h).As<Napi::Object>();
    o.Set("onDevice", h.on_device);
    return o;
  };
  return Submit(env, rt, std::move(task));
}

// internal.hostTopK(scores, cols, k): engine.h, HostTopK, synchronously (no GPU needed).
Napi::Value HostTopK(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HostMatrix m = ParseHostMatrix(env, info[0], info[1]);
  const int64_t k = GetInteger(env, info[2], "k", 0, 2147483647);
  maxsim_cuda::Heaps h = maxsim_cuda::HostTopK(m.a.Data(), m.rows, m.cols, k);
  return WrapHeaps(env, h);
}

// internal.selectLimitBreach(rows, cols, keep): why a 'device' selection of this shape is refused, or
// '' (device_select.h, DeviceSelectLimitBreach; no GPU needed, so the CPU tests check the TS plan by it).
Napi::Value SelectLimitBreach(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int64_t rows = GetInteger(env, info[0], "rows", 0, 2147483647);  // as the jobs' counts
  const int64_t cols = GetInteger(env, info[1], "cols", 0, 2147483647);
  const int64_t keep = GetInteger(env, info[2], "keep", 0, 2147483647);
  return Napi::String::New(env, maxsim_cuda::DeviceSelectLimitBreach(rows, cols, keep));
}

// The device selection's limits, from their one definition (device_select.h), for the TypeScript plan
// that chooses where each selection runs: { readBackBytes, maxBlocks, entries: [{ maxKeep, chunk,
// kernel }] } (entries by ascending maxKeep; kernel: the entry point a runtime must have loaded).
Napi::Object SelectKernelInfo(Napi::Env env) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("readBackBytes", Napi::Number::New(env, static_cast<double>(Runtime::kReadBackBytes)));
  o.Set("maxBlocks", Napi::Number::New(env, static_cast<double>(maxsim_cuda::kDeviceSelectMaxBlocks)));
  Napi::Array entries = Napi::Array::New(env, maxsim_cuda::kSelectEntryCount);
  for (int i = 0; i < maxsim_cuda::kSelectEntryCount; i++) {
    const maxsim_cuda::SelectEntryPoints& e = maxsim_cuda::kSelectEntries[i];
    Napi::Object x = Napi::Object::New(env);
    x.Set("maxKeep", Napi::Number::New(env, static_cast<double>(e.max_keep)));
    x.Set("chunk", Napi::Number::New(env, static_cast<double>(e.chunk)));
    x.Set("kernel", Napi::String::New(env, e.finish_scores));
    entries.Set(static_cast<uint32_t>(i), x);
  }
  o.Set("entries", entries);
  return o;
}

}  // namespace

void InitCuda(Napi::Env env, Napi::Object exports) {
  Napi::Object cuda = Napi::Object::New(env);
  maxsim_binding::InitCudaDevices(env, cuda);  // status, open, info, memory, emptyCache (cuda_handles.cc)
  cuda.Set("upload", Napi::Function::New(env, Upload, "upload"));
  cuda.Set("alloc", Napi::Function::New(env, Alloc, "alloc"));
  cuda.Set("append", Napi::Function::New(env, Append, "append"));
  cuda.Set("quantize", Napi::Function::New(env, Quantize, "quantize"));
  cuda.Set("download", Napi::Function::New(env, Download, "download"));
  cuda.Set("setLengths", Napi::Function::New(env, SetLengths, "setLengths"));
  cuda.Set("select", Napi::Function::New(env, Select, "select"));
  cuda.Set("score", Napi::Function::New(env, Score, "score"));
  cuda.Set("topK", Napi::Function::New(env, TopK, "topK"));
  cuda.Set("twoStage", Napi::Function::New(env, TwoStage, "twoStage"));
  cuda.Set("launchHandle", Napi::Function::New(env, maxsim_binding::LaunchHandle, "launchHandle"));
  cuda.Set("selectKernelInfo", SelectKernelInfo(env));
  Napi::Object internal = Napi::Object::New(env);  // benchmarks and tests only
  internal.Set("bench", Napi::Function::New(env, Bench, "bench"));
  internal.Set("hostTopK", Napi::Function::New(env, HostTopK, "hostTopK"));
  internal.Set("deviceTopK", Napi::Function::New(env, DeviceTopK, "deviceTopK"));
  internal.Set("selectLimitBreach", Napi::Function::New(env, SelectLimitBreach, "selectLimitBreach"));
  cuda.Set("internal", internal);
  exports.Set("cuda", cuda);
}
