// Runs a job on the libuv pool and settles a Promise with a result object made on the JS thread
// beforehand. Persistent references keep the inputs and the output arrays alive (and unmoved) until
// the promise settles. `what` names the job in its error ("maxsim CPU training failed: ...").
#pragma once
#include <napi.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

class PromiseWorker : public Napi::AsyncWorker {
 public:
  static Napi::Value Start(Napi::Env env, const char* what, const std::vector<Napi::Value>& keep_alive,
                           Napi::Object result, std::function<void()> work) {
    auto* worker = new PromiseWorker(env, what, keep_alive, result, std::move(work));
    Napi::Promise p = worker->deferred_.Promise();
    worker->Queue();
    return p;
  }

  void Execute() override {
    try {
      work_();
    } catch (const std::exception& e) {
      SetError(what_ + " failed: " + e.what());
    }
  }
  void OnOK() override { deferred_.Resolve(result_.Value()); }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  PromiseWorker(Napi::Env env, const char* what, const std::vector<Napi::Value>& keep_alive, Napi::Object result,
                std::function<void()> work)
      : Napi::AsyncWorker(env, what),
        what_(what),
        deferred_(Napi::Promise::Deferred::New(env)),
        result_(Napi::Persistent(result)),
        work_(std::move(work)) {
    for (const Napi::Value& v : keep_alive)
      if (v.IsObject()) refs_.push_back(Napi::Persistent(v.As<Napi::Object>()));
  }

  std::string what_;
  Napi::Promise::Deferred deferred_;
  Napi::ObjectReference result_;
  std::vector<Napi::ObjectReference> refs_;
  std::function<void()> work_;
};
