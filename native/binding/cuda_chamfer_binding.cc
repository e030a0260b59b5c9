// Node-API glue for the Chamfer engine on the GPU (native/cuda/chamfer.h), attached to exports.cuda as
// chamferForward / chamferBackward. Host arrays in and out, like the CPU binding (chamfer_binding.cc):
// the forward packs the clouds compact (JS thread), uploads them into a ChamferSession and returns it
// with the results as an opaque `session`; the backward takes that session, so the clouds and the
// argmin stay on the device between the passes.
#include <napi.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../cuda/chamfer.h"
#include "../cuda/kernels/maxsim_chamfer_params.h"
#include "../cuda/runtime.h"
#include "cuda_task.h"
#include "token_set.h"

namespace {

using maxsim_binding::ArgError;
using maxsim_binding::ParseDevice;
using maxsim_binding::TaskChannel;
using maxsim_cuda::ChamferSession;
using maxsim_cuda::Runtime;

// Both clouds of every pair, compact (packed on the JS thread: the inputs may change after).
struct Clouds {
  TokenSet p_set, q_set;
  std::vector<float> p, q;
  maxsim_cuda::ChamferClouds view() const {
    maxsim_cuda::ChamferClouds c;
    c.p = p.data();
    c.q = q.data();
    c.p_off = p_off;
    c.q_off = q_off;
    c.dim = p_set.dim;
    return c;
  }
  std::vector<int64_t> p_off, q_off;
  int64_t tp() const { return p_off.back(); }
  int64_t tq() const { return q_off.back(); }
};

void Pack(const TokenSet& s, std::vector<float>* out, std::vector<int64_t>* off) {
  off->assign(static_cast<size_t>(s.count + 1), 0);
  for (int64_t b = 0; b < s.count; b++) (*off)[b + 1] = (*off)[b] + s.lengths[b];
  out->resize(static_cast<size_t>(off->back() * s.dim));
  const float* data = static_cast<const float*>(s.data);
  for (int64_t b = 0; b < s.count; b++) {
    const float* src = data + static_cast<int64_t>(s.starts[b]) * s.dim;
    std::copy(src, src + s.lengths[b] * s.dim, out->data() + (*off)[b] * s.dim);
  }
}

Clouds ParseClouds(Napi::Env env, const Napi::CallbackInfo& info) {
  Clouds c;
  c.p_set = ParseTokenSet(env, info[1], "P");
  c.q_set = ParseTokenSet(env, info[2], "Q");
  for (const TokenSet* s : {&c.p_set, &c.q_set}) {
    const std::string name = s == &c.p_set ? "P" : "Q";
    if (s->dtype != DType::Float32) throw ArgError(env, name + ".dtype", "'float32' points", DTypeName(s->dtype));
    if (s->dim < 1 || s->dim > MAXSIM_CHAMFER_MAX_DIM) {
      throw ArgError(env, name + ".dim", "a dimension in [1, " + std::to_string(MAXSIM_CHAMFER_MAX_DIM) + "]", std::to_string(s->dim));
    }
  }
  if (c.p_set.dim != c.q_set.dim) throw ArgError(env, "Q.dim", std::to_string(c.p_set.dim), std::to_string(c.q_set.dim));
  if (c.p_set.count != c.q_set.count) {
    throw ArgError(env, "Q.count", std::to_string(c.p_set.count) + " clouds", std::to_string(c.q_set.count));
  }
  Pack(c.p_set, &c.p, &c.p_off);
  Pack(c.q_set, &c.q, &c.q_off);
  if (c.tp() + c.tq() >= (int64_t(1) << 32) - 1) {
    throw ArgError(env, "P, Q", "fewer than 2^32 points in all (the CSR indexes them in 32 bits)",
                   std::to_string(c.tp() + c.tq()));
  }
  return c;
}

// A table of the plan: a Float64Array of integers (exact below 2^53).
std::vector<int64_t> PlanTable(Napi::Env env, const Napi::Object& plan, const char* key) {
  const std::string name = std::string("plan.") + key;
  Napi::Value v = plan.Get(key);
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) {
    throw ArgError(env, name, "a Float64Array (src/backends/cuda-chamfer-plan.ts)", maxsim_binding::Describe(v));
  }
  const Napi::Float64Array a = v.As<Napi::Float64Array>();
  std::vector<int64_t> out(a.ElementLength());
  for (size_t i = 0; i < out.size(); i++) {
    const double x = a[i];
    if (!(x >= 0 && x <= 9007199254740991.0 && x == static_cast<double>(static_cast<int64_t>(x)))) {
      throw ArgError(env, name + "[" + std::to_string(i) + "]", "an integer in [0, 2^53)", std::to_string(x));
    }
    out[i] = static_cast<int64_t>(x);
  }
  return out;
}

// options.plan of chamferForward: { clouds, units } (the TypeScript planner's tables).
maxsim_cuda::ChamferPlan ParsePlan(Napi::Env env, const Napi::Value& v) {
  if (!v.IsObject()) throw ArgError(env, "options.plan", "the plan object of the TypeScript planner", maxsim_binding::Describe(v));
  maxsim_cuda::ChamferPlan plan;
  plan.clouds = PlanTable(env, v.As<Napi::Object>(), "clouds");
  plan.units = PlanTable(env, v.As<Napi::Object>(), "units");
  return plan;
}

// The session handed to JS: an External holding a shared_ptr (the memory goes back through the
// device's worker thread when JS drops it), tagged so that a foreign External is refused.
constexpr napi_type_tag kSessionTag = {0x6d617873696d4368ull, 0x616d666572536573ull};
using SessionRef = std::shared_ptr<ChamferSession>;

// The session's device bytes are reported to V8 as external memory, so that a training loop that
// drops its results triggers collections (and frees the GPU memory) in step with their size.
int64_t SessionBytes(const ChamferSession& s) {
  const int64_t T = s.tp() + s.tq();
  return T * s.dim() * 4 + T * (s.dim() + 1) * 4 + T * 8 + (s.pairs() + 1) * 16;
}

Napi::Value WrapSession(Napi::Env env, SessionRef s) {
  const int64_t bytes = SessionBytes(*s);
  Napi::MemoryManagement::AdjustExternalMemory(env, bytes);
  auto ext = Napi::External<SessionRef>::New(env, new SessionRef(std::move(s)), [bytes](Napi::Env env, SessionRef* p) {
    delete p;
    Napi::MemoryManagement::AdjustExternalMemory(env, -bytes);
  });
  ext.TypeTag(&kSessionTag);
  return ext;
}

SessionRef UnwrapSession(Napi::Env env, const Napi::Value& v) {
  if (!v.IsExternal() || !v.As<Napi::External<SessionRef>>().CheckTypeTag(&kSessionTag)) {
    throw ArgError(env, "session", "the session of a CUDA chamferForward", maxsim_binding::Describe(v));
  }
  return *v.As<Napi::External<SessionRef>>().Data();
}

// ---------------------------------------------------------------------------------------------
// chamferForward(device, P, Q, { bidirectional, prune })
//   -> Promise<{ indexPQ, distPQ, indexQP?, distQP?, kernelMs, session }>

class ForwardTask : public maxsim_binding::CudaTask {
 public:
  ForwardTask(Napi::Env env, Runtime* rt) : CudaTask(env, "CUDA chamfer failed: "), rt_(rt) {}
  Clouds c;
  bool both = true, prune = true;
  maxsim_cuda::ChamferPlan plan;
  int32_t *ipq = nullptr, *iqp = nullptr;
  float *dpq = nullptr, *dqp = nullptr;
  SessionRef session;
  double kernel_ms = 0;
  Napi::ObjectReference result;

  void Run() override {
    rt_->EnsureReady();
    session = std::make_shared<ChamferSession>(*rt_, c.view());
    kernel_ms = session->Forward(plan, both, ipq, dpq, iqp, dqp, prune).kernel_ms;
  }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object r = result.Value();
    r.Set("kernelMs", kernel_ms);
    r.Set("session", WrapSession(env, std::move(session)));
    return r;
  }

 private:
  Runtime* rt_;
};

Napi::Value ChamferForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  Runtime* rt = ParseDevice(env, info[0]);
  auto task = std::make_unique<ForwardTask>(env, rt);
  task->c = ParseClouds(env, info);
  if (!info[3].IsObject()) throw ArgError(env, "options", "an object with the plan", maxsim_binding::Describe(info[3]));
  const Napi::Object opts = info[3].As<Napi::Object>();
  Napi::Value v = opts.Get("bidirectional");
  if (v.IsBoolean()) task->both = v.As<Napi::Boolean>().Value();
  Napi::Value pr = opts.Get("prune");
  if (pr.IsBoolean()) task->prune = pr.As<Napi::Boolean>().Value();
  task->plan = ParsePlan(env, opts.Get("plan"));
  try {
    maxsim_cuda::CheckChamferPlan(task->plan, task->c.p_off, task->c.q_off, task->c.p_set.dim, task->both);
  } catch (const std::invalid_argument& e) {
    throw Napi::RangeError::New(env, e.what());
  }
  Napi::Object result = Napi::Object::New(env);
  Napi::Int32Array ipq = Napi::Int32Array::New(env, static_cast<size_t>(task->c.tp()));
  Napi::Float32Array dpq = Napi::Float32Array::New(env, static_cast<size_t>(task->c.tp()));
  result.Set("indexPQ", ipq);
  result.Set("distPQ", dpq);
  result.Set("isa", "cuda");
  task->ipq = ipq.Data();
  task->dpq = dpq.Data();
  if (task->both) {
    Napi::Int32Array iqp = Napi::Int32Array::New(env, static_cast<size_t>(task->c.tq()));
    Napi::Float32Array dqp = Napi::Float32Array::New(env, static_cast<size_t>(task->c.tq()));
    result.Set("indexQP", iqp);
    result.Set("distQP", dqp);
    task->iqp = iqp.Data();
    task->dqp = dqp.Data();
  }
  task->result = Napi::Persistent(result);
  return channel->Submit(env, rt, std::move(task));
}

// ---------------------------------------------------------------------------------------------
// chamferBackward(device, P, Q, session, weightP, weightQ | null, { path })
//   -> Promise<{ dP, dQ, path, kernelMs }> (dP / dQ in the layout of the input buffers P / Q, which
//   must be the forward's). path: 'csr' (default, deterministic, bitwise the CPU engine's) or
//   'atomic' (float atomics, for comparison).

class BackwardTask : public maxsim_binding::CudaTask {
 public:
  BackwardTask(Napi::Env env, Runtime* rt) : CudaTask(env, "CUDA chamfer backward failed: "), rt_(rt) {}
  SessionRef session;
  TokenSet p_set, q_set;
  std::vector<int64_t> p_off, q_off;
  std::vector<double> w;  // [sources]: weightP then weightQ (copied on the JS thread)
  bool atomic = false;
  float *dp_out = nullptr, *dq_out = nullptr;
  double kernel_ms = 0;
  Napi::ObjectReference result;

  void Run() override {
    rt_->EnsureReady();
    const int64_t tp = session->tp(), dim = session->dim();
    std::vector<float> g(static_cast<size_t>((tp + session->tq()) * dim));
    kernel_ms = session->Backward(w.data(), atomic, g.data()).kernel_ms;
    // Compact rows back into the layout of the input buffers.
    for (int side = 0; side < 2; side++) {
      const TokenSet& s = side == 0 ? p_set : q_set;
      const std::vector<int64_t>& off = side == 0 ? p_off : q_off;
      const float* src = g.data() + (side == 0 ? 0 : tp * dim);
      float* out = side == 0 ? dp_out : dq_out;
      for (int64_t b = 0; b + 1 < static_cast<int64_t>(off.size()); b++) {
        std::copy(src + off[b] * dim, src + off[b + 1] * dim, out + static_cast<int64_t>(s.starts[b]) * dim);
      }
    }
  }
  Napi::Value Result(Napi::Env) override {
    Napi::Object r = result.Value();
    r.Set("kernelMs", kernel_ms);
    return r;
  }

 private:
  Runtime* rt_;
};

const double* Float64Arg(Napi::Env env, const Napi::Value& v, int64_t n, const std::string& name) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array ||
      static_cast<int64_t>(v.As<Napi::Float64Array>().ElementLength()) != n) {
    throw ArgError(env, name, "a Float64Array of " + std::to_string(n) + " entries", maxsim_binding::Describe(v));
  }
  return v.As<Napi::Float64Array>().Data();
}

Napi::Value ChamferBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  Runtime* rt = ParseDevice(env, info[0]);
  auto task = std::make_unique<BackwardTask>(env, rt);
  task->p_set = ParseTokenSet(env, info[1], "P");
  task->q_set = ParseTokenSet(env, info[2], "Q");
  CheckDisjoint(env, task->p_set, "P");
  CheckDisjoint(env, task->q_set, "Q");
  task->session = UnwrapSession(env, info[3]);
  const ChamferSession& s = *task->session;
  // The layout the gradients go back into: the forward's clouds (same counts, lengths and dim).
  for (int side = 0; side < 2; side++) {
    const TokenSet& set = side == 0 ? task->p_set : task->q_set;
    std::vector<int64_t>& off = side == 0 ? task->p_off : task->q_off;
    off.assign(static_cast<size_t>(set.count + 1), 0);
    for (int64_t b = 0; b < set.count; b++) off[b + 1] = off[b] + set.lengths[b];
    const int64_t want = side == 0 ? s.tp() : s.tq();
    if (set.count != s.pairs() || off.back() != want || set.dim != s.dim()) {
      throw ArgError(env, side == 0 ? "P" : "Q",
                     "the forward pass's clouds (" + std::to_string(s.pairs()) + " clouds, " + std::to_string(want) +
                         " points of dimension " + std::to_string(s.dim()) + ")",
                     std::to_string(set.count) + " clouds, " + std::to_string(off.back()) + " points of dimension " +
                         std::to_string(set.dim));
    }
  }
  const double* wp = Float64Arg(env, info[4], s.tp(), "weightP");
  task->w.assign(wp, wp + s.tp());
  const bool both = !info[5].IsNull() && !info[5].IsUndefined();
  if (both != s.bidirectional()) {
    throw ArgError(env, "weightQ", s.bidirectional() ? "a Float64Array (the forward was bidirectional)" : "null (the forward was P -> Q only)",
                   maxsim_binding::Describe(info[5]));
  }
  if (both) {
    const double* wq = Float64Arg(env, info[5], s.tq(), "weightQ");
    task->w.insert(task->w.end(), wq, wq + s.tq());
  }
  std::string path = "csr";
  if (info[6].IsObject()) {
    Napi::Value v = info[6].As<Napi::Object>().Get("path");
    if (v.IsString()) path = v.As<Napi::String>().Utf8Value();
  }
  if (path != "csr" && path != "atomic") throw ArgError(env, "path", "'csr' or 'atomic'", "'" + path + "'");
  task->atomic = path == "atomic";
  Napi::Float32Array dp = Napi::Float32Array::New(env, static_cast<size_t>(task->p_set.elements));
  Napi::Float32Array dq = Napi::Float32Array::New(env, static_cast<size_t>(task->q_set.elements));
  Napi::Object result = Napi::Object::New(env);
  result.Set("dP", dp);
  result.Set("dQ", dq);
  result.Set("path", path);
  task->dp_out = dp.Data();
  task->dq_out = dq.Data();
  task->result = Napi::Persistent(result);
  return channel->Submit(env, rt, std::move(task));
}

}  // namespace

void InitCudaChamfer(Napi::Env env, Napi::Object exports) {
  TaskChannel* channel = TaskChannel::Create(env, "maxsim.cuda.chamfer");
  Napi::Value cuda = exports.Get("cuda");
  if (!cuda.IsObject()) throw Napi::Error::New(env, "InitCudaChamfer must run after InitCuda (exports.cuda is missing)");
  Napi::Object o = cuda.As<Napi::Object>();
  o.Set("chamferForward", Napi::Function::New(env, ChamferForward, "chamferForward", channel));
  o.Set("chamferBackward", Napi::Function::New(env, ChamferBackward, "chamferBackward", channel));
}
