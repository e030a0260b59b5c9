// The few CUDA driver API types, constants and signatures the runtime uses, declared here so that the
// addon builds without the CUDA toolkit (libcuda.so.1 is opened at run time). Values and signatures
// match the driver ABI of cuda.h (CUDA 12.x / 13.x); the comment on each function names the versioned
// symbol cuGetProcAddress returns for cudaVersion 12000.
#pragma once
#include <cstddef>
#include <cstdint>

namespace cu {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using cuuint64_t = uint64_t;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr CUresult CUDA_ERROR_DEINITIALIZED = 4;
constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
constexpr CUresult CUDA_ERROR_ECC_UNCORRECTABLE = 214;
constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
constexpr CUresult CUDA_ERROR_ILLEGAL_ADDRESS = 700;
constexpr CUresult CUDA_ERROR_LAUNCH_TIMEOUT = 702;
constexpr CUresult CUDA_ERROR_HARDWARE_STACK_ERROR = 714;
constexpr CUresult CUDA_ERROR_ILLEGAL_INSTRUCTION = 715;
constexpr CUresult CUDA_ERROR_MISALIGNED_ADDRESS = 716;
constexpr CUresult CUDA_ERROR_INVALID_ADDRESS_SPACE = 717;
constexpr CUresult CUDA_ERROR_INVALID_PC = 718;
constexpr CUresult CUDA_ERROR_LAUNCH_FAILED = 719;

// CUdevice_attribute
constexpr int CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y = 3;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z = 4;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y = 6;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = 7;
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;

// CUfunction_attribute
constexpr int CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0;
constexpr int CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;

constexpr unsigned int CU_STREAM_NON_BLOCKING = 0x1;
constexpr unsigned int CU_EVENT_DEFAULT = 0x0;
constexpr unsigned int CU_EVENT_DISABLE_TIMING = 0x2;
constexpr unsigned int CU_MEMHOSTALLOC_DEFAULT = 0x0;
constexpr unsigned int CU_MEMHOSTREGISTER_PORTABLE = 0x01;
constexpr unsigned int CU_MEMHOSTREGISTER_READ_ONLY = 0x08;
constexpr cuuint64_t CU_GET_PROC_ADDRESS_DEFAULT = 0;
// CUdriverProcAddressQueryResult
constexpr int CU_GET_PROC_ADDRESS_SUCCESS = 0;

// Entry points (CUDAAPI is empty on Linux).
using PFN_cuInit = CUresult (*)(unsigned int flags);
using PFN_cuGetProcAddress_v2 = CUresult (*)(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                             int* symbolStatus);
using PFN_cuGetErrorName = CUresult (*)(CUresult error, const char** str);
using PFN_cuGetErrorString = CUresult (*)(CUresult error, const char** str);
using PFN_cuDriverGetVersion = CUresult (*)(int* version);
using PFN_cuDeviceGetCount = CUresult (*)(int* count);
using PFN_cuDeviceGet = CUresult (*)(CUdevice* device, int ordinal);
using PFN_cuDeviceGetName = CUresult (*)(char* name, int len, CUdevice dev);
using PFN_cuDeviceGetAttribute = CUresult (*)(int* pi, int attrib, CUdevice dev);
using PFN_cuDeviceTotalMem = CUresult (*)(size_t* bytes, CUdevice dev);                   // _v2
using PFN_cuDeviceCanAccessPeer = CUresult (*)(int* can_access, CUdevice dev, CUdevice peer);
using PFN_cuDevicePrimaryCtxRetain = CUresult (*)(CUcontext* pctx, CUdevice dev);
using PFN_cuCtxSetCurrent = CUresult (*)(CUcontext ctx);
using PFN_cuMemGetInfo = CUresult (*)(size_t* free, size_t* total);                        // _v2
using PFN_cuMemAlloc = CUresult (*)(CUdeviceptr* dptr, size_t bytesize);                   // _v2
using PFN_cuMemFree = CUresult (*)(CUdeviceptr dptr);                                      // _v2
using PFN_cuMemHostAlloc = CUresult (*)(void** pp, size_t bytesize, unsigned int flags);
using PFN_cuMemcpyHtoDAsync = CUresult (*)(CUdeviceptr dst, const void* src, size_t bytes, CUstream s);  // _v2
using PFN_cuMemcpyDtoHAsync = CUresult (*)(void* dst, CUdeviceptr src, size_t bytes, CUstream s);        // _v2
using PFN_cuMemsetD32Async = CUresult (*)(CUdeviceptr dst, unsigned int value, size_t n, CUstream s);
using PFN_cuStreamCreate = CUresult (*)(CUstream* s, unsigned int flags);
using PFN_cuStreamSynchronize = CUresult (*)(CUstream s);
using PFN_cuStreamDestroy = CUresult (*)(CUstream s);                                      // _v2
using PFN_cuStreamWaitEvent = CUresult (*)(CUstream s, CUevent e, unsigned int flags);
using PFN_cuMemFreeHost = CUresult (*)(void* p);
using PFN_cuMemHostRegister = CUresult (*)(void* p, size_t bytesize, unsigned int flags);  // _v2
using PFN_cuMemHostUnregister = CUresult (*)(void* p);
using PFN_cuEventCreate = CUresult (*)(CUevent* e, unsigned int flags);
using PFN_cuEventDestroy = CUresult (*)(CUevent e);                                        // _v2
using PFN_cuEventRecord = CUresult (*)(CUevent e, CUstream s);
using PFN_cuEventSynchronize = CUresult (*)(CUevent e);
using PFN_cuEventElapsedTime = CUresult (*)(float* ms, CUevent start, CUevent end);
using PFN_cuModuleLoadData = CUresult (*)(CUmodule* module, const void* image);
using PFN_cuModuleGetFunction = CUresult (*)(CUfunction* f, CUmodule m, const char* name);
using PFN_cuModuleGetFunctionCount = CUresult (*)(unsigned int* count, CUmodule m);        // CUDA 12.4+
using PFN_cuModuleEnumerateFunctions = CUresult (*)(CUfunction* fns, unsigned int n, CUmodule m);  // 12.4+
using PFN_cuFuncGetName = CUresult (*)(const char** name, CUfunction f);                   // CUDA 12.3+
using PFN_cuFuncGetAttribute = CUresult (*)(int* pi, int attrib, CUfunction f);
using PFN_cuFuncSetAttribute = CUresult (*)(CUfunction f, int attrib, int value);
using PFN_cuFuncGetParamInfo = CUresult (*)(CUfunction f, size_t index, size_t* offset, size_t* size);  // CUDA 12.4+
// Tensor maps (TMA descriptors; compute capability 9.0+): an opaque 128-byte, 64-byte-aligned object
// made on the host by cuTensorMapEncodeTiled and passed to the kernel by value (__grid_constant__).
struct alignas(64) CUtensorMap {
  uint64_t opaque[16];
};
constexpr int CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0;
constexpr int CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6;
constexpr int CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9;
constexpr int CU_TENSOR_MAP_INTERLEAVE_NONE = 0;
constexpr int CU_TENSOR_MAP_SWIZZLE_128B = 3;
constexpr int CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3;
constexpr int CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0;  // out-of-bounds elements read as zeros
using PFN_cuTensorMapEncodeTiled = CUresult (*)(CUtensorMap* map, int dataType, uint32_t rank, void* globalAddress,
                                                const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
                                                const uint32_t* boxDim, const uint32_t* elementStrides, int interleave,
                                                int swizzle, int l2Promotion, int oobFill);  // CUDA 12.0+
using PFN_cuLaunchKernel = CUresult (*)(CUfunction f, unsigned int gridX, unsigned int gridY, unsigned int gridZ,
                                        unsigned int blockX, unsigned int blockY, unsigned int blockZ,
                                        unsigned int sharedMemBytes, CUstream s, void** kernelParams, void** extra);

}  // namespace cu
