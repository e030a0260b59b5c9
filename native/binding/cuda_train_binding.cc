// Node-API glue for MaxSim training on the GPU (native/cuda/kernels/maxsim_train.cu): the argmax forward
// and the backward pass, attached to exports.cuda as trainForward / trainBackward. Host arrays in and
// out: each call uploads the batches (packed), runs the kernels on the device's worker thread
// (runtime.h) and returns host arrays in the CPU engine's layouts through a Promise. The JS thread
// never waits on the GPU.
//
// Device memory beyond the inputs and their fp32 gradients (the "extra" figure):
//   forward:  scores [P] f32, argmax [P * stride] int16 (int32 when a document has >= 32768 tokens),
//             best[] one stride-long f32 stripe per CTA (<= kFwdScratchBytes, not per pair).
//   backward: argmax as above, gradScores [P] f64, and the CSR of ONE document block at a time:
//             counts + offsets [cells] u32 (cells <= kCellCap), sources u32 (<= kSourceCap entries),
//             and for split rows fp64 partials (2 * sources / kCsrChunk + 1) x 128 (<= 64 MB), a
//             chunk -> row map and per-row chunk offsets (u32).
// ColPali shape B = 256 (P = 65,536, stride 1,024): argmax 134 MB + CSR <= 32 + 32 + 64 MB.
#include <napi.h>

#include <algorithm>
#include <chrono>
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

// Each side (queries, docs) is a host batch, uploaded by every call, or a device-resident set (q_dev /
// d_dev): then q / d hold its metadata only (no data, no starts) and the lengths, which the host-side
// planning reads, come from the device on the worker thread (q_len / d_len, see Materialize).
struct Problem {
  TokenSet q, d;
  std::shared_ptr<DeviceTokens> q_dev, d_dev;
  std::vector<int32_t> q_len, d_len;
  int32_t pairs = 0;  // 0 all, 1 diagonal
  int64_t stride = 0;
  int64_t num_pairs = 0;
  // Points the device-resident sides' lengths at q_len / d_len (after a copy or a move).
  void Rebind() {
    if (q_dev) q.lengths = q_len.data();
    if (d_dev) d.lengths = d_len.data();
  }
};

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

int32_t TrainDType(DType t) {
  switch (t) {
    case DType::Float16: return kTrainF16;
    case DType::BFloat16: return kTrainBF16;
    default: return kTrainF32;
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

// Worker thread: both sides on the device (host batches uploaded now) and the lengths of the
// device-resident ones on the host. With `own`, the uploaded host batches become device-resident
// sides of `a` (a state that outlives the call must not point into JS arrays).
void Materialize(Runtime* rt, Problem& a, bool own, std::shared_ptr<DeviceTokens>* q, std::shared_ptr<DeviceTokens>* d) {
  auto side = [&](TokenSet& t, std::shared_ptr<DeviceTokens>& dev, std::vector<int32_t>& len, const char* name) {
    if (dev) {
      // The JS thread read the set's size when the call was made; an append still running then
      // would have changed it under the job's plan.
      if (dev->count != t.count || dev->tokens * dev->dim != t.elements) {
        throw std::invalid_argument(std::string("Expected ") + name + " to keep its " + std::to_string(t.count) +
                                    " items during the call but received a set of " + std::to_string(dev->count) +
                                    " items (await append() before training)");
      }
      len.resize(static_cast<size_t>(t.count));
      if (t.count > 0) rt->Download(len.data(), dev->lengths, static_cast<uint64_t>(t.count) * sizeof(int32_t));
      t.lengths = len.data();
      return dev;
    }
    auto up = UploadSet(rt, t);
    if (own) {
      len.assign(t.lengths, t.lengths + t.count);
      t.lengths = len.data();
      t.data = nullptr;
      t.starts = nullptr;
      dev = up;
    }
    return up;
  };
  *q = side(a.q, a.q_dev, a.q_len, "queries");
  *d = side(a.d, a.d_dev, a.d_len, "docs");
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
  p.doc_tokens = TokensOf(a.d);  // the problem's documents (a device set may have grown since)
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

// Whether the packed device rows of t are already its host layout (items back to back from token 0,
// as in a dense batch without padding): then gradients download straight into the output array.
bool PackedIsLayout(const TokenSet& t) {
  int64_t at = 0;
  for (int64_t i = 0; i < t.count; i++) {
    if (t.lengths[i] > 0 && static_cast<int64_t>(t.starts[i]) != at) return false;
    at += t.lengths[i];
  }
  return true;
}

// Downloads packed gradient rows [tokens, dim] into out (the batch's layout; N-API zero-filled it).
void DownloadRows(Runtime* rt, const TokenSet& t, cu::CUdeviceptr src, uint64_t elems, float* out) {
  if (elems == 0) return;
  if (PackedIsLayout(t)) {
    rt->Download(out, src, elems * sizeof(float));
    return;
  }
  std::vector<float> packed(static_cast<size_t>(elems));
  rt->Download(packed.data(), src, elems * sizeof(float));
  ScatterRows(t, packed, out);
}

// argmax entries go to the device as int16 when every document is shorter than 32768 tokens (values
// -1 .. 32766), halving the largest buffer of both passes; `bits` (options.argmaxBits) forces 16 or 32.
bool UseArgmax16(Napi::Env env, const Problem& a, const Napi::Object& opts) {
  const bool fits = a.d.max_length <= 32767;
  Napi::Value v = opts.Get("argmaxBits");
  if (v.IsUndefined()) return fits;
  const double bits = v.IsNumber() ? v.ToNumber().DoubleValue() : -1.0;
  if (bits == 0) return fits;
  if (bits == 32) return false;
  if (bits == 16) {
    if (!fits) {
      throw Napi::RangeError::New(env, "Expected documents shorter than 32768 tokens for argmaxBits 16 but received one of " +
                                           std::to_string(a.d.max_length));
    }
    return true;
  }
  throw ArgError(env, "argmaxBits", "0, 16 or 32", v.IsNumber() ? std::to_string(bits) : std::string("another value"));
}

// A non-negative integer option (0 = automatic).
int64_t CountOption(Napi::Env env, const Napi::Object& opts, const char* name) {
  Napi::Value v = opts.Get(name);
  if (v.IsUndefined()) return 0;
  const double x = v.IsNumber() ? v.ToNumber().DoubleValue() : -1.0;
  if (!(x >= 0 && x <= 2147483647.0 && x == static_cast<double>(static_cast<int64_t>(x)))) {
    throw ArgError(env, name, "an integer >= 0 (0 = automatic)", v.IsNumber() ? std::to_string(x) : "another value");
  }
  return static_cast<int64_t>(x);
}

// options.profile: wall time of the host phases and device time (CUDA events on the stream) of the
// kernels, returned as profileMs { phase: ms } (for the benchmarks; off by default, costs nothing then).
class PhaseTimer {
 public:
  PhaseTimer(Runtime* rt, bool on) : rt_(rt), on_(on) {}
  ~PhaseTimer() {
    for (cu::CUevent e : events_) maxsim_cuda::Api().cuEventDestroy(e);
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;
  bool on() const { return on_; }
  // Host: the wall time since the previous Host() call (or construction) is added to `name`.
  void Host(const char* name) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    phases_.emplace_back(name, std::chrono::duration<double, std::milli>(now - last_).count());
    last_ = now;
  }
  // Device: records an event; Device(name) after Mark() charges the time between them to `name`.
  void Mark() {
    if (!on_) return;
    cu::CUevent e = nullptr;
    maxsim_cuda::Check(maxsim_cuda::Api().cuEventCreate(&e, cu::CU_EVENT_DEFAULT), "cuEventCreate");
    events_.push_back(e);
    maxsim_cuda::Check(maxsim_cuda::Api().cuEventRecord(e, rt_->stream()), "cuEventRecord");
  }
  void Device(const char* name) {
    if (!on_) return;
    Mark();
    pending_.emplace_back(name, events_.size() - 2);
  }
  // After the stream has passed every mark: resolves the device phases.
  std::vector<std::pair<std::string, double>> Finish() {
    std::vector<std::pair<std::string, double>> out = phases_;
    for (const auto& [name, k] : pending_) {
      float ms = 0.f;
      maxsim_cuda::Check(maxsim_cuda::Api().cuEventElapsedTime(&ms, events_[k], events_[k + 1]), "cuEventElapsedTime");
      out.emplace_back(name, static_cast<double>(ms));
    }
    return out;
  }

 private:
  Runtime* rt_;
  bool on_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  std::vector<cu::CUevent> events_;
  std::vector<std::pair<std::string, size_t>> pending_;
  std::vector<std::pair<std::string, double>> phases_;
};

Napi::Value PhasesToJs(Napi::Env env, const std::vector<std::pair<std::string, double>>& phases) {
  Napi::Object o = Napi::Object::New(env);
  for (const auto& [name, ms] : phases) o.Set(name, Napi::Number::New(env, ms));
  return o;
}

bool ProfileOption(const Napi::Object& opts) {
  Napi::Value v = opts.Get("profile");
  return v.IsBoolean() && v.As<Napi::Boolean>().Value();
}

// The forward's best[] is one stride-long stripe per CTA: the grid is capped so the stripes take at
// most kFwdScratchBytes (at least 1024 CTAs, ~8 per SM, so the GPU stays full), not one per pair.
constexpr int64_t kFwdScratchBytes = int64_t(64) << 20;

// `cap` (options.forwardGrid, 0 = none) lowers it further: tests use it to give each CTA many pairs.
int64_t ForwardGrid(const Problem& a, int64_t cap) {
  const int64_t per_cta = std::max<int64_t>(a.stride, 1) * static_cast<int64_t>(sizeof(float));
  const int64_t grid = std::min({a.num_pairs, kMaxGrid, std::max<int64_t>(1024, kFwdScratchBytes / per_cta)});
  return cap > 0 ? std::min(grid, cap) : grid;
}

// ---------------------------------------------------------------------------------------------
// Device-resident training: what a forward keeps on the device for its backward (both operands and
// the argmax), handed to JS as an External with a type tag. The backward reads it and, unless asked
// to retain it, drops it; release() (TS: dispose) drops it at once; the memory goes back to the
// allocator, on the worker thread, when the last holder (the handle or a queued job) lets go.

struct TrainState {
  Runtime* rt = nullptr;
  Problem a;  // both sides device-resident (q_dev / d_dev), lengths on the host
  bool argmax16 = true;
  cu::CUdeviceptr argmax = 0;
  ~TrainState() {
    if (!argmax) return;
    Runtime* r = rt;
    r->Post([r, p = argmax] { r->allocator().Free(p); });
  }
};

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
// trainForward(device, queries, docs, { pairs, stride, keep?, kernel?, argmaxBits?, forwardGrid? })
//   -> Promise<{ scores, argmax }>, or with keep: Promise<{ scores, state }> (the argmax stays on the device).
// queries / docs: host batches or device token sets. kernel: 'auto' (default: the tensor-core
// forward where MmaForwardApplies), 'mma' or 'simt'.

void DownloadArgmax(Runtime* rt, cu::CUdeviceptr src, uint64_t slots, bool argmax16, int32_t* out);

class ForwardTask : public TrainTask {
 public:
  ForwardTask(Napi::Env env, Runtime* rt) : TrainTask(env, "CUDA training failed: "), rt_(rt) {}
  Problem a;
  bool mma = false;  // the tensor-core forward (chosen on the JS thread, see TrainForward)
  bool argmax16 = true;
  bool keep = false;  // device-resident: the argmax and the operands stay on the device (state)
  int64_t grid_cap = 0;
  bool profile = false;
  std::vector<std::pair<std::string, double>> phases;
  float* scores_out = nullptr;
  int32_t* argmax_out = nullptr;
  std::shared_ptr<TrainState> state;
  Napi::ObjectReference result;

  void Run() override {
    rt_->EnsureReady();
    PhaseTimer timer(rt_, profile);
    std::shared_ptr<DeviceTokens> q, d;
    Materialize(rt_, a, keep, &q, &d);
    const uint64_t slots = static_cast<uint64_t>(a.num_pairs) * static_cast<uint64_t>(a.stride);
    const uint64_t entry = argmax16 ? sizeof(int16_t) : sizeof(int32_t);
    std::unique_ptr<ScopedBlock> argmax_scoped;
    cu::CUdeviceptr argmax = 0;
    if (keep) {
      state = std::make_shared<TrainState>();
      state->rt = rt_;
      state->argmax16 = argmax16;
      state->argmax = rt_->allocator().Alloc(std::max<uint64_t>(slots, 1) * entry);
      argmax = state->argmax;
    } else {
      argmax_scoped = std::make_unique<ScopedBlock>(rt_->allocator(), std::max<uint64_t>(slots, 1) * entry);
      argmax = argmax_scoped->get();
    }
    if (keep) {
      state->a = std::move(a);  // a stays usable below through the state (vectors move with their data)
      state->a.Rebind();
    }
    const Problem& a = keep ? state->a : this->a;
    if (a.num_pairs == 0) return;
    const int64_t grid = ForwardGrid(a, grid_cap);
    ScopedBlock scores(rt_->allocator(), static_cast<uint64_t>(a.num_pairs) * sizeof(float));
    ScopedBlock best(rt_->allocator(),
                     std::max<uint64_t>(static_cast<uint64_t>(grid) * static_cast<uint64_t>(a.stride), 1) * sizeof(float));
    MaxsimTrainParams p = BaseParams(a, *q, *d);
    p.scores = DevPtr<float>(scores.get());
    p.best = DevPtr<float>(best.get());
    p.argmax = DevPtr<void>(argmax);
    p.argmax16 = argmax16 ? 1 : 0;
    if (timer.on()) rt_->Synchronize();
    timer.Host("upload");
    timer.Mark();
    if (mma) {
      Launch1D(rt_, std::string("maxsim_train_fwd_mma_") + KernelSuffix(a.d.dtype), grid, kMmaFwdThreads, p,
               kMmaFwdSmem);
    } else {
      Launch1D(rt_, std::string("maxsim_train_fwd_") + KernelSuffix(a.d.dtype), grid, 128, p);
    }
    timer.Device("forwardKernel");
    if (timer.on()) rt_->Synchronize();
    timer.Host("forwardWait");
    rt_->Download(scores_out, scores.get(), static_cast<uint64_t>(a.num_pairs) * sizeof(float));
    if (!keep) DownloadArgmax(rt_, argmax, slots, argmax16, argmax_out);
    timer.Host("download");
    if (timer.on()) phases = timer.Finish();
  }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object o = result.Value();
    if (keep) o.Set("state", WrapState(env, std::move(state)));
    if (profile) o.Set("profileMs", PhasesToJs(env, phases));
    return o;
  }

 private:
  Runtime* rt_;
};

// Copies `slots` argmax entries (int16 when argmax16) from the device into an Int32Array's memory,
// widened a chunk at a time (no full-size host copy).
void DownloadArgmax(Runtime* rt, cu::CUdeviceptr src, uint64_t slots, bool argmax16, int32_t* out) {
  if (!argmax16) {
    rt->Download(out, src, slots * sizeof(int32_t));
    return;
  }
  constexpr uint64_t kChunk = uint64_t(1) << 22;
  std::vector<int16_t> buf(static_cast<size_t>(std::min<uint64_t>(slots, kChunk)));
  for (uint64_t off = 0; off < slots; off += kChunk) {
    const uint64_t n = std::min(kChunk, slots - off);
    rt->Download(buf.data(), src + off * sizeof(int16_t), n * sizeof(int16_t));
    for (uint64_t e = 0; e < n; e++) out[off + e] = buf[e];
  }
}

Napi::Value TrainForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  Runtime* rt = ParseDevice(env, info[0]);
  auto task = std::make_unique<ForwardTask>(env, rt);
  task->a = ParseProblem(info, 1, 3, task.get(), rt);
  const Problem& a = task->a;
  Napi::Object opts = info[3].As<Napi::Object>();
  FwdKernel kernel = FwdKernel::kAuto;
  Napi::Value kv = opts.Get("kernel");
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
  task->argmax16 = UseArgmax16(env, a, opts);
  task->grid_cap = CountOption(env, opts, "forwardGrid");
  task->profile = ProfileOption(opts);
  Napi::Value keep = opts.Get("keep");
  task->keep = keep.IsBoolean() && keep.As<Napi::Boolean>().Value();
  if (!task->keep && (a.q_dev || a.d_dev)) {
    throw ArgError(env, "options.keep", "true for device-resident queries or docs (the argmax stays on the device)",
                   "false");
  }
  Napi::Float32Array scores = Napi::Float32Array::New(env, static_cast<size_t>(a.num_pairs));
  Napi::Object result = Napi::Object::New(env);
  result.Set("scores", scores);
  result.Set("stride", Napi::Number::New(env, static_cast<double>(a.stride)));
  task->scores_out = scores.Data();
  if (!task->keep) {
    Napi::Int32Array argmax = Napi::Int32Array::New(env, static_cast<size_t>(a.num_pairs * a.stride));
    result.Set("argmax", argmax);
    task->argmax_out = argmax.Data();
  }
  task->result = Napi::Persistent(result);
  return channel->Submit(env, rt, std::move(task));
}

// ---------------------------------------------------------------------------------------------
// trainBackward(device, queries, docs, argmax, gradScores,
//               { pairs, stride, dDPath, argmaxBits?, docBlock?, queryBlock? }) -> Promise<{ dQ, dD, dDPath }>
// dDPath 'csr' | 'atomic' | 'auto' ('auto': the CSR's histogram of the first document block measures
// the contention and picks, see kAutoAtomicDistinct); the result's dDPath is the path that ran.
// docBlock / queryBlock (0 = automatic) bound the documents per CSR block and the queries per cell:
// they change the memory and the parallelism, never the result (tests force them).

// CSR budget per document block: sources (u32 argmax slot indices) and cells (u32 counts, u32 offsets).
constexpr int64_t kSourceCap = int64_t(1) << 24;  // 64 MB
constexpr int64_t kCellCap = int64_t(1) << 23;    // 32 MB each for counts and offsets
// Rows of dD with more than kCsrChunk sources (hot document tokens) are split: chunks of kCsrChunk
// sources, one warp each, fp64 partial sums (kPartialCols columns per pass) added in chunk order.
// Chunks of a block <= 2 * sources / chunk (each split row has > chunk sources, so ceil(n / chunk) <=
// 2 n / chunk): partials <= 2 * kSourceCap / kCsrChunk * 128 * 8 bytes = 64 MB. csrChunk (tests) may
// lower it to kCsrChunkMin (scratch <= 1 GB at the source cap; tests use small problems).
constexpr int64_t kCsrChunk = 512;
constexpr int64_t kCsrChunkMin = 32;
constexpr int64_t kPartialCols = 128;  // kChunk in maxsim_train.cu
// Warps the count / place kernels should have per block: (documents in the block) x (query blocks).
constexpr int64_t kWalkWarps = 8192;
// 'auto' runs the atomic scatter when the rows with sources are at least this fraction of the sources
// (about 2 or fewer sources per touched row: little to reduce, so the CSR's passes are pure overhead).
// A first guess, to be calibrated on the H200 with bench/train-contention.ts.
constexpr double kAutoAtomicDistinct = 0.5;

enum class DDPath { kCsr, kAtomic, kAuto };

struct DocBlock {
  int32_t doc_begin = 0, doc_end = 0;
  int64_t row_begin = 0, row_end = 0;
  int64_t bound = 0;  // most sources the block can have
  int32_t qblocks = 1, qblock_size = 1;
  int64_t cells() const { return (row_end - row_begin) * qblocks; }
};

// Splits the documents into consecutive blocks whose sources fit kSourceCap (a single document may
// exceed it: a block holds at least one) and picks each block's query blocks.
std::vector<DocBlock> PlanDocBlocks(const Problem& a, int64_t max_docs, int64_t query_block) {
  int64_t tq = 0;  // sources of one document, at most: every query token (all pairs)
  for (int64_t i = 0; i < a.q.count; i++) tq += a.q.lengths[i];
  std::vector<DocBlock> blocks;
  int64_t row = 0;
  DocBlock cur;
  auto close = [&](int32_t end) {
    cur.doc_end = end;
    cur.row_end = row;
    const int64_t docs_in = cur.doc_end - cur.doc_begin;
    const int64_t rows = std::max<int64_t>(cur.row_end - cur.row_begin, 1);
    if (a.pairs == 0 && a.q.count > 0) {
      int64_t qb = query_block > 0 ? CeilDiv(a.q.count, query_block)
                                   : std::min<int64_t>(a.q.count, CeilDiv(kWalkWarps, std::max<int64_t>(docs_in, 1)));
      if (query_block == 0) qb = std::min(qb, std::max<int64_t>(1, kCellCap / rows));
      qb = std::max<int64_t>(qb, 1);
      cur.qblock_size = static_cast<int32_t>(CeilDiv(a.q.count, qb));
      cur.qblocks = static_cast<int32_t>(CeilDiv(a.q.count, cur.qblock_size));
    } else {
      cur.qblocks = 1;
      cur.qblock_size = 1;
    }
    blocks.push_back(cur);
  };
  cur.doc_begin = 0;
  cur.row_begin = 0;
  for (int64_t j = 0; j < a.d.count; j++) {
    const int64_t ld = a.d.lengths[j];
    const int64_t bound = ld <= 0 ? 0 : (a.pairs == 0 ? tq : a.q.lengths[j]);
    const int64_t docs_in = j - cur.doc_begin;
    const bool full = docs_in > 0 && (cur.bound + bound > kSourceCap || (row - cur.row_begin) + ld > kCellCap ||
                                      (max_docs > 0 && docs_in >= max_docs));
    if (full) {
      close(static_cast<int32_t>(j));
      cur = DocBlock();
      cur.doc_begin = static_cast<int32_t>(j);
      cur.row_begin = row;
    }
    cur.bound += bound;
    row += std::max<int64_t>(ld, 0);
  }
  close(static_cast<int32_t>(a.d.count));
  return blocks;
}

// A set of `dtype` for the gradient of the first lengths.size() items of `like` (a packed set: item
// i starts at the sum of the lengths before it; items appended after the forward are not included).
std::shared_ptr<DeviceTokens> GradientSet(Runtime* rt, const DeviceTokens& like, const std::vector<int32_t>& lengths,
                                          DType dtype) {
  std::vector<int64_t> starts(lengths.size());
  int64_t at = 0;
  int32_t longest = 0;
  for (size_t i = 0; i < lengths.size(); i++) {
    starts[i] = at;
    at += lengths[i];
    longest = std::max(longest, lengths[i]);
  }
  if (at > like.tokens) {
    throw std::logic_error("a device-resident training operand is not packed (" + std::to_string(at) +
                           " tokens in its items, " + std::to_string(like.tokens) + " in the set)");
  }
  const int64_t items = static_cast<int64_t>(lengths.size());
  auto g = rt->AllocTokens(dtype, like.dim, at, items);
  if (!lengths.empty()) {
    rt->Upload(g->starts, starts.data(), starts.size() * sizeof(int64_t));
    rt->Upload(g->lengths, lengths.data(), lengths.size() * sizeof(int32_t));
  }
  g->count = items;
  g->tokens = at;
  g->max_length = longest;
  g->host_starts = std::move(starts);  // the host mirror of the spans (views need no download)
  g->host_lengths = lengths;
  return g;
}

class BackwardTask : public TrainTask {
 public:
  BackwardTask(Napi::Env env, Runtime* rt) : TrainTask(env, "CUDA training failed: "), rt_(rt) {}
  Problem a;
  DDPath path = DDPath::kCsr;
  bool argmax16 = true;
  int64_t doc_block = 0, query_block = 0;
  int64_t csr_chunk = kCsrChunk;
  const int32_t* argmax_in = nullptr;
  const double* grad_in = nullptr;
  float* dq_out = nullptr;
  float* dd_out = nullptr;
  bool ran_atomic = false;
  bool profile = false;
  // Device-resident: the forward's state (a holds a copy of its problem); dQ / dD become device sets.
  std::shared_ptr<TrainState> state;
  bool input_dtype = false;  // device gradients in the inputs' dtypes (else float32)
  std::shared_ptr<DeviceTokens> dq_set, dd_set;
  std::vector<std::pair<std::string, double>> phases;
  Napi::ObjectReference result;

  void Run() override {
    rt_->EnsureReady();
    if (!state && a.num_pairs == 0) return;
    PhaseTimer timer(rt_, profile);
    std::shared_ptr<DeviceTokens> q = a.q_dev, d = a.d_dev;
    if (!state) Materialize(rt_, a, false, &q, &d);
    if (timer.on()) rt_->Synchronize();
    timer.Host("uploadTokens");
    const int64_t dim = a.q.dim;
    const uint64_t slots = static_cast<uint64_t>(a.num_pairs) * static_cast<uint64_t>(a.stride);
    std::unique_ptr<ScopedBlock> argmax_scoped;
    cu::CUdeviceptr argmax = state ? state->argmax : 0;
    if (!state) {
      argmax_scoped = std::make_unique<ScopedBlock>(
          rt_->allocator(), std::max<uint64_t>(slots, 1) * (argmax16 ? sizeof(int16_t) : sizeof(int32_t)));
      argmax = argmax_scoped->get();
      UploadArgmax(argmax);
    }
    ScopedBlock grad(rt_->allocator(), std::max<uint64_t>(static_cast<uint64_t>(a.num_pairs), 1) * sizeof(double));
    if (a.num_pairs > 0) rt_->Upload(grad.get(), grad_in, static_cast<uint64_t>(a.num_pairs) * sizeof(double));
    if (timer.on()) rt_->Synchronize();
    timer.Host("uploadArgmax");
    // Tokens of the problem's items: a device set appended to after the forward holds more, which
    // this pass neither reads nor writes.
    const uint64_t dq_elems = static_cast<uint64_t>(TokensOf(a.q)) * static_cast<uint64_t>(dim);
    const uint64_t dd_elems = static_cast<uint64_t>(TokensOf(a.d)) * static_cast<uint64_t>(dim);
    // The kernels write float32: into the gradient set itself, or into scratch that is then cast
    // into a float16 / bfloat16 set (device, outputDtype 'input'), or into scratch that is downloaded.
    std::unique_ptr<ScopedBlock> dq_scoped, dd_scoped;
    cu::CUdeviceptr dq = 0, dd = 0;
    if (state) {
      dq_set = GradientSet(rt_, *q, a.q_len, input_dtype ? a.q.dtype : DType::Float32);
      dd_set = GradientSet(rt_, *d, a.d_len, input_dtype ? a.d.dtype : DType::Float32);
    }
    if (dq_set && dq_set->dtype == DType::Float32) {
      dq = dq_set->data;
    } else {
      dq_scoped = std::make_unique<ScopedBlock>(rt_->allocator(), std::max<uint64_t>(dq_elems, 1) * sizeof(float));
      dq = dq_scoped->get();
    }
    if (dd_set && dd_set->dtype == DType::Float32) {
      dd = dd_set->data;
    } else {
      dd_scoped = std::make_unique<ScopedBlock>(rt_->allocator(), std::max<uint64_t>(dd_elems, 1) * sizeof(float));
      dd = dd_scoped->get();
    }
    if (a.num_pairs == 0) {  // no queries or no documents: the gradients are zero
      ZeroWords(rt_, dq, dq_elems);
      ZeroWords(rt_, dd, dd_elems);
      if (dq_set && dq != dq_set->data) rt_->CastFromF32(dq, dq_set->data, dq_set->dtype, dq_elems);
      if (dd_set && dd != dd_set->data) rt_->CastFromF32(dd, dd_set->data, dd_set->dtype, dd_elems);
      rt_->Synchronize();
      return;
    }
    MaxsimTrainParams p = BaseParams(a, *q, *d);
    p.argmax = DevPtr<void>(argmax);
    p.argmax16 = argmax16 ? 1 : 0;
    p.grad_scores = DevPtr<const double>(grad.get());
    p.dq = DevPtr<float>(dq);
    p.dd = DevPtr<float>(dd);

    // dQ: one warp per query token, 8 tokens of one query per block; every real row is written.
    timer.Mark();
    if (q->tokens > 0) {
      Launch1D(rt_, std::string("maxsim_train_dq_") + KernelSuffix(a.d.dtype), a.q.count * CeilDiv(a.stride, 8), 256, p);
    }
    timer.Device("dQ");

    if (d->tokens > 0) {
      bool atomic = path == DDPath::kAtomic;
      if (!atomic) atomic = !RunCsr(p);  // false: 'auto' chose the atomic scatter before writing dD
      if (atomic) {
        ran_atomic = true;
        ZeroWords(rt_, dd, dd_elems);
        Launch1D(rt_, "maxsim_train_dd_atomic", CeilDiv(static_cast<int64_t>(slots), 4), 128, p);
      }
    }
    timer.Device("dD");
    if (timer.on()) rt_->Synchronize();
    timer.Host("kernelsWait");
    if (state) {
      if (dq != dq_set->data) rt_->CastFromF32(dq, dq_set->data, dq_set->dtype, dq_elems);
      if (dd != dd_set->data) rt_->CastFromF32(dd, dd_set->data, dd_set->dtype, dd_elems);
      // The gradients stay on the device; the scratch blocks above go back to the allocator when
      // this scope ends, and other jobs may use other streams: finish first.
      rt_->Synchronize();
    } else {
      // Downloads synchronize the stream before the scratch blocks are released.
      DownloadRows(rt_, a.q, dq, dq_elems, dq_out);
      DownloadRows(rt_, a.d, dd, dd_elems, dd_out);
      timer.Host("download");
    }
    if (timer.on()) phases = timer.Finish();
  }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object o = result.Value();
    if (state) {
      o.Set("dQ", maxsim_binding::WrapDeviceSet(env, std::move(dq_set)));
      o.Set("dD", maxsim_binding::WrapDeviceSet(env, std::move(dd_set)));
    }
    o.Set("dDPath", Napi::String::New(env, ran_atomic ? "atomic" : "csr"));
    if (profile) o.Set("profileMs", PhasesToJs(env, phases));
    return o;
  }

 private:
  // Checks every entry the kernels read (query token s < the query's length: -1 or a token of the
  // document; the array is caller-visible, so an edit must not send a read out of bounds) and uploads,
  // narrowed to int16 when argmax16, a chunk of whole pairs at a time (the checked values are the
  // uploaded ones). Entries past a query's length are never read; they go up as -1.
  void UploadArgmax(cu::CUdeviceptr dst) {
    const int64_t stride = a.stride;
    if (stride == 0) return;
    constexpr int64_t kChunkSlots = int64_t(1) << 22;
    const int64_t pairs_per_chunk = std::max<int64_t>(1, kChunkSlots / stride);
    std::vector<int16_t> narrow(argmax16 ? static_cast<size_t>(std::min<int64_t>(a.num_pairs, pairs_per_chunk) * stride) : 0);
    for (int64_t p0 = 0; p0 < a.num_pairs; p0 += pairs_per_chunk) {
      const int64_t p1 = std::min(a.num_pairs, p0 + pairs_per_chunk);
      for (int64_t p = p0; p < p1; p++) {
        const int64_t i = a.pairs == 0 ? p / a.d.count : p;
        const int64_t j = a.pairs == 0 ? p % a.d.count : p;
        const int32_t lq = a.q.lengths[i];
        const int32_t ld = a.d.lengths[j];
        const int32_t* src = argmax_in + p * stride;
        // Branch-free check (t + 1 > ld unsigned <=> t < -1 or t >= ld) fused with the narrowing: one
        // vectorizable pass; the first bad entry is looked up only for the message.
        const uint32_t limit = static_cast<uint32_t>(std::max<int32_t>(ld, 0));
        uint32_t bad = 0;
        if (argmax16) {
          int16_t* out = narrow.data() + (p - p0) * stride;
          for (int64_t s = 0; s < lq; s++) {
            bad |= static_cast<uint32_t>(static_cast<uint32_t>(src[s]) + 1u > limit);
            out[s] = static_cast<int16_t>(src[s]);
          }
          for (int64_t s = std::max<int32_t>(lq, 0); s < stride; s++) out[s] = -1;
        } else {
          for (int64_t s = 0; s < lq; s++) bad |= static_cast<uint32_t>(static_cast<uint32_t>(src[s]) + 1u > limit);
        }
        if (bad) {
          for (int64_t s = 0; s < lq; s++) {
            if (src[s] < -1 || src[s] >= ld) {
              throw std::invalid_argument("Expected argmax entries in [-1, " + std::to_string(ld) + ") for pair " +
                                          std::to_string(p) + " but received " + std::to_string(src[s]));
            }
          }
        }
      }
      const uint64_t n = static_cast<uint64_t>((p1 - p0) * stride);
      if (argmax16) {
        rt_->Upload(dst + static_cast<uint64_t>(p0 * stride) * sizeof(int16_t), narrow.data(), n * sizeof(int16_t));
      } else {
        rt_->Upload(dst + static_cast<uint64_t>(p0 * stride) * sizeof(int32_t), argmax_in + p0 * stride,
                    n * sizeof(int32_t));
      }
    }
  }

  // The deterministic dD: document block after document block, count -> scan -> place -> gather.
  // Returns false without touching dD when path is 'auto' and the first block's contention is low.
  bool RunCsr(MaxsimTrainParams p) {
    const std::vector<DocBlock> blocks = PlanDocBlocks(a, doc_block, query_block);
    int64_t max_cells = 1, max_bound = 1;
    for (const DocBlock& b : blocks) {
      max_cells = std::max(max_cells, b.cells());
      max_bound = std::max(max_bound, b.bound);
    }
    int64_t max_rows = 1;
    for (const DocBlock& b : blocks) max_rows = std::max(max_rows, b.row_end - b.row_begin);
    const int64_t max_chunks = 2 * max_bound / csr_chunk + 1;
    const int64_t max_tiles = CeilDiv(max_cells, 4096);  // kScanTile in maxsim_train.cu
    ScopedBlock counts(rt_->allocator(), static_cast<uint64_t>(max_cells) * sizeof(uint32_t));
    ScopedBlock offsets(rt_->allocator(), static_cast<uint64_t>(max_cells + 1) * sizeof(uint32_t));
    ScopedBlock block_sums(rt_->allocator(), static_cast<uint64_t>(max_tiles) * sizeof(uint32_t));
    ScopedBlock sources(rt_->allocator(), static_cast<uint64_t>(max_bound) * sizeof(uint32_t));
    ScopedBlock stats(rt_->allocator(), 2 * sizeof(unsigned long long));
    ScopedBlock chunk_off(rt_->allocator(), static_cast<uint64_t>(max_rows + 1) * sizeof(uint32_t));
    ScopedBlock chunk_row(rt_->allocator(), static_cast<uint64_t>(max_chunks) * sizeof(uint32_t));
    ScopedBlock partials(rt_->allocator(), static_cast<uint64_t>(max_chunks * kPartialCols) * sizeof(double));
    p.counts = DevPtr<uint32_t>(counts.get());
    p.offsets = DevPtr<uint32_t>(offsets.get());
    p.block_sums = DevPtr<uint32_t>(block_sums.get());
    p.sources = DevPtr<uint32_t>(sources.get());
    p.stats = DevPtr<unsigned long long>(stats.get());
    p.chunk_off = DevPtr<uint32_t>(chunk_off.get());
    p.chunk_row = DevPtr<uint32_t>(chunk_row.get());
    p.partials = DevPtr<double>(partials.get());
    p.chunk = csr_chunk;
    p.max_chunks = max_chunks;
    const std::string gather = std::string("maxsim_train_dd_gather_") + KernelSuffix(a.q.dtype);
    const std::string gather_split = std::string("maxsim_train_dd_gather_split_") + KernelSuffix(a.q.dtype);
    bool decided = path != DDPath::kAuto;
    for (size_t k = 0; k < blocks.size(); k++) {
      const DocBlock& b = blocks[k];
      p.doc_begin = b.doc_begin;
      p.doc_end = b.doc_end;
      p.row_begin = b.row_begin;
      p.row_end = b.row_end;
      p.qblocks = b.qblocks;
      p.qblock_size = b.qblock_size;
      p.cells = b.cells();
      if (b.row_end == b.row_begin) continue;  // only empty documents: no rows to write
      const int64_t walk_blocks = CeilDiv(static_cast<int64_t>(b.doc_end - b.doc_begin) * b.qblocks, 4);
      const int64_t tiles = CeilDiv(p.cells, 4096);
      ZeroWords(rt_, counts.get(), static_cast<uint64_t>(p.cells));
      Launch1D(rt_, "maxsim_train_dd_count", walk_blocks, 128, p);
      Launch1D(rt_, "maxsim_train_dd_scan_reduce", tiles, 1024, p);
      Launch1D(rt_, "maxsim_train_dd_scan_top", 1, 1024, p);
      Launch1D(rt_, "maxsim_train_dd_scan_down", tiles, 1024, p);
      if (!decided) {  // 'auto': the first block with rows measures the contention
        decided = true;
        ZeroWords(rt_, stats.get(), 4);
        Launch1D(rt_, "maxsim_train_dd_stats", std::min<int64_t>(CeilDiv(b.row_end - b.row_begin, 256), 1024), 256, p);
        uint32_t total = 0;
        unsigned long long distinct = 0;
        rt_->Download(&total, offsets.get() + static_cast<uint64_t>(p.cells) * sizeof(uint32_t), sizeof(total));
        rt_->Download(&distinct, stats.get(), sizeof(distinct));
        if (total > 0 && static_cast<double>(distinct) >= kAutoAtomicDistinct * static_cast<double>(total)) return false;
      }
      Launch1D(rt_, "maxsim_train_dd_place", walk_blocks, 128, p);
      const int64_t rows = b.row_end - b.row_begin;
      Launch1D(rt_, gather, CeilDiv(rows, 4), 128, p);  // rows of at most csr_chunk sources
      // Split rows: chunks per row (into counts, free after place) -> chunk_off (the scan kernels on
      // rows instead of cells) -> chunk -> row map -> per column slice: chunk sums, then the rows.
      const int64_t row_threads = std::min<int64_t>(CeilDiv(rows, 256), 4096);
      Launch1D(rt_, "maxsim_train_dd_chunk_count", row_threads, 256, p);
      MaxsimTrainParams pc = p;
      pc.offsets = p.chunk_off;
      pc.cells = rows;
      const int64_t row_tiles = CeilDiv(rows, 4096);
      Launch1D(rt_, "maxsim_train_dd_scan_reduce", row_tiles, 1024, pc);
      Launch1D(rt_, "maxsim_train_dd_scan_top", 1, 1024, pc);
      Launch1D(rt_, "maxsim_train_dd_scan_down", row_tiles, 1024, pc);
      Launch1D(rt_, "maxsim_train_dd_chunk_map", row_threads, 256, p);
      const int64_t chunk_bound = std::min(max_chunks, 2 * b.bound / csr_chunk + 1);
      for (int64_t k0 = 0; k0 < a.q.dim; k0 += kPartialCols) {
        p.k_begin = k0;
        Launch1D(rt_, gather_split, CeilDiv(chunk_bound, 4), 128, p);
        Launch1D(rt_, "maxsim_train_dd_combine", CeilDiv(rows, 4), 128, p);
      }
    }
    // The CSR blocks go back to the allocator when this scope ends: finish using them first.
    rt_->Synchronize();
    return true;
  }

  Runtime* rt_;
};

// { dDPath?, docBlock?, queryBlock?, csrChunk?, profile? } of both backward entry points.
void ParseBackwardOptions(Napi::Env env, const Napi::Object& opts, BackwardTask* task) {
  Napi::Value path = opts.Get("dDPath");
  if (!path.IsUndefined()) {
    const std::string s = path.IsString() ? path.As<Napi::String>().Utf8Value() : std::string("?");
    if (s == "atomic") {
      task->path = DDPath::kAtomic;
    } else if (s == "auto") {
      task->path = DDPath::kAuto;
    } else if (s != "csr") {
      throw ArgError(env, "dDPath", "'csr', 'atomic' or 'auto'", "'" + s + "'");
    }
  }
  task->doc_block = CountOption(env, opts, "docBlock");
  task->csr_chunk = CountOption(env, opts, "csrChunk");
  if (task->csr_chunk == 0) task->csr_chunk = kCsrChunk;
  if (task->csr_chunk < kCsrChunkMin) {
    throw ArgError(env, "csrChunk", "0 (automatic) or an integer >= " + std::to_string(kCsrChunkMin),
                   std::to_string(task->csr_chunk));
  }
  task->query_block = CountOption(env, opts, "queryBlock");
  task->profile = ProfileOption(opts);
}

Napi::Value TrainBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  Runtime* rt = ParseDevice(env, info[0]);
  auto task = std::make_unique<BackwardTask>(env, rt);
  task->a = ParseProblem(info, 1, 5, task.get(), rt);
  const Problem& a = task->a;
  if (a.q_dev || a.d_dev) {
    throw ArgError(env, a.q_dev ? "queries" : "docs", "a host batch (device-resident inputs train through trainBackwardState)",
                   "a device token set");
  }
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
  Napi::Object opts = info[5].As<Napi::Object>();
  ParseBackwardOptions(env, opts, task.get());
  task->argmax16 = UseArgmax16(env, a, opts);
  // The argmax entries are checked on the worker thread while they are narrowed (UploadArgmax).
  task->Keep(info[3]);
  task->Keep(info[4]);
  task->argmax_in = info[3].As<Napi::Int32Array>().Data();
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

// trainBackwardState(device, state, gradScores, { retain?, outputDtype?, dDPath?, docBlock?, queryBlock?, csrChunk?, profile? })
//   -> Promise<{ dQ, dD, dDPath }>: device token sets with the items of the queries and docs, float32
//   or (outputDtype 'input') each in its input's dtype.
// Without retain the state is released now (a second backward fails with a clear error) and its
// memory returns once this job is done.
Napi::Value TrainBackwardState(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  Runtime* rt = ParseDevice(env, info[0]);
  std::shared_ptr<TrainState> state = LiveState(env, info[1], "state", rt);
  auto task = std::make_unique<BackwardTask>(env, rt);
  task->a = state->a;
  task->a.Rebind();
  const int64_t pairs = task->a.num_pairs;
  if (!info[2].IsTypedArray() || info[2].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array ||
      static_cast<int64_t>(info[2].As<Napi::Float64Array>().ElementLength()) != pairs) {
    throw ArgError(env, "gradScores", "a Float64Array of " + std::to_string(pairs) + " entries",
                   maxsim_binding::Describe(info[2]));
  }
  if (!info[3].IsObject()) throw ArgError(env, "options", "an object", maxsim_binding::Describe(info[3]));
  Napi::Object opts = info[3].As<Napi::Object>();
  ParseBackwardOptions(env, opts, task.get());
  task->argmax16 = state->argmax16;
  Napi::Value out = opts.Get("outputDtype");
  if (!out.IsUndefined()) {
    const std::string s = out.IsString() ? out.As<Napi::String>().Utf8Value() : std::string("?");
    if (s != "float32" && s != "input") throw ArgError(env, "outputDtype", "'float32' or 'input'", "'" + s + "'");
    task->input_dtype = s == "input";
  }
  task->Keep(info[2]);
  task->grad_in = info[2].As<Napi::Float64Array>().Data();
  task->state = state;
  Napi::Value retain = opts.Get("retain");
  if (!(retain.IsBoolean() && retain.As<Napi::Boolean>().Value())) UnwrapState(env, info[1], "state")->state.reset();
  task->result = Napi::Persistent(Napi::Object::New(env));
  return channel->Submit(env, rt, std::move(task));
}

// trainArgmax(device, state) -> Promise<Int32Array>: the saved argmax, [pairs * stride].
class ArgmaxTask : public TrainTask {
 public:
  ArgmaxTask(Napi::Env env, Runtime* rt) : TrainTask(env, "CUDA training failed: "), rt_(rt) {}
  std::shared_ptr<TrainState> state;
  int32_t* out = nullptr;
  Napi::ObjectReference array;
  void Run() override {
    rt_->EnsureReady();
    const uint64_t slots = static_cast<uint64_t>(state->a.num_pairs) * static_cast<uint64_t>(state->a.stride);
    if (slots > 0) DownloadArgmax(rt_, state->argmax, slots, state->argmax16, out);
  }
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

}  // namespace

void InitCudaTrain(Napi::Env env, Napi::Object exports) {
  TaskChannel* channel = TaskChannel::Create(env, "maxsim.cuda.train");
  Napi::Value cuda = exports.Get("cuda");
  if (!cuda.IsObject()) throw Napi::Error::New(env, "InitCudaTrain must run after InitCuda (exports.cuda is missing)");
  Napi::Object o = cuda.As<Napi::Object>();
  o.Set("trainForward", Napi::Function::New(env, TrainForward, "trainForward", channel));
  o.Set("trainBackward", Napi::Function::New(env, TrainBackward, "trainBackward", channel));
  o.Set("trainBackwardState", Napi::Function::New(env, TrainBackwardState, "trainBackwardState", channel));
  o.Set("trainArgmax", Napi::Function::New(env, TrainArgmax, "trainArgmax", channel));
  o.Set("trainRelease", Napi::Function::New(env, TrainRelease, "trainRelease"));
}
