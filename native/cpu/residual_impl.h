// The residual codec's kernels, written once against a vector-traits interface and instantiated per
// ISA by residual_<isa>.cc (each compiled with its own -m flags, inside an anonymous namespace).
//
// Traits V: type T (W float lanes), I (W int32 lanes), load, set1, zero, neg_inf, fma, max, add,
// store, loadi, iota() (lane indices), addi, seti, best(bv, bi, v, j) (lanes where v > bv take v and j),
// storei, hmax, gather(base, idx32*) (base[idx[lane]]), keep_lanes(v, mask) (-inf where mask's bit is clear),
// decode2(p, sub, tab) / decode4(p, sub, tab): the weights of tokens [sub * W, sub * W + W) of a
// 16-token block for one dimension (p: its code word, tab: its 16-entry table).
//
// Napkin math, fused residual MaxSim, b = 2, d = 128, AVX-512: per dimension of a 16-token block one
// 32-bit load, a broadcast, a variable shift and a lane permute decode 16 weights, which then feed 16
// query-token FMAs: ~80% of the FMA issue slots are useful, so a 64-token document against a 32-token
// query is ~2 x 64 x 128 FMA vectors / 2 ports ~ 1.1 us per core at 3 GHz (plus 2 gathers per block).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <type_traits>
#include <vector>

#include "residual.h"

namespace {

using maxsim_cpu::kResidualBlock;
using maxsim_cpu::kResidualTable;
using maxsim_cpu::ResidualCodes;
using maxsim_cpu::ResidualQuery;

// --- assignment: lanes over centroids, NR rows broadcast ---------------------------------------

// NR rows against centroid lane blocks [b_begin, b_end), folded into the rows' running best
// (values and centroid ids per lane, in memory: bv / bi hold NR vectors each).
template <class V, int MR, int NR>
inline void AssignTile(const float* x, const float* cpack, const float* bias, int64_t b_begin, int64_t b_end,
                       int64_t d, float* bv, int32_t* bi) {
  using T = typename V::T;
  using I = typename V::I;
  T best[NR];
  I bidx[NR];
#pragma GCC unroll 16
  for (int n = 0; n < NR; n++) {
    best[n] = V::load(bv + n * V::W);
    bidx[n] = V::loadi(bi + n * V::W);
  }
  const int64_t stride = d * V::W;
  auto fold = [&](auto mr_tag, int64_t b0) {
    constexpr int M = decltype(mr_tag)::value;
    T acc[M][NR];
#pragma GCC unroll 16
    for (int m = 0; m < M; m++)
#pragma GCC unroll 16
      for (int n = 0; n < NR; n++) acc[m][n] = V::zero();
    for (int64_t k = 0; k < d; k++) {
      T a[M];
#pragma GCC unroll 16
      for (int m = 0; m < M; m++) a[m] = V::load(cpack + (b0 + m) * stride + k * V::W);
#pragma GCC unroll 16
      for (int n = 0; n < NR; n++) {
        const T xb = V::set1(x[n * d + k]);
#pragma GCC unroll 16
        for (int m = 0; m < M; m++) acc[m][n] = V::fma(a[m], xb, acc[m][n]);
      }
    }
#pragma GCC unroll 16
    for (int m = 0; m < M; m++) {
      const T bb = V::load(bias + (b0 + m) * V::W);
      const I j = V::addi(V::iota(), V::seti(static_cast<int32_t>((b0 + m) * V::W)));
#pragma GCC unroll 16
      for (int n = 0; n < NR; n++) V::best(best[n], bidx[n], V::add(acc[m][n], bb), j);
    }
  };
  int64_t b = b_begin;
  for (; b + MR <= b_end; b += MR) fold(std::integral_constant<int, MR>{}, b);
  for (; b < b_end; b++) fold(std::integral_constant<int, 1>{}, b);
#pragma GCC unroll 16
  for (int n = 0; n < NR; n++) {
    V::store(bv + n * V::W, best[n]);
    V::storei(bi + n * V::W, bidx[n]);
  }
}

// The last rows (fewer than a tile) in one narrower tile, not one at a time (a row alone is MR FMA
// chains: a fraction of the FMA rate).
template <class V, int MR, int R>
inline void AssignRest(int64_t rest, const float* x, const float* cpack, const float* bias, int64_t b_begin,
                       int64_t b_end, int64_t d, float* bv, int32_t* bi) {
  if constexpr (R >= 1) {
    if (rest == R) return AssignTile<V, MR, R>(x, cpack, bias, b_begin, b_end, d, bv, bi);
    AssignRest<V, MR, R - 1>(rest, x, cpack, bias, b_begin, b_end, d, bv, bi);
  }
}

// Rows against every centroid, a cache-sized group of centroid blocks at a time (the group stays in
// L2 while all rows pass over it), each row's best kept per lane in memory between groups.
// Centroid ids increase along each lane and a lane takes only a strictly greater value, so every lane
// holds the lowest id of its maximum and the final pick over lanes gives ties to the lowest id.
template <class V, int MR, int NR>
void AssignImpl(const float* x, int64_t n, const float* cpack, const float* bias, int64_t kp, int64_t d,
                int32_t* id, float* score) {
  std::vector<float> bv(static_cast<size_t>(n * V::W), -INFINITY);
  std::vector<int32_t> bi(static_cast<size_t>(n * V::W), 0);
  const int64_t nblocks = kp / V::W;
  const int64_t group = std::max<int64_t>(MR, (65536 / (d * V::W * 4)) / MR * MR);
  for (int64_t g = 0; g < nblocks; g += group) {
    const int64_t g_end = std::min(nblocks, g + group);
    int64_t r = 0;
    for (; r + NR <= n; r += NR)
      AssignTile<V, MR, NR>(x + r * d, cpack, bias, g, g_end, d, bv.data() + r * V::W, bi.data() + r * V::W);
    if (r < n) AssignRest<V, MR, NR - 1>(n - r, x + r * d, cpack, bias, g, g_end, d, bv.data() + r * V::W, bi.data() + r * V::W);
  }
  for (int64_t r = 0; r < n; r++) {
    const float* v = bv.data() + r * V::W;
    const int32_t* j = bi.data() + r * V::W;
    int w = 0;
    for (int l = 1; l < V::W; l++)
      if (v[l] > v[w] || (v[l] == v[w] && j[l] < j[w])) w = l;
    id[r] = j[w];
    if (score) score[r] = v[w];
  }
}

// --- query x centroid dots: lanes over query tokens, NR centroids broadcast ---------------------
// QB query blocks x NR centroids of accumulators a step: QB * NR independent FMA chains hide the
// FMA latency (4 chains ran at ~40% of the AVX2 FMA rate). Each score is the same chain over k
// whatever the blocking, so every blocking gives the same bits.

template <class V, int NR, int QB>
inline void DotsTile(const float* qpack, int64_t qb0, int64_t qb1, const float* rows, int64_t d, float* qct,
                     int64_t lqp) {
  using T = typename V::T;
  for (int64_t qb = qb0; qb + QB <= qb1; qb += QB) {
    T acc[QB][NR];
#pragma GCC unroll 16
    for (int b = 0; b < QB; b++)
#pragma GCC unroll 16
      for (int n = 0; n < NR; n++) acc[b][n] = V::zero();
    const float* a = qpack + qb * d * V::W;
    for (int64_t k = 0; k < d; k++) {
      T av[QB];
#pragma GCC unroll 16
      for (int b = 0; b < QB; b++) av[b] = V::load(a + (b * d + k) * V::W);
#pragma GCC unroll 16
      for (int n = 0; n < NR; n++) {
        const T r = V::set1(rows[n * d + k]);
#pragma GCC unroll 16
        for (int b = 0; b < QB; b++) acc[b][n] = V::fma(av[b], r, acc[b][n]);
      }
    }
#pragma GCC unroll 16
    for (int b = 0; b < QB; b++)
#pragma GCC unroll 16
      for (int n = 0; n < NR; n++) V::store(qct + n * lqp + (qb + b) * V::W, acc[b][n]);
  }
}

// NR centroids a tile over every query block: QB blocks a step, then the blocks left one at a time
template <class V, int NR, int QB>
inline void DotsRows(const float* qpack, int64_t nqb, const float* rows, int64_t d, float* qct, int64_t lqp) {
  const int64_t whole = nqb / QB * QB;
  DotsTile<V, NR, QB>(qpack, 0, whole, rows, d, qct, lqp);
  if (whole < nqb) DotsTile<V, NR, 1>(qpack, whole, nqb, rows, d, qct, lqp);
}

template <class V, int NR, int QB = 1>
void DotsImpl(const float* qpack, int64_t lqp, const float* centroids, int64_t c_begin, int64_t c_end, int64_t d,
              float* qct) {
  const int64_t nqb = lqp / V::W;
  int64_t c = c_begin;
  for (; c + NR <= c_end; c += NR) DotsRows<V, NR, QB>(qpack, nqb, centroids + c * d, d, qct + c * lqp, lqp);
  for (; c < c_end; c++) DotsRows<V, 1, QB>(qpack, nqb, centroids + c * d, d, qct + c * lqp, lqp);
}

// --- fused decompress-and-MaxSim ----------------------------------------------------------------

template <class V, int BITS>
inline typename V::T Decode(const uint8_t* p, int sub, const float* tab) {
  if constexpr (BITS == 2) return V::decode2(p, sub, tab);
  else return V::decode4(p, sub, tab);
}

// Query tokens [i0, i0 + MQ) against document tokens [start, start + len): adds each token's max.
// Pruning (q.keepc): only the tokens of flagged centroids are decoded (a lane group with none skips
// the decode); the others count q . c alone.
template <class V, int BITS, int MQ>
inline double ResidualGroup(const ResidualQuery& q, const ResidualCodes& c, int64_t start, int64_t len, int64_t i0) {
  using T = typename V::T;
  constexpr int kSubs = kResidualBlock / V::W;
  constexpr int64_t kDimBytes = 2 * BITS;
  const int64_t d = c.d;
  const int64_t block_bytes = d * kDimBytes;
  T rm[MQ];
#pragma GCC unroll 16
  for (int m = 0; m < MQ; m++) rm[m] = V::neg_inf();
  const int64_t end = start + len;
  for (int64_t b = start / kResidualBlock; b * kResidualBlock < end; b++) {
    const uint8_t* p = c.codes + b * block_bytes;
    for (int sub = 0; sub < kSubs; sub++) {
      const int64_t tok0 = b * kResidualBlock + sub * V::W;
      const int lo = static_cast<int>(start > tok0 ? start - tok0 : 0);
      const int hi = static_cast<int>(end - tok0 < V::W ? end - tok0 : V::W);
      uint32_t mask = 0, kept = 0;  // the lanes in range, and those decoded
      for (int l = lo; l < hi; l++) {
        mask |= 1u << l;
        if (!q.keepc || q.keepc[c.cids[tok0 + l]]) kept |= 1u << l;
      }
      if (!mask) continue;
      // q_i . centroid of each lane's token: row cid of qct, column i (k * lqp < 2^31: the driver checks)
      int32_t at[V::W];
      for (int l = 0; l < V::W; l++) at[l] = c.cids[tok0 + l] * static_cast<int32_t>(q.lqp);
      T acc[MQ];
#pragma GCC unroll 16
      for (int m = 0; m < MQ; m++) acc[m] = V::zero();
      const float* qk = q.qt + i0;
      for (int64_t k = 0; k < (kept ? d : 0); k++, qk += q.lq) {
        const T w = Decode<V, BITS>(p + k * kDimBytes, sub, c.tables + k * kResidualTable);
#pragma GCC unroll 16
        for (int m = 0; m < MQ; m++) acc[m] = V::fma(V::set1(qk[m]), w, acc[m]);
      }
#pragma GCC unroll 16
      for (int m = 0; m < MQ; m++) {
        const T qc = V::gather(q.qct + i0 + m, at);
        rm[m] = V::max(rm[m], V::keep_lanes(V::add(acc[m], qc), kept));
        if (kept != mask) rm[m] = V::max(rm[m], V::keep_lanes(qc, mask & ~kept));  // q . c alone
      }
    }
  }
  double s = 0.0;
  for (int m = 0; m < MQ; m++) s += static_cast<double>(V::hmax(rm[m]));
  return s;
}

template <class V, int BITS, int MQ>
float ResidualDocImpl(const ResidualQuery& q, const ResidualCodes& c, int64_t start, int64_t len) {
  if (len <= 0) return -INFINITY;
  double s = 0.0;
  int64_t i = 0;
  for (; i + MQ <= q.lq; i += MQ) s += ResidualGroup<V, BITS, MQ>(q, c, start, len, i);
  if constexpr (MQ >= 8)
    for (; i + 8 <= q.lq; i += 8) s += ResidualGroup<V, BITS, 8>(q, c, start, len, i);
  if constexpr (MQ >= 4)
    for (; i + 4 <= q.lq; i += 4) s += ResidualGroup<V, BITS, 4>(q, c, start, len, i);
  for (; i < q.lq; i++) s += ResidualGroup<V, BITS, 1>(q, c, start, len, i);
  return static_cast<float>(s);
}

template <class V, int MQ>
float ResidualDispatch(const ResidualQuery& q, const ResidualCodes& c, int64_t start, int64_t len) {
  return c.bits == 2 ? ResidualDocImpl<V, 2, MQ>(q, c, start, len) : ResidualDocImpl<V, 4, MQ>(q, c, start, len);
}

// --- centroid interaction: lanes over query tokens ----------------------------------------------

template <class V>
float CentroidDocImpl(const float* qct, int64_t lqp, int64_t lq, const int32_t* bag, int64_t n, const uint8_t* keep,
                      float* scratch) {
  using T = typename V::T;
  const int64_t nb = lqp / V::W;
  for (int64_t b = 0; b < nb; b++) V::store(scratch + b * V::W, V::neg_inf());
  int64_t j = 0;
  // Up to 4 lane blocks (64 query tokens with AVX-512) stay in registers.
  if (nb <= 4) {
    T rm[4] = {V::neg_inf(), V::neg_inf(), V::neg_inf(), V::neg_inf()};
    for (; j < n; j++) {
      const int32_t c = bag[j];
      if (keep && !keep[c]) continue;
      const float* row = qct + static_cast<int64_t>(c) * lqp;
#pragma GCC unroll 4
      for (int b = 0; b < 4; b++)
        if (b < nb) rm[b] = V::max(rm[b], V::load(row + b * V::W));
    }
    for (int b = 0; b < 4; b++)
      if (b < nb) V::store(scratch + b * V::W, rm[b]);
  } else {
    for (; j < n; j++) {
      const int32_t c = bag[j];
      if (keep && !keep[c]) continue;
      const float* row = qct + static_cast<int64_t>(c) * lqp;
      for (int64_t b = 0; b < nb; b++)
        V::store(scratch + b * V::W, V::max(V::load(scratch + b * V::W), V::load(row + b * V::W)));
    }
  }
  double s = 0.0;
  for (int64_t i = 0; i < lq; i++) s += scratch[i] == -INFINITY ? 0.0 : static_cast<double>(scratch[i]);
  return static_cast<float>(s);
}

}  // namespace
