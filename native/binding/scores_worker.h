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
  static Napi::Promise Start(Napi::Env env, const char* what, size_t n, Napi::Value queries, Napi::Value docs, Job job) {
    Napi::Float32Array out = Napi::Float32Array::New(env, n);
    auto* worker = new ScoresWorker(env, what, std::move(job), queries, docs, out);
    Napi::Promise p = worker->deferred_.Promise();
    worker->Queue();
    return p;
  }

  void Execute() override {
    try {
      job_(out_);
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
  float* out_;
};
