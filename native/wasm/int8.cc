// The CPU engine's int8 kernel (native/cpu/kernels_int8_impl.h) for WebAssembly SIMD128, with the
// single-threaded driver of native/wasm/float.cc. The integer dot is exact (int16 pairs through
// i32x4.dot_i16x8_s, as AVX2's VPMADDWD), then engine_int8.h's fp32 operations, so the scores match
// every native int8 kernel set bitwise.
#include <wasm_simd128.h>

#include "../cpu/engine_int8.h"
#include "../cpu/kernels_int8_impl.h"
#include "arena.h"

namespace {

using maxsim_wasm::Alloc;

// ---- int8 traits (VPMADDWD's scheme: int16 pairs, i32x4.dot_i16x8_s, exact) ------------------

struct VWasmI8 {
  using T = v128_t;
  using F = v128_t;
  using QElem = int16_t;
  using DElem = int16_t;
  static constexpr int W = 4;
  static constexpr int G = 2;
  static constexpr bool kBiased = false;
  static T load_q(const int16_t* p) { return wasm_v128_load(p); }
  static T bcast(const int16_t* p) { return wasm_v128_load32_splat(p); }
  static T dot(T acc, T a, T b) { return wasm_i32x4_add(acc, wasm_i32x4_dot_i16x8(a, b)); }
  static T zero() { return wasm_i32x4_splat(0); }
  static T set1(int32_t x) { return wasm_i32x4_splat(x); }
  static F scaled(T acc, float s) { return wasm_f32x4_mul(wasm_f32x4_convert_i32x4(acc), wasm_f32x4_splat(s)); }
  static F fmax(F a, F b) { return wasm_f32x4_pmax(b, a); }
  static F loadf(const float* p) { return wasm_v128_load(p); }
  static void storef(float* p, F v) { wasm_v128_store(p, v); }
  static F neg_inf() { return wasm_f32x4_splat(-INFINITY); }
  static void prefetch(const char*) {}
  static void prefetch_l2(const char*) {}
  static void widen(const int8_t* src, int16_t* dst, int64_t n) {
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) wasm_v128_store(dst + k, wasm_i16x8_load8x8(src + k));
    for (; k < n; k++) dst[k] = src[k];
  }
};

struct Int8Work {
  maxsim_cpu::Int8Job job;
  maxsim_cpu::Int8Scratch scratch;
};

}  // namespace

extern "C" {

// int8 queries packed as sign-extended int16 pairs (engine_int8.h's Int8Pack::Int16, W = 4, G = 2).
__attribute__((export_name("prepare_int8"))) Int8Work* prepare_int8(
    const int8_t* qdata, const float* qscales, const double* qstarts, const int32_t* qlengths, int32_t nq,
    const int8_t* ddata, const float* dscales, const double* dstarts, const int32_t* dlengths, int32_t nd,
    int32_t dim, float* scores) {
  constexpr int64_t W = VWasmI8::W;
  constexpr int64_t G = VWasmI8::G;
  const int64_t d = dim;
  const int64_t dp = (d + G - 1) / G * G;
  Int8Work* w = static_cast<Int8Work*>(Alloc(sizeof(Int8Work)));
  int64_t* offset = static_cast<int64_t*>(Alloc(static_cast<uint32_t>(8 * (nq + 1))));
  if (!w || !offset) return nullptr;
  const int64_t blocks = maxsim_wasm::BlockOffsets(qlengths, nq, W, offset);
  const uint64_t packed_bytes = static_cast<uint64_t>(blocks) * dp * W * 2;
  if (packed_bytes > 0xF0000000ull) return nullptr;
  int16_t* packed = static_cast<int16_t*>(Alloc(static_cast<uint32_t>(packed_bytes)));
  float* runmax = static_cast<float*>(Alloc(static_cast<uint32_t>((blocks * W + W) * 4)));
  const int64_t cap = maxsim_cpu::Int8ChunkCapacity(dp);
  int16_t* chunk = static_cast<int16_t*>(Alloc(static_cast<uint32_t>(cap * dp * 2)));
  int32_t* sums = static_cast<int32_t*>(Alloc(static_cast<uint32_t>(cap * 4)));
  if (!packed || !runmax || !chunk || !sums) return nullptr;
  __builtin_memset(packed, 0, static_cast<size_t>(packed_bytes));
  for (int64_t i = 0; i < nq; i++) {
    const int64_t start = static_cast<int64_t>(qstarts[i]);
    for (int64_t t = 0; t < qlengths[i]; t++) {
      const int64_t base = (offset[i] + t / W) * dp * W + (t % W) * G;
      const int8_t* src = qdata + (start + t) * d;
      for (int64_t k = 0; k < d; k++) packed[base + (k / G) * W * G + k % G] = src[k];
    }
  }
  maxsim_cpu::Int8Job& job = w->job;
  job.q = {qdata, qscales, qstarts, qlengths, nq, d};
  job.docs = {ddata, dscales, dstarts, dlengths, nd, d};
  job.qpack = packed;
  job.block_offset = offset;
  job.scores = scores;
  w->scratch.runmax = runmax;
  w->scratch.chunk = chunk;
  w->scratch.sums = sums;
  return w;
}

__attribute__((export_name("score_int8"))) void score_int8(Int8Work* w, int32_t begin, int32_t end) {
  Int8RangeImpl<VWasmI8, 2, 6>(w->job, begin, end, w->scratch);
}

}  // extern "C"
