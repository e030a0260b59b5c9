// AMX-INT8 MaxSim for int8 x int8 inputs with d % 64 == 0 (Intel Sapphire Rapids and newer).
// Compiled with -mamx-tile -mamx-int8 -mavx512f.
//
// Tiles: A = 16 document tokens x 64 int8 components (read straight from the row-major document,
// stride d bytes), B = 64 components x 16 query tokens packed [k/4][lane][4] (each 64-byte row holds
// 16 lanes x 4 consecutive k: AMX's B layout for int8), C = 16 document tokens x 16 query tokens in
// int32 (TDPBSSD: signed x signed, exact). A 2 x 2 block of C tiles (32 document tokens x 32 query
// lanes) takes 4 TDPBSSD per 4 tile loads. Each C row is converted to fp32 and multiplied by its
// document token's scale, then folded into the running max with a vertical max over valid rows.
// The query scales are applied after the max, in double, by the caller's token-order sum.
#include "engine_int8.h"

#if defined(__x86_64__) && defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AVX512F__)
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

using maxsim_cpu::Int8Job;
using maxsim_cpu::Int8Scratch;

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// C rows [0, valid) as fp32 times their document token's scale, folded into the running max.
inline __m512 MaxScaledRows(const int32_t* c, const float* dscale, int valid, __m512 m) {
  for (int r = 0; r < valid; r++) {
    const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + r * 16)), _mm512_set1_ps(dscale[r]));
    m = _mm512_max_ps(m, v);
  }
  return m;
}

// Folds one document of ld tokens into the running maxima of one query (nblocks lane blocks).
void SweepDocAmx(const int8_t* qpack, int64_t nblocks, const int8_t* doc, const float* dscale, int64_t ld, int64_t d,
                 int8_t* pad, float* runmax) {
  alignas(64) int32_t c[4][256];
  const int64_t block_stride = d * 16;  // bytes per lane block
  for (int64_t b = 0; b < nblocks; b++) _mm512_storeu_ps(runmax + b * 16, _mm512_set1_ps(-INFINITY));
  for (int64_t g = 0; g < ld; g += 32) {
    const int valid0 = static_cast<int>(ld - g < 16 ? ld - g : 16);
    const int valid1 = static_cast<int>(ld - g - 16 <= 0 ? 0 : (ld - g - 16 < 16 ? ld - g - 16 : 16));
    const int8_t* a = doc + g * d;
    if (valid0 + valid1 < 32) {
      // Partial group: the real rows in a zeroed pad, so tile loads never read past the buffer.
      std::memset(pad, 0, static_cast<size_t>(32 * d));
      std::memcpy(pad, a, static_cast<size_t>((valid0 + valid1) * d));
      a = pad;
    }
    const float* s0 = dscale + g;
    const float* s1 = dscale + g + 16;
    for (int64_t b = 0; b < nblocks; b += 2) {
      const bool two = b + 1 < nblocks;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t k = 0; k < d; k += 64) {
        _tile_loadd(4, a + k, d);
        _tile_loadd(6, qpack + b * block_stride + k * 16, 64);
        _tile_dpbssd(0, 4, 6);
        if (valid1 > 0) {
          _tile_loadd(5, a + 16 * d + k, d);
          _tile_dpbssd(2, 5, 6);
        }
        if (two) {
          _tile_loadd(7, qpack + (b + 1) * block_stride + k * 16, 64);
          _tile_dpbssd(1, 4, 7);
          if (valid1 > 0) _tile_dpbssd(3, 5, 7);
        }
      }
      _tile_stored(0, c[0], 64);
      __m512 m0 = MaxScaledRows(c[0], s0, valid0, _mm512_loadu_ps(runmax + b * 16));
      if (valid1 > 0) {
        _tile_stored(2, c[2], 64);
        m0 = MaxScaledRows(c[2], s1, valid1, m0);
      }
      _mm512_storeu_ps(runmax + b * 16, m0);
      if (two) {
        _tile_stored(1, c[1], 64);
        __m512 m1 = MaxScaledRows(c[1], s0, valid0, _mm512_loadu_ps(runmax + (b + 1) * 16));
        if (valid1 > 0) {
          _tile_stored(3, c[3], 64);
          m1 = MaxScaledRows(c[3], s1, valid1, m1);
        }
        _mm512_storeu_ps(runmax + (b + 1) * 16, m1);
      }
    }
  }
}

void ScoreRangeAmxInt8(const Int8Job& job, int64_t doc_begin, int64_t doc_end, Int8Scratch& scratch) {
  float* runmax = scratch.runmax;
  const int8_t* qpack = static_cast<const int8_t*>(job.qpack);
  const auto& q = job.q;
  const auto& docs = job.docs;
  const int64_t d = docs.dim;
  TileConfig cfg;
  for (int t = 0; t < 8; t++) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
  std::vector<int8_t> pad(static_cast<size_t>(32 * d));
  for (int64_t doc = doc_begin; doc < doc_end; doc++) {
    const int64_t start = static_cast<int64_t>(docs.starts[doc]);
    const int64_t ld = docs.lengths[doc];
    for (int64_t i = 0; i < q.count; i++) {
      float* out = job.scores + i * docs.count + doc;
      if (ld == 0) {
        *out = -INFINITY;
        continue;
      }
      const int32_t lq = q.lengths[i];
      if (lq == 0) {
        *out = 0.0f;
        continue;
      }
      const int64_t nblocks = (lq + 15) / 16;
      SweepDocAmx(qpack + job.block_offset[i] * d * 16, nblocks, docs.data + start * d, docs.scales + start, ld, d,
                  pad.data(), runmax);
      const float* qscale = q.scales + static_cast<int64_t>(q.starts[i]);
      double sum = 0.0;
      for (int32_t s = 0; s < lq; s++) sum += static_cast<double>(qscale[s]) * static_cast<double>(runmax[s]);
      *out = static_cast<float>(sum);
    }
  }
  _tile_release();
}

const maxsim_cpu::Int8KernelSet kAmxInt8{"amx", 16, 4, maxsim_cpu::Int8Pack::Int8, 64, &ScoreRangeAmxInt8};

}  // namespace

const maxsim_cpu::Int8KernelSet* maxsim_cpu::AmxInt8Kernels() {
  return &kAmxInt8;  // admitted by cpu_features.cc (CPUID, XCR0 and the Linux tile permission)
}
#else
const maxsim_cpu::Int8KernelSet* maxsim_cpu::AmxInt8Kernels() { return nullptr; }
#endif
