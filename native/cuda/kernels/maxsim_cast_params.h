// The argument block of the float32 -> float16 / bfloat16 casts (native/cuda/kernels/maxsim_cast.cu), by
// value. Shared by the kernels (nvcc) and the runtime that launches them (g++): fixed-width plain types.
#pragma once

// Round to nearest even (the host encodeFloats of src/tensor.ts gives the same bits).
struct MaxsimCastParams {
  const float* src;
  void* dst;  // uint16 bits of the target dtype
  unsigned long long count;
};
static_assert(sizeof(MaxsimCastParams) == 24, "MaxsimCastParams layout changed: update both sides");
