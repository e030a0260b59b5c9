// The argument block of every MaxSim training kernel (native/cuda/kernels/maxsim_train.cu), by value.
// Shared by the kernels (nvcc) and by the binding that launches them (g++): fixed-width plain types only.
//
// Token sets are packed on the device ([T, d] rows, items back to back, int64 starts, int32 lengths).
// Pair p is (i = p / num_docs, b = p % num_docs) for pairs == 0 ('all') and (i = p, b = p) for
// pairs == 1 ('diagonal'). argmax[p * stride + s] is the winning document token of query token s.
#pragma once
#include <stdint.h>

// Element types, as the token sets use them (DType in native/binding/token_set.h).
enum : int32_t { kTrainF32 = 0, kTrainF16 = 1, kTrainBF16 = 2 };

struct MaxsimTrainParams {
  const void* queries;           // query tokens [Tq, d], dtype query_dtype
  const int64_t* query_starts;   // [num_queries], packed rows
  const int32_t* query_lengths;  // [num_queries]
  const void* docs;              // document tokens [Td, d], dtype doc_dtype
  const int64_t* doc_starts;     // [num_docs], packed rows
  const int32_t* doc_lengths;    // [num_docs]
  float* scores;                 // forward: [num_pairs]
  float* best;                   // forward scratch: [num_pairs * stride] per-slot maxima
  int32_t* argmax;               // [num_pairs * stride] (written by forward, read by backward)
  const double* grad_scores;     // backward: [num_pairs]
  float* dq;                     // backward: [Tq, d] packed
  float* dd;                     // backward: [Td, d] packed
  int64_t* counts;               // CSR: [Td] sources per document token row (zeroed by the host)
  int64_t* offsets;              // CSR: [Td + 1] exclusive scan of counts
  int64_t* cursor;               // CSR: [Td] next free slot per row (starts at offsets)
  int64_t* sources;              // CSR: [total sources] flat argmax index p * stride + s, per row ascending
  int64_t num_pairs;
  int64_t stride;                // argmax slots per pair (>= every query length)
  int64_t doc_tokens;            // Td
  int32_t num_queries;
  int32_t num_docs;
  int32_t dim;
  int32_t pairs;                 // 0 = all, 1 = diagonal
  int32_t query_dtype;           // kTrainF32 / kTrainF16 / kTrainBF16
  int32_t doc_dtype;
};

// nvcc and g++ must agree on the layout the driver copies (16 pointers, 3 int64, 6 int32).
static_assert(sizeof(MaxsimTrainParams) == 176, "MaxsimTrainParams layout changed: update both sides");
