// Node-API glue for MaxSim training on the GPU: trainForward / trainBackward / trainBackwardState /
// trainArgmax / trainRelease on exports.cuda, and cuda.trainKernelInfo (the launch constants the
// TypeScript planner needs, from kernels/maxsim_train_params.h). Each entry point unpacks its
// arguments and the plan TypeScript chose (src/backends/cuda-train-plan.ts), runs the engine
// (native/cuda/train_engine.h) on the device's worker thread and wraps the result; the JS thread never
// waits on the GPU. A malformed plan is refused before the device is touched.
#include <napi.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "../cuda/runtime.h"
#include "../cuda/train_engine.h"
#include "cuda_task.h"
#include "token_set.h"

namespace {

using maxsim_cuda::DeviceTokens;
using maxsim_cuda::Runtime;
using maxsim_cuda::train::BackwardJob;
using maxsim_cuda::train::BackwardPlan;
using maxsim_cuda::train::ContrastiveLoss;
using maxsim_cuda::train::DDPath;
using maxsim_cuda::train::ForwardJob;
using maxsim_cuda::train::ForwardPlan;
using maxsim_cuda::train::FwdKernel;
using maxsim_cuda::train::Problem;
using maxsim_cuda::train::TrainState;

using maxsim_binding::ArgError;
using maxsim_binding::Describe;
using maxsim_binding::GetInteger;
using maxsim_binding::ParseDevice;
using maxsim_binding::TaskChannel;
using TrainTask = maxsim_binding::CudaTask;

// A host batch (kept alive until the job ends) or a device token set of `rt`'s device: float, packed
// (not a select() view: a view may repeat items, whose gradient rows would have two owners).
TokenSet ParseSide(Napi::Env env, const Napi::Value& v, const std::string& name, TrainTask* task, const Runtime* rt,
                   std::shared_ptr<DeviceTokens>* dev) {
  if (maxsim_binding::IsDeviceSet(env, v)) {
    maxsim_binding::DeviceSetArg s = maxsim_binding::GetDeviceSet(env, v, name);
    if (s.device != rt->props().index) {
      throw ArgError(env, name, "a device token set on device " + std::to_string(rt->props().index),
                     "one on device " + std::to_string(s.device));
    }
    if (s.dtype == DType::Int8) {
      throw ArgError(env, name + ".dtype", "'float32', 'float16' or 'bfloat16' (training takes float inputs)",
                     s.e4m3 ? "'fp8'" : "'int8'");
    }
    if (s.view) throw ArgError(env, name, "a corpus made by upload() or alloc()", "a view made by select()");
    TokenSet t;
    t.dtype = s.dtype;
    t.dim = s.dim;
    t.count = s.count;
    t.elements = s.tokens * s.dim;
    t.max_length = s.max_length;
    *dev = s.set;
    return t;
  }
  TokenSet t = ParseTokenSet(env, v, name);
  if (t.dtype == DType::Int8) {
    throw ArgError(env, name + ".dtype", "'float32', 'float16' or 'bfloat16' (training takes float inputs)", "'int8'");
  }
  Napi::Object o = v.As<Napi::Object>();
  task->Keep(o.Get("data"));
  task->Keep(o.Get("starts"));
  task->Keep(o.Get("lengths"));
  return t;
}

// (queries, docs, { pairs, stride }) at info[first], info[first + 1], info[options].
Problem ParseProblem(const Napi::CallbackInfo& info, size_t first, size_t options, TrainTask* task, const Runtime* rt) {
  Napi::Env env = info.Env();
  Problem a;
  a.q = ParseSide(env, info[first], "queries", task, rt, &a.q_dev);
  a.d = ParseSide(env, info[first + 1], "docs", task, rt, &a.d_dev);
  if (a.q.dim != a.d.dim) {
    throw ArgError(env, "queries.dim", std::to_string(a.d.dim) + " (the dimension of docs)", std::to_string(a.q.dim));
  }
  if (!info[options].IsObject()) throw ArgError(env, "options", "an object { pairs, stride }", "another value");
  Napi::Object opts = info[options].As<Napi::Object>();
  const std::string pairs = opts.Get("pairs").ToString().Utf8Value();
  if (pairs == "diagonal") {
    a.pairs = 1;
  } else if (pairs != "all") {
    throw ArgError(env, "pairs", "'all' or 'diagonal'", "'" + pairs + "'");
  }
  if (a.pairs == 1 && a.q.count != a.d.count) {
    throw Napi::RangeError::New(env, "Expected as many queries as docs (" + std::to_string(a.d.count) +
                                         ") for pairs 'diagonal' but received " + std::to_string(a.q.count));
  }
  const double stride = opts.Get("stride").ToNumber().DoubleValue();
  if (!(stride >= static_cast<double>(a.q.max_length) && stride <= 2147483647.0 &&
        stride == static_cast<double>(static_cast<int64_t>(stride)))) {
    throw Napi::RangeError::New(env, "Expected an integer >= " + std::to_string(a.q.max_length) +
                                         " (the longest query) for stride but received " + std::to_string(stride));
  }
  a.stride = static_cast<int64_t>(stride);
  a.num_pairs = a.pairs == 0 ? a.q.count * a.d.count : a.q.count;
  if (static_cast<double>(a.num_pairs) * static_cast<double>(std::max<int64_t>(a.stride, 1)) > 4294967295.0) {
    throw Napi::RangeError::New(env, "Expected at most 2^32 - 1 argmax entries (pairs x longest query) but received " +
                                         std::to_string(static_cast<double>(a.num_pairs) * static_cast<double>(a.stride)));
  }
  return a;
}


// Runs a plan check of the engine; its std::invalid_argument becomes a RangeError.
template <typename F>
void CheckPlan(Napi::Env env, F&& check) {
  try {
    check();
  } catch (const std::invalid_argument& e) {
    throw Napi::RangeError::New(env, e.what());
  }
}

Napi::Object PlanObject(Napi::Env env, const Napi::Object& opts) {
  Napi::Value v = opts.Get("plan");
  if (!v.IsObject()) throw ArgError(env, "options.plan", "the plan object of the TypeScript planner", Describe(v));
  return v.As<Napi::Object>();
}

bool GetBool(Napi::Env env, const Napi::Object& o, const char* key, const std::string& name) {
  Napi::Value v = o.Get(key);
  if (!v.IsBoolean()) throw ArgError(env, name, "a boolean", Describe(v));
  return v.As<Napi::Boolean>().Value();
}

bool OptionalTrue(const Napi::Object& opts, const char* key) {
  Napi::Value v = opts.Get(key);
  return v.IsBoolean() && v.As<Napi::Boolean>().Value();
}

constexpr int64_t kInt32Max = 2147483647;

// options.plan of trainForward: { kernel: 'wgmma' | 'mma' | 'simt', threads, smem, grid, argmax16,
// queryChunk, docGroups, tma }.
ForwardPlan ParseForwardPlan(Napi::Env env, const Napi::Object& opts) {
  Napi::Object o = PlanObject(env, opts);
  ForwardPlan plan;
  Napi::Value k = o.Get("kernel");
  const std::string kernel = k.IsString() ? k.As<Napi::String>().Utf8Value() : std::string();
  if (kernel == "wgmma") {
    plan.kernel = FwdKernel::kWgmma;
  } else if (kernel == "mma") {
    plan.kernel = FwdKernel::kMma;
  } else if (kernel != "simt") {
    throw ArgError(env, "plan.kernel", "'wgmma', 'mma' or 'simt'", Describe(k));
  }
  plan.threads = static_cast<uint32_t>(GetInteger(env, o.Get("threads"), "plan.threads", 1, 1024));
  plan.smem = static_cast<uint32_t>(GetInteger(env, o.Get("smem"), "plan.smem", 0, kInt32Max));
  plan.grid = GetInteger(env, o.Get("grid"), "plan.grid", 0, kInt32Max);
  plan.argmax16 = GetBool(env, o, "argmax16", "plan.argmax16");
  plan.query_chunk = GetInteger(env, o.Get("queryChunk"), "plan.queryChunk", 0, kInt32Max);
  plan.doc_groups = GetInteger(env, o.Get("docGroups"), "plan.docGroups", 0, kInt32Max);
  plan.tma = GetBool(env, o, "tma", "plan.tma");
  CheckPlan(env, [&] { maxsim_cuda::train::CheckForwardPlan(plan); });
  return plan;
}

// options.plan of the backward entry points: { dD: 'csr' | 'atomic' | 'auto', autoAtomicDistinct,
// csrChunk, blocks, argmax16 }.
BackwardPlan ParseBackwardPlan(Napi::Env env, const Napi::Object& opts) {
  Napi::Object o = PlanObject(env, opts);
  BackwardPlan plan;
  Napi::Value path = o.Get("dD");
  const std::string s = path.IsString() ? path.As<Napi::String>().Utf8Value() : std::string();
  if (s == "atomic") {
    plan.dd = DDPath::kAtomic;
  } else if (s == "auto") {
    plan.dd = DDPath::kAuto;
  } else if (s != "csr") {
    throw ArgError(env, "plan.dD", "'csr', 'atomic' or 'auto'", Describe(path));
  }
  Napi::Value t = o.Get("autoAtomicDistinct");
  if (!t.IsNumber()) throw ArgError(env, "plan.autoAtomicDistinct", "a number", Describe(t));
  plan.auto_atomic_distinct = t.As<Napi::Number>().DoubleValue();
  plan.csr_chunk = GetInteger(env, o.Get("csrChunk"), "plan.csrChunk", 1, kInt32Max);
  // blocks: Int32Array [blocks, 4]: docEnd, byBlock (0 / 1), qblocks, qblockSize
  Napi::Value bv = o.Get("blocks");
  if (!bv.IsTypedArray() || bv.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array ||
      bv.As<Napi::TypedArray>().ElementLength() % 4 != 0) {
    throw ArgError(env, "plan.blocks", "an Int32Array of 4 numbers per CSR block", Describe(bv));
  }
  const Napi::Int32Array blocks = bv.As<Napi::Int32Array>();
  for (size_t i = 0; i < blocks.ElementLength(); i += 4) {
    if (blocks[i + 1] != 0 && blocks[i + 1] != 1) {
      throw ArgError(env, "plan.blocks[" + std::to_string(i / 4) + "].byBlock", "0 or 1", std::to_string(blocks[i + 1]));
    }
    plan.blocks.push_back({blocks[i], blocks[i + 1] == 1, blocks[i + 2], blocks[i + 3]});
  }
  plan.argmax16 = GetBool(env, o, "argmax16", "plan.argmax16");
  CheckPlan(env, [&] { maxsim_cuda::train::CheckBackwardPlan(plan); });
  return plan;
}

Napi::Value PhasesToJs(Napi::Env env, const maxsim_cuda::train::Phases& phases) {
  Napi::Object o = Napi::Object::New(env);
  for (const auto& [name, ms] : phases) o.Set(name, Napi::Number::New(env, ms));
  return o;
}

// ---------------------------------------------------------------------------------------------
// Device-resident training: the state a forward with keep leaves on the device, handed to JS as an
// External with a type tag. The backward reads it and, unless asked to retain it, drops it;
// trainRelease (TS: dispose) drops it at once.

struct StateHolder {
  std::shared_ptr<TrainState> state;
};

constexpr napi_type_tag kStateTag = {0x6d617873696d7472ULL, 0x61696e7374617465ULL};

Napi::Value WrapState(Napi::Env env, std::shared_ptr<TrainState> state) {
  auto ext = Napi::External<StateHolder>::New(env, new StateHolder{std::move(state)},
                                              [](Napi::Env, StateHolder* h) { delete h; });
  ext.TypeTag(&kStateTag);
  return ext;
}

// The holder behind a state handle; TypeError naming `name` for anything else.
StateHolder* UnwrapState(Napi::Env env, const Napi::Value& v, const std::string& name) {
  if (!v.IsExternal() || !v.As<Napi::External<StateHolder>>().CheckTypeTag(&kStateTag)) {
    throw ArgError(env, name, "the state of a device-resident training forward", maxsim_binding::Describe(v));
  }
  return v.As<Napi::External<StateHolder>>().Data();
}

// The live state (an error naming `name` once it was released or consumed by a backward pass).
std::shared_ptr<TrainState> LiveState(Napi::Env env, const Napi::Value& v, const std::string& name, Runtime* rt) {
  std::shared_ptr<TrainState> s = UnwrapState(env, v, name)->state;
  if (!s) {
    throw ArgError(env, name, "a live training state",
                   "one already released (a backward pass without retain, or dispose())");
  }
  if (s->rt != rt) {
    throw ArgError(env, "device", "the device of the training state (" + std::to_string(s->rt->props().index) + ")",
                   std::to_string(rt->props().index));
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// trainForward(device, queries, docs, { pairs, stride, plan, keep?, profile? })
//   -> Promise<{ scores, argmax, stride }>, or with keep: Promise<{ scores, stride, state }> (the
//   argmax stays on the device). queries / docs: host batches or device token sets.

class ForwardTask : public TrainTask {
 public:
  ForwardTask(Napi::Env env, Runtime* rt) : TrainTask(env, "CUDA training failed: "), rt_(rt) {}
  ForwardJob job;
  Napi::ObjectReference result;
  void Run() override { maxsim_cuda::train::RunForward(rt_, job); }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object o = result.Value();
    if (job.keep) o.Set("state", WrapState(env, std::move(job.state)));
    if (job.profile) o.Set("profileMs", PhasesToJs(env, job.phases));
    return o;
  }

 private:
  Runtime* rt_;
};

Napi::Value TrainForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  if (!info[3].IsObject()) throw ArgError(env, "options", "an object { pairs, stride, plan }", Describe(info[3]));
  Napi::Object opts = info[3].As<Napi::Object>();
  const ForwardPlan plan = ParseForwardPlan(env, opts);
  Runtime* rt = ParseDevice(env, info[0]);
  auto task = std::make_unique<ForwardTask>(env, rt);
  ForwardJob& job = task->job;
  job.a = ParseProblem(info, 1, 3, task.get(), rt);
  const Problem& a = job.a;
  CheckPlan(env, [&] { maxsim_cuda::train::CheckForwardPlan(plan, a, rt->props().cc_major); });
  job.plan = plan;
  job.profile = OptionalTrue(opts, "profile");
  job.keep = OptionalTrue(opts, "keep");
  if (!job.keep && (a.q_dev || a.d_dev)) {
    throw ArgError(env, "options.keep", "true for device-resident queries or docs (the argmax stays on the device)",
                   "false");
  }
  Napi::Float32Array scores = Napi::Float32Array::New(env, static_cast<size_t>(a.num_pairs));
  Napi::Object result = Napi::Object::New(env);
  result.Set("scores", scores);
  result.Set("stride", Napi::Number::New(env, static_cast<double>(a.stride)));
  job.scores_out = scores.Data();
  if (!job.keep) {
    Napi::Int32Array argmax = Napi::Int32Array::New(env, static_cast<size_t>(a.num_pairs * a.stride));
    result.Set("argmax", argmax);
    job.argmax_out = argmax.Data();
  }
  task->result = Napi::Persistent(result);
  return channel->Submit(env, rt, std::move(task));
}

// ---------------------------------------------------------------------------------------------
// trainBackward(device, queries, docs, argmax, gradScores, { pairs, stride, plan, profile? })
//   -> Promise<{ dQ, dD, dDPath }> (dDPath: the path that ran, 'auto' resolved).
// trainBackwardState(device, state, gradScores, { plan, retain?, outputDtype?, profile? })
//   -> Promise<{ dQ, dD, dDPath, loss? }>: device token sets with the items of the queries and docs,
//   float32 or (outputDtype 'input') each in its input's dtype. Without retain the state is released
//   now (a second backward fails with a clear error) and its memory returns once this job is done.

class BackwardTask : public TrainTask {
 public:
  BackwardTask(Napi::Env env, Runtime* rt) : TrainTask(env, "CUDA training failed: "), rt_(rt) {}
  BackwardJob job;
  Napi::ObjectReference result;
  void Run() override { maxsim_cuda::train::RunBackward(rt_, job); }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object o = result.Value();
    if (job.state) {
      o.Set("dQ", maxsim_binding::WrapDeviceSet(env, std::move(job.dq_set)));
      o.Set("dD", maxsim_binding::WrapDeviceSet(env, std::move(job.dd_set)));
    }
    o.Set("dDPath", Napi::String::New(env, job.ran_atomic ? "atomic" : "csr"));
    if (job.profile) o.Set("profileMs", PhasesToJs(env, job.phases));
    return o;
  }

 private:
  Runtime* rt_;
};

Napi::Value TrainBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  if (!info[5].IsObject()) throw ArgError(env, "options", "an object { pairs, stride, plan }", Describe(info[5]));
  Napi::Object opts = info[5].As<Napi::Object>();
  const BackwardPlan plan = ParseBackwardPlan(env, opts);
  Runtime* rt = ParseDevice(env, info[0]);
  auto task = std::make_unique<BackwardTask>(env, rt);
  BackwardJob& job = task->job;
  job.a = ParseProblem(info, 1, 5, task.get(), rt);
  const Problem& a = job.a;
  if (a.q_dev || a.d_dev) {
    throw ArgError(env, a.q_dev ? "queries" : "docs", "a host batch (device-resident inputs train through trainBackwardState)",
                   "a device token set");
  }
  CheckDisjoint(env, a.q, "queries");
  CheckDisjoint(env, a.d, "docs");
  CheckPlan(env, [&] { maxsim_cuda::train::CheckBackwardPlan(plan, a); });
  if (!info[3].IsTypedArray() || info[3].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array ||
      static_cast<int64_t>(info[3].As<Napi::Int32Array>().ElementLength()) != a.num_pairs * a.stride) {
    throw ArgError(env, "argmax", "an Int32Array of " + std::to_string(a.num_pairs * a.stride) + " entries", "another value");
  }
  if (!info[4].IsTypedArray() || info[4].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array ||
      static_cast<int64_t>(info[4].As<Napi::Float64Array>().ElementLength()) != a.num_pairs) {
    throw ArgError(env, "gradScores", "a Float64Array of " + std::to_string(a.num_pairs) + " entries", "another value");
  }
  job.plan = plan;
  job.profile = OptionalTrue(opts, "profile");
  // The argmax entries are checked on the worker thread while they are narrowed (engine: UploadArgmax).
  task->Keep(info[3]);
  task->Keep(info[4]);
  job.argmax_in = info[3].As<Napi::Int32Array>().Data();
  job.grad_in = info[4].As<Napi::Float64Array>().Data();
  Napi::Float32Array dq = Napi::Float32Array::New(env, static_cast<size_t>(a.q.elements));
  Napi::Float32Array dd = Napi::Float32Array::New(env, static_cast<size_t>(a.d.elements));
  Napi::Object result = Napi::Object::New(env);
  result.Set("dQ", dq);
  result.Set("dD", dd);
  job.dq_out = dq.Data();
  job.dd_out = dd.Data();
  task->result = Napi::Persistent(result);
  return channel->Submit(env, rt, std::move(task));
}

// backwardOptions.contrastive of trainStep: { temperature, labels? } (labels: an Int32Array of one
// document index per query, copied now), checked against the state's problem.
ContrastiveLoss ParseContrastive(Napi::Env env, const Napi::Value& v, const Problem& a) {
  if (!v.IsObject()) throw ArgError(env, "options.contrastive", "an object { temperature, labels? }", Describe(v));
  Napi::Object o = v.As<Napi::Object>();
  ContrastiveLoss c;
  Napi::Value tau = o.Get("temperature");
  if (!tau.IsNumber()) throw ArgError(env, "temperature", "a finite number > 0", Describe(tau));
  c.tau = tau.As<Napi::Number>().DoubleValue();
  Napi::Value labels = o.Get("labels");
  if (!labels.IsUndefined()) {
    if (!labels.IsTypedArray() || labels.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
      throw ArgError(env, "labels", "an Int32Array of " + std::to_string(a.q.count) + " entries (one per query)",
                     Describe(labels));
    }
    Napi::Int32Array l = labels.As<Napi::Int32Array>();
    c.labels.assign(l.Data(), l.Data() + l.ElementLength());
    if (c.labels.empty()) {  // empty would mean the diagonal: refuse it as the wrong length
      throw ArgError(env, "labels", "an Int32Array of " + std::to_string(a.q.count) + " entries (one per query)",
                     "0 entries");
    }
  }
  CheckPlan(env, [&] { maxsim_cuda::train::CheckContrastive(c, a); });
  return c;
}

// options.outputDtype of the device-resident backward: 'float32' (default) or 'input' (true).
bool InputDtype(Napi::Env env, const Napi::Object& opts) {
  Napi::Value out = opts.Get("outputDtype");
  if (out.IsUndefined()) return false;
  const std::string s = out.IsString() ? out.As<Napi::String>().Utf8Value() : std::string("?");
  if (s != "float32" && s != "input") throw ArgError(env, "outputDtype", "'float32' or 'input'", "'" + s + "'");
  return s == "input";
}

Napi::Value TrainBackwardState(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  if (!info[3].IsObject()) throw ArgError(env, "options", "an object { plan }", Describe(info[3]));
  Napi::Object opts = info[3].As<Napi::Object>();
  const BackwardPlan plan = ParseBackwardPlan(env, opts);
  Runtime* rt = ParseDevice(env, info[0]);
  std::shared_ptr<TrainState> state = LiveState(env, info[1], "state", rt);
  auto task = std::make_unique<BackwardTask>(env, rt);
  BackwardJob& job = task->job;
  job.a = state->a;
  job.a.Rebind();
  CheckPlan(env, [&] { maxsim_cuda::train::CheckBackwardPlan(plan, job.a); });
  const int64_t pairs = job.a.num_pairs;
  if (!info[2].IsTypedArray() || info[2].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array ||
      static_cast<int64_t>(info[2].As<Napi::Float64Array>().ElementLength()) != pairs) {
    throw ArgError(env, "gradScores", "a Float64Array of " + std::to_string(pairs) + " entries", Describe(info[2]));
  }
  job.plan = plan;  // plan.argmax16 is not used: the state's argmax is as the forward stored it
  job.profile = OptionalTrue(opts, "profile");
  job.input_dtype = InputDtype(env, opts);
  task->Keep(info[2]);
  job.grad_in = info[2].As<Napi::Float64Array>().Data();
  job.state = state;
  if (!OptionalTrue(opts, "retain")) UnwrapState(env, info[1], "state")->state.reset();
  task->result = Napi::Persistent(Napi::Object::New(env));
  return channel->Submit(env, rt, std::move(task));
}

// trainStep(device, queries, docs, forwardOptions, backwardOptions) -> Promise<{ scores, loss, dQ,
//   dD, dDPath }> or Promise<{ scores, emptyPositive }>: a contrastive step of device-resident inputs
//   as one job (RunStep). forwardOptions as trainForward's ({ pairs, stride, plan }; keep implied, no
//   profile), backwardOptions as trainBackwardState's ({ plan, outputDtype? }) plus contrastive:
//   { temperature, labels? }. emptyPositive: the first query whose
//   positive document has no tokens (the job stops before the backward; the caller raises the error).
class StepTask : public TrainTask {
 public:
  StepTask(Napi::Env env, Runtime* rt) : TrainTask(env, "CUDA training failed: "), rt_(rt) {}
  maxsim_cuda::train::StepJob job;
  Napi::ObjectReference result;
  void Run() override { maxsim_cuda::train::RunStep(rt_, job); }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object o = result.Value();
    if (job.empty_positive >= 0) {
      o.Set("emptyPositive", Napi::Number::New(env, static_cast<double>(job.empty_positive)));
      return o;
    }
    BackwardJob& b = job.backward;
    o.Set("dQ", maxsim_binding::WrapDeviceSet(env, std::move(b.dq_set)));
    o.Set("dD", maxsim_binding::WrapDeviceSet(env, std::move(b.dd_set)));
    o.Set("dDPath", Napi::String::New(env, b.ran_atomic ? "atomic" : "csr"));
    o.Set("loss", Napi::Number::New(env, b.contrastive->loss));
    return o;
  }

 private:
  Runtime* rt_;
};

Napi::Value TrainStep(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  if (!info[3].IsObject()) throw ArgError(env, "forwardOptions", "an object { pairs, stride, plan }", Describe(info[3]));
  if (!info[4].IsObject()) throw ArgError(env, "backwardOptions", "an object { plan, contrastive }", Describe(info[4]));
  Napi::Object fopts = info[3].As<Napi::Object>(), bopts = info[4].As<Napi::Object>();
  const ForwardPlan fplan = ParseForwardPlan(env, fopts);
  const BackwardPlan bplan = ParseBackwardPlan(env, bopts);
  Runtime* rt = ParseDevice(env, info[0]);
  auto task = std::make_unique<StepTask>(env, rt);
  maxsim_cuda::train::StepJob& job = task->job;
  job.forward.a = ParseProblem(info, 1, 3, task.get(), rt);
  const Problem& a = job.forward.a;
  if (!a.q_dev && !a.d_dev) {
    throw ArgError(env, "queries", "device-resident queries or docs (host batches train through trainForward)",
                   "host batches");
  }
  CheckPlan(env, [&] {
    maxsim_cuda::train::CheckForwardPlan(fplan, a, rt->props().cc_major);
    maxsim_cuda::train::CheckBackwardPlan(bplan, a);
  });
  job.forward.plan = fplan;
  job.forward.keep = true;
  job.backward.plan = bplan;
  job.backward.input_dtype = InputDtype(env, bopts);
  job.backward.contrastive = ParseContrastive(env, bopts.Get("contrastive"), a);
  Napi::Float32Array scores = Napi::Float32Array::New(env, static_cast<size_t>(a.num_pairs));
  job.forward.scores_out = scores.Data();
  Napi::Object result = Napi::Object::New(env);
  result.Set("scores", scores);
  task->result = Napi::Persistent(result);
  return channel->Submit(env, rt, std::move(task));
}

// trainArgmax(device, state) -> Promise<Int32Array>: the saved argmax, [pairs * stride].
class ArgmaxTask : public TrainTask {
 public:
  ArgmaxTask(Napi::Env env, Runtime* rt) : TrainTask(env, "CUDA training failed: "), rt_(rt) {}
  std::shared_ptr<TrainState> state;
  int32_t* out = nullptr;
  Napi::ObjectReference array;
  void Run() override { maxsim_cuda::train::DownloadStateArgmax(rt_, *state, out); }
  Napi::Value Result(Napi::Env) override { return array.Value(); }

 private:
  Runtime* rt_;
};

Napi::Value TrainArgmax(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  Runtime* rt = ParseDevice(env, info[0]);
  auto task = std::make_unique<ArgmaxTask>(env, rt);
  task->state = LiveState(env, info[1], "state", rt);
  Napi::Int32Array a = Napi::Int32Array::New(env, static_cast<size_t>(task->state->a.num_pairs * task->state->a.stride));
  task->out = a.Data();
  task->array = Napi::Persistent(a.As<Napi::Object>());
  return channel->Submit(env, rt, std::move(task));
}

// trainRelease(state): drops the handle's reference now (idempotent); memory returns once no queued job holds it.
Napi::Value TrainRelease(const Napi::CallbackInfo& info) {
  UnwrapState(info.Env(), info[0], "state")->state.reset();
  return info.Env().Undefined();
}

Napi::Object KernelInfo(Napi::Env env) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("fwdThreads", Napi::Number::New(env, MAXSIM_TRAIN_FWD_THREADS));
  o.Set("fwdMmaSmem", Napi::Number::New(env, MAXSIM_TRAIN_FWD_MMA_SMEM));
  o.Set("fwdWgmmaThreads", Napi::Number::New(env, MAXSIM_TRAIN_FWD_WGMMA_THREADS));
  o.Set("fwdWgmmaSmem", Napi::Number::New(env, MAXSIM_TRAIN_FWD_WGMMA_SMEM));
  o.Set("wgmmaSlabRows", Napi::Number::New(env, MAXSIM_TRAIN_FWD_WGMMA_SLAB_ROWS));
  o.Set("wgmmaCc", Napi::Number::New(env, MAXSIM_TRAIN_WGMMA_CC));
  o.Set("mmaDimMultiple", Napi::Number::New(env, MAXSIM_TRAIN_MMA_DIM_MULTIPLE));
  o.Set("mmaMaxDim", Napi::Number::New(env, MAXSIM_TRAIN_MMA_MAX_DIM));
  o.Set("mmaMinCc", Napi::Number::New(env, MAXSIM_TRAIN_MMA_MIN_CC));
  o.Set("maxGrid", Napi::Number::New(env, static_cast<double>(maxsim_cuda::train::kMaxGrid)));
  o.Freeze();
  return o;
}

}  // namespace

void InitCudaTrain(Napi::Env env, Napi::Object exports) {
  TaskChannel* channel = TaskChannel::Create(env, "maxsim.cuda.train");
  Napi::Value cuda = exports.Get("cuda");
  if (!cuda.IsObject()) throw Napi::Error::New(env, "InitCudaTrain must run after InitCuda (exports.cuda is missing)");
  Napi::Object o = cuda.As<Napi::Object>();
  o.Set("trainForward", Napi::Function::New(env, TrainForward, "trainForward", channel));
  o.Set("trainBackward", Napi::Function::New(env, TrainBackward, "trainBackward", channel));
  o.Set("trainBackwardState", Napi::Function::New(env, TrainBackwardState, "trainBackwardState", channel));
  o.Set("trainStep", Napi::Function::New(env, TrainStep, "trainStep", channel));
  o.Set("trainArgmax", Napi::Function::New(env, TrainArgmax, "trainArgmax", channel));
  o.Set("trainRelease", Napi::Function::New(env, TrainRelease, "trainRelease"));
  o.Set("trainKernelInfo", KernelInfo(env));
}
