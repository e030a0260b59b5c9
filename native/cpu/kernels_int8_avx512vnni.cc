// AVX-512 VNNI instantiation of the int8 MaxSim micro-kernel (kernels_int8_impl.h): 16 int32 lanes,
// VPDPBUSD on biased queries, 2 lane blocks x 12 document tokens per tile (24 accumulators of 32
// zmm registers). Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni; only called after
// CPUID says so (engine_int8.cc).
#include "engine_int8.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include <immintrin.h>

#include "kernels_int8_impl.h"

namespace {

struct VVnni512 {
  using T = __m512i;
  using F = __m512;
  using QElem = uint8_t;
  using DElem = int8_t;
  static constexpr int W = 16;
  static constexpr int G = 4;
  static constexpr bool kBiased = true;
  static T load_q(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static T bcast(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
  }
  // inline asm: GCC 12 copies the accumulator around the intrinsic and spills the tile's 24
  // accumulators every step; "+v" keeps each in its register (measured 2x in bench/NOTES.md).
  static T dot(T acc, T a, T b) {
#if defined(__clang__)
    return _mm512_dpbusd_epi32(acc, a, b);  // the spill is GCC's; clang unmeasured
#else
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
#endif
  }
  static T zero() { return _mm512_setzero_si512(); }
  static T set1(int32_t x) { return _mm512_set1_epi32(x); }
  static F scaled(T acc, float s) { return _mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_set1_ps(s)); }
  static F fmax(F a, F b) { return _mm512_max_ps(a, b); }
  static F loadf(const float* p) { return _mm512_loadu_ps(p); }
  static void storef(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F neg_inf() { return _mm512_set1_ps(-INFINITY); }
  static void prefetch(const char* p) { _mm_prefetch(p, _MM_HINT_T0); }
  static void prefetch_l2(const char* p) { _mm_prefetch(p, _MM_HINT_T1); }
  // sum of n signed bytes: VPDPBUSD of all-ones (unsigned) with the bytes, the tail masked
  static int32_t sum_bytes(const int8_t* p, int64_t n) {
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i acc = _mm512_setzero_si512();
    int64_t k = 0;
    for (; k + 64 <= n; k += 64) acc = _mm512_dpbusd_epi32(acc, ones, _mm512_loadu_si512(p + k));
    if (k < n) {
      const __mmask64 m = (~0ULL) >> (64 - (n - k));
      acc = _mm512_dpbusd_epi32(acc, ones, _mm512_maskz_loadu_epi8(m, p + k));
    }
    return _mm512_reduce_add_epi32(acc);
  }
};

const maxsim_cpu::Int8KernelSet kVnni512{
    "avx512-vnni", VVnni512::W, VVnni512::G, maxsim_cpu::Int8Pack::Uint8Biased, 1, &Int8RangeImpl<VVnni512, 2, 12>};

}  // namespace

const maxsim_cpu::Int8KernelSet* maxsim_cpu::Avx512VnniInt8Kernels() { return &kVnni512; }
#else
const maxsim_cpu::Int8KernelSet* maxsim_cpu::Avx512VnniInt8Kernels() { return nullptr; }
#endif
