// The forward job: scores and argmax, downloaded or kept on the device as a training state.
#include <algorithm>

#include "train_internal.h"

namespace maxsim_cuda::train {

namespace {

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

}  // namespace

TrainState::~TrainState() {
  if (!argmax && !scores) return;
  Runtime* r = rt;
  r->Post([r, p = argmax, s = scores] {
    if (p) r->allocator().Free(p);
    if (s) r->allocator().Free(s);
  });
}

void RunForward(Runtime* rt, ForwardJob& job) {
  rt->EnsureReady();
  const ForwardPlan& plan = job.plan;
  const bool argmax16 = plan.argmax16;
  PhaseTimer timer(rt, job.profile);
  std::shared_ptr<DeviceTokens> q, d;
  Materialize(rt, job.a, job.keep, &q, &d);
  const uint64_t slots = static_cast<uint64_t>(job.a.num_pairs) * static_cast<uint64_t>(job.a.stride);
  const uint64_t entry = argmax16 ? sizeof(int16_t) : sizeof(int32_t);
  std::unique_ptr<ScopedBlock> argmax_scoped;
  cu::CUdeviceptr argmax = 0;
  if (job.keep) {
    job.state = std::make_shared<TrainState>();
    job.state->rt = rt;
    job.state->argmax16 = argmax16;
    job.state->argmax = rt->allocator().Alloc(std::max<uint64_t>(slots, 1) * entry);
    argmax = job.state->argmax;
    job.state->a = std::move(job.a);  // usable below through the state (vectors move with their data)
    job.state->a.Rebind();
  } else {
    argmax_scoped = std::make_unique<ScopedBlock>(rt->allocator(), std::max<uint64_t>(slots, 1) * entry);
    argmax = argmax_scoped->get();
  }
  const Problem& a = job.keep ? job.state->a : job.a;
  if (a.num_pairs == 0) return;
  const int64_t grid = plan.grid;
  const bool wg = plan.kernel == FwdKernel::kWgmma;
  // best[]: one stride-long stripe per CTA (simt, mma), or a slot per pair of one query chunk (wgmma)
  const uint64_t chunk_pairs = wg ? static_cast<uint64_t>(std::min<int64_t>(plan.query_chunk, a.q.count)) * a.d.count : 0;
  const uint64_t best_floats = (wg ? chunk_pairs : static_cast<uint64_t>(grid)) * static_cast<uint64_t>(a.stride);
  // A kept state keeps the scores on the device too (the contrastive loss of the step reads them).
  const uint64_t score_bytes = static_cast<uint64_t>(a.num_pairs) * sizeof(float);
  std::unique_ptr<ScopedBlock> scores_scoped;
  if (job.keep) {
    job.state->scores = rt->allocator().Alloc(score_bytes);
  } else {
    scores_scoped = std::make_unique<ScopedBlock>(rt->allocator(), score_bytes);
  }
  const cu::CUdeviceptr scores = job.keep ? job.state->scores : scores_scoped->get();
  ScopedBlock best(rt->allocator(), std::max<uint64_t>(best_floats, 1) * sizeof(float));
  MaxsimTrainParams p = BaseParams(a, *q, *d);
  p.scores = DevPtr<float>(scores);
  p.best = DevPtr<float>(best.get());
  p.argmax = DevPtr<void>(argmax);
  p.argmax16 = argmax16 ? 1 : 0;
  if (timer.on()) rt->Synchronize();
  timer.Host("upload");
  timer.Mark();
  if (wg) {
    // Launches over query chunks: each sees queries [q0, q0 + n) as its own (offset tables, scores
    // and argmax), reusing best[]; maxsim_train_fwd_sum then finishes the chunk's pairs.
    const std::string name = std::string(plan.tma ? "maxsim_train_fwd_wgmma_tma_" : "maxsim_train_fwd_wgmma_") +
                             KernelSuffix(a.d.dtype);
    cu::CUtensorMap map{};
    if (plan.tma) map = rt->TokensTensorMap(*d, kWgmmaTmaBox);
    const uint64_t entry = argmax16 ? sizeof(int16_t) : sizeof(int32_t);
    for (int64_t q0 = 0; q0 < a.q.count; q0 += plan.query_chunk) {
      const int64_t n = std::min<int64_t>(plan.query_chunk, a.q.count - q0);
      MaxsimTrainParams c = p;
      c.query_starts = DevPtr<const int64_t>(q->starts + static_cast<uint64_t>(q0) * sizeof(int64_t));
      c.query_lengths = DevPtr<const int32_t>(q->lengths + static_cast<uint64_t>(q0) * sizeof(int32_t));
      c.num_queries = static_cast<int32_t>(n);
      c.num_pairs = n * a.d.count;
      c.scores = DevPtr<float>(scores + static_cast<uint64_t>(q0 * a.d.count) * sizeof(float));
      c.argmax = DevPtr<void>(argmax + static_cast<uint64_t>(q0 * a.d.count) * static_cast<uint64_t>(a.stride) * entry);
      c.doc_groups = static_cast<int32_t>(plan.doc_groups);
      Launch1D(rt, name, grid, plan.threads, c, plan.smem, plan.tma ? &map : nullptr);
      Launch1D(rt, "maxsim_train_fwd_sum", CeilDiv(c.num_pairs, 4), 128, c);
    }
  } else {
    const std::string name = plan.kernel == FwdKernel::kMma ? "maxsim_train_fwd_mma_" : "maxsim_train_fwd_";
    Launch1D(rt, name + KernelSuffix(a.d.dtype), grid, plan.threads, p, plan.smem);
  }
  timer.Device("forwardKernel");
  if (timer.on()) rt->Synchronize();
  timer.Host("forwardWait");
  rt->Download(job.scores_out, scores, score_bytes);
  if (!job.keep) DownloadArgmax(rt, argmax, slots, argmax16, job.argmax_out);
  timer.Host("download");
  if (timer.on()) job.phases = timer.Finish();
}

void DownloadStateArgmax(Runtime* rt, const TrainState& state, int32_t* out) {
  rt->EnsureReady();
  const uint64_t slots = static_cast<uint64_t>(state.a.num_pairs) * static_cast<uint64_t>(state.a.stride);
  if (slots > 0) DownloadArgmax(rt, state.argmax, slots, state.argmax16, out);
}

}  // namespace maxsim_cuda::train
