// NEON instantiation (AArch64): 4 fp32 lanes, 2 lane blocks x 6 document tokens per tile
// (12 accumulators of 32 vector registers). Compiled only where the compiler targets NEON.
#include "kernel_api.h"

#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>

#include "kernels_impl.h"

namespace {

struct VNeon : ScalarConversions {
  using T = float32x4_t;
  static constexpr int W = 4;
  static T load(const float* p) { return vld1q_f32(p); }
  static T set1(float x) { return vdupq_n_f32(x); }
  static T zero() { return vdupq_n_f32(0.0f); }
  static T neg_inf() { return vdupq_n_f32(-INFINITY); }
  static T fma(T a, T b, T c) { return vfmaq_f32(c, a, b); }
  static T max(T a, T b) { return vmaxq_f32(a, b); }
  static void store(float* p, T v) { vst1q_f32(p, v); }
  static void prefetch(const char* p) { __builtin_prefetch(p, 0, 3); }
  static void prefetch_l2(const char* p) { __builtin_prefetch(p, 0, 2); }
};

const maxsim_cpu::IsaKernels kNeon{"neon", VNeon::W, 0, &ScoreRangeImpl<VNeon, 2, 6>};

}  // namespace

const maxsim_cpu::IsaKernels* maxsim_cpu::NeonKernels() { return &kNeon; }
#else
const maxsim_cpu::IsaKernels* maxsim_cpu::NeonKernels() { return nullptr; }
#endif
