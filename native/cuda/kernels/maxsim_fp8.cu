// maxsim_fp8.cu: fp8 e4m3 x e4m3 MaxSim with one float32 scale per token, and the e4m3 quantizer.
// Same bodies as maxsim_int8.cu (maxsim_8bit.cuh, policy E4M3); read that file for the structure and
// the launch contract. Differences:
//   - mma.sync.m16n8k32.row.col.f32.e4m3.e4m3.f32 (sm_89+): products are exact, the sum over d is the
//     tensor core's fp32 accumulation (Hopper's fp8 accumulation may keep fewer mantissa bits; the
//     tests bound it accordingly). The sm_80 cubin of this file traps in the mma entry points; they
//     are declared for compute capability 9.0 only (the fatbin holds sm_80 and sm_90a cubins).
//   - quantizer: scale = max|x| / 448 (fp32), e = cvt.rn.satfinite.e4m3(x / scale) (fp32 division,
//     round to nearest even), zero token -> scale 0, NaN -> 0, +-Inf reported in bad_token.
//   - SIMT fallback: any dim, any sm_80+ GPU (software e4m3 decode), fp32 fma.
//   semantics and smem formula: as the int8 family.
#include "maxsim_8bit.cuh"

#define MAXSIM_FP8_MMA_ENTRY(NAME, G, NGRP, TN, S, KD, KSPLIT, CTAS)                             \
  extern "C" __global__ void __launch_bounds__(32 * G * NGRP, CTAS) NAME(const MaxsimParams p) { \
    maxsim::mma_body<maxsim::E4M3, G, NGRP, TN, S, KD, KSPLIT>(p);                              \
  }

// smem bytes = NGRP * (S * (TN * (KD + 16) + TN * 4) + 128)
//                    name                G NGRP  TN  S   KD  KSPLIT CTAS/SM   smem bytes
MAXSIM_FP8_MMA_ENTRY(maxsim_fp8_mma_g1,   1, 4,   32, 4, 128, false, 3)  // 76288
MAXSIM_FP8_MMA_ENTRY(maxsim_fp8_mma_g4,   4, 2,   64, 4, 128, false, 2)  // 76032
MAXSIM_FP8_MMA_ENTRY(maxsim_fp8_mma_g8,   8, 1,  128, 3, 128, false, 2)  // 56960
MAXSIM_FP8_MMA_ENTRY(maxsim_fp8_mma_ks,   4, 2,   16, 4, 128, true,  1)  // 19200 (1: no spills)

extern "C" __global__ void __launch_bounds__(128) maxsim_fp8_simt(const MaxsimParams p) {
  maxsim::simt_body<maxsim::E4M3>(p);
}

// the quantizers: per token, and the two document-scale launches (maxsim_8bit.cuh)
MAXSIM_8BIT_QUANTIZE_ENTRIES(maxsim_fp8, E4M3)

// wgmma (sm_90a; structure in maxsim_8bit.cuh). smem bytes = S * TN * 132 + 1024, block = 128 * (NCONS + 1)
#define MAXSIM_FP8_WGMMA_ENTRY(NAME, NCONS, MB, TN, S)                                           \
  extern "C" __global__ void __launch_bounds__(128 * (NCONS + 1), 1) NAME(const MaxsimParams p) { \
    maxsim::wgmma8_body<maxsim::E4M3, NCONS, MB, TN, S>(p);                                         \
  }
//                         name                          NCONS MB  TN  S     smem bytes  block
MAXSIM_FP8_WGMMA_ENTRY(maxsim_fp8_wgmma_n128,      2,    1, 128, 4)  // 68608       384
MAXSIM_FP8_WGMMA_ENTRY(maxsim_fp8_wgmma_w2m2n64,   2,    2,  64, 8)  // 68608       384
MAXSIM_FP8_WGMMA_ENTRY(maxsim_fp8_wgmma_w2m2n128,  2,    2, 128, 6)  // 102400      384
MAXSIM_FP8_WGMMA_ENTRY(maxsim_fp8_wgmma_w3m2n64,   3,    2,  64, 8)  // 68608       512
// TMA twins (as maxsim_int8.cu's)
#define MAXSIM_FP8_WGMMA_TMA_ENTRY(NAME, NCONS, MB, TN, S)                                            \
  extern "C" __global__ void __launch_bounds__(128 * (NCONS + 1), 1)                                  \
      NAME(const MaxsimParams p, const __grid_constant__ maxsim::TmaMap docs_map) {                   \
    maxsim::wgmma8_body<maxsim::E4M3, NCONS, MB, TN, S, true>(p, &docs_map);                       \
  }
MAXSIM_FP8_WGMMA_TMA_ENTRY(maxsim_fp8_wgmma_tma_w2m2n64,   2, 2,  64, 8)  // 68608   384
MAXSIM_FP8_WGMMA_TMA_ENTRY(maxsim_fp8_wgmma_tma_w2m2n128,  2, 2, 128, 6)  // 102400  384
// document-scale twins (DSCALE in maxsim_8bit.cuh): for corpora with one scale per document
#define MAXSIM_FP8_WGMMA_TMA_DS_ENTRY(NAME, NCONS, MB, TN, S)                                        \
  extern "C" __global__ void __launch_bounds__(128 * (NCONS + 1), 1)                                  \
      NAME(const MaxsimParams p, const __grid_constant__ maxsim::TmaMap docs_map) {                   \
    maxsim::wgmma8_body<maxsim::E4M3, NCONS, MB, TN, S, true, true>(p, &docs_map);                 \
  }
MAXSIM_FP8_WGMMA_TMA_DS_ENTRY(maxsim_fp8_wgmma_tma_ds_w2m2n64,   2, 2,  64, 8)  // 68608   384
MAXSIM_FP8_WGMMA_TMA_DS_ENTRY(maxsim_fp8_wgmma_tma_ds_w2m2n128,  2, 2, 128, 6)  // 102400  384
