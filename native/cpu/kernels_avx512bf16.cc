// The AVX-512 micro-kernel with the AVX512-BF16 pair dot product (VDPBF16PS) for bf16 x bf16 inputs
// of even d; everything else as kernels_avx512.cc. Its own translation unit because -mavx512bf16
// lets the compiler use BF16 instructions anywhere in it: admitted only where the CPU has BF16.
#include "kernel_api.h"

#if defined(__x86_64__) && defined(__AVX512BF16__)
#include "kernels_avx512_traits.h"

namespace {

struct VAvx512Bf16 : VAvx512 {
  using Pairs = __m512bh;
  static constexpr bool kBf16Dot = true;
  static Pairs load_pairs(const uint16_t* p) { return reinterpret_cast<Pairs>(_mm512_loadu_si512(p)); }
  static Pairs bcast_pair(const uint16_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return reinterpret_cast<Pairs>(_mm512_set1_epi32(v));
  }
  static T dot2(T acc, Pairs a, Pairs b) { return _mm512_dpbf16_ps(acc, a, b); }
};

const maxsim_cpu::IsaKernels kAvx512Bf16{"avx512bf16", VAvx512Bf16::W, 2, &ScoreRangeImpl<VAvx512Bf16, 2, 12>};

}  // namespace

const maxsim_cpu::IsaKernels* maxsim_cpu::Avx512Bf16Kernels() { return &kAvx512Bf16; }
#else
const maxsim_cpu::IsaKernels* maxsim_cpu::Avx512Bf16Kernels() { return nullptr; }
#endif
