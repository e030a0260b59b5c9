// The argument block every forward MaxSim kernel takes, by value. Shared by the kernels (nvcc) and by
// the runtime that launches them (g++), so it uses only fixed-width plain types.
//
// Tokens are row-major [T, d] in the element type of the variant. Item i of a token set is the
// tokens starts[i] .. starts[i] + lengths[i]; starts are 64-bit token indices, so element offsets
// (start * d) never overflow 32 bits. A zero-length document scores -Infinity.
#pragma once
#include <stdint.h>

struct MaxsimParams {
  const void* queries;          // query tokens [Tq, d]
  const int64_t* query_starts;  // [num_queries]
  const int32_t* query_lengths; // [num_queries]
  const void* docs;             // document tokens [Td, d]
  const int64_t* doc_starts;    // [num_docs]
  const int32_t* doc_lengths;   // [num_docs]
  float* scores;                // [num_queries, num_docs], row-major
  int32_t num_queries;
  int32_t num_docs;
  int32_t dim;
  int32_t max_query_length;     // longest query (for tiling decisions inside the kernel)
  int32_t max_doc_length;       // longest document
  int32_t query_tile_offset;    // first query handled by this launch (for launches split over queries)
  // 1: the wgmma kernels take their work units pass-inner where no query spans passes (the CTAs of
  // a wave read the same documents from L2 in different passes); 0: each CTA walks every pass
  int32_t unit_order;
  int32_t reserved;
  // int8 kernels only (maxsim_int8.cu): one float32 scale per token, indexed like the tokens
  // (token t of the set has scale scales[t]); null for the float kernels, which do not read them.
  const float* query_scales;    // [Tq]
  const float* doc_scales;      // [Td]
};

// The argument block of the device quantizer (maxsim_int8_quantize_*), by value. It quantizes the
// `tokens` packed tokens of a float token set (items packed in order, as DeviceTokens holds them) into
// int8 + one float32 scale per token, and copies the item table (starts, lengths) unchanged.
struct QuantizeParams {
  const void* src;                    // [tokens, dim] float32 / float16 / bfloat16
  const int64_t* src_starts;          // [count]
  const int32_t* src_lengths;         // [count]
  int8_t* dst;                        // [tokens, dim]
  float* dst_scales;                  // [tokens]
  int64_t* dst_starts;                // [count]
  int32_t* dst_lengths;               // [count]
  unsigned long long* bad_token;      // lowest token index holding +-Inf (stays ~0ull when none)
  int64_t tokens;
  int32_t count;
  int32_t dim;
};
