// AVX-512 instantiation of the MaxSim micro-kernel: 16 fp32 lanes, 2 lane blocks x 12 document
// tokens per tile (24 accumulators of 32 zmm registers); fp16 / bf16 inputs converted to fp32.
// Compiled with binding.gyp's maxsim_cpu_avx512 flags (no AVX512-BF16, so Skylake-SP, Ice Lake and
// Zen 3 run it); admitted on exactly those features (cpu_features.cc).
#include "kernel_api.h"

#if defined(__x86_64__) && defined(__AVX512F__)
#include "kernels_avx512_traits.h"

namespace {

// fp32 FMA for every input. On the CPUs measured so far (bench/NOTES.md, 'AMX: bf16 and int8') VDPBF16PS issues at half
// the rate of VFMADD231PS, so converting bf16 to fp32 is faster than the pair dot product; the pair
// path stays selectable as its own kernel set (kernels_avx512bf16.cc) for CPUs where that is not so.
const maxsim_cpu::IsaKernels kAvx512{"avx512", VAvx512::W, 0, &ScoreRangeImpl<VAvx512, 2, 12>};

}  // namespace

const maxsim_cpu::IsaKernels* maxsim_cpu::Avx512Kernels() { return &kAvx512; }
#else
const maxsim_cpu::IsaKernels* maxsim_cpu::Avx512Kernels() { return nullptr; }
#endif
