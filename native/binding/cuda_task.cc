#include "cuda_task.h"

#include <cmath>
#include <stdexcept>

namespace maxsim_binding {

using maxsim_cuda::CudaError;
using maxsim_cuda::Runtime;

CudaTask::CudaTask(Napi::Env env, std::string error_prefix)
    : deferred_(Napi::Promise::Deferred::New(env)), prefix_(std::move(error_prefix)) {}

void CudaTask::RunCatching() {
  try {
    Run();
  } catch (const CudaError& e) {
    Fail(kCuda, e.what(), e.code());
  } catch (const std::invalid_argument& e) {
    Fail(kArgument, e.what(), "");
  } catch (const std::exception& e) {
    Fail(kOther, e.what(), "");
  }
}

void CudaTask::Settle(Napi::Env env) {
  try {
    if (kind_ == kNone) {
      deferred_.Resolve(Result(env));
      return;
    }
    Napi::Error err = kind_ == kArgument ? Napi::Error(Napi::RangeError::New(env, message_))
                                         : Napi::Error::New(env, message_);
    if (!code_.empty()) err.Set("code", Napi::String::New(env, code_));
    deferred_.Reject(err.Value());
  } catch (const Napi::Error& e) {
    deferred_.Reject(e.Value());
  }
}

void CudaTask::Fail(Kind k, const std::string& message, const std::string& code) {
  kind_ = k;
  message_ = prefix_ + message;
  code_ = code;
}

namespace {
void CallJs(Napi::Env env, Napi::Function, TaskChannel::Shared* shared, CudaTask* task);
using CompletionFn = Napi::TypedThreadSafeFunction<TaskChannel::Shared, CudaTask, CallJs>;
}  // namespace

struct TaskChannel::Shared {
  std::mutex mutex;
  bool alive = true;  // false once the environment shuts down
  CompletionFn tsfn;
  int64_t pending = 0;  // JS thread only: the TSFN holds the event loop open while > 0
};

namespace {
void CallJs(Napi::Env env, Napi::Function, TaskChannel::Shared* shared, CudaTask* task) {
  if (env == nullptr) return;  // environment torn down: the task is leaked on purpose
  if (--shared->pending == 0) shared->tsfn.Unref(env);
  task->Settle(env);
  delete task;
}
}  // namespace

TaskChannel* TaskChannel::Create(Napi::Env env, const char* name) {
  auto* channel = new TaskChannel();
  channel->shared_ = std::make_shared<Shared>();
  channel->shared_->tsfn = CompletionFn::New(env, name, 0, 1, channel->shared_.get());
  channel->shared_->tsfn.Unref(env);  // referenced only while tasks are in flight
  // Registered after the TSFN, so it runs before the TSFN's own teardown: completions stop first.
  std::shared_ptr<Shared> shared = channel->shared_;
  env.AddCleanupHook([shared, channel] {
    {
      std::lock_guard<std::mutex> lock(shared->mutex);
      shared->alive = false;
    }
    delete channel;
  });
  return channel;
}

Napi::Value TaskChannel::Submit(Napi::Env env, Runtime* rt, std::unique_ptr<CudaTask> task) {
  Napi::Promise promise = task->Promise();
  std::shared_ptr<Shared> shared = shared_;
  CudaTask* raw = task.release();
  rt->Post([raw, shared] {
    raw->RunCatching();
    std::lock_guard<std::mutex> lock(shared->mutex);
    if (shared->alive) shared->tsfn.NonBlockingCall(raw);
  });
  if (shared->pending++ == 0) shared->tsfn.Ref(env);
  return promise;
}

Napi::TypeError ArgError(Napi::Env env, const std::string& name, const std::string& expected, const std::string& received) {
  return Napi::TypeError::New(env, "Expected " + expected + " for " + name + " but received " + received);
}

std::string Describe(const Napi::Value& v) {
  if (v.IsUndefined()) return "undefined";
  if (v.IsNull()) return "null";
  if (v.IsNumber()) {
    const double d = v.As<Napi::Number>().DoubleValue();
    return std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e15 ? std::to_string(static_cast<int64_t>(d)) : std::to_string(d);
  }
  if (v.IsString()) return "'" + v.As<Napi::String>().Utf8Value() + "'";
  if (v.IsArray()) return "an array of " + std::to_string(v.As<Napi::Array>().Length());
  if (v.IsFunction()) return "a function";
  if (v.IsObject()) return "an object";
  return "another value";
}

int64_t GetInteger(Napi::Env env, const Napi::Value& v, const std::string& name, int64_t min, int64_t max) {
  const double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : NAN;
  if (!(d >= static_cast<double>(min) && d <= static_cast<double>(max) && d == std::floor(d))) {
    throw ArgError(env, name, "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]", Describe(v));
  }
  return static_cast<int64_t>(d);
}

Runtime* ParseDevice(Napi::Env env, const Napi::Value& v) {
  Napi::Value index = v.IsObject() ? v.As<Napi::Object>().Get("index") : v;
  const double d = index.IsNumber() ? index.As<Napi::Number>().DoubleValue() : NAN;
  if (!(d >= 0 && d <= (1 << 20) && d == std::floor(d))) {
    throw ArgError(env, "device", "a CUDA device index or a device handle", Describe(index));
  }
  try {
    return Runtime::Get(static_cast<int>(d));
  } catch (const std::invalid_argument& e) {
    throw Napi::RangeError::New(env, e.what());
  } catch (const CudaError& e) {
    Napi::Error err = Napi::Error::New(env, e.what());
    err.Set("code", Napi::String::New(env, e.code()));
    throw err;
  }
}

}  // namespace maxsim_binding
