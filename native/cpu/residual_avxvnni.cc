// AVX-VNNI residual scoring (2-bit; Alder Lake and newer, Sapphire Rapids, Zen 5): the avx2 set's
// assign, dots and centroid interaction, and the int8 decompress-and-MaxSim of residual_int8_impl.h
// on ymm with the VEX VPDPBUSD (8-bit weights, as avx512vnni). Compiled with -mavx2 -mavxvnni where
// the compiler knows the flag (the int8 engine's AVX-VNNI target; otherwise compiled out) and with
// -mfma for the epilogue; only called after cpuid says so.
#include "residual.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__AVXVNNI__)
#include "residual_int8_impl.h"

namespace {

struct RAvxVnni : RYmm {
  static constexpr int kTileQ = 2, kTileT = 6;  // 12 accumulators + 2 query vectors + the broadcast
  // inline asm, as in kernels_int8_avxvnni.cc ({vex}: the AVX-VNNI encoding, not EVEX)
  static V dot(V acc, V a, V b) {
#if defined(__clang__)
    return _mm256_dpbusd_avx_epi32(acc, a, b);
#else
    __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(a), "x"(b));
    return acc;
#endif
  }
  static V add4(V acc, V v) { return dot(acc, _mm256_set1_epi8(1), v); }
};

}  // namespace

const maxsim_cpu::ResidualKernels* maxsim_cpu::ResidualAvxVnni() { return Int8Set<RAvxVnni>("avxvnni", 127); }
#else
const maxsim_cpu::ResidualKernels* maxsim_cpu::ResidualAvxVnni() { return nullptr; }
#endif
