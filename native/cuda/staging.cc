#include "staging.h"

namespace maxsim_cuda {

void Staging::Init() {
  for (auto& e : done) Check(Api().cuEventCreate(&e, cu::CU_EVENT_DEFAULT), "cuEventCreate");
}

void* Staging::Buffer(int which) {
  if (!buffers[which]) Check(Api().cuMemHostAlloc(&buffers[which], kBytes, cu::CU_MEMHOSTALLOC_DEFAULT), "cuMemHostAlloc");
  return buffers[which];
}

uint64_t* Staging::Flags() {
  if (!flags) {
    void* p = nullptr;
    Check(Api().cuMemHostAlloc(&p, kFlagSlots * sizeof(uint64_t), cu::CU_MEMHOSTALLOC_DEFAULT), "cuMemHostAlloc");
    flags = static_cast<uint64_t*>(p);
  }
  return flags;
}

float* Staging::Scores() {
  if (!scores) {
    void* p = nullptr;
    Check(Api().cuMemHostAlloc(&p, kScoresBytes, cu::CU_MEMHOSTALLOC_DEFAULT), "cuMemHostAlloc");
    scores = static_cast<float*>(p);
  }
  return scores;
}

}  // namespace maxsim_cuda
