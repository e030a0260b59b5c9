// Node-API glue for MaxSim training on the CPU (native/cpu/train.h): the argmax forward and the
// backward pass, each run off the JS thread and returned as a Promise. Exposed as exports.train.
#include <napi.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../cpu/train.h"
#include "cpu_spans.h"
#include "promise_worker.h"
#include "token_set.h"

namespace {

using maxsim_cpu::TrainPairs;

struct TrainArgs {
  TokenSet q_set;
  TokenSet d_set;
  maxsim_cpu::TokenSpans queries;
  maxsim_cpu::TokenSpans docs;
  TrainPairs pairs = TrainPairs::All;
  int64_t stride = 0;
  int threads = 0;
  int64_t num_pairs = 0;
};

// (queries, docs, { pairs, stride, threads }): the arguments both calls share.
TrainArgs ParseTrainArgs(const Napi::CallbackInfo& info, size_t options_index) {
  Napi::Env env = info.Env();
  TrainArgs a;
  a.q_set = ParseTokenSet(env, info[0], "queries");
  a.d_set = ParseTokenSet(env, info[1], "docs");
  if (a.q_set.dim != a.d_set.dim) {
    throw Napi::TypeError::New(env, "Expected queries.dim " + std::to_string(a.d_set.dim) +
                                        " (the dimension of docs) but received " + std::to_string(a.q_set.dim));
  }
  a.queries = ToCpuSpans(env, a.q_set, "queries");
  a.docs = ToCpuSpans(env, a.d_set, "docs");
  if (!info[options_index].IsObject()) throw Napi::TypeError::New(env, "Expected an options object for options");
  Napi::Object opts = info[options_index].As<Napi::Object>();
  const std::string pairs = opts.Get("pairs").ToString().Utf8Value();
  if (pairs == "diagonal") {
    a.pairs = TrainPairs::Diagonal;
  } else if (pairs != "all") {
    throw Napi::TypeError::New(env, "Expected 'all' or 'diagonal' for pairs but received '" + pairs + "'");
  }
  if (a.pairs == TrainPairs::Diagonal && a.queries.count != a.docs.count) {
    throw Napi::RangeError::New(env, "Expected as many queries as docs (" + std::to_string(a.docs.count) +
                                         ") for pairs 'diagonal' but received " + std::to_string(a.queries.count));
  }
  const double stride = opts.Get("stride").ToNumber().DoubleValue();
  if (!(stride >= static_cast<double>(a.q_set.max_length) && stride <= 2147483647.0 &&
        stride == static_cast<double>(static_cast<int64_t>(stride)))) {
    throw Napi::RangeError::New(env, "Expected an integer >= " + std::to_string(a.q_set.max_length) +
                                         " (the longest query) for stride but received " + std::to_string(stride));
  }
  a.stride = static_cast<int64_t>(stride);
  if (opts.Get("threads").IsNumber()) a.threads = opts.Get("threads").As<Napi::Number>().Int32Value();
  a.num_pairs = a.pairs == TrainPairs::All ? a.queries.count * a.docs.count : a.queries.count;
  return a;
}

// Runs `work` off the JS thread and resolves with `result` (promise_worker.h).
Napi::Value Queue(Napi::Env env, const std::vector<Napi::Value>& keep_alive, Napi::Object result,
                  std::function<void()> work) {
  return PromiseWorker::Start(env, "maxsim CPU training", keep_alive, result, std::move(work));
}

// forwardAsync(queries, docs, { pairs, stride, threads }) -> Promise<{ scores, argmax }>
Napi::Value ForwardAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  TrainArgs a = ParseTrainArgs(info, 2);
  Napi::Float32Array scores = Napi::Float32Array::New(env, static_cast<size_t>(a.num_pairs));
  Napi::Int32Array argmax = Napi::Int32Array::New(env, static_cast<size_t>(a.num_pairs * a.stride));
  Napi::Object result = Napi::Object::New(env);
  result.Set("scores", scores);
  result.Set("argmax", argmax);
  float* s = scores.Data();
  int32_t* m = argmax.Data();
  return Queue(env, {info[0], info[1]}, result, [a, s, m] {
    maxsim_cpu::MaxsimTrainForward(a.queries, a.docs, a.pairs, a.stride, s, m, a.threads);
  });
}

// backwardAsync(queries, docs, argmax, gradScores, { pairs, stride, threads }) -> Promise<{ dQ, dD }>
Napi::Value BackwardAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  TrainArgs a = ParseTrainArgs(info, 4);
  CheckDisjoint(env, a.q_set, "queries");
  CheckDisjoint(env, a.d_set, "docs");
  if (!info[2].IsTypedArray() || info[2].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array ||
      static_cast<int64_t>(info[2].As<Napi::Int32Array>().ElementLength()) != a.num_pairs * a.stride) {
    throw Napi::TypeError::New(env, "Expected an Int32Array of " + std::to_string(a.num_pairs * a.stride) +
                                        " entries for argmax but received another value");
  }
  if (!info[3].IsTypedArray() || info[3].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array ||
      static_cast<int64_t>(info[3].As<Napi::Float64Array>().ElementLength()) != a.num_pairs) {
    throw Napi::TypeError::New(env, "Expected a Float64Array of " + std::to_string(a.num_pairs) +
                                        " entries for gradScores but received another value");
  }
  // The argmax is caller-visible memory: a private copy, every entry of which is checked, so no edit
  // (before or during the job) can send a read out of bounds.
  const Napi::Int32Array argmax_js = info[2].As<Napi::Int32Array>();
  auto argmax_copy = std::make_shared<const std::vector<int32_t>>(argmax_js.Data(), argmax_js.Data() + a.num_pairs * a.stride);
  const int32_t* argmax = argmax_copy->data();
  for (int64_t p = 0; p < a.num_pairs; p++) {
    const int64_t i = a.pairs == TrainPairs::All ? p / a.docs.count : p;
    const int64_t j = a.pairs == TrainPairs::All ? p % a.docs.count : p;
    for (int64_t s = 0; s < a.queries.lengths[i]; s++) {
      const int32_t t = argmax[p * a.stride + s];
      if (t < -1 || t >= a.docs.lengths[j]) {
        throw Napi::RangeError::New(env, "Expected argmax entries in [-1, " + std::to_string(a.docs.lengths[j]) +
                                             ") for pair " + std::to_string(p) + " but received " + std::to_string(t));
      }
    }
  }
  Napi::Float32Array dq = Napi::Float32Array::New(env, static_cast<size_t>(a.q_set.elements));
  Napi::Float32Array dd = Napi::Float32Array::New(env, static_cast<size_t>(a.d_set.elements));
  Napi::Object result = Napi::Object::New(env);
  result.Set("dQ", dq);
  result.Set("dD", dd);
  // gradScores: values only (any edit is at worst other numbers), its memory pinned (token_set.h)
  const PinnedBytes g_pin = PinTypedArray(info[3].As<Napi::TypedArray>());
  const double* g = reinterpret_cast<const double*>(g_pin.data);
  float* dq_out = dq.Data();
  float* dd_out = dd.Data();
  return Queue(env, {info[0], info[1], info[2], info[3]}, result, [a, argmax_copy, argmax, g_pin, g, dq_out, dd_out] {
    maxsim_cpu::MaxsimTrainBackward(a.queries, a.docs, a.pairs, a.stride, argmax, g, dq_out, dd_out, a.threads);
  });
}

}  // namespace

void InitTrain(Napi::Env env, Napi::Object exports) {
  Napi::Object train = Napi::Object::New(env);
  train.Set("forwardAsync", Napi::Function::New(env, ForwardAsync, "forwardAsync"));
  train.Set("backwardAsync", Napi::Function::New(env, BackwardAsync, "backwardAsync"));
  exports.Set("train", train);
}
