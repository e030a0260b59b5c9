// The caching device allocator of a runtime (worker thread only), and the scoped block jobs use for
// their scratch memory.
#pragma once
#include <cstdint>
#include <map>
#include <unordered_map>

#include "cuda_api.h"

namespace maxsim_cuda {

// Blocks are rounded to size classes and kept on free for reuse; on out-of-memory every cached block
// is released and the allocation retried once.
class Allocator {
 public:
  struct Stats {
    uint64_t in_use = 0, cached = 0, peak = 0;
  };
  cu::CUdeviceptr Alloc(uint64_t bytes);
  void Free(cu::CUdeviceptr ptr);
  void ReleaseCached();
  Stats stats() const { return stats_; }
  void ResetPeak() { stats_.peak = stats_.in_use; }

 private:
  static uint64_t RoundUp(uint64_t bytes);
  std::unordered_map<cu::CUdeviceptr, uint64_t> live_;
  std::multimap<uint64_t, cu::CUdeviceptr> free_;
  Stats stats_;
};

// One allocator block returned to the cache when the scope ends (worker thread only).
class ScopedBlock {
 public:
  ScopedBlock(Allocator& a, uint64_t bytes) : alloc_(a), ptr_(a.Alloc(bytes)) {}
  ~ScopedBlock() { alloc_.Free(ptr_); }
  ScopedBlock(const ScopedBlock&) = delete;
  ScopedBlock& operator=(const ScopedBlock&) = delete;
  cu::CUdeviceptr get() const { return ptr_; }

 private:
  Allocator& alloc_;
  cu::CUdeviceptr ptr_;
};

}  // namespace maxsim_cuda
