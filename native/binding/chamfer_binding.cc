// Node-API glue for the CPU Chamfer engine (native/cpu/chamfer.h): the nearest-neighbour forward in
// both directions and the backward pass, each run off the JS thread and returned as a Promise.
// Exposed as exports.chamfer.
#include <napi.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "../cpu/chamfer.h"
#include "promise_worker.h"
#include "token_set.h"

namespace {

using maxsim_cpu::PointSpans;

struct ChamferArgs {
  TokenSet p_set;
  TokenSet q_set;
  PointSpans p;
  PointSpans q;
  int64_t p_points = 0;  // compact points of P
  int64_t q_points = 0;
  int threads = 0;
  std::string isa;
};

PointSpans ToPoints(Napi::Env env, const TokenSet& t, const std::string& name) {
  if (t.dtype != DType::Float32) {
    throw Napi::TypeError::New(env, std::string("Expected float32 points for ") + name + " but received " +
                                        DTypeName(t.dtype));
  }
  if (t.dim < 1 || t.dim > maxsim_cpu::kChamferMaxDim) {
    throw Napi::RangeError::New(env, "Expected a dimension in [1, " + std::to_string(maxsim_cpu::kChamferMaxDim) + "] for " + name + ".dim but received " +
                                         std::to_string(t.dim));
  }
  PointSpans s;
  s.data = static_cast<const float*>(t.data);
  s.starts = t.starts;
  s.lengths = t.lengths;
  s.count = t.count;
  s.dim = t.dim;
  return s;
}

int64_t PointCount(const PointSpans& s) {
  int64_t n = 0;
  for (int64_t b = 0; b < s.count; b++) n += s.lengths[b];
  return n;
}

ChamferArgs ParseArgs(const Napi::CallbackInfo& info, size_t options_index) {
  Napi::Env env = info.Env();
  ChamferArgs a;
  a.p_set = ParseTokenSet(env, info[0], "P");
  a.q_set = ParseTokenSet(env, info[1], "Q");
  a.p = ToPoints(env, a.p_set, "P");
  a.q = ToPoints(env, a.q_set, "Q");
  if (a.p.dim != a.q.dim) {
    throw Napi::TypeError::New(env, "Expected Q.dim " + std::to_string(a.p.dim) + " (the dimension of P) but received " +
                                        std::to_string(a.q.dim));
  }
  if (a.p.count != a.q.count) {
    throw Napi::RangeError::New(env, "Expected " + std::to_string(a.p.count) +
                                         " clouds in Q (one per cloud of P) but received " + std::to_string(a.q.count));
  }
  a.p_points = PointCount(a.p);
  a.q_points = PointCount(a.q);
  if (info.Length() > options_index && info[options_index].IsObject()) {
    Napi::Object opts = info[options_index].As<Napi::Object>();
    if (opts.Get("threads").IsNumber()) a.threads = opts.Get("threads").As<Napi::Number>().Int32Value();
    if (opts.Get("isa").IsString()) a.isa = opts.Get("isa").As<Napi::String>().Utf8Value();
  }
  return a;
}

// Runs `work` off the JS thread and resolves with `result` (promise_worker.h).
Napi::Value Queue(Napi::Env env, const std::vector<Napi::Value>& keep_alive, Napi::Object result,
                  std::function<void()> work) {
  return PromiseWorker::Start(env, "maxsim CPU chamfer", keep_alive, result, std::move(work));
}

// forwardAsync(P, Q, { bidirectional, threads, isa }) ->
//   Promise<{ indexPQ, distPQ, indexQP?, distQP?, isa }> (per point, compact order)
Napi::Value ForwardAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ChamferArgs a = ParseArgs(info, 2);
  bool both = true;
  if (info.Length() > 2 && info[2].IsObject()) {
    Napi::Value v = info[2].As<Napi::Object>().Get("bidirectional");
    if (v.IsBoolean()) both = v.As<Napi::Boolean>().Value();
  }
  std::string error;
  const maxsim_cpu::ChamferKernels* kern = maxsim_cpu::SelectChamferKernels(a.isa, &error);
  if (!kern) throw Napi::TypeError::New(env, error);
  Napi::Object result = Napi::Object::New(env);
  Napi::Int32Array idx_pq = Napi::Int32Array::New(env, static_cast<size_t>(a.p_points));
  Napi::Float32Array dist_pq = Napi::Float32Array::New(env, static_cast<size_t>(a.p_points));
  result.Set("indexPQ", idx_pq);
  result.Set("distPQ", dist_pq);
  result.Set("isa", kern->name);
  int32_t* iqp = nullptr;
  float* dqp = nullptr;
  if (both) {
    Napi::Int32Array idx_qp = Napi::Int32Array::New(env, static_cast<size_t>(a.q_points));
    Napi::Float32Array dist_qp = Napi::Float32Array::New(env, static_cast<size_t>(a.q_points));
    result.Set("indexQP", idx_qp);
    result.Set("distQP", dist_qp);
    iqp = idx_qp.Data();
    dqp = dist_qp.Data();
  }
  int32_t* ipq = idx_pq.Data();
  float* dpq = dist_pq.Data();
  return Queue(env, {info[0], info[1]}, result, [a, kern, ipq, dpq, iqp, dqp] {
    maxsim_cpu::ChamferForward(*kern, a.p, a.q, ipq, dpq, iqp, dqp, a.threads);
  });
}

// Every entry of a caller-visible index array must address a point of the paired cloud (or be -1
// exactly where that cloud is empty), so no edit can send a read out of bounds.
void CheckIndices(Napi::Env env, const PointSpans& src, const PointSpans& dst, const int32_t* idx,
                  const std::string& name) {
  int64_t i = 0;
  for (int64_t b = 0; b < src.count; b++) {
    const int32_t m = dst.lengths[b];
    for (int32_t t = 0; t < src.lengths[b]; t++, i++) {
      const int32_t v = idx[i];
      if (m == 0 ? v != -1 : (v < 0 || v >= m)) {
        throw Napi::RangeError::New(env, "Expected " + name + "[" + std::to_string(i) + "] in " +
                                             (m == 0 ? std::string("{-1} (cloud ") + std::to_string(b) + " is empty)"
                                                     : "[0, " + std::to_string(m) + ")") +
                                             " but received " + std::to_string(v));
      }
    }
  }
}

const int32_t* IndexArg(Napi::Env env, const Napi::Value& v, int64_t n, const std::string& name) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array ||
      static_cast<int64_t>(v.As<Napi::Int32Array>().ElementLength()) != n) {
    throw Napi::TypeError::New(env, "Expected an Int32Array of " + std::to_string(n) + " entries for " + name +
                                        " but received another value");
  }
  return v.As<Napi::Int32Array>().Data();
}

const double* WeightArg(Napi::Env env, const Napi::Value& v, int64_t n, const std::string& name) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array ||
      static_cast<int64_t>(v.As<Napi::Float64Array>().ElementLength()) != n) {
    throw Napi::TypeError::New(env, "Expected a Float64Array of " + std::to_string(n) + " entries for " + name +
                                        " but received another value");
  }
  return v.As<Napi::Float64Array>().Data();
}

// backwardAsync(P, Q, indexPQ, weightP, indexQP | null, weightQ | null, { threads }) -> Promise<{ dP, dQ }>
Napi::Value BackwardAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ChamferArgs a = ParseArgs(info, 6);
  CheckDisjoint(env, a.p_set, "P");
  CheckDisjoint(env, a.q_set, "Q");
  const int32_t* ipq = IndexArg(env, info[2], a.p_points, "indexPQ");
  const double* wp = WeightArg(env, info[3], a.p_points, "weightP");
  const int32_t* iqp = nullptr;
  const double* wq = nullptr;
  if (!info[4].IsNull() && !info[4].IsUndefined()) {
    iqp = IndexArg(env, info[4], a.q_points, "indexQP");
    wq = WeightArg(env, info[5], a.q_points, "weightQ");
  }
  CheckIndices(env, a.p, a.q, ipq, "indexPQ");
  if (iqp) CheckIndices(env, a.q, a.p, iqp, "indexQP");
  Napi::Float32Array dp = Napi::Float32Array::New(env, static_cast<size_t>(a.p_set.elements));
  Napi::Float32Array dq = Napi::Float32Array::New(env, static_cast<size_t>(a.q_set.elements));
  Napi::Object result = Napi::Object::New(env);
  result.Set("dP", dp);
  result.Set("dQ", dq);
  float* dp_out = dp.Data();
  float* dq_out = dq.Data();
  return Queue(env, {info[0], info[1], info[2], info[3], info[4], info[5]}, result,
               [a, ipq, wp, iqp, wq, dp_out, dq_out] {
                 maxsim_cpu::ChamferBackward(a.p, a.q, ipq, wp, iqp, wq, dp_out, dq_out, a.threads);
               });
}

Napi::Value Isas(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const auto usable = maxsim_cpu::UsableChamferKernels();
  Napi::Array names = Napi::Array::New(env, usable.size());
  for (size_t i = 0; i < usable.size(); i++) names.Set(static_cast<uint32_t>(i), usable[i]->name);
  return names;
}

}  // namespace

void InitChamfer(Napi::Env env, Napi::Object exports) {
  Napi::Object chamfer = Napi::Object::New(env);
  chamfer.Set("forwardAsync", Napi::Function::New(env, ForwardAsync, "forwardAsync"));
  chamfer.Set("backwardAsync", Napi::Function::New(env, BackwardAsync, "backwardAsync"));
  chamfer.Set("isas", Napi::Function::New(env, Isas, "isas"));
  exports.Set("chamfer", chamfer);
}
