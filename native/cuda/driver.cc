#include "driver.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>

namespace maxsim_cuda {
namespace {

Driver g_driver;
std::string g_load_error;
bool g_loaded = false;
std::once_flag g_once;

std::atomic<bool> g_poisoned{false};
std::mutex g_poison_mutex;
std::string g_poison_message;

bool IsSticky(cu::CUresult r) {
  switch (r) {
    case cu::CUDA_ERROR_ECC_UNCORRECTABLE:
    case cu::CUDA_ERROR_ILLEGAL_ADDRESS:
    case cu::CUDA_ERROR_LAUNCH_TIMEOUT:
    case cu::CUDA_ERROR_HARDWARE_STACK_ERROR:
    case cu::CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case cu::CUDA_ERROR_MISALIGNED_ADDRESS:
    case cu::CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case cu::CUDA_ERROR_INVALID_PC:
    case cu::CUDA_ERROR_LAUNCH_FAILED:
    case cu::CUDA_ERROR_DEINITIALIZED:
      return true;
    default:
      return false;
  }
}

// Resolves one entry point through cuGetProcAddress. Returns an empty string or the reason.
template <typename F>
std::string Resolve(cu::PFN_cuGetProcAddress_v2 gpa, const char* name, F* out, int version = 12000) {
  void* p = nullptr;
  int status = -1;
  const cu::CUresult r = gpa(name, &p, version, cu::CU_GET_PROC_ADDRESS_DEFAULT, &status);
  if (r != cu::CUDA_SUCCESS || status != cu::CU_GET_PROC_ADDRESS_SUCCESS || p == nullptr) {
    return std::string("the NVIDIA driver does not provide ") + name + " (cuGetProcAddress returned " +
           std::to_string(r) + ", status " + std::to_string(status) + "); a CUDA 12+ driver is required";
  }
  *out = reinterpret_cast<F>(p);
  return {};
}

void Load() {
  // RTLD_LOCAL: keep the driver's symbols out of the global namespace of the Node process.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    g_load_error = std::string("libcuda.so.1 not found: no NVIDIA driver on this machine (") + (e ? e : "dlopen failed") + ")";
    return;
  }
  auto cuInit = reinterpret_cast<cu::PFN_cuInit>(dlsym(lib, "cuInit"));
  auto gpa = reinterpret_cast<cu::PFN_cuGetProcAddress_v2>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!cuInit || !gpa) {
    g_load_error = "libcuda.so.1 lacks cuInit or cuGetProcAddress_v2: the NVIDIA driver is older than CUDA 12; update it";
    return;
  }
  Driver& d = g_driver;
  std::string err;
  auto need = [&](const char* name, auto* slot) {
    if (err.empty()) err = Resolve(gpa, name, slot);
  };
  need("cuGetErrorName", &d.cuGetErrorName);
  need("cuGetErrorString", &d.cuGetErrorString);
  need("cuDriverGetVersion", &d.cuDriverGetVersion);
  need("cuDeviceGetCount", &d.cuDeviceGetCount);
  need("cuDeviceGet", &d.cuDeviceGet);
  need("cuDeviceGetName", &d.cuDeviceGetName);
  need("cuDeviceGetAttribute", &d.cuDeviceGetAttribute);
  need("cuDeviceTotalMem", &d.cuDeviceTotalMem);
  need("cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain);
  need("cuCtxSetCurrent", &d.cuCtxSetCurrent);
  need("cuMemGetInfo", &d.cuMemGetInfo);
  need("cuMemAlloc", &d.cuMemAlloc);
  need("cuMemFree", &d.cuMemFree);
  need("cuMemHostAlloc", &d.cuMemHostAlloc);
  need("cuMemcpyHtoDAsync", &d.cuMemcpyHtoDAsync);
  need("cuMemcpyDtoHAsync", &d.cuMemcpyDtoHAsync);
  need("cuMemsetD32Async", &d.cuMemsetD32Async);
  need("cuStreamCreate", &d.cuStreamCreate);
  need("cuStreamSynchronize", &d.cuStreamSynchronize);
  need("cuStreamDestroy", &d.cuStreamDestroy);
  need("cuStreamWaitEvent", &d.cuStreamWaitEvent);
  need("cuMemFreeHost", &d.cuMemFreeHost);
  need("cuMemHostRegister", &d.cuMemHostRegister);
  need("cuMemHostUnregister", &d.cuMemHostUnregister);
  need("cuEventCreate", &d.cuEventCreate);
  need("cuEventDestroy", &d.cuEventDestroy);
  need("cuEventRecord", &d.cuEventRecord);
  need("cuEventSynchronize", &d.cuEventSynchronize);
  need("cuEventElapsedTime", &d.cuEventElapsedTime);
  need("cuModuleLoadData", &d.cuModuleLoadData);
  need("cuModuleGetFunction", &d.cuModuleGetFunction);
  need("cuFuncGetAttribute", &d.cuFuncGetAttribute);
  need("cuFuncSetAttribute", &d.cuFuncSetAttribute);
  need("cuLaunchKernel", &d.cuLaunchKernel);
  if (!err.empty()) {
    g_load_error = err;
    return;
  }
  // Optional: absent on drivers before 12.3 / 12.4; only kernel listing depends on them.
  if (!Resolve(gpa, "cuFuncGetName", &d.cuFuncGetName, 12030).empty()) d.cuFuncGetName = nullptr;
  if (!Resolve(gpa, "cuModuleGetFunctionCount", &d.cuModuleGetFunctionCount, 12040).empty() ||
      !Resolve(gpa, "cuModuleEnumerateFunctions", &d.cuModuleEnumerateFunctions, 12040).empty()) {
    d.cuModuleGetFunctionCount = nullptr;
    d.cuModuleEnumerateFunctions = nullptr;
  }
  if (!Resolve(gpa, "cuTensorMapEncodeTiled", &d.cuTensorMapEncodeTiled).empty()) d.cuTensorMapEncodeTiled = nullptr;
  if (!Resolve(gpa, "cuDeviceCanAccessPeer", &d.cuDeviceCanAccessPeer).empty()) d.cuDeviceCanAccessPeer = nullptr;
  if (!Resolve(gpa, "cuFuncGetParamInfo", &d.cuFuncGetParamInfo, 12040).empty()) d.cuFuncGetParamInfo = nullptr;
  cu::CUresult r = cuInit(0);
  if (r == cu::CUDA_ERROR_NO_DEVICE) {
    g_load_error = "the NVIDIA driver is installed but reports no CUDA device (cuInit: " + DescribeResult(r) + ")";
    return;
  }
  if (r != cu::CUDA_SUCCESS) {
    g_load_error = "cuInit failed: " + DescribeResult(r);
    return;
  }
  r = d.cuDriverGetVersion(&d.driver_version);
  if (r != cu::CUDA_SUCCESS) {
    g_load_error = "cuDriverGetVersion failed: " + DescribeResult(r);
    return;
  }
  r = d.cuDeviceGetCount(&d.device_count);
  if (r != cu::CUDA_SUCCESS) {
    g_load_error = "cuDeviceGetCount failed: " + DescribeResult(r);
    return;
  }
  if (d.device_count <= 0) {
    g_load_error = "the NVIDIA driver reports no CUDA device";
    return;
  }
  g_loaded = true;  // the library stays open for the life of the process
}

}  // namespace

std::string DescribeResult(cu::CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (g_driver.cuGetErrorName) g_driver.cuGetErrorName(result, &name);
  if (g_driver.cuGetErrorString) g_driver.cuGetErrorString(result, &text);
  std::string s = name ? name : "CUDA error " + std::to_string(result);
  if (text) s += std::string(" (") + text + ")";
  return s;
}

const Driver* LoadDriver(std::string* reason) {
  std::call_once(g_once, Load);
  if (!g_loaded) {
    if (reason) *reason = g_load_error;
    return nullptr;
  }
  return &g_driver;
}

void EnsureUsable() {
  if (g_poisoned.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(g_poison_mutex);
    throw CudaError(g_poison_message, "CUDA_BACKEND_UNUSABLE");
  }
}

const Driver& Api() {
  std::string reason;
  const Driver* d = LoadDriver(&reason);
  if (!d) throw CudaError("CUDA backend unavailable: " + reason, "CUDA_UNAVAILABLE");
  EnsureUsable();
  return *d;
}

void Check(cu::CUresult result, const char* call) {
  if (result == cu::CUDA_SUCCESS) return;
  const std::string what = DescribeResult(result);
  const char* name = nullptr;
  if (g_driver.cuGetErrorName) g_driver.cuGetErrorName(result, &name);
  const std::string code = name ? name : "CUDA_ERROR_" + std::to_string(result);
  std::string message = std::string(call) + " failed: " + what;
  if (IsSticky(result)) {
    std::lock_guard<std::mutex> lock(g_poison_mutex);
    if (!g_poisoned.load(std::memory_order_relaxed)) {
      g_poison_message = "CUDA backend unusable after " + code + " in " + call + "; restart the process";
      g_poisoned.store(true, std::memory_order_release);
    }
    message += "; the CUDA context is lost and the backend is unusable until the process restarts";
  }
  throw CudaError(message, code);
}

}  // namespace maxsim_cuda
