// AVX2 instantiation of the int8 MaxSim micro-kernel (kernels_int8_impl.h), for CPUs without VNNI:
// queries and document chunks sign-extended to int16 pairs, VPMADDWD (exact: no int16 pair sum of
// int8 products saturates) then VPADDD, 8 int32 lanes, 2 lane blocks x 5 document tokens per tile.
// Compiled with -mavx2.
#include "engine_int8.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

#include "kernels_int8_impl.h"

namespace {

struct VAvx2I8 {
  using T = __m256i;
  using F = __m256;
  using QElem = int16_t;
  using DElem = int16_t;
  static constexpr int W = 8;
  static constexpr int G = 2;
  static constexpr bool kBiased = false;
  static T load_q(const int16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static T bcast(const int16_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
  }
  // inline asm: with the intrinsics GCC 12 spills half of the tile's accumulators every step
  static T dot(T acc, T a, T b) {
#if defined(__clang__)
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));  // the spill is GCC's; clang unmeasured
#else
    T t;
    __asm__("vpmaddwd %3, %2, %1\n\tvpaddd %1, %0, %0" : "+x"(acc), "=&x"(t) : "x"(a), "x"(b));
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
  static void widen(const int8_t* src, int16_t* dst, int64_t n) {
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), _mm256_cvtepi8_epi16(b));
    }
    for (; k < n; k++) dst[k] = src[k];
  }
};

const maxsim_cpu::Int8KernelSet kAvx2I8{"avx2", VAvx2I8::W, VAvx2I8::G, maxsim_cpu::Int8Pack::Int16, 1,
                                        &Int8RangeImpl<VAvx2I8, 2, 5>};

}  // namespace

const maxsim_cpu::Int8KernelSet* maxsim_cpu::Avx2Int8Kernels() { return &kAvx2I8; }
#else
const maxsim_cpu::Int8KernelSet* maxsim_cpu::Avx2Int8Kernels() { return nullptr; }
#endif
