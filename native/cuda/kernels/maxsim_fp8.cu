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

// every kernel of the family, from the one table in maxsim_8bit.cuh (MAXSIM_8BIT_KERNELS)
MAXSIM_8BIT_KERNELS(maxsim_fp8, E4M3, MAXSIM_FP8_KS_CTAS)
