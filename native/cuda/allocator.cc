#include "allocator.h"

#include <algorithm>
#include <string>

#include "driver.h"

namespace maxsim_cuda {
namespace {

constexpr uint64_t kSmallLimit = 1ull << 20;     // blocks up to 1 MiB: power-of-two classes
constexpr uint64_t kLargeGranule = 2ull << 20;   // larger blocks: multiples of 2 MiB

}  // namespace

uint64_t Allocator::RoundUp(uint64_t bytes) {
  if (bytes <= 512) return 512;
  if (bytes <= kSmallLimit) {
    uint64_t c = 512;
    while (c < bytes) c <<= 1;
    return c;
  }
  return (bytes + kLargeGranule - 1) / kLargeGranule * kLargeGranule;
}

cu::CUdeviceptr Allocator::Alloc(uint64_t bytes) {
  const uint64_t size = RoundUp(bytes);
  // Reuse the smallest cached block that fits without wasting more than a quarter of it.
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first <= size + size / 4) {
    const uint64_t got = it->first;
    const cu::CUdeviceptr ptr = it->second;
    free_.erase(it);
    stats_.cached -= got;
    live_[ptr] = got;
    stats_.in_use += got;
    stats_.peak = std::max(stats_.peak, stats_.in_use);
    return ptr;
  }
  const Driver& d = Api();
  cu::CUdeviceptr ptr = 0;
  cu::CUresult r = d.cuMemAlloc(&ptr, size);
  if (r == cu::CUDA_ERROR_OUT_OF_MEMORY && !free_.empty()) {
    ReleaseCached();
    r = d.cuMemAlloc(&ptr, size);
  }
  if (r == cu::CUDA_ERROR_OUT_OF_MEMORY) {
    size_t free_b = 0, total_b = 0;
    d.cuMemGetInfo(&free_b, &total_b);
    throw CudaError("cuMemAlloc failed: " + DescribeResult(r) + " allocating " + std::to_string(size) +
                        " bytes on the GPU (" + std::to_string(stats_.in_use) + " bytes in use by maxsim, " +
                        std::to_string(free_b) + " of " + std::to_string(total_b) + " bytes free)",
                    "CUDA_ERROR_OUT_OF_MEMORY");
  }
  Check(r, "cuMemAlloc");
  live_[ptr] = size;
  stats_.in_use += size;
  stats_.peak = std::max(stats_.peak, stats_.in_use);
  return ptr;
}

void Allocator::Free(cu::CUdeviceptr ptr) {
  auto it = live_.find(ptr);
  if (it == live_.end()) return;
  free_.emplace(it->second, ptr);
  stats_.in_use -= it->second;
  stats_.cached += it->second;
  live_.erase(it);
}

void Allocator::ReleaseCached() {
  const Driver& d = Api();
  for (const auto& [size, ptr] : free_) {
    Check(d.cuMemFree(ptr), "cuMemFree");
    stats_.cached -= size;
  }
  free_.clear();
}

}  // namespace maxsim_cuda
