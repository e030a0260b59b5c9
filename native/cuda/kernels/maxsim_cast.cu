// maxsim_cast.cu: float32 -> float16 / bfloat16 conversion of device buffers (Runtime::CastFromF32):
// gradients returned in the inputs' dtype (outputDtype 'input') and float32 queries against a float16
// / bfloat16 corpus. Round to nearest even, as the host encodeFloats does.
//
// LAUNCH CONTRACT (MaxsimCastParams by value): block (256,1,1), any grid (threads stride over count).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "maxsim_cast_params.h"

extern "C" __global__ void __launch_bounds__(256) maxsim_cast_f32_f16(const MaxsimCastParams p) {
  __half* dst = static_cast<__half*>(p.dst);
  for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < p.count; i += gridDim.x * 256ull) {
    dst[i] = __float2half_rn(p.src[i]);
  }
}

extern "C" __global__ void __launch_bounds__(256) maxsim_cast_f32_bf16(const MaxsimCastParams p) {
  __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(p.dst);
  for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < p.count; i += gridDim.x * 256ull) {
    dst[i] = __float2bfloat16_rn(p.src[i]);
  }
}
