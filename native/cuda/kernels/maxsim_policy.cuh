// The element types of the forward MaxSim kernels, as policies: F16 / BF16 (fp32 accumulate) and the
// 8-bit S8 (exact int32) / E4M3 (fp32 accumulate). A policy says what one token element is stored as,
// how the tensor core multiplies fragments of it (mma.sync for sm_80+, wgmma for sm_90a, through
// WgmmaOp<E, N>), what the accumulator starts at and how it becomes fp32. Every kernel family
// (maxsim_mma.cuh, maxsim_wgmma.cuh, maxsim_simt.cuh) takes one, so a new element type is one policy
// here plus its entry points in the registry of its family.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include <type_traits>

#include "maxsim_sm90.cuh"

namespace maxsim {

// mma.sync.m16n8kK with the A fragment in 4 registers, B in 2, C/D in 4 (constraint CT: "f" / "r").
#define MAXSIM_MMA_SYNC(SHAPE_TYPES, CT)                                                        \
  asm volatile("mma.sync.aligned." SHAPE_TYPES " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "      \
               "{%0,%1,%2,%3};\n"                                                               \
               : "+" CT(c[0]), "+" CT(c[1]), "+" CT(c[2]), "+" CT(c[3])                         \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))

// fp16 / bf16: 16-bit elements, fp32 accumulation, products through mma.m16n8k16.
// The wgmma body (maxsim_wgmma.cuh) also reads: kBytes (bytes per element: the tile's row is
// 128 * kBytes bytes, its k step 32 bytes), kScaled (per-token fp32 scales: the 8-bit types' query and
// document scales and their document-scale twins; none for 16-bit), kRowMaxBits (the row max of a
// full tile taken on bit patterns, max3_bits) and to_f32<BIAS> (accumulator -> fp32).
template <typename T>
struct Float16Policy {
  template <bool BIAS> static __device__ __forceinline__ float init() { return 0.f; }
  template <bool BIAS> static __device__ __forceinline__ float to_f32(float x) { return x; }
  using Elem = T;
  using Acc = float;
  static constexpr int kBytes = 2;
  static constexpr bool kFp8 = false;
  static constexpr bool kScaled = false;
  static constexpr bool kRowMaxBits = true;
  static __device__ __forceinline__ void mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    if constexpr (std::is_same_v<T, __half>) MAXSIM_MMA_SYNC("m16n8k16.row.col.f32.f16.f16.f32", "f");
    else MAXSIM_MMA_SYNC("m16n8k16.row.col.f32.bf16.bf16.f32", "f");
  }
};
using F16 = Float16Policy<__half>;
using BF16 = Float16Policy<__nv_bfloat16>;

// int8: exact int32 accumulation. The accumulator's start value and its conversion to float32: with
// BIAS it starts at the bits of 1.5 * 2^23, so after the MMAs it is the float 1.5 * 2^23 + acc (exact
// for |acc| < 2^22): one FADD instead of the quarter-rate I2F. Otherwise a correctly rounded I2F.
struct S8 {
  using Elem = uint8_t;  // the bytes of the tokens; the tensor core reads them as s8
  using Acc = int;
  static constexpr int kBytes = 1;
  static constexpr bool kFp8 = false;
  static constexpr bool kScaled = true;
  // the wgmma fold's row max on bit patterns (max3_bits): slower for int8, whose I2FP feeds it (ColPali
  // 3.11 vs 2.80 ms, fewer instructions but more stalls; bench/NOTES.md, 'Row-max fold'), faster for fp8
  static constexpr bool kRowMaxBits = false;
  static constexpr int kAccBias = 0x4B400000;
  template <bool BIAS> static __device__ __forceinline__ int init() { return BIAS ? kAccBias : 0; }
  template <bool BIAS> static __device__ __forceinline__ float to_f32(int x) {
    if constexpr (BIAS) return __int_as_float(x) - 12582912.0f;
    else return __int2float_rn(x);
  }
  static __device__ __forceinline__ void mma(int* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    MAXSIM_MMA_SYNC("m16n8k32.row.col.s32.s8.s8.s32", "r");
  }
};

// fp8 e4m3: products exact, accumulated by the tensor core in fp32 (sm_89+; the sm_80 cubin traps,
// and the fp8 mma variants are declared for compute capability 9.0 only).
struct E4M3 {
  using Elem = uint8_t;  // the bytes of the tokens; the tensor core reads them as e4m3
  using Acc = float;
  static constexpr int kBytes = 1;
  static constexpr bool kFp8 = true;
  static constexpr bool kScaled = true;
  static constexpr bool kRowMaxBits = true;
  template <bool BIAS> static __device__ __forceinline__ float init() { return 0.f; }
  template <bool BIAS> static __device__ __forceinline__ float to_f32(float x) { return x; }
  static __device__ __forceinline__ void mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    MAXSIM_MMA_SYNC("m16n8k32.row.col.f32.e4m3.e4m3.f32", "f");
#else
    __trap();
#endif
  }
};
#undef MAXSIM_MMA_SYNC

// e4m3 byte -> float32 (exact)
__device__ __forceinline__ float e4m3_to_f32(uint8_t x) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(x, __NV_E4M3)));
}

#if MAXSIM_HAS_WGMMA
// ---- wgmma m64nNkK, A from registers, B K-major from shared memory (by descriptor) ----
// WgmmaOp<E, N>::run(d, a, desc, accumulate): one warpgroup MMA into the N / 2 accumulators per
// thread d; accumulate == 0 overwrites them (scale-d). The operand lists are generated (N / 2 + 6).
#define MAXSIM_WGMMA_OPERANDS_64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p"
#define MAXSIM_WGMMA_PRED_64 "%37"
#define MAXSIM_WGMMA_D_64(C) "+" C(d[0]), "+" C(d[1]), "+" C(d[2]), "+" C(d[3]), "+" C(d[4]), "+" C(d[5]), "+" C(d[6]), "+" C(d[7]), "+" C(d[8]), "+" C(d[9]), "+" C(d[10]), "+" C(d[11]), "+" C(d[12]), "+" C(d[13]), "+" C(d[14]), "+" C(d[15]), "+" C(d[16]), "+" C(d[17]), "+" C(d[18]), "+" C(d[19]), "+" C(d[20]), "+" C(d[21]), "+" C(d[22]), "+" C(d[23]), "+" C(d[24]), "+" C(d[25]), "+" C(d[26]), "+" C(d[27]), "+" C(d[28]), "+" C(d[29]), "+" C(d[30]), "+" C(d[31])
#define MAXSIM_WGMMA_OPERANDS_128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p"
#define MAXSIM_WGMMA_PRED_128 "%69"
#define MAXSIM_WGMMA_D_128(C) "+" C(d[0]), "+" C(d[1]), "+" C(d[2]), "+" C(d[3]), "+" C(d[4]), "+" C(d[5]), "+" C(d[6]), "+" C(d[7]), "+" C(d[8]), "+" C(d[9]), "+" C(d[10]), "+" C(d[11]), "+" C(d[12]), "+" C(d[13]), "+" C(d[14]), "+" C(d[15]), "+" C(d[16]), "+" C(d[17]), "+" C(d[18]), "+" C(d[19]), "+" C(d[20]), "+" C(d[21]), "+" C(d[22]), "+" C(d[23]), "+" C(d[24]), "+" C(d[25]), "+" C(d[26]), "+" C(d[27]), "+" C(d[28]), "+" C(d[29]), "+" C(d[30]), "+" C(d[31]), "+" C(d[32]), "+" C(d[33]), "+" C(d[34]), "+" C(d[35]), "+" C(d[36]), "+" C(d[37]), "+" C(d[38]), "+" C(d[39]), "+" C(d[40]), "+" C(d[41]), "+" C(d[42]), "+" C(d[43]), "+" C(d[44]), "+" C(d[45]), "+" C(d[46]), "+" C(d[47]), "+" C(d[48]), "+" C(d[49]), "+" C(d[50]), "+" C(d[51]), "+" C(d[52]), "+" C(d[53]), "+" C(d[54]), "+" C(d[55]), "+" C(d[56]), "+" C(d[57]), "+" C(d[58]), "+" C(d[59]), "+" C(d[60]), "+" C(d[61]), "+" C(d[62]), "+" C(d[63])
#define MAXSIM_WGMMA_OPERANDS_256 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p"
#define MAXSIM_WGMMA_PRED_256 "%133"
#define MAXSIM_WGMMA_D_256(C) "+" C(d[0]), "+" C(d[1]), "+" C(d[2]), "+" C(d[3]), "+" C(d[4]), "+" C(d[5]), "+" C(d[6]), "+" C(d[7]), "+" C(d[8]), "+" C(d[9]), "+" C(d[10]), "+" C(d[11]), "+" C(d[12]), "+" C(d[13]), "+" C(d[14]), "+" C(d[15]), "+" C(d[16]), "+" C(d[17]), "+" C(d[18]), "+" C(d[19]), "+" C(d[20]), "+" C(d[21]), "+" C(d[22]), "+" C(d[23]), "+" C(d[24]), "+" C(d[25]), "+" C(d[26]), "+" C(d[27]), "+" C(d[28]), "+" C(d[29]), "+" C(d[30]), "+" C(d[31]), "+" C(d[32]), "+" C(d[33]), "+" C(d[34]), "+" C(d[35]), "+" C(d[36]), "+" C(d[37]), "+" C(d[38]), "+" C(d[39]), "+" C(d[40]), "+" C(d[41]), "+" C(d[42]), "+" C(d[43]), "+" C(d[44]), "+" C(d[45]), "+" C(d[46]), "+" C(d[47]), "+" C(d[48]), "+" C(d[49]), "+" C(d[50]), "+" C(d[51]), "+" C(d[52]), "+" C(d[53]), "+" C(d[54]), "+" C(d[55]), "+" C(d[56]), "+" C(d[57]), "+" C(d[58]), "+" C(d[59]), "+" C(d[60]), "+" C(d[61]), "+" C(d[62]), "+" C(d[63]), "+" C(d[64]), "+" C(d[65]), "+" C(d[66]), "+" C(d[67]), "+" C(d[68]), "+" C(d[69]), "+" C(d[70]), "+" C(d[71]), "+" C(d[72]), "+" C(d[73]), "+" C(d[74]), "+" C(d[75]), "+" C(d[76]), "+" C(d[77]), "+" C(d[78]), "+" C(d[79]), "+" C(d[80]), "+" C(d[81]), "+" C(d[82]), "+" C(d[83]), "+" C(d[84]), "+" C(d[85]), "+" C(d[86]), "+" C(d[87]), "+" C(d[88]), "+" C(d[89]), "+" C(d[90]), "+" C(d[91]), "+" C(d[92]), "+" C(d[93]), "+" C(d[94]), "+" C(d[95]), "+" C(d[96]), "+" C(d[97]), "+" C(d[98]), "+" C(d[99]), "+" C(d[100]), "+" C(d[101]), "+" C(d[102]), "+" C(d[103]), "+" C(d[104]), "+" C(d[105]), "+" C(d[106]), "+" C(d[107]), "+" C(d[108]), "+" C(d[109]), "+" C(d[110]), "+" C(d[111]), "+" C(d[112]), "+" C(d[113]), "+" C(d[114]), "+" C(d[115]), "+" C(d[116]), "+" C(d[117]), "+" C(d[118]), "+" C(d[119]), "+" C(d[120]), "+" C(d[121]), "+" C(d[122]), "+" C(d[123]), "+" C(d[124]), "+" C(d[125]), "+" C(d[126]), "+" C(d[127])

template <class E, int N> struct WgmmaOp;
// SHAPE_TYPES: "mMnNkK.D.A.B"; CT: the accumulator's constraint; TAIL: the immediates after the
// scale-d predicate (16-bit: scale-a, scale-b, transpose-b; e4m3: the scales; s8: none).
#define MAXSIM_WGMMA_OP(E, N, SHAPE_TYPES, CT, TAIL)                                                    \
  template <> struct WgmmaOp<E, N> {                                                                    \
    static __device__ __forceinline__ void run(E::Acc* d, const uint32_t* a, uint64_t desc, int accumulate) { \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " MAXSIM_WGMMA_PRED_##N ", 0;\n"                   \
                   "wgmma.mma_async.sync.aligned." SHAPE_TYPES " " MAXSIM_WGMMA_OPERANDS_##N TAIL ";\n}\n" \
                   : MAXSIM_WGMMA_D_##N(CT)                                                              \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate));           \
    }                                                                                                   \
  };
MAXSIM_WGMMA_OP(F16, 64, "m64n64k16.f32.f16.f16", "f", ", 1, 1, 0")
MAXSIM_WGMMA_OP(F16, 128, "m64n128k16.f32.f16.f16", "f", ", 1, 1, 0")
MAXSIM_WGMMA_OP(F16, 256, "m64n256k16.f32.f16.f16", "f", ", 1, 1, 0")
MAXSIM_WGMMA_OP(BF16, 64, "m64n64k16.f32.bf16.bf16", "f", ", 1, 1, 0")
MAXSIM_WGMMA_OP(BF16, 128, "m64n128k16.f32.bf16.bf16", "f", ", 1, 1, 0")
MAXSIM_WGMMA_OP(BF16, 256, "m64n256k16.f32.bf16.bf16", "f", ", 1, 1, 0")
MAXSIM_WGMMA_OP(S8, 64, "m64n64k32.s32.s8.s8", "r", "")
MAXSIM_WGMMA_OP(S8, 128, "m64n128k32.s32.s8.s8", "r", "")
MAXSIM_WGMMA_OP(E4M3, 64, "m64n64k32.f32.e4m3.e4m3", "f", ", 1, 1")
MAXSIM_WGMMA_OP(E4M3, 128, "m64n128k32.f32.e4m3.e4m3", "f", ", 1, 1")
#undef MAXSIM_WGMMA_OP
#endif

}  // namespace maxsim
