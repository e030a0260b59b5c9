// Portable instantiation of the Chamfer nearest-neighbour kernel: plain C++ on 8-float arrays with
// the target's baseline flags. Always available (non-x86 builds use it alone). The multiply-add is
// written as two roundings, as the x86 FMA kernels are not: indices may differ from them only where
// two targets' expanded distances fall within rounding of each other.
#include <cmath>

#include "chamfer.h"
#include "chamfer_impl.h"

namespace {

struct CPortable {
  struct T {
    float v[8];
  };
  struct I {
    int32_t v[8];
  };
  static constexpr int W = 8;
  static constexpr int Rows(int d) { return d <= 4 ? 2 : 1; }
  static T load(const float* p) {
    T r;
    for (int i = 0; i < 8; i++) r.v[i] = p[i];
    return r;
  }
  static T set1(float x) {
    T r;
    for (int i = 0; i < 8; i++) r.v[i] = x;
    return r;
  }
  static T fma(T a, T b, T c) {
    for (int i = 0; i < 8; i++) c.v[i] = a.v[i] * b.v[i] + c.v[i];
    return c;
  }
  static I set1i(int32_t x) {
    I r;
    for (int i = 0; i < 8; i++) r.v[i] = x;
    return r;
  }
  static I addi(I a, I b) {
    for (int i = 0; i < 8; i++) a.v[i] += b.v[i];
    return a;
  }
  static void storei(int32_t* p, I v) {
    for (int i = 0; i < 8; i++) p[i] = v.v[i];
  }
  static void update(T& best, I& idx, T acc, I j) {
    for (int i = 0; i < 8; i++) {
      if (acc.v[i] < best.v[i]) {
        best.v[i] = acc.v[i];
        idx.v[i] = j.v[i];
      }
    }
  }
};

const maxsim_cpu::ChamferKernels kPortable{"portable", &TilePointsImpl<CPortable>, &NearestTileImpl<CPortable>};

}  // namespace

const maxsim_cpu::ChamferKernels* maxsim_cpu::ChamferPortable() { return &kPortable; }

#if !defined(__x86_64__)
// Non-x86 builds do not compile the x86 translation units.
const maxsim_cpu::ChamferKernels* maxsim_cpu::ChamferAvx512() { return nullptr; }
const maxsim_cpu::ChamferKernels* maxsim_cpu::ChamferAvx2() { return nullptr; }
#endif
