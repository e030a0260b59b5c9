// The row-max fold of the tensor-core kernels: a tile of dots (accumulators in the MMA fragment
// layout) into each query row's running max over the document's tokens. Columns past the document are
// -inf, never multiplied. The full-tile folds take no column test; the wgmma folds may take the max on
// the floats' bit patterns (checked, and redone with fmaxf where inexact).
#pragma once
#include "maxsim_common.cuh"

namespace maxsim {

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

// The last, partial wgmma tile of a document: columns at or past rem are -inf.
template <int MB, int NV, class Value>
__device__ __forceinline__ void fold_masked(float (&rmax)[MB][2], int m, int rem, int lane, Value&& value) {
#pragma unroll
  for (int i = 0; i < NV / 4; ++i) {
    const int col = i * 8 + (lane & 3) * 2;
    const bool ok0 = col < rem, ok1 = col + 1 < rem;
    const float v0 = ok0 ? value(m, 4 * i) : -INFINITY;
    const float v1 = ok1 ? value(m, 4 * i + 1) : -INFINITY;
    const float v2 = ok0 ? value(m, 4 * i + 2) : -INFINITY;
    const float v3 = ok1 ? value(m, 4 * i + 3) : -INFINITY;
    rmax[m][0] = fmaxf(rmax[m][0], fmaxf(v0, v1));
    rmax[m][1] = fmaxf(rmax[m][1], fmaxf(v2, v3));
  }
}

// ---- the argmax folds (the training forward: maxsim_train.cu, and wgmma_body's ArgmaxOut) -------
// Per row, the thread's (max, argmax) over its columns in ascending document-token order with a
// strict > (its lowest index wins its ties; NaN and padding never chosen), then the quad's merge.
// Reductions as trees over register arrays (fixed indices after unrolling: no local memory).
template <int N>
__device__ __forceinline__ int tree_max3(const int (&x)[N]) {
  if constexpr (N == 1) {
    return x[0];
  } else {
    constexpr int M = (N + 2) / 3;
    int y[M];
#pragma unroll
    for (int k = 0; k < M; ++k) {
      const int a = x[3 * k];
      const int b = 3 * k + 1 < N ? x[3 * k + 1] : a;
      const int c = 3 * k + 2 < N ? x[3 * k + 2] : a;
      y[k] = max(a, max(b, c));  // one VIMNMX3
    }
    return tree_max3<M>(y);
  }
}
template <int N>
__device__ __forceinline__ uint32_t tree_or(const uint32_t (&x)[N]) {
  if constexpr (N == 1) {
    return x[0];
  } else {
    constexpr int M = (N + 2) / 3;
    uint32_t y[M];
#pragma unroll
    for (int k = 0; k < M; ++k) {
      const uint32_t a = x[3 * k];
      const uint32_t b = 3 * k + 1 < N ? x[3 * k + 1] : 0u;
      const uint32_t c = 3 * k + 2 < N ? x[3 * k + 2] : 0u;
      y[k] = a | b | c;  // one LOP3
    }
    return tree_or<M>(y);
  }
}

// One row of an m-block's tile (h: the thread's row g or g + 8): NV / 2 values at accumulators
// 4 i + 2 h + e, tile columns 8 i + 2 (lane % 4) + e (padding columns already -inf: mask_tail).
// Updates the thread's (bv, bt) for the row.
template <int NV>
__device__ __forceinline__ void fold_argmax_row(const float* acc, int h, int lane, int col0, float& bv, int32_t& bt) {
  constexpr int N = NV / 2;  // values of the row in this thread: j = 2 i + e
  static_assert(N <= 32, "one bit per value in a 32-bit mask");
  auto v = [&](int j) { return acc[4 * (j >> 1) + 2 * h + (j & 1)]; };
  // The tile maximum on the bit patterns, as a tree (short dependency chains: the fold runs while
  // the other consumer warpgroup's wgmma does and should end before it).
  int bits[N];
#pragma unroll
  for (int j = 0; j < N; ++j) bits[j] = __float_as_int(v(j));
  float tm = __int_as_float(tree_max3(bits));
  if (max_bits_inexact(tm)) {  // every value negative, or a NaN won the integer max
    tm = v(0);
#pragma unroll
    for (int j = 1; j < N; ++j) tm = fmaxf(tm, v(j));
  }
  if (tm > bv) {  // strict: an earlier tile keeps its ties; NaN and -inf never enter
    // the lowest j holding tm: the lowest set bit of the mask of equal values
    uint32_t m[N];
#pragma unroll
    for (int j = 0; j < N; ++j) m[j] = v(j) == tm ? 1u << j : 0u;
    const int j = __ffs(static_cast<int>(tree_or(m))) - 1;
    bv = tm;
    bt = col0 + 2 * (lane & 3) + 8 * (j >> 1) + (j & 1);
  }
}
// The last, partial tile of a document: the accumulators of columns at or past rem become -inf in
// place (the next tile's first wgmma overwrites them), so padding never wins.
template <int NV>
__device__ __forceinline__ void mask_tail(float* acc, int rem, int lane) {
#pragma unroll
  for (int i = 0; i < NV / 4; ++i)
#pragma unroll
    for (int e = 0; e < 2; ++e)
      if (8 * i + 2 * (lane & 3) + e >= rem) acc[4 * i + e] = acc[4 * i + 2 + e] = -INFINITY;
}

// The quad's (value, index) candidates of one accumulator row (lanes 4r .. 4r + 3 hold row r's
// columns) merged by "larger value, on equal values the lower index": a total order on the
// candidates, so every lane ends with the row's maximum at its lowest index.
__device__ __forceinline__ void quad_argmax(float& v, int32_t& t) {
#pragma unroll
  for (int o = 1; o <= 2; o <<= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int32_t ot = __shfl_xor_sync(0xffffffffu, t, o);
    if (ov > v || (ov == v && ot < t)) {
      v = ov;
      t = ot;
    }
  }
}

// mma.sync: one finished block of 2 m16 x 2 n8 (tile columns c0 .. c0 + 15; the tile's first document
// token tok0) into each row's (bv, bt), columns in ascending order per thread (nt, then element 0
// before 1) with a strict >; columns at or past rem (the document's end) are never selected.
template <int TN>
__device__ __forceinline__ void fold_n16_argmax(float (&bv)[2][2], int32_t (&bt)[2][2], const float (&acc)[2][2][4],
                                                int tok0, int c0, int rem, int lane) {
  auto col = [&](int nt, int e) { return c0 + nt * 8 + (lane & 3) * 2 + e; };
  auto visit = [&](int nt, int e, bool real) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float v = acc[mt][nt][2 * h + e];
        if (real && v > bv[mt][h]) {
          bv[mt][h] = v;
          bt[mt][h] = tok0 + col(nt, e);
        }
      }
  };
  if (rem >= TN) {  // full tiles: no column test
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) visit(nt, e, true);
  } else {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) visit(nt, e, col(nt, e) < rem);
  }
}

// ---- the mma.sync folds: one finished block of 2 m16 x 2 n8 (tile columns c0 .. c0 + 15) --------
// 16-bit: the dots as they are; full tiles without the column test.
template <int TN>
__device__ __forceinline__ void fold_n16(float (&rmax)[2][2], const float (&acc)[2][2][4], int c0, int rem, int lane) {
  if (rem >= TN) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        rmax[mt][0] = fmaxf(rmax[mt][0], fmaxf(acc[mt][nt][0], acc[mt][nt][1]));
        rmax[mt][1] = fmaxf(rmax[mt][1], fmaxf(acc[mt][nt][2], acc[mt][nt][3]));
      }
  } else {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int col = c0 + nt * 8 + (lane & 3) * 2;
        const float v0 = col < rem ? acc[mt][nt][0] : -INFINITY;
        const float v1 = col + 1 < rem ? acc[mt][nt][1] : -INFINITY;
        const float v2 = col < rem ? acc[mt][nt][2] : -INFINITY;
        const float v3 = col + 1 < rem ? acc[mt][nt][3] : -INFINITY;
        rmax[mt][0] = fmaxf(rmax[mt][0], fmaxf(v0, v1));
        rmax[mt][1] = fmaxf(rmax[mt][1], fmaxf(v2, v3));
      }
  }
}
// 8-bit: each dot as fp32 times its document token's scale (sc: the stage's TN scales), then the max.
template <class E, bool BIAS, int TN>
__device__ __forceinline__ void fold_n16_scaled(float (&rmax)[2][2], const typename E::Acc (&acc)[2][2][4],
                                                const float* sc, int c0, int rem, int lane) {
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    const int col = c0 + nt * 8 + (lane & 3) * 2;
    const float2 s = *reinterpret_cast<const float2*>(sc + col);
    const bool ok0 = rem >= TN || col < rem, ok1 = rem >= TN || col + 1 < rem;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      const float v0 = ok0 ? E::template to_f32<BIAS>(acc[mt][nt][0]) * s.x : -INFINITY;
      const float v1 = ok1 ? E::template to_f32<BIAS>(acc[mt][nt][1]) * s.y : -INFINITY;
      const float v2 = ok0 ? E::template to_f32<BIAS>(acc[mt][nt][2]) * s.x : -INFINITY;
      const float v3 = ok1 ? E::template to_f32<BIAS>(acc[mt][nt][3]) * s.y : -INFINITY;
      rmax[mt][0] = fmaxf(rmax[mt][0], fmaxf(v0, v1));
      rmax[mt][1] = fmaxf(rmax[mt][1], fmaxf(v2, v3));
    }
  }
}

}  // namespace maxsim
