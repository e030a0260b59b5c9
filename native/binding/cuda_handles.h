// The JS objects of the CUDA binding: device handles (cuda.open), device token sets (CudaTokenSet,
// whose snapshot the JS thread reads, never the live set the worker thread updates), the addon's
// per-environment state, and the entries that describe devices (status, open, info, memory).
#pragma once
#include <napi.h>

#include <cstdint>
#include <memory>
#include <string>

#include "../cuda/runtime.h"
#include "cuda_task.h"

namespace maxsim_binding {

// JS-thread state of one environment (the addon's instance data).
struct CudaInstance {
  TaskChannel* channel = nullptr;
  Napi::FunctionReference device_ctor;
  Napi::FunctionReference tokens_ctor;
};
CudaInstance& Cuda(Napi::Env env);

// Creates the instance data, the handle classes and the task channel, and sets status / open / info /
// memory / emptyCache on `cuda`.
void InitCudaDevices(Napi::Env env, Napi::Object cuda);

// Queues a task on the runtime's worker thread through this environment's channel.
inline Napi::Value Submit(Napi::Env env, maxsim_cuda::Runtime* rt, std::unique_ptr<CudaTask> task) {
  return Cuda(env).channel->Submit(env, rt, std::move(task));
}

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
  void Attach(std::shared_ptr<maxsim_cuda::DeviceTokens> t) {
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
  std::shared_ptr<maxsim_cuda::DeviceTokens> Live(Napi::Env env, const std::string& name) const {
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

  std::shared_ptr<maxsim_cuda::DeviceTokens> tokens_;
  Snapshot snap_;
  bool disposed_ = false;
};

// The runtime behind a device handle; TypeError naming `device` for another value.
maxsim_cuda::Runtime* UnwrapDevice(Napi::Env env, const Napi::Value& v);
// The handle behind v, or null when v is not a CudaTokenSet.
TokenSetHandle* AsTokenSet(Napi::Env env, const Napi::Value& v);
// The handle behind v; TypeError naming `name` for another value.
TokenSetHandle* UnwrapTokenSet(Napi::Env env, const Napi::Value& v, const std::string& name);
// A new CudaTokenSet handle owning `tokens`.
Napi::Object NewTokenSet(Napi::Env env, std::shared_ptr<maxsim_cuda::DeviceTokens> tokens);

}  // namespace maxsim_binding
