// Node-API glue for MaxSim training on the GPU (native/cuda/kernels/maxsim_train.cu): the argmax forward
// and the backward pass, attached to exports.cuda as trainForward / trainBackward. Host arrays in and
// out: each call uploads the batches (packed), runs the kernels on the device's worker thread
// (runtime.h) and returns host arrays in the CPU engine's layouts through a Promise. The JS thread
// never waits on the GPU.
#include <napi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../cuda/kernels/maxsim_train_params.h"
#include "../cuda/runtime.h"
#include "cuda_task.h"
#include "token_set.h"

namespace {

using maxsim_cuda::CudaError;
using maxsim_cuda::DeviceTokens;
using maxsim_cuda::LaunchSpec;
using maxsim_cuda::Runtime;
using maxsim_cuda::ScopedBlock;

constexpr int64_t kMaxGrid = int64_t(1) << 20;  // blocks stride over the work beyond this

using maxsim_binding::ArgError;
using maxsim_binding::ParseDevice;
using maxsim_binding::TaskChannel;
using TrainTask = maxsim_binding::CudaTask;

struct Problem {
  TokenSet q, d;
  int32_t pairs = 0;  // 0 all, 1 diagonal
  int64_t stride = 0;
  int64_t num_pairs = 0;
};

TokenSet ParseFloatBatch(Napi::Env env, const Napi::Value& v, const std::string& name, TrainTask* task) {
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
Problem ParseProblem(const Napi::CallbackInfo& info, size_t first, size_t options, TrainTask* task) {
  Napi::Env env = info.Env();
  Problem a;
  a.q = ParseFloatBatch(env, info[first], "queries", task);
  a.d = ParseFloatBatch(env, info[first + 1], "docs", task);
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

void CheckDisjoint(Napi::Env env, const TokenSet& t, const std::string& name) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (int64_t i = 0; i < t.count; i++) {
    if (t.lengths[i] > 0) spans.emplace_back(static_cast<int64_t>(t.starts[i]), t.lengths[i]);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t k = 1; k < spans.size(); k++) {
    if (spans[k - 1].first + spans[k - 1].second > spans[k].first) {
      throw Napi::RangeError::New(env, "Expected items of " + name + " that share no tokens but received an overlap at token " +
                                           std::to_string(spans[k].first));
    }
  }
}

int32_t TrainDType(DType t) {
  switch (t) {
    case DType::Float16: return kTrainF16;
    case DType::BFloat16: return kTrainBF16;
    default: return kTrainF32;
  }
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Int8: return "int8";
    default: return "float32";
  }
}

const char* KernelSuffix(DType t) {
  switch (t) {
    case DType::Float16: return "f16";
    case DType::BFloat16: return "bf16";
    default: return "f32";
  }
}

template <typename P>
P* DevPtr(cu::CUdeviceptr p) {
  return reinterpret_cast<P*>(static_cast<uintptr_t>(p));
}

// ---------------------------------------------------------------------------------------------
// Worker-thread helpers

int64_t TokensOf(const TokenSet& t) {
  int64_t n = 0;
  for (int64_t i = 0; i < t.count; i++) n += t.lengths[i];
  return n;
}

std::shared_ptr<DeviceTokens> UploadSet(Runtime* rt, const TokenSet& t) {
  auto dev = rt->AllocTokens(t.dtype, t.dim, TokensOf(t), t.count);
  rt->Append(*dev, t);
  return dev;
}

MaxsimTrainParams BaseParams(const Problem& a, const DeviceTokens& q, const DeviceTokens& d) {
  MaxsimTrainParams p;
  std::memset(&p, 0, sizeof(p));
  p.queries = DevPtr<const void>(q.data);
  p.query_starts = DevPtr<const int64_t>(q.starts);
  p.query_lengths = DevPtr<const int32_t>(q.lengths);
  p.docs = DevPtr<const void>(d.data);
  p.doc_starts = DevPtr<const int64_t>(d.starts);
  p.doc_lengths = DevPtr<const int32_t>(d.lengths);
  p.num_pairs = a.num_pairs;
  p.stride = a.stride;
  p.doc_tokens = d.tokens;
  p.num_queries = static_cast<int32_t>(a.q.count);
  p.num_docs = static_cast<int32_t>(a.d.count);
  p.dim = static_cast<int32_t>(a.q.dim);
  p.pairs = a.pairs;
  p.query_dtype = TrainDType(a.q.dtype);
  p.doc_dtype = TrainDType(a.d.dtype);
  return p;
}

void Launch1D(Runtime* rt, const std::string& kernel, int64_t blocks, unsigned threads, const MaxsimTrainParams& p,
              unsigned smem = 0) {
  if (blocks <= 0) return;
  LaunchSpec spec;
  spec.kernel = kernel;
  spec.grid[0] = static_cast<unsigned>(std::min(blocks, kMaxGrid));
  spec.block[0] = threads;
  spec.smem = smem;
  rt->LaunchWithParams(spec, &p);
}

// The tensor-core forward (maxsim_train_fwd_mma_{f16,bf16}): block (128,1,1), grid (min(num_pairs, 2^20),1,1),
// 52224 bytes of dynamic shared memory (kMmaSmem in maxsim_train.cu; the runtime raises the limit).
constexpr unsigned kMmaFwdThreads = 128;
constexpr unsigned kMmaFwdSmem = 52224;

// Which forward kernel runs: 'auto' picks the tensor-core one where it applies, 'mma' and 'simt' force one.
enum class FwdKernel { kAuto, kMma, kSimt };

// The tensor-core forward applies to fp16 / bf16 queries and documents of one dtype, dim % 8 == 0,
// 8 <= dim <= 128, on compute capability 8.0 or newer.
bool MmaForwardApplies(const Problem& a, const Runtime* rt) {
  const bool half = a.d.dtype == DType::Float16 || a.d.dtype == DType::BFloat16;
  return half && a.q.dtype == a.d.dtype && a.q.dim % 8 == 0 && a.q.dim >= 8 && a.q.dim <= 128 &&
         rt->props().cc_major >= 8;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

void ZeroWords(Runtime* rt, cu::CUdeviceptr ptr, uint64_t words) {
  if (words > 0) maxsim_cuda::Check(maxsim_cuda::Api().cuMemsetD32Async(ptr, 0u, words, rt->stream()), "cuMemsetD32Async");
}

// Copies packed rows [T, d] back into a host buffer in the batch's own layout (zeros elsewhere).
void ScatterRows(const TokenSet& t, const std::vector<float>& packed, float* out) {
  const int64_t d = t.dim;
  int64_t at = 0;
  for (int64_t i = 0; i < t.count; i++) {
    const int64_t len = t.lengths[i];
    if (len > 0) {
      std::memcpy(out + static_cast<int64_t>(t.starts[i]) * d, packed.data() + at * d,
                  static_cast<size_t>(len * d) * sizeof(float));
    }
    at += len;
  }
}

// ---------------------------------------------------------------------------------------------
// trainForward(device, queries, docs, { pairs, stride, kernel? }) -> Promise<{ scores, argmax }>
// kernel: 'auto' (default: the tensor-core forward where MmaForwardApplies), 'mma' or 'simt'.

class ForwardTask : public TrainTask {
 public:
  ForwardTask(Napi::Env env, Runtime* rt) : TrainTask(env, "CUDA training failed: "), rt_(rt) {}
  Problem a;
  bool mma = false;  // the tensor-core forward (chosen on the JS thread, see TrainForward)
  float* scores_out = nullptr;
  int32_t* argmax_out = nullptr;
  Napi::ObjectReference result;

  void Run() override {
    rt_->EnsureReady();
    if (a.num_pairs == 0) return;
    auto q = UploadSet(rt_, a.q);
    auto d = UploadSet(rt_, a.d);
    const uint64_t slots = static_cast<uint64_t>(a.num_pairs) * static_cast<uint64_t>(a.stride);
    ScopedBlock scores(rt_->allocator(), static_cast<uint64_t>(a.num_pairs) * sizeof(float));
    ScopedBlock best(rt_->allocator(), std::max<uint64_t>(slots, 1) * sizeof(float));
    ScopedBlock argmax(rt_->allocator(), std::max<uint64_t>(slots, 1) * sizeof(int32_t));
    MaxsimTrainParams p = BaseParams(a, *q, *d);
    p.scores = DevPtr<float>(scores.get());
    p.best = DevPtr<float>(best.get());
    p.argmax = DevPtr<int32_t>(argmax.get());
    if (mma) {
      Launch1D(rt_, std::string("maxsim_train_fwd_mma_") + KernelSuffix(a.d.dtype), a.num_pairs, kMmaFwdThreads, p,
               kMmaFwdSmem);
    } else {
      Launch1D(rt_, std::string("maxsim_train_fwd_") + KernelSuffix(a.d.dtype), a.num_pairs, 128, p);
    }
    rt_->Download(scores_out, scores.get(), static_cast<uint64_t>(a.num_pairs) * sizeof(float));
    rt_->Download(argmax_out, argmax.get(), slots * sizeof(int32_t));
  }
  Napi::Value Result(Napi::Env) override { return result.Value(); }

 private:
  Runtime* rt_;
};

Napi::Value TrainForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  Runtime* rt = ParseDevice(env, info[0]);
  auto task = std::make_unique<ForwardTask>(env, rt);
  task->a = ParseProblem(info, 1, 3, task.get());
  const Problem& a = task->a;
  FwdKernel kernel = FwdKernel::kAuto;
  Napi::Value kv = info[3].As<Napi::Object>().Get("kernel");
  if (!kv.IsUndefined()) {
    const std::string s = kv.IsString() ? kv.As<Napi::String>().Utf8Value() : std::string("?");
    if (s == "mma") {
      kernel = FwdKernel::kMma;
    } else if (s == "simt") {
      kernel = FwdKernel::kSimt;
    } else if (s != "auto") {
      throw ArgError(env, "trainKernel", "'auto', 'mma' or 'simt'", "'" + s + "'");
    }
  }
  const bool applies = MmaForwardApplies(a, rt);
  if (kernel == FwdKernel::kMma && !applies) {
    throw Napi::RangeError::New(env, "Expected float16 or bfloat16 queries and docs of one dtype, dim % 8 == 0 and "
                                     "8 <= dim <= 128 on compute capability >= 8.0 for trainKernel 'mma' but received " +
                                     std::string(DTypeName(a.q.dtype)) + " queries, " + DTypeName(a.d.dtype) +
                                     " docs, dim " + std::to_string(a.q.dim));
  }
  task->mma = kernel != FwdKernel::kSimt && applies;
  Napi::Float32Array scores = Napi::Float32Array::New(env, static_cast<size_t>(a.num_pairs));
  Napi::Int32Array argmax = Napi::Int32Array::New(env, static_cast<size_t>(a.num_pairs * a.stride));
  Napi::Object result = Napi::Object::New(env);
  result.Set("scores", scores);
  result.Set("argmax", argmax);
  result.Set("stride", Napi::Number::New(env, static_cast<double>(a.stride)));
  task->scores_out = scores.Data();
  task->argmax_out = argmax.Data();
  task->result = Napi::Persistent(result);
  return channel->Submit(env, rt, std::move(task));
}

// ---------------------------------------------------------------------------------------------
// trainBackward(device, queries, docs, argmax, gradScores, { pairs, stride, dDPath }) -> Promise<{ dQ, dD }>

class BackwardTask : public TrainTask {
 public:
  BackwardTask(Napi::Env env, Runtime* rt) : TrainTask(env, "CUDA training failed: "), rt_(rt) {}
  Problem a;
  bool atomic = false;
  const int32_t* argmax_in = nullptr;
  const double* grad_in = nullptr;
  float* dq_out = nullptr;
  float* dd_out = nullptr;
  Napi::ObjectReference result;

  void Run() override {
    rt_->EnsureReady();
    if (a.num_pairs == 0) return;
    auto q = UploadSet(rt_, a.q);
    auto d = UploadSet(rt_, a.d);
    const int64_t dim = a.q.dim;
    const uint64_t slots = static_cast<uint64_t>(a.num_pairs) * static_cast<uint64_t>(a.stride);
    ScopedBlock argmax(rt_->allocator(), std::max<uint64_t>(slots, 1) * sizeof(int32_t));
    ScopedBlock grad(rt_->allocator(), static_cast<uint64_t>(a.num_pairs) * sizeof(double));
    rt_->Upload(argmax.get(), argmax_in, slots * sizeof(int32_t));
    rt_->Upload(grad.get(), grad_in, static_cast<uint64_t>(a.num_pairs) * sizeof(double));
    const uint64_t dq_elems = static_cast<uint64_t>(q->tokens) * static_cast<uint64_t>(dim);
    const uint64_t dd_elems = static_cast<uint64_t>(d->tokens) * static_cast<uint64_t>(dim);
    ScopedBlock dq(rt_->allocator(), std::max<uint64_t>(dq_elems, 1) * sizeof(float));
    ScopedBlock dd(rt_->allocator(), std::max<uint64_t>(dd_elems, 1) * sizeof(float));
    MaxsimTrainParams p = BaseParams(a, *q, *d);
    p.argmax = DevPtr<int32_t>(argmax.get());
    p.grad_scores = DevPtr<const double>(grad.get());
    p.dq = DevPtr<float>(dq.get());
    p.dd = DevPtr<float>(dd.get());

    // dQ: every real query token row is written (no zero fill needed).
    if (q->tokens > 0) Launch1D(rt_, "maxsim_train_dq", a.q.count, 128, p);

    if (d->tokens > 0) {
      const int64_t rows = d->tokens;
      if (atomic) {
        ZeroWords(rt_, dd.get(), dd_elems);
        Launch1D(rt_, "maxsim_train_dd_atomic", CeilDiv(static_cast<int64_t>(slots), 4), 128, p);
        rt_->Synchronize();
      } else {
        ScopedBlock counts(rt_->allocator(), static_cast<uint64_t>(rows) * sizeof(int64_t));
        ScopedBlock offsets(rt_->allocator(), static_cast<uint64_t>(rows + 1) * sizeof(int64_t));
        ScopedBlock cursor(rt_->allocator(), static_cast<uint64_t>(rows) * sizeof(int64_t));
        p.counts = DevPtr<int64_t>(counts.get());
        p.offsets = DevPtr<int64_t>(offsets.get());
        p.cursor = DevPtr<int64_t>(cursor.get());
        ZeroWords(rt_, counts.get(), static_cast<uint64_t>(rows) * 2);
        const int64_t doc_blocks = CeilDiv(a.d.count, 4);  // one warp per document, 4 warps a block
        Launch1D(rt_, "maxsim_train_dd_count", doc_blocks, 128, p);
        Launch1D(rt_, "maxsim_train_dd_scan", 1, 1024, p);
        int64_t total = 0;
        rt_->Download(&total, offsets.get() + static_cast<uint64_t>(rows) * sizeof(int64_t), sizeof(int64_t));
        if (total < 0 || static_cast<uint64_t>(total) > slots) {
          throw std::runtime_error("the CSR of dD holds " + std::to_string(total) + " sources for " +
                                   std::to_string(slots) + " argmax slots (internal error)");
        }
        ScopedBlock sources(rt_->allocator(), std::max<uint64_t>(static_cast<uint64_t>(total), 1) * sizeof(int64_t));
        p.sources = DevPtr<int64_t>(sources.get());
        Launch1D(rt_, "maxsim_train_dd_place", doc_blocks, 128, p);
        Launch1D(rt_, "maxsim_train_dd_gather", rows, 128, p);
        // The CSR blocks go back to the allocator when this scope ends: finish using them first.
        rt_->Synchronize();
      }
    }

    std::vector<float> packed(static_cast<size_t>(std::max(dq_elems, dd_elems)));
    if (dq_elems > 0) {
      rt_->Download(packed.data(), dq.get(), dq_elems * sizeof(float));
      ScatterRows(a.q, packed, dq_out);
    }
    if (dd_elems > 0) {
      rt_->Download(packed.data(), dd.get(), dd_elems * sizeof(float));
      ScatterRows(a.d, packed, dd_out);
    }
  }
  Napi::Value Result(Napi::Env) override { return result.Value(); }

 private:
  Runtime* rt_;
};

Napi::Value TrainBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  Runtime* rt = ParseDevice(env, info[0]);
  auto task = std::make_unique<BackwardTask>(env, rt);
  task->a = ParseProblem(info, 1, 5, task.get());
  const Problem& a = task->a;
  CheckDisjoint(env, a.q, "queries");
  CheckDisjoint(env, a.d, "docs");
  if (!info[3].IsTypedArray() || info[3].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array ||
      static_cast<int64_t>(info[3].As<Napi::Int32Array>().ElementLength()) != a.num_pairs * a.stride) {
    throw ArgError(env, "argmax", "an Int32Array of " + std::to_string(a.num_pairs * a.stride) + " entries", "another value");
  }
  if (!info[4].IsTypedArray() || info[4].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array ||
      static_cast<int64_t>(info[4].As<Napi::Float64Array>().ElementLength()) != a.num_pairs) {
    throw ArgError(env, "gradScores", "a Float64Array of " + std::to_string(a.num_pairs) + " entries", "another value");
  }
  const int32_t* argmax = info[3].As<Napi::Int32Array>().Data();
  // The argmax is caller-visible memory: check every entry so no edit can send a read out of bounds.
  for (int64_t p = 0; p < a.num_pairs; p++) {
    const int64_t i = a.pairs == 0 ? p / a.d.count : p;
    const int64_t j = a.pairs == 0 ? p % a.d.count : p;
    for (int64_t s = 0; s < a.q.lengths[i]; s++) {
      const int32_t t = argmax[p * a.stride + s];
      if (t < -1 || t >= a.d.lengths[j]) {
        throw Napi::RangeError::New(env, "Expected argmax entries in [-1, " + std::to_string(a.d.lengths[j]) +
                                             ") for pair " + std::to_string(p) + " but received " + std::to_string(t));
      }
    }
  }
  bool atomic = false;
  Napi::Object opts = info[5].As<Napi::Object>();
  Napi::Value path = opts.Get("dDPath");
  if (!path.IsUndefined()) {
    const std::string s = path.IsString() ? path.As<Napi::String>().Utf8Value() : std::string("?");
    if (s == "atomic") {
      atomic = true;
    } else if (s != "csr") {
      throw ArgError(env, "dDPath", "'csr' or 'atomic'", "'" + s + "'");
    }
  }
  task->atomic = atomic;
  task->Keep(info[3]);
  task->Keep(info[4]);
  task->argmax_in = argmax;
  task->grad_in = info[4].As<Napi::Float64Array>().Data();
  Napi::Float32Array dq = Napi::Float32Array::New(env, static_cast<size_t>(a.q.elements));
  Napi::Float32Array dd = Napi::Float32Array::New(env, static_cast<size_t>(a.d.elements));
  Napi::Object result = Napi::Object::New(env);
  result.Set("dQ", dq);
  result.Set("dD", dd);
  task->dq_out = dq.Data();
  task->dd_out = dd.Data();
  task->result = Napi::Persistent(result);
  return channel->Submit(env, rt, std::move(task));
}

}  // namespace

void InitCudaTrain(Napi::Env env, Napi::Object exports) {
  TaskChannel* channel = TaskChannel::Create(env, "maxsim.cuda.train");
  Napi::Value cuda = exports.Get("cuda");
  if (!cuda.IsObject()) throw Napi::Error::New(env, "InitCudaTrain must run after InitCuda (exports.cuda is missing)");
  Napi::Object o = cuda.As<Napi::Object>();
  o.Set("trainForward", Napi::Function::New(env, TrainForward, "trainForward", channel));
  o.Set("trainBackward", Napi::Function::New(env, TrainBackward, "trainBackward", channel));
}
