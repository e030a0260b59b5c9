// AVX-512 instantiation of the residual kernels: 16 lanes, a 16-token block decoded per dimension by
// one variable shift and one lane permute of the dimension's 16-entry table. Compiled with -mavx512f;
// only called after cpuid says so.
#include "residual.h"

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

#include "residual_impl.h"

namespace {

struct RAvx512 {
  using T = __m512;
  using I = __m512i;
  static constexpr int W = 16;
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static T set1(float x) { return _mm512_set1_ps(x); }
  static T zero() { return _mm512_setzero_ps(); }
  static T neg_inf() { return _mm512_set1_ps(-INFINITY); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T max(T a, T b) { return _mm512_max_ps(a, b); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static I iota() { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
  static I loadi(const int32_t* p) { return _mm512_loadu_si512(p); }
  static I seti(int32_t x) { return _mm512_set1_epi32(x); }
  static I addi(I a, I b) { return _mm512_add_epi32(a, b); }
  static void storei(int32_t* p, I v) { _mm512_storeu_si512(p, v); }
  static void best(T& bv, I& bi, T v, I j) {
    const __mmask16 gt = _mm512_cmp_ps_mask(v, bv, _CMP_GT_OQ);
    bv = _mm512_mask_mov_ps(bv, gt, v);
    bi = _mm512_mask_mov_epi32(bi, gt, j);
  }
  static float hmax(T v) {
    __m256 h = _mm256_max_ps(_mm512_extractf32x8_ps(v, 0), _mm512_extractf32x8_ps(v, 1));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }
  static T gather(const float* base, const int32_t* idx) {
    return _mm512_i32gather_ps(_mm512_loadu_si512(idx), base, 4);
  }
  static T keep_lanes(T v, uint32_t mask) { return _mm512_mask_mov_ps(neg_inf(), static_cast<__mmask16>(mask), v); }
  static T decode2(const uint8_t* p, int, const float* tab) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    const I sh = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_permutexvar_ps(_mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int32_t>(w)), sh),
                                 _mm512_loadu_ps(tab));
  }
  static T decode4(const uint8_t* p, int, const float* tab) {
    uint32_t w[2];
    std::memcpy(w, p, 8);
    const I words = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(static_cast<int32_t>(w[0]))),
                                       _mm256_set1_epi32(static_cast<int32_t>(w[1])), 1);
    const I sh = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    return _mm512_permutexvar_ps(_mm512_srlv_epi32(words, sh), _mm512_loadu_ps(tab));
  }
};

const maxsim_cpu::ResidualKernels kAvx512{"avx512",
                                          RAvx512::W,
                                          &AssignImpl<RAvx512, 2, 6>,
                                          &DotsImpl<RAvx512, 8>,
                                          &ResidualDispatch<RAvx512, 12>,
                                          &CentroidDocImpl<RAvx512>,
                                          0};

}  // namespace

const maxsim_cpu::ResidualKernels* maxsim_cpu::ResidualAvx512() { return &kAvx512; }
#else
const maxsim_cpu::ResidualKernels* maxsim_cpu::ResidualAvx512() { return nullptr; }
#endif
