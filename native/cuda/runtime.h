// The CUDA runtime of one device: a dedicated worker thread that owns the primary context and runs
// queued jobs in FIFO order, one stream, a caching device allocator, pinned staging buffers, the
// kernel modules (build/kernels/*.fatbin) and kernel launches.
//
// Threading: everything that touches the context runs on the worker thread, through Post(). Jobs run
// one at a time and each leaves the stream idle when it returns (it synchronizes), so a device block
// that goes back to the allocator is never still in use by the GPU. Runtimes live for the whole
// process (they are never destroyed; the driver releases the context at exit).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "../binding/token_set.h"
#include "driver.h"

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

// The kernel fatbins: $MAXSIM_KERNEL_DIR, else <dir of the addon .node>/../kernels (the addon lives
// in build/Release). `unavailable` holds UNAVAILABLE.txt (or why nothing was found) when no fatbin exists.
struct KernelFiles {
  std::string dir;
  std::vector<std::string> fatbins;  // file names, sorted
  std::string unavailable;
};
KernelFiles FindKernelFiles();

// Caching device allocator (worker thread only). Blocks are rounded to size classes and kept on free
// for reuse; on out-of-memory every cached block is released and the allocation retried once.
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

class Runtime;

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

struct LaunchSpec {
  std::string kernel;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned smem = 0;
  // > 0: launch once per tile of this many queries (query_tile_offset / num_queries bound each launch).
  int64_t query_tile = 0;
  // > 0: the kernel reads the documents through a TMA tensor map (its second parameter) whose box is
  // tma_box[0] elements of a token by tma_box[1] tokens, 128-byte swizzled (variants.json "tmaBox").
  unsigned tma_box[2] = {0, 0};
};

struct MemoryInfo {
  Allocator::Stats alloc;
  uint64_t total = 0, free = 0;
};

class Runtime {
 public:
  // The runtime of device `index`, created on first use (the worker thread starts lazily with the
  // first job). Throws CudaError for an unknown device or an unusable driver.
  static Runtime* Get(int index);

  const DeviceProps& props() const { return props_; }

  // Queues a job for the worker thread (FIFO). Thread-safe; never blocks on the GPU. The job must
  // not throw (callers catch and report).
  void Post(std::function<void()> job);

  // ---- worker thread only ----
  // Creates the context, stream and modules on first use; throws the setup error (every time) if
  // that failed.
  void EnsureReady();
  Allocator& allocator() { return allocator_; }
  cu::CUstream stream() const { return stream_; }
  // The primary context, for helper threads of a job that call the driver (cuCtxSetCurrent).
  cu::CUcontext context() const { return context_; }
  MemoryInfo Memory();
  // Names of all kernels in the loaded modules (empty when the driver cannot enumerate them).
  std::vector<std::string> KernelNames() const;
  // Problems met while loading modules ("file: reason"), for status and error messages.
  const std::vector<std::string>& module_errors() const { return module_errors_; }

  // Allocates a token set with room for the given tokens / items.
  std::shared_ptr<DeviceTokens> AllocTokens(DType dtype, int64_t dim, int64_t capacity_tokens, int64_t capacity_items);
  // Appends the items of a host token set (copied through pinned staging; items are packed). The host
  // arrays are consumed when it returns; `synchronize` = false leaves the copies in flight (for a job
  // that synchronizes later: jobs must leave the stream idle).
  void Append(DeviceTokens& dst, const TokenSet& src, bool synchronize = true);
  // A new 8-bit token set quantized on the device from a float set, one float32 scale per token:
  // int8 (per-token symmetric, bitwise the host quantize() of src/ops/quantize.ts) or, with e4m3,
  // fp8 e4m3 codes (max|x| -> 448). Throws std::invalid_argument for an 8-bit source or for a token
  // holding +-Inf. Synchronizes.
  // per_document: one scale per item, the largest of its tokens' (every token of an item shares it)
  std::shared_ptr<DeviceTokens> Quantize8(const DeviceTokens& src, bool e4m3, bool per_document = false);
  // A view of some items of `src` (indices into its items, any order, repeats allowed): new starts /
  // lengths, the same token memory, gathered from src's host spans (downloaded only for a set without
  // them). Throws std::invalid_argument for an index out of range. Leaves the span uploads in flight
  // (stream order); the job synchronizes.
  std::shared_ptr<DeviceTokens> Select(const std::shared_ptr<DeviceTokens>& src, const std::vector<int64_t>& indices);
  // A view of `n` items of src whose starts / lengths a kernel writes (device_select.h): no host
  // spans, the parent's longest item as max_length (kernels do not read it; planning went by it).
  std::shared_ptr<DeviceTokens> ViewShell(const std::shared_ptr<DeviceTokens>& src, int64_t n);
  // Enqueues the float32 -> float16 / bfloat16 conversion of `count` values at src into dst (round to
  // nearest even: the host encodeFloats' bits; maxsim_cast.cu). `to` is the dtype of dst.
  void CastFromF32(cu::CUdeviceptr src, cu::CUdeviceptr dst, DType to, uint64_t count);
  // A float16 / bfloat16 copy of a float32 set made by Append (same items; spans from its host mirror).
  // Enqueued only: the job synchronizes.
  std::shared_ptr<DeviceTokens> CastSet(const DeviceTokens& src, DType to);
  // Fills `count` floats with NaN, so that a kernel that skips a pair shows instead of stale memory.
  void FillNaN(cu::CUdeviceptr ptr, uint64_t count);
  // Enqueues the launches that score queries x docs into `scores` ([num_queries, num_docs] floats on
  // the device); the caller synchronizes. ValidateLaunch must have accepted `spec`.
  void Launch(const DeviceTokens& queries, const DeviceTokens& docs, const LaunchSpec& spec, cu::CUdeviceptr scores);
  // The TMA tensor map over a token set's rows [tokens, dim] with the given box (see LaunchSpec).
  cu::CUtensorMap TokensTensorMap(const DeviceTokens& t, const unsigned box[2]);
  // Checks a launch against the kernel and the device before anything is enqueued, and raises the
  // kernel's dynamic shared memory limit when the launch needs more than the default 48 KiB.
  // Throws std::invalid_argument for a bad launch.
  void ValidateLaunch(const LaunchSpec& spec);
  void Download(void* dst, cu::CUdeviceptr src, uint64_t bytes);
  // Copies `bytes` (at most kReadBackBytes) into a pinned buffer of the runtime and waits; the bytes
  // stay there until the next ReadBack (no bounce through pageable memory, no extra host copy).
  static constexpr uint64_t kReadBackBytes = 32ull << 20;
  const void* ReadBack(cu::CUdeviceptr src, uint64_t bytes);
  // Copies host bytes to the device through the pinned staging buffers (the host memory may change
  // once this returns; the copies complete in stream order).
  void Upload(cu::CUdeviceptr dst, const void* src, uint64_t bytes);
  // Enqueues one launch of spec.kernel (spec.grid / block / smem; query_tile is ignored) whose only
  // argument is the by-value struct at `params` (the driver copies the kernel's declared parameter
  // size at the call, so it must be that struct). Validates the launch first (std::invalid_argument
  // for a bad one); the caller synchronizes.
  void LaunchWithParams(const LaunchSpec& spec, const void* params);
  // Whether a loaded module holds this kernel (an optional family, e.g. an older build without it).
  bool HasKernel(const std::string& name);
  void Synchronize();

 private:
  explicit Runtime(DeviceProps props);
  void WorkerLoop();
  void Setup();
  void LoadModules();
  struct FunctionInfo {
    cu::CUfunction fn = nullptr;
    int max_threads = 0;
    int static_smem = 0;
    int dynamic_smem_limit = 0;  // raised with cuFuncSetAttribute when a launch needs more
    // Whether the kernel takes a second parameter (the TMA variants' tensor map): 1 yes, 0 no, -1 the
    // driver cannot say (before 12.4).
    int takes_tensor_map = -1;
  };
  FunctionInfo& Function(const std::string& name);
  void* Staging(int which);
  friend class StagedWriter;

  DeviceProps props_;
  cu::CUdevice device_ = 0;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool started_ = false;
  std::thread thread_;

  // worker-thread state
  bool setup_done_ = false;
  std::string setup_error_, setup_code_;
  cu::CUcontext context_ = nullptr;
  cu::CUstream stream_ = nullptr;
  Allocator allocator_;
  std::vector<cu::CUmodule> modules_;
  std::vector<std::string> module_stems_;  // file name without .fatbin, parallel to modules_
  std::vector<std::string> module_errors_;
  KernelFiles kernel_files_;
  std::unordered_map<std::string, FunctionInfo> functions_;
  void* staging_[2] = {nullptr, nullptr};
  void* readback_ = nullptr;
  uint64_t readback_bytes_ = 0;
  cu::CUevent staging_done_[2] = {nullptr, nullptr};
  int staging_next_ = 0;  // the staging buffer the next StagedWriter starts on
};

}  // namespace maxsim_cuda
