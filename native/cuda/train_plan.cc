// The plan checks: whether the kernels can run a plan TypeScript made (src/backends/cuda-train-plan.ts).
#include <cmath>
#include <limits>
#include <string>

#include "train_internal.h"

namespace maxsim_cuda::train {

void CheckForwardPlan(const ForwardPlan& plan) {
  const bool wg = plan.kernel == FwdKernel::kWgmma;
  const uint32_t threads = wg ? MAXSIM_TRAIN_FWD_WGMMA_THREADS : MAXSIM_TRAIN_FWD_THREADS;
  if (plan.threads != threads) {
    PlanError("threads", Int(threads) + " (the forward kernel's block size)", Int(plan.threads));
  }
  const uint32_t smem = wg ? MAXSIM_TRAIN_FWD_WGMMA_SMEM : plan.kernel == FwdKernel::kMma ? MAXSIM_TRAIN_FWD_MMA_SMEM : 0;
  if (plan.smem != smem) {
    PlanError("smem", Int(smem) + std::string(" (the dynamic shared memory of the ") +
                          (wg ? "wgmma" : plan.kernel == FwdKernel::kMma ? "tensor-core" : "CUDA-core") + " forward)",
              Int(plan.smem));
  }
  if (plan.grid < 0 || plan.grid > kMaxGrid) PlanError("grid", "an integer in [0, " + Int(kMaxGrid) + "]", Int(plan.grid));
  if (wg ? plan.query_chunk < 1 : plan.query_chunk != 0) {
    PlanError("queryChunk", wg ? "an integer >= 1 for 'wgmma'" : "0 (only 'wgmma' takes query chunks)", Int(plan.query_chunk));
  }
  if (wg ? (plan.doc_groups < 1 || plan.doc_groups > std::numeric_limits<int32_t>::max()) : plan.doc_groups != 0) {
    PlanError("docGroups", wg ? "an integer in [1, 2^31) for 'wgmma'" : "0 (only 'wgmma' deals documents into groups)",
              Int(plan.doc_groups));
  }
  if (plan.tma && !wg) PlanError("tma", "false (only 'wgmma' reads documents through a tensor map)", "true");
}

void CheckForwardPlan(const ForwardPlan& plan, const Problem& a, int cc_major) {
  CheckForwardPlan(plan);
  const bool wg = plan.kernel == FwdKernel::kWgmma;
  if (a.num_pairs > 0 ? (plan.grid < 1 || (!wg && plan.grid > a.num_pairs)) : plan.grid != 0) {
    PlanError("grid", a.num_pairs > 0 ? "an integer in [1, " + Int(wg ? kMaxGrid : a.num_pairs) + "]" : "0 (no pairs)",
              Int(plan.grid));
  }
  if (wg) {
    if (cc_major != MAXSIM_TRAIN_WGMMA_CC || a.pairs != 0) {
      PlanError("kernel", "'wgmma' only for all pairs on compute capability " + Int(MAXSIM_TRAIN_WGMMA_CC) + ".x",
                std::string(a.pairs != 0 ? "diagonal pairs" : "all pairs") + " on compute capability " + Int(cc_major));
    }
    // the kernel indexes query slices as int: a launch's chunk * ceil(stride / 16) < 2^31
    const int64_t slices = std::min<int64_t>(plan.query_chunk, a.q.count) * std::max<int64_t>(1, CeilDiv(a.stride, 16));
    if (slices > std::numeric_limits<int32_t>::max()) {
      PlanError("queryChunk", "at most " + Int(std::numeric_limits<int32_t>::max() / std::max<int64_t>(1, CeilDiv(a.stride, 16))) +
                                  " queries of this stride per launch", Int(plan.query_chunk));
    }
  }
  if (plan.kernel == FwdKernel::kMma || wg) {
    const bool half = a.d.dtype == DType::Float16 || a.d.dtype == DType::BFloat16;
    const bool applies = half && a.q.dtype == a.d.dtype && a.q.dim % MAXSIM_TRAIN_MMA_DIM_MULTIPLE == 0 &&
                         a.q.dim >= MAXSIM_TRAIN_MMA_DIM_MULTIPLE && a.q.dim <= MAXSIM_TRAIN_MMA_MAX_DIM &&
                         cc_major >= MAXSIM_TRAIN_MMA_MIN_CC;
    if (!applies) {
      PlanError("kernel",
                "float16 or bfloat16 queries and docs of one dtype, dim a multiple of " +
                    Int(MAXSIM_TRAIN_MMA_DIM_MULTIPLE) + " up to " + Int(MAXSIM_TRAIN_MMA_MAX_DIM) +
                    " and compute capability >= " + Int(MAXSIM_TRAIN_MMA_MIN_CC) + " for 'mma' and 'wgmma'",
                std::string(DTypeName(a.q.dtype)) + " queries, " + DTypeName(a.d.dtype) + " docs, dim " + Int(a.q.dim) +
                    ", compute capability " + Int(cc_major));
    }
  }
  if (plan.argmax16 && a.d.max_length > std::numeric_limits<int16_t>::max()) {
    PlanError("argmax16", "false for documents of " + Int(int64_t(std::numeric_limits<int16_t>::max()) + 1) +
                              " tokens or more", "true with a document of " + Int(a.d.max_length));
  }
}

void CheckBackwardPlan(const BackwardPlan& plan) {
  if (!(plan.auto_atomic_distinct >= 0 && std::isfinite(plan.auto_atomic_distinct))) {
    PlanError("autoAtomicDistinct", "a finite number >= 0", std::to_string(plan.auto_atomic_distinct));
  }
  if (plan.csr_chunk < 1) PlanError("csrChunk", "an integer >= 1", Int(plan.csr_chunk));
  if (plan.dd == DDPath::kAtomic && !plan.blocks.empty()) {
    PlanError("blocks", "none for dD 'atomic'", Int(static_cast<int64_t>(plan.blocks.size())) + " blocks");
  }
}

void CheckBackwardPlan(const BackwardPlan& plan, const Problem& a) {
  CheckBackwardPlan(plan);
  // The CSR lists argmax slots as u32 (half the bytes of its largest buffer)
  const int64_t slots = a.num_pairs * a.stride;
  if (plan.dd != DDPath::kAtomic && slots > int64_t(std::numeric_limits<uint32_t>::max())) {
    PlanError("dD", "'atomic' (dDPath) when pairs x the longest query exceed 2^32 - 1 argmax slots",
              "'" + std::string(plan.dd == DDPath::kAuto ? "auto" : "csr") + "' with " + Int(slots) + " slots");
  }
  if (plan.argmax16 && a.d.max_length > std::numeric_limits<int16_t>::max()) {
    PlanError("argmax16", "false for documents of " + Int(int64_t(std::numeric_limits<int16_t>::max()) + 1) +
                              " tokens or more", "true with a document of " + Int(a.d.max_length));
  }
  if (plan.dd != DDPath::kAtomic && a.q.lengths && a.d.lengths) ExpandBlocks(a, plan);
}

}  // namespace maxsim_cuda::train
