// Portable instantiation of the residual kernels: plain C++ on 8-float arrays, the reference point of
// the SIMD sets (the compiler vectorizes what it can).
#include "residual.h"
#include "residual_impl.h"

namespace {

struct RPortable {
  struct T {
    float v[8];
  };
  struct I {
    int32_t v[8];
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
    for (int i = 0; i < 8; i++) c.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
    return c;
  }
  static T max(T a, T b) {
    for (int i = 0; i < 8; i++) a.v[i] = a.v[i] > b.v[i] ? a.v[i] : b.v[i];
    return a;
  }
  static T add(T a, T b) {
    for (int i = 0; i < 8; i++) a.v[i] += b.v[i];
    return a;
  }
  static void store(float* p, T v) { std::memcpy(p, v.v, sizeof v.v); }
  static I iota() {
    I r;
    for (int i = 0; i < 8; i++) r.v[i] = i;
    return r;
  }
  static I loadi(const int32_t* p) {
    I r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
  }
  static I seti(int32_t x) {
    I r;
    for (int i = 0; i < 8; i++) r.v[i] = x;
    return r;
  }
  static I addi(I a, I b) {
    for (int i = 0; i < 8; i++) a.v[i] += b.v[i];
    return a;
  }
  static void storei(int32_t* p, I v) { std::memcpy(p, v.v, sizeof v.v); }
  static void best(T& bv, I& bi, T v, I j) {
    for (int i = 0; i < 8; i++)
      if (v.v[i] > bv.v[i]) {
        bv.v[i] = v.v[i];
        bi.v[i] = j.v[i];
      }
  }
  static float hmax(T v) {
    float m = v.v[0];
    for (int i = 1; i < 8; i++) m = v.v[i] > m ? v.v[i] : m;
    return m;
  }
  static T gather(const float* base, const int32_t* idx) {
    T r;
    for (int i = 0; i < 8; i++) r.v[i] = base[idx[i]];
    return r;
  }
  static T keep_lanes(T v, uint32_t mask) {
    for (int i = 0; i < 8; i++)
      if (!(mask >> i & 1u)) v.v[i] = -INFINITY;
    return v;
  }
  template <int BITS>
  static T decode(const uint8_t* p, int sub, const float* tab) {
    uint64_t w = 0;
    std::memcpy(&w, p, 2 * BITS);
    T r;
    for (int i = 0; i < 8; i++) r.v[i] = tab[(w >> (BITS * (sub * 8 + i))) & ((1u << BITS) - 1u)];
    return r;
  }
  static T decode2(const uint8_t* p, int sub, const float* tab) { return decode<2>(p, sub, tab); }
  static T decode4(const uint8_t* p, int sub, const float* tab) { return decode<4>(p, sub, tab); }
};

const maxsim_cpu::ResidualKernels kPortable{"portable",
                                            RPortable::W,
                                            &AssignImpl<RPortable, 2, 2>,
                                            &DotsImpl<RPortable, 4>,
                                            &ResidualDispatch<RPortable, 8>,
                                            &CentroidDocImpl<RPortable>,
                                            0};

}  // namespace

const maxsim_cpu::ResidualKernels* maxsim_cpu::ResidualPortable() { return &kPortable; }

#if !defined(__x86_64__)
// Non-x86 builds compile no x86 translation units.
const maxsim_cpu::ResidualKernels* maxsim_cpu::ResidualAvx512() { return nullptr; }
const maxsim_cpu::ResidualKernels* maxsim_cpu::ResidualAvx2() { return nullptr; }
// also referenced (never called off x86): musl's loader binds every symbol when the addon loads
const maxsim_cpu::ResidualKernels* maxsim_cpu::ResidualAvx512Vnni() { return nullptr; }
const maxsim_cpu::ResidualKernels* maxsim_cpu::ResidualAvxVnni() { return nullptr; }
const maxsim_cpu::ResidualKernels* maxsim_cpu::ResidualAvx2Int8() { return nullptr; }
#endif
