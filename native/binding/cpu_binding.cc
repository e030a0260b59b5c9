// Node-API glue for the CPU engine: argument unpacking, the async worker, error mapping.
#include <napi.h>

#include <string>
#include <utility>

#include "../cpu/cpu_features.h"
#include "../cpu/engine.h"
#include "../cpu/thread_pool.h"
#include "cpu_spans.h"
#include "scores_worker.h"
#include "token_set.h"

namespace {


struct CallArgs {
  TokenSet q_set, d_set;  // own the spans' copies and pin the data for the job (token_set.h)
  maxsim_cpu::TokenSpans queries;
  maxsim_cpu::TokenSpans docs;
  const maxsim_cpu::IsaKernels* isa = nullptr;
  int threads = 0;
  const volatile int32_t* cancel = nullptr;  // options.cancel (async calls), kept alive by the worker
};

CallArgs ParseCall(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  TokenSet q = ParseTokenSet(env, info[0], "queries");
  TokenSet d = ParseTokenSet(env, info[1], "docs");
  if (q.dim != d.dim) {
    throw Napi::TypeError::New(env, "Expected queries.dim " + std::to_string(d.dim) + " (the dimension of docs) but received " +
                                        std::to_string(q.dim));
  }
  CallArgs a;
  a.queries = ToCpuSpans(env, q, "queries");
  a.docs = ToCpuSpans(env, d, "docs");
  a.q_set = std::move(q);
  a.d_set = std::move(d);
  std::string isa_name;
  if (info.Length() > 2 && info[2].IsObject()) {
    Napi::Object opts = info[2].As<Napi::Object>();
    if (opts.Has("threads") && opts.Get("threads").IsNumber()) a.threads = opts.Get("threads").As<Napi::Number>().Int32Value();
    if (opts.Has("isa") && opts.Get("isa").IsString()) isa_name = opts.Get("isa").As<Napi::String>().Utf8Value();
    a.cancel = ScoresWorker::CancelFlag(env, opts);
  }
  std::string error;
  a.isa = maxsim_cpu::SelectIsa(isa_name, &error);
  if (!a.isa) throw Napi::TypeError::New(env, error);
  return a;
}

Napi::Value MaxsimSync(const Napi::CallbackInfo& info) {
  CallArgs a = ParseCall(info);
  Napi::Float32Array out = Napi::Float32Array::New(info.Env(), static_cast<size_t>(a.queries.count * a.docs.count));
  maxsim_cpu::MaxsimAllPairs(*a.isa, a.queries, a.docs, out.Data(), a.threads);
  return out;
}

Napi::Value MaxsimAsync(const Napi::CallbackInfo& info) {
  const CallArgs a = ParseCall(info);
  return ScoresWorker::Start(info.Env(), "maxsim CPU engine", static_cast<size_t>(a.queries.count * a.docs.count),
                             info[0], info[1],
                             [a](float* out) {
                               maxsim_cpu::MaxsimAllPairs(*a.isa, a.queries, a.docs, out, a.threads, a.cancel);
                             },
                             a.cancel && info[2].IsObject() ? info[2].As<Napi::Object>().Get("cancel") : Napi::Value());
}

Napi::Value CpuInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  const auto usable = maxsim_cpu::UsableIsas();
  o.Set("isa", usable.front()->name);
  Napi::Array names = Napi::Array::New(env, usable.size());
  for (size_t i = 0; i < usable.size(); i++) names.Set(static_cast<uint32_t>(i), usable[i]->name);
  o.Set("isas", names);
  o.Set("lanes", usable.front()->lanes);
  o.Set("bf16Native", usable.front()->bf16_dim_multiple > 0);
  o.Set("features", maxsim_cpu::CpuFeatures());
  o.Set("threads", maxsim_cpu::GlobalPool().size());
  return o;
}

// The admission table (cpu_features.cc): every kernel set of this build's architecture, the
// binding.gyp target it is compiled in, the features it needs, and whether this CPU admits it.
Napi::Value CpuAdmission(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const auto& table = maxsim_cpu::AdmissionTable();
  Napi::Array out = Napi::Array::New(env, table.size());
  for (size_t i = 0; i < table.size(); i++) {
    const maxsim_cpu::Admission& a = table[i];
    Napi::Object row = Napi::Object::New(env);
    row.Set("family", a.family);
    row.Set("set", a.set);
    row.Set("target", a.target);
    Napi::Array needs = Napi::Array::New(env, a.needs.size());
    for (size_t j = 0; j < a.needs.size(); j++) needs.Set(static_cast<uint32_t>(j), maxsim_cpu::FeatureName(a.needs[j]));
    row.Set("needs", needs);
    row.Set("admitted", maxsim_cpu::Admitted(a.family, a.set));
    out.Set(static_cast<uint32_t>(i), row);
  }
  return out;
}

}  // namespace

void InitCpu(Napi::Env env, Napi::Object exports) {
  Napi::Object cpu = Napi::Object::New(env);
  cpu.Set("info", Napi::Function::New(env, CpuInfo, "info"));
  cpu.Set("admission", Napi::Function::New(env, CpuAdmission, "admission"));
  cpu.Set("maxsimSync", Napi::Function::New(env, MaxsimSync, "maxsimSync"));
  cpu.Set("maxsimAsync", Napi::Function::New(env, MaxsimAsync, "maxsimAsync"));
  exports.Set("cpu", cpu);
}
