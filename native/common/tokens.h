// The host token-set types every engine and binding reads, free of Node: the element types and the
// TokenSet (packed tokens with per-item spans, as a TokenBatch holds them, see src/tensor.ts). The
// bindings fill a TokenSet from JS (native/binding/token_set.h); engines and native check programs
// use it as a plain struct.
#pragma once
#include <cstdint>
#include <memory>

enum class DType : int { Float32 = 0, Float16 = 1, BFloat16 = 2, Int8 = 3 };

inline int DTypeSize(DType t) { return t == DType::Float32 ? 4 : t == DType::Int8 ? 1 : 2; }

// The dtype's name as the TypeScript side spells it.
inline const char* DTypeName(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Int8: return "int8";
  }
  return "?";
}

// A host token set: item i holds tokens [starts[i], starts[i] + lengths[i]) of data ([tokens, dim]).
// The pointers are borrowed; `owner` (when set) keeps what they point into alive, so that a job that
// holds a copy of the struct holds its inputs (the bindings pin the JS arrays there).
struct TokenSet {
  const void* data = nullptr;   // first element of the packed tokens
  int64_t elements = 0;         // elements available in data
  DType dtype = DType::Float32;
  int64_t dim = 0;
  int64_t count = 0;            // items
  const double* starts = nullptr;   // [count] first token (float64-exact integer)
  const int32_t* lengths = nullptr; // [count]
  const float* scales = nullptr;    // int8 only: per token
  int64_t max_length = 0;
  std::shared_ptr<const void> owner;
};
