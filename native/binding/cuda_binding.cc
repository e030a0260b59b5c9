// Node-API glue for the CUDA engine: status, device handles, device token sets, score / bench /
// memory. GPU work runs on the device's worker thread (runtime.h) in call order; its result comes
// back to the JS thread through one thread-safe function per environment and settles a promise.
// The JS thread never waits on the GPU.
#include <napi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "../cuda/device_select.h"
#include "../cuda/runtime.h"
#include "cuda_task.h"
#include "token_set.h"
#include "topk_heap.h"

namespace {

using maxsim_cuda::CudaError;
using maxsim_cuda::DeviceTokens;
using maxsim_cuda::LaunchSpec;
using maxsim_cuda::Runtime;

using maxsim_binding::ArgError;
using maxsim_binding::Describe;
using maxsim_binding::GetInteger;
using maxsim_binding::ParseLaunch;
using maxsim_binding::SetDTypeName;
using maxsim_binding::TopKHeap;
using Task = maxsim_binding::CudaTask;

// JS-thread state of one environment.
struct InstanceData {
  maxsim_binding::TaskChannel* channel = nullptr;
  Napi::FunctionReference device_ctor;
  Napi::FunctionReference tokens_ctor;
};

InstanceData& Instance(Napi::Env env) { return *env.GetInstanceData<InstanceData>(); }

Napi::Value Submit(Napi::Env env, Runtime* rt, std::unique_ptr<Task> task) {
  return Instance(env).channel->Submit(env, rt, std::move(task));
}

// ---------------------------------------------------------------------------------------------
// Argument helpers

// ---------------------------------------------------------------------------------------------
// Wrapped objects

class DeviceHandle : public Napi::ObjectWrap<DeviceHandle> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "CudaDeviceHandle", {InstanceAccessor<&DeviceHandle::Index>("index")});
  }
  explicit DeviceHandle(const Napi::CallbackInfo& info) : Napi::ObjectWrap<DeviceHandle>(info) {
    const int64_t index = GetInteger(info.Env(), info[0], "device", 0, 1 << 20);
    try {
      rt_ = Runtime::Get(static_cast<int>(index));
    } catch (const std::invalid_argument& e) {
      throw Napi::RangeError::New(info.Env(), e.what());
    } catch (const CudaError& e) {
      Napi::Error err = Napi::Error::New(info.Env(), e.what());
      err.Set("code", Napi::String::New(info.Env(), e.code()));
      throw err;
    }
  }
  Runtime* runtime() const { return rt_; }

 private:
  Napi::Value Index(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), rt_->props().index); }
  Runtime* rt_ = nullptr;
};

// A device token set. The native memory is shared with in-flight jobs (shared_ptr), so dispose()
// while a score is queued is safe: the memory goes back to the allocator when the last job ends.
class TokenSetHandle : public Napi::ObjectWrap<TokenSetHandle> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "CudaTokenSet",
                       {InstanceMethod<&TokenSetHandle::Dispose>("dispose"),
                        InstanceAccessor<&TokenSetHandle::Count>("count"),
                        InstanceAccessor<&TokenSetHandle::Tokens>("tokens"),
                        InstanceAccessor<&TokenSetHandle::Dim>("dim"),
                        InstanceAccessor<&TokenSetHandle::Dtype>("dtype"),
                        InstanceAccessor<&TokenSetHandle::MaxLength>("maxLength"),
                        InstanceAccessor<&TokenSetHandle::CapacityTokens>("capacityTokens"),
                        InstanceAccessor<&TokenSetHandle::CapacityItems>("capacityItems"),
                        InstanceAccessor<&TokenSetHandle::Bytes>("bytes"),
                        InstanceAccessor<&TokenSetHandle::Device>("device"),
                        InstanceAccessor<&TokenSetHandle::Disposed>("disposed")});
  }
  explicit TokenSetHandle(const Napi::CallbackInfo& info) : Napi::ObjectWrap<TokenSetHandle>(info) {}

  // The state as of the last completed upload/append (the JS thread never reads the live struct,
  // which the worker thread updates).
  struct Snapshot {
    int64_t count = 0, tokens = 0, capacity_tokens = 0, capacity_items = 0, dim = 0;
    int32_t max_length = 0;
    uint64_t bytes = 0;
    DType dtype = DType::Float32;
    bool e4m3 = false;  // int8-sized fp8 e4m3 codes ('fp8')
    int device = 0;
  };
  void Attach(std::shared_ptr<DeviceTokens> t) {
    tokens_ = std::move(t);
    Refresh();
  }
  void Refresh() {
    snap_.count = tokens_->count;
    snap_.tokens = tokens_->tokens;
    snap_.capacity_tokens = tokens_->capacity_tokens;
    snap_.capacity_items = tokens_->capacity_items;
    snap_.dim = tokens_->dim;
    snap_.max_length = tokens_->max_length;
    snap_.bytes = tokens_->bytes();
    snap_.dtype = tokens_->dtype;
    snap_.e4m3 = tokens_->e4m3;
    snap_.device = tokens_->runtime->props().index;
  }
  const Snapshot& snapshot() const { return snap_; }
  // The live set, or a TypeError naming the argument when disposed / never attached.
  std::shared_ptr<DeviceTokens> Live(Napi::Env env, const std::string& name) const {
    if (disposed_) throw ArgError(env, name, "a live device token set", "one that was disposed (dispose() was called)");
    if (!tokens_) throw ArgError(env, name, "a device token set made by upload() or alloc()", "an uninitialized handle");
    return tokens_;
  }

 private:
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    disposed_ = true;
    tokens_.reset();  // frees through the worker thread once no queued job holds it
    return info.Env().Undefined();
  }
  Napi::Value Count(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(snap_.count)); }
  Napi::Value Tokens(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(snap_.tokens)); }
  Napi::Value Dim(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(snap_.dim)); }
  Napi::Value Dtype(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), SetDTypeName(snap_.dtype, snap_.e4m3)); }
  Napi::Value MaxLength(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), snap_.max_length); }
  Napi::Value CapacityTokens(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(snap_.capacity_tokens));
  }
  Napi::Value CapacityItems(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(snap_.capacity_items));
  }
  Napi::Value Bytes(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(snap_.bytes)); }
  Napi::Value Device(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), snap_.device); }
  Napi::Value Disposed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), disposed_); }

  std::shared_ptr<DeviceTokens> tokens_;
  Snapshot snap_;
  bool disposed_ = false;
};

Runtime* UnwrapDevice(Napi::Env env, const Napi::Value& v) {
  InstanceData& data = Instance(env);
  if (!v.IsObject() || !v.As<Napi::Object>().InstanceOf(data.device_ctor.Value())) {
    throw ArgError(env, "device", "a device handle from cuda.open()", Describe(v));
  }
  return DeviceHandle::Unwrap(v.As<Napi::Object>())->runtime();
}

TokenSetHandle* AsTokenSet(Napi::Env env, const Napi::Value& v) {
  InstanceData& data = Instance(env);
  if (v.IsObject() && v.As<Napi::Object>().InstanceOf(data.tokens_ctor.Value())) return TokenSetHandle::Unwrap(v.As<Napi::Object>());
  return nullptr;
}

TokenSetHandle* UnwrapTokenSet(Napi::Env env, const Napi::Value& v, const std::string& name) {
  TokenSetHandle* h = AsTokenSet(env, v);
  if (!h) throw ArgError(env, name, "a device token set from cuda.upload() or cuda.alloc()", Describe(v));
  return h;
}

Napi::Object NewTokenSet(Napi::Env env, std::shared_ptr<DeviceTokens> tokens) {
  Napi::Object obj = Instance(env).tokens_ctor.New({});
  TokenSetHandle::Unwrap(obj)->Attach(std::move(tokens));
  return obj;
}

}  // namespace

// Device token sets for the other CUDA bindings (declared in cuda_task.h).
namespace maxsim_binding {

bool IsDeviceSet(Napi::Env env, const Napi::Value& v) { return AsTokenSet(env, v) != nullptr; }

DeviceSetArg GetDeviceSet(Napi::Env env, const Napi::Value& v, const std::string& name) {
  TokenSetHandle* h = UnwrapTokenSet(env, v, name);
  DeviceSetArg a;
  a.set = h->Live(env, name);
  const TokenSetHandle::Snapshot& s = h->snapshot();
  a.device = s.device;
  a.count = s.count;
  a.tokens = s.tokens;
  a.dim = s.dim;
  a.max_length = s.max_length;
  a.dtype = s.dtype;
  a.e4m3 = s.e4m3;
  a.view = a.set->parent != nullptr;
  return a;
}

Napi::Object WrapDeviceSet(Napi::Env env, std::shared_ptr<DeviceTokens> set) { return NewTokenSet(env, std::move(set)); }

}  // namespace maxsim_binding

namespace {

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
// status()

Napi::Value Status(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  std::string reason;
  const maxsim_cuda::Driver* d = maxsim_cuda::LoadDriver(&reason);
  if (!d) {
    o.Set("available", false);
    o.Set("reason", reason);
    return o;
  }
  o.Set("driverVersion", d->driver_version);
  // whether the TMA variants can run (the driver encodes tensor maps)
  o.Set("tensorMaps", d->cuTensorMapEncodeTiled != nullptr);
  try {
    maxsim_cuda::EnsureUsable();
    Napi::Array devices = Napi::Array::New(env, d->device_count);
    for (int i = 0; i < d->device_count; i++) {
      const maxsim_cuda::DeviceProps p = maxsim_cuda::QueryDeviceProps(i);
      Napi::Object dev = Napi::Object::New(env);
      dev.Set("index", p.index);
      dev.Set("name", p.name);
      Napi::Array cc = Napi::Array::New(env, 2);
      cc.Set(0u, p.cc_major);
      cc.Set(1u, p.cc_minor);
      dev.Set("computeCapability", cc);
      dev.Set("sms", p.sms);
      dev.Set("totalMemory", static_cast<double>(p.total_memory));
      dev.Set("l2Bytes", p.l2_bytes);
      dev.Set("smemOptin", p.smem_optin);
      // the other GPUs whose memory this one can read and write directly (NVLink or PCIe peer access)
      Napi::Array peers = Napi::Array::New(env);
      for (int j = 0; j < d->device_count && d->cuDeviceCanAccessPeer; j++) {
        cu::CUdevice a = 0, b = 0;
        int can = 0;
        if (j != i && d->cuDeviceGet(&a, i) == 0 && d->cuDeviceGet(&b, j) == 0 &&
            d->cuDeviceCanAccessPeer(&can, a, b) == 0 && can)
          peers.Set(peers.Length(), j);
      }
      dev.Set("peers", peers);
      devices.Set(static_cast<uint32_t>(i), dev);
    }
    o.Set("devices", devices);
  } catch (const CudaError& e) {
    o.Set("available", false);
    o.Set("reason", e.what());
    return o;
  }
  const maxsim_cuda::KernelFiles k = maxsim_cuda::FindKernelFiles();
  o.Set("kernelDir", k.dir);
  Napi::Array files = Napi::Array::New(env, k.fatbins.size());
  for (size_t i = 0; i < k.fatbins.size(); i++) files.Set(static_cast<uint32_t>(i), k.fatbins[i]);
  o.Set("kernelFiles", files);
  o.Set("available", k.unavailable.empty());
  if (!k.unavailable.empty()) o.Set("reason", k.unavailable);
  return o;
}

// ---------------------------------------------------------------------------------------------
// open(device), info(device), memory(device), emptyCache(device)

Napi::Value Open(const Napi::CallbackInfo& info) {
  return Instance(info.Env()).device_ctor.New({info.Length() > 0 ? info[0] : Napi::Number::New(info.Env(), 0)});
}

class InfoTask : public Task {
 public:
  InfoTask(Napi::Env env, Runtime* rt) : Task(env), rt_(rt) {}
  void Run() override {
    rt_->EnsureReady();
    memory_ = rt_->Memory();
    kernels_ = rt_->KernelNames();
    module_errors_ = rt_->module_errors();
    kernel_dir_ = maxsim_cuda::FindKernelFiles().dir;
  }
  Napi::Value Result(Napi::Env env) override {
    const maxsim_cuda::DeviceProps& p = rt_->props();
    Napi::Object o = Napi::Object::New(env);
    o.Set("index", p.index);
    o.Set("name", p.name);
    Napi::Array cc = Napi::Array::New(env, 2);
    cc.Set(0u, p.cc_major);
    cc.Set(1u, p.cc_minor);
    o.Set("computeCapability", cc);
    o.Set("sms", p.sms);
    o.Set("totalMemory", static_cast<double>(memory_.total));
    o.Set("freeMemory", static_cast<double>(memory_.free));
    o.Set("l2Bytes", p.l2_bytes);
    o.Set("smemOptin", p.smem_optin);
    o.Set("maxThreadsPerBlock", p.max_threads_per_block);
    Napi::Array names = Napi::Array::New(env, kernels_.size());
    for (size_t i = 0; i < kernels_.size(); i++) names.Set(static_cast<uint32_t>(i), kernels_[i]);
    o.Set("kernels", names);
    Napi::Array errors = Napi::Array::New(env, module_errors_.size());
    for (size_t i = 0; i < module_errors_.size(); i++) errors.Set(static_cast<uint32_t>(i), module_errors_[i]);
    o.Set("moduleErrors", errors);
    o.Set("kernelDir", kernel_dir_);
    // TMA variants need the driver to encode tensor maps (CUDA 12.0+ drivers)
    o.Set("tensorMaps", maxsim_cuda::Api().cuTensorMapEncodeTiled != nullptr);
    return o;
  }

 private:
  Runtime* rt_;
  maxsim_cuda::MemoryInfo memory_;
  std::vector<std::string> kernels_, module_errors_;
  std::string kernel_dir_;
};

Napi::Value Info(const Napi::CallbackInfo& info) {
  Runtime* rt = UnwrapDevice(info.Env(), info[0]);
  return Submit(info.Env(), rt, std::make_unique<InfoTask>(info.Env(), rt));
}

class MemoryTask : public Task {
 public:
  MemoryTask(Napi::Env env, Runtime* rt, bool empty_cache) : Task(env), rt_(rt), empty_cache_(empty_cache) {}
  void Run() override {
    rt_->EnsureReady();
    if (empty_cache_) rt_->allocator().ReleaseCached();
    m_ = rt_->Memory();
  }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object o = Napi::Object::New(env);
    o.Set("inUse", static_cast<double>(m_.alloc.in_use));
    o.Set("cached", static_cast<double>(m_.alloc.cached));
    o.Set("peak", static_cast<double>(m_.alloc.peak));
    o.Set("total", static_cast<double>(m_.total));
    o.Set("free", static_cast<double>(m_.free));
    return o;
  }

 private:
  Runtime* rt_;
  bool empty_cache_;
  maxsim_cuda::MemoryInfo m_;
};

Napi::Value Memory(const Napi::CallbackInfo& info) {
  Runtime* rt = UnwrapDevice(info.Env(), info[0]);
  return Submit(info.Env(), rt, std::make_unique<MemoryTask>(info.Env(), rt, false));
}

Napi::Value EmptyCache(const Napi::CallbackInfo& info) {
  Runtime* rt = UnwrapDevice(info.Env(), info[0]);
  return Submit(info.Env(), rt, std::make_unique<MemoryTask>(info.Env(), rt, true));
}

// ---------------------------------------------------------------------------------------------
// upload(device, batch), alloc(device, spec), append(tokenSet, batch)

class UploadTask : public Task {
 public:
  UploadTask(Napi::Env env, Runtime* rt) : Task(env), rt_(rt) {}
  TokenSet host;
  void Run() override {
    rt_->EnsureReady();
    int64_t tokens = 0;
    for (int64_t i = 0; i < host.count; i++) tokens += host.lengths[i];
    result_ = rt_->AllocTokens(host.dtype, host.dim, tokens, host.count);
    rt_->Append(*result_, host);
  }
  Napi::Value Result(Napi::Env env) override { return NewTokenSet(env, std::move(result_)); }

 private:
  Runtime* rt_;
  std::shared_ptr<DeviceTokens> result_;
};

Napi::Value Upload(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Runtime* rt = UnwrapDevice(env, info[0]);
  auto task = std::make_unique<UploadTask>(env, rt);
  task->host = ParseHostBatch(env, info[1], "batch", task.get());
  return Submit(env, rt, std::move(task));
}

class AllocTask : public Task {
 public:
  AllocTask(Napi::Env env, Runtime* rt, DType dtype, int64_t dim, int64_t tokens, int64_t items)
      : Task(env), rt_(rt), dtype_(dtype), dim_(dim), tokens_(tokens), items_(items) {}
  void Run() override {
    rt_->EnsureReady();
    result_ = rt_->AllocTokens(dtype_, dim_, tokens_, items_);
  }
  Napi::Value Result(Napi::Env env) override { return NewTokenSet(env, std::move(result_)); }

 private:
  Runtime* rt_;
  DType dtype_;
  int64_t dim_, tokens_, items_;
  std::shared_ptr<DeviceTokens> result_;
};

Napi::Value Alloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Runtime* rt = UnwrapDevice(env, info[0]);
  if (!info[1].IsObject()) throw ArgError(env, "spec", "an object { dtype, dim, tokens, items }", Describe(info[1]));
  Napi::Object spec = info[1].As<Napi::Object>();
  const DType dtype = ParseDType(env, "spec", spec.Get("dtype"));
  const int64_t dim = GetInteger(env, spec.Get("dim"), "spec.dim", 1, 1 << 20);
  const int64_t tokens = GetInteger(env, spec.Get("tokens"), "spec.tokens", 0, int64_t(1) << 50);
  const int64_t items = GetInteger(env, spec.Get("items"), "spec.items", 0, 2147483646);
  return Submit(env, rt, std::make_unique<AllocTask>(env, rt, dtype, dim, tokens, items));
}

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
    TokenSetHandle* h = TokenSetHandle::Unwrap(handle_.Value());
    h->Refresh();
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

class QuantizeTask : public Task {
 public:
  QuantizeTask(Napi::Env env, Runtime* rt, std::shared_ptr<DeviceTokens> src, bool e4m3, bool per_document)
      : Task(env), rt_(rt), src_(std::move(src)), e4m3_(e4m3), per_document_(per_document) {}
  void Run() override {
    rt_->EnsureReady();
    if (src_->parent) {
      throw std::invalid_argument("Expected a corpus made by upload() or alloc() for quantize() but received a view (select()); quantize the corpus, then select");
    }
    result_ = rt_->Quantize8(*src_, e4m3_, per_document_);
  }
  Napi::Value Result(Napi::Env env) override { return NewTokenSet(env, std::move(result_)); }

 private:
  Runtime* rt_;
  std::shared_ptr<DeviceTokens> src_, result_;
  bool e4m3_, per_document_;
};

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
  return Submit(env, src->runtime, std::make_unique<QuantizeTask>(env, src->runtime, src, mode == "fp8", scales == "document"));
}

// ---------------------------------------------------------------------------------------------
// select(tokenSet, indices): a view of some items (their own spans, the same token memory)

class SelectTask : public Task {
 public:
  SelectTask(Napi::Env env, Runtime* rt, std::shared_ptr<DeviceTokens> src, std::vector<int64_t> indices)
      : Task(env), rt_(rt), src_(std::move(src)), indices_(std::move(indices)) {}
  void Run() override {
    rt_->EnsureReady();
    result_ = rt_->Select(src_, indices_);
    rt_->Synchronize();  // a job leaves the stream idle (runtime.h)
  }
  Napi::Value Result(Napi::Env env) override { return NewTokenSet(env, std::move(result_)); }

 private:
  Runtime* rt_;
  std::shared_ptr<DeviceTokens> src_, result_;
  std::vector<int64_t> indices_;
};

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
  return Submit(env, src->runtime, std::make_unique<SelectTask>(env, src->runtime, src, std::move(indices)));
}

// ---------------------------------------------------------------------------------------------
// download(tokenSet): the set's items back on the host, as a ragged batch
// { dtype, dim, count, data, offsets (Float64Array [count + 1]), lengths, scales? }

class DownloadTask : public Task {
 public:
  DownloadTask(Napi::Env env, Runtime* rt, std::shared_ptr<DeviceTokens> src) : Task(env), rt_(rt), src_(std::move(src)) {}
  void Run() override {
    rt_->EnsureReady();
    const DeviceTokens& t = *src_;
    if (t.parent) {
      throw std::invalid_argument("Expected a corpus made by upload(), alloc() or quantize() for download() but received a view (select())");
    }
    dtype_ = t.dtype;
    e4m3_ = t.e4m3;
    dim_ = t.dim;
    data_.resize(static_cast<size_t>(t.tokens * t.dim * DTypeSize(t.dtype)));
    starts_.resize(static_cast<size_t>(t.count));
    lengths_.resize(static_cast<size_t>(t.count));
    if (!data_.empty()) rt_->Download(data_.data(), t.data, data_.size());
    if (t.count > 0) {
      rt_->Download(starts_.data(), t.starts, starts_.size() * sizeof(int64_t));
      rt_->Download(lengths_.data(), t.lengths, lengths_.size() * sizeof(int32_t));
    }
    if (t.dtype == DType::Int8) {
      scales_.resize(static_cast<size_t>(t.tokens));
      if (!scales_.empty()) rt_->Download(scales_.data(), t.scales, scales_.size() * sizeof(float));
    }
  }
  Napi::Value Result(Napi::Env env) override {
    const size_t tokens = dim_ > 0 ? data_.size() / (static_cast<size_t>(dim_) * DTypeSize(dtype_)) : 0;
    Napi::ArrayBuffer buf = Napi::ArrayBuffer::New(env, data_.size());
    if (!data_.empty()) std::memcpy(buf.Data(), data_.data(), data_.size());
    Napi::Value data;
    if (dtype_ == DType::Float32) data = Napi::Float32Array::New(env, tokens * dim_, buf, 0);
    else if (e4m3_) data = Napi::Uint8Array::New(env, tokens * dim_, buf, 0);
    else if (dtype_ == DType::Int8) data = Napi::Int8Array::New(env, tokens * dim_, buf, 0);
    else data = Napi::Uint16Array::New(env, tokens * dim_, buf, 0);
    Napi::Float64Array offsets = Napi::Float64Array::New(env, starts_.size() + 1);
    Napi::Int32Array lengths = Napi::Int32Array::New(env, lengths_.size());
    offsets[0] = 0;
    for (size_t i = 0; i < starts_.size(); i++) {
      // items are packed in order on the device, so starts[i] + lengths[i] == starts[i + 1]
      offsets[i + 1] = static_cast<double>(starts_[i] + lengths_[i]);
      lengths[i] = lengths_[i];
    }
    Napi::Object o = Napi::Object::New(env);
    o.Set("dtype", SetDTypeName(dtype_, e4m3_));
    o.Set("dim", static_cast<double>(dim_));
    o.Set("count", static_cast<double>(starts_.size()));
    o.Set("data", data);
    o.Set("offsets", offsets);
    o.Set("lengths", lengths);
    if (dtype_ == DType::Int8) {
      Napi::Float32Array sc = Napi::Float32Array::New(env, scales_.size());
      if (!scales_.empty()) std::memcpy(sc.Data(), scales_.data(), scales_.size() * sizeof(float));
      o.Set("scales", sc);
    }
    return o;
  }

 private:
  Runtime* rt_;
  std::shared_ptr<DeviceTokens> src_;
  DType dtype_ = DType::Float32;
  bool e4m3_ = false;
  int64_t dim_ = 0;
  std::vector<uint8_t> data_;
  std::vector<int64_t> starts_;
  std::vector<int32_t> lengths_;
  std::vector<float> scales_;
};

Napi::Value Download(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  TokenSetHandle* h = UnwrapTokenSet(env, info[0], "tokenSet");
  std::shared_ptr<DeviceTokens> src = h->Live(env, "tokenSet");
  return Submit(env, src->runtime, std::make_unique<DownloadTask>(env, src->runtime, src));
}

// ---------------------------------------------------------------------------------------------
// score(device, queries, docs, launch) and bench(device, queries, docs, launch, options)

// Queries are either a device token set or a host batch uploaded by the job itself.
struct QuerySource {
  std::shared_ptr<DeviceTokens> device;
  TokenSet host;
  bool is_host = false;
  DType dtype = DType::Float32;
  bool e4m3 = false;
  int64_t dim = 0;
  int64_t count = 0;  // as of the call (device sets: the snapshot)
  // Host float32 queries for a float16 / bfloat16 corpus, converted on the device, and host float
  // queries for an int8 corpus, quantized there (dtype is the corpus's then; ConvertHostQueriesFor).
  bool cast_from_f32 = false;
  bool quantize_int8 = false;
};

QuerySource ParseQueries(Napi::Env env, Runtime* rt, const Napi::Value& v, Task* task, const std::string& name = "queries") {
  QuerySource q;
  if (TokenSetHandle* h = AsTokenSet(env, v)) {
    CheckDevice(env, h, rt, name);
    q.device = h->Live(env, name);
    q.dtype = h->snapshot().dtype;
    q.e4m3 = h->snapshot().e4m3;
    q.dim = h->snapshot().dim;
    q.count = h->snapshot().count;
  } else {
    q.host = ParseHostBatch(env, v, name, task);
    q.count = q.host.count;
    q.is_host = true;
    q.dtype = q.host.dtype;
    q.dim = q.host.dim;
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

// Host queries are converted on the device by the job, sparing the host a pass over every value:
// float32 ones against float16 / bfloat16 documents (Runtime::CastSet: the host encodeFloats' bits),
// float ones against int8 documents (Runtime::Quantize8: per token, the host quantize()'s bytes).
// Against fp8 documents ResolveQueries quantizes float queries anyway.
void ConvertHostQueriesFor(Napi::Env env, QuerySource& q, const Napi::Value& docs) {
  TokenSetHandle* h = AsTokenSet(env, docs);
  if (!h || !q.is_host || q.dtype == DType::Int8) return;
  const auto& s = h->snapshot();
  if (s.e4m3) return;
  if (s.dtype == DType::Int8) {
    q.quantize_int8 = true;
    q.dtype = DType::Int8;
  } else if (q.dtype == DType::Float32 && (s.dtype == DType::Float16 || s.dtype == DType::BFloat16)) {
    q.cast_from_f32 = true;
    q.dtype = s.dtype;
  }
}

// Synchronizes when the job's scope ends, whatever way it ends: jobs that leave copies in flight
// (Append without synchronize, Select) still leave the stream idle (runtime.h).
class IdleAtExit {
 public:
  explicit IdleAtExit(Runtime* rt) : rt_(rt) {}
  ~IdleAtExit() {
    try {
      rt_->Synchronize();
    } catch (...) {  // the job's own error (if any) is the one to report
    }
  }
  IdleAtExit(const IdleAtExit&) = delete;
  IdleAtExit& operator=(const IdleAtExit&) = delete;

 private:
  Runtime* rt_;
};

// The queries on the device; against fp8 documents, quantized to e4m3 there (worker thread). Host
// queries are uploaded without a synchronize of their own: the caller holds an IdleAtExit.
std::shared_ptr<DeviceTokens> ResolveQueries(Runtime* rt, QuerySource& q, const DeviceTokens& docs) {
  std::shared_ptr<DeviceTokens> t = q.device;
  if (q.is_host) {
    int64_t tokens = 0;
    for (int64_t i = 0; i < q.host.count; i++) tokens += q.host.lengths[i];
    t = rt->AllocTokens(q.host.dtype, q.host.dim, tokens, q.host.count);
    rt->Append(*t, q.host, /*synchronize=*/false);
    if (q.cast_from_f32) t = rt->CastSet(*t, q.dtype);
    if (q.quantize_int8) t = rt->Quantize8(*t, /*e4m3=*/false);
  }
  return docs.e4m3 ? rt->Quantize8(*t, true) : t;
}

class ScoreTask : public Task {
 public:
  ScoreTask(Napi::Env env, Runtime* rt) : Task(env), rt_(rt) {}
  QuerySource queries;
  std::shared_ptr<DeviceTokens> docs;
  LaunchSpec launch;
  void Run() override {
    rt_->EnsureReady();
    IdleAtExit idle(rt_);
    rt_->ValidateLaunch(launch);
    std::shared_ptr<DeviceTokens> q = ResolveQueries(rt_, queries, *docs);
    const uint64_t n = static_cast<uint64_t>(q->count) * static_cast<uint64_t>(docs->count);
    scores_.resize(n);
    if (n > 0) {
      maxsim_cuda::ScopedBlock out(rt_->allocator(), n * sizeof(float));
      rt_->FillNaN(out.get(), n);
      rt_->Launch(*q, *docs, launch, out.get());
      rt_->Download(scores_.data(), out.get(), n * sizeof(float));
    }
  }
  Napi::Value Result(Napi::Env env) override {
    Napi::Float32Array a = Napi::Float32Array::New(env, scores_.size());
    if (!scores_.empty()) std::memcpy(a.Data(), scores_.data(), scores_.size() * sizeof(float));
    return a;
  }

 private:
  Runtime* rt_;
  std::vector<float> scores_;
};

Napi::Value Score(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Runtime* rt = UnwrapDevice(env, info[0]);
  auto task = std::make_unique<ScoreTask>(env, rt);
  task->queries = ParseQueries(env, rt, info[1], task.get());
  ConvertHostQueriesFor(env, task->queries, info[2]);
  task->docs = ParseDocs(env, rt, info[2], task->queries, "docs");
  task->launch = ParseLaunch(env, info[3], task->docs->dtype, task->docs->e4m3);
  return Submit(env, rt, std::move(task));
}

// Times `iters` launches with device events (after `warmup` untimed ones, then untimed ones for about
// `warmupMs` of device time). `rotate` adds more doc sets that the launches cycle through, so that
// consecutive launches do not hit a warm L2. On the H200 a heavy kernel's clock depends on how long
// the load has run (the power controller: bench/NOTES.md, 'The power cap'), so a second of warm-up measures
// the sustained regime, a few launches the burst one.
class BenchTask : public Task {
 public:
  BenchTask(Napi::Env env, Runtime* rt) : Task(env), rt_(rt) {}
  QuerySource queries;
  std::vector<std::shared_ptr<DeviceTokens>> docs;
  LaunchSpec launch;
  int64_t warmup = 3, iters = 10;
  double warmup_ms = 0;
  void Run() override {
    rt_->EnsureReady();
    IdleAtExit idle(rt_);
    rt_->ValidateLaunch(launch);
    const maxsim_cuda::Driver& d = maxsim_cuda::Api();
    std::shared_ptr<DeviceTokens> q = ResolveQueries(rt_, queries, *docs[0]);
    int64_t max_docs = 1;
    for (const auto& s : docs) max_docs = std::max(max_docs, s->count);
    const uint64_t n = static_cast<uint64_t>(std::max<int64_t>(q->count, 1)) * static_cast<uint64_t>(max_docs);
    maxsim_cuda::ScopedBlock out(rt_->allocator(), n * sizeof(float));
    rt_->FillNaN(out.get(), n);
    rt_->allocator().ResetPeak();
    struct Events {
      std::vector<cu::CUevent> list;
      ~Events() {
        for (cu::CUevent e : list) maxsim_cuda::Api().cuEventDestroy(e);
      }
    } events;
    events.list.reserve(static_cast<size_t>(2 * iters));
    for (int64_t i = 0; i < 2 * iters; i++) {
      cu::CUevent e = nullptr;
      maxsim_cuda::Check(d.cuEventCreate(&e, cu::CU_EVENT_DEFAULT), "cuEventCreate");
      events.list.push_back(e);
    }
    const size_t nd = docs.size();
    int64_t at = 0;  // launches so far (the doc set rotates with it)
    for (; at < warmup; at++) rt_->Launch(*q, *docs[static_cast<size_t>(at) % nd], launch, out.get());
    if (warmup_ms > 0 && iters > 0) {
      // one launch timed to size the rest; the timed launches then follow them with no idle gap
      maxsim_cuda::Check(d.cuEventRecord(events.list[0], rt_->stream()), "cuEventRecord");
      rt_->Launch(*q, *docs[static_cast<size_t>(at++) % nd], launch, out.get());
      maxsim_cuda::Check(d.cuEventRecord(events.list[1], rt_->stream()), "cuEventRecord");
      rt_->Synchronize();
      float one = 0;
      maxsim_cuda::Check(d.cuEventElapsedTime(&one, events.list[0], events.list[1]), "cuEventElapsedTime");
      const int64_t more = std::min<int64_t>(1000000, static_cast<int64_t>(std::ceil(warmup_ms / std::max(one, 1e-3f))));
      for (int64_t i = 0; i < more; i++, at++) rt_->Launch(*q, *docs[static_cast<size_t>(at) % nd], launch, out.get());
    }
    for (int64_t i = 0; i < iters; i++) {
      maxsim_cuda::Check(d.cuEventRecord(events.list[2 * i], rt_->stream()), "cuEventRecord");
      rt_->Launch(*q, *docs[static_cast<size_t>(at + i) % nd], launch, out.get());
      maxsim_cuda::Check(d.cuEventRecord(events.list[2 * i + 1], rt_->stream()), "cuEventRecord");
    }
    rt_->Synchronize();
    ms_.resize(static_cast<size_t>(iters));
    for (int64_t i = 0; i < iters; i++) {
      maxsim_cuda::Check(d.cuEventElapsedTime(&ms_[i], events.list[2 * i], events.list[2 * i + 1]), "cuEventElapsedTime");
    }
    peak_ = rt_->allocator().stats().peak;
  }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object o = Napi::Object::New(env);
    Napi::Array ms = Napi::Array::New(env, ms_.size());
    for (size_t i = 0; i < ms_.size(); i++) ms.Set(static_cast<uint32_t>(i), Napi::Number::New(env, ms_[i]));
    o.Set("ms", ms);
    o.Set("peakBytes", static_cast<double>(peak_));
    return o;
  }

 private:
  Runtime* rt_;
  std::vector<float> ms_;
  uint64_t peak_ = 0;
};

Napi::Value Bench(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Runtime* rt = UnwrapDevice(env, info[0]);
  auto task = std::make_unique<BenchTask>(env, rt);
  task->queries = ParseQueries(env, rt, info[1], task.get());
  task->docs.push_back(ParseDocs(env, rt, info[2], task->queries, "docs"));
  task->launch = ParseLaunch(env, info[3], task->docs[0]->dtype, task->docs[0]->e4m3);
  if (info.Length() > 4 && !info[4].IsUndefined()) {
    if (!info[4].IsObject()) throw ArgError(env, "options", "an object { warmup, warmupMs, iters, rotate }", Describe(info[4]));
    Napi::Object o = info[4].As<Napi::Object>();
    if (!o.Get("warmup").IsUndefined()) task->warmup = GetInteger(env, o.Get("warmup"), "options.warmup", 0, 1000000);
    if (!o.Get("iters").IsUndefined()) task->iters = GetInteger(env, o.Get("iters"), "options.iters", 1, 1000000);
    if (!o.Get("warmupMs").IsUndefined()) {
      Napi::Value w = o.Get("warmupMs");
      if (!w.IsNumber() || !(w.As<Napi::Number>().DoubleValue() >= 0) || w.As<Napi::Number>().DoubleValue() > 600000) {
        throw ArgError(env, "options.warmupMs", "a number of milliseconds in [0, 600000]", Describe(w));
      }
      task->warmup_ms = w.As<Napi::Number>().DoubleValue();
    }
    Napi::Value rotate = o.Get("rotate");
    if (!rotate.IsUndefined()) {
      if (!rotate.IsArray()) throw ArgError(env, "options.rotate", "an array of device token sets", Describe(rotate));
      Napi::Array a = rotate.As<Napi::Array>();
      for (uint32_t i = 0; i < a.Length(); i++) {
        const std::string name = "options.rotate[" + std::to_string(i) + "]";
        task->docs.push_back(ParseDocs(env, rt, a.Get(i), task->queries, name));
        const DeviceTokens& r = *task->docs.back();
        if (r.dtype != task->docs[0]->dtype || r.e4m3 != task->docs[0]->e4m3) {
          throw ArgError(env, name, std::string("a token set of dtype '") + SetDTypeName(task->docs[0]->dtype, task->docs[0]->e4m3) + "' (as docs)",
                         std::string("'") + SetDTypeName(r.dtype, r.e4m3) + "'");
        }
      }
    }
  }
  return Submit(env, rt, std::move(task));
}

// ---------------------------------------------------------------------------------------------
// topK(device, queries, docs, launch, k) and twoStage(...): the scores stay on the worker thread,
// which reads them back into pinned memory and keeps a heap per query (topk_heap.h). Result:
// { n, scores: Float32Array [rows * n], indices: Int32Array [rows * n] }, row r's heap (the layout
// topKOfRow builds) at [r * n, (r + 1) * n); TypeScript ranks it with sortedHits().

// Visits the [rows, cols] float matrix at `scores` in read-back chunks: fn(row, first column, column
// count, values), columns of each row in ascending order.
template <typename Fn>
void ForEachChunk(Runtime* rt, cu::CUdeviceptr scores, int64_t rows, int64_t cols, Fn fn) {
  const int64_t total = rows * cols;
  const int64_t chunk = static_cast<int64_t>(Runtime::kReadBackBytes / sizeof(float));
  for (int64_t at = 0; at < total; at += chunk) {
    const int64_t len = std::min(chunk, total - at);
    const auto* p = static_cast<const float*>(rt->ReadBack(scores + static_cast<uint64_t>(at) * sizeof(float), len * sizeof(float)));
    for (int64_t e = at; e < at + len;) {
      const int64_t r = e / cols, c = e % cols;
      const int64_t take = std::min(cols - c, at + len - e);
      fn(r, c, take, p + (e - at));
      e += take;
    }
  }
}

// The top-n heap of every row of a device score matrix into scores / indices [rows * n].
void SelectRows(Runtime* rt, cu::CUdeviceptr matrix, int64_t rows, int64_t cols, int64_t n, float* scores, int32_t* indices) {
  std::vector<TopKHeap> heaps;
  heaps.reserve(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; r++) heaps.emplace_back(scores + r * n, indices + r * n, n);
  ForEachChunk(rt, matrix, rows, cols, [&](int64_t r, int64_t c, int64_t len, const float* p) { heaps[r].Scan(p, len, c); });
}

// The device selection's read-back block: [rows * keep] scores, [rows * keep] int32 columns, [rows]
// int32 NaN flags, read back in one copy.
struct KeptEntries {
  KeptEntries(Runtime* rt, int64_t rows, int64_t keep)
      : rows(rows), keep(keep), block(rt->allocator(), static_cast<uint64_t>(rows * keep * 8 + rows * 4)) {}
  cu::CUdeviceptr scores() const { return block.get(); }
  cu::CUdeviceptr columns() const { return block.get() + static_cast<uint64_t>(rows * keep) * 4; }
  cu::CUdeviceptr nan_rows() const { return block.get() + static_cast<uint64_t>(rows * keep) * 8; }
  // The selection of `keep` per row of the [rows, cols] matrix at `matrix`, into this block.
  maxsim_cuda::DeviceSelection SelectionOf(cu::CUdeviceptr matrix, int64_t cols) const {
    maxsim_cuda::DeviceSelection s;
    s.scores = matrix;
    s.rows = rows;
    s.cols = cols;
    s.keep = keep;
    s.columns = columns();
    s.nan_rows = nan_rows();
    return s;
  }
  // Reads the block back (synchronizes): host scores / columns / flags.
  void Fetch(Runtime* rt) {
    const auto* p = static_cast<const uint8_t*>(rt->ReadBack(block.get(), static_cast<uint64_t>(rows * keep * 8 + rows * 4)));
    host_scores.resize(static_cast<size_t>(rows * keep));
    host_columns.resize(host_scores.size());
    host_nan.resize(static_cast<size_t>(rows));
    std::memcpy(host_scores.data(), p, host_scores.size() * 4);
    std::memcpy(host_columns.data(), p + rows * keep * 4, host_columns.size() * 4);
    std::memcpy(host_nan.data(), p + rows * keep * 8, host_nan.size() * 4);
  }
  bool AnyNaN() const { return std::any_of(host_nan.begin(), host_nan.end(), [](int32_t f) { return f != 0; }); }
  int64_t rows, keep;
  maxsim_cuda::ScopedBlock block;
  std::vector<float> host_scores;
  std::vector<int32_t> host_columns, host_nan;
};

// SelectRows with the selection on the device where it takes the shape: only the n kept entries of
// each row come back (in ascending column order, which sortedHits ranks as it ranks a heap). A row
// holding a NaN score goes through the host heap instead, from the matrix still on the device, so
// every row gets the host's result. Returns false, having done nothing, where the device selection
// does not take the shape.
bool SelectRowsOnDevice(Runtime* rt, cu::CUdeviceptr matrix, int64_t rows, int64_t cols, int64_t n, float* scores,
                        int32_t* indices) {
  if (!maxsim_cuda::DeviceSelectTakes(*rt, rows, cols, n)) return false;
  KeptEntries kept(rt, rows, n);
  maxsim_cuda::DeviceSelection s = kept.SelectionOf(matrix, cols);
  s.picked_scores = kept.scores();
  maxsim_cuda::SelectOnDevice(*rt, s);
  kept.Fetch(rt);
  std::memcpy(scores, kept.host_scores.data(), kept.host_scores.size() * 4);
  std::memcpy(indices, kept.host_columns.data(), kept.host_columns.size() * 4);
  for (int64_t r = 0; r < rows; r++) {
    if (kept.host_nan[r] != 0) {
      SelectRows(rt, matrix + static_cast<uint64_t>(r * cols) * sizeof(float), 1, cols, n, scores + r * n, indices + r * n);
    }
  }
  return true;
}

Napi::Object HeapsObject(Napi::Env env, int64_t n, const std::vector<float>& scores, const std::vector<int32_t>& indices) {
  Napi::Object o = Napi::Object::New(env);
  Napi::Float32Array s = Napi::Float32Array::New(env, scores.size());
  Napi::Int32Array i = Napi::Int32Array::New(env, indices.size());
  if (!scores.empty()) std::memcpy(s.Data(), scores.data(), scores.size() * sizeof(float));
  if (!indices.empty()) std::memcpy(i.Data(), indices.data(), indices.size() * sizeof(int32_t));
  o.Set("n", static_cast<double>(n));
  o.Set("scores", s);
  o.Set("indices", i);
  return o;
}

// MAXSIM_JOB_PHASES=1 (benchmarks only): the top-K jobs synchronize at each phase boundary and print
// the wall time of every phase to stderr, to find where a job's fixed cost goes.
class JobPhases {
 public:
  JobPhases(Runtime* rt, const char* job) : rt_(rt), job_(job), on_(std::getenv("MAXSIM_JOB_PHASES") != nullptr) {}
  void Mark(const char* phase) {
    if (!on_) return;
    rt_->Synchronize();
    const auto now = std::chrono::steady_clock::now();
    line_ += std::string(" ") + phase + " " + std::to_string(std::chrono::duration<double, std::milli>(now - last_).count());
    last_ = now;
  }
  ~JobPhases() {
    if (on_) std::fprintf(stderr, "%s phases ms:%s\n", job_, line_.c_str());
  }

 private:
  Runtime* rt_;
  const char* job_;
  bool on_;
  std::string line_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// A job that returns top-K heaps: n_ per row in scores_ / indices_ (HeapsObject's layout).
class HeapsTask : public Task {
 public:
  HeapsTask(Napi::Env env, Runtime* rt) : Task(env), rt_(rt) {}
  Napi::Value Result(Napi::Env env) override { return HeapsObject(env, n_, scores_, indices_); }

 protected:
  Runtime* rt_;
  int64_t n_ = 0;
  std::vector<float> scores_;
  std::vector<int32_t> indices_;
};

class TopKTask : public HeapsTask {
 public:
  TopKTask(Napi::Env env, Runtime* rt) : HeapsTask(env, rt) {}
  QuerySource queries;
  std::shared_ptr<DeviceTokens> docs;
  LaunchSpec launch;
  int64_t k = 0;
  void Run() override {
    rt_->EnsureReady();
    IdleAtExit idle(rt_);
    rt_->ValidateLaunch(launch);
    JobPhases phases(rt_, "topK");
    std::shared_ptr<DeviceTokens> q = ResolveQueries(rt_, queries, *docs);
    phases.Mark("queries");
    const int64_t rows = q->count, cols = docs->count;
    n_ = std::min(k, cols);
    scores_.resize(static_cast<size_t>(rows * n_));
    indices_.resize(scores_.size());
    if (rows == 0 || n_ == 0) return;
    maxsim_cuda::ScopedBlock out(rt_->allocator(), static_cast<uint64_t>(rows * cols) * sizeof(float));
    rt_->FillNaN(out.get(), static_cast<uint64_t>(rows * cols));
    rt_->Launch(*q, *docs, launch, out.get());
    phases.Mark("scan");
    if (!SelectRowsOnDevice(rt_, out.get(), rows, cols, n_, scores_.data(), indices_.data()))
      SelectRows(rt_, out.get(), rows, cols, n_, scores_.data(), indices_.data());
    phases.Mark("select");
  }
};

Napi::Value TopK(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Runtime* rt = UnwrapDevice(env, info[0]);
  auto task = std::make_unique<TopKTask>(env, rt);
  task->queries = ParseQueries(env, rt, info[1], task.get());
  ConvertHostQueriesFor(env, task->queries, info[2]);
  task->docs = ParseDocs(env, rt, info[2], task->queries, "docs");
  task->launch = ParseLaunch(env, info[3], task->docs->dtype, task->docs->e4m3);
  task->k = GetInteger(env, info[4], "k", 0, 2147483647);
  return Submit(env, rt, std::move(task));
}

// Two-stage top-K in one job: scan every document of scanDocs, keep the `candidates` best per query,
// score the queries against a view of exactDocs holding the candidates, and keep the k best candidates
// of each query by that exact score. Both launches come from the TypeScript dispatcher (the exact one
// planned for min(count, rows * candidates) documents). Candidates are visited in ascending document
// index, so exact ties go to the lower index, as everywhere.
// Where the device selection takes the shape, nothing comes back between the stages: the candidates
// are selected on the GPU, which also writes the view's spans (each query's candidates in turn, or the
// whole of exactDocs when that is no more), and only each query's own exact scores come back. Otherwise
// (or for a query whose scan holds a NaN) the host selects, the view holds the union of the candidates,
// and its spans come from the host mirror.
class TwoStageTask : public HeapsTask {
 public:
  TwoStageTask(Napi::Env env, Runtime* rt) : HeapsTask(env, rt) {}
  QuerySource scan_queries, exact_queries;
  std::shared_ptr<DeviceTokens> scan_docs, exact_docs;
  LaunchSpec scan_launch, exact_launch;
  int64_t k = 0, candidates = 0, count = 0;
  void Run() override {
    rt_->EnsureReady();
    IdleAtExit idle(rt_);
    rt_->ValidateLaunch(scan_launch);
    rt_->ValidateLaunch(exact_launch);
    if (scan_docs->count != count || exact_docs->count != count) {
      throw std::invalid_argument("Expected " + std::to_string(count) +
                                  " documents in scanDocs and exactDocs (the count the launches were planned for) but received " +
                                  std::to_string(scan_docs->count) + " and " + std::to_string(exact_docs->count));
    }
    JobPhases phases(rt_, "twoStage");
    std::shared_ptr<DeviceTokens> q = ResolveQueries(rt_, scan_queries, *scan_docs);
    // Both query sets go up before the scan, so the exact ones are not on the path after it.
    std::shared_ptr<DeviceTokens> qe = ResolveQueries(rt_, exact_queries, *exact_docs);
    phases.Mark("queries");
    const int64_t rows = q->count;
    const int64_t keep = std::min(candidates, count);
    n_ = std::min(k, keep);
    scores_.resize(static_cast<size_t>(rows * n_));
    indices_.resize(scores_.size());
    if (rows == 0 || n_ == 0) return;
    if (qe->count != rows) {
      throw std::invalid_argument("Expected " + std::to_string(rows) + " exact queries (as scan queries) but received " +
                                  std::to_string(qe->count));
    }

    // Stage 1: the scan.
    maxsim_cuda::ScopedBlock scan(rt_->allocator(), static_cast<uint64_t>(rows * count) * sizeof(float));
    rt_->FillNaN(scan.get(), static_cast<uint64_t>(rows * count));
    rt_->Launch(*q, *scan_docs, scan_launch, scan.get());
    phases.Mark("scan");
    if (maxsim_cuda::DeviceSelectTakes(*rt_, rows, count, keep) && StagesOnDevice(*qe, scan.get(), rows, keep, phases)) return;
    StagesOnHost(*qe, scan.get(), rows, keep, phases);
  }

 private:
  // Stage 2 with the candidates selected on the device. False when a scan row held a NaN (nothing kept).
  bool StagesOnDevice(const DeviceTokens& qe, cu::CUdeviceptr scan, int64_t rows, int64_t keep, JobPhases& phases) {
    const bool whole = rows * keep >= count;  // the launch was planned for min(count, rows * keep) documents
    const int64_t v = whole ? count : rows * keep;
    std::shared_ptr<DeviceTokens> view = whole ? exact_docs : rt_->ViewShell(exact_docs, v);
    KeptEntries kept(rt_, rows, keep);
    maxsim_cuda::DeviceSelection s = kept.SelectionOf(scan, count);
    if (!whole) {
      s.spans_of = exact_docs.get();
      s.view_starts = view->starts;
      s.view_lengths = view->lengths;
    }
    maxsim_cuda::SelectOnDevice(*rt_, s);
    phases.Mark("scanSelect");
    maxsim_cuda::ScopedBlock out(rt_->allocator(), static_cast<uint64_t>(rows * v) * sizeof(float));
    rt_->FillNaN(out.get(), static_cast<uint64_t>(rows * v));
    rt_->Launch(qe, *view, exact_launch, out.get());
    phases.Mark("exact");
    // row r's own candidates: columns r * keep + j of the view, or their document indices of exactDocs
    maxsim_cuda::GatherRowScores(*rt_, out.get(), v, whole ? kept.columns() : 0, rows, keep, kept.scores());
    kept.Fetch(rt_);
    if (kept.AnyNaN()) return false;
    for (int64_t r = 0; r < rows; r++) {
      TopKHeap heap(scores_.data() + r * n_, indices_.data() + r * n_, n_);
      for (int64_t j = 0; j < keep; j++) heap.Push(kept.host_scores[r * keep + j], kept.host_columns[r * keep + j]);
    }
    phases.Mark("exactSelect");
    return true;
  }

  // Stage 2 with the candidates selected by the host heaps and the union of them rescored.
  void StagesOnHost(const DeviceTokens& qe, cu::CUdeviceptr scan, int64_t rows, int64_t keep, JobPhases& phases) {
    std::vector<float> cand_scores(static_cast<size_t>(rows * keep));  // the heap order does not matter here
    std::vector<int32_t> cand(cand_scores.size());
    SelectRows(rt_, scan, rows, count, keep, cand_scores.data(), cand.data());
    phases.Mark("scanSelect");
    for (int64_t r = 0; r < rows; r++) std::sort(cand.begin() + r * keep, cand.begin() + (r + 1) * keep);
    std::vector<int32_t> all(cand);
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    const int64_t u = static_cast<int64_t>(all.size());
    std::vector<int64_t> column(cand.size());  // each candidate's column in the union
    for (size_t j = 0; j < cand.size(); j++) column[j] = std::lower_bound(all.begin(), all.end(), cand[j]) - all.begin();

    std::shared_ptr<DeviceTokens> view = rt_->Select(exact_docs, std::vector<int64_t>(all.begin(), all.end()));
    phases.Mark("view");
    maxsim_cuda::ScopedBlock out(rt_->allocator(), static_cast<uint64_t>(rows * u) * sizeof(float));
    rt_->FillNaN(out.get(), static_cast<uint64_t>(rows * u));
    rt_->Launch(qe, *view, exact_launch, out.get());
    phases.Mark("exact");
    std::vector<TopKHeap> heaps;
    heaps.reserve(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; r++) heaps.emplace_back(scores_.data() + r * n_, indices_.data() + r * n_, n_);
    std::vector<int64_t> next(static_cast<size_t>(rows), 0);  // per row: its first candidate not pushed yet
    ForEachChunk(rt_, out.get(), rows, u, [&](int64_t r, int64_t c, int64_t len, const float* p) {
      const int64_t* col = column.data() + r * keep;
      int64_t& j = next[r];
      for (; j < keep && col[j] < c + len; j++) heaps[r].Push(p[col[j] - c], cand[r * keep + j]);
    });
    phases.Mark("exactSelect");
  }
};

// twoStage(device, scanQueries, scanDocs, scanLaunch, exactQueries, exactDocs, exactLaunch, { k, candidates, count })
Napi::Value TwoStage(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Runtime* rt = UnwrapDevice(env, info[0]);
  auto task = std::make_unique<TwoStageTask>(env, rt);
  task->scan_queries = ParseQueries(env, rt, info[1], task.get(), "scanQueries");
  ConvertHostQueriesFor(env, task->scan_queries, info[2]);
  task->scan_docs = ParseDocs(env, rt, info[2], task->scan_queries, "scanDocs", "scanQueries");
  task->scan_launch = ParseLaunch(env, info[3], task->scan_docs->dtype, task->scan_docs->e4m3);
  task->exact_queries = ParseQueries(env, rt, info[4], task.get(), "exactQueries");
  ConvertHostQueriesFor(env, task->exact_queries, info[5]);
  task->exact_docs = ParseDocs(env, rt, info[5], task->exact_queries, "exactDocs", "exactQueries");
  task->exact_launch = ParseLaunch(env, info[6], task->exact_docs->dtype, task->exact_docs->e4m3);
  if (task->exact_queries.count != task->scan_queries.count) {
    throw ArgError(env, "exactQueries", std::to_string(task->scan_queries.count) + " queries (as scanQueries)",
                   std::to_string(task->exact_queries.count));
  }
  if (!info[7].IsObject()) throw ArgError(env, "spec", "an object { k, candidates, count }", Describe(info[7]));
  Napi::Object spec = info[7].As<Napi::Object>();
  task->k = GetInteger(env, spec.Get("k"), "spec.k", 0, 2147483647);
  task->candidates = GetInteger(env, spec.Get("candidates"), "spec.candidates", 0, 2147483647);
  task->count = GetInteger(env, spec.Get("count"), "spec.count", 0, 2147483647);
  return Submit(env, rt, std::move(task));
}

// deviceTopK(device, scores, cols, k) (tests and benchmarks): the rows of a host Float32Array [rows *
// cols] uploaded and selected as the top-K jobs select a device score matrix: on the device where the
// device selection takes the shape (NaN rows on the host), else by the host heaps. Result: heaps as
// topK's, plus onDevice (which way it went).
class DeviceTopKTask : public HeapsTask {
 public:
  DeviceTopKTask(Napi::Env env, Runtime* rt) : HeapsTask(env, rt) {}
  std::vector<float> matrix;
  int64_t rows = 0, cols = 0, k = 0;
  void Run() override {
    rt_->EnsureReady();
    IdleAtExit idle(rt_);
    n_ = std::min(k, cols);
    scores_.resize(static_cast<size_t>(rows * n_));
    indices_.resize(scores_.size());
    if (rows == 0 || n_ == 0) return;
    maxsim_cuda::ScopedBlock m(rt_->allocator(), matrix.size() * sizeof(float));
    rt_->Upload(m.get(), matrix.data(), matrix.size() * sizeof(float));
    on_device_ = SelectRowsOnDevice(rt_, m.get(), rows, cols, n_, scores_.data(), indices_.data());
    if (!on_device_) SelectRows(rt_, m.get(), rows, cols, n_, scores_.data(), indices_.data());
  }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object o = HeapsObject(env, n_, scores_, indices_);
    o.Set("onDevice", on_device_);
    return o;
  }

 private:
  bool on_device_ = false;
};

Napi::Value DeviceTopK(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Runtime* rt = UnwrapDevice(env, info[0]);
  if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) {
    throw ArgError(env, "scores", "a Float32Array", Describe(info[1]));
  }
  Napi::Float32Array a = info[1].As<Napi::Float32Array>();
  const int64_t len = static_cast<int64_t>(a.ElementLength());
  auto task = std::make_unique<DeviceTopKTask>(env, rt);
  task->cols = GetInteger(env, info[2], "cols", len > 0 ? 1 : 0, 2147483647);
  if (task->cols > 0 && len % task->cols != 0) {
    throw ArgError(env, "cols", "a divisor of scores.length (" + std::to_string(len) + ")", std::to_string(task->cols));
  }
  task->k = GetInteger(env, info[3], "k", 0, 2147483647);
  task->rows = task->cols > 0 ? len / task->cols : 0;
  task->matrix.assign(a.Data(), a.Data() + len);
  return Submit(env, rt, std::move(task));
}

// hostTopK(scores, cols, k): the heaps of the rows of a host Float32Array [rows * cols], synchronously,
// by the same code the jobs use (so the CPU tests can check it against topKOfRow without a GPU).
Napi::Value HostTopK(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) {
    throw ArgError(env, "scores", "a Float32Array", Describe(info[0]));
  }
  Napi::Float32Array a = info[0].As<Napi::Float32Array>();
  const int64_t len = static_cast<int64_t>(a.ElementLength());
  const int64_t cols = GetInteger(env, info[1], "cols", len > 0 ? 1 : 0, 2147483647);
  if (cols > 0 && len % cols != 0) {
    throw ArgError(env, "cols", "a divisor of scores.length (" + std::to_string(len) + ")", std::to_string(cols));
  }
  const int64_t k = GetInteger(env, info[2], "k", 0, 2147483647);
  const int64_t rows = cols > 0 ? len / cols : 0;
  const int64_t n = std::min(k, cols);
  std::vector<float> scores(static_cast<size_t>(rows * n));
  std::vector<int32_t> indices(scores.size());
  for (int64_t r = 0; r < rows; r++) TopKHeap(scores.data() + r * n, indices.data() + r * n, n).Scan(a.Data() + r * cols, cols, 0);
  return HeapsObject(env, n, scores, indices);
}

}  // namespace

void InitCuda(Napi::Env env, Napi::Object exports) {
  auto* data = new InstanceData();
  env.SetInstanceData(data);
  data->device_ctor = Napi::Persistent(DeviceHandle::Define(env));
  data->tokens_ctor = Napi::Persistent(TokenSetHandle::Define(env));
  data->channel = maxsim_binding::TaskChannel::Create(env, "maxsim.cuda");

  Napi::Object cuda = Napi::Object::New(env);
  cuda.Set("status", Napi::Function::New(env, Status, "status"));
  cuda.Set("open", Napi::Function::New(env, Open, "open"));
  cuda.Set("info", Napi::Function::New(env, Info, "info"));
  cuda.Set("memory", Napi::Function::New(env, Memory, "memory"));
  cuda.Set("emptyCache", Napi::Function::New(env, EmptyCache, "emptyCache"));
  cuda.Set("upload", Napi::Function::New(env, Upload, "upload"));
  cuda.Set("alloc", Napi::Function::New(env, Alloc, "alloc"));
  cuda.Set("append", Napi::Function::New(env, Append, "append"));
  cuda.Set("quantize", Napi::Function::New(env, Quantize, "quantize"));
  cuda.Set("download", Napi::Function::New(env, Download, "download"));
  cuda.Set("select", Napi::Function::New(env, Select, "select"));
  cuda.Set("score", Napi::Function::New(env, Score, "score"));
  cuda.Set("bench", Napi::Function::New(env, Bench, "bench"));
  cuda.Set("topK", Napi::Function::New(env, TopK, "topK"));
  cuda.Set("twoStage", Napi::Function::New(env, TwoStage, "twoStage"));
  cuda.Set("hostTopK", Napi::Function::New(env, HostTopK, "hostTopK"));
  cuda.Set("deviceTopK", Napi::Function::New(env, DeviceTopK, "deviceTopK"));
  exports.Set("cuda", cuda);
}
