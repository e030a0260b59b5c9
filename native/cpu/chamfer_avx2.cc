// AVX2 + FMA instantiation of the Chamfer nearest-neighbour kernel: 8 lanes, up to 2 source vectors
// (16 points) per tile within 16 ymm registers. Compiled with -mavx2 -mfma.
#include "chamfer.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include "chamfer_impl.h"

namespace {

struct CAvx2 {
  using T = __m256;
  using I = __m256i;
  static constexpr int W = 8;
  static constexpr int Rows(int d) { return d <= 3 ? 2 : 1; }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static T set1(float x) { return _mm256_set1_ps(x); }
  static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static I set1i(int32_t x) { return _mm256_set1_epi32(x); }
  static I addi(I a, I b) { return _mm256_add_epi32(a, b); }
  static void storei(int32_t* p, I v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
  static void update(T& best, I& idx, T acc, I j) {
    const __m256 lt = _mm256_cmp_ps(acc, best, _CMP_LT_OQ);
    best = _mm256_min_ps(acc, best);
    idx = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(idx), _mm256_castsi256_ps(j), lt));
  }
};

const maxsim_cpu::ChamferKernels kAvx2{"avx2", &TilePointsImpl<CAvx2>, &NearestTileImpl<CAvx2>};

}  // namespace

const maxsim_cpu::ChamferKernels* maxsim_cpu::ChamferAvx2() { return &kAvx2; }
#else
const maxsim_cpu::ChamferKernels* maxsim_cpu::ChamferAvx2() { return nullptr; }
#endif
