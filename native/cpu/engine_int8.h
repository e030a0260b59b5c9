// int8 x int8 MaxSim on the CPU: per-token symmetric quantization (value = q * scale, scale >= 0).
//   score(Q, D) = sum_s qscale_s * max_t (dscale_t * sum_k q_{s,k} d_{t,k})
// The integer dot product is exact in int32; it is converted to fp32, multiplied by the document
// token's scale BEFORE the max (the scale changes which token wins) and by the query token's scale
// AFTER it (constant over t and >= 0, so it commutes with the max); the Lq terms are summed in
// double in token order. Every kernel set performs exactly these fp32 operations, so they agree
// bitwise (the max of a set does not depend on the order it is taken in; a -0 / +0 tie vanishes in
// the sum, which starts at +0).
// Plain C++ (no Node-API), like engine.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace maxsim_cpu {

// An int8 token set: packed tokens [T, d], one scale per token, per-item start and length.
struct Int8Spans {
  const int8_t* data = nullptr;
  const float* scales = nullptr;
  const double* starts = nullptr;
  const int32_t* lengths = nullptr;
  int64_t count = 0;
  int64_t dim = 0;
};

// How a kernel set wants the queries packed. Every packing is lane blocks of W query tokens,
// [block][k/G][lane][G] (G consecutive components of one token side by side, so one 32-bit lane
// holds what one dot-product step multiplies), k padded to a multiple of G and tokens to a multiple
// of W with zeros.
enum class Int8Pack : int {
  None = 0,         // the kernel reads the queries as given (portable)
  Int8 = 1,         // int8 as is (AMX's B layout with W = 16, G = 4)
  Uint8Biased = 2,  // q + 128 as uint8 for VPDPBUSD (unsigned x signed); padding stays 0
  Int16 = 3,        // sign-extended to int16 pairs for VPMADDWD (G = 2)
};

// What a kernel reads.
struct Int8Job {
  Int8Spans q;
  Int8Spans docs;
  const void* qpack = nullptr;             // packed queries (Int8Pack of the kernel set), or null
  const int64_t* block_offset = nullptr;   // [q.count]: index of each query's first lane block
  float* scores = nullptr;                 // [q.count, docs.count] row-major
};

// Per-thread scratch: running maxima of every query's lane blocks (block_offset * lanes + lanes
// floats), one chunk of document tokens re-laid out for the kernel (Int8ChunkCapacity tokens of
// padded dimension, as int16), and one int32 per chunk token.
struct Int8Scratch {
  float* runmax = nullptr;
  int16_t* chunk = nullptr;
  int32_t* sums = nullptr;
};

// Document tokens a kernel may hold in one chunk, for a padded dimension dp (~24 KB, or 32 tokens).
inline int64_t Int8ChunkCapacity(int64_t dp) { return 32 + 24576 / (dp > 0 ? dp : 1); }

// Scores documents [doc_begin, doc_end) against every query.
using Int8RangeFn = void (*)(const Int8Job& job, int64_t doc_begin, int64_t doc_end, Int8Scratch& scratch);

struct Int8KernelSet {
  const char* name;  // reported by maxsim info / bench and accepted as `isa`
  int lanes;         // W: query tokens per lane block
  int group;         // G: components per 32-bit lane per dot-product step
  Int8Pack pack;
  int dim_multiple;  // the kernel needs d % dim_multiple == 0 (AMX: 64)
  Int8RangeFn range;
};

// Defined in the ISA translation units; null when compiled out or (AMX) when the CPU lacks AMX-INT8
// or the OS refuses the tile state. The engine checks CPUID for the others.
const Int8KernelSet* AmxInt8Kernels();         // AMX-INT8 tiles (TDPBSSD), d % 64 == 0
const Int8KernelSet* Avx512VnniInt8Kernels();  // 512-bit VPDPBUSD
const Int8KernelSet* AvxVnniInt8Kernels();     // 256-bit VEX VPDPBUSD (AVX-VNNI)
const Int8KernelSet* Avx2Int8Kernels();        // VPMADDWD on sign-extended int16
const Int8KernelSet* PortableInt8Kernels();    // plain C++ int32 dot products, any CPU

// The int8 kernel sets this build has and this CPU runs, fastest first (auto takes the first whose
// dim_multiple divides d).
std::vector<const Int8KernelSet*> UsableInt8Sets();
// Their names, in the same order.
std::vector<std::string> UsableInt8Isas();

// The kernel set for dimension d: `requested` empty or "auto" means the fastest usable one. Returns
// null and sets *error when the requested set is unknown, unusable here or cannot take d.
const Int8KernelSet* ResolveInt8Kernel(const std::string& requested, int64_t dim, std::string* error);

// scores[i * docs.count + b] = MaxSim(query i, document b) for every pair. `threads` <= 0: all.
// An empty document scores -inf, an empty query 0. `set` null: auto.
// `cancel` as for MaxsimAllPairs (engine.h).
void MaxsimAllPairsInt8(const Int8Spans& queries, const Int8Spans& docs, float* scores, int threads,
                        const Int8KernelSet* set = nullptr, const volatile int32_t* cancel = nullptr);

}  // namespace maxsim_cpu
