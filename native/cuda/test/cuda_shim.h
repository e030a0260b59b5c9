// Host emulation of the CUDA built-ins maxsim_chamfer.cu uses: one std::thread per CUDA thread,
// __syncthreads a block barrier, warp shuffles through a per-warp barrier.
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
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < block; t++) ts.emplace_back([=] { blockIdx.x = b; threadIdx.x = t; kernel(p); });
    for (auto& t : ts) t.join();
  }
}
