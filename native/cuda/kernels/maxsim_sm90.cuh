// Hopper (sm_90a) primitives of the warp-specialized wgmma body (maxsim_wgmma.cuh: the fp16/bf16,
// int8/fp8 and training-forward kernels). mbarrier init / arrive / parity wait, the async-proxy fence,
// copy-completion arrivals, and the wgmma fence / commit / wait. They exist only where wgmma does
// (MAXSIM_HAS_WGMMA); the sm_80 cubins of those files compile bodies that trap instead.
#pragma once
#include <stdint.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MAXSIM_HAS_WGMMA 1
#else
#define MAXSIM_HAS_WGMMA 0
#endif

namespace maxsim {

// The documents' TMA descriptor (cuTensorMapEncodeTiled on the host, CUtensorMap's layout), passed
// to the TMA variants by value as a __grid_constant__ parameter: the copy instructions take its
// generic address. (Declared for every architecture: the sm_80 cubins carry the
// entry points too.)
struct alignas(64) TmaMap {
  uint64_t opaque[16];
};

#if MAXSIM_HAS_WGMMA
__device__ __forceinline__ void mbar_init(uint32_t a, int cnt) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(a), "r"(cnt) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t a) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(a) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t a, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred P;\nmbarrier.try_wait.parity.shared::cta.b64 P, [%1], %2;\nselp.u32 %0, 1, 0, P;\n}\n"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Arrive on the mbarrier once all of this thread's earlier cp.async have landed (.noinc: the arrival
// is one of the barrier's expected count, so every producer thread is counted at init).
__device__ __forceinline__ void cp_async_mbar_arrive(uint32_t a) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(a) : "memory");
}
// Arms the barrier's phase with `bytes` of expected transactions and arrives (one of its count).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t a, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(a), "r"(bytes) : "memory");
}
// TMA: the box at (c0, c1) of a 2-D tensor map into shared memory at dst (128-byte swizzled as the
// map says); completes `box bytes` of the mbarrier's transactions when it lands. Out-of-bounds
// elements arrive as zeros and still count.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const TmaMap* map, int c0, int c1, uint32_t mbar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(mbar)
      : "memory");
}
// Warpgroup register reallocation (every warp of the warpgroup executes it; sm_90a): the producer
// warpgroup, which only issues copies, gives registers back to the CTA's pool and the consumer
// warpgroups take them. The split must fit the launch allocation (ptxas's limit for the block at one
// CTA per SM), or the .inc would wait forever:
//   2 consumers (384 threads at 168): 128 * 40 + 256 * 232 = 384 * 168, so a consumer can hold two
//     m-blocks of 128-column accumulators;
//   3 consumers (512 threads at 128): 128 * 24 + 384 * 160 <= 512 * 128.
template <int NCONS> struct RegSplit {
  static constexpr int producer = 0, consumer = 0;  // 0: keep the launch allocation
};
template <> struct RegSplit<2> {
  static constexpr int producer = 40, consumer = 232;
};
template <> struct RegSplit<3> {
  static constexpr int producer = 24, consumer = 160;
};
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving reads or writes of an accumulator across a wgmma fence or wait.
__device__ __forceinline__ void reg_fence(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void reg_fence(int& r) { asm volatile("" : "+r"(r)::"memory"); }
#endif

}  // namespace maxsim
