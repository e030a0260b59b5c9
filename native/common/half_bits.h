// The exact values of float16 and bfloat16 bit patterns, in double: the references of the
// standalone engine checks (native/cpu/test, native/cuda/test) decode their inputs with these.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

inline float Bf16BitsFloat(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline double Bf16BitsValue(uint16_t h) { return Bf16BitsFloat(h); }

// The arithmetic decode: the engine checks' reference for F16BitsFloat below (the encoder's),
// which must agree with it on every pattern.
inline double F16BitsValue(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const double man = h & 0x3ff;
  const double v = exp == 0 ? man * std::ldexp(1.0, -24) : (1 + man / 1024) * std::ldexp(1.0, exp - 15);
  return (h & 0x8000) ? -v : v;
}

// The same values as float, bit by bit and branch-free so that a row's conversion vectorizes: an
// exponent field e > 0 is rebiased (e - 15 + 127; 31 decodes as 2^16 (1 + m/1024), like
// F16BitsValue), e = 0 is m 2^-24, exact in float.
inline float F16BitsFloat(uint16_t h) {
  const uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  const float sub = static_cast<float>(man) * 0x1p-24f;
  uint32_t sub_bits;
  std::memcpy(&sub_bits, &sub, 4);
  const uint32_t u = (exp ? ((exp + 112) << 23 | man << 13) : sub_bits) | static_cast<uint32_t>(h & 0x8000) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
