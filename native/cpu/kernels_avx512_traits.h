// The AVX-512 fp32 vector traits for kernels_impl.h, shared by the two AVX-512 translation units
// (kernels_avx512.cc, kernels_avx512bf16.cc). Include inside a TU compiled with AVX-512F flags only;
// the anonymous namespace keeps each TU's copy its own.
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels_impl.h"

namespace {

struct VAvx512 {
  using T = __m512;
  static constexpr int W = 16;
  static constexpr bool kBf16Dot = false;
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static T set1(float x) { return _mm512_set1_ps(x); }
  static T zero() { return _mm512_setzero_ps(); }
  static T neg_inf() { return _mm512_set1_ps(-INFINITY); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T max(T a, T b) { return _mm512_max_ps(a, b); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static void prefetch(const char* p) { _mm_prefetch(p, _MM_HINT_T0); }
  static void prefetch_l2(const char* p) { _mm_prefetch(p, _MM_HINT_T1); }
  static void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
    }
    for (; i < n; i++) dst[i] = HalfToFloat(src[i]);
  }
  static void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
      _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
    for (; i < n; i++) dst[i] = Bf16ToFloat(src[i]);
  }
};

}  // namespace
