// AVX-512 instantiation of the MaxSim micro-kernel: 16 fp32 lanes, 2 lane blocks x 12 document
// tokens per tile (24 accumulators of 32 zmm registers), and the AVX512-BF16 pair dot product for
// bf16 x bf16 inputs. Compiled with -mavx512f -mavx512bf16 -mf16c; only called after cpuid says so.
#include "kernel_api.h"

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

#include "kernels_impl.h"

namespace {

struct VAvx512 {
  using T = __m512;
  using Pairs = __m512bh;
  static constexpr int W = 16;
  static constexpr bool kBf16Dot = true;
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static T set1(float x) { return _mm512_set1_ps(x); }
  static T zero() { return _mm512_setzero_ps(); }
  static T neg_inf() { return _mm512_set1_ps(-INFINITY); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T max(T a, T b) { return _mm512_max_ps(a, b); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static void prefetch(const char* p) { _mm_prefetch(p, _MM_HINT_T0); }
  static void prefetch_l2(const char* p) { _mm_prefetch(p, _MM_HINT_T1); }
  static Pairs load_pairs(const uint16_t* p) { return reinterpret_cast<Pairs>(_mm512_loadu_si512(p)); }
  static Pairs bcast_pair(const uint16_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return reinterpret_cast<Pairs>(_mm512_set1_epi32(v));
  }
  static T dot2(T acc, Pairs a, Pairs b) { return _mm512_dpbf16_ps(acc, a, b); }
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

// fp32 FMA for every input. On the CPUs measured so far (bench/NOTES.md, 'AMX: bf16 and int8') VDPBF16PS issues at half
// the rate of VFMADD231PS, so converting bf16 to fp32 is faster than the pair dot product; the pair
// path stays selectable as its own kernel set for CPUs where that is not so.
const maxsim_cpu::IsaKernels kAvx512{"avx512", VAvx512::W, 0, &ScoreRangeImpl<VAvx512, 2, 12>};
const maxsim_cpu::IsaKernels kAvx512Bf16{"avx512bf16", VAvx512::W, 2, &ScoreRangeImpl<VAvx512, 2, 12>};

}  // namespace

const maxsim_cpu::IsaKernels* maxsim_cpu::Avx512Kernels() { return &kAvx512; }
const maxsim_cpu::IsaKernels* maxsim_cpu::Avx512Bf16Kernels() { return &kAvx512Bf16; }
#else
const maxsim_cpu::IsaKernels* maxsim_cpu::Avx512Kernels() { return nullptr; }
const maxsim_cpu::IsaKernels* maxsim_cpu::Avx512Bf16Kernels() { return nullptr; }
#endif
