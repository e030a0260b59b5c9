// A test addon for token_set.h's pinning (test/pin-no-v8.test.ts builds it with -DMAXSIM_NO_V8, as
// the musl packages are): sum(batch, ms) parses a float32 TokenBatch as the engines' bindings do,
// then sums its items' values on a worker thread after sleeping `ms`, so the test can detach,
// overwrite or drop the JS arrays while the job holds the parsed set.
#include <napi.h>

#include <chrono>
#include <thread>
#include <utility>

#include "../token_set.h"

namespace {

class SumJob : public Napi::AsyncWorker {
 public:
  SumJob(Napi::Env env, TokenSet t, int ms)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), t_(std::move(t)), ms_(ms) {}
  void Execute() override {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
    const float* d = static_cast<const float*>(t_.data);
    double s = 0.0;
    for (int64_t i = 0; i < t_.count; i++) {
      const int64_t from = static_cast<int64_t>(t_.starts[i]) * t_.dim;
      for (int64_t j = 0; j < t_.lengths[i] * t_.dim; j++) s += d[from + j];
    }
    sum_ = s;
  }
  void OnOK() override { deferred_.Resolve(Napi::Number::New(Env(), sum_)); }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }
  Napi::Promise Promise() { return deferred_.Promise(); }

 private:
  Napi::Promise::Deferred deferred_;
  TokenSet t_;
  int ms_;
  double sum_ = 0.0;
};

Napi::Value Sum(const Napi::CallbackInfo& info) {
  TokenSet t = ParseTokenSet(info.Env(), info[0], "docs");
  if (t.dtype != DType::Float32) throw Napi::TypeError::New(info.Env(), "pin_check sums float32 batches");
  auto* job = new SumJob(info.Env(), std::move(t), info[1].As<Napi::Number>().Int32Value());
  Napi::Promise p = job->Promise();
  job->Queue();
  return p;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("sum", Napi::Function::New(env, Sum));
#ifdef MAXSIM_NO_V8
  exports.Set("noV8", Napi::Boolean::New(env, true));
#else
  exports.Set("noV8", Napi::Boolean::New(env, false));
#endif
  return exports;
}

}  // namespace

NODE_API_MODULE(pin_check, Init)
