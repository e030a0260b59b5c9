#include "cuda_task.h"

#include <cmath>
#include <memory>
#include <stdexcept>

namespace maxsim_binding {

using maxsim_cuda::CudaError;
using maxsim_cuda::LaunchSpec;
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
      Napi::Value v = Result(env);
      if (report_handoff && v.IsObject()) {
        const auto us = [](std::chrono::steady_clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
        Napi::Object h = Napi::Object::New(env);
        h.Set("inUs", us(started - submitted));
        h.Set("runUs", us(finished - started));
        h.Set("outUs", us(std::chrono::steady_clock::now() - finished));
        v.As<Napi::Object>().Set("handoff", h);
      }
      deferred_.Resolve(v);
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
  raw->submitted = std::chrono::steady_clock::now();
  rt->Post([raw, shared] {
    raw->started = std::chrono::steady_clock::now();
    raw->RunCatching();
    raw->finished = std::chrono::steady_clock::now();
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

// ---- the launch a dispatcher planned ----

namespace {
void GetTriple(Napi::Env env, Napi::Object launch, const char* key, unsigned out[3]) {
  Napi::Value v = launch.Get(key);
  const std::string name = std::string("launch.") + key;
  if (!v.IsArray() || v.As<Napi::Array>().Length() != 3) throw ArgError(env, name, "an array of 3 positive integers", Describe(v));
  Napi::Array a = v.As<Napi::Array>();
  for (uint32_t i = 0; i < 3; i++) {
    out[i] = static_cast<unsigned>(GetInteger(env, a.Get(i), name + "[" + std::to_string(i) + "]", 1, 2147483647));
  }
}
}  // namespace

const char* SetDTypeName(DType t, bool e4m3) { return e4m3 ? "fp8" : DTypeName(t); }

namespace {

// A launch parsed once (LaunchHandle): the spec and the element type its kernel reads, when given.
struct ParsedLaunch {
  LaunchSpec spec;
  bool has_dtype = false;
  DType want = DType::Float32;
  bool want_e4m3 = false;
};

constexpr napi_type_tag kLaunchTag = {0x6d617873696d4c61ull, 0x756e636848616e64ull};

ParsedLaunch ParseLaunchObject(Napi::Env env, const Napi::Value& v) {
  if (!v.IsObject()) throw ArgError(env, "launch", "an object { kernel, grid, block, smem }", Describe(v));
  Napi::Object o = v.As<Napi::Object>();
  ParsedLaunch p;
  LaunchSpec& s = p.spec;
  Napi::Value kernel = o.Get("kernel");
  if (kernel.IsString()) s.kernel = kernel.As<Napi::String>().Utf8Value();
  if (s.kernel.empty()) throw ArgError(env, "launch.kernel", "a kernel name", Describe(kernel));
  GetTriple(env, o, "grid", s.grid);
  GetTriple(env, o, "block", s.block);
  s.smem = static_cast<unsigned>(GetInteger(env, o.Get("smem"), "launch.smem", 0, 1 << 30));
  Napi::Value box = o.Get("tmaBox");
  if (!box.IsUndefined()) {
    if (!box.IsArray() || box.As<Napi::Array>().Length() != 2)
      throw ArgError(env, "launch.tmaBox", "[elements, tokens]", Describe(box));
    Napi::Array b = box.As<Napi::Array>();
    s.tma_box[0] = static_cast<unsigned>(GetInteger(env, b.Get(0u), "launch.tmaBox[0]", 1, 256));
    s.tma_box[1] = static_cast<unsigned>(GetInteger(env, b.Get(1u), "launch.tmaBox[1]", 1, 256));
  }
  Napi::Value order = o.Get("unitOrder");
  if (!order.IsUndefined()) s.unit_order = static_cast<int>(GetInteger(env, order, "launch.unitOrder", 0, 1));
  Napi::Value tile = o.Get("queryTile");
  if (!tile.IsUndefined()) s.query_tile = GetInteger(env, tile, "launch.queryTile", 1, 2147483647);
  Napi::Value dt = o.Get("dtype");
  if (!dt.IsUndefined()) {
    p.has_dtype = true;
    p.want_e4m3 = dt.IsString() && dt.As<Napi::String>().Utf8Value() == "fp8";
    p.want = p.want_e4m3 ? DType::Int8 : ParseDType(env, "launch", dt);
  }
  return p;
}

void CheckLaunchDType(Napi::Env env, const ParsedLaunch& p, DType docs_dtype, bool docs_e4m3) {
  if (p.has_dtype && (p.want != docs_dtype || p.want_e4m3 != docs_e4m3)) {
    throw ArgError(env, "docs.dtype",
                   std::string("'") + SetDTypeName(p.want, p.want_e4m3) + "' (the element type of kernel " + p.spec.kernel + ")",
                   std::string("'") + SetDTypeName(docs_dtype, docs_e4m3) + "'");
  }
}

}  // namespace

LaunchSpec ParseLaunch(Napi::Env env, const Napi::Value& v, DType docs_dtype, bool docs_e4m3) {
  if (v.IsExternal()) {
    bool tagged = false;
    if (napi_check_object_type_tag(env, v, &kLaunchTag, &tagged) != napi_ok || !tagged) {
      throw ArgError(env, "launch", "an object { kernel, grid, block, smem } or a handle from launchHandle()", "another external");
    }
    const ParsedLaunch& p = *v.As<Napi::External<ParsedLaunch>>().Data();
    CheckLaunchDType(env, p, docs_dtype, docs_e4m3);
    return p.spec;
  }
  const ParsedLaunch p = ParseLaunchObject(env, v);
  CheckLaunchDType(env, p, docs_dtype, docs_e4m3);
  return p.spec;
}

Napi::Value LaunchHandle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto parsed = std::make_unique<ParsedLaunch>(ParseLaunchObject(env, info[0]));
  Napi::External<ParsedLaunch> e =
      Napi::External<ParsedLaunch>::New(env, parsed.release(), [](Napi::Env, ParsedLaunch* p) { delete p; });
  if (napi_type_tag_object(env, e, &kLaunchTag) != napi_ok) throw Napi::Error::New(env, "napi_type_tag_object failed");
  return e;
}

}  // namespace maxsim_binding
