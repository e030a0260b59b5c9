// What the training engine's files share (not a public header: the binding includes train_engine.h).
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "train_engine.h"

namespace maxsim_cuda::train {

inline const char* KernelSuffix(DType t) {
  switch (t) {
    case DType::Float16: return "f16";
    case DType::BFloat16: return "bf16";
    default: return "f32";
  }
}

template <typename P>
inline P* DevPtr(cu::CUdeviceptr p) {
  return reinterpret_cast<P*>(static_cast<uintptr_t>(p));
}

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

[[noreturn]] inline void PlanError(const std::string& field, const std::string& expected, const std::string& received) {
  throw std::invalid_argument("Expected " + expected + " for plan." + field + " but received " + received);
}

inline std::string Int(int64_t v) { return std::to_string(v); }

// The wgmma forward's TMA box: a 64-element K half of MAXSIM_TRAIN_FWD_WGMMA_TILE document tokens.
inline constexpr unsigned kWgmmaTmaBox[2] = {64, MAXSIM_TRAIN_FWD_WGMMA_TILE};

// train_device.cc: operands on the device, kernel parameters, launches.
int64_t TokensOf(const TokenSet& t);
void Materialize(Runtime* rt, Problem& a, bool own, std::shared_ptr<DeviceTokens>* q, std::shared_ptr<DeviceTokens>* d);
MaxsimTrainParams BaseParams(const Problem& a, const DeviceTokens& q, const DeviceTokens& d);
// map: the documents' tensor map for a kernel that takes one (the wgmma forward's TMA twin).
void Launch1D(Runtime* rt, const std::string& kernel, int64_t blocks, unsigned threads, const MaxsimTrainParams& p,
              unsigned smem = 0, const cu::CUtensorMap* map = nullptr, cu::CUstream on = nullptr);
void ZeroWords(Runtime* rt, cu::CUdeviceptr ptr, uint64_t words);

// Profiling: wall time of the host phases and device time (CUDA events on the stream) of the
// kernels (for the benchmarks; off by default, costs nothing then).
class PhaseTimer {
 public:
  PhaseTimer(Runtime* rt, bool on) : rt_(rt), on_(on) {}
  ~PhaseTimer() {
    for (cu::CUevent e : events_) Api().cuEventDestroy(e);
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
  // Device: records an event (returns its mark); Device(name) charges the time since the previous
  // event, or since the mark `from`, to `name`.
  size_t Mark() {
    if (!on_) return 0;
    cu::CUevent e = nullptr;
    Check(Api().cuEventCreate(&e, cu::CU_EVENT_DEFAULT), "cuEventCreate");
    events_.push_back(e);
    Check(Api().cuEventRecord(e, rt_->stream()), "cuEventRecord");
    return events_.size() - 1;
  }
  void Device(const char* name, size_t from = SIZE_MAX) {
    if (!on_) return;
    Mark();
    pending_.push_back({name, from == SIZE_MAX ? events_.size() - 2 : from, events_.size() - 1});
  }
  // After the stream has passed every mark: resolves the device phases (a name charged several
  // times, e.g. once per CSR block, reports the sum).
  Phases Finish() {
    Phases out = phases_;
    for (const Pending& e : pending_) {
      const std::string& name = e.name;
      float ms = 0.f;
      Check(Api().cuEventElapsedTime(&ms, events_[e.start], events_[e.end]), "cuEventElapsedTime");
      auto same = std::find_if(out.begin(), out.end(), [&](const auto& x) { return x.first == name; });
      if (same != out.end()) {
        same->second += static_cast<double>(ms);
      } else {
        out.emplace_back(name, static_cast<double>(ms));
      }
    }
    return out;
  }

 private:
  Runtime* rt_;
  bool on_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  std::vector<cu::CUevent> events_;
  struct Pending {
    std::string name;
    size_t start, end;  // events_ indices
  };
  std::vector<Pending> pending_;
  Phases phases_;
};

// One CSR block of the deterministic dD (train_csr.cc), rows and bounds from the lengths.

struct DocBlock {
  int32_t doc_begin = 0, doc_end = 0;
  int64_t row_begin = 0, row_end = 0;
  int64_t bound = 0;  // most sources the block can have
  int32_t longest = 0;  // its longest document
  bool by_block = false;  // count and place with one CTA per (document, query block)
  int32_t qblocks = 1, qblock_size = 1;
  int64_t cells() const { return (row_end - row_begin) * qblocks; }
};

// train_csr.cc
std::vector<DocBlock> ExpandBlocks(const Problem& a, const BackwardPlan& plan);
bool RunCsr(Runtime* rt, const Problem& a, const BackwardPlan& plan, MaxsimTrainParams p, PhaseTimer& timer);

// train_loss.cc
void RunContrastiveLoss(Runtime* rt, const TrainState* state, ContrastiveLoss& c, cu::CUdeviceptr grad);

}  // namespace maxsim_cuda::train
