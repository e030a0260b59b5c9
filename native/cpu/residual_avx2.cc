// AVX2 + FMA instantiation of the residual kernels: 8 lanes, a 16-token block decoded as two halves
// (2-bit: one 8-entry permute of the repeated table; 4-bit: two permutes blended on the code's bit 3).
// Compiled with -mavx2 -mfma.
#include "residual.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include "residual_impl.h"

namespace {

struct RAvx2 {
  using T = __m256;
  using I = __m256i;
  static constexpr int W = 8;
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static T set1(float x) { return _mm256_set1_ps(x); }
  static T zero() { return _mm256_setzero_ps(); }
  static T neg_inf() { return _mm256_set1_ps(-INFINITY); }
  static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T max(T a, T b) { return _mm256_max_ps(a, b); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static I iota() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
  static I loadi(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static I seti(int32_t x) { return _mm256_set1_epi32(x); }
  static I addi(I a, I b) { return _mm256_add_epi32(a, b); }
  static void storei(int32_t* p, I v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
  static void best(T& bv, I& bi, T v, I j) {
    const T gt = _mm256_cmp_ps(v, bv, _CMP_GT_OQ);
    bv = _mm256_blendv_ps(bv, v, gt);
    bi = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(bi), _mm256_castsi256_ps(j), gt));
  }
  static float hmax(T v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }
  static T gather(const float* base, const int32_t* idx) {
    return _mm256_i32gather_ps(base, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx)), 4);
  }
  static T keep_lanes(T v, uint32_t mask) {
    const I bit = _mm256_sllv_epi32(_mm256_set1_epi32(1), iota());
    const I in = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(static_cast<int32_t>(mask)), bit), bit);
    return _mm256_blendv_ps(neg_inf(), v, _mm256_castsi256_ps(in));
  }
  static T decode2(const uint8_t* p, int sub, const float* tab) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    const I sh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const I idx = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int32_t>(w >> (16 * sub))), sh);
    return _mm256_permutevar8x32_ps(_mm256_loadu_ps(tab), idx);
  }
  static T decode4(const uint8_t* p, int sub, const float* tab) {
    uint32_t w;
    std::memcpy(&w, p + 4 * sub, 4);
    const I sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const I idx = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int32_t>(w)), sh);
    const T lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(tab), idx);
    const T hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(tab + 8), idx);
    return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
  }
};

const maxsim_cpu::ResidualKernels kAvx2{"avx2",
                                        RAvx2::W,
                                        &AssignImpl<RAvx2, 3, 4>,  // 12 chains (2 x 3 ran at ~75% of the FMA rate)
                                        &DotsImpl<RAvx2, 6, 2>,  // 12 chains: lqp / 8 is even
                                        &ResidualDispatch<RAvx2, 8>,
                                        &CentroidDocImpl<RAvx2>,
                                        0};

}  // namespace

const maxsim_cpu::ResidualKernels* maxsim_cpu::ResidualAvx2() { return &kAvx2; }
#else
const maxsim_cpu::ResidualKernels* maxsim_cpu::ResidualAvx2() { return nullptr; }
#endif
