// AMX-BF16 MaxSim for bf16 x bf16 inputs (Intel Sapphire Rapids and newer). Everything else goes to
// the AVX-512 fp32 kernel. Compiled with -mamx-tile -mamx-bf16 -mavx512f.
//
// Tiles: A = 16 document tokens x 32 components (read straight from the row-major document, stride
// d * 2 bytes), B = 32 components x 16 query tokens (the bf16 pair packing the engine already
// makes: [block][k/2][lane][2] is exactly AMX's B layout), C = 16 document tokens x 16 query
// tokens in fp32. A 2 x 2 block of C tiles gets 4 TDPBF16PS (64K FLOPs) per 4 tile loads; the
// max over document tokens is then a vertical max over C's rows with AVX-512, valid rows only.
// Napkin math: a TDPBF16PS is 16 cycles for 16K FLOPs (1024 FLOP/cycle); with Lq = 32 each bf16
// document element feeds 64 FLOPs, so 2 cores are memory-bound long before the tiles saturate.
#include "kernel_api.h"

#if defined(__x86_64__) && defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512F__)
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

using maxsim_cpu::Scratch;
using maxsim_cpu::ScoreJob;

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// C rows [0, valid) folded into the running max of one lane block.
inline __m512 MaxRows(const float* c, int valid, __m512 m) {
  for (int r = 0; r < valid; r++) m = _mm512_max_ps(m, _mm512_load_ps(c + r * 16));
  return m;
}

// Scores one query (nblocks lane blocks of bf16 pairs) against one document of ld tokens.
float ScoreQueryDocAmx(const uint16_t* qpack, int64_t nblocks, int32_t lq, const uint16_t* doc, int64_t ld,
                       int64_t d, uint16_t* pad, float* runmax) {
  if (ld == 0) return -INFINITY;
  if (lq == 0) return 0.0f;
  alignas(64) float c[4][256];
  const int64_t block_stride = d * 16;  // uint16 per lane block
  const int64_t row_bytes = d * 2;
  for (int64_t b = 0; b < nblocks; b++) _mm512_storeu_ps(runmax + b * 16, _mm512_set1_ps(-INFINITY));
  for (int64_t g = 0; g < ld; g += 32) {
    const int valid0 = static_cast<int>(ld - g < 16 ? ld - g : 16);
    const int valid1 = static_cast<int>(ld - g - 16 <= 0 ? 0 : (ld - g - 16 < 16 ? ld - g - 16 : 16));
    const uint16_t* a = doc + g * d;
    if (valid0 + valid1 < 32) {
      // Partial group: copy the real rows into a zeroed pad so tile loads never read past the buffer.
      std::memset(pad, 0, static_cast<size_t>(32 * row_bytes));
      std::memcpy(pad, a, static_cast<size_t>((valid0 + valid1) * row_bytes));
      a = pad;
    }
    for (int64_t b = 0; b < nblocks; b += 2) {
      const bool two = b + 1 < nblocks;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t k = 0; k < d; k += 32) {
        _tile_loadd(4, a + k, row_bytes);
        _tile_loadd(6, qpack + b * block_stride + k * 16, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (valid1 > 0) {
          _tile_loadd(5, a + 16 * d + k, row_bytes);
          _tile_dpbf16ps(2, 5, 6);
        }
        if (two) {
          _tile_loadd(7, qpack + (b + 1) * block_stride + k * 16, 64);
          _tile_dpbf16ps(1, 4, 7);
          if (valid1 > 0) _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, c[0], 64);
      __m512 m0 = MaxRows(c[0], valid0, _mm512_loadu_ps(runmax + b * 16));
      if (valid1 > 0) {
        _tile_stored(2, c[2], 64);
        m0 = MaxRows(c[2], valid1, m0);
      }
      _mm512_storeu_ps(runmax + b * 16, m0);
      if (two) {
        _tile_stored(1, c[1], 64);
        __m512 m1 = MaxRows(c[1], valid0, _mm512_loadu_ps(runmax + (b + 1) * 16));
        if (valid1 > 0) {
          _tile_stored(3, c[3], 64);
          m1 = MaxRows(c[3], valid1, m1);
        }
        _mm512_storeu_ps(runmax + (b + 1) * 16, m1);
      }
    }
  }
  double sum = 0.0;
  for (int32_t t = 0; t < lq; t++) sum += runmax[t];
  return static_cast<float>(sum);
}

void AmxScoreRange(const ScoreJob& job, int64_t doc_begin, int64_t doc_end, Scratch& scratch) {
  const auto& q = job.q;
  const auto& docs = job.docs;
  const int64_t d = docs.dim;
  if (q.bf16 == nullptr) {  // not bf16 x bf16 with d % 32 == 0: the fp32 kernel
    maxsim_cpu::Avx512Kernels()->score_range(job, doc_begin, doc_end, scratch);
    return;
  }
  TileConfig cfg;
  for (int t = 0; t < 8; t++) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
  uint16_t* pad = new uint16_t[static_cast<size_t>(32 * d)];
  for (int64_t doc = doc_begin; doc < doc_end; doc++) {
    const int64_t start = static_cast<int64_t>(docs.starts[doc]);
    const uint16_t* dp = static_cast<const uint16_t*>(docs.data) + start * d;
    for (int64_t i = 0; i < q.num_queries; i++) {
      const int32_t lq = q.length[i];
      const int64_t nblocks = (lq + 15) / 16;
      job.scores[i * docs.count + doc] =
          ScoreQueryDocAmx(q.bf16 + q.block_offset[i] * d * 16, nblocks, lq, dp, docs.lengths[doc], d, pad, scratch.runmax);
    }
  }
  delete[] pad;
  _tile_release();
}

const maxsim_cpu::IsaKernels kAmx{"amx", 16, 32, &AmxScoreRange};

}  // namespace

const maxsim_cpu::IsaKernels* maxsim_cpu::AmxKernels() {
  return &kAmx;  // admitted by cpu_features.cc (CPUID, XCR0 and the Linux tile permission)
}
#else
const maxsim_cpu::IsaKernels* maxsim_cpu::AmxKernels() { return nullptr; }
#endif
