// The properties of a CUDA device, read once when its runtime is created (no context needed).
#pragma once
#include <cstdint>
#include <string>

namespace maxsim_cuda {

struct DeviceProps {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sms = 0;
  uint64_t total_memory = 0;
  int l2_bytes = 0;
  int smem_optin = 0;  // max dynamic + static shared memory per block with opt-in
  int max_threads_per_block = 0;
  int max_block[3] = {0, 0, 0};
  int max_grid[3] = {0, 0, 0};
};

// Reads the properties of device `index` (no context needed). Throws CudaError.
DeviceProps QueryDeviceProps(int index);

}  // namespace maxsim_cuda
