// Node-API glue for the Chamfer kernels on the GPU (native/cuda/kernels/maxsim_chamfer.cu), attached
// to exports.cuda as chamferForward / chamferBackward. Host arrays in and out, like the CPU binding
// (chamfer_binding.cc): each call packs the clouds compact, uploads them, runs the kernels on the
// device's worker thread and returns the CPU engine's layouts through a Promise.
//
// Device memory beyond the inputs (fp32 [T, d]): centred rows [T, d + 1] f32, the argmin and the
// distances [T] (forward); the backward adds the CSR (counts, offsets [T] u32, sources [T] u32), the
// weights [T] f64 and the gradients [T, d] f32.
#include <napi.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "../cuda/kernels/maxsim_chamfer_params.h"
#include "../cuda/runtime.h"
#include "cuda_task.h"
#include "token_set.h"

namespace {

using maxsim_binding::ArgError;
using maxsim_binding::ParseDevice;
using maxsim_binding::TaskChannel;
using maxsim_cuda::LaunchSpec;
using maxsim_cuda::Runtime;
using maxsim_cuda::ScopedBlock;

constexpr int64_t kMaxGrid = int64_t(1) << 20;

template <typename P>
P* DevPtr(cu::CUdeviceptr p) {
  return reinterpret_cast<P*>(static_cast<uintptr_t>(p));
}

// Both clouds of every pair, as the kernels read them: compact coordinates and running offsets.
struct Clouds {
  TokenSet p_set, q_set;
  int64_t dim = 0, pairs = 0, tp = 0, tq = 0;
  std::vector<float> p, q;         // compact [T, d] (packed on the JS thread: the inputs may change after)
  std::vector<int64_t> p_off, q_off;
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
    if (s->dim < 1 || s->dim > 8) throw ArgError(env, name + ".dim", "a dimension in [1, 8]", std::to_string(s->dim));
  }
  if (c.p_set.dim != c.q_set.dim) throw ArgError(env, "Q.dim", std::to_string(c.p_set.dim), std::to_string(c.q_set.dim));
  if (c.p_set.count != c.q_set.count) {
    throw ArgError(env, "Q.count", std::to_string(c.p_set.count) + " clouds", std::to_string(c.q_set.count));
  }
  c.dim = c.p_set.dim;
  c.pairs = c.p_set.count;
  Pack(c.p_set, &c.p, &c.p_off);
  Pack(c.q_set, &c.q, &c.q_off);
  c.tp = c.p_off.back();
  c.tq = c.q_off.back();
  if (c.tp + c.tq >= (int64_t(1) << 32) - 1) {
    throw ArgError(env, "P, Q", "fewer than 2^32 points in all (the CSR indexes them in 32 bits)",
                   std::to_string(c.tp + c.tq));
  }
  return c;
}

void Launch(Runtime* rt, const std::string& kernel, int64_t blocks, unsigned threads, const ChamferParams& p) {
  if (blocks <= 0) return;
  LaunchSpec spec;
  spec.kernel = kernel;
  spec.grid[0] = static_cast<unsigned>(std::min(blocks, kMaxGrid));
  spec.block[0] = threads;
  rt->LaunchWithParams(spec, &p);
}

int64_t Blocks(int64_t n, int64_t per) { return std::max<int64_t>(1, (n + per - 1) / per); }

void Zero(Runtime* rt, cu::CUdeviceptr ptr, uint64_t words) {
  if (words > 0) maxsim_cuda::Check(maxsim_cuda::Api().cuMemsetD32Async(ptr, 0u, words, rt->stream()), "cuMemsetD32Async");
}

// The device copies every pass needs: raw points, offsets, centred rows (made by chamfer_center and
// chamfer_prep).
struct DeviceClouds {
  std::unique_ptr<ScopedBlock> p_raw, q_raw, p_cen, q_cen, p_off, q_off, centers;
  ChamferParams params{};
};

DeviceClouds Upload(Runtime* rt, const Clouds& c, bool centred) {
  DeviceClouds d;
  auto block = [&](uint64_t bytes) { return std::make_unique<ScopedBlock>(rt->allocator(), std::max<uint64_t>(bytes, 16)); };
  d.p_raw = block(c.p.size() * sizeof(float));
  d.q_raw = block(c.q.size() * sizeof(float));
  d.p_off = block(c.p_off.size() * sizeof(int64_t));
  d.q_off = block(c.q_off.size() * sizeof(int64_t));
  rt->Upload(d.p_raw->get(), c.p.data(), c.p.size() * sizeof(float));
  rt->Upload(d.q_raw->get(), c.q.data(), c.q.size() * sizeof(float));
  rt->Upload(d.p_off->get(), c.p_off.data(), c.p_off.size() * sizeof(int64_t));
  rt->Upload(d.q_off->get(), c.q_off.data(), c.q_off.size() * sizeof(int64_t));
  ChamferParams& p = d.params;
  p.p_raw = DevPtr<const float>(d.p_raw->get());
  p.q_raw = DevPtr<const float>(d.q_raw->get());
  p.p_off = DevPtr<const int64_t>(d.p_off->get());
  p.q_off = DevPtr<const int64_t>(d.q_off->get());
  p.num_pairs = c.pairs;
  p.tp = c.tp;
  p.tq = c.tq;
  p.rows = c.tp + c.tq;
  p.dim = static_cast<int32_t>(c.dim);
  if (centred) {
    d.p_cen = block(static_cast<uint64_t>(c.tp * (c.dim + 1)) * sizeof(float));
    d.q_cen = block(static_cast<uint64_t>(c.tq * (c.dim + 1)) * sizeof(float));
    d.centers = block(static_cast<uint64_t>(c.pairs * c.dim) * sizeof(float));
    p.p_cen = DevPtr<float>(d.p_cen->get());
    p.q_cen = DevPtr<float>(d.q_cen->get());
    p.centers = DevPtr<float>(d.centers->get());
    Launch(rt, "chamfer_center", c.pairs, 256, p);
    Launch(rt, "chamfer_prep", Blocks(c.tp + c.tq, 256), 256, p);
  }
  return d;
}

// ---------------------------------------------------------------------------------------------
// chamferForward(device, P, Q, { bidirectional }) -> Promise<{ indexPQ, distPQ, indexQP?, distQP? }>

class ForwardTask : public maxsim_binding::CudaTask {
 public:
  ForwardTask(Napi::Env env, Runtime* rt) : CudaTask(env, "CUDA chamfer failed: "), rt_(rt) {}
  Clouds c;
  bool both = true;
  int32_t *ipq = nullptr, *iqp = nullptr;
  float *dpq = nullptr, *dqp = nullptr;
  Napi::ObjectReference result;

  void Run() override {
    rt_->EnsureReady();
    if (c.pairs == 0) return;
    DeviceClouds d = Upload(rt_, c, true);
    ChamferParams p = d.params;
    ScopedBlock idx(rt_->allocator(), static_cast<uint64_t>(std::max<int64_t>(c.tp + c.tq, 1)) * 4);
    ScopedBlock dist(rt_->allocator(), static_cast<uint64_t>(std::max<int64_t>(c.tp + c.tq, 1)) * 4);
    p.idx_pq = DevPtr<int32_t>(idx.get());
    p.idx_qp = p.idx_pq + c.tp;
    p.dist_pq = DevPtr<float>(dist.get());
    p.dist_qp = p.dist_pq + c.tp;
    p.bidirectional = both ? 1 : 0;
    // Tiles of kChamferTile sources, per direction and pair.
    std::vector<int64_t> tiles;
    for (int dir = 0; dir < (both ? 2 : 1); dir++) {
      const std::vector<int64_t>& off = dir == 0 ? c.p_off : c.q_off;
      for (int64_t b = 0; b < c.pairs; b++) {
        for (int64_t i = 0; i < off[b + 1] - off[b]; i += kChamferTile) tiles.insert(tiles.end(), {dir, b, i});
      }
    }
    p.num_tiles = static_cast<int64_t>(tiles.size() / 3);
    ScopedBlock tiles_dev(rt_->allocator(), std::max<uint64_t>(tiles.size() * sizeof(int64_t), 16));
    rt_->Upload(tiles_dev.get(), tiles.data(), tiles.size() * sizeof(int64_t));
    p.tiles = DevPtr<const int64_t>(tiles_dev.get());
    Launch(rt_, "chamfer_nearest_d" + std::to_string(c.dim), p.num_tiles, 256, p);
    rt_->Synchronize();
    rt_->Download(ipq, idx.get(), static_cast<uint64_t>(c.tp) * 4);
    rt_->Download(dpq, dist.get(), static_cast<uint64_t>(c.tp) * 4);
    if (both) {
      rt_->Download(iqp, idx.get() + static_cast<uint64_t>(c.tp) * 4, static_cast<uint64_t>(c.tq) * 4);
      rt_->Download(dqp, dist.get() + static_cast<uint64_t>(c.tp) * 4, static_cast<uint64_t>(c.tq) * 4);
    }
  }
  Napi::Value Result(Napi::Env) override { return result.Value(); }

 private:
  Runtime* rt_;
};

Napi::Value ChamferForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  Runtime* rt = ParseDevice(env, info[0]);
  auto task = std::make_unique<ForwardTask>(env, rt);
  task->c = ParseClouds(env, info);
  if (info[3].IsObject()) {
    Napi::Value v = info[3].As<Napi::Object>().Get("bidirectional");
    if (v.IsBoolean()) task->both = v.As<Napi::Boolean>().Value();
  }
  Napi::Object result = Napi::Object::New(env);
  Napi::Int32Array ipq = Napi::Int32Array::New(env, static_cast<size_t>(task->c.tp));
  Napi::Float32Array dpq = Napi::Float32Array::New(env, static_cast<size_t>(task->c.tp));
  result.Set("indexPQ", ipq);
  result.Set("distPQ", dpq);
  result.Set("isa", "cuda");
  task->ipq = ipq.Data();
  task->dpq = dpq.Data();
  if (task->both) {
    Napi::Int32Array iqp = Napi::Int32Array::New(env, static_cast<size_t>(task->c.tq));
    Napi::Float32Array dqp = Napi::Float32Array::New(env, static_cast<size_t>(task->c.tq));
    result.Set("indexQP", iqp);
    result.Set("distQP", dqp);
    task->iqp = iqp.Data();
    task->dqp = dqp.Data();
  }
  task->result = Napi::Persistent(result);
  return channel->Submit(env, rt, std::move(task));
}

// ---------------------------------------------------------------------------------------------
// chamferBackward(device, P, Q, indexPQ, weightP, indexQP | null, weightQ | null, { path })
//   -> Promise<{ dP, dQ, path }> (dP / dQ in the layout of the input buffers). path: 'csr' (default,
//   deterministic, bitwise the CPU engine's) or 'atomic' (float atomics, for comparison).

class BackwardTask : public maxsim_binding::CudaTask {
 public:
  BackwardTask(Napi::Env env, Runtime* rt) : CudaTask(env, "CUDA chamfer backward failed: "), rt_(rt) {}
  Clouds c;
  std::vector<int32_t> idx;  // [tp + tq]: indexPQ then indexQP (copied on the JS thread)
  std::vector<double> w;     // [tp + tq]
  bool both = true;
  bool atomic = false;
  float *dp_out = nullptr, *dq_out = nullptr;
  Napi::ObjectReference result;

  void Run() override {
    rt_->EnsureReady();
    if (c.pairs == 0) return;
    DeviceClouds d = Upload(rt_, c, false);
    ChamferParams p = d.params;
    const int64_t rows = c.tp + c.tq;
    auto block = [&](uint64_t bytes) { return std::make_unique<ScopedBlock>(rt_->allocator(), std::max<uint64_t>(bytes, 16)); };
    auto idx_dev = block(idx.size() * 4);
    auto w_dev = block(w.size() * 8);
    auto grads = block(static_cast<uint64_t>(rows * c.dim) * 4);
    rt_->Upload(idx_dev->get(), idx.data(), idx.size() * 4);
    rt_->Upload(w_dev->get(), w.data(), w.size() * 8);
    p.idx_pq = DevPtr<int32_t>(idx_dev->get());
    p.idx_qp = p.idx_pq + c.tp;
    p.w_p = DevPtr<const double>(w_dev->get());
    p.w_q = p.w_p + c.tp;
    p.dp = DevPtr<float>(grads->get());
    p.dq = p.dp + c.tp * c.dim;
    p.bidirectional = both ? 1 : 0;
    const int64_t sources = both ? rows : c.tp;
    std::unique_ptr<ScopedBlock> counts, offsets, sums, list;
    if (atomic) {
      Zero(rt_, grads->get(), static_cast<uint64_t>(rows * c.dim));
      Launch(rt_, "chamfer_grad_atomic", Blocks(sources, 256), 256, p);
    } else {
      const int64_t scan_blocks = Blocks(rows, 1024);
      counts = block(static_cast<uint64_t>(rows) * 4);
      offsets = block(static_cast<uint64_t>(rows + 1) * 4);
      sums = block(static_cast<uint64_t>(scan_blocks) * 4);
      list = block(static_cast<uint64_t>(sources) * 4);
      p.counts = DevPtr<uint32_t>(counts->get());
      p.offsets = DevPtr<uint32_t>(offsets->get());
      p.block_sums = DevPtr<uint32_t>(sums->get());
      p.sources = DevPtr<uint32_t>(list->get());
      Zero(rt_, counts->get(), static_cast<uint64_t>(rows));
      Launch(rt_, "chamfer_csr_count", Blocks(sources, 256), 256, p);
      Launch(rt_, "chamfer_scan_local", scan_blocks, 1024, p);
      Launch(rt_, "chamfer_scan_sums", 1, 1024, p);
      Launch(rt_, "chamfer_scan_add", scan_blocks, 1024, p);
      Launch(rt_, "chamfer_csr_fill", Blocks(sources, 256), 256, p);
      Launch(rt_, "chamfer_csr_sort", Blocks(rows, 256), 256, p);
      Launch(rt_, "chamfer_grad", Blocks(rows, 256), 256, p);
    }
    rt_->Synchronize();
    std::vector<float> g(static_cast<size_t>(rows * c.dim));
    rt_->Download(g.data(), grads->get(), g.size() * 4);
    // Compact rows back into the layout of the input buffers.
    for (int side = 0; side < 2; side++) {
      const TokenSet& s = side == 0 ? c.p_set : c.q_set;
      const std::vector<int64_t>& off = side == 0 ? c.p_off : c.q_off;
      const float* src = g.data() + (side == 0 ? 0 : c.tp * c.dim);
      float* out = side == 0 ? dp_out : dq_out;
      for (int64_t b = 0; b < c.pairs; b++) {
        std::copy(src + off[b] * c.dim, src + off[b + 1] * c.dim, out + static_cast<int64_t>(s.starts[b]) * c.dim);
      }
    }
  }
  Napi::Value Result(Napi::Env) override { return result.Value(); }

 private:
  Runtime* rt_;
};

const int32_t* Int32Arg(Napi::Env env, const Napi::Value& v, int64_t n, const std::string& name) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array ||
      static_cast<int64_t>(v.As<Napi::Int32Array>().ElementLength()) != n) {
    throw ArgError(env, name, "an Int32Array of " + std::to_string(n) + " entries", maxsim_binding::Describe(v));
  }
  return v.As<Napi::Int32Array>().Data();
}

const double* Float64Arg(Napi::Env env, const Napi::Value& v, int64_t n, const std::string& name) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array ||
      static_cast<int64_t>(v.As<Napi::Float64Array>().ElementLength()) != n) {
    throw ArgError(env, name, "a Float64Array of " + std::to_string(n) + " entries", maxsim_binding::Describe(v));
  }
  return v.As<Napi::Float64Array>().Data();
}

// Every index must address a point of the paired cloud, or be -1 exactly where that cloud is empty.
void CheckIndices(Napi::Env env, const int32_t* idx, const std::vector<int64_t>& src_off,
                  const std::vector<int64_t>& dst_off, const std::string& name) {
  for (size_t b = 0; b + 1 < src_off.size(); b++) {
    const int64_t m = dst_off[b + 1] - dst_off[b];
    for (int64_t i = src_off[b]; i < src_off[b + 1]; i++) {
      if (m == 0 ? idx[i] != -1 : (idx[i] < 0 || idx[i] >= m)) {
        throw Napi::RangeError::New(env, "Expected " + name + "[" + std::to_string(i) + "] in " +
                                             (m == 0 ? std::string("{-1}") : "[0, " + std::to_string(m) + ")") +
                                             " but received " + std::to_string(idx[i]));
      }
    }
  }
}

Napi::Value ChamferBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* channel = static_cast<TaskChannel*>(info.Data());
  Runtime* rt = ParseDevice(env, info[0]);
  auto task = std::make_unique<BackwardTask>(env, rt);
  task->c = ParseClouds(env, info);
  CheckDisjoint(env, task->c.p_set, "P");
  CheckDisjoint(env, task->c.q_set, "Q");
  const Clouds& c = task->c;
  const int32_t* ipq = Int32Arg(env, info[3], c.tp, "indexPQ");
  const double* wp = Float64Arg(env, info[4], c.tp, "weightP");
  CheckIndices(env, ipq, c.p_off, c.q_off, "indexPQ");
  task->both = !info[5].IsNull() && !info[5].IsUndefined();
  task->idx.assign(ipq, ipq + c.tp);
  task->w.assign(wp, wp + c.tp);
  task->idx.resize(static_cast<size_t>(c.tp + c.tq), -1);
  task->w.resize(static_cast<size_t>(c.tp + c.tq), 0.0);
  if (task->both) {
    const int32_t* iqp = Int32Arg(env, info[5], c.tq, "indexQP");
    const double* wq = Float64Arg(env, info[6], c.tq, "weightQ");
    CheckIndices(env, iqp, c.q_off, c.p_off, "indexQP");
    std::copy(iqp, iqp + c.tq, task->idx.begin() + c.tp);
    std::copy(wq, wq + c.tq, task->w.begin() + c.tp);
  }
  std::string path = "csr";
  if (info[7].IsObject()) {
    Napi::Value v = info[7].As<Napi::Object>().Get("path");
    if (v.IsString()) path = v.As<Napi::String>().Utf8Value();
  }
  if (path != "csr" && path != "atomic") throw ArgError(env, "path", "'csr' or 'atomic'", "'" + path + "'");
  task->atomic = path == "atomic";
  Napi::Float32Array dp = Napi::Float32Array::New(env, static_cast<size_t>(c.p_set.elements));
  Napi::Float32Array dq = Napi::Float32Array::New(env, static_cast<size_t>(c.q_set.elements));
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
