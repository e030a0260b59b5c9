// The service's request codecs in plain C++ (no Node-API): the finiteness scan of float32 values and
// float16 / bfloat16 bits, the magnitude scan of float32 values (the GPU index's float16 check), and the exact decode of the bits to float32, with AVX2 / F16C where the
// CPU has them. The server's JS thread used to do these per element (bench/serve-phases.ts).
// (Base64 stays with Node: its decoder ran at ~1 us per 11 KB body here, an AVX2 one of ours 1.3.)
#pragma once
#include <cstddef>
#include <cstdint>

namespace maxsim_codec {

// Index of the first value whose exponent bits are all ones (NaN or infinity) among `n` 16-bit
// patterns, -1 when none: `bf16` false for float16 (mask 0x7c00), true for bfloat16 (0x7f80).
int64_t FirstNonFinite16(const uint16_t* bits, size_t n, bool bf16);

// Index of the first NaN or infinity among `n` float32 values, -1 when none.
int64_t FirstNonFinite32(const float* x, size_t n);

// The largest |x[i]| of `n` float32 values, NaNs ignored (0 when n is 0 or every value is NaN);
// +-infinity counts as infinity.
float MaxAbs32(const float* x, size_t n);

// dst[i] = the float32 value of float16 (bf16 false) or bfloat16 bits src[i]; exact for every
// finite pattern (a NaN stays a NaN, its payload unspecified: the server refuses NaN before decoding).
void Decode16(const uint16_t* src, size_t n, bool bf16, float* dst);

}  // namespace maxsim_codec
