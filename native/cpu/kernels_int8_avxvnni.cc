// AVX-VNNI instantiation of the int8 MaxSim micro-kernel (kernels_int8_impl.h): the 256-bit VEX
// VPDPBUSD (Alder Lake and newer, Sapphire Rapids, Zen 5) on biased queries, 8 int32 lanes, 2 lane
// blocks x 5 document tokens per tile (10 accumulators of 16 ymm registers). Compiled with
// -mavx2 -mavxvnni where the compiler knows the flag (binding.gyp asks it; GCC >= 11, clang >= 12;
// otherwise this set is compiled out); only called after CPUID (leaf 7 subleaf 1, EAX bit 4) says so.
#include "engine_int8.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__AVXVNNI__)
#include <immintrin.h>

#include "kernels_int8_impl.h"

namespace {

struct VAvxVnni {
  using T = __m256i;
  using F = __m256;
  using QElem = uint8_t;
  using DElem = int8_t;
  static constexpr int W = 8;
  static constexpr int G = 4;
  static constexpr bool kBiased = true;
  static T load_q(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static T bcast(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
  }
  // inline asm, as in kernels_int8_avx512vnni.cc ({vex}: the AVX-VNNI encoding, not EVEX)
  static T dot(T acc, T a, T b) {
#if defined(__clang__)
    return _mm256_dpbusd_avx_epi32(acc, a, b);  // the spill is GCC's; clang unmeasured
#else
    __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(a), "x"(b));
    return acc;
#endif
  }
  static T zero() { return _mm256_setzero_si256(); }
  static T set1(int32_t x) { return _mm256_set1_epi32(x); }
  static F scaled(T acc, float s) { return _mm256_mul_ps(_mm256_cvtepi32_ps(acc), _mm256_set1_ps(s)); }
  static F fmax(F a, F b) { return _mm256_max_ps(a, b); }
  static F loadf(const float* p) { return _mm256_loadu_ps(p); }
  static void storef(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F neg_inf() { return _mm256_set1_ps(-INFINITY); }
  static void prefetch(const char* p) { _mm_prefetch(p, _MM_HINT_T0); }
  static void prefetch_l2(const char* p) { _mm_prefetch(p, _MM_HINT_T1); }
  static int32_t sum_bytes(const int8_t* p, int64_t n) {
    const __m256i ones = _mm256_set1_epi8(1);
    __m256i acc = _mm256_setzero_si256();
    int64_t k = 0;
    for (; k + 32 <= n; k += 32)
      acc = _mm256_dpbusd_avx_epi32(acc, ones, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + k)));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    int32_t total = _mm_cvtsi128_si32(s);
    for (; k < n; k++) total += p[k];
    return total;
  }
};

const maxsim_cpu::Int8KernelSet kAvxVnni{
    "avx-vnni", VAvxVnni::W, VAvxVnni::G, maxsim_cpu::Int8Pack::Uint8Biased, 1, &Int8RangeImpl<VAvxVnni, 2, 5>};

}  // namespace

const maxsim_cpu::Int8KernelSet* maxsim_cpu::AvxVnniInt8Kernels() { return &kAvxVnni; }
#else
const maxsim_cpu::Int8KernelSet* maxsim_cpu::AvxVnniInt8Kernels() { return nullptr; }
#endif
