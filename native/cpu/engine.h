// The CPU engine: picks the ISA, packs queries, splits documents over the thread pool.
// Plain C++ (no Node-API), so it can be driven from the binding or from a native test.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernel_api.h"

namespace maxsim_cpu {

// Any float token set (queries or documents): packed tokens [T, d] plus per-item start and length.
struct TokenSpans {
  const void* data = nullptr;
  DocType dtype = DocType::Float32;
  const double* starts = nullptr;
  const int32_t* lengths = nullptr;
  int64_t count = 0;
  int64_t dim = 0;
};

// Kernels this build has AND this CPU can run, best first.
std::vector<const IsaKernels*> UsableIsas();
// The kernel set to use: `requested` empty means the best usable one. Returns null and sets
// *error when the requested ISA is unknown or unusable here.
const IsaKernels* SelectIsa(const std::string& requested, std::string* error);
// Whether the CPU executes AVX512-BF16 instructions.
bool CpuHasAvx512Bf16();
// Human-readable CPU features relevant to the kernels (e.g. "avx512f avx512bf16 fma f16c").
std::string CpuFeatures();

// scores[i * docs.count + b] = MaxSim(query i, document b) for every pair. `threads` <= 0: all.
// `cancel` (optional): polled by the workers before each chunk of documents; once it reads non-zero
// they stop and the scores are incomplete (the caller discards them).
void MaxsimAllPairs(const IsaKernels& isa, const TokenSpans& queries, const TokenSpans& docs, float* scores,
                    int threads, const volatile int32_t* cancel = nullptr);

// Documents per work item of the pools: small enough that ragged documents balance and a cancel flag
// is seen within a few milliseconds, large enough that the shared counter costs nothing.
inline int64_t DocumentChunk(int64_t docs, int workers) {
  const int64_t balanced = docs / (static_cast<int64_t>(workers) * 32);
  return balanced < 1 ? 1 : (balanced > 256 ? 256 : balanced);
}

}  // namespace maxsim_cpu
