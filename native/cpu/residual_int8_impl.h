// The int8 decompress-and-MaxSim (2-bit residuals), written once against an integer-traits
// interface and instantiated by residual_vnni.cc (AVX-512 VNNI, zmm), residual_avxvnni.cc (AVX-VNNI,
// ymm) and residual_avx2int8.cc (AVX2 VPMADDUBSW, ymm), each compiled with its own -m flags.
//
// Why: the float kernel spends one FMA per (query token, document token, dimension) plus the decode;
// an int8 dot takes 4 dimensions of L query tokens per step. The residual weights take one int8
// scale sw for the whole table and each query token its own scale sq_i, so
//   q_i . decoded_t ~ qct[cid_t][i] + sq_i sw sum_k q8_ik r8_tk   (integer sum exact in int32)
// with the error bound stated in residual.h.
//
// Per block of 16 tokens and quad p of dimensions (4p .. 4p+3; their four 2-bit code words are 16
// consecutive bytes of the block), the decode is a broadcast, two byte shuffles, a shift and a mask:
// token t's four int8 weights land in dword t of the quad's 64 bytes, which the dot step broadcasts.
// Lanes of the dot run over query tokens (as in the int8 engine), so q . c is one contiguous row load
// of qct. Napkin math, 64-token document x 32 query tokens x d = 128: 4,096 16-lane dot steps (zmm
// VPDPBUSD: 1 instruction each; ymm VPDPBUSD: 2; ymm VPMADDUBSW + VPMADDWD + VPADDD: 6) + ~1,000
// decode and ~500 epilogue instructions; the AVX2 fp32 kernel: ~32,000 8-lane FMA.
//
// Traits R: V (integer vector of L int32 lanes), F (L floats), L, VB = 16 / L (vectors per 16
// tokens), kBias (the query bytes are q + kBias), Fallback() (the fp32 set for 4-bit), zero, set1,
// load, store, add4(acc, v) (acc + each dword's 4 signed bytes summed), dot(acc, a_u8, b_s8),
// decode(w, tab, h) (tokens [h L, h L + L) of a quad: w its 16 code bytes, tab its 16 int8 weights),
// compress(v, mask) (the dwords whose mask bit is set moved to the front, in order), loadf, storef,
// fmadd, fmax, cvt (int32 -> float).
//
// Pruning (ResidualQuery::keepc): the tokens a document keeps are decoded and compacted into a
// quad-major chunk, so the dot tiles only ever see kept tokens; the others fold in their q . c.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "residual.h"

namespace {

using maxsim_cpu::kResidualBlock;
using maxsim_cpu::ResidualCodes;
using maxsim_cpu::ResidualQuery;

// Blocks decoded per pass over the query (16 KB of int8 weights at d = 128: stays in L1).
constexpr int64_t kChunkBlocks = 8;
constexpr int64_t kChunkTokens = kChunkBlocks * kResidualBlock;
constexpr int64_t kMaxQuads = 256;  // d <= 1024 takes the int8 path (the driver checks)
// The decoded chunk is quad-major: kept token m's four weights of quad p at r + p * kRowBytes + 4 m,
// so a tile's tokens are consecutive whichever blocks they came from. A row has room for one vector
// more than a chunk: the compacting stores write whole vectors past the last token kept.
constexpr int64_t kRowBytes = 4 * (kChunkTokens + 16);

// The tokens of one block whose bit is set in mask (bit t: token t of the block) decoded into the
// slots m, m + 1, ... of r, each with its sum of weights in sums (for the +kBias of the query
// bytes); returns the next free slot. Per quad p the 64 bytes of weights (dword t = token t) are
// compacted to the kept tokens (R::compress) before the store.
template <class R>
inline int64_t DecodeKept(const uint8_t* block, const int8_t* tab8, int64_t d, int64_t dq, uint32_t mask, int8_t* r,
                          int32_t* sums, int64_t m) {
  constexpr uint32_t kFull = (1u << R::L) - 1u;
  uint32_t hm[R::VB];
  int64_t at[R::VB];
  for (int h = 0; h < R::VB; h++) {
    hm[h] = (mask >> (h * R::L)) & kFull;
    at[h] = m;
    m += __builtin_popcount(hm[h]);
  }
  typename R::V sum[R::VB];
  for (int h = 0; h < R::VB; h++) sum[h] = R::zero();
  for (int64_t p = 0; p < dq; p++) {
    __m128i w;
    if (4 * p + 4 <= d) {
      w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16 * p));
    } else {  // the last quad of a dim that is not a multiple of 4: no read past the block
      alignas(16) uint8_t tail[16] = {};
      std::memcpy(tail, block + 16 * p, static_cast<size_t>(4 * (d - 4 * p)));
      w = _mm_load_si128(reinterpret_cast<const __m128i*>(tail));
    }
    const __m128i tab = _mm_loadu_si128(reinterpret_cast<const __m128i*>(tab8 + 16 * p));
    for (int h = 0; h < R::VB; h++) {
      if (!hm[h]) continue;
      const typename R::V v = R::decode(w, tab, h);
      sum[h] = R::add4(sum[h], v);
      R::store(r + p * kRowBytes + 4 * at[h], hm[h] == kFull ? v : R::compress(v, hm[h]));
    }
  }
  for (int h = 0; h < R::VB; h++)
    if (hm[h]) R::store(sums + at[h], hm[h] == kFull ? sum[h] : R::compress(sum[h], hm[h]));
  return m;
}

// NR tokens (weights at r + 4 n, stride kRowBytes per quad) against MB query vectors from vector vb
// (query tokens [vb L, (vb + MB) L)): folds sq_i sw dot + qct[cid][i] into the running maxima rm.
template <class R, int MB, int NR>
inline void Tile(const ResidualQuery& q, const int8_t* r, const int32_t* sums, const int32_t* cids, int64_t vb,
                 float* rm) {
  using V = typename R::V;
  using F = typename R::F;
  V acc[MB][NR];
#pragma GCC unroll 16
  for (int n = 0; n < NR; n++) {
    const V init = R::set1(-R::kBias * sums[n]);
#pragma GCC unroll 4
    for (int m = 0; m < MB; m++) acc[m][n] = init;
  }
  // the epilogue's q . c rows: random rows of a K x lqp table (8 MB at K = 65,536), fetched while
  // the dot steps run (measured: without this the rows cost more than the dots at K = 65,536)
#pragma GCC unroll 16
  for (int n = 0; n < NR; n++)
#pragma GCC unroll 4
    for (int m = 0; m < MB; m++)
      if (((vb + m) * R::L) % 16 == 0)  // one prefetch per 64-byte row piece
        _mm_prefetch(reinterpret_cast<const char*>(q.qct + static_cast<int64_t>(cids[n]) * q.lqp + (vb + m) * R::L),
                     _MM_HINT_T0);
  // query vector v: lane block v L / 16 ([dq][16][4] bytes each), offset (v L % 16) tokens
  const int64_t qstride = q.dq * 64;
  const uint8_t* qa[MB];
#pragma GCC unroll 4
  for (int m = 0; m < MB; m++) {
    const int64_t i0 = (vb + m) * R::L;
    qa[m] = q.q8 + (i0 / 16) * qstride + (i0 % 16) * 4;
  }
  for (int64_t p = 0; p < q.dq; p++) {
    V a[MB];
#pragma GCC unroll 4
    for (int m = 0; m < MB; m++) a[m] = R::load(qa[m] + p * 64);
#pragma GCC unroll 16
    for (int n = 0; n < NR; n++) {
      int32_t wv;
      std::memcpy(&wv, r + p * kRowBytes + 4 * n, 4);
      const V b = R::set1(wv);
#pragma GCC unroll 4
      for (int m = 0; m < MB; m++) acc[m][n] = R::dot(acc[m][n], a[m], b);
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < MB; m++) {
    const int64_t i0 = (vb + m) * R::L;
    const F s = R::loadf(q.qscale + i0);
    F best = R::loadf(rm + i0);
#pragma GCC unroll 16
    for (int n = 0; n < NR; n++) {
      const F c = R::loadf(q.qct + static_cast<int64_t>(cids[n]) * q.lqp + i0);
      best = R::fmax(best, R::fmadd(R::cvt(acc[m][n]), s, c));
    }
    R::storef(rm + i0, best);
  }
}

// The n decoded tokens of a chunk against every query vector: full tiles, then a half tile, then
// single tokens.
template <class R>
inline void TokensKept(const ResidualQuery& q, const int8_t* r, const int32_t* sums, const int32_t* cids, int64_t n,
                       float* rm) {
  constexpr int MB = R::kTileQ, NR = R::kTileT, NH = NR / 2 > 1 ? NR / 2 : 1;
  auto run = [&](auto mb_tag, int64_t vb) {
    constexpr int M = decltype(mb_tag)::value;
    int64_t t = 0;
    for (; t + NR <= n; t += NR) Tile<R, M, NR>(q, r + 4 * t, sums + t, cids + t, vb, rm);
    for (; t + NH <= n; t += NH) Tile<R, M, NH>(q, r + 4 * t, sums + t, cids + t, vb, rm);
    for (; t < n; t++) Tile<R, M, 1>(q, r + 4 * t, sums + t, cids + t, vb, rm);
  };
  const int64_t nv = q.lqp / R::L;
  int64_t vb = 0;
  for (; vb + MB <= nv; vb += MB) run(std::integral_constant<int, MB>{}, vb);
  for (; vb < nv; vb++) run(std::integral_constant<int, 1>{}, vb);
}

template <class R>
float ResidualDocInt8(const ResidualQuery& q, const ResidualCodes& c, int64_t start, int64_t len) {
  if (c.bits != 2) return R::Fallback()->residual_doc(q, c, start, len);  // 4-bit: float
  if (len <= 0) return -INFINITY;
  if (q.lq == 0) return 0.0f;
  alignas(64) int8_t r[kMaxQuads * kRowBytes];
  alignas(64) int32_t sums[kChunkTokens + 16];
  int32_t cids[kChunkTokens], rest[kChunkTokens];
  alignas(64) float rm[1024];
  float* rmax = rm;
  std::vector<float> big;
  if (q.lqp > 1024) {
    big.resize(static_cast<size_t>(q.lqp));
    rmax = big.data();
  }
  for (int64_t i = 0; i < q.lqp; i++) rmax[i] = -INFINITY;
  const int64_t block_bytes = c.d * 4;
  const int64_t end = start + len;
  for (int64_t b0 = start / kResidualBlock; b0 * kResidualBlock < end; b0 += kChunkBlocks) {
    const int64_t b1 = std::min<int64_t>(b0 + kChunkBlocks, (end + kResidualBlock - 1) / kResidualBlock);
    int64_t n = 0, nrest = 0;
    for (int64_t b = b0; b < b1; b++) {
      const int64_t tok0 = b * kResidualBlock;
      const int64_t lo = std::max(start, tok0) - tok0, hi = std::min(end, tok0 + kResidualBlock) - tok0;
      uint32_t mask = 0;
      for (int64_t l = lo; l < hi; l++) {
        const int32_t cid = c.cids[tok0 + l];
        if (!q.keepc || q.keepc[cid]) {
          mask |= 1u << l;
        } else {  // not decoded: its q . c row is folded in after the chunk's tiles (fetched meanwhile)
          _mm_prefetch(reinterpret_cast<const char*>(q.qct + static_cast<int64_t>(cid) * q.lqp), _MM_HINT_T0);
          rest[nrest++] = cid;
        }
      }
      if (!mask) continue;
      int64_t at = n;
      for (int64_t l = lo; l < hi; l++)
        if (mask >> l & 1u) cids[at++] = c.cids[tok0 + l];
      n = DecodeKept<R>(c.codes + b * block_bytes, q.tab8, c.d, q.dq, mask, r, sums, n);
    }
    if (n > 0) TokensKept<R>(q, r, sums, cids, n, rmax);
    for (int64_t j = 0; j < nrest; j++) {
      const float* row = q.qct + static_cast<int64_t>(rest[j]) * q.lqp;
      for (int64_t i = 0; i < q.lqp; i += R::L) R::storef(rmax + i, R::fmax(R::loadf(rmax + i), R::loadf(row + i)));
    }
  }
  double s = 0.0;
  for (int64_t i = 0; i < q.lq; i++) s += static_cast<double>(rmax[i]);
  return static_cast<float>(s);
}

#if defined(__AVX2__)
// For each 8-bit mask, the lanes of its set bits in order (vpermd indices of a compaction).
struct Compress8 {
  alignas(32) int32_t at[256][8];
  constexpr Compress8() : at{} {
    for (int m = 0; m < 256; m++) {
      int k = 0;
      for (int l = 0; l < 8; l++)
        if (m >> l & 1) at[m][k++] = l;
    }
  }
};
constexpr Compress8 kCompress8{};

// The ymm half of a set (AVX-VNNI, AVX2): 8 query tokens per vector, a quad's 16 tokens as two
// vectors (h = 0: tokens 0-7, 128-bit lanes 0-1; h = 1: tokens 8-15), everything but dot and add4.
struct RYmm {
  using V = __m256i;
  using F = __m256;
  static constexpr int L = 8;
  static constexpr int VB = 2;
  static constexpr int kBias = 128;
  static const maxsim_cpu::ResidualKernels* Fallback() { return maxsim_cpu::ResidualAvx2(); }
  static V zero() { return _mm256_setzero_si256(); }
  static V set1(int32_t x) { return _mm256_set1_epi32(x); }
  static V load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static void store(void* p, V v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }
  // 128-bit lane 2h + l holds tokens 4(2h + l) + u: dest byte 4u + j <- code byte 4j + 2h + l
  static V decode(__m128i w, __m128i tab, int h) {
    const V g0 = _mm256_setr_epi8(0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 1, 5, 9, 13, 1, 5, 9, 13, 1, 5,
                                  9, 13, 1, 5, 9, 13);
    const V g1 = _mm256_setr_epi8(2, 6, 10, 14, 2, 6, 10, 14, 2, 6, 10, 14, 2, 6, 10, 14, 3, 7, 11, 15, 3, 7, 11, 15,
                                  3, 7, 11, 15, 3, 7, 11, 15);
    const V shift = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    V v = _mm256_srlv_epi32(_mm256_shuffle_epi8(_mm256_broadcastsi128_si256(w), h ? g1 : g0), shift);
    v = _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0x03030303)), _mm256_set1_epi32(0x0C080400));
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(tab), v);
  }
  static V compress(V v, uint32_t mask) {
    return _mm256_permutevar8x32_epi32(v, _mm256_load_si256(reinterpret_cast<const __m256i*>(kCompress8.at[mask])));
  }
  static F loadf(const float* p) { return _mm256_loadu_ps(p); }
  static void storef(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F fmax(F a, F b) { return _mm256_max_ps(a, b); }
  static F cvt(V v) { return _mm256_cvtepi32_ps(v); }
};
#endif

// The set: the fp32 set's assign, dots and centroid interaction, the int8 residual for 2 bits.
template <class R>
const maxsim_cpu::ResidualKernels* Int8Set(const char* name, int weight_max) {
  static const maxsim_cpu::ResidualKernels set = [&] {
    const maxsim_cpu::ResidualKernels* base = R::Fallback();
    maxsim_cpu::ResidualKernels k = base ? *base : maxsim_cpu::ResidualKernels{};
    k.name = name;
    k.residual_doc = &ResidualDocInt8<R>;
    k.int8_residual = 1 << 2;
    k.int8_weight_max = weight_max;
    return k;
  }();
  return R::Fallback() ? &set : nullptr;
}

}  // namespace
