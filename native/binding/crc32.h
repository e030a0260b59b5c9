// CRC-32 of the zlib / gzip polynomial (reflected 0xEDB88320), same value as zlib's crc32(crc, p, n),
// by carry-less multiplication: four 128-bit lanes fold 64 bytes per step (fold constants are
// x^(512±32) and x^(128±32) mod P, bit-reflected), then fold into one lane, whose 16 bytes and the
// tail are finished by the byte table. Corpus searches check their chunks with it (zlib's table code
// runs at 1-2 GB/s; this at several times that). CPUs without PCLMUL use the table alone.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cstddef>
#include <cstdint>

#include "../cpu/cpu_features.h"

namespace maxsim_crc {

inline const uint32_t* ByteTable() {
  static const struct Table {
    uint32_t v[256];
    Table() {
      for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        v[i] = c;
      }
    }
  } table;
  return table.v;
}

// The raw register update (no pre / post inversion).
inline uint32_t TableUpdate(uint32_t c, const uint8_t* p, size_t n) {
  const uint32_t* t = ByteTable();
  for (size_t i = 0; i < n; i++) c = t[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
__attribute__((target("pclmul,sse4.1"))) inline __m128i Fold(__m128i x, __m128i k, __m128i next) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next);
}

__attribute__((target("pclmul,sse4.1"))) inline uint32_t FoldedUpdate(uint32_t c, const uint8_t* p, size_t n) {
  auto load = [](const uint8_t* q) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)); };
  const __m128i k512 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);
  const __m128i k128 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
  // the register enters as the first 4 message bytes xored in (CRC is linear)
  __m128i x0 = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(c)));
  __m128i x1 = load(p + 16), x2 = load(p + 32), x3 = load(p + 48);
  p += 64;
  n -= 64;
  for (; n >= 64; p += 64, n -= 64) {
    x0 = Fold(x0, k512, load(p));
    x1 = Fold(x1, k512, load(p + 16));
    x2 = Fold(x2, k512, load(p + 32));
    x3 = Fold(x3, k512, load(p + 48));
  }
  x0 = Fold(Fold(Fold(x0, k128, x1), k128, x2), k128, x3);
  for (; n >= 16; p += 16, n -= 16) x0 = Fold(x0, k128, load(p));
  alignas(16) uint8_t rest[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(rest), x0);
  return TableUpdate(TableUpdate(0, rest, 16), p, n);
}
#endif

/** zlib's crc32(crc, p, n). */
inline uint32_t Crc32(uint32_t crc, const uint8_t* p, size_t n) {
  uint32_t c = ~crc;
#if defined(__x86_64__)
  static const bool pclmul =
      maxsim_cpu::CpuHas(maxsim_cpu::Feature::Pclmul) && maxsim_cpu::CpuHas(maxsim_cpu::Feature::Sse41);
  if (pclmul && n >= 64) return ~FoldedUpdate(c, p, n);
#endif
  return ~TableUpdate(c, p, n);
}

}  // namespace maxsim_crc
