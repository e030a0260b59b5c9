// The contract between the CPU engine (engine.cc: threading, packing, dispatch) and the per-ISA
// kernel translation units (kernels_*.cc, each compiled with its own -m flags).
//
// Queries are packed once per call into "lane blocks": for a vector of W float lanes, query tokens
// are grouped W at a time and stored k-major, packed[block][k][lane], zero-filled past the end.
// The micro-kernel then loads W query tokens' component k with one vector load, broadcasts one
// document component, and keeps a W x NR tile of dot products in registers across all of d; the
// running max over document tokens is one vector max per tile. Nothing of size [Lq, Ld] is stored.
#pragma once
#include <cstddef>
#include <cstdint>

namespace maxsim_cpu {

enum class DocType : int { Float32 = 0, Float16 = 1, BFloat16 = 2 };

struct PackedQueries {
  // fp32 lane blocks, all queries back to back.
  const float* f32 = nullptr;
  // bf16 pair blocks (packed[block][k/2][lane][2]); only when the ISA has a bf16 dot product and
  // documents are bf16 with even d. nullptr otherwise.
  const uint16_t* bf16 = nullptr;
  const int64_t* block_offset = nullptr;  // [num_queries]: index of the query's first lane block
  const int32_t* length = nullptr;        // [num_queries]: tokens per query
  int64_t num_queries = 0;
  int64_t dim = 0;
};

struct DocSet {
  const void* data = nullptr;  // packed tokens [T, d]
  DocType dtype = DocType::Float32;
  const double* starts = nullptr;
  const int32_t* lengths = nullptr;
  int64_t count = 0;
  int64_t dim = 0;
};

struct ScoreJob {
  PackedQueries q;
  DocSet docs;
  float* scores = nullptr;  // [num_queries, docs.count] row-major
  // Optional: when non-null, query i is scored only against document pair_doc[i] and the result
  // goes to scores[i] (paired mode). Unused by the all-pairs path.
};

// Per-thread scratch the kernels may use.
struct Scratch {
  float* doc_f32 = nullptr;  // one chunk of document tokens converted to fp32 (kScratchChunkFloats)
  float* runmax = nullptr;   // running maxima: every query's lane blocks (block_offset * lanes)
};

// Converted-chunk capacity in floats: chunks hold at most ~24 KB or one tile of NR <= 32 tokens.
inline int64_t ScratchChunkFloats(int64_t dim) { return dim * 32 + 8192; }

using ScoreRangeFn = void (*)(const ScoreJob& job, int64_t doc_begin, int64_t doc_end, Scratch& scratch);

struct IsaKernels {
  const char* name;   // reported by maxsim info
  int lanes;          // W: floats per vector
  // > 0: bf16 x bf16 inputs whose d is a multiple of this run on native bf16 products, with the
  // queries packed as bf16 pairs; 0: every input is converted to fp32.
  int bf16_dim_multiple;
  ScoreRangeFn score_range;
};

// Defined in the ISA translation units; null when the TU was compiled out.
const IsaKernels* AmxKernels();         // AMX-BF16 tiles for bf16, AVX-512 fp32 otherwise
const IsaKernels* Avx512Kernels();      // AVX-512 fp32 FMA (bf16/fp16 converted)
const IsaKernels* Avx512Bf16Kernels();  // AVX512-BF16 pair dot product for bf16
const IsaKernels* Avx2Kernels();
const IsaKernels* NeonKernels();
const IsaKernels* PortableKernels();

}  // namespace maxsim_cpu
