// The pinned host memory of a runtime (worker thread only): two staging buffers that host bytes pass
// through on their way to the device (StagedWriter), and the read-back buffer results come back into.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cuda_api.h"
#include "driver.h"

namespace maxsim_cuda {

struct Staging {
  static constexpr uint64_t kBytes = 16ull << 20;  // per pinned staging buffer (two of them)
  // Creates the events that fence each buffer's last copy (the context must be current).
  void Init();
  // Staging buffer `which` (0 or 1), allocated on first use.
  void* Buffer(int which);

  void* buffers[2] = {nullptr, nullptr};
  cu::CUevent done[2] = {nullptr, nullptr};
  int next = 0;  // the staging buffer the next StagedWriter starts on
  // Runtime::ReadBack's buffer, grown on demand
  void* readback = nullptr;
  uint64_t readback_bytes = 0;
  // Pinned 8-byte slots that a job's flags (a quantize's first non-finite token) are copied into
  // with the job's other work, so that they are read after the job's last synchronize instead of
  // after one of their own (engine.h, JobScratch).
  static constexpr int kFlagSlots = 64;
  uint64_t* Flags();
  uint64_t* flags = nullptr;
  // A pinned buffer that a kernel writes a small score matrix into directly, so that it needs no
  // read-back copy: pinned host memory is mapped into the device's address space at the same address
  // (unified addressing, which every 64-bit platform CUDA supports does). One job at a time uses it.
  static constexpr uint64_t kScoresBytes = 16 << 10;
  float* Scores();
  float* scores = nullptr;
  int host_mappable = -1;  // whether the device can (engine_score.cc, HostMappable); -1: not asked yet
  // A pinned buffer for one small host-to-device copy per job (its query upload, engine_score.cc):
  // every job leaves the stream idle when it ends, so the copy an earlier job made from it has
  // completed, and no event fences it (the staging buffers' events are for copies within a job).
  static constexpr uint64_t kJobUploadBytes = 64 << 10;
  uint8_t* JobUpload();
  uint8_t* job_upload = nullptr;
};

// Streams bytes into device memory through the two pinned staging buffers: while the GPU copies one
// buffer, the worker fills the other (each buffer's last copy is fenced with an event). Retarget()
// sends the following bytes elsewhere while filling the same buffer, so that the small pieces of one
// append (tokens, scales, starts, lengths) need one buffer, not one wait each; consecutive writers
// start on alternate buffers, so a writer does not wait for the copy its predecessor just queued.
class StagedWriter {
 public:
  StagedWriter(Staging& staging, cu::CUstream stream, cu::CUdeviceptr dst)
      : staging_(staging), stream_(stream), dst_(dst), which_(staging.next) {}
  void Write(const void* src, uint64_t bytes) {
    const auto* p = static_cast<const uint8_t*>(src);
    while (bytes > 0) {
      if (!buf_) Acquire();
      const uint64_t take = std::min(bytes, Staging::kBytes - fill_);
      std::memcpy(buf_ + fill_, p, take);
      fill_ += take;
      p += take;
      bytes -= take;
      if (fill_ == Staging::kBytes) Flush();
    }
  }
  // The bytes written so far go to the current destination; later ones to dst onwards.
  void Retarget(cu::CUdeviceptr dst) {
    Send();
    dst_ = dst;
    offset_ = 0;
  }
  void Finish() {
    if (buf_) Flush();
  }

 private:
  void Acquire() {
    Check(Api().cuEventSynchronize(staging_.done[which_]), "cuEventSynchronize");
    buf_ = static_cast<uint8_t*>(staging_.Buffer(which_));
  }
  // Queues the copy of the buffer's unsent bytes [sent_, fill_).
  void Send() {
    if (fill_ == sent_) return;
    Check(Api().cuMemcpyHtoDAsync(dst_ + offset_, buf_ + sent_, fill_ - sent_, stream_), "cuMemcpyHtoDAsync");
    offset_ += fill_ - sent_;
    sent_ = fill_;
  }
  void Flush() {
    Send();
    Check(Api().cuEventRecord(staging_.done[which_], stream_), "cuEventRecord");
    fill_ = sent_ = 0;
    buf_ = nullptr;
    which_ ^= 1;
    staging_.next = which_;
  }
  Staging& staging_;
  cu::CUstream stream_;
  cu::CUdeviceptr dst_;
  uint64_t offset_ = 0, fill_ = 0, sent_ = 0;
  uint8_t* buf_ = nullptr;
  int which_;
};

}  // namespace maxsim_cuda
