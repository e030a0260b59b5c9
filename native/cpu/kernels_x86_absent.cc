// Non-x86 builds: the x86 kernel sets do not exist.
#include "kernel_api.h"

const maxsim_cpu::IsaKernels* maxsim_cpu::Avx512Kernels() { return nullptr; }
const maxsim_cpu::IsaKernels* maxsim_cpu::Avx2Kernels() { return nullptr; }
const maxsim_cpu::IsaKernels* maxsim_cpu::Avx512Bf16Kernels() { return nullptr; }
const maxsim_cpu::IsaKernels* maxsim_cpu::AmxKernels() { return nullptr; }
