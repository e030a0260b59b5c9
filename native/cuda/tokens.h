// A token set resident on a CUDA device (DeviceTokens), free of Node, beside the host types of
// native/common/tokens.h.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "../common/tokens.h"
#include "cuda_api.h"

namespace maxsim_cuda {

class Runtime;

// A token set resident on the device: packed tokens [capacity_tokens, dim], int64 starts and int32
// lengths [capacity_items]; an int8 set also holds one float32 scale per token ([capacity_tokens],
// appended with the tokens). Items are appended (upload = one append of a whole batch). Freed through
// the owning runtime when the last reference goes, from whatever thread drops it.
struct DeviceTokens {
  Runtime* runtime = nullptr;
  DType dtype = DType::Float32;
  int64_t dim = 0;
  int64_t capacity_tokens = 0, capacity_items = 0;
  int64_t tokens = 0, count = 0;  // used so far
  int32_t max_length = 0;
  cu::CUdeviceptr data = 0, starts = 0, lengths = 0;
  cu::CUdeviceptr scales = 0;  // int8 only: float32 per token
  // int8-sized tokens that hold fp8 e4m3 codes instead (made only by Quantize8; reported as 'fp8').
  bool e4m3 = false;
  // A view (Select): its own starts / lengths over the parent's tokens and scales, which it keeps
  // alive and never frees; it cannot be appended to.
  std::shared_ptr<DeviceTokens> parent;
  // Host copy of starts / lengths [count], written wherever Append, Quantize8 and Select write the
  // device ones (worker thread only), so that views need no download of the parent's spans. Sets
  // filled some other way (stream_scan's slots) have none: HostSpans() is false there.
  std::vector<int64_t> host_starts;
  std::vector<int32_t> host_lengths;
  bool HostSpans() const {
    return static_cast<int64_t>(host_starts.size()) == count && static_cast<int64_t>(host_lengths.size()) == count;
  }
  uint64_t bytes() const;
  ~DeviceTokens();
};

}  // namespace maxsim_cuda
