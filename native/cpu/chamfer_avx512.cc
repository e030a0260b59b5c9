// AVX-512 instantiation of the Chamfer nearest-neighbour kernel: 16 lanes, up to 4 source vectors
// (64 points) per tile, the compare writing a mask register. Compiled with -mavx512f; only called
// after cpuid says so.
#include "chamfer.h"

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

#include "chamfer_impl.h"

namespace {

struct CAvx512 {
  using T = __m512;
  using I = __m512i;
  static constexpr int W = 16;
  // -2p (rows * d) + best, idx, acc (3 * rows) + d broadcasts within 32 zmm registers.
  static constexpr int Rows(int d) { return d <= 3 ? 4 : d <= 4 ? 3 : d <= 6 ? 2 : 1; }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static T set1(float x) { return _mm512_set1_ps(x); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static I set1i(int32_t x) { return _mm512_set1_epi32(x); }
  static I addi(I a, I b) { return _mm512_add_epi32(a, b); }
  static void storei(int32_t* p, I v) { _mm512_storeu_si512(p, v); }
  static void update(T& best, I& idx, T acc, I j) {
    const __mmask16 lt = _mm512_cmp_ps_mask(acc, best, _CMP_LT_OQ);
    best = _mm512_min_ps(acc, best);
    idx = _mm512_mask_mov_epi32(idx, lt, j);
  }
};

const maxsim_cpu::ChamferKernels kAvx512{"avx512", &TilePointsImpl<CAvx512>, &NearestTileImpl<CAvx512>};

}  // namespace

const maxsim_cpu::ChamferKernels* maxsim_cpu::ChamferAvx512() { return &kAvx512; }
#else
const maxsim_cpu::ChamferKernels* maxsim_cpu::ChamferAvx512() { return nullptr; }
#endif
