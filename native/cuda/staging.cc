#include "staging.h"

namespace maxsim_cuda {

namespace {

// `slot`, allocated as `bytes` of pinned host memory on first use.
template <typename T>
T* PinnedOnce(T*& slot, uint64_t bytes) {
  if (!slot) {
    void* p = nullptr;
    Check(Api().cuMemHostAlloc(&p, bytes, cu::CU_MEMHOSTALLOC_DEFAULT), "cuMemHostAlloc");
    slot = static_cast<T*>(p);
  }
  return slot;
}

}  // namespace

void Staging::Init() {
  for (auto& e : done) Check(Api().cuEventCreate(&e, cu::CU_EVENT_DEFAULT), "cuEventCreate");
}

void* Staging::Buffer(int which) { return PinnedOnce(buffers[which], kBytes); }

uint64_t* Staging::Flags() { return PinnedOnce(flags, kFlagSlots * sizeof(uint64_t)); }

float* Staging::Scores() { return PinnedOnce(scores, kScoresBytes); }

uint8_t* Staging::JobUpload() { return PinnedOnce(job_upload, kJobUploadBytes); }

}  // namespace maxsim_cuda
