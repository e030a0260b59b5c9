// AVX-512 VNNI residual scoring (2-bit): the avx512 set's assign, dots and centroid interaction, and
// a decompress-and-MaxSim that works in int8. Compiled with -mavx512f -mavx512bw -mavx512vnni; only
// called after cpuid says so.
//
// Why: the float kernel spends one FMA per (query token, document token, dimension) plus the decode;
// VPDPBUSD does 4 dimensions of 16 query tokens per instruction. The residual weights take one int8
// scale sw for the whole table and each query token its own scale sq_i, so
//   q_i . decoded_t ~ qct[cid_t][i] + sq_i sw sum_k q8_ik r8_tk   (integer sum exact in int32)
// with the error bound stated in residual.h.
//
// Per block of 16 tokens and quad p of dimensions (4p .. 4p+3; their four 2-bit code words are 16
// consecutive bytes of the block), the decode is a broadcast, two byte shuffles, a shift and a mask:
// the result holds token t's four int8 weights in dword t, which the dot step broadcasts. Lanes of
// the dot run over query tokens (as in the int8 engine), so q . c is one contiguous row load of qct.
// Napkin math: a 64-token document against 32 query tokens is 4,096 VPDPBUSD + ~1,000 decode and
// ~500 epilogue instructions, ~1.5 us per core (the float kernel: ~16,000 FMA).
#include "residual.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace {

using maxsim_cpu::kResidualBlock;
using maxsim_cpu::ResidualCodes;
using maxsim_cpu::ResidualQuery;

// Blocks decoded per pass over the query (16 KB of int8 weights at d = 128: stays in L1).
constexpr int64_t kChunkBlocks = 8;
constexpr int64_t kMaxQuads = 256;  // d <= 1024 takes the int8 path (the driver checks)

struct Consts {
  __m512i gather;  // dest byte 4u + j of 128-bit lane L <- src byte 4j + L
  __m512i shift;   // dword 4L + u >> 2u
  Consts() {
    alignas(64) int8_t g[64];
    alignas(64) int32_t sh[16];
    for (int L = 0; L < 4; L++)
      for (int u = 0; u < 4; u++) {
        for (int j = 0; j < 4; j++) g[16 * L + 4 * u + j] = static_cast<int8_t>(4 * j + L);
        sh[4 * L + u] = 2 * u;
      }
    gather = _mm512_load_si512(g);
    shift = _mm512_load_si512(sh);
  }
};

// Tokens [0, 16) of a block: per quad p the 64-byte weights (dword t = token t) into r, and each
// token's sum of weights into sums (for the +128 bias of the query bytes).
inline void DecodeBlock(const Consts& k, const uint8_t* block, const int8_t* tab8, int64_t d, int64_t dq, int8_t* r,
                        int32_t* sums) {
  const __m512i mask = _mm512_set1_epi32(0x03030303);
  const __m512i offs = _mm512_set1_epi32(0x0C080400);
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i sum = _mm512_setzero_si512();
  for (int64_t p = 0; p < dq; p++) {
    __m128i w;
    if (4 * p + 4 <= d) {
      w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16 * p));
    } else {  // the last quad of a dim that is not a multiple of 4: no read past the block
      w = _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << (4 * (d - 4 * p))) - 1u), block + 16 * p);
    }
    __m512i v = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(w), k.gather);
    v = _mm512_srlv_epi32(v, k.shift);
    v = _mm512_ternarylogic_epi32(v, mask, offs, 0xEA);  // (v & mask) | offs
    const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tab8 + 16 * p)));
    v = _mm512_shuffle_epi8(tab, v);
    sum = _mm512_dpbusd_epi32(sum, ones, v);
    _mm512_storeu_si512(r + 64 * p, v);
  }
  _mm512_storeu_si512(sums, sum);
}

// NR tokens (weights at r + 4 n, stride 64 per quad) against MB query lane blocks from qb: folds
// sq_i sw dot + qct[cid][i] into the running maxima rm (lqp floats).
template <int MB, int NR>
inline void Tile(const ResidualQuery& q, const int8_t* r, const int32_t* sums, const int32_t* cids, int64_t qb,
                 float* rm) {
  __m512i acc[MB][NR];
#pragma GCC unroll 16
  for (int n = 0; n < NR; n++) {
    const __m512i init = _mm512_set1_epi32(-128 * sums[n]);
#pragma GCC unroll 4
    for (int m = 0; m < MB; m++) acc[m][n] = init;
  }
  // the epilogue's q . c rows: random rows of a K x lqp table (8 MB at K = 65,536), fetched while
  // the dot steps run (measured: without this the rows cost more than the dots at K = 65,536)
#pragma GCC unroll 16
  for (int n = 0; n < NR; n++)
#pragma GCC unroll 4
    for (int m = 0; m < MB; m++)
      _mm_prefetch(reinterpret_cast<const char*>(q.qct + static_cast<int64_t>(cids[n]) * q.lqp + (qb + m) * 16),
                   _MM_HINT_T0);
  const int64_t qstride = q.dq * 64;
  const uint8_t* qa = q.q8 + qb * qstride;
  for (int64_t p = 0; p < q.dq; p++) {
    __m512i a[MB];
#pragma GCC unroll 4
    for (int m = 0; m < MB; m++) a[m] = _mm512_loadu_si512(qa + m * qstride + p * 64);
#pragma GCC unroll 16
    for (int n = 0; n < NR; n++) {
      int32_t wv;
      std::memcpy(&wv, r + p * 64 + 4 * n, 4);
      const __m512i b = _mm512_set1_epi32(wv);
#pragma GCC unroll 4
      for (int m = 0; m < MB; m++) acc[m][n] = _mm512_dpbusd_epi32(acc[m][n], a[m], b);
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < MB; m++) {
    const int64_t i0 = (qb + m) * 16;
    const __m512 s = _mm512_loadu_ps(q.qscale + i0);
    __m512 best = _mm512_loadu_ps(rm + i0);
#pragma GCC unroll 16
    for (int n = 0; n < NR; n++) {
      const __m512 c = _mm512_loadu_ps(q.qct + static_cast<int64_t>(cids[n]) * q.lqp + i0);
      best = _mm512_max_ps(best, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[m][n]), s, c));
    }
    _mm512_storeu_ps(rm + i0, best);
  }
}

// Tokens [t0, t1) of the decoded chunk (chunk token index) against every query lane block.
inline void TokensRange(const ResidualQuery& q, const int8_t* r, const int32_t* sums, const int32_t* cids, int64_t t0,
                        int64_t t1, float* rm) {
  const int64_t nqb = q.lqp / 16;
  for (int64_t t = t0; t < t1;) {
    // a run of tokens inside one block: their weights are dwords of the same quad vectors
    const int64_t blk = t / kResidualBlock;
    const int64_t end = std::min<int64_t>(t1, (blk + 1) * kResidualBlock);
    const int8_t* rb = r + blk * q.dq * 64 + 4 * (t % kResidualBlock);
    const int32_t* sb = sums + t;
    const int32_t* cb = cids + t;
    int64_t qb = 0;
    for (; qb + 2 <= nqb; qb += 2) {
      int64_t n = 0;
      for (; n + 8 <= end - t; n += 8) Tile<2, 8>(q, rb + 4 * n, sb + n, cb + n, qb, rm);
      for (; n < end - t; n++) Tile<2, 1>(q, rb + 4 * n, sb + n, cb + n, qb, rm);
    }
    for (; qb < nqb; qb++) {
      int64_t n = 0;
      for (; n + 8 <= end - t; n += 8) Tile<1, 8>(q, rb + 4 * n, sb + n, cb + n, qb, rm);
      for (; n < end - t; n++) Tile<1, 1>(q, rb + 4 * n, sb + n, cb + n, qb, rm);
    }
    t = end;
  }
}

float ResidualDocVnni(const ResidualQuery& q, const ResidualCodes& c, int64_t start, int64_t len) {
  if (c.bits != 2) return maxsim_cpu::ResidualAvx512()->residual_doc(q, c, start, len);  // 4-bit: float
  if (len <= 0) return -INFINITY;
  if (q.lq == 0) return 0.0f;
  static const Consts consts;
  alignas(64) int8_t r[kChunkBlocks * kMaxQuads * 64];
  alignas(64) int32_t sums[kChunkBlocks * kResidualBlock];
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
    for (int64_t b = b0; b < b1; b++)
      DecodeBlock(consts, c.codes + b * block_bytes, q.tab8, c.d, q.dq, r + (b - b0) * q.dq * 64,
                  sums + (b - b0) * kResidualBlock);
    const int64_t base = b0 * kResidualBlock;
    TokensRange(q, r, sums, c.cids + base, std::max(start, base) - base, std::min(end, b1 * kResidualBlock) - base,
                rmax);
  }
  double s = 0.0;
  for (int64_t i = 0; i < q.lq; i++) s += static_cast<double>(rmax[i]);
  return static_cast<float>(s);
}

}  // namespace

const maxsim_cpu::ResidualKernels* maxsim_cpu::ResidualAvx512Vnni() {
  static const ResidualKernels set = [] {
    const ResidualKernels* base = ResidualAvx512();
    ResidualKernels k = base ? *base : ResidualKernels{};
    k.name = "avx512vnni";
    k.residual_doc = &ResidualDocVnni;
    k.int8_residual = 1 << 2;
    return k;
  }();
  return ResidualAvx512() ? &set : nullptr;
}
#else
const maxsim_cpu::ResidualKernels* maxsim_cpu::ResidualAvx512Vnni() { return nullptr; }
#endif
