// AVX2 int8 residual scoring (2-bit), for CPUs without VNNI (Zen 2/3, Haswell to Comet Lake): the
// avx2 set's assign, dots and centroid interaction, and the int8 decompress-and-MaxSim of
// residual_int8_impl.h on ymm with VPMADDUBSW + VPMADDWD(ones) + VPADDD as the 4-byte dot.
//
// VPMADDUBSW saturates its int16 pair sums: with query bytes q + 128 in [1, 255] and weights in
// [-63, 63] (this set's tables take 7-bit weights, sw = max |w| / 63: int8_weight_max), a pair is at
// most 2 x 255 x 63 = 32,130 < 32,767, so every sum is exact (8-bit weights would reach 64,770).
// Compiled with -mavx2 -mfma (the avx2 target); only called after cpuid says so.
#include "residual.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include "residual_int8_impl.h"

namespace {

struct RAvx2Int8 : RYmm {
  static constexpr int kTileQ = 2, kTileT = 4;  // 8 accumulators + 2 query vectors + temporaries
  static V dot(V acc, V a, V b) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)));
  }
  static V add4(V acc, V v) {
    const V pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), v);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};

}  // namespace

const maxsim_cpu::ResidualKernels* maxsim_cpu::ResidualAvx2Int8() { return Int8Set<RAvx2Int8>("avx2int8", 63); }
#else
const maxsim_cpu::ResidualKernels* maxsim_cpu::ResidualAvx2Int8() { return nullptr; }
#endif
