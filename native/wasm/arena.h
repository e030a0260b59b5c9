// The wasm engine's memory: one bump arena above __heap_base, grown with memory.grow. The caller
// (src/wasm/engine.ts) resets it, allocates its inputs, prepares a job, scores, reads, resets; a
// resident corpus stays below a mark across calls.
#pragma once
#include <stdint.h>

namespace maxsim_wasm {

// 64-byte aligned, or null when the 4 GiB address space (or the host) refuses to grow.
void* Alloc(uint32_t bytes);

// Lane blocks of W query tokens per query: offset[i] is query i's first block; returns the total.
inline int64_t BlockOffsets(const int32_t* lengths, int64_t nq, int64_t W, int64_t* offset) {
  int64_t blocks = 0;
  for (int64_t i = 0; i < nq; i++) {
    offset[i] = blocks;
    blocks += (lengths[i] + W - 1) / W;
  }
  return blocks;
}

}  // namespace maxsim_wasm
