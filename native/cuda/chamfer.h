// The Chamfer engine on the GPU (kernels: native/cuda/kernels/maxsim_chamfer.cu), Node-free: B pairs
// of point clouds uploaded once into a ChamferSession, the forward pass (argmin and distances both
// ways) and the backward pass through the saved argmin, both on the device.
//
// Device memory of a session beyond the raw inputs (fp32 [T, d], T = tp + tq points): centred rows
// [T, d + 1] f32 (in sorted order), the argmin and distances [T]; the forward pass adds the sort
// (permutation [T] u32, a CSR over about T / 2 cells or fewer) and the boxes (2d f32 per 32 points);
// the backward adds the CSR (counts, offsets, sources: [T] u32), the
// weights [T] f64 and the gradients [T, d] f32, released when it returns.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "chamfer_plan.h"
#include "runtime.h"

namespace maxsim_cuda {

// B pairs of clouds, compact on the host: P's points [tp, dim] pair by pair, offsets [B + 1] from 0.
struct ChamferClouds {
  const float* p = nullptr;
  const float* q = nullptr;
  std::vector<int64_t> p_off, q_off;
  int64_t dim = 0;
  int64_t pairs() const { return static_cast<int64_t>(p_off.size()) - 1; }
  int64_t tp() const { return p_off.back(); }
  int64_t tq() const { return q_off.back(); }
};

// Device time of the last pass (events around its kernels), milliseconds.
struct ChamferTiming {
  double kernel_ms = 0;
};

// One upload of the clouds, kept on the device between the forward and the backward pass. Worker
// thread only, except the destructor (any thread: the memory goes back through the worker).
class ChamferSession {
 public:
  ChamferSession(Runtime& rt, const ChamferClouds& clouds);
  ~ChamferSession();
  ChamferSession(const ChamferSession&) = delete;
  ChamferSession& operator=(const ChamferSession&) = delete;

  int64_t pairs() const { return pairs_; }
  int64_t tp() const { return tp_; }
  int64_t tq() const { return tq_; }
  int64_t dim() const { return dim_; }
  bool has_argmin() const { return has_argmin_; }
  bool bidirectional() const { return both_; }

  // Nearest neighbours P -> Q (and Q -> P when `both`) into the host arrays (compact order; [tp] and
  // [tq]) by `plan` (TypeScript's, checked first: CheckChamferPlan); the argmin stays on the device
  // for Backward. `prune` false visits every target (the same results, the brute-force cost: for
  // comparison).
  ChamferTiming Forward(const ChamferPlan& plan, bool both, int32_t* idx_pq, float* dist_pq, int32_t* idx_qp, float* dist_qp,
                        bool prune = true);
  // Gradients [tp + tq, dim] (compact, P's rows then Q's) for per-source weights w [tp] or [tp + tq]
  // (d loss / d dist, P's sources then Q's; the Q -> P ones only after a bidirectional Forward), through
  // the CSR inverse of the argmin (deterministic) or float atomics.
  ChamferTiming Backward(const double* w, bool atomic, float* grads);

 private:
  Runtime& rt_;
  int64_t pairs_ = 0, tp_ = 0, tq_ = 0, dim_ = 0;
  std::vector<int64_t> p_off_, q_off_;
  cu::CUdeviceptr raw_ = 0, off_ = 0, cen_ = 0, centers_ = 0, idx_ = 0, dist_ = 0;
  bool has_argmin_ = false, both_ = false;
};

}  // namespace maxsim_cuda
