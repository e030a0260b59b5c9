// Shared device helpers for the MaxSim kernels (every family: SIMT, mma.sync, wgmma, 8-bit).
#pragma once
#include <stdint.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "maxsim_params.h"

namespace maxsim {

// ---- element conversion -------------------------------------------------------------------
template <typename T> __device__ __forceinline__ float to_f32(T x);
template <> __device__ __forceinline__ float to_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_f32<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

// ---- the wgmma kernels' walk over a CTA's documents ------------------------------------------
// (maxsim_wgmma.cu, maxsim_8bit.cuh: producer and consumer warps all step through every document of
// the CTA, a group's share being every NGRP-th; the mma.sync kernels' groups take DocCursor below.)
// The lengths (and, for the producer, starts) of documents blockIdx.x + i * gridDim.x, read 32 at a
// time by the lanes of a warp, one window ahead of use: the document loops then never stall on a
// dependent global load per document (a full memory latency each while the tile stream saturates
// DRAM). Every lane of the warp must call at() with the same i, in increasing order.
template <bool STARTS>
struct DocWindow {
  int len_cur = 0, len_nxt = 0;
  int64_t start_cur = 0, start_nxt = 0;
  __device__ __forceinline__ void fetch(const MaxsimParams& p, int64_t i0) {
    const int64_t doc = blockIdx.x + (i0 + (threadIdx.x & 31)) * (int64_t)gridDim.x;
    const bool ok = doc < p.num_docs;
    len_nxt = ok ? p.doc_lengths[doc] : 0;
    if (STARTS) start_nxt = ok ? p.doc_starts[doc] : 0;
  }
  __device__ __forceinline__ DocWindow(const MaxsimParams& p) { fetch(p, 0); }
  // length (and start) of document i of this CTA's sequence
  __device__ __forceinline__ int at(const MaxsimParams& p, int i, int64_t* start) {
    if ((i & 31) == 0) {
      len_cur = len_nxt;
      start_cur = start_nxt;
      fetch(p, i + 32);
    }
    if (STARTS) *start = __shfl_sync(0xffffffffu, start_cur, i & 31);
    return __shfl_sync(0xffffffffu, len_cur, i & 31);
  }
};

// ---- a producer's walk over its documents ---------------------------------------------------
// Documents first, first + step, ... (a group's share of a persistent grid), skipping empty ones.
// The next document's length and start are read one document ahead, so moving on never waits on a
// dependent global load (a full DRAM latency per document while the stream saturates DRAM).
struct DocCursor {
  int doc, step, len = 0, nlen;
  int64_t start = 0, nstart;
  const int32_t* lengths;
  const int64_t* starts;
  int num_docs;
  __device__ __forceinline__ DocCursor(const MaxsimParams& p, int first, int stride)
      : doc(first - stride), step(stride), lengths(p.doc_lengths), starts(p.doc_starts), num_docs(p.num_docs) {
    nlen = first < num_docs ? lengths[first] : 0;
    nstart = first < num_docs ? starts[first] : 0;
  }
  // moves to the next non-empty document; doc >= num_docs past the last one
  __device__ __forceinline__ void next() {
    for (;;) {
      doc += step;
      if (doc >= num_docs) return;
      len = nlen;
      start = nstart;
      const int nd = doc + step;
      nlen = nd < num_docs ? lengths[nd] : 0;
      nstart = nd < num_docs ? starts[nd] : 0;
      if (len > 0) return;
    }
  }
};

// ---- a row max through the floats' bit patterns -------------------------------------------
// Read as signed ints, floats in [+0, +inf] order as their values do, and every float with the sign
// bit set (negatives, -0, -NaN) is a negative int. So max(m, max(bits(a), bits(b))), which ptxas
// emits as one VIMNMX3 on sm_90 (two fmaxf are two FMNMX; a three-input float max needs sm_100),
// equals the fmaxf of the three whenever the result is a float in [+0, +inf]. Otherwise (every
// candidate negative, or a +NaN won) the caller redoes the fold with fmaxf (bench/NOTES.md, 'Row-max fold').
__device__ __forceinline__ int max3_bits(int m, float a, float b) {
  return max(m, max(__float_as_int(a), __float_as_int(b)));
}
__device__ __forceinline__ bool max_bits_inexact(float r) { return __float_as_uint(r) > 0x7F800000u; }

// The wgmma consumers' fold of a full tile into the row maxima rmax[m][h] of m-block m (h: the
// thread's rows g and g + 8): value(m, j) is accumulator j of the m-block, NV per thread, in the
// fragment's order (j % 4 < 2: row g, else row g + 8). fold_full_bits takes the max on bit patterns;
// redo_inexact_rows then refolds the tile with fmaxf from the maxima before it (`before`) in any warp
// where a row came out inexact. The accumulators must still hold the tile.
template <int MB, int NV, class Value>
__device__ __forceinline__ void fold_full_bits(float (&rmax)[MB][2], int m, Value&& value) {
  int r0 = __float_as_int(rmax[m][0]), r1 = __float_as_int(rmax[m][1]);
#pragma unroll
  for (int i = 0; i < NV / 4; ++i) {
    r0 = max3_bits(r0, value(m, 4 * i), value(m, 4 * i + 1));
    r1 = max3_bits(r1, value(m, 4 * i + 2), value(m, 4 * i + 3));
  }
  rmax[m][0] = __int_as_float(r0);
  rmax[m][1] = __int_as_float(r1);
}
template <int MB, int NV, class Value>
__device__ __forceinline__ void redo_inexact_rows(float (&rmax)[MB][2], const float (&before)[MB][2], Value&& value) {
  bool redo = false;
#pragma unroll
  for (int m = 0; m < MB; ++m) redo |= max_bits_inexact(rmax[m][0]) | max_bits_inexact(rmax[m][1]);
  if (__any_sync(0xffffffffu, redo)) {
#pragma unroll
    for (int m = 0; m < MB; ++m) {
      float f0 = before[m][0], f1 = before[m][1];
#pragma unroll
      for (int i = 0; i < NV / 4; ++i) {
        f0 = fmaxf(f0, fmaxf(value(m, 4 * i), value(m, 4 * i + 1)));
        f1 = fmaxf(f1, fmaxf(value(m, 4 * i + 2), value(m, 4 * i + 3)));
      }
      rmax[m][0] = f0;
      rmax[m][1] = f1;
    }
  }
}

// ---- warp reductions (fixed butterfly order: deterministic) -------------------------------
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The end of one query-row pass of the SIMT kernels (one CTA of THREADS per (document, query)):
// the block max of each row's per-thread maxima m[t] (row i0 + t), then thread 0 adds
// weight(row) * max of the rows < lq to total, in row order. Every thread must call it (two
// __syncthreads); red is the CTA's [THREADS / 32][QT] shared scratch.
template <int QT, int THREADS, class Weight>
__device__ __forceinline__ void simt_block_rows(const float (&m)[QT], float (&red)[THREADS / 32][QT], int i0, int lq,
                                                float& total, Weight weight) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
#pragma unroll
  for (int t = 0; t < QT; ++t) {
    const float v = warp_max(m[t]);
    if (lane == 0) red[warp][t] = v;
  }
  __syncthreads();
  if (tid == 0) {
#pragma unroll
    for (int t = 0; t < QT; ++t) {
      if (i0 + t < lq) {
        float v = red[0][t];
#pragma unroll
        for (int w = 1; w < THREADS / 32; ++w) v = fmaxf(v, red[w][t]);
        total += weight(i0 + t) * v;
      }
    }
  }
  __syncthreads();
}

// ---- async copy / tensor-core primitives (sm_80+) -----------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// The L2 prefetch size hint of the 16-byte cp.async ("", ".L2::64B", ".L2::128B" or ".L2::256B"):
// a build-time knob for measuring it on the streaming kernels (bench/NOTES.md, 'L2 prefetch size').
#ifndef MAXSIM_CP_ASYNC_L2_PREFETCH
#define MAXSIM_CP_ASYNC_L2_PREFETCH ""
#endif

// 16-byte cp.async; src_bytes in {0,16}: 0 zero-fills the destination without reading src.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global" MAXSIM_CP_ASYNC_L2_PREFETCH " [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
// One producer thread's share of a stage: the same 16-byte chunk of NIT token rows, RSTEP rows
// apart, to dst + it * DST_STEP. Only the row test changes from copy to copy (addresses computed
// per copy made producers issue-bound: bench/NOTES.md, 'Producer address arithmetic'). Rows at or past rows_left, and
// every row when the chunk lies past dim (!kok), are zero-filled (`any`: a valid address never read).
template <int NIT, int RSTEP, int DST_STEP, typename E>
__device__ __forceinline__ void copy_chunk_rows(uint32_t dst, const E* src, int64_t src_step, int rows_left, bool kok,
                                                const E* any) {
#pragma unroll
  for (int it = 0; it < NIT; ++it, src += src_step) {
    const bool ok = kok && it * RSTEP < rows_left;
    cp_async16(dst + it * DST_STEP, ok ? src : any, ok ? 16 : 0);
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
// Named barrier over `threads` threads (multiple of 32). id 0 is __syncthreads.
__device__ __forceinline__ void named_bar(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

template <typename T> struct MmaOp;
template <> struct MmaOp<__half> {
  static __device__ __forceinline__ void run(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <> struct MmaOp<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

}  // namespace maxsim
