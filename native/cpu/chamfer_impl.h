// The nearest-neighbour micro-kernel of the Chamfer family, written once against a small vector-traits
// interface and instantiated per ISA by chamfer_<isa>.cc (each compiled with its own -m flags, inside
// an anonymous namespace, like kernels_impl.h).
//
// Layout: MR vectors of W source points stay in registers as -2p (one vector per coordinate); every
// target q is broadcast (x, y, ..., |q|^2, loads only) and each vector computes
// |q|^2 - 2 p.q with D FMAs, then keeps its running minimum and the index that set it (strict <, targets
// in ascending order: a tie keeps the lowest index). Per source vector and target: D FMAs plus
// compare, min and blend; nothing of size [N, M] is stored.
//
// Traits V provide: T (fp32 vector), I (int32 vector), W, Rows(d) (MR for d), load(const float*),
// set1(float), fma(a, b, c) = a*b + c, set1i(int32), addi(I, I), storei(int32_t*, I), and
// update(T& best, I& idx, T acc, I j): where acc < best, best = acc and idx = j.
#pragma once
#include <cmath>
#include <cstdint>

#include "chamfer.h"

namespace {

template <class V, int D>
void NearestTileT(const float* src, int64_t n, const float* dst, int64_t m, int32_t* out) {
  constexpr int MR = V::Rows(D);
  constexpr int W = V::W;
  constexpr int64_t S = D + 1;
  using T = typename V::T;
  using I = typename V::I;
  T p[MR][D];
  alignas(64) float lane[W];
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) {
#pragma GCC unroll 8
    for (int k = 0; k < D; k++) {
      for (int l = 0; l < W; l++) {
        const int64_t i = static_cast<int64_t>(r) * W + l;
        // Lanes past n compute against zeros and are never stored.
        lane[l] = i < n ? -2.0f * src[i * S + k] : 0.0f;
      }
      p[r][k] = V::load(lane);
    }
  }
  T best[MR];
  I idx[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) {
    best[r] = V::set1(INFINITY);
    idx[r] = V::set1i(0);  // all-NaN rows (unchecked input) report target 0
  }
  I jv = V::set1i(0);
  const I one = V::set1i(1);
  for (int64_t j = 0; j < m; j++) {
    const float* qr = dst + j * S;
    const T qq = V::set1(qr[D]);
    T b[D];
#pragma GCC unroll 8
    for (int k = 0; k < D; k++) b[k] = V::set1(qr[k]);
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
      T acc = qq;
#pragma GCC unroll 8
      for (int k = 0; k < D; k++) acc = V::fma(p[r][k], b[k], acc);
      V::update(best[r], idx[r], acc, jv);
    }
    jv = V::addi(jv, one);
  }
  alignas(64) int32_t li[W];
  for (int r = 0; r < MR; r++) {
    V::storei(li, idx[r]);
    for (int l = 0; l < W; l++) {
      const int64_t i = static_cast<int64_t>(r) * W + l;
      if (i < n) out[i] = li[l];
    }
  }
}

template <class V>
void NearestTileImpl(const float* src, int64_t n, const float* dst, int64_t m, int64_t dim, int32_t* out) {
  switch (dim) {
    case 1: return NearestTileT<V, 1>(src, n, dst, m, out);
    case 2: return NearestTileT<V, 2>(src, n, dst, m, out);
    case 3: return NearestTileT<V, 3>(src, n, dst, m, out);
    case 4: return NearestTileT<V, 4>(src, n, dst, m, out);
    case 5: return NearestTileT<V, 5>(src, n, dst, m, out);
    case 6: return NearestTileT<V, 6>(src, n, dst, m, out);
    case 7: return NearestTileT<V, 7>(src, n, dst, m, out);
    case 8: return NearestTileT<V, 8>(src, n, dst, m, out);
    default: return;  // the engine checks dim
  }
}

template <class V>
int TilePointsImpl(int64_t dim) {
  return V::Rows(static_cast<int>(dim)) * V::W;
}

}  // namespace
