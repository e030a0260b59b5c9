// variants_gen.cc: prints variants.json, the scoring kernels' launch contracts as the TypeScript
// dispatcher reads them (src/backends/cuda-dispatch.ts), from maxsim_registry.h: the same rows the
// kernel sources instantiate, so a launch number is written once. Plain C++17, no CUDA:
//   c++ -std=c++17 -I native/cuda/kernels native/cuda/kernels/variants_gen.cc -o variants_gen
//   ./variants_gen > variants.json
// scripts/build-native.mjs runs it at every build and checks the committed copy against its output.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "maxsim_registry.h"

namespace {

struct Regime {
  const char* name;
  const char* text;
};
#define MAXSIM_REGIME_ROW(NAME, TEXT) {NAME, TEXT},
const Regime kRegimes[] = {MAXSIM_REGIMES(MAXSIM_REGIME_ROW)};

struct Variant {
  std::string name;  // with {dt} when dtypes has several entries
  const char* family;
  std::vector<const char*> dtypes;
  std::string module;
  bool archExact;
  int archMajor;
  int dimMultipleOf, dimMin, dimMax;  // 0: absent
  int block;
  int ctasPerSm;  // 0: one CTA per pair (perPair)
  int smem;
  std::string regime;
  int tmaBox[2];  // {0, 0}: not a TMA variant
  bool documentScales;
};

std::vector<Variant> table;

const char* regimeOf(const std::string& name) {
  for (const Regime& r : kRegimes)
    if (name == r.name) return r.text;
  return nullptr;
}

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

std::string text(const std::string& name) {
  const char* r = regimeOf(name);
  if (r == nullptr) {
    std::fprintf(stderr, "variants_gen: no regime text for %s in MAXSIM_REGIMES\n", name.c_str());
    std::exit(1);
  }
  return r;
}

// A row built for fp16 and bf16: one entry named with {dt} where MAXSIM_REGIMES has one text for
// both, else one entry per type.
void addF16Pair(Variant v, const std::string& pattern) {
  if (regimeOf(pattern) != nullptr) {
    v.name = pattern;
    v.dtypes = {"float16", "bfloat16"};
    v.regime = text(pattern);
    table.push_back(v);
    return;
  }
  const char* types[2][2] = {{"float16", "f16"}, {"bfloat16", "bf16"}};
  for (auto& t : types) {
    v.name = replaced(pattern, "{dt}", t[1]);
    v.dtypes = {t[0]};
    v.regime = text(v.name);
    table.push_back(v);
  }
}

Variant base(const char* family, const std::string& module, bool exact, int major) {
  Variant v{};
  v.family = family;
  v.module = module;
  v.archExact = exact;
  v.archMajor = major;
  return v;
}

// a variant of a fp16 / bf16 family (MAXSIM_*16_FAMILY), its dim rules with them
#define MAXSIM_FAMILY_BASE(FAMILY, MODULE, EXACT, MAJOR, MULT, MIN, MAX) \
  [] {                                                                  \
    Variant v = base(FAMILY, MODULE, EXACT, MAJOR);                     \
    v.dimMultipleOf = MULT;                                             \
    v.dimMin = MIN;                                                     \
    v.dimMax = MAX;                                                     \
    return v;                                                           \
  }()

// ---- fp16 / bf16 (and fp32 SIMT) --------------------------------------------------------------

void addSimt16() {
  Variant v = MAXSIM_SIMT16_FAMILY(MAXSIM_FAMILY_BASE);
  v.name = "maxsim_simt_{dt}";
  v.block = MAXSIM_SIMT_BLOCK;
  v.regime = text(v.name);
#define MAXSIM_SIMT_TYPE(SFX, T, DTYPE) v.dtypes.push_back(#DTYPE);
  MAXSIM_SIMT_VARIANTS(MAXSIM_SIMT_TYPE)
#undef MAXSIM_SIMT_TYPE
  table.push_back(v);
}

void addMma16() {
#define MAXSIM_MMA_GEN(SFX, G, NGRP, TN, S, KD, KSPLIT, CTAS) \
  {                                                           \
    Variant v = MAXSIM_MMA16_FAMILY(MAXSIM_FAMILY_BASE);      \
    if (!KSPLIT) v.dimMax = KD;                               \
    v.block = MAXSIM_MMA_BLOCK(G, NGRP);                      \
    v.ctasPerSm = CTAS;                                       \
    v.smem = MAXSIM_MMA16_SMEM(NGRP, TN, S, KD);              \
    addF16Pair(v, "maxsim_mma_" #SFX "_{dt}");                \
  }
  MAXSIM_MMA_VARIANTS(MAXSIM_MMA_GEN)
#undef MAXSIM_MMA_GEN
}

Variant wgmma16(int ncons, int tn, int s) {
  Variant v = MAXSIM_WGMMA16_FAMILY(MAXSIM_FAMILY_BASE);
  v.block = MAXSIM_WGMMA_BLOCK(ncons);
  v.ctasPerSm = 1;
  v.smem = MAXSIM_WGMMA16_SMEM(tn, s);
  return v;
}

void addWgmma16() {
  // the plain variants first, then the TMA twins (one entry per type: the text names its base)
#define MAXSIM_WGMMA_GEN(SFX, NCONS, MB, TN, S, PP, TMA) addF16Pair(wgmma16(NCONS, TN, S), "maxsim_wgmma_" #SFX "_{dt}");
  MAXSIM_WGMMA_VARIANTS(MAXSIM_WGMMA_GEN)
#undef MAXSIM_WGMMA_GEN
#define MAXSIM_WGMMA_TMA_GEN(SFX, NCONS, MB, TN, S, PP, TMA)                                         \
  if (TMA)                                                                                           \
    for (const char* dt : {"f16", "bf16"}) {                                                         \
      Variant v = wgmma16(NCONS, TN, S);                                                             \
      v.name = std::string("maxsim_wgmma_tma_" #SFX "_") + dt;                                        \
      v.dtypes = {dt[0] == 'f' ? "float16" : "bfloat16"};                                            \
      v.regime = replaced(MAXSIM_REGIME_WGMMA_TMA, "{base}", std::string("maxsim_wgmma_" #SFX "_") + dt); \
      v.tmaBox[0] = 64;                                                                              \
      v.tmaBox[1] = TN;                                                                              \
      table.push_back(v);                                                                            \
    }
  MAXSIM_WGMMA_VARIANTS(MAXSIM_WGMMA_TMA_GEN)
#undef MAXSIM_WGMMA_TMA_GEN
}

// ---- int8 / fp8 ----------------------------------------------------------------------------------

struct Type8 {
  const char* t;  // int8 / fp8: the dtype and the name's prefix
  const char* module;
  bool mmaArchExact;
  int mmaArchMajor;
  int maxDim;
  int ksCtas;
};
#define MAXSIM_TYPE8(DTYPE, MODULE, EXACT, MAJOR, MAX_DIM, KS_CTAS) Type8{DTYPE, MODULE, EXACT, MAJOR, MAX_DIM, KS_CTAS}

void addSimtMma8(const Type8& t) {
  const std::string prefix = std::string("maxsim_") + t.t;
  // the SIMT fallback: the fp16 family's arch and dim >= 1, up to the type's limit
  Variant simt = MAXSIM_SIMT16_FAMILY(MAXSIM_FAMILY_BASE);
  simt.module = t.module;
  simt.name = prefix + "_simt";
  simt.dtypes = {t.t};
  simt.dimMax = t.maxDim;
  simt.block = MAXSIM_SIMT_BLOCK;
  simt.regime = text(simt.name);
  table.push_back(simt);
#define MAXSIM_8BIT_MMA_GEN(P, E, SFX, G, NGRP, TN, S, KD, KSPLIT, CTAS)                   \
  {                                                                                        \
    Variant v = base("mma", t.module, t.mmaArchExact, t.mmaArchMajor);                     \
    v.name = prefix + "_mma_" #SFX;                                                        \
    v.dtypes = {t.t};                                                                      \
    v.dimMultipleOf = MAXSIM_8BIT_DIM_MULTIPLE_OF;                                         \
    v.dimMin = MAXSIM_8BIT_DIM_MULTIPLE_OF;                                                \
    v.dimMax = KSPLIT ? t.maxDim : KD;                                                     \
    v.block = MAXSIM_MMA_BLOCK(G, NGRP);                                                   \
    v.ctasPerSm = CTAS;                                                                    \
    v.smem = MAXSIM_MMA8_SMEM(NGRP, TN, S, KD);                                            \
    v.regime = text(v.name);                                                               \
    table.push_back(v);                                                                    \
  }
  MAXSIM_8BIT_MMA_VARIANTS(MAXSIM_8BIT_MMA_GEN, _, _, t.ksCtas)
#undef MAXSIM_8BIT_MMA_GEN
}

Variant wgmma8(const Type8& t, const std::string& name, int ncons, int tn, int s) {
  // the arch of the fp16 / bf16 wgmma family (sm_90a cubins)
  Variant v = MAXSIM_WGMMA16_FAMILY(MAXSIM_FAMILY_BASE);
  v.module = t.module;
  v.name = name;
  v.dtypes = {t.t};
  v.dimMultipleOf = MAXSIM_8BIT_DIM_MULTIPLE_OF;
  v.dimMin = MAXSIM_8BIT_DIM_MULTIPLE_OF;
  v.dimMax = MAXSIM_WGMMA_MAX_DIM;
  v.block = MAXSIM_WGMMA_BLOCK(ncons);
  v.ctasPerSm = 1;
  v.smem = MAXSIM_WGMMA8_SMEM(tn, s);
  return v;
}

// kind 0: the plain variants, 1: their TMA twins, 2: the document-scale TMA twins
void addWgmma8(const Type8& t, int kind) {
  const std::string prefix = std::string("maxsim_") + t.t + "_wgmma_";
#define MAXSIM_8BIT_WGMMA_GEN(P, E, SFX, NCONS, MB, TN, S, TMA, DS)                                  \
  if (kind == 0) {                                                                                   \
    Variant v = wgmma8(t, prefix + #SFX, NCONS, TN, S);                                              \
    v.regime = text(v.name);                                                                         \
    table.push_back(v);                                                                              \
  } else if (kind == 1 ? TMA : DS) {                                                                 \
    Variant v = wgmma8(t, prefix + (kind == 1 ? "tma_" : "tma_ds_") + #SFX, NCONS, TN, S);           \
    const std::string of = prefix + (kind == 1 ? "" : "tma_") + #SFX;                                \
    v.regime = replaced(replaced(replaced(kind == 1 ? MAXSIM_REGIME_8BIT_TMA : MAXSIM_REGIME_8BIT_DS, \
                                          "{base}", of),                                             \
                                 "{t}", t.t),                                                        \
                        "{tn}", std::to_string(TN));                                                 \
    v.tmaBox[0] = 128;                                                                               \
    v.tmaBox[1] = TN;                                                                                \
    v.documentScales = kind == 2;                                                                    \
    table.push_back(v);                                                                              \
  }
  MAXSIM_8BIT_WGMMA_VARIANTS(MAXSIM_8BIT_WGMMA_GEN, _, _)
#undef MAXSIM_8BIT_WGMMA_GEN
}

// ---- output ----------------------------------------------------------------------------------------

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

void print(const Variant& v, bool last) {
  std::printf("  {\n    \"name\": %s,\n    \"family\": \"%s\",\n", quoted(v.name).c_str(), v.family);
  if (v.dtypes.size() == 1) {
    std::printf("    \"dtype\": \"%s\",\n", v.dtypes[0]);
  } else {
    std::printf("    \"dtype\": [");
    for (size_t i = 0; i < v.dtypes.size(); ++i) std::printf("%s\"%s\"", i ? ", " : "", v.dtypes[i]);
    std::printf("],\n");
  }
  std::printf("    \"module\": %s,\n", quoted(v.module).c_str());
  std::printf("    \"arch\": {\"%s\": [%d, 0]},\n", v.archExact ? "exact" : "min", v.archMajor);
  std::string dim;
  if (v.dimMultipleOf) dim += "\"multipleOf\": " + std::to_string(v.dimMultipleOf);
  if (v.dimMin) dim += (dim.empty() ? "" : ", ") + std::string("\"min\": ") + std::to_string(v.dimMin);
  if (v.dimMax) dim += (dim.empty() ? "" : ", ") + std::string("\"max\": ") + std::to_string(v.dimMax);
  std::printf("    \"dim\": {%s},\n", dim.c_str());
  std::printf("    \"block\": [%d, 1, 1],\n", v.block);
  if (v.ctasPerSm)
    std::printf("    \"grid\": {\"kind\": \"persistent\", \"ctasPerSm\": %d},\n", v.ctasPerSm);
  else
    std::printf("    \"grid\": {\"kind\": \"perPair\"},\n");
  std::printf("    \"smemBytes\": %d,\n    \"regime\": %s", v.smem, quoted(v.regime).c_str());
  if (v.tmaBox[0]) std::printf(",\n    \"tmaBox\": [%d, %d]", v.tmaBox[0], v.tmaBox[1]);
  if (v.documentScales) std::printf(",\n    \"scales\": \"document\"");
  std::printf("\n  }%s\n", last ? "" : ",");
}

}  // namespace

int main() {
  const Type8 int8 = MAXSIM_INT8_TYPE(MAXSIM_TYPE8);
  const Type8 fp8 = MAXSIM_FP8_TYPE(MAXSIM_TYPE8);
  addSimt16();
  addMma16();
  addWgmma16();
  for (const Type8* t : {&int8, &fp8}) addSimtMma8(*t);
  for (int kind = 0; kind < 3; ++kind)
    for (const Type8* t : {&int8, &fp8}) addWgmma8(*t, kind);
  // every regime text is used: a stale one (a row renamed or removed) is an error
  for (const Regime& r : kRegimes) {
    bool used = false;
    for (const Variant& v : table) used = used || v.name == r.name;
    if (!used) {
      std::fprintf(stderr, "variants_gen: MAXSIM_REGIMES names %s, which no row makes\n", r.name);
      return 1;
    }
  }
  std::printf("[\n");
  for (size_t i = 0; i < table.size(); ++i) print(table[i], i + 1 == table.size());
  std::printf("]\n");
  return 0;
}
