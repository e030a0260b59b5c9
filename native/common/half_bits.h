// The exact values of float16 and bfloat16 bit patterns, in double: the references of the
// standalone engine checks (native/cpu/test, native/cuda/test) decode their inputs with these.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

inline double Bf16BitsValue(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline double F16BitsValue(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const double man = h & 0x3ff;
  const double v = exp == 0 ? man * std::ldexp(1.0, -24) : (1 + man / 1024) * std::ldexp(1.0, exp - 15);
  return (h & 0x8000) ? -v : v;
}
