// The backward job: dQ and dD from the argmax and the score gradients.
#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "train_internal.h"

namespace maxsim_cuda::train {

namespace {

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

// Downloads packed gradient rows [tokens, dim] into out (the batch's layout, zero-filled by the caller).
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

// Checks every entry the kernels read (query token s < the query's length: -1 or a token of the
// document; the array is caller-visible, so an edit must not send a read out of bounds) and uploads,
// narrowed to int16 when argmax16, a chunk of whole pairs at a time (the checked values are the
// uploaded ones). Entries past a query's length are never read; they go up as -1.
void UploadArgmax(Runtime* rt, const Problem& a, const int32_t* argmax_in, bool argmax16, cu::CUdeviceptr dst) {
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
      rt->Upload(dst + static_cast<uint64_t>(p0 * stride) * sizeof(int16_t), narrow.data(), n * sizeof(int16_t));
    } else {
      rt->Upload(dst + static_cast<uint64_t>(p0 * stride) * sizeof(int32_t), argmax_in + p0 * stride,
                 n * sizeof(int32_t));
    }
  }
}

// Joins the side stream back on every way out (an exception included), so that work enqueued on
// the stream later (and the allocator's reuse of this job's blocks) waits for dQ.
struct Joiner {
  Runtime* rt;
  bool pending = false;
  void Join() {
    if (pending) rt->Join();
    pending = false;
  }
  ~Joiner() {
    try {
      Join();
    } catch (...) {  // a failing driver: the job's own error is the one reported
    }
  }
};

}  // namespace

void RunBackward(Runtime* rt, BackwardJob& job) {
  rt->EnsureReady();
  Problem& a = job.a;
  const std::shared_ptr<TrainState>& state = job.state;
  const bool argmax16 = state ? state->argmax16 : job.plan.argmax16;
  if (!state && a.num_pairs == 0) return;
  PhaseTimer timer(rt, job.profile);
  std::shared_ptr<DeviceTokens> q = a.q_dev, d = a.d_dev;
  if (!state) Materialize(rt, a, false, &q, &d);
  if (timer.on()) rt->Synchronize();
  timer.Host("uploadTokens");
  const int64_t dim = a.q.dim;
  const uint64_t slots = static_cast<uint64_t>(a.num_pairs) * static_cast<uint64_t>(a.stride);
  std::unique_ptr<ScopedBlock> argmax_scoped;
  cu::CUdeviceptr argmax = state ? state->argmax : 0;
  if (!state) {
    argmax_scoped = std::make_unique<ScopedBlock>(
        rt->allocator(), std::max<uint64_t>(slots, 1) * (argmax16 ? sizeof(int16_t) : sizeof(int32_t)));
    argmax = argmax_scoped->get();
    UploadArgmax(rt, a, job.argmax_in, argmax16, argmax);
  }
  ScopedBlock grad(rt->allocator(), std::max<uint64_t>(static_cast<uint64_t>(a.num_pairs), 1) * sizeof(double));
  if (job.contrastive) {
    timer.Mark();
    RunContrastiveLoss(rt, state.get(), *job.contrastive, grad.get());
    timer.Device("loss");
  } else if (a.num_pairs > 0) {
    rt->Upload(grad.get(), job.grad_in, static_cast<uint64_t>(a.num_pairs) * sizeof(double));
  }
  if (timer.on()) rt->Synchronize();
  timer.Host("uploadArgmax");
  // Tokens of the problem's items: a device set appended to after the forward holds more, which
  // this pass neither reads nor writes.
  const uint64_t dq_elems = static_cast<uint64_t>(TokensOf(a.q)) * static_cast<uint64_t>(dim);
  const uint64_t dd_elems = static_cast<uint64_t>(TokensOf(a.d)) * static_cast<uint64_t>(dim);
  // The kernels write float32: into the gradient set itself, or into scratch that is then cast
  // into a float16 / bfloat16 set (device, input_dtype), or into scratch that is downloaded.
  std::unique_ptr<ScopedBlock> dq_scoped, dd_scoped;
  cu::CUdeviceptr dq = 0, dd = 0;
  auto& dq_set = job.dq_set;
  auto& dd_set = job.dd_set;
  if (state) {
    dq_set = GradientSet(rt, *q, a.q_len, job.input_dtype ? a.q.dtype : DType::Float32);
    dd_set = GradientSet(rt, *d, a.d_len, job.input_dtype ? a.d.dtype : DType::Float32);
  }
  if (dq_set && dq_set->dtype == DType::Float32) {
    dq = dq_set->data;
  } else {
    dq_scoped = std::make_unique<ScopedBlock>(rt->allocator(), std::max<uint64_t>(dq_elems, 1) * sizeof(float));
    dq = dq_scoped->get();
  }
  if (dd_set && dd_set->dtype == DType::Float32) {
    dd = dd_set->data;
  } else {
    dd_scoped = std::make_unique<ScopedBlock>(rt->allocator(), std::max<uint64_t>(dd_elems, 1) * sizeof(float));
    dd = dd_scoped->get();
  }
  if (a.num_pairs == 0) {  // no queries or no documents: the gradients are zero
    ZeroWords(rt, dq, dq_elems);
    ZeroWords(rt, dd, dd_elems);
    if (dq_set && dq != dq_set->data) rt->CastFromF32(dq, dq_set->data, dq_set->dtype, dq_elems);
    if (dd_set && dd != dd_set->data) rt->CastFromF32(dd, dd_set->data, dd_set->dtype, dd_elems);
    rt->Synchronize();
    return;
  }
  MaxsimTrainParams p = BaseParams(a, *q, *d);
  p.argmax = DevPtr<void>(argmax);
  p.argmax16 = argmax16 ? 1 : 0;
  p.grad_scores = DevPtr<const double>(grad.get());
  p.dq = DevPtr<float>(dq);
  p.dd = DevPtr<float>(dd);

  // dQ: one warp per query token, 8 tokens of one query per block; every real row is written. On the
  // side stream, overlapping dD (its CSR build is latency-bound): the outputs are disjoint and both
  // only read the operands, the argmax and the score gradients. Not when profiling (phases in turn).
  const bool overlap = !timer.on() && q->tokens > 0 && d->tokens > 0;
  Joiner joiner{rt};
  timer.Mark();
  if (q->tokens > 0) {
    if (overlap) {
      rt->Fork();
      joiner.pending = true;
    }
    Launch1D(rt, std::string("maxsim_train_dq_") + KernelSuffix(a.d.dtype), a.q.count * CeilDiv(a.stride, 8), 256, p,
             0, nullptr, overlap ? rt->side_stream() : nullptr);
  }
  timer.Device("dQ");
  const size_t dd_from = timer.Mark();

  if (d->tokens > 0) {
    bool atomic = job.plan.dd == DDPath::kAtomic;
    if (!atomic) atomic = !RunCsr(rt, a, job.plan, p, timer);  // false: 'auto' chose the atomic scatter before writing dD
    if (atomic) {
      job.ran_atomic = true;
      ZeroWords(rt, dd, dd_elems);
      Launch1D(rt, "maxsim_train_dd_atomic", CeilDiv(static_cast<int64_t>(slots), 4), 128, p);
    }
  }
  joiner.Join();  // before anything reads dq
  timer.Device("dD", dd_from);
  if (timer.on()) rt->Synchronize();
  timer.Host("kernelsWait");
  if (state) {
    if (dq != dq_set->data) rt->CastFromF32(dq, dq_set->data, dq_set->dtype, dq_elems);
    if (dd != dd_set->data) rt->CastFromF32(dd, dd_set->data, dd_set->dtype, dd_elems);
    // The gradients stay on the device; the scratch blocks above go back to the allocator when
    // this scope ends, and other jobs may use other streams: finish first.
    rt->Synchronize();
  } else {
    // Downloads synchronize the stream before the scratch blocks are released.
    DownloadRows(rt, a.q, dq, dq_elems, job.dq_out);
    DownloadRows(rt, a.d, dd, dd_elems, job.dd_out);
    timer.Host("download");
  }
  if (timer.on()) job.phases = timer.Finish();
}

}  // namespace maxsim_cuda::train
