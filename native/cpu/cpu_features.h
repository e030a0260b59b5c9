// The one CPUID reader of the addon, and the admission table: which CPU features each kernel set
// needs before it may run. A kernel set is admitted only on every feature its translation unit is
// compiled with (binding.gyp's -m flags, checked by test/cpu-admission.test.ts) and on the OS saving
// the register state those instructions use (XCR0; for AMX also Linux's per-process permission).
#pragma once
#include <string>
#include <vector>

namespace maxsim_cpu {

// Named as GCC's -m flags name them (-mavx512bf16 -> "avx512bf16").
enum class Feature : int {
  Sse41,
  Pclmul,
  Avx,
  Avx2,
  Fma,
  F16c,
  Avx512f,
  Avx512bw,
  Avx512vl,
  Avx512dq,
  Avx512bf16,
  Avx512vnni,
  Avxvnni,
  AmxTile,
  AmxBf16,
  AmxInt8,
  Neon,
  Count
};

const char* FeatureName(Feature f);

// The CPU reports f and the OS saves the state it needs. Cheap after the first call (read once).
bool CpuHas(Feature f);

// Every feature CpuHas reports, space separated, in enum order.
std::string CpuFeatureList();

struct Admission {
  const char* family;  // "fp" (float kernels), "int8", "chamfer", "residual" (own targets only)
  const char* set;     // the kernel set's name (IsaKernels::name, Int8KernelSet::name, ChamferKernels::name)
  const char* target;  // binding.gyp target that compiles it ("maxsim_native": the baseline flags)
  std::vector<Feature> needs;
};

// Every kernel set of this architecture's build, compiled in or not.
const std::vector<Admission>& AdmissionTable();

// True when (family, set) is in the table and CpuHas every feature it needs.
bool Admitted(const char* family, const char* set);

}  // namespace maxsim_cpu
