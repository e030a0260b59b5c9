#include "codec.h"

#include <algorithm>
#include <cstring>

#include "cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace maxsim_codec {

namespace {

inline float F16Value(uint16_t h) {
  // exact: a float16's sign, exponent and mantissa placed in a float32 (subnormals normalized)
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
  if (e == 0x1f) u = sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0);
  else if (e != 0) u = sign | ((e + 112) << 23) | (m << 13);
  else if (m == 0) u = sign;
  else {
    e = 113;
    while (!(m & 0x400u)) {
      m <<= 1;
      e--;
    }
    u = sign | (e << 23) | ((m & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

#if defined(__x86_64__) || defined(__i386__)
bool HasAvx2F16c() {
  static const bool has = maxsim_cpu::CpuHas(maxsim_cpu::Feature::Avx2) && maxsim_cpu::CpuHas(maxsim_cpu::Feature::F16c);
  return has;
}

__attribute__((target("avx2"))) int64_t FirstAllOnesAvx2(const uint16_t* bits, size_t n, uint16_t mask) {
  const __m256i m = _mm256_set1_epi16(static_cast<short>(mask));
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i v = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + i)), m);
    if (_mm256_movemask_epi8(_mm256_cmpeq_epi16(v, m)) != 0) break;  // the scalar loop finds which
  }
  for (; i < n; i++)
    if ((bits[i] & mask) == mask) return static_cast<int64_t>(i);
  return -1;
}

__attribute__((target("avx2"))) int64_t FirstNonFinite32Avx2(const float* x, size_t n) {
  const __m256i m = _mm256_set1_epi32(0x7f800000);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), m);
    if (_mm256_movemask_epi8(_mm256_cmpeq_epi32(v, m)) != 0) break;
  }
  for (; i < n; i++) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return static_cast<int64_t>(i);
  }
  return -1;
}

__attribute__((target("avx2,f16c"))) void F16ToF32Avx2(const uint16_t* src, size_t n, float* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; i++) dst[i] = F16Value(src[i]);
}

__attribute__((target("avx2"))) void Bf16ToF32Avx2(const uint16_t* src, size_t n, float* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_slli_epi32(w, 16));
  }
  for (; i < n; i++) {
    const uint32_t u = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(dst + i, &u, 4);
  }
}

#endif

}  // namespace

int64_t FirstNonFinite16(const uint16_t* bits, size_t n, bool bf16) {
  const uint16_t mask = bf16 ? 0x7f80u : 0x7c00u;
#if defined(__x86_64__) || defined(__i386__)
  if (HasAvx2F16c()) return FirstAllOnesAvx2(bits, n, mask);
#endif
  for (size_t i = 0; i < n; i++)
    if ((bits[i] & mask) == mask) return static_cast<int64_t>(i);
  return -1;
}

// |x| as the bits with the sign cleared: for non-NaN values their integer order is the float order,
// and NaNs (above 0x7f800000) count as 0.
inline uint32_t AbsBits(uint32_t u) {
  const uint32_t a = u & 0x7fffffffu;
  return a > 0x7f800000u ? 0u : a;
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2"))) uint32_t MaxAbsBitsAvx2(const float* x, size_t n) {
  const __m256i sign = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  __m256i m = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i a = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), sign);
    const __m256i nan = _mm256_cmpgt_epi32(a, inf);  // a < 2^31: the signed compare is the unsigned one
    m = _mm256_max_epu32(m, _mm256_andnot_si256(nan, a));
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), m);
  uint32_t best = 0;
  for (uint32_t v : lanes) best = v > best ? v : best;
  for (; i < n; i++) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    best = std::max(best, AbsBits(u));
  }
  return best;
}
#endif

float MaxAbs32(const float* x, size_t n) {
  uint32_t best = 0;
#if defined(__x86_64__) || defined(__i386__)
  if (HasAvx2F16c()) best = MaxAbsBitsAvx2(x, n);
  else
#endif
    for (size_t i = 0; i < n; i++) {
      uint32_t u;
      std::memcpy(&u, x + i, 4);
      best = std::max(best, AbsBits(u));
    }
  float f;
  std::memcpy(&f, &best, 4);
  return f;
}

int64_t FirstNonFinite32(const float* x, size_t n) {
#if defined(__x86_64__) || defined(__i386__)
  if (HasAvx2F16c()) return FirstNonFinite32Avx2(x, n);
#endif
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return static_cast<int64_t>(i);
  }
  return -1;
}

void Decode16(const uint16_t* src, size_t n, bool bf16, float* dst) {
#if defined(__x86_64__) || defined(__i386__)
  if (HasAvx2F16c()) {
    if (bf16) Bf16ToF32Avx2(src, n, dst);
    else F16ToF32Avx2(src, n, dst);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++) {
    if (bf16) {
      const uint32_t u = static_cast<uint32_t>(src[i]) << 16;
      std::memcpy(dst + i, &u, 4);
    } else {
      dst[i] = F16Value(src[i]);
    }
  }
}

}  // namespace maxsim_codec
