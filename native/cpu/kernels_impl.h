// The register-blocked MaxSim micro-kernel, written once against a small vector-traits interface and
// instantiated per ISA by kernels_<isa>.cc (each compiled with its own -m flags, inside an anonymous
// namespace, so no inline code built for one ISA can leak into another translation unit).
//
// Napkin math (fp32, AVX-512, MR=2 x NR=12): per k, 2 vector loads of query lanes, 12 broadcasts of
// document components, 24 FMAs = 768 FLOPs in 12 cycles on two FMA ports: the tile is FMA-bound as
// long as the document tile (NR x d floats) stays in L1, which the chunking over document tokens
// guarantees. The max over document tokens is 2 x 12 vector max per tile, under 2% of the FMAs.
//
// Traits V must provide: type T, int W (lanes), load(const float*), set1(float), zero(), neg_inf(),
// fma(a, b, c) = a*b + c, max(a, b), store(float*, T), prefetch(const char*) (to L1), prefetch_l2, f16_to_f32(const uint16_t*, float*, n),
// bf16_to_f32(const uint16_t*, float*, n), and constexpr bool kBf16Dot; with kBf16Dot also a type
// Pairs and load_pairs(const uint16_t*), bcast_pair(const uint16_t*), dot2(acc, a_pairs, b_pair).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernel_api.h"

// Everything below is ISA-specific and must stay out of the exported symbol space.
namespace {

using maxsim_cpu::DocType;
using maxsim_cpu::Scratch;
using maxsim_cpu::ScoreJob;

inline int64_t MinI64(int64_t a, int64_t b) { return a < b ? a : b; }

// MR lane blocks of query tokens x NR document tokens, dot products over all of d in registers,
// folded into the running max `rm` (one vector per lane block).
template <class V, int MR, int NR>
inline void TileF32(const float* qa, int64_t block_stride, const float* doc, int64_t d, typename V::T* rm) {
  using T = typename V::T;
  T acc[MR][NR];
#pragma GCC unroll 32
  for (int m = 0; m < MR; m++)
#pragma GCC unroll 32
    for (int n = 0; n < NR; n++) acc[m][n] = V::zero();
  // The next tile's rows (NR * d contiguous floats) are pulled into L1 while this one computes:
  // with a short query each document element feeds only 2 FMAs, so waiting on L2 would dominate.
  const char* next = reinterpret_cast<const char*>(doc + NR * d);
  for (int64_t k = 0; k < d; k++) {
    V::prefetch(next + k * NR * static_cast<int64_t>(sizeof(float)));
    T a[MR];
#pragma GCC unroll 32
    for (int m = 0; m < MR; m++) a[m] = V::load(qa + m * block_stride + k * V::W);
#pragma GCC unroll 32
    for (int n = 0; n < NR; n++) {
      const T b = V::set1(doc[n * d + k]);
#pragma GCC unroll 32
      for (int m = 0; m < MR; m++) acc[m][n] = V::fma(a[m], b, acc[m][n]);
    }
  }
#pragma GCC unroll 32
  for (int m = 0; m < MR; m++) {
    T mx = acc[m][0];
#pragma GCC unroll 32
    for (int n = 1; n < NR; n++) mx = V::max(mx, acc[m][n]);
    rm[m] = V::max(rm[m], mx);
  }
}

// Same tile with bf16 pairs: each dot2 multiplies two adjacent components exactly and adds them
// into an fp32 lane, so a k-step covers two components.
template <class V, int MR, int NR>
inline void TileBf16(const uint16_t* qa, int64_t block_stride, const uint16_t* doc, int64_t d, typename V::T* rm) {
  if constexpr (V::kBf16Dot) {
    using T = typename V::T;
    T acc[MR][NR];
#pragma GCC unroll 32
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 32
      for (int n = 0; n < NR; n++) acc[m][n] = V::zero();
    const char* next = reinterpret_cast<const char*>(doc + NR * d);
    for (int64_t k = 0; k < d; k += 2) {
      V::prefetch(next + k * NR * static_cast<int64_t>(sizeof(uint16_t)));
      typename V::Pairs a[MR];
#pragma GCC unroll 32
      for (int m = 0; m < MR; m++) a[m] = V::load_pairs(qa + m * block_stride + k * V::W);
#pragma GCC unroll 32
      for (int n = 0; n < NR; n++) {
        const typename V::Pairs b = V::bcast_pair(doc + n * d + k);
#pragma GCC unroll 32
        for (int m = 0; m < MR; m++) acc[m][n] = V::dot2(acc[m][n], a[m], b);
      }
    }
#pragma GCC unroll 32
    for (int m = 0; m < MR; m++) {
      T mx = acc[m][0];
#pragma GCC unroll 32
      for (int n = 1; n < NR; n++) mx = V::max(mx, acc[m][n]);
      rm[m] = V::max(rm[m], mx);
    }
  }
}

// Runs tiles of NR document tokens over [j, j_end), then the remainder with a narrower tile.
template <class V, int MR, int NR, bool kBf16, class Elem>
inline void SweepTokens(const Elem* qa, int64_t block_stride, const Elem* doc, int64_t j, int64_t j_end, int64_t d,
                        typename V::T* rm) {
  for (; j + NR <= j_end; j += NR) {
    if constexpr (kBf16) TileBf16<V, MR, NR>(qa, block_stride, doc + j * d, d, rm);
    else TileF32<V, MR, NR>(qa, block_stride, doc + j * d, d, rm);
  }
  if constexpr (NR > 1) {
    const int64_t rest = j_end - j;
    if (rest > 0) {
      // Narrower tiles for the remainder: the largest power of two below NR, then halving, so
      // common lengths (multiples of 8) finish in one wide tile rather than many thin ones.
      constexpr int H = NR > 8 ? 8 : NR / 2;
      SweepTokens<V, MR, H, kBf16>(qa, block_stride, doc, j, j_end, d, rm);
    }
  }
}

// Folds document tokens [0, n) of one chunk into the running maxima of one packed query.
template <class V, int MR, int NR, bool kBf16, class Elem>
inline void SweepChunk(const Elem* qpack, int64_t nblocks, const Elem* chunk, int64_t n, int64_t d, float* runmax) {
  using T = typename V::T;
  const int64_t block_stride = d * V::W;
  int64_t b = 0;
  for (; b + MR <= nblocks; b += MR) {
    T rm[MR];
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++) rm[m] = V::load(runmax + (b + m) * V::W);
    SweepTokens<V, MR, NR, kBf16>(qpack + b * block_stride, block_stride, chunk, 0, n, d, rm);
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++) V::store(runmax + (b + m) * V::W, rm[m]);
  }
  for (; b < nblocks; b++) {
    T rm[1] = {V::load(runmax + b * V::W)};
    SweepTokens<V, 1, NR * MR, kBf16>(qpack + b * block_stride, block_stride, chunk, 0, n, d, rm);
    V::store(runmax + b * V::W, rm[0]);
  }
}

// Tokens per chunk: about 24 KB of document (as the kernel reads it), a multiple of NR, so a chunk
// and two query lane blocks stay in L1 while every query and lane block sweeps over it.
template <int NR>
inline int64_t ChunkTokens(int64_t d, int64_t elem_bytes) {
  const int64_t tile_bytes = d * elem_bytes * NR;
  return tile_bytes * 2 > 24576 ? NR : (24576 / tile_bytes) * NR;
}

// Scores documents [doc_begin, doc_end) against every query, in L1-sized chunks of document tokens.
// Every query keeps its running maxima in scratch.runmax (its lane blocks at block_offset).
template <class V, int MR, int NR>
void ScoreRangeImpl(const ScoreJob& job, int64_t doc_begin, int64_t doc_end, Scratch& scratch) {
  const auto& q = job.q;
  const auto& docs = job.docs;
  const int64_t d = docs.dim;
  const bool bf16_path = V::kBf16Dot && q.bf16 != nullptr;
  const bool convert = !bf16_path && docs.dtype != DocType::Float32;
  const int64_t chunk = bf16_path ? ChunkTokens<NR>(d, 2) : ChunkTokens<NR>(d, 4);
  for (int64_t doc = doc_begin; doc < doc_end; doc++) {
    const int64_t start = static_cast<int64_t>(docs.starts[doc]);
    const int64_t ld = docs.lengths[doc];
    for (int64_t i = 0; i < q.num_queries; i++) {
      float* rm = scratch.runmax + q.block_offset[i] * V::W;
      const int64_t nblocks = (q.length[i] + V::W - 1) / V::W;
      for (int64_t b = 0; b < nblocks; b++) V::store(rm + b * V::W, V::neg_inf());
    }
    if (!convert) {
      // Inputs read in place: one query at a time over the whole document, so its packed lane
      // blocks stay in L1 while the document streams through with the tiles' prefetch.
      for (int64_t i = 0; i < q.num_queries; i++) {
        const int64_t nblocks = (q.length[i] + V::W - 1) / V::W;
        float* rm = scratch.runmax + q.block_offset[i] * V::W;
        for (int64_t j0 = 0; j0 < ld; j0 += chunk) {
          const int64_t n = MinI64(chunk, ld - j0);
          if (bf16_path) {
            const uint16_t* c = static_cast<const uint16_t*>(docs.data) + (start + j0) * d;
            SweepChunk<V, MR, NR, true>(q.bf16 + q.block_offset[i] * d * V::W, nblocks, c, n, d, rm);
          } else {
            const float* c = static_cast<const float*>(docs.data) + (start + j0) * d;
            SweepChunk<V, MR, NR, false>(q.f32 + q.block_offset[i] * d * V::W, nblocks, c, n, d, rm);
          }
        }
      }
    } else {
      // fp16 / bf16 converted to fp32: each chunk is converted once into L1 and every query sweeps it.
      for (int64_t j0 = 0; j0 < ld; j0 += chunk) {
        const int64_t n = MinI64(chunk, ld - j0);
        const uint16_t* src = static_cast<const uint16_t*>(docs.data) + (start + j0) * d;
        if (docs.dtype == DocType::Float16) V::f16_to_f32(src, scratch.doc_f32, n * d);
        else V::bf16_to_f32(src, scratch.doc_f32, n * d);
        // The tiles' own prefetch only covers the converted copy; ask L2 for the next source chunk
        // (the next document's first chunk, at the end) now, so its conversion does not wait on DRAM.
        const char* next = reinterpret_cast<const char*>(src + n * d);
        for (int64_t o = 0; o < chunk * d * 2; o += 64) V::prefetch_l2(next + o);
        for (int64_t i = 0; i < q.num_queries; i++) {
          const int64_t nblocks = (q.length[i] + V::W - 1) / V::W;
          SweepChunk<V, MR, NR, false>(q.f32 + q.block_offset[i] * d * V::W, nblocks, scratch.doc_f32, n, d,
                                       scratch.runmax + q.block_offset[i] * V::W);
        }
      }
    }
    // Fixed-order sums in double: deterministic, and exact enough that the only error left is the
    // fp32 dot products. An empty document matches nothing (-inf); an empty query sums nothing (0).
    for (int64_t i = 0; i < q.num_queries; i++) {
      const float* rm = scratch.runmax + q.block_offset[i] * V::W;
      double sum = 0.0;
      for (int32_t t = 0; t < q.length[i]; t++) sum += rm[t];
      job.scores[i * docs.count + doc] = ld == 0 ? -INFINITY : static_cast<float>(sum);
    }
  }
}

// Scalar conversions shared by the portable paths (defined below, used by ScalarConversions).
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      int e = -1;
      uint32_t m = man;
      do {
        e++;
        m <<= 1;
      } while ((m & 0x400) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (m & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 112) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline float Bf16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Base of the traits of kernel sets that have neither vector fp16 conversion nor a bf16 dot product.
struct ScalarConversions {
  static constexpr bool kBf16Dot = false;
  static void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = HalfToFloat(src[i]);
  }
  static void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = Bf16ToFloat(src[i]);
  }
};

}  // namespace
