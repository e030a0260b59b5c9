// Node-API glue for the int8 CPU engine (engine_int8.h): cpu.maxsimInt8Sync / cpu.maxsimInt8Async /
// cpu.int8Isas, attached to the `cpu` object InitCpu created.
#include <napi.h>

#include <string>
#include <vector>

#include "../cpu/engine_int8.h"
#include "token_set.h"

namespace {

struct Int8CallArgs {
  maxsim_cpu::Int8Spans queries;
  maxsim_cpu::Int8Spans docs;
  maxsim_cpu::Int8Kernel kernel = maxsim_cpu::Int8Kernel::Auto;
  int threads = 0;
};

maxsim_cpu::Int8Spans ToInt8Spans(Napi::Env env, const TokenSet& t, const std::string& name) {
  if (t.dtype != DType::Int8) {
    throw Napi::TypeError::New(env, "Expected int8 tokens for " + name +
                                        " but received a float dtype (int8 scoring needs int8 queries and documents)");
  }
  maxsim_cpu::Int8Spans s;
  s.data = static_cast<const int8_t*>(t.data);
  s.scales = t.scales;
  s.starts = t.starts;
  s.lengths = t.lengths;
  s.count = t.count;
  s.dim = t.dim;
  return s;
}

Int8CallArgs ParseInt8Call(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  TokenSet q = ParseTokenSet(env, info[0], "queries");
  TokenSet d = ParseTokenSet(env, info[1], "docs");
  if (q.dim != d.dim) {
    throw Napi::TypeError::New(env, "Expected queries.dim " + std::to_string(d.dim) +
                                        " (the dimension of docs) but received " + std::to_string(q.dim));
  }
  Int8CallArgs a;
  a.queries = ToInt8Spans(env, q, "queries");
  a.docs = ToInt8Spans(env, d, "docs");
  std::string isa;
  if (info.Length() > 2 && info[2].IsObject()) {
    Napi::Object opts = info[2].As<Napi::Object>();
    if (opts.Has("threads") && opts.Get("threads").IsNumber()) a.threads = opts.Get("threads").As<Napi::Number>().Int32Value();
    if (opts.Has("isa") && opts.Get("isa").IsString()) isa = opts.Get("isa").As<Napi::String>().Utf8Value();
  }
  if (isa == "amx") a.kernel = maxsim_cpu::Int8Kernel::Amx;
  else if (isa == "portable") a.kernel = maxsim_cpu::Int8Kernel::Portable;
  else if (!isa.empty() && isa != "auto")
    throw Napi::TypeError::New(env, "Expected one of auto, amx, portable for isa with int8 inputs but received '" + isa + "'");
  std::string error;
  if (maxsim_cpu::ResolveInt8Kernel(a.kernel, a.docs.dim, &error) == maxsim_cpu::Int8Kernel::Auto) {
    throw Napi::TypeError::New(env, error);
  }
  return a;
}

Napi::Value MaxsimInt8Sync(const Napi::CallbackInfo& info) {
  Int8CallArgs a = ParseInt8Call(info);
  Napi::Float32Array out = Napi::Float32Array::New(info.Env(), static_cast<size_t>(a.queries.count * a.docs.count));
  maxsim_cpu::MaxsimAllPairsInt8(a.queries, a.docs, out.Data(), a.threads, a.kernel);
  return out;
}

// Off the JS thread; the inputs and the output stay referenced until the promise settles.
class MaxsimInt8Worker : public Napi::AsyncWorker {
 public:
  MaxsimInt8Worker(Napi::Env env, Int8CallArgs args, Napi::Value q, Napi::Value d, Napi::Float32Array out)
      : Napi::AsyncWorker(env, "maxsim.cpu.int8"),
        args_(args),
        deferred_(Napi::Promise::Deferred::New(env)),
        q_ref_(Napi::Persistent(q.As<Napi::Object>())),
        d_ref_(Napi::Persistent(d.As<Napi::Object>())),
        out_ref_(Napi::Persistent(out)),
        out_(out.Data()) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    try {
      maxsim_cpu::MaxsimAllPairsInt8(args_.queries, args_.docs, out_, args_.threads, args_.kernel);
    } catch (const std::exception& e) {
      SetError(std::string("maxsim int8 CPU engine failed: ") + e.what());
    }
  }
  void OnOK() override { deferred_.Resolve(out_ref_.Value()); }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Int8CallArgs args_;
  Napi::Promise::Deferred deferred_;
  Napi::ObjectReference q_ref_;
  Napi::ObjectReference d_ref_;
  Napi::Reference<Napi::Float32Array> out_ref_;
  float* out_;
};

Napi::Value MaxsimInt8Async(const Napi::CallbackInfo& info) {
  Int8CallArgs a = ParseInt8Call(info);
  Napi::Float32Array out = Napi::Float32Array::New(info.Env(), static_cast<size_t>(a.queries.count * a.docs.count));
  auto* worker = new MaxsimInt8Worker(info.Env(), a, info[0], info[1], out);
  Napi::Promise p = worker->Promise();
  worker->Queue();
  return p;
}

Napi::Value Int8Isas(const Napi::CallbackInfo& info) {
  const std::vector<std::string> names = maxsim_cpu::UsableInt8Isas();
  Napi::Array out = Napi::Array::New(info.Env(), names.size());
  for (size_t i = 0; i < names.size(); i++) out.Set(static_cast<uint32_t>(i), names[i]);
  return out;
}

}  // namespace

void InitInt8(Napi::Env env, Napi::Object exports) {
  Napi::Object cpu = exports.Get("cpu").As<Napi::Object>();
  cpu.Set("maxsimInt8Sync", Napi::Function::New(env, MaxsimInt8Sync, "maxsimInt8Sync"));
  cpu.Set("maxsimInt8Async", Napi::Function::New(env, MaxsimInt8Async, "maxsimInt8Async"));
  cpu.Set("int8Isas", Napi::Function::New(env, Int8Isas, "int8Isas"));
}
