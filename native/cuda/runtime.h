// The CUDA runtime of one device, made of the pieces it holds: the device's properties (device.h), a
// worker thread that runs queued jobs in FIFO order (worker.h), the primary context and one stream,
// a caching device allocator (allocator.h), pinned staging buffers (staging.h) and the kernel modules
// (modules.h); it launches kernels and moves bytes. The domain operations built on it (quantize, cast,
// select, score, top-K) are in engine.h.
//
// Threading: everything that touches the context runs on the worker thread, through Post(). Jobs run
// one at a time and each leaves the stream idle when it returns (it synchronizes), so a device block
// that goes back to the allocator is never still in use by the GPU. Runtimes live for the whole
// process (they are never destroyed; the driver releases the context at exit).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "allocator.h"
#include "device.h"
#include "driver.h"
#include "modules.h"
#include "staging.h"
#include "tokens.h"
#include "worker.h"

namespace maxsim_cuda {

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
  // wgmma kernels: 1 takes the work units pass-inner (MaxsimParams.unit_order), 0 pass-outer.
  int unit_order = 0;
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
  void Post(std::function<void()> job) { worker_.Post(std::move(job)); }

  // ---- worker thread only ----
  // Creates the context, stream and modules on first use; throws the setup error (every time) if
  // that failed.
  void EnsureReady();
  Allocator& allocator() { return allocator_; }
  Staging& staging() { return staging_; }
  cu::CUstream stream() const { return stream_; }
  // The stream that launches, copies and Synchronize use from now on; returns the one it replaces.
  // For a job that spreads independent parts of its work over stream() and side_stream() (it sets
  // the first back and leaves both idle before it returns).
  cu::CUstream SetStream(cu::CUstream s) {
    std::swap(s, stream_);
    return s;
  }
  // The primary context, for helper threads of a job that call the driver (cuCtxSetCurrent).
  cu::CUcontext context() const { return context_; }
  MemoryInfo Memory();
  // Names of all kernels in the loaded modules (empty when the driver cannot enumerate them).
  std::vector<std::string> KernelNames() const { return modules_.KernelNames(); }
  // Problems met while loading modules ("file: reason"), for status and error messages.
  const std::vector<std::string>& module_errors() const { return modules_.errors(); }

  // Allocates a token set with room for the given tokens / items.
  std::shared_ptr<DeviceTokens> AllocTokens(DType dtype, int64_t dim, int64_t capacity_tokens, int64_t capacity_items);
  // Appends the items of a host token set (copied through pinned staging; items are packed). The host
  // arrays are consumed when it returns; `synchronize` = false leaves the copies in flight (for a job
  // that synchronizes later: jobs must leave the stream idle).
  void Append(DeviceTokens& dst, const TokenSet& src, bool synchronize = true);
  // Enqueues the float32 -> float16 / bfloat16 conversion of `count` values at src into dst (round to
  // nearest even: the host encodeFloats' bits; maxsim_cast.cu). `to` is the dtype of dst.
  void CastFromF32(cu::CUdeviceptr src, cu::CUdeviceptr dst, DType to, uint64_t count);
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
  // Enqueues one launch of spec.kernel (spec.grid / block / smem; query_tile is ignored) whose
  // argument is the by-value struct at `params` (the driver copies the kernel's declared parameter
  // size at the call, so it must be that struct), followed by the tensor map `map` for a kernel that
  // takes one (spec.tma_box set; map null otherwise). Validates the launch first
  // (std::invalid_argument for a bad one); the caller synchronizes. On the runtime's stream, or on
  // `on` (e.g. side_stream()).
  void LaunchWithParams(const LaunchSpec& spec, const void* params, const cu::CUtensorMap* map = nullptr,
                        cu::CUstream on = nullptr);
  // A second stream for work that may overlap the stream's (created on first use). A job that uses it
  // joins it back into stream() before it ends (Fork / Join), so "the stream is idle" still means the
  // job is done.
  cu::CUstream side_stream();
  // side_stream() waits for what stream() has enqueued so far / stream() waits for side_stream().
  void Fork();
  void Join();
  // Whether a loaded module holds this kernel (an optional family, e.g. an older build without it).
  bool HasKernel(const std::string& name) { return modules_.HasKernel(name); }
  void Synchronize();

 private:
  explicit Runtime(DeviceProps props);
  void Setup();

  DeviceProps props_;
  cu::CUdevice device_ = 0;
  Worker worker_;

  // worker-thread state
  bool setup_done_ = false;
  std::string setup_error_, setup_code_;
  cu::CUcontext context_ = nullptr;
  cu::CUstream stream_ = nullptr;
  cu::CUstream side_ = nullptr;
  cu::CUevent fork_ = nullptr, join_ = nullptr;
  Allocator allocator_;
  Staging staging_;
  Modules modules_;
};

}  // namespace maxsim_cuda
