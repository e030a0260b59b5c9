#include "query_convert.h"

#include "../cpu/cpu_features.h"

#include <cmath>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace maxsim_cuda {

namespace {

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// float16, round to nearest even (finite input): normal, subnormal and overflow-to-infinity cases.
uint16_t F16Scalar(float f) {
  const uint32_t u = Bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a >= 0x477FF000u) return sign | 0x7C00u;  // rounds to 65520 or more: infinity
  if (a < 0x38800000u) {                        // below 2^-14: a float16 subnormal (or zero)
    if (a < 0x33000000u) return sign;           // below half the smallest subnormal (2^-25): zero
    const uint32_t e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 .. 24: m >> shift is the subnormal's mantissa
    const uint32_t r = m >> shift, rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    return sign | static_cast<uint16_t>(r + (rest > half || (rest == half && (r & 1))));
  }
  // normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even
  const uint32_t v = a - 0x38000000u;
  return sign | static_cast<uint16_t>((v + 0x0FFFu + ((v >> 13) & 1u)) >> 13);
}

inline uint16_t Bf16Scalar(float f) {
  const uint32_t u = Bits(f);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2,f16c"))) void F16Avx2(const float* src, uint16_t* dst, uint64_t n) {
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; i++) dst[i] = F16Scalar(src[i]);
}
__attribute__((target("avx2"))) void Bf16Avx2(const float* src, uint16_t* dst, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) dst[i] = Bf16Scalar(src[i]);  // integer lanes: vectorized
}
// QuantizeTokenInt8's arithmetic four values at a time: the division and the rounding are IEEE double
// operations in both, so the bytes are the scalar loop's (max|x| is order-free; the clamp is exact).
__attribute__((target("avx2"))) float QuantizeInt8Avx2(const float* x, int8_t* y, uint64_t dim) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 mv = _mm256_setzero_ps();
  uint64_t k = 0;
  for (; k + 8 <= dim; k += 8) mv = _mm256_max_ps(mv, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
  float m = _mm_cvtss_f32(m4);
  for (; k < dim; k++) {
    const float a = std::fabs(x[k]);
    m = a > m ? a : m;
  }
  if (m == 0.f) {
    std::memset(y, 0, dim);
    return 0.f;
  }
  const float scale = static_cast<float>(static_cast<double>(m) / 127.0);
  const double ds = scale;
  const __m256d d = _mm256_set1_pd(ds), hi = _mm256_set1_pd(127.0), lo = _mm256_set1_pd(-127.0);
  for (k = 0; k + 4 <= dim; k += 4) {
    __m256d v = _mm256_div_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + k)), d);
    v = _mm256_round_pd(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm256_max_pd(_mm256_min_pd(v, hi), lo);
    const __m128i q = _mm256_cvtpd_epi32(v);  // exact: integral values in [-127, 127]
    const __m128i b = _mm_packs_epi16(_mm_packs_epi32(q, q), _mm_setzero_si128());
    const int32_t four = _mm_cvtsi128_si32(b);
    std::memcpy(y + k, &four, 4);
  }
  for (; k < dim; k++) {
    const double v = std::nearbyint(static_cast<double>(x[k]) / ds);
    y[k] = static_cast<int8_t>(v > 127.0 ? 127.0 : v < -127.0 ? -127.0 : v);
  }
  return scale;
}
bool HasAvx2() {
  static const bool has = maxsim_cpu::CpuHas(maxsim_cpu::Feature::Avx2);
  return has;
}
bool HasAvx2F16c() {
  static const bool has = maxsim_cpu::CpuHas(maxsim_cpu::Feature::Avx2) && maxsim_cpu::CpuHas(maxsim_cpu::Feature::F16c);
  return has;
}
#endif

}  // namespace

uint32_t OverflowBits(DType to) { return to == DType::BFloat16 ? 0x7F7F8000u : 0x477FF000u; }

F32Scan ScanF32(const float* src, uint64_t n, uint32_t over_bits) {
  F32Scan r;
  const uint32_t over = over_bits == 0 ? 0x7F800000u : over_bits;  // 0: an empty range [inf, inf)
  uint32_t bad = 0, beyond = 0;
  for (uint64_t i = 0; i < n; i++) {  // branch-free: vectorized
    const uint32_t a = Bits(src[i]) & 0x7FFFFFFFu;
    bad |= static_cast<uint32_t>(a >= 0x7F800000u);
    beyond |= static_cast<uint32_t>(a >= over && a < 0x7F800000u);
  }
  r.finite = bad == 0;
  if (beyond) {
    for (uint64_t i = 0; i < n; i++) {
      const uint32_t a = Bits(src[i]) & 0x7FFFFFFFu;
      if (a >= over && a < 0x7F800000u) {
        r.first_over = static_cast<int64_t>(i);
        break;
      }
    }
  }
  return r;
}

float QuantizeTokenInt8(const float* x, int8_t* y, uint64_t dim) {
#if defined(__x86_64__) || defined(__i386__)
  if (HasAvx2()) return QuantizeInt8Avx2(x, y, dim);
#endif
  return QuantizeTokenInt8Scalar(x, y, dim);
}

float QuantizeTokenInt8Scalar(const float* x, int8_t* y, uint64_t dim) {
  float m = 0.f;
  for (uint64_t k = 0; k < dim; k++) {
    const float a = std::fabs(x[k]);
    m = a > m ? a : m;
  }
  if (m == 0.f) {
    std::memset(y, 0, dim);
    return 0.f;
  }
  const float scale = static_cast<float>(static_cast<double>(m) / 127.0);
  const double ds = scale;
  for (uint64_t k = 0; k < dim; k++) {
    // the default rounding mode: to nearest, ties to even (the device's rint)
    const double v = std::nearbyint(static_cast<double>(x[k]) / ds);
    y[k] = static_cast<int8_t>(v > 127.0 ? 127.0 : v < -127.0 ? -127.0 : v);
  }
  return scale;
}

void ConvertF32(const float* src, uint16_t* dst, uint64_t n, DType to) {
#if defined(__x86_64__) || defined(__i386__)
  if (HasAvx2F16c()) {
    if (to == DType::Float16) F16Avx2(src, dst, n);
    else Bf16Avx2(src, dst, n);
    return;
  }
#endif
  if (to == DType::Float16) {
    for (uint64_t i = 0; i < n; i++) dst[i] = F16Scalar(src[i]);
  } else {
    for (uint64_t i = 0; i < n; i++) dst[i] = Bf16Scalar(src[i]);
  }
}

}  // namespace maxsim_cuda
