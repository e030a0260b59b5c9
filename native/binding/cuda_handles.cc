#include "cuda_handles.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "../cuda/modules.h"

namespace maxsim_binding {

using maxsim_cuda::CudaError;
using maxsim_cuda::DeviceTokens;
using maxsim_cuda::Runtime;

CudaInstance& Cuda(Napi::Env env) { return *env.GetInstanceData<CudaInstance>(); }

namespace {

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

}  // namespace

Runtime* UnwrapDevice(Napi::Env env, const Napi::Value& v) {
  CudaInstance& data = Cuda(env);
  if (!v.IsObject() || !v.As<Napi::Object>().InstanceOf(data.device_ctor.Value())) {
    throw ArgError(env, "device", "a device handle from cuda.open()", Describe(v));
  }
  return DeviceHandle::Unwrap(v.As<Napi::Object>())->runtime();
}

TokenSetHandle* AsTokenSet(Napi::Env env, const Napi::Value& v) {
  CudaInstance& data = Cuda(env);
  if (v.IsObject() && v.As<Napi::Object>().InstanceOf(data.tokens_ctor.Value())) return TokenSetHandle::Unwrap(v.As<Napi::Object>());
  return nullptr;
}

TokenSetHandle* UnwrapTokenSet(Napi::Env env, const Napi::Value& v, const std::string& name) {
  TokenSetHandle* h = AsTokenSet(env, v);
  if (!h) throw ArgError(env, name, "a device token set from cuda.upload() or cuda.alloc()", Describe(v));
  return h;
}

Napi::Object NewTokenSet(Napi::Env env, std::shared_ptr<maxsim_cuda::DeviceTokens> tokens) {
  Napi::Object obj = Cuda(env).tokens_ctor.New({});
  TokenSetHandle::Unwrap(obj)->Attach(std::move(tokens));
  return obj;
}

// Device token sets for the other CUDA bindings (declared in cuda_task.h).

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

namespace {

using Task = CudaTask;

// ---------------------------------------------------------------------------------------------
// status()

// What status() and info() both report of a device (total memory: the props' or the driver's now).
Napi::Object PropsObject(Napi::Env env, const maxsim_cuda::DeviceProps& p, uint64_t total_memory) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("index", p.index);
  o.Set("name", p.name);
  Napi::Array cc = Napi::Array::New(env, 2);
  cc.Set(0u, p.cc_major);
  cc.Set(1u, p.cc_minor);
  o.Set("computeCapability", cc);
  o.Set("sms", p.sms);
  o.Set("totalMemory", static_cast<double>(total_memory));
  o.Set("l2Bytes", p.l2_bytes);
  o.Set("smemOptin", p.smem_optin);
  return o;
}

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
      Napi::Object dev = PropsObject(env, p, p.total_memory);
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
  return Cuda(info.Env()).device_ctor.New({info.Length() > 0 ? info[0] : Napi::Number::New(info.Env(), 0)});
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
    Napi::Object o = PropsObject(env, p, memory_.total);
    o.Set("freeMemory", static_cast<double>(memory_.free));
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

}  // namespace

void InitCudaDevices(Napi::Env env, Napi::Object cuda) {
  auto* data = new CudaInstance();
  env.SetInstanceData(data);
  data->device_ctor = Napi::Persistent(DeviceHandle::Define(env));
  data->tokens_ctor = Napi::Persistent(TokenSetHandle::Define(env));
  data->channel = TaskChannel::Create(env, "maxsim.cuda");
  cuda.Set("status", Napi::Function::New(env, Status, "status"));
  cuda.Set("open", Napi::Function::New(env, Open, "open"));
  cuda.Set("info", Napi::Function::New(env, Info, "info"));
  cuda.Set("memory", Napi::Function::New(env, Memory, "memory"));
  cuda.Set("emptyCache", Napi::Function::New(env, EmptyCache, "emptyCache"));
}

}  // namespace maxsim_binding
