// The CUDA driver, opened at run time: libcuda.so.1 via dlopen, cuInit and cuGetProcAddress via dlsym,
// every other entry point via cuGetProcAddress (cudaVersion 12000, so versioned symbols such as
// cuMemAlloc_v2 resolve to the ABI declared in cuda_api.h). No link-time CUDA dependency.
//
// Errors: every CUresult goes through Check(), which throws CudaError naming the call and the CUDA
// error ("cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)"). Sticky errors (illegal
// address, launch failure, ...) corrupt the context for good, so they poison the whole backend: every
// later Check/EnsureUsable fails fast and tells the user to restart the process.
#pragma once
#include <stdexcept>
#include <string>

#include "cuda_api.h"

namespace maxsim_cuda {

class CudaError : public std::runtime_error {
 public:
  CudaError(const std::string& message, std::string code) : std::runtime_error(message), code_(std::move(code)) {}
  // The CUDA error name (CUDA_ERROR_...), or "CUDA_BACKEND_UNUSABLE" / "" for non-driver errors.
  const std::string& code() const { return code_; }

 private:
  std::string code_;
};

struct Driver {
  cu::PFN_cuGetErrorName cuGetErrorName = nullptr;
  cu::PFN_cuGetErrorString cuGetErrorString = nullptr;
  cu::PFN_cuDriverGetVersion cuDriverGetVersion = nullptr;
  cu::PFN_cuDeviceGetCount cuDeviceGetCount = nullptr;
  cu::PFN_cuDeviceGet cuDeviceGet = nullptr;
  cu::PFN_cuDeviceGetName cuDeviceGetName = nullptr;
  cu::PFN_cuDeviceGetAttribute cuDeviceGetAttribute = nullptr;
  cu::PFN_cuDeviceTotalMem cuDeviceTotalMem = nullptr;
  cu::PFN_cuDeviceCanAccessPeer cuDeviceCanAccessPeer = nullptr;  // optional: only `maxsim info` reads it
  cu::PFN_cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRetain = nullptr;
  cu::PFN_cuCtxSetCurrent cuCtxSetCurrent = nullptr;
  cu::PFN_cuMemGetInfo cuMemGetInfo = nullptr;
  cu::PFN_cuMemAlloc cuMemAlloc = nullptr;
  cu::PFN_cuMemFree cuMemFree = nullptr;
  cu::PFN_cuMemHostAlloc cuMemHostAlloc = nullptr;
  cu::PFN_cuMemcpyHtoDAsync cuMemcpyHtoDAsync = nullptr;
  cu::PFN_cuMemcpyDtoHAsync cuMemcpyDtoHAsync = nullptr;
  cu::PFN_cuMemsetD32Async cuMemsetD32Async = nullptr;
  cu::PFN_cuStreamCreate cuStreamCreate = nullptr;
  cu::PFN_cuStreamSynchronize cuStreamSynchronize = nullptr;
  cu::PFN_cuStreamDestroy cuStreamDestroy = nullptr;
  cu::PFN_cuStreamWaitEvent cuStreamWaitEvent = nullptr;
  cu::PFN_cuMemFreeHost cuMemFreeHost = nullptr;
  cu::PFN_cuMemHostRegister cuMemHostRegister = nullptr;
  cu::PFN_cuMemHostUnregister cuMemHostUnregister = nullptr;
  cu::PFN_cuEventCreate cuEventCreate = nullptr;
  cu::PFN_cuEventDestroy cuEventDestroy = nullptr;
  cu::PFN_cuEventRecord cuEventRecord = nullptr;
  cu::PFN_cuEventSynchronize cuEventSynchronize = nullptr;
  cu::PFN_cuEventElapsedTime cuEventElapsedTime = nullptr;
  cu::PFN_cuModuleLoadData cuModuleLoadData = nullptr;
  cu::PFN_cuModuleGetFunction cuModuleGetFunction = nullptr;
  cu::PFN_cuFuncGetAttribute cuFuncGetAttribute = nullptr;
  cu::PFN_cuFuncSetAttribute cuFuncSetAttribute = nullptr;
  cu::PFN_cuLaunchKernel cuLaunchKernel = nullptr;
  // Optional (newer drivers): used only to list the kernels of a module; null when absent.
  cu::PFN_cuModuleGetFunctionCount cuModuleGetFunctionCount = nullptr;
  cu::PFN_cuModuleEnumerateFunctions cuModuleEnumerateFunctions = nullptr;
  cu::PFN_cuFuncGetName cuFuncGetName = nullptr;
  // Optional: the TMA variants need it (a launch of one says so when it is missing).
  cu::PFN_cuTensorMapEncodeTiled cuTensorMapEncodeTiled = nullptr;
  cu::PFN_cuFuncGetParamInfo cuFuncGetParamInfo = nullptr;  // optional: checks the TMA launch contract

  int driver_version = 0;  // e.g. 12040
  int device_count = 0;
};

// Opens the driver once (thread-safe) and returns it, or nullptr with *reason set. Never throws.
const Driver* LoadDriver(std::string* reason);

// The loaded driver; throws CudaError if it is unavailable or the backend is poisoned.
const Driver& Api();

// Throws CudaError for any result other than CUDA_SUCCESS; poisons the backend on sticky errors.
void Check(cu::CUresult result, const char* call);

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for a result code.
std::string DescribeResult(cu::CUresult result);

// Throws if an earlier sticky error made the backend unusable.
void EnsureUsable();

}  // namespace maxsim_cuda
