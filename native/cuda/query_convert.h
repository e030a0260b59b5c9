// Small float32 query batches converted to float16 / bfloat16 (or quantized to int8 per token) on the
// host (the worker thread) while they are packed for upload, instead of uploading float32 and
// launching the cast (or quantize) kernel: for one query of 32 x 128 values the conversion takes well
// under a microsecond (F16C, or the bfloat16 rounding in integer lanes) against a launch and twice the
// bytes (the quantize also a flag reset and a flag read-back). Same bits as the cast kernel
// (__float2half_rn / __float2bfloat16_rn: round to nearest even) for finite values; a batch holding a
// NaN or an infinity keeps the kernel path, so no special value is ever rounded here.
#pragma once
#include <cstdint>

#include "tokens.h"

namespace maxsim_cuda {

// Values of a batch small enough to convert on the host.
constexpr uint64_t kHostConvertMaxValues = uint64_t(1) << 16;

// dst[i] = src[i] rounded to nearest even as float16 (to == Float16) or bfloat16 bits; src finite.
void ConvertF32(const float* src, uint16_t* dst, uint64_t n, DType to);

// Magnitude bits (float32, sign cleared) from which a finite value becomes +-Infinity in `to`
// (float16: 65520; bfloat16: 0x7f7f8000), the values encodeFloats (src/tensor.ts) refuses.
uint32_t OverflowBits(DType to);

// One pass over `n` float32 values: whether all are finite, and the index of the first finite value
// whose magnitude bits are at least `over_bits` (-1: none; over_bits 0: not looked for).
struct F32Scan {
  bool finite = true;
  int64_t first_over = -1;
};
F32Scan ScanF32(const float* src, uint64_t n, uint32_t over_bits);

// One finite float32 token quantized to int8 per token (the device quantizer's bytes, which are the
// host quantize()'s of src/ops/quantize.ts): scale = (float)(max|x| / 127.0), y = rint(x / scale) in
// double clamped to [-127, 127]; a token of zeros gets scale 0 and zeros. Returns the scale.
float QuantizeTokenInt8(const float* x, int8_t* y, uint64_t dim);
// The same, one value at a time (no SIMD): what the AVX2 path is checked against.
float QuantizeTokenInt8Scalar(const float* x, int8_t* y, uint64_t dim);

}  // namespace maxsim_cuda
