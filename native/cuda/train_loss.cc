// The in-batch contrastive loss on the device (kernels/maxsim_loss.cu) and the training step built on it.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/maxsim_loss_params.h"
#include "train_internal.h"

namespace maxsim_cuda::train {

void CheckContrastive(const ContrastiveLoss& c, const Problem& a) {
  if (a.pairs != 0) {
    throw std::invalid_argument("Expected a training state of pairs 'all' for the contrastive loss but received one of pairs 'diagonal'");
  }
  const int64_t rows = a.q.count, cols = a.d.count;
  if (!(c.tau > 0 && std::isfinite(c.tau))) {
    throw std::invalid_argument("Expected a finite number > 0 for temperature but received " + std::to_string(c.tau));
  }
  if (rows < 1) throw std::invalid_argument("Expected at least 1 query for queries.count but received " + Int(rows));
  if (rows > std::numeric_limits<int32_t>::max() - 1) {
    throw std::invalid_argument("Expected fewer than 2^31 - 1 queries for the contrastive loss but received " + Int(rows));
  }
  if (c.labels.empty()) {
    if (rows > cols) {
      throw std::invalid_argument("Expected at least " + Int(rows) +
                                  " documents (query i's positive is document i without labels) for docs.count but received " +
                                  Int(cols));
    }
    return;
  }
  if (static_cast<int64_t>(c.labels.size()) != rows) {
    throw std::invalid_argument("Expected an Int32Array of " + Int(rows) + " entries (one per query) for labels but received " +
                                Int(static_cast<int64_t>(c.labels.size())) + " entries");
  }
  for (size_t i = 0; i < c.labels.size(); i++) {
    if (c.labels[i] < 0 || c.labels[i] >= cols) {
      throw std::invalid_argument("Expected a document index in [0, " + Int(cols) + ") for labels[" + Int(static_cast<int64_t>(i)) +
                                  "] but received " + Int(c.labels[i]));
    }
  }
}

// gradScores from the contrastive loss of the state's scores, written into `grad` ([rows, cols] f64),
// and the loss into c.loss. Reads the loss and the empty-positive flag back (one small synchronous
// copy) so that a bad step fails before the backward kernels are enqueued.
void RunContrastiveLoss(Runtime* rt, const TrainState* state, ContrastiveLoss& c, cu::CUdeviceptr grad) {
  if (!state) throw std::invalid_argument("Expected a device-resident training state for the contrastive loss but received none");
  const Problem& a = state->a;
  CheckContrastive(c, a);
  const int64_t rows = a.q.count, cols = a.d.count;
  if (!state->scores) throw std::invalid_argument("Expected the forward's scores kept in the training state but received none");
  std::unique_ptr<ScopedBlock> labels;
  if (!c.labels.empty()) {
    labels = std::make_unique<ScopedBlock>(rt->allocator(), static_cast<uint64_t>(rows) * sizeof(int32_t));
    rt->Upload(labels->get(), c.labels.data(), static_cast<uint64_t>(rows) * sizeof(int32_t));
  }
  ScopedBlock row_loss(rt->allocator(), static_cast<uint64_t>(rows) * sizeof(double));
  // out: the loss (f64), then the lowest row with an empty positive (int32, INT32_MAX for none)
  ScopedBlock out(rt->allocator(), 2 * sizeof(double));
  Check(Api().cuMemsetD32Async(out.get() + sizeof(double), static_cast<unsigned>(std::numeric_limits<int32_t>::max()), 1,
                               rt->stream()),
        "cuMemsetD32Async");
  MaxsimLossParams p;
  std::memset(&p, 0, sizeof(p));
  p.scores = DevPtr<const float>(state->scores);
  p.labels = labels ? DevPtr<const int32_t>(labels->get()) : nullptr;
  p.grad = DevPtr<double>(grad);
  p.row_loss = DevPtr<double>(row_loss.get());
  p.loss = DevPtr<double>(out.get());
  p.bad_row = DevPtr<int32_t>(out.get() + sizeof(double));
  p.rows = rows;
  p.cols = cols;
  p.tau = c.tau;
  LaunchSpec spec;
  spec.kernel = "maxsim_loss_rows";
  spec.grid[0] = static_cast<unsigned>(std::min(rows, kMaxGrid));
  spec.block[0] = MAXSIM_LOSS_THREADS;
  rt->LaunchWithParams(spec, &p);
  spec.kernel = "maxsim_loss_total";
  spec.grid[0] = 1;
  spec.block[0] = 1;
  rt->LaunchWithParams(spec, &p);
  struct {
    double loss;
    int32_t bad_row;
    int32_t pad;
  } back{};
  static_assert(sizeof(back) == 2 * sizeof(double), "the read-back block");
  rt->Download(&back, out.get(), sizeof(back));  // synchronizes: the scratch above may be freed after
  if (back.bad_row != std::numeric_limits<int32_t>::max()) {
    const int64_t i = back.bad_row;
    const int64_t label = c.labels.empty() ? i : c.labels[static_cast<size_t>(i)];
    throw EmptyPositiveError(i, label);
  }
  c.loss = back.loss;
}

// contrastiveLoss's InvalidArgumentError, word for word
EmptyPositiveError::EmptyPositiveError(int64_t row, int64_t label)
    : std::invalid_argument("Expected a positive document with tokens for labels[" + Int(row) +
                            "] but received empty document " + Int(label)),
      row(row) {}

void RunStep(Runtime* rt, StepJob& job) {
  job.forward.keep = true;
  RunForward(rt, job.forward);
  BackwardJob& b = job.backward;
  b.state = std::move(job.forward.state);
  b.a = b.state->a;
  b.a.Rebind();
  try {
    RunBackward(rt, b);
  } catch (const EmptyPositiveError& e) {
    job.empty_positive = e.row;
  }
  b.state.reset();  // the argmax and the scores go back to the allocator (posted)
}

}  // namespace maxsim_cuda::train
