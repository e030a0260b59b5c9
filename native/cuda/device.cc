#include "device.h"

#include "driver.h"

namespace maxsim_cuda {

DeviceProps QueryDeviceProps(int index) {
  const Driver& d = Api();
  DeviceProps p;
  p.index = index;
  cu::CUdevice dev = 0;
  Check(d.cuDeviceGet(&dev, index), "cuDeviceGet");
  char name[256] = {0};
  Check(d.cuDeviceGetName(name, sizeof(name) - 1, dev), "cuDeviceGetName");
  p.name = name;
  auto attr = [&](int a) {
    int v = 0;
    Check(d.cuDeviceGetAttribute(&v, a, dev), "cuDeviceGetAttribute");
    return v;
  };
  p.cc_major = attr(cu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  p.cc_minor = attr(cu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  p.sms = attr(cu::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  p.l2_bytes = attr(cu::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  p.smem_optin = attr(cu::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  p.max_threads_per_block = attr(cu::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  p.max_block[0] = attr(cu::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  p.max_block[1] = attr(cu::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  p.max_block[2] = attr(cu::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  p.max_grid[0] = attr(cu::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  p.max_grid[1] = attr(cu::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  p.max_grid[2] = attr(cu::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  size_t total = 0;
  Check(d.cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem");
  p.total_memory = total;
  return p;
}

}  // namespace maxsim_cuda
