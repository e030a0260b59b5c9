// Small float32 query batches converted to float16 / bfloat16 on the host (the worker thread) while
// they are packed for upload, instead of uploading float32 and launching the cast kernel: for one
// query of 32 x 128 values the conversion takes well under a microsecond (F16C, or the bfloat16
// rounding in integer lanes) against a launch and twice the bytes. Same bits as the cast kernel
// (__float2half_rn / __float2bfloat16_rn: round to nearest even) for finite values; a batch holding a
// NaN or an infinity keeps the kernel path, so no special value is ever rounded here.
#pragma once
#include <cstdint>

#include "tokens.h"

namespace maxsim_cuda {

// Values of a batch small enough to convert on the host.
constexpr uint64_t kHostConvertMaxValues = uint64_t(1) << 16;

// Whether `n` float32 values are all finite (no NaN, no infinity).
bool AllFinite(const float* src, uint64_t n);

// dst[i] = src[i] rounded to nearest even as float16 (to == Float16) or bfloat16 bits; src finite.
void ConvertF32(const float* src, uint16_t* dst, uint64_t n, DType to);

}  // namespace maxsim_cuda
