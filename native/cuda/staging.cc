#include "staging.h"

namespace maxsim_cuda {

void Staging::Init() {
  for (auto& e : done) Check(Api().cuEventCreate(&e, cu::CU_EVENT_DEFAULT), "cuEventCreate");
}

void* Staging::Buffer(int which) {
  if (!buffers[which]) Check(Api().cuMemHostAlloc(&buffers[which], kBytes, cu::CU_MEMHOSTALLOC_DEFAULT), "cuMemHostAlloc");
  return buffers[which];
}

}  // namespace maxsim_cuda
