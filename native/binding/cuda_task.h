// The scheme every CUDA binding uses to run GPU work without blocking the JS thread: a CudaTask runs
// on the device's worker thread (Run), and its promise settles on the JS thread (Result), through one
// thread-safe function per binding and environment (a TaskChannel). Also the argument helpers the
// CUDA bindings share.
#pragma once
#include <napi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../cuda/runtime.h"
#include "token_set.h"

namespace maxsim_binding {

class CudaTask {
 public:
  // `error_prefix` starts every rejection message ("" for none).
  explicit CudaTask(Napi::Env env, std::string error_prefix = "");
  virtual ~CudaTask() = default;
  virtual void Run() = 0;
  virtual Napi::Value Result(Napi::Env env) = 0;

  // Keeps a JS object (an array the job reads or writes) alive until the promise settles.
  void Keep(Napi::Value v) { keep_.push_back(Napi::Persistent(v.As<Napi::Object>())); }
  Napi::Promise Promise() const { return deferred_.Promise(); }

  // Worker thread: Run(), turning CudaError / std::invalid_argument / std::exception into a rejection.
  void RunCatching();
  // JS thread: resolves with Result() or rejects (RangeError for bad arguments, `code` = CUDA name).
  void Settle(Napi::Env env);

  // Benchmarks: the resolved object gets `handoff` { inUs, runUs, outUs }: submit -> worker start,
  // the run on the worker, worker end -> this task's completion callback on the JS thread.
  bool report_handoff = false;
  std::chrono::steady_clock::time_point submitted, started, finished;

 private:
  enum Kind { kNone, kCuda, kArgument, kOther };
  void Fail(Kind k, const std::string& message, const std::string& code);
  Napi::Promise::Deferred deferred_;
  std::vector<Napi::ObjectReference> keep_;
  std::string prefix_;
  Kind kind_ = kNone;
  std::string message_, code_;
};

// A task whose work is one engine call: `run` on the worker thread (capturing the parsed arguments),
// `wrap` on the JS thread to turn its result into a JS value. Set both before submitting.
template <typename R>
class JobTask : public CudaTask {
 public:
  explicit JobTask(Napi::Env env, std::string error_prefix = "") : CudaTask(env, std::move(error_prefix)) {}
  std::function<R()> run;
  std::function<Napi::Value(Napi::Env, R&)> wrap;
  void Run() override { result_ = run(); }
  Napi::Value Result(Napi::Env env) override { return wrap(env, result_); }

 private:
  R result_{};
};

// The completion channel of one binding in one environment. Lives as long as the environment; tasks
// that finish after it shut down are leaked on purpose rather than touching a dead environment.
class TaskChannel {
 public:
  // Creates the channel (and its cleanup hook) for `env`; the pointer stays valid until env teardown.
  static TaskChannel* Create(Napi::Env env, const char* name);
  // Queues `task` on the runtime's worker thread and returns its promise.
  Napi::Value Submit(Napi::Env env, maxsim_cuda::Runtime* rt, std::unique_ptr<CudaTask> task);

  struct Shared;  // state shared with worker threads

 private:
  std::shared_ptr<Shared> shared_;
};

// ---- argument helpers ----
Napi::TypeError ArgError(Napi::Env env, const std::string& name, const std::string& expected, const std::string& received);
// A short description of a JS value for error messages ("undefined", "'abc'", "an array of 3", ...).
std::string Describe(const Napi::Value& v);
int64_t GetInteger(Napi::Env env, const Napi::Value& v, const std::string& name, int64_t min, int64_t max);
// A device index, or a device handle from cuda.open() (its `index`): the device's runtime.
maxsim_cuda::Runtime* ParseDevice(Napi::Env env, const Napi::Value& v);
// The dtype name of a device token set: fp8 sets are int8-sized e4m3 codes.
const char* SetDTypeName(DType t, bool e4m3);
// Parses a launch as the dispatcher plans it: { kernel, grid, block, smem, queryTile?, tmaBox?,
// unitOrder?, dtype? }; `dtype` (when given) is the element type the kernel reads and must match the docs.
// `v` may also be a handle from LaunchHandle (the launch parsed once; the dtype still checked).
maxsim_cuda::LaunchSpec ParseLaunch(Napi::Env env, const Napi::Value& v, DType docs_dtype, bool docs_e4m3);
// cuda.launchHandle(launch): the launch parsed once, for a plan that is used again and again
// (src/backends/cuda.ts caches plans by shape), so that a job reads no launch properties.
Napi::Value LaunchHandle(const Napi::CallbackInfo& info);

// ---- device token sets (the CudaTokenSet handles of cuda_binding.cc), for the other bindings ----
struct DeviceSetArg {
  std::shared_ptr<maxsim_cuda::DeviceTokens> set;
  int device = 0;  // as of the last completed upload / append (the JS thread's snapshot)
  int64_t count = 0, tokens = 0, dim = 0;
  int32_t max_length = 0;
  DType dtype = DType::Float32;
  bool e4m3 = false;  // fp8 codes
  bool view = false;  // made by select(): spans over another set's tokens
};
// Whether v is a CudaTokenSet handle.
bool IsDeviceSet(Napi::Env env, const Napi::Value& v);
// The set behind a handle; TypeError naming `name` for another value or a disposed set.
DeviceSetArg GetDeviceSet(Napi::Env env, const Napi::Value& v, const std::string& name);
// A new CudaTokenSet handle owning `set`.
Napi::Object WrapDeviceSet(Napi::Env env, std::shared_ptr<maxsim_cuda::DeviceTokens> set);

}  // namespace maxsim_binding
