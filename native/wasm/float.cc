// The CPU engine's float kernel (native/cpu/kernels_impl.h) instantiated for WebAssembly SIMD128,
// with a single-threaded driver: the lane-block query packing of native/cpu/engine.cc, documents
// scored in ranges the caller (src/wasm/engine.ts) asks for, so JavaScript can yield and check an
// abort signal between ranges. int8.cc is the int8 kernel; arena.cc the memory. No libc:
// freestanding, built twice by scripts/build-wasm.mjs (clang --target=wasm32 -msimd128): once as is
// (maxsim.wasm) and once with -mrelaxed-simd -DMAXSIM_WASM_RELAXED (maxsim-relaxed.wasm).
//
// Numerics: SIMD128 has no fused multiply-add, so maxsim.wasm's fp32 dot products are a multiply
// then an add in k order, exactly what the portable kernel set does on x86-64 (compiled without
// FMA): its scores match isa 'portable' bitwise there. maxsim-relaxed.wasm uses f32x4.relaxed_madd,
// which the engine may fuse or not: V8 fuses it where the CPU has FMA (then the scores match the
// avx2 / neon sets bitwise, same k order) and falls back to multiply-add otherwise (then portable).
// Both stay within the fp32 error bound of the float64 reference either way.
#include <wasm_simd128.h>

#include "../cpu/kernel_api.h"
#include "../cpu/kernels_impl.h"
#include "arena.h"

namespace {

using maxsim_cpu::DocType;
using maxsim_wasm::Alloc;

// ---- fp32 traits ----------------------------------------------------------------------------

struct VWasm {
  using T = v128_t;
  static constexpr int W = 4;
  static constexpr bool kBf16Dot = false;
  static T load(const float* p) { return wasm_v128_load(p); }
  static T set1(float x) { return wasm_f32x4_splat(x); }
  static T zero() { return wasm_f32x4_splat(0.0f); }
  static T neg_inf() { return wasm_f32x4_splat(-INFINITY); }
#ifdef MAXSIM_WASM_RELAXED
  static T fma(T a, T b, T c) {
    using F = __f32x4;
    return reinterpret_cast<T>(__builtin_wasm_relaxed_madd_f32x4(reinterpret_cast<F>(a), reinterpret_cast<F>(b),
                                                                 reinterpret_cast<F>(c)));
  }
#else
  static T fma(T a, T b, T c) { return wasm_f32x4_add(wasm_f32x4_mul(a, b), c); }
#endif
  // pmax(b, a) = b < a ? a : b: the portable kernel's a > b ? a : b, one maxps on x86.
  static T max(T a, T b) { return wasm_f32x4_pmax(b, a); }
  static void store(float* p, T v) { wasm_v128_store(p, v); }
  static void prefetch(const char*) {}
  static void prefetch_l2(const char*) {}
  // fp16 bits to fp32, exactly: the magnitude shifted into fp32 position is the value times 2^-112
  // (normal and subnormal alike), so one multiply by 2^112 rescales it; inf / NaN get exponent 255.
  static void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    const v128_t scale = wasm_f32x4_splat(0x1p112f);
    for (; i + 4 <= n; i += 4) {
      const v128_t h = wasm_u32x4_load16x4(src + i);
      const v128_t mag = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x7fff)), 13);
      const v128_t sign = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x8000)), 16);
      const v128_t special = wasm_i32x4_ge(mag, wasm_i32x4_splat(0x7c00 << 13));
      const v128_t scaled = wasm_f32x4_mul(mag, scale);
      const v128_t infnan = wasm_v128_or(mag, wasm_i32x4_splat(0x70000000));
      wasm_v128_store(dst + i, wasm_v128_or(sign, wasm_v128_bitselect(infnan, scaled, special)));
    }
    for (; i < n; i++) dst[i] = HalfToFloat(src[i]);
  }
  static void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) wasm_v128_store(dst + i, wasm_i32x4_shl(wasm_u32x4_load16x4(src + i), 16));
    for (; i < n; i++) dst[i] = Bf16ToFloat(src[i]);
  }
};

// 4 lane blocks x 2 document tokens: 8 accumulators + 4 query vectors + 2 broadcasts. V8 on x86-64
// allocates 15 xmm registers and keeps clang's order (every broadcast loaded before its first use),
// so 2 x 6 (12 + 2 + 6) spilled half the accumulators on every k step; measured on Node 22, fp32
// 1,32,300,128,300 (bench/wasm.ts): 4 x 2 took 0.83x (SIMD128) and 0.64x (relaxed) the time of 2 x 6.
constexpr int kMR = 4;
constexpr int kNR = 2;

float ToFloat(const void* data, DocType t, int64_t i) {
  switch (t) {
    case DocType::Float32:
      return static_cast<const float*>(data)[i];
    case DocType::Float16:
      return HalfToFloat(static_cast<const uint16_t*>(data)[i]);
    case DocType::BFloat16:
      return Bf16ToFloat(static_cast<const uint16_t*>(data)[i]);
  }
  return 0.0f;
}

struct FloatJob {
  maxsim_cpu::ScoreJob job;
  maxsim_cpu::Scratch scratch;
};

}  // namespace

extern "C" {

// Packs the queries (float32 / float16 / bfloat16 tokens; starts, lengths per item) and the job for
// documents of the given dtype; returns the job, or null when memory is exhausted.
__attribute__((export_name("prepare_float"))) FloatJob* prepare_float(
    const void* qdata, int32_t qdtype, const double* qstarts, const int32_t* qlengths, int32_t nq,
    const void* ddata, int32_t ddtype, const double* dstarts, const int32_t* dlengths, int32_t nd, int32_t dim,
    float* scores) {
  constexpr int64_t W = VWasm::W;
  const int64_t d = dim;
  FloatJob* w = static_cast<FloatJob*>(Alloc(sizeof(FloatJob)));
  int64_t* offset = static_cast<int64_t*>(Alloc(static_cast<uint32_t>(8 * (nq + 1))));
  if (!w || !offset) return nullptr;
  const int64_t blocks = maxsim_wasm::BlockOffsets(qlengths, nq, W, offset);
  const uint64_t packed_bytes = static_cast<uint64_t>(blocks) * d * W * 4;
  if (packed_bytes > 0xF0000000ull) return nullptr;
  float* packed = static_cast<float*>(Alloc(static_cast<uint32_t>(packed_bytes)));
  float* runmax = static_cast<float*>(Alloc(static_cast<uint32_t>((blocks * W + W) * 4)));
  float* doc_f32 = ddtype == 0 ? nullptr : static_cast<float*>(Alloc(static_cast<uint32_t>(maxsim_cpu::ScratchChunkFloats(d) * 4)));
  if (!packed || !runmax || (ddtype != 0 && !doc_f32)) return nullptr;
  __builtin_memset(packed, 0, static_cast<size_t>(packed_bytes));
  const DocType qt = static_cast<DocType>(qdtype);
  for (int64_t i = 0; i < nq; i++) {
    const int64_t start = static_cast<int64_t>(qstarts[i]);
    for (int64_t t = 0; t < qlengths[i]; t++) {
      float* block = packed + (offset[i] + t / W) * d * W + t % W;
      for (int64_t k = 0; k < d; k++) block[k * W] = ToFloat(qdata, qt, (start + t) * d + k);
    }
  }
  maxsim_cpu::ScoreJob& job = w->job;
  job.q.f32 = packed;
  job.q.bf16 = nullptr;
  job.q.block_offset = offset;
  job.q.length = qlengths;
  job.q.num_queries = nq;
  job.q.dim = d;
  job.docs.data = ddata;
  job.docs.dtype = static_cast<DocType>(ddtype);
  job.docs.starts = dstarts;
  job.docs.lengths = dlengths;
  job.docs.count = nd;
  job.docs.dim = d;
  job.scores = scores;
  w->scratch.doc_f32 = doc_f32;
  w->scratch.runmax = runmax;
  return w;
}

// scores[i * nd + b] for documents [begin, end).
__attribute__((export_name("score_float"))) void score_float(FloatJob* w, int32_t begin, int32_t end) {
  ScoreRangeImpl<VWasm, kMR, kNR>(w->job, begin, end, w->scratch);
}

}  // extern "C"
