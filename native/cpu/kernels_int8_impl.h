// The register-blocked int8 x int8 MaxSim micro-kernel, written once against a small int8
// vector-traits interface and instantiated per ISA by kernels_int8_<isa>.cc (each compiled with its
// own -m flags, inside an anonymous namespace, like kernels_impl.h for the float kernels).
//
// Queries arrive packed in lane blocks [block][k/G][lane][G]: one vector load gives W query tokens'
// components k..k+G-1, one 32-bit broadcast gives a document token's same G components, and one
// dot-product step adds the G products into each int32 lane. A tile of MR lane blocks x NR document
// tokens stays in registers across all of d; then each accumulator is converted to fp32, multiplied
// by its document token's scale and folded into the running max (engine_int8.h: the exact fp32
// operations every int8 kernel set performs).
//
// The integer dot stays exact:
//  - VPDPBUSD multiplies unsigned by signed bytes. The queries are packed as q + 128 (in [0, 255]),
//    the documents stay signed, so each step adds dot(q, d) + 128 * sum(d); the accumulator starts
//    at -128 * sum_k d_{t,k} (summed once per document token per chunk, shared by every query).
//    Intermediate sums wrap modulo 2^32 (VPDPBUSD does not saturate), the final value is the exact
//    dot, which fits int32 for d < 131072.
//  - VPMADDWD (AVX2) multiplies int16 pairs into int32 without saturation for int8 inputs
//    (|q d| <= 16384); documents are widened to int16 once per chunk. VPMADDUBSW is not used: its
//    int16 pair sums saturate for biased operands (2 * 255 * 127 > 32767).
//
// Traits V provide: T (int32 vector), F (fp32 vector), W, G, QElem, DElem (the query / document
// element types the kernel reads), kBiased, load_q(const QElem*), bcast(const DElem*) (G elements as
// one 32-bit broadcast), dot(acc, a, b), zero(), set1(int32), scaled(acc, float) = fp32(acc) * s,
// fmax, loadf, storef, neg_inf, prefetch(const char*) (to L1), prefetch_l2; with kBiased sum_bytes(const int8_t*, n);
// with DElem = int16_t widen(const int8_t*, int16_t*, n).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine_int8.h"

namespace {

using maxsim_cpu::Int8Job;
using maxsim_cpu::Int8Scratch;

inline int64_t MinI64(int64_t a, int64_t b) { return a < b ? a : b; }

// MR lane blocks x NR document tokens (rows of stride dp), folded into the running maxima rm.
template <class V, int MR, int NR>
inline void TileI8(const typename V::QElem* qa, int64_t block_stride, const typename V::DElem* doc, int64_t dp,
                   const int32_t* sums, const float* dscale, typename V::F* rm) {
  using T = typename V::T;
  T acc[MR][NR];
#pragma GCC unroll 32
  for (int n = 0; n < NR; n++) {
    const T init = V::kBiased ? V::set1(-128 * sums[n]) : V::zero();
#pragma GCC unroll 32
    for (int m = 0; m < MR; m++) acc[m][n] = init;
  }
  // The next tile's rows are pulled into L1 while this one computes (as in kernels_impl.h).
  const char* next = reinterpret_cast<const char*>(doc + NR * dp);
  for (int64_t k = 0; k < dp; k += V::G) {
    V::prefetch(next + k * NR * static_cast<int64_t>(sizeof(typename V::DElem)));
    T a[MR];
#pragma GCC unroll 32
    for (int m = 0; m < MR; m++) a[m] = V::load_q(qa + m * block_stride + k * V::W);
#pragma GCC unroll 32
    for (int n = 0; n < NR; n++) {
      const T b = V::bcast(doc + n * dp + k);
#pragma GCC unroll 32
      for (int m = 0; m < MR; m++) acc[m][n] = V::dot(acc[m][n], a[m], b);
    }
  }
#pragma GCC unroll 32
  for (int m = 0; m < MR; m++) {
    typename V::F mx = rm[m];
#pragma GCC unroll 32
    for (int n = 0; n < NR; n++) mx = V::fmax(mx, V::scaled(acc[m][n], dscale[n]));
    rm[m] = mx;
  }
}

// Tiles of NR document tokens over [j, j_end), then the remainder with narrower tiles.
template <class V, int MR, int NR>
inline void SweepTokensI8(const typename V::QElem* qa, int64_t block_stride, const typename V::DElem* doc, int64_t j,
                          int64_t j_end, int64_t dp, const int32_t* sums, const float* dscale, typename V::F* rm) {
  static_assert(NR <= 32, "Int8ChunkCapacity assumes tiles of at most 32 tokens");
  for (; j + NR <= j_end; j += NR) TileI8<V, MR, NR>(qa, block_stride, doc + j * dp, dp, sums + j, dscale + j, rm);
  if constexpr (NR > 1) {
    if (j < j_end) {
      constexpr int H = NR > 8 ? 8 : NR / 2;
      SweepTokensI8<V, MR, H>(qa, block_stride, doc, j, j_end, dp, sums, dscale, rm);
    }
  }
}

// Folds the n tokens of one prepared chunk into the running maxima of one packed query.
template <class V, int MR, int NR>
inline void SweepChunkI8(const typename V::QElem* qpack, int64_t nblocks, const typename V::DElem* rows, int64_t n,
                         int64_t dp, const int32_t* sums, const float* dscale, float* runmax) {
  using F = typename V::F;
  const int64_t block_stride = dp * V::W;
  int64_t b = 0;
  for (; b + MR <= nblocks; b += MR) {
    F rm[MR];
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++) rm[m] = V::loadf(runmax + (b + m) * V::W);
    SweepTokensI8<V, MR, NR>(qpack + b * block_stride, block_stride, rows, 0, n, dp, sums, dscale, rm);
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++) V::storef(runmax + (b + m) * V::W, rm[m]);
  }
  for (; b < nblocks; b++) {
    F rm[1] = {V::loadf(runmax + b * V::W)};
    SweepTokensI8<V, 1, NR * MR <= 32 ? NR * MR : 32>(qpack + b * block_stride, block_stride, rows, 0, n, dp, sums,
                                                      dscale, rm);
    V::storef(runmax + b * V::W, rm[0]);
  }
}

// The chunk's rows as the kernel reads them (stride dp, zero past d) and, for biased kernels, each
// token's component sum. Byte rows of a d that is already a multiple of G are read in place.
template <class V>
inline const typename V::DElem* PrepareChunk(const int8_t* src, int64_t n, int64_t d, int64_t dp, Int8Scratch& s) {
  using DE = typename V::DElem;
  const DE* rows;
  if constexpr (sizeof(DE) == 1) {
    if (d == dp) {
      rows = reinterpret_cast<const DE*>(src);
    } else {
      DE* dst = reinterpret_cast<DE*>(s.chunk);
      for (int64_t t = 0; t < n; t++) {
        std::memcpy(dst + t * dp, src + t * d, static_cast<size_t>(d));
        std::memset(dst + t * dp + d, 0, static_cast<size_t>(dp - d));
      }
      rows = dst;
    }
  } else {
    int16_t* dst = s.chunk;
    for (int64_t t = 0; t < n; t++) {
      V::widen(src + t * d, dst + t * dp, d);
      for (int64_t k = d; k < dp; k++) dst[t * dp + k] = 0;
    }
    rows = dst;
  }
  if constexpr (V::kBiased) {
    for (int64_t t = 0; t < n; t++) s.sums[t] = V::sum_bytes(reinterpret_cast<const int8_t*>(rows) + t * dp, dp);
  }
  return rows;
}

// Tokens per chunk: ~24 KB of rows as the kernel reads them, a multiple of NR (at least one tile).
template <int NR>
inline int64_t ChunkTokensI8(int64_t dp, int64_t elem_bytes) {
  const int64_t tile_bytes = dp * elem_bytes * NR;
  return tile_bytes * 2 > 24576 ? NR : (24576 / tile_bytes) * NR;
}

// Scores documents [doc_begin, doc_end) against every query: each chunk of a document is prepared
// once and swept by every query's lane blocks, whose running maxima live in scratch.runmax.
template <class V, int MR, int NR>
void Int8RangeImpl(const Int8Job& job, int64_t doc_begin, int64_t doc_end, Int8Scratch& s) {
  using QE = typename V::QElem;
  const auto& q = job.q;
  const auto& docs = job.docs;
  const int64_t d = docs.dim;
  const int64_t dp = (d + V::G - 1) / V::G * V::G;
  const QE* qpack = static_cast<const QE*>(job.qpack);
  const int64_t chunk = ChunkTokensI8<NR>(dp, sizeof(typename V::DElem));
  for (int64_t doc = doc_begin; doc < doc_end; doc++) {
    const int64_t start = static_cast<int64_t>(docs.starts[doc]);
    const int64_t ld = docs.lengths[doc];
    if (ld == 0) {
      for (int64_t i = 0; i < q.count; i++) job.scores[i * docs.count + doc] = -INFINITY;
      continue;
    }
    for (int64_t i = 0; i < q.count; i++) {
      float* rm = s.runmax + job.block_offset[i] * V::W;
      const int64_t nblocks = (q.lengths[i] + V::W - 1) / V::W;
      for (int64_t b = 0; b < nblocks; b++) V::storef(rm + b * V::W, V::neg_inf());
    }
    for (int64_t j0 = 0; j0 < ld; j0 += chunk) {
      const int64_t n = MinI64(chunk, ld - j0);
      const int8_t* src = docs.data + (start + j0) * d;
      const typename V::DElem* rows = PrepareChunk<V>(src, n, d, dp, s);
      // The next chunk (at the end, the next document's first) is asked into L2 now, so the sweep
      // below hides its DRAM latency; the tiles' own prefetch then brings it into L1.
      const char* ahead = reinterpret_cast<const char*>(src + n * d);
      for (int64_t o = 0; o < chunk * d; o += 64) V::prefetch_l2(ahead + o);
      const float* dscale = docs.scales + start + j0;
      for (int64_t i = 0; i < q.count; i++) {
        const int64_t nblocks = (q.lengths[i] + V::W - 1) / V::W;
        SweepChunkI8<V, MR, NR>(qpack + job.block_offset[i] * dp * V::W, nblocks, rows, n, dp, s.sums, dscale,
                                s.runmax + job.block_offset[i] * V::W);
      }
    }
    // The query scales after the max, summed in double in token order (engine_int8.h).
    for (int64_t i = 0; i < q.count; i++) {
      const float* rm = s.runmax + job.block_offset[i] * V::W;
      const float* qscale = q.scales + static_cast<int64_t>(q.starts[i]);
      double sum = 0.0;
      for (int32_t t = 0; t < q.lengths[i]; t++) sum += static_cast<double>(qscale[t]) * static_cast<double>(rm[t]);
      job.scores[i * docs.count + doc] = static_cast<float>(sum);
    }
  }
}

}  // namespace
