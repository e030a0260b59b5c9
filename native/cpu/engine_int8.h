// int8 x int8 MaxSim on the CPU: per-token symmetric quantization (value = q * scale, scale >= 0).
//   score(Q, D) = sum_s qscale_s * max_t (dscale_t * sum_k q_{s,k} d_{t,k})
// The integer dot product is exact in int32; it is converted to fp32, multiplied by the document
// token's scale BEFORE the max (the scale changes which token wins) and by the query token's scale
// AFTER it (constant over t and >= 0, so it commutes with the max); the Lq terms are summed in
// double in token order. Every kernel performs exactly these fp32 operations, so they agree bitwise.
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

enum class Int8Kernel : int { Auto = 0, Amx = 1, Portable = 2 };

// What a kernel reads. qpack is only set for the AMX kernel: every query's tokens in lane blocks of
// 16, packed [block][k/4][lane][4] (AMX's B layout for int8), zero past the query's last token;
// block_offset[i] is query i's first block.
struct Int8Job {
  Int8Spans q;
  Int8Spans docs;
  const int8_t* qpack = nullptr;
  const int64_t* block_offset = nullptr;
  float* scores = nullptr;  // [q.count, docs.count] row-major
};

// Scores documents [doc_begin, doc_end) against every query. runmax: >= 16 * ceil(max Lq / 16) + 16
// floats of per-thread scratch.
using Int8RangeFn = void (*)(const Int8Job& job, int64_t doc_begin, int64_t doc_end, float* runmax);

// AMX-INT8 tiles (needs d % 64 == 0); null when compiled out, when the CPU lacks AMX-INT8 or when
// the OS refuses the tile state.
Int8RangeFn AmxInt8Range();
// Plain C++ int32 dot products, any d.
void PortableInt8Range(const Int8Job& job, int64_t doc_begin, int64_t doc_end, float* runmax);

// The int8 kernel names usable here, best first ("amx" where AMX-INT8 works, then "portable").
std::vector<std::string> UsableInt8Isas();

// Resolves a request for dimension d: Auto picks AMX where usable and d % 64 == 0, else Portable.
// Returns Auto and sets *error when Amx is requested but cannot run.
Int8Kernel ResolveInt8Kernel(Int8Kernel requested, int64_t dim, std::string* error);

// scores[i * docs.count + b] = MaxSim(query i, document b) for every pair. `threads` <= 0: all.
// An empty document scores -inf, an empty query 0.
void MaxsimAllPairsInt8(const Int8Spans& queries, const Int8Spans& docs, float* scores, int threads,
                        Int8Kernel kernel = Int8Kernel::Auto);

}  // namespace maxsim_cpu
