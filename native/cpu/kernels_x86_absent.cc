// Non-x86 builds: the x86 kernel sets (float and int8) do not exist.
#include "kernel_api.h"

const maxsim_cpu::IsaKernels* maxsim_cpu::Avx512Kernels() { return nullptr; }
const maxsim_cpu::IsaKernels* maxsim_cpu::Avx2Kernels() { return nullptr; }
const maxsim_cpu::IsaKernels* maxsim_cpu::Avx512Bf16Kernels() { return nullptr; }
const maxsim_cpu::IsaKernels* maxsim_cpu::AmxKernels() { return nullptr; }

#include "engine_int8.h"

const maxsim_cpu::Int8KernelSet* maxsim_cpu::AmxInt8Kernels() { return nullptr; }
const maxsim_cpu::Int8KernelSet* maxsim_cpu::Avx512VnniInt8Kernels() { return nullptr; }
const maxsim_cpu::Int8KernelSet* maxsim_cpu::AvxVnniInt8Kernels() { return nullptr; }
const maxsim_cpu::Int8KernelSet* maxsim_cpu::Avx2Int8Kernels() { return nullptr; }
