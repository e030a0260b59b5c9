#include "cpu_features.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "amx_permission.h"

namespace maxsim_cpu {

namespace {

constexpr int kCount = static_cast<int>(Feature::Count);

const char* const kNames[kCount] = {"sse4.1",     "pclmul",     "avx",     "avx2",     "fma",     "f16c",
                                    "avx512f",    "avx512bw",   "avx512vl", "avx512dq", "avx512bf16",
                                    "avx512vnni", "avxvnni",    "amx-tile", "amx-bf16", "amx-int8", "neon"};

struct Detected {
  bool has[kCount] = {};
};

#if defined(__x86_64__) || defined(__i386__)
void Cpuid(unsigned leaf, unsigned subleaf, unsigned r[4]) {
  __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(subleaf));
}

uint64_t Xcr0() {
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool Bit(unsigned v, int b) { return (v >> b) & 1u; }

Detected Detect() {
  Detected d;
  unsigned r[4];
  Cpuid(0, 0, r);
  const unsigned max_leaf = r[0];
  Cpuid(1, 0, r);
  const unsigned ecx1 = r[2];
  unsigned ebx7 = 0, ecx7 = 0, edx7 = 0, eax71 = 0;
  if (max_leaf >= 7) {
    Cpuid(7, 0, r);
    const unsigned max_sub = r[0];
    ebx7 = r[1];
    ecx7 = r[2];
    edx7 = r[3];
    if (max_sub >= 1) {
      Cpuid(7, 1, r);
      eax71 = r[0];
    }
  }
  // XCR0 is readable only when the OS enabled XSAVE (OSXSAVE, leaf 1 ECX bit 27).
  const uint64_t xcr0 = Bit(ecx1, 27) ? Xcr0() : 0;
  const bool ymm = (xcr0 & 0x6) == 0x6;             // SSE + AVX state
  const bool zmm = ymm && (xcr0 & 0xE0) == 0xE0;    // opmask, ZMM_Hi256, Hi16_ZMM
  const bool tiles = zmm && (xcr0 & 0x60000) == 0x60000;  // XTILECFG, XTILEDATA
  auto set = [&](Feature f, bool v) { d.has[static_cast<int>(f)] = v; };
  set(Feature::Sse41, Bit(ecx1, 19));
  set(Feature::Pclmul, Bit(ecx1, 1));
  set(Feature::Avx, ymm && Bit(ecx1, 28));
  set(Feature::Fma, ymm && Bit(ecx1, 12));
  set(Feature::F16c, ymm && Bit(ecx1, 29));
  set(Feature::Avx2, ymm && Bit(ebx7, 5));
  set(Feature::Avxvnni, ymm && Bit(eax71, 4));
  set(Feature::Avx512f, zmm && Bit(ebx7, 16));
  set(Feature::Avx512dq, zmm && Bit(ebx7, 17));
  set(Feature::Avx512bw, zmm && Bit(ebx7, 30));
  set(Feature::Avx512vl, zmm && Bit(ebx7, 31));
  set(Feature::Avx512vnni, zmm && Bit(ecx7, 11));
  set(Feature::Avx512bf16, zmm && Bit(eax71, 5));
  // Linux hands out the tile data state only on request; ask once, only where the CPU has tiles.
  const bool amx = tiles && Bit(edx7, 24) && RequestAmxPermission();
  set(Feature::AmxTile, amx);
  set(Feature::AmxBf16, amx && Bit(edx7, 22));
  set(Feature::AmxInt8, amx && Bit(edx7, 25));
  return d;
}
#elif defined(__aarch64__)
Detected Detect() {
  Detected d;
  d.has[static_cast<int>(Feature::Neon)] = true;  // Advanced SIMD is mandatory in AArch64
  return d;
}
#else
Detected Detect() { return Detected{}; }
#endif

// MAXSIM_CPU_DISABLE=avx512bf16,amx-tile: treat the named features as absent (what a CPU without
// them admits; also a way around a kernel set misbehaving on some machine). Read once.
void ApplyDisabled(Detected& d) {
  const char* env = std::getenv("MAXSIM_CPU_DISABLE");
  if (!env) return;
  const std::string list = std::string(",") + env + ",";
  for (int i = 0; i < kCount; i++) {
    if (list.find(std::string(",") + kNames[i] + ",") != std::string::npos) d.has[i] = false;
  }
}

const Detected& Features() {
  static const Detected d = [] {
    Detected x = Detect();
    ApplyDisabled(x);
    return x;
  }();
  return d;
}

std::vector<Admission> BuildTable() {
  using F = Feature;
  const std::vector<F> avx512 = {F::Avx512f, F::Avx512bw, F::Avx512vl, F::Avx512dq, F::Fma, F::F16c};
  auto plus = [](std::vector<F> a, std::initializer_list<F> b) {
    a.insert(a.end(), b);
    return a;
  };
  std::vector<Admission> t;
#if defined(__x86_64__)
  // Each row lists its target's -m flags exactly (AVX and the SSE levels below it come with AVX2).
  t.push_back({"fp", "amx", "maxsim_cpu_amx", plus(avx512, {F::AmxTile, F::AmxBf16})});
  t.push_back({"fp", "avx512", "maxsim_cpu_avx512", avx512});
  t.push_back({"fp", "avx512bf16", "maxsim_cpu_avx512bf16", plus(avx512, {F::Avx512bf16})});
  t.push_back({"fp", "avx2", "maxsim_cpu_avx2", {F::Avx2, F::Fma, F::F16c}});
  t.push_back({"chamfer", "avx512", "maxsim_cpu_avx512", avx512});
  t.push_back({"chamfer", "avx2", "maxsim_cpu_avx2", {F::Avx2, F::Fma, F::F16c}});
  t.push_back({"int8", "amx", "maxsim_cpu_amx_int8",
               {F::Avx512f, F::Avx512bw, F::Avx512vl, F::Avx512dq, F::AmxTile, F::AmxInt8}});
  t.push_back({"int8", "avx512-vnni", "maxsim_cpu_int8_avx512vnni",
               {F::Avx512f, F::Avx512bw, F::Avx512vl, F::Avx512vnni}});
  t.push_back({"int8", "avx-vnni", "maxsim_cpu_int8_avxvnni", {F::Avx2, F::Avxvnni}});
  t.push_back({"int8", "avx2", "maxsim_cpu_int8_avx2", {F::Avx2}});
  t.push_back({"residual", "avxvnni", "maxsim_cpu_residual_avxvnni", {F::Avx2, F::Fma, F::Avxvnni}});
#elif defined(__aarch64__)
  t.push_back({"fp", "neon", "maxsim_native", {F::Neon}});
#endif
  t.push_back({"fp", "portable", "maxsim_native", {}});
  t.push_back({"chamfer", "portable", "maxsim_native", {}});
  t.push_back({"int8", "portable", "maxsim_native", {}});
  return t;
}

}  // namespace

const char* FeatureName(Feature f) {
  const int i = static_cast<int>(f);
  return i >= 0 && i < kCount ? kNames[i] : "?";
}

bool CpuHas(Feature f) {
  const int i = static_cast<int>(f);
  return i >= 0 && i < kCount && Features().has[i];
}

std::string CpuFeatureList() {
  std::string s;
  for (int i = 0; i < kCount; i++) {
    if (Features().has[i]) s += std::string(s.empty() ? "" : " ") + kNames[i];
  }
  return s;
}

const std::vector<Admission>& AdmissionTable() {
  static const std::vector<Admission> t = BuildTable();
  return t;
}

bool Admitted(const char* family, const char* set) {
  for (const Admission& a : AdmissionTable()) {
    if (std::strcmp(a.family, family) != 0 || std::strcmp(a.set, set) != 0) continue;
    for (Feature f : a.needs) {
      if (!CpuHas(f)) return false;
    }
    return true;
  }
  return false;
}

}  // namespace maxsim_cpu
