// MaxSim training on the GPU (kernels: kernels/maxsim_train.cu): the argmax forward and the backward
// pass over plain structs, run on the device's worker thread. No Node-API here: the binding
// (native/binding/cuda_train_binding.cc) unpacks the arguments into a Problem and a plan, runs a job
// and wraps the results. Implemented by train_forward.cc, train_backward.cc (its dD: train_csr.cc),
// train_loss.cc and train_plan.cc over train_device.cc, sharing train_internal.h.
//
// TypeScript decides the plan (src/backends/cuda-train-plan.ts): the forward kernel, its shared
// memory and grid, the argmax width, the dD method and the CSR budget. This side checks that a plan
// is one the kernels can run (CheckForwardPlan / CheckBackwardPlan) and executes it; the launch
// constants the plan must match come from kernels/maxsim_train_params.h, which the kernels share.
//
// Device memory beyond the inputs and their fp32 gradients:
//   forward:  scores [P] f32, argmax [P * stride] int16 or int32, best[] one stride-long f32 stripe per
//             CTA (grid x stride: the plan's grid bounds it).
//   backward: argmax as above, gradScores [P] f64, and the CSR of ONE document block at a time:
//             counts + offsets [cells] u32 (cells <= plan.cell_cap), sources u32 (<= plan.source_cap
//             entries), and for split rows fp64 partials (2 * sources / csr_chunk + 1) x 128, a chunk
//             -> row map and per-row chunk offsets (u32).
//   a kept state also holds the forward's scores [P] f32; a backward with the contrastive loss adds
//             row losses [queries] f64 and the labels [queries] int32.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../common/tokens.h"
#include "kernels/maxsim_train_params.h"
#include "runtime.h"

namespace maxsim_cuda::train {

// Each side (queries, docs) is a host batch, uploaded by every job, or a device-resident set (q_dev /
// d_dev): then q / d hold its metadata only (no data, no starts) and the lengths, which the planning
// of the CSR blocks reads, come from the device on the worker thread (q_len / d_len, see Materialize).
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

// The forward as TypeScript planned it.
enum class FwdKernel { kSimt, kMma, kWgmma };
struct ForwardPlan {
  FwdKernel kernel = FwdKernel::kSimt;
  uint32_t threads = 0;  // block size: MAXSIM_TRAIN_FWD_THREADS (MAXSIM_TRAIN_FWD_WGMMA_THREADS for wgmma)
  uint32_t smem = 0;     // dynamic shared memory: MAXSIM_TRAIN_FWD_{MMA,WGMMA}_SMEM, 0 for simt
  // CTAs: simt / mma stride over pairs, 1 .. min(num_pairs, kMaxGrid); wgmma: persistent, striding
  // over (slab, document group) items, 1 .. kMaxGrid. 0 without pairs.
  int64_t grid = 0;
  bool argmax16 = true;  // argmax stored as int16 (every document shorter than 32768 tokens)
  // wgmma only (0 otherwise): queries per launch (best[] holds their pairs' slots) and the document
  // groups each slab's documents are dealt into (group g: documents g, g + groups, ...).
  int64_t query_chunk = 0;
  int64_t doc_groups = 0;
  bool tma = false;  // wgmma only: documents through a TMA tensor map (else cp.async)
};

// One document block of the dD CSR as TypeScript cut it: documents [previous doc_end, doc_end), their
// count and placement walk (one CTA of MAXSIM_TRAIN_WALK_WARPS warps per (document, query block)
// where by_block, else one warp) and the query blocks of its cells (qblocks of qblock_size queries;
// 1 x 1 for diagonal pairs).
struct CsrBlock {
  int32_t doc_end = 0;
  bool by_block = false;
  int32_t qblocks = 1, qblock_size = 1;
};

// The backward as TypeScript planned it (src/backends/cuda-train-plan.ts, planBackward).
enum class DDPath { kCsr, kAtomic, kAuto };
struct BackwardPlan {
  DDPath dd = DDPath::kCsr;
  // 'auto': the atomic scatter when the first CSR block's rows with sources are at least this
  // fraction of its sources (measured on the device: the rule is the plan's, the count the data's),
  // the CSR otherwise.
  double auto_atomic_distinct = 0;
  int64_t csr_chunk = 0;         // sources per chunk of a split dD row (> 0)
  std::vector<CsrBlock> blocks;  // the CSR's document blocks, in order (none for 'atomic')
  bool argmax16 = true;          // host argmax arrays: uploaded as int16 (ignored for a device state)
};

// The grid limit of every 1-D launch here: blocks stride over the work beyond it.
constexpr int64_t kMaxGrid = int64_t(1) << 20;

// Throws std::invalid_argument naming the plan field when a plan is malformed (checks that need no
// problem and no device), or, with a problem and the device's compute capability, when the kernels
// cannot run it on that problem (the CSR blocks are checked where the lengths are on the host: here
// for host batches and a kept state, in the job for device-resident sides).
void CheckForwardPlan(const ForwardPlan& plan);
void CheckForwardPlan(const ForwardPlan& plan, const Problem& a, int cc_major);
void CheckBackwardPlan(const BackwardPlan& plan);
void CheckBackwardPlan(const BackwardPlan& plan, const Problem& a);

// What a device-resident forward keeps on the device for its backward: both operands, the argmax and
// the scores (the contrastive loss reads them there). Its memory goes back to the allocator, on the
// worker thread, when the last holder lets go.
struct TrainState {
  Runtime* rt = nullptr;
  Problem a;  // both sides device-resident (q_dev / d_dev), lengths on the host
  bool argmax16 = true;
  cu::CUdeviceptr argmax = 0;
  cu::CUdeviceptr scores = 0;  // [num_pairs] f32, as downloaded (0 without pairs)
  TrainState() = default;
  TrainState(const TrainState&) = delete;
  TrainState& operator=(const TrainState&) = delete;
  ~TrainState();
};

// Milliseconds per phase (host phases: wall time; kernels: CUDA events), when profiling.
using Phases = std::vector<std::pair<std::string, double>>;

struct ForwardJob {
  Problem a;
  ForwardPlan plan;
  bool keep = false;          // device-resident: the argmax and the operands stay on the device (state)
  bool profile = false;
  float* scores_out = nullptr;   // [num_pairs]
  int32_t* argmax_out = nullptr; // [num_pairs * stride] (not with keep)
  // out
  std::shared_ptr<TrainState> state;  // with keep
  Phases phases;
};

// A device-resident backward's gradScores made on the device: the in-batch contrastive loss of the
// state's scores (all pairs, [queries, docs]; kernels/maxsim_loss.cu), the arithmetic of the JS
// contrastiveLoss (src/ops/train.ts). CheckContrastive is the binding's check before the job.
struct ContrastiveLoss {
  double tau = 1;                // temperature: finite, > 0
  std::vector<int32_t> labels;   // one positive document per query, or empty: query i's is document i
  double loss = 0;               // out: mean over the queries of lse_i - s[i, label_i] / tau
};
// Throws std::invalid_argument naming the argument when `c` does not fit the state's problem.
void CheckContrastive(const ContrastiveLoss& c, const Problem& a);

struct BackwardJob {
  Problem a;  // host batches, or the state's problem (a copy) for a device-resident backward
  BackwardPlan plan;
  bool profile = false;
  // Host: the argmax [num_pairs * stride] (checked while it is uploaded) and the gradient outputs
  // (zero-filled, in the batches' own layouts).
  const int32_t* argmax_in = nullptr;
  float* dq_out = nullptr;
  float* dd_out = nullptr;
  const double* grad_in = nullptr;  // [num_pairs]
  // Device-resident only, instead of grad_in: gradScores from the contrastive loss of the state's
  // scores, computed in this job (its loss comes back here). An empty positive document throws
  // EmptyPositiveError before the backward kernels run (RunStep reports it as empty_positive).
  std::optional<ContrastiveLoss> contrastive;
  // Device-resident: the forward's state; dQ / dD become device sets, float32 or (input_dtype) each
  // in its input's dtype.
  std::shared_ptr<TrainState> state;
  bool input_dtype = false;
  // out
  std::shared_ptr<DeviceTokens> dq_set, dd_set;
  bool ran_atomic = false;
  Phases phases;
};

// The error of a contrastive loss whose positive document for query `row` has no tokens.
struct EmptyPositiveError : std::invalid_argument {
  EmptyPositiveError(int64_t row, int64_t label);
  int64_t row;
};

// One contrastive training step of device-resident inputs as one job (no trip through JS between
// the passes): the forward (forward.keep; its state is dropped at the end), the loss of its scores
// on the device, the backward (backward.contrastive set; its problem and state are the forward's).
struct StepJob {
  ForwardJob forward;
  BackwardJob backward;
  int64_t empty_positive = -1;  // out: the first query whose positive document is empty (then no gradients)
};

// Worker thread.
void RunForward(Runtime* rt, ForwardJob& job);
void RunBackward(Runtime* rt, BackwardJob& job);
void RunStep(Runtime* rt, StepJob& job);
// The saved argmax of a state, widened to int32 into out [num_pairs * stride].
void DownloadStateArgmax(Runtime* rt, const TrainState& state, int32_t* out);

}  // namespace maxsim_cuda::train
