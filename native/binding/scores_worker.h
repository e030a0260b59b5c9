// Runs a CPU scoring job off the JS thread and settles a Promise with its Float32Array. The output is
// allocated on the JS thread before the job starts and stays referenced until the promise settles.
// The inputs are pinned by the job itself: its parsed TokenSets own copies of the spans and shares
// in the data's memory (token_set.h); the input objects are referenced too, for the caller's sake.
#pragma once
#include <napi.h>

#include <functional>
#include <string>
#include <utility>

class ScoresWorker : public Napi::AsyncWorker {
 public:
  using Job = std::function<void(float* out)>;

  // Queues `job` to fill a new Float32Array of `n` scores; returns the promise of that array.
  // `cancel` (an Int32Array from CancelFlag, or undefined) is kept alive while the job runs; a job
  // that saw it set rejects with "aborted" (its scores are incomplete and never delivered).
  static Napi::Promise Start(Napi::Env env, const char* what, size_t n, Napi::Value queries, Napi::Value docs, Job job,
                             Napi::Value cancel = Napi::Value()) {
    Napi::Float32Array out = Napi::Float32Array::New(env, n);
    auto* worker = new ScoresWorker(env, what, std::move(job), queries, docs, out);
    if (!cancel.IsEmpty() && cancel.IsTypedArray()) {
      worker->cancel_ref_ = Napi::Persistent(cancel.As<Napi::Object>());
      worker->cancel_ = cancel.As<Napi::Int32Array>().Data();
    }
    Napi::Promise p = worker->deferred_.Promise();
    worker->Queue();
    return p;
  }

  // The cancel flag of a call: options.cancel, an Int32Array of at least one element, or null.
  static const volatile int32_t* CancelFlag(Napi::Env env, const Napi::Value& options) {
    if (!options.IsObject()) return nullptr;
    Napi::Value c = options.As<Napi::Object>().Get("cancel");
    if (c.IsUndefined()) return nullptr;
    if (!c.IsTypedArray() || c.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array ||
        c.As<Napi::TypedArray>().ElementLength() < 1) {
      throw Napi::TypeError::New(env, "Expected an Int32Array(1) for cancel");
    }
    return c.As<Napi::Int32Array>().Data();
  }

  void Execute() override {
    try {
      job_(out_);
      if (cancel_ && *cancel_) SetError("aborted");
    } catch (const std::exception& e) {
      SetError(what_ + " failed: " + e.what());
    }
  }
  void OnOK() override { deferred_.Resolve(out_ref_.Value()); }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  ScoresWorker(Napi::Env env, const char* what, Job job, Napi::Value q, Napi::Value d, Napi::Float32Array out)
      : Napi::AsyncWorker(env, what),
        what_(what),
        job_(std::move(job)),
        deferred_(Napi::Promise::Deferred::New(env)),
        q_ref_(Napi::Persistent(q.As<Napi::Object>())),
        d_ref_(Napi::Persistent(d.As<Napi::Object>())),
        out_ref_(Napi::Persistent(out)),
        out_(out.Data()) {}

  std::string what_;
  Job job_;
  Napi::Promise::Deferred deferred_;
  Napi::ObjectReference q_ref_;
  Napi::ObjectReference d_ref_;
  Napi::Reference<Napi::Float32Array> out_ref_;
  Napi::ObjectReference cancel_ref_;
  float* out_;
  const volatile int32_t* cancel_ = nullptr;
};
