// Node-API glue for the int8 CPU engine (engine_int8.h): cpu.maxsimInt8Sync / cpu.maxsimInt8Async /
// cpu.int8Isas, attached to the `cpu` object InitCpu created.
#include <napi.h>

#include <string>
#include <utility>
#include <vector>

#include "../cpu/engine_int8.h"
#include "scores_worker.h"
#include "token_set.h"

namespace {

struct Int8CallArgs {
  TokenSet q_set, d_set;  // own the spans' copies and pin data and scales for the job (token_set.h)
  maxsim_cpu::Int8Spans queries;
  maxsim_cpu::Int8Spans docs;
  const maxsim_cpu::Int8KernelSet* kernel = nullptr;
  int threads = 0;
  const volatile int32_t* cancel = nullptr;  // options.cancel (async calls), kept alive by the worker
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
  a.q_set = std::move(q);
  a.d_set = std::move(d);
  std::string isa;
  if (info.Length() > 2 && info[2].IsObject()) {
    Napi::Object opts = info[2].As<Napi::Object>();
    if (opts.Has("threads") && opts.Get("threads").IsNumber()) a.threads = opts.Get("threads").As<Napi::Number>().Int32Value();
    if (opts.Has("isa") && opts.Get("isa").IsString()) isa = opts.Get("isa").As<Napi::String>().Utf8Value();
    a.cancel = ScoresWorker::CancelFlag(env, opts);
  }
  std::string error;
  a.kernel = maxsim_cpu::ResolveInt8Kernel(isa, a.docs.dim, &error);
  if (a.kernel == nullptr) throw Napi::TypeError::New(env, error);
  return a;
}

Napi::Value MaxsimInt8Sync(const Napi::CallbackInfo& info) {
  Int8CallArgs a = ParseInt8Call(info);
  Napi::Float32Array out = Napi::Float32Array::New(info.Env(), static_cast<size_t>(a.queries.count * a.docs.count));
  maxsim_cpu::MaxsimAllPairsInt8(a.queries, a.docs, out.Data(), a.threads, a.kernel);
  return out;
}

Napi::Value MaxsimInt8Async(const Napi::CallbackInfo& info) {
  const Int8CallArgs a = ParseInt8Call(info);
  return ScoresWorker::Start(info.Env(), "maxsim int8 CPU engine", static_cast<size_t>(a.queries.count * a.docs.count),
                             info[0], info[1],
                             [a](float* out) {
                               maxsim_cpu::MaxsimAllPairsInt8(a.queries, a.docs, out, a.threads, a.kernel, a.cancel);
                             },
                             a.cancel && info[2].IsObject() ? info[2].As<Napi::Object>().Get("cancel") : Napi::Value());
}

// The usable int8 kernel sets' names, fastest first.
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
