// Host emulation of the CUDA built-ins maxsim_chamfer.cu uses: one std::thread per CUDA thread,
// __syncthreads a block barrier, warp shuffles, ballots and __syncwarp through a per-warp barrier
// (whole warps only: every lane must reach each one, as the kernels' warp-uniform code does).
#pragma once
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

struct dim3e { unsigned x = 1, y = 1, z = 1; };
inline thread_local dim3e threadIdx, blockIdx;
inline dim3e gridDim, blockDim;
inline std::barrier<>* g_block_barrier = nullptr;
inline std::vector<std::unique_ptr<std::barrier<>>> g_warp_barriers;
inline std::vector<uint32_t> g_shfl;
inline std::vector<uint64_t> g_shfl64;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
inline void __syncthreads() { g_block_barrier->arrive_and_wait(); }
inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline float __double2float_rn(double x) { return static_cast<float>(x); }
// Directed roundings through double (exact for a product of floats; a sum may round twice, which
// only loosens a bound the kernels already take with a margin): the float on the requested side.
inline float RoundDown(double x) { float f = static_cast<float>(x); return static_cast<double>(f) > x ? std::nextafter(f, -INFINITY) : f; }
inline float RoundUp(double x) { float f = static_cast<float>(x); return static_cast<double>(f) < x ? std::nextafter(f, INFINITY) : f; }
inline float __fadd_rd(float a, float b) { return RoundDown(static_cast<double>(a) + b); }
inline float __fsub_rd(float a, float b) { return RoundDown(static_cast<double>(a) - b); }
inline float __fmul_rd(float a, float b) { return RoundDown(static_cast<double>(a) * b); }
inline float __fadd_ru(float a, float b) { return RoundUp(static_cast<double>(a) + b); }
inline float __fmul_ru(float a, float b) { return RoundUp(static_cast<double>(a) * b); }
inline float __uint_as_float(uint32_t x) { float f; std::memcpy(&f, &x, 4); return f; }
inline uint32_t __float_as_uint(float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; }
inline int __ffs(unsigned x) { return __builtin_ffs(static_cast<int>(x)); }
using std::min;
using std::fmaxf;
using std::fmaf;
using std::fminf;
struct float4 { float x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
using std::isfinite;
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline float atomicAdd(float* p, float v) {
  float old = *p, want;
  do { want = old + v; } while (!__atomic_compare_exchange(p, &old, &want, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
  return old;
}
inline unsigned atomicMax(unsigned* p, unsigned v) {
  unsigned old = *p;
  while (old < v && !__atomic_compare_exchange(p, &old, &v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
  return old;
}
// Lane values through the warp's slots: every lane writes, the warp meets, every lane reads, the warp
// meets again (so the slots are free for the next exchange).
template <class T>
T WarpExchange(T x, unsigned from) {
  static_assert(sizeof(T) <= 8, "one slot per lane");
  const unsigned t = threadIdx.x, warp = t >> 5;
  uint64_t bits = 0;
  std::memcpy(&bits, &x, sizeof(T));
  g_shfl64[t] = bits;
  g_warp_barriers[warp]->arrive_and_wait();
  const uint64_t r = g_shfl64[(warp << 5) + (from & 31)];
  g_warp_barriers[warp]->arrive_and_wait();
  T out;
  std::memcpy(&out, &r, sizeof(T));
  return out;
}
template <class T>
T __shfl_sync(unsigned, T x, int lane) { return WarpExchange(x, static_cast<unsigned>(lane)); }
template <class T>
T __shfl_xor_sync(unsigned, T x, int o) { return WarpExchange(x, (threadIdx.x & 31) ^ static_cast<unsigned>(o)); }
inline unsigned __ballot_sync(unsigned, bool pred) {
  unsigned m = 0;
  for (int l = 0; l < 32; l++) m |= (WarpExchange<int>(pred ? 1 : 0, l) ? 1u : 0u) << l;
  return m;
}
inline bool __any_sync(unsigned, bool pred) { return __ballot_sync(0xffffffffu, pred) != 0u; }
inline bool __all_sync(unsigned, bool pred) { return __ballot_sync(0xffffffffu, pred) == 0xffffffffu; }
inline unsigned atomicMin(unsigned* p, unsigned v) {
  unsigned old = *p;
  while (old > v && !__atomic_compare_exchange(p, &old, &v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
  return old;
}
inline void __syncwarp() { g_warp_barriers[threadIdx.x >> 5]->arrive_and_wait(); }
inline uint32_t __shfl_up_sync(unsigned, uint32_t x, int o) {
  const unsigned t = threadIdx.x, lane = t & 31, warp = t >> 5;
  g_shfl[t] = x;
  g_warp_barriers[warp]->arrive_and_wait();
  const uint32_t r = lane >= static_cast<unsigned>(o) ? g_shfl[t - o] : x;
  g_warp_barriers[warp]->arrive_and_wait();
  return r;
}

// Runs kernel(params) over grid x block, one block at a time.
template <class P>
void Launch(void (*kernel)(const P), unsigned grid, unsigned block, const P& p) {
  gridDim.x = grid;
  blockDim.x = block;
  for (unsigned b = 0; b < grid; b++) {
    std::barrier<> bar(block);
    g_block_barrier = &bar;
    g_warp_barriers.clear();
    for (unsigned w = 0; w < (block + 31) / 32; w++) g_warp_barriers.push_back(std::make_unique<std::barrier<>>(32));
    g_shfl.assign(block, 0);
    g_shfl64.assign(block, 0);
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < block; t++) ts.emplace_back([=] { blockIdx.x = b; threadIdx.x = t; kernel(p); });
    for (auto& t : ts) t.join();
  }
}
