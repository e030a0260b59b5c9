// maxsim_registry.h: the one registry of the scoring kernels. Every launch number of every scoring
// entry point is stated here, once:
//   - the kernel sources instantiate their entry points by expanding these lists (maxsim_mma.cu,
//     maxsim_wgmma.cu, maxsim_simt.cu, and maxsim_8bit.cuh for maxsim_int8.cu / maxsim_fp8.cu);
//   - native/cuda/kernels/variants_gen.cc expands the same lists on the host (plain C++, no CUDA) and
//     prints variants.json, the table the TypeScript dispatcher reads (src/backends/cuda-dispatch.ts).
// The committed variants.json is that program's output; scripts/build-native.mjs regenerates it and
// refuses to build kernels against a stale copy (`node scripts/build-native.mjs variants` rewrites
// it), and test/variants-registry.test.ts checks it too.
//
// Only macros: nothing here is compiled unless expanded, so the cubins depend on the rows alone. The
// kernel sources expand each list once per kind of entry point (plain, then TMA twins, ...), in row
// order: the order of the kernels in a cubin is in its .nv.info (symbol indices), and keeping it keeps
// the cubins identical byte for byte (scripts/compare-cubins.py).
// To add a variant: add its row here (and its regime text below); nothing else states its numbers.
#ifndef MAXSIM_REGISTRY_H
#define MAXSIM_REGISTRY_H

// ---- shared memory and block, as functions of the template parameters --------------------------
// mma.sync (maxsim_mma.cuh), all element types: NGRP groups of G warps
#define MAXSIM_MMA_BLOCK(G, NGRP) (32 * (G) * (NGRP))
// fp16/bf16 mma.sync: S-stage ring of TN x (KD + 8) halves
#define MAXSIM_MMA16_SMEM(NGRP, TN, S, KD) ((NGRP) * ((S) * (TN) * ((KD) + 8) * 2 + 128))
// fp16/bf16 wgmma (maxsim_wgmma.cuh, entry points in maxsim_wgmma.cu): 1 producer + NCONS consumer warpgroups; S stages of TN x 128
// halves (256 bytes a token) plus 1024 bytes of alignment slack
#define MAXSIM_WGMMA_BLOCK(NCONS) (128 * ((NCONS) + 1))
#define MAXSIM_WGMMA16_SMEM(TN, S) ((S) * (TN) * 256 + 1024)
// 8-bit mma.sync (maxsim_mma.cuh): TN x (KD + 16) bytes plus TN float scales a stage
#define MAXSIM_MMA8_SMEM(NGRP, TN, S, KD) ((NGRP) * ((S) * ((TN) * ((KD) + 16) + (TN) * 4) + 128))
// 8-bit wgmma (maxsim_wgmma.cuh, entry points in maxsim_8bit.cuh): 128 bytes and one float scale a token
#define MAXSIM_WGMMA8_SMEM(TN, S) ((S) * (TN) * 132 + 1024)
// the SIMT fallbacks: one CTA of 128 threads per (document, query), no dynamic shared memory
#define MAXSIM_SIMT_BLOCK 128

// row flags (TMA / DS columns): MAXSIM_IF_##FLAG(x) keeps x for true, drops it for false
#define MAXSIM_IF_true(...) __VA_ARGS__
#define MAXSIM_IF_false(...)

// ---- maxsim_simt.cu: maxsim_simt_{f32,f16,bf16}, any dim, sm_80+ ---------------------------------
//   X(SFX, T, DTYPE): the type suffix, the CUDA element type, the dispatcher's dtype
#define MAXSIM_SIMT_VARIANTS(X)          \
  X(f32, float, float32)                 \
  X(f16, __half, float16)                \
  X(bf16, __nv_bfloat16, bfloat16)

// ---- maxsim_mma.cu: maxsim_mma_<SFX>_{f16,bf16}, mma.sync, sm_80+, dim % 8 == 0 -------------------
//   X(SFX, G, NGRP, TN, S, KD, KSPLIT, CTAS): G warps a group, NGRP groups a CTA, TN-token tiles,
//   S stages, K chunk KD; KSPLIT loops K (any dim, else dim <= KD); CTAS: CTAs per SM (persistent)
// g1t32: 32-token tiles at 2 CTAs/SM need 2 x 105 KB per SM (sm_90, sm_100); H200 1,32,128: 0.760 vs
// 0.790 ms for g1
#define MAXSIM_MMA_VARIANTS(X)           \
  X(g1, 1, 4, 16, 3, 128, false, 4)      \
  X(g1t32, 1, 4, 32, 3, 128, false, 2)   \
  X(g4, 4, 2, 32, 4, 128, false, 2)      \
  X(g8, 8, 1, 64, 3, 128, false, 2)      \
  X(ks, 4, 2, 16, 4, 128, true, 2)

// ---- maxsim_wgmma.cu: maxsim_wgmma_<SFX>_{f16,bf16}, sm_90a only, 8 <= dim <= 128, dim % 8 == 0 ----
//   X(SFX, NCONS, MB, TN, S, PP, TMA): NCONS consumer warpgroups of MB m-blocks, TN-token tiles, S
//   stages, PP ping-pong; 1 CTA per SM. Query rows per pass = 64 * NCONS * MB (PP: 64 * MB, every
//   consumer warpgroup holding all of them). TMA true: also maxsim_wgmma_tma_<SFX>_{f16,bf16}, the
//   documents read through a tensor map of box [64, TN] (its second parameter).
#define MAXSIM_WGMMA_VARIANTS(X)               \
  X(n128, 2, 1, 128, 4, false, true)           \
  X(w2n64, 2, 1, 64, 8, false, false)          \
  X(w4n64, 4, 1, 64, 8, false, false)          \
  X(w2m2n64, 2, 2, 64, 8, false, true)         \
  X(pp_m1n64, 2, 1, 64, 12, true, true)        \
  X(pp_m2n64, 2, 2, 64, 12, true, true)        \
  X(w2m2n128, 2, 2, 128, 6, false, true)

// ---- maxsim_int8.cu / maxsim_fp8.cu (maxsim_8bit.cuh): maxsim_<int8|fp8>_mma_<SFX> -----------------
//   X(P, E, SFX, G, NGRP, TN, S, KD, KSPLIT, CTAS), P and E passed through (prefix, policy); KS_CTAS:
//   the K-split variant's CTAs per SM, per element type (MAXSIM_<T>_KS_CTAS). dim % 16 == 0.
#define MAXSIM_8BIT_MMA_VARIANTS(X, P, E, KS_CTAS)   \
  X(P, E, g1, 1, 4, 32, 4, 128, false, 3)            \
  X(P, E, g4, 4, 2, 64, 4, 128, false, 2)            \
  X(P, E, g8, 8, 1, 128, 3, 128, false, 2)           \
  X(P, E, ks, 4, 2, 16, 4, 128, true, KS_CTAS)
#define MAXSIM_INT8_KS_CTAS 2
// fp8's K-split variant at 1 CTA per SM: at 2 it spills
#define MAXSIM_FP8_KS_CTAS 1

//   maxsim_<int8|fp8>_wgmma_<SFX>, sm_90a only: X(P, E, SFX, NCONS, MB, TN, S, TMA, DS); TMA true:
//   also _wgmma_tma_<SFX> (tensor map box [128, TN]); DS true: also _wgmma_tma_ds_<SFX> (documents
//   with one scale each, DeviceCorpus.documentScales)
#define MAXSIM_8BIT_WGMMA_VARIANTS(X, P, E)          \
  X(P, E, n128, 2, 1, 128, 4, false, false)          \
  X(P, E, w2m2n64, 2, 2, 64, 8, true, true)          \
  X(P, E, w2m2n128, 2, 2, 128, 6, true, true)        \
  X(P, E, w3m2n64, 3, 2, 64, 8, false, false)

// ---- what the dispatcher reads beside the numbers (variants_gen.cc) -------------------------------
// Per family: F(FAMILY, MODULE, ARCH_EXACT, ARCH_MAJOR, DIM_MULTIPLE_OF, DIM_MIN, DIM_MAX). The compute
// capability is ARCH_MAJOR.0 or newer, or exactly that with ARCH_EXACT (arch-specific sm_90a cubins);
// dim rules: 0 means no such rule; the rows without K-split take dim <= KD (128), the K-split ones
// up to DIM_MAX.
#define MAXSIM_SIMT16_FAMILY(F) F("simt", "maxsim_simt.fatbin", false, 8, 0, 1, 0)
#define MAXSIM_MMA16_FAMILY(F) F("mma", "maxsim_mma.fatbin", false, 8, 8, 8, 0)
#define MAXSIM_WGMMA16_FAMILY(F) F("wgmma", "maxsim_wgmma.fatbin", true, 9, 8, 8, MAXSIM_WGMMA_MAX_DIM)
// The 8-bit types, one module each: T(DTYPE, MODULE, MMA_ARCH_EXACT, MMA_ARCH_MAJOR, MAX_DIM,
// KS_CTAS). fp8's e4m3 mma.sync needs sm_89+ and is declared for 9.0 (the cubins are sm_80 and
// sm_90a); MAX_DIM bounds the any-dim kernels (SIMT, K-split): int8 dots are exact in int32 up to
// 131072, 0 is no limit. SIMT rows take dim >= 1 on sm_80+, mma rows dim % 16 == 0 and >= 16, wgmma
// rows also dim <= 128 and compute capability 9.0 exactly.
#define MAXSIM_INT8_TYPE(T) T("int8", "maxsim_int8.fatbin", false, 8, 131072, MAXSIM_INT8_KS_CTAS)
#define MAXSIM_FP8_TYPE(T) T("fp8", "maxsim_fp8.fatbin", true, 9, 0, MAXSIM_FP8_KS_CTAS)
#define MAXSIM_8BIT_DIM_MULTIPLE_OF 16
#define MAXSIM_WGMMA_MAX_DIM 128

// When each variant is the right choice, for people (the rules are code: selectVariant). R(name,
// text); a name with {dt} covers every element type of its row. The TMA and document-scale twins
// take the texts below (MAXSIM_REGIME_*), with {base} the kernel they read like, {t} int8 / fp8 and
// {tn} the tile width.
#define MAXSIM_REGIMES(R)                                                                                     \
  R("maxsim_simt_{dt}",                                                                                      \
    "reference fallback for any dim, fp32, dim % 8 != 0 or empty queries; slow (~1.7 TFLOP/s)")              \
  R("maxsim_mma_g1_{dt}",                                                                                    \
    "memory-bound: nq * ceil(Lq / 32) == 1 (one query of <= 32 tokens) where g1t32 does not fit two CTAs "   \
    "per SM (compute capability 8.x); 4.1-4.2 TB/s on H200")                                                 \
  R("maxsim_mma_g1t32_{dt}",                                                                                 \
    "memory-bound: nq * ceil(Lq / 32) == 1 on compute capability 9.x (two CTAs of 105 KB per SM): as g1 "    \
    "with 32-token document tiles at 2 CTAs/SM; 4.2-4.3 TB/s on H200, 1,32,128,128,100000 0.760 vs 0.790 "   \
    "ms for g1 (bench/NOTES.md, '32-token g1 tiles')")                                                       \
  R("maxsim_mma_g4_{dt}", "sm_80-class (no wgmma): 1 < nq * ceil(Lq / 32) <= 4")                             \
  R("maxsim_mma_g8_{dt}", "sm_80-class (no wgmma): nq * ceil(Lq / 32) > 4 (long queries, all pairs)")        \
  R("maxsim_mma_ks_{dt}",                                                                                    \
    "dim > 128 (K looped in chunks of 128; tested up to 1024, designed for <= 4096); correct, not tuned "    \
    "(~50 TFLOP/s)")                                                                                         \
  R("maxsim_wgmma_n128_{dt}",                                                                                \
    "sm_90a: nq * ceil(Lq / 32) > 1 and nq * ceil(Lq / 16) <= 8 with fewer than 4 documents per SM (else "   \
    "the ping-pong variants); 128 query rows per pass")                                                      \
  R("maxsim_wgmma_w2m2n64_{dt}",                                                                             \
    "sm_90a compute-bound: nq * ceil(Lq / 16) > 8 and documents short of 512 tokens or not a multiple of "   \
    "128 (e.g. 300); 256 query rows per pass, 64-token tiles, consumers at 232 registers (setmaxnreg)")      \
  R("maxsim_wgmma_w2n64_{dt}",                                                                               \
    "alternate (128 rows/pass, 64-token tiles), never the best measured; not selected automatically, kept "  \
    "for tuning")                                                                                            \
  R("maxsim_wgmma_w4n64_{dt}",                                                                               \
    "alternate (4 consumer warpgroups, 256 rows/pass), within 3-13% of w2m2n64; not selected "               \
    "automatically, kept for tuning")                                                                        \
  R("maxsim_wgmma_pp_m1n64_{dt}",                                                                            \
    "sm_90a: nq * ceil(Lq / 32) > 1 and nq * ceil(Lq / 16) <= 4 and at least 4 documents per SM; "           \
    "ping-pong: each of 2 consumer warpgroups holds 64 query rows and takes alternate documents (12-stage "  \
    "ring of 64-token tiles)")                                                                               \
  R("maxsim_wgmma_pp_m2n64_{dt}",                                                                            \
    "sm_90a: 4 < nq * ceil(Lq / 16) <= 8 and at least 4 documents per SM; ping-pong: each of 2 consumer "    \
    "warpgroups holds 128 query rows and takes alternate documents (12-stage ring of 64-token tiles)")       \
  R("maxsim_wgmma_w2m2n128_f16",                                                                             \
    "sm_90a: nq * ceil(Lq / 16) > 8 and long documents (mean >= 512 tokens, the longest padded to 128 "      \
    "within 5% of 64; ColPali): as w2m2n64 with 128-token tiles (6 stages), consumers at 232 registers "     \
    "(setmaxnreg)")                                                                                          \
  R("maxsim_wgmma_w2m2n128_bf16", "sm_90a: as maxsim_wgmma_w2m2n128_f16 (bfloat16)")                         \
  R("maxsim_int8_simt",                                                                                      \
    "int8 reference fallback for any dim (exact int32 dots on CUDA cores): dim % 16 != 0 or empty "          \
    "queries; slow")                                                                                         \
  R("maxsim_int8_mma_g1",                                                                                    \
    "int8 memory-bound: nq * ceil(Lq / 32) == 1; 32-token x 128-byte tiles, 4 stages, 12 warps per SM")      \
  R("maxsim_int8_mma_g4", "int8: 1 < nq * ceil(Lq / 32) <= 4; 64-token tiles shared by 4 warps")             \
  R("maxsim_int8_mma_g8",                                                                                    \
    "int8 compute-bound: nq * ceil(Lq / 32) > 4 (long queries, all pairs); 128-token tiles shared by 8 "     \
    "warps")                                                                                                 \
  R("maxsim_int8_mma_ks", "int8 dim > 128 (K looped in chunks of 128 bytes); correct, not tuned")            \
  R("maxsim_fp8_simt",                                                                                       \
    "fp8 e4m3 fallback for any dim and any sm_80+ GPU (software e4m3 decode, fp32 fma); slow")               \
  R("maxsim_fp8_mma_g1",                                                                                     \
    "fp8 memory-bound: nq * ceil(Lq / 32) == 1 (as maxsim_int8_mma_g1); e4m3 mma.sync, compute "             \
    "capability 9.0")                                                                                        \
  R("maxsim_fp8_mma_g4", "fp8: 1 < nq * ceil(Lq / 32) <= 4")                                                 \
  R("maxsim_fp8_mma_g8", "fp8 compute-bound: nq * ceil(Lq / 32) > 4")                                        \
  R("maxsim_fp8_mma_ks", "fp8 dim > 128 (K looped in chunks of 128 bytes); correct, not tuned")              \
  R("maxsim_int8_wgmma_n128",                                                                                \
    "sm_90a int8: 128 query rows per pass, 128-token tiles; not selected automatically until measured "      \
    "(force with variant)")                                                                                  \
  R("maxsim_int8_wgmma_w2m2n64",                                                                             \
    "sm_90a int8, many query rows (nq * ceil(Lq / 32) > 4) and documents shorter than 512 tokens or not a "  \
    "multiple of 128 (e.g. 300): two consumer warpgroups of 128 query rows (256 per pass), 64-token tiles")  \
  R("maxsim_int8_wgmma_w3m2n64",                                                                             \
    "sm_90a int8, many query rows and shorter documents where 384 query rows per pass pad at most 15% "      \
    "more than 256: three consumer warpgroups of 128 query rows, 64-token tiles, consumers at 160 "          \
    "registers (setmaxnreg)")                                                                                \
  R("maxsim_int8_wgmma_w2m2n128",                                                                            \
    "sm_90a int8, many query rows and long documents (mean >= 512 tokens, the longest padded to 128 "        \
    "within 5% of 64): as w2m2n64 with 128-token tiles (6 stages), consumers at 232 registers "              \
    "(setmaxnreg)")                                                                                          \
  R("maxsim_fp8_wgmma_n128",                                                                                 \
    "sm_90a fp8: 128 query rows per pass, 128-token tiles; not selected automatically until measured "       \
    "(force with variant)")                                                                                  \
  R("maxsim_fp8_wgmma_w2m2n64",                                                                              \
    "sm_90a fp8, many query rows (nq * ceil(Lq / 32) > 4) and documents shorter than 512 tokens or not a "   \
    "multiple of 128: two consumer warpgroups of 128 query rows (256 per pass), 64-token tiles")             \
  R("maxsim_fp8_wgmma_w3m2n64",                                                                              \
    "sm_90a fp8, many query rows and shorter documents where 384 query rows per pass pad at most 15% more "  \
    "than 256: three consumer warpgroups of 128 query rows, 64-token tiles, consumers at 160 registers "      \
    "(setmaxnreg)")                                                                                          \
  R("maxsim_fp8_wgmma_w2m2n128",                                                                             \
    "sm_90a fp8, many query rows and long documents (as maxsim_int8_wgmma_w2m2n128): 128-token tiles (6 "    \
    "stages), consumers at 232 registers (setmaxnreg)")

#define MAXSIM_REGIME_WGMMA_TMA                                                                      \
  "sm_90a, as {base} with the documents read through a TMA tensor map (one producer lane issues the " \
  "copies); chosen over it when the driver provides cuTensorMapEncodeTiled"
#define MAXSIM_REGIME_8BIT_TMA                                                                          \
  "sm_90a {t}, as {base} with the documents read through a TMA tensor map by one producer lane and "    \
  "their scales by the lanes of one producer warp (cp.async); taken wherever the driver encodes tensor " \
  "maps"
#define MAXSIM_REGIME_8BIT_DS                                                                              \
  "sm_90a {t}, documents with one scale each (DeviceCorpus.documentScales): as {base} with one scale "     \
  "copied per tile instead of {tn}, the row max taken on the raw dots and the document's scale applied "   \
  "once per row at its end (the same scores); taken before it for such corpora"

#endif  // MAXSIM_REGISTRY_H
