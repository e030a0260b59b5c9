// AVX2 + FMA + F16C instantiation: 8 fp32 lanes, 2 lane blocks x 5 document tokens per tile
// (10 accumulators of 16 ymm registers). Compiled with -mavx2 -mfma -mf16c.
#include "kernel_api.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include "kernels_impl.h"

namespace {

struct VAvx2 {
  using T = __m256;
  static constexpr int W = 8;
  static constexpr bool kBf16Dot = false;
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static T set1(float x) { return _mm256_set1_ps(x); }
  static T zero() { return _mm256_setzero_ps(); }
  static T neg_inf() { return _mm256_set1_ps(-INFINITY); }
  static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T max(T a, T b) { return _mm256_max_ps(a, b); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static void prefetch(const char* p) { _mm_prefetch(p, _MM_HINT_T0); }
  static void prefetch_l2(const char* p) { _mm_prefetch(p, _MM_HINT_T1); }
  static void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    }
    for (; i < n; i++) dst[i] = HalfToFloat(src[i]);
  }
  static void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
      _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
    for (; i < n; i++) dst[i] = Bf16ToFloat(src[i]);
  }
};

const maxsim_cpu::IsaKernels kAvx2{"avx2", VAvx2::W, 0, &ScoreRangeImpl<VAvx2, 2, 5>};

}  // namespace

const maxsim_cpu::IsaKernels* maxsim_cpu::Avx2Kernels() { return &kAvx2; }
#else
const maxsim_cpu::IsaKernels* maxsim_cpu::Avx2Kernels() { return nullptr; }
#endif
