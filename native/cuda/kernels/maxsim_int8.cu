// maxsim_int8.cu: int8 x int8 MaxSim (per-token symmetric scales), and the device quantizer. The
// kernel bodies live in maxsim_8bit.cuh (shared with maxsim_fp8.cu); this file holds the int8 entry
// points and the description of the 8-bit family.
//
// Math. Token t is q_t * s_t (q_t int8, s_t float32 >= 0). For query token i and document token j the
// integer dot acc_ij = sum_k q_ik * d_jk is exact in int32 (|acc| <= 127^2 * dim < 2^31 for dim <=
// 131072). The document scale goes in before the max, the query scale after it:
//   score = sum_i sq_i * max_j (float(acc_ij) * sd_j)          (fp32; sq_i >= 0 so this is exact order)
// float(acc) is exact while |acc| < 2^24 (dim <= 1040). The mma variants for dim <= 128 avoid the
// quarter-rate I2F: their accumulators start at the bits of 1.5 * 2^23 (0x4B400000), so after the MMAs
// they hold the float 1.5 * 2^23 + acc bit for bit (exact for |acc| < 2^22, i.e. dim <= 256), and one
// FADD recovers acc. The sum over query tokens runs in a fixed order: bitwise deterministic.
//
// Kernels (one family; numbers in maxsim_registry.h):
//   maxsim_int8_mma_{g1,g4,g8,ks}  mma.sync.m16n8k32 s8 x s8 -> s32 (sm_80+). Same structure as
//       maxsim_mma.cu: a group of G warps shares a cp.async ring of document tiles (TN tokens x KD
//       bytes, plus the TN document scales); each warp holds the A fragments of one 32-row query slice
//       in registers; persistent grid over documents; ragged, 64-bit starts. An int8 row of 32 bytes
//       has exactly the 32-bit-word layout of an fp16 row of 16 elements, for A, B (ldmatrix.b16) and C,
//       so the fragment addressing is maxsim_mma.cu's with k counted in bytes and one k32 step per
//       16-byte pair of chunks.
//   maxsim_int8_wgmma_{n128,w2m2n64,w2m2n128}  sm_90a only: the warp-specialized structure of
//       one wgmma body (maxsim_wgmma.cuh, with its launch contract) with wgmma.m64nNk32.s32.s8.s8;
//       the dispatcher takes w2m2n128 for long documents and w2m2n64 otherwise when there are many
//       query rows on compute capability 9.0, through their TMA twins (_tma_) where tensor maps exist.
//   maxsim_int8_wgmma_tma_ds_{w2m2n64,w2m2n128}  the TMA twins for documents whose tokens share one
//       scale per document (DSCALE in maxsim_wgmma.cuh): row max on the int32 dots, scale once per row.
//   maxsim_int8_simt               any dim, CUDA cores only (exact int32 dots), one CTA per pair.
//   maxsim_int8_quantize_{f32,f16,bf16}  float token set -> int8 + scales, bitwise the host
//       quantize(): scale = float(double(max|x|) / 127), q = rint(double(x) / double(scale)) clamped
//       to [-127, 127] (rint: round half to even), zero token -> scale 0; NaN elements are ignored by
//       the max and become 0 (as the host's Int8Array store does); +-Inf is reported in bad_token.
//   maxsim_int8_quantize_mark_documents, maxsim_int8_quantize_documents_{f32,f16,bf16}  two more
//       launches for document scales: each item's largest token scale marks the tokens that differ
//       (warp per item), which are then requantized with it (warp per token); bitwise the host's
//       quantize(..., { scales: 'document' }).
//
// LAUNCH CONTRACT
//   mma:  block = (32 * G * NGRP, 1, 1), grid = (num_sms * CTAS, 1, 1) (persistent; any grid >= 1 is
//         correct), dynamic smem = NGRP * (S * (TN * (KD + 16) + TN * 4) + 128) bytes (the host raises
//         the limit above 48 KiB); requires dim % 16 == 0, dim >= 16 (16-byte cp.async rows), and for
//         g1/g4/g8 dim <= 128 (they return without writing otherwise; ks takes any such dim); token
//         arrays 16-byte aligned, scales 4-byte aligned; query_scales / doc_scales set.
//         max_query_length MUST be >= every query length of the launch.
//   simt: block = (128, 1, 1), grid = (num_docs, num_queries - query_tile_offset, 1), smem 0, any dim.
//   quantize: block = (256, 1, 1), any grid >= 1 (grid-stride over tokens, one warp per token).
//   semantics: zero-length document -> -INFINITY; zero-length query -> 0; queries q in
//              [query_tile_offset, num_queries), scores[q * num_docs + b].
#include "maxsim_8bit.cuh"

// every kernel of the family, from the one table in maxsim_8bit.cuh (MAXSIM_8BIT_KERNELS)
MAXSIM_8BIT_KERNELS(maxsim_int8, S8, MAXSIM_INT8_KS_CTAS)
