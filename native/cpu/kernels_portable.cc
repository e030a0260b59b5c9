// Portable instantiation: plain C++ on 8-float arrays, compiled with the baseline flags of the
// target (the compiler vectorizes what it can). Always available; the reference point for the others.
#include "kernel_api.h"
#include "kernels_impl.h"

namespace {

struct VPortable : ScalarConversions {
  struct T {
    float v[8];
  };
  static constexpr int W = 8;
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
  static T zero() { return set1(0.0f); }
  static T neg_inf() { return set1(-INFINITY); }
  static T fma(T a, T b, T c) {
    for (int i = 0; i < 8; i++) c.v[i] = a.v[i] * b.v[i] + c.v[i];
    return c;
  }
  static T max(T a, T b) {
    for (int i = 0; i < 8; i++) a.v[i] = a.v[i] > b.v[i] ? a.v[i] : b.v[i];
    return a;
  }
  static void store(float* p, T v) {
    for (int i = 0; i < 8; i++) p[i] = v.v[i];
  }
  static void prefetch(const char* p) { __builtin_prefetch(p, 0, 3); }
  static void prefetch_l2(const char* p) { __builtin_prefetch(p, 0, 2); }
};

const maxsim_cpu::IsaKernels kPortable{"portable", VPortable::W, 0, &ScoreRangeImpl<VPortable, 2, 4>};

}  // namespace

const maxsim_cpu::IsaKernels* maxsim_cpu::PortableKernels() { return &kPortable; }
