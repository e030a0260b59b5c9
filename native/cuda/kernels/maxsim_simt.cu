// maxsim_simt.cu: the correct any-d fallback (fp32 / fp16 / bf16), CUDA cores only, fp32 math.
// It is the reference the tensor-core kernels are tested against; it is not tuned for speed.
//
// LAUNCH CONTRACT (all three entry points: maxsim_simt_f32, maxsim_simt_f16, maxsim_simt_bf16)
//   block       = (128, 1, 1)
//   grid        = (num_docs, num_queries - query_tile_offset, 1)   [grid.y <= 65535: split the
//                 launch over queries with query_tile_offset if needed]
//   dynamic smem= 0
//   requires    : dim >= 1 (any), any lengths (0 allowed), 64-bit starts; tokens 2-byte aligned
//                 (4 for f32). No alignment beyond the element size.
//   semantics   : block (b, y) computes query q = query_tile_offset + y against document b and
//                 writes scores[q * num_docs + b]. Zero-length document -> -INFINITY; zero-length
//                 query -> 0. Deterministic: fixed reduction order, no atomics.
#include "maxsim_simt.cuh"

#include "maxsim_registry.h"

// one entry point per row of MAXSIM_SIMT_VARIANTS (maxsim_registry.h)
#define MAXSIM_SIMT_ROW(SFX, T, DTYPE)                                                                  \
  extern "C" __global__ void __launch_bounds__(MAXSIM_SIMT_BLOCK) maxsim_simt_##SFX(const MaxsimParams p) { \
    maxsim::simt_body<T>(p);                                                                      \
  }
MAXSIM_SIMT_VARIANTS(MAXSIM_SIMT_ROW)
