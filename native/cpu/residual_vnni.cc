// AVX-512 VNNI residual scoring (2-bit): the avx512 set's assign, dots and centroid interaction, and
// the int8 decompress-and-MaxSim of residual_int8_impl.h on zmm: 16 query tokens x 4 dimensions per
// VPDPBUSD, the quad decode in one register (a broadcast, two byte shuffles, a shift and a mask).
// Compiled with -mavx512f -mavx512bw -mavx512vnni; only called after cpuid says so.
#include "residual.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include "residual_int8_impl.h"

namespace {

struct RVnni512 {
  using V = __m512i;
  using F = __m512;
  static constexpr int L = 16;
  static constexpr int VB = 1;
  static constexpr int kBias = 128;
  static constexpr int kTileQ = 2, kTileT = 8;  // 2 x 16 query tokens x 8 document tokens per tile
  static const maxsim_cpu::ResidualKernels* Fallback() { return maxsim_cpu::ResidualAvx512(); }
  static V zero() { return _mm512_setzero_si512(); }
  static V set1(int32_t x) { return _mm512_set1_epi32(x); }
  static V load(const void* p) { return _mm512_loadu_si512(p); }
  static void store(void* p, V v) { _mm512_storeu_si512(p, v); }
  static V dot(V acc, V a, V b) { return _mm512_dpbusd_epi32(acc, a, b); }
  static V add4(V acc, V v) { return _mm512_dpbusd_epi32(acc, _mm512_set1_epi8(1), v); }
  // lane L holds tokens 4L .. 4L+3: dest byte 4u + j <- code byte 4j + L, then dword 4L + u >> 2u
  static V decode(__m128i w, __m128i tab, int) {
    static const V gather = [] {
      alignas(64) int8_t g[64];
      for (int l = 0; l < 4; l++)
        for (int u = 0; u < 4; u++)
          for (int j = 0; j < 4; j++) g[16 * l + 4 * u + j] = static_cast<int8_t>(4 * j + l);
      return _mm512_load_si512(g);
    }();
    const V shift = _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6);
    V v = _mm512_srlv_epi32(_mm512_shuffle_epi8(_mm512_broadcast_i32x4(w), gather), shift);
    v = _mm512_ternarylogic_epi32(v, _mm512_set1_epi32(0x03030303), _mm512_set1_epi32(0x0C080400), 0xEA);
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(tab), v);  // (v & mask) | offs indexes byte 4j + e
  }
  static V compress(V v, uint32_t mask) { return _mm512_maskz_compress_epi32(static_cast<__mmask16>(mask), v); }
  static F loadf(const float* p) { return _mm512_loadu_ps(p); }
  static void storef(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fmax(F a, F b) { return _mm512_max_ps(a, b); }
  static F cvt(V v) { return _mm512_cvtepi32_ps(v); }
};

}  // namespace

const maxsim_cpu::ResidualKernels* maxsim_cpu::ResidualAvx512Vnni() { return Int8Set<RVnni512>("avx512vnni", 127); }
#else
const maxsim_cpu::ResidualKernels* maxsim_cpu::ResidualAvx512Vnni() { return nullptr; }
#endif
