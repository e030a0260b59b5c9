// maxsim_chamfer.cu: nearest neighbours and the Chamfer distance between point clouds on the GPU, the
// CUDA twin of native/cpu/chamfer.cc, so the argmin and the distances are bitwise those of the CPU's
// FMA kernel sets (AVX2 / AVX-512):
//   - centre c of a pair = midpoint of its bounding box (c = lo * 0.5f + hi * 0.5f, separate roundings),
//     centred rows x - c and |x - c|^2 summed over k in order with separate fp32 roundings;
//   - search key |q|^2 - 2 p.q as fmaf(-2p_k, q_k, acc) over k in order from acc = |q|^2; the argmin is
//     the lowest target index among the smallest keys (the CPU's strict-< scan; NaN keys never win, an
//     all-NaN row keeps index 0);
//   - reported distance sum_k (p_k - q_k)^2 in double (separate roundings), rounded once to fp32;
//   - gradients: per row, the own term then the CSR sources in ascending order, fp64, one rounding.
// The search visits the targets in another order than the CPU and skips some, and still finds that
// argmin: every cloud is sorted along a Morton curve of a grid of cells over the pair's bounding box
// (a counting sort through the same CSR kernels as the backward), so that runs of 32 sorted points
// (chunks) have small bounding boxes; a warp skips a chunk when the distance between its sources' box
// and the chunk's box, rounded down, exceeds every source's best key so far plus a bound on the key's
// rounding error (ChamferParams::pair_x2): such a chunk holds no key below or equal to a best. Ties
// between chunks are settled on the original index. No float atomics except in the atomic backward.
//
// LAUNCH CONTRACTS (ChamferParams by value, dynamic smem 0, static smem below 48 KiB):
//   chamfer_bounds        any grid, 256 threads: the pairs' bounding boxes into bounds (its lo keys set
//                         to 0xffffffff and its hi keys to 0 first).
//   chamfer_center        any grid, 256 threads: centres, extents; zeroes pair_x2.
//   chamfer_cell_count    any grid, 256 threads: counts (cells, zeroed first) += the points of each cell.
//   the scan below with rows = cells, then chamfer_cell_place (any grid, 256: perm), chamfer_csr_sort with
//     rows = cells, sources = perm (each cell's points in row order), then
//   chamfer_prep          any grid, 256 threads: the centred rows in sorted order.
//   chamfer_boxes         block (256,1,1), any grid: one warp per group (a lane per chunk); chunk and group
//                         boxes, pair_x2.
//   chamfer_nearest_d{1..8} block (ChamferThreads(D),1,1), any grid: one unit (kChamferUnit sources) per
//                         warp; warps stride over units. Writes each source's best key and argmin.
//   chamfer_finalize      any grid, 256 threads: the distances of the chosen neighbours; -1 / +inf for
//                         an empty target cloud.
//   backward (CSR): chamfer_csr_count (any grid, 256 threads; counts zeroed first) -> chamfer_scan_local
//     block (1024,1,1), grid (ceil(rows / 1024),1,1) -> chamfer_scan_sums block (1024,1,1), grid (1,1,1)
//     -> chamfer_scan_add block (1024,1,1), grid (ceil(rows / 1024),1,1) (also resets counts to 0) ->
//     chamfer_csr_fill (any grid, 256) -> chamfer_csr_sort (any grid, 256: one thread per row, heap sort)
//     -> chamfer_grad (any grid, 256: one thread per row).
//   chamfer_grad_atomic   any grid, 256 threads; dp / dq zeroed first. NOT deterministic.
#include <stdint.h>

#include "maxsim_chamfer_params.h"
#include "maxsim_scan.cuh"

namespace maxsim_chamfer {

constexpr int kChunk = static_cast<int>(kChamferChunk);
constexpr int kGroup = 4;                     // targets loaded from shared memory at once
constexpr unsigned kFull = 0xffffffffu;
constexpr uint32_t kNone = 0xffffffffu;
static_assert(kChunk == 32 && kChamferGroup == 32 * kChamferChunk, "a lane per target of a chunk, per chunk of a group");

__device__ inline int64_t Stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }
__device__ inline int64_t Tid() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline float Inf() { return __int_as_float(0x7f800000); }

// The pair of compact point g: the largest b with off[b] <= g (off ascending, off[0] = 0).
__device__ inline int64_t PairOf(const int64_t* off, int64_t num_pairs, int64_t g) {
  int64_t lo = 0, hi = num_pairs - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) >> 1;
    if (off[mid] <= g) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// The cloud (index into clouds) whose [base, next base) range of `field` holds x.
__device__ inline int64_t CloudOf(const int64_t* clouds, int64_t num_clouds, int field, int64_t x) {
  int64_t lo = 0, hi = num_clouds - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) >> 1;
    if (clouds[mid * 4 + field] <= x) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Floats as unsigned keys in the floats' order (-0 below +0), for atomicMin / atomicMax.
__device__ inline uint32_t OrderedKey(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}
__device__ inline float FromOrderedKey(uint32_t k) { return __uint_as_float((k & 0x80000000u) != 0 ? (k & 0x7fffffffu) : ~k); }

// Each warp folds a run of kChamferBoundsRun rows into running bounds per axis (NaN left out: the CPU's
// std::min / std::max never take one), 32 rows at a time, and adds them to its pair's bounds with
// atomics when the pair changes (per row where a slice straddles two pairs).
__device__ void Bounds(const ChamferParams& p) {
  const int d = p.dim;
  const int lane = threadIdx.x & 31;
  const int64_t T = p.tp + p.tq;
  for (int64_t w = Tid() >> 5; w * kChamferBoundsRun < T; w += Stride() >> 5) {
    const int64_t stop = (w + 1) * kChamferBoundsRun < T ? (w + 1) * kChamferBoundsRun : T;
    float lo[8], hi[8];
    for (int k = 0; k < 8; k++) {
      lo[k] = Inf();
      hi[k] = -Inf();
    }
    int64_t cur = -1;  // the pair the running bounds belong to
    for (int64_t base = w * kChamferBoundsRun;; base += 32) {
      const bool done = base >= stop;
      const int64_t g = base + lane;
      const bool valid = !done && g < stop;
      const bool is_q = g >= p.tp;
      const int64_t b = valid ? PairOf(is_q ? p.q_off : p.p_off, p.num_pairs, is_q ? g - p.tp : g) : -1;
      const int64_t b0 = __shfl_sync(kFull, b, 0);
      const bool uniform = !done && __all_sync(kFull, !valid || b == b0);
      if (done || !uniform || b0 != cur) {
        if (cur >= 0) {
          for (int k = 0; k < d; k++) {
            for (int o = 16; o > 0; o >>= 1) {
              lo[k] = fminf(lo[k], __shfl_xor_sync(kFull, lo[k], o));
              hi[k] = fmaxf(hi[k], __shfl_xor_sync(kFull, hi[k], o));
            }
            if (lane == 0 && lo[k] <= hi[k]) {
              atomicMin(&p.bounds[cur * d + k], OrderedKey(lo[k]));
              atomicMax(&p.bounds[(p.num_pairs + cur) * d + k], OrderedKey(hi[k]));
            }
            lo[k] = Inf();
            hi[k] = -Inf();
          }
        }
        cur = uniform ? b0 : -1;
      }
      if (done) break;
      if (!valid) continue;
      const float* r = (is_q ? p.q_raw : p.p_raw) + (is_q ? g - p.tp : g) * d;
      for (int k = 0; k < d; k++) {
        const float v = r[k];
        if (v != v) continue;
        if (uniform) {
          lo[k] = fminf(lo[k], v);
          hi[k] = fmaxf(hi[k], v);
        } else {
          atomicMin(&p.bounds[b * d + k], OrderedKey(v));
          atomicMax(&p.bounds[(p.num_pairs + b) * d + k], OrderedKey(v));
        }
      }
    }
  }
}

// One thread per pair: the centre (the midpoint of the bounding box, as the CPU computes it; 0 on an
// axis without finite bounds), the cells' extent, and pair_x2 reset for chamfer_boxes.
__device__ void Center(const ChamferParams& p) {
  const int d = p.dim;
  for (int64_t b = Tid(); b < p.num_pairs; b += Stride()) {
    float e = 0.0f;  // only shapes the cells: any value sorts correctly
    for (int k = 0; k < d; k++) {
      const float l = FromOrderedKey(p.bounds[b * d + k]), h = FromOrderedKey(p.bounds[(p.num_pairs + b) * d + k]);
      const bool finite = isfinite(l) && isfinite(h);
      p.centers[b * d + k] = finite ? __fadd_rn(__fmul_rn(l, 0.5f), __fmul_rn(h, 0.5f)) : 0.0f;
      if (finite) e = fmaxf(e, (h - l) * 0.5f);
    }
    p.extent[b] = isfinite(e) ? e : 0.0f;
    p.pair_x2[b] = 0u;
  }
}

// Row g's cell: its centred coordinates on a grid of 2^L cells per axis over the pair's box, the axes'
// bits interleaved (a Morton code), after its cloud's first cell. NaN lands in cell 0 of its axis.
__device__ inline uint32_t CellOf(const ChamferParams& p, int64_t g) {
  const int d = p.dim;
  const bool is_q = g >= p.tp;
  const int64_t i = is_q ? g - p.tp : g;
  const int64_t b = PairOf(is_q ? p.q_off : p.p_off, p.num_pairs, i);
  const int64_t* cloud = p.clouds + ((is_q ? p.num_pairs : 0) + b) * 4;
  const int L = static_cast<int>(cloud[1]);
  const float H = p.extent[b];
  uint32_t code = 0;
  if (L > 0 && H > 0.0f) {
    const float* r = (is_q ? p.q_raw : p.p_raw) + i * d;
    const int cells = 1 << L;
    const float scale = static_cast<float>(cells) / (2.0f * H);
    for (int k = 0; k < d; k++) {
      const float t = (__fsub_rn(r[k], p.centers[b * d + k]) + H) * scale;
      const int c = t >= 0.0f ? (t < static_cast<float>(cells) ? static_cast<int>(t) : cells - 1) : 0;
      for (int bit = 0; bit < L; bit++) code |= static_cast<uint32_t>((c >> bit) & 1) << (bit * d + k);
    }
  }
  return static_cast<uint32_t>(cloud[0]) + code;
}

__device__ void CellCount(const ChamferParams& p) {
  for (int64_t g = Tid(); g < p.tp + p.tq; g += Stride()) atomicAdd(&p.counts[CellOf(p, g)], 1u);
}

// After the scan over cells, a cell's offset is a sorted position: the cells run cloud by cloud in row
// order, so every cloud keeps its own rows' range.
__device__ void CellPlace(const ChamferParams& p) {
  for (int64_t g = Tid(); g < p.tp + p.tq; g += Stride()) {
    const uint32_t c = CellOf(p, g);
    p.perm[p.offsets[c] + atomicAdd(&p.counts[c], 1u)] = static_cast<uint32_t>(g);
  }
}

// Sorted position s: the centred row of perm[s] and its |x - c|^2.
__device__ void Prep(const ChamferParams& p) {
  const int d = p.dim;
  const int64_t S = d + 1;
  for (int64_t s = Tid(); s < p.tp + p.tq; s += Stride()) {
    const int64_t g = p.perm[s];
    const bool is_q = g >= p.tp;
    const int64_t i = is_q ? g - p.tp : g;
    const int64_t b = PairOf(is_q ? p.q_off : p.p_off, p.num_pairs, i);
    const float* r = (is_q ? p.q_raw : p.p_raw) + i * d;
    float* o = p.p_cen + s * S;
    float sq = 0.0f;
    for (int k = 0; k < d; k++) {
      const float v = __fsub_rn(r[k], p.centers[b * d + k]);
      o[k] = v;
      sq = __fadd_rn(sq, __fmul_rn(v, v));
    }
    o[d] = sq;
  }
}

// One warp per group of kChamferGroup sorted points, a lane per chunk of 32: the chunks' boxes (NaN
// coordinates left out: a NaN key never wins), the group's box, and the pair's largest |x|^2.
__device__ void Boxes(const ChamferParams& p) {
  const int d = p.dim;
  const int64_t S = d + 1;
  const int lane = threadIdx.x & 31;
  const int64_t clouds = 2 * p.num_pairs;
  const int64_t groups = p.clouds[clouds * 4 + 3];  // the table's closing row: the totals
  for (int64_t grp = Tid() >> 5; grp < groups; grp += Stride() >> 5) {
    const int64_t c = CloudOf(p.clouds, clouds, 3, grp);
    const bool is_q = c >= p.num_pairs;
    const int64_t b = is_q ? c - p.num_pairs : c;
    const int64_t* off = is_q ? p.q_off : p.p_off;
    const int64_t first = (is_q ? p.tp : 0) + off[b], n = off[b + 1] - off[b];
    const int64_t chunk = (grp - p.clouds[c * 4 + 3]) * 32 + lane;  // within the cloud
    float lo[8], hi[8], x2 = 0.0f;
    for (int k = 0; k < 8; k++) {
      lo[k] = Inf();
      hi[k] = -Inf();
    }
    for (int64_t j = chunk * kChunk; j < n && j < (chunk + 1) * kChunk; j++) {
      const float* r = p.p_cen + (first + j) * S;
      for (int k = 0; k < d; k++) {
        lo[k] = fminf(lo[k], r[k]);
        hi[k] = fmaxf(hi[k], r[k]);
      }
      x2 = fmaxf(x2, r[d]);
    }
    if (chunk * kChunk < n) {
      float* box = p.boxes + (p.clouds[c * 4 + 2] + chunk) * 2 * d;
      for (int k = 0; k < d; k++) {
        box[k] = lo[k];
        box[d + k] = hi[k];
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      for (int k = 0; k < d; k++) {
        lo[k] = fminf(lo[k], __shfl_xor_sync(kFull, lo[k], o));
        hi[k] = fmaxf(hi[k], __shfl_xor_sync(kFull, hi[k], o));
      }
      x2 = fmaxf(x2, __shfl_xor_sync(kFull, x2, o));
    }
    if (lane == 0) {
      float* box = p.boxes + (p.num_chunks + grp) * 2 * d;
      for (int k = 0; k < d; k++) {
        box[k] = lo[k];
        box[d + k] = hi[k];
      }
      atomicMax(&p.pair_x2[b], __float_as_uint(x2));  // x2 >= 0 or +inf: its bits order as the floats
    }
  }
}

// A lower bound of |x - y|^2 over x in [lo, hi] and y in box (lo then hi), rounded down; +inf when
// either box is empty (lo = +inf, hi = -inf).
template <int D>
__device__ __forceinline__ float BoxGap(const float (&lo)[D], const float (&hi)[D], const float* box) {
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < D; k++) {
    const float g = fmaxf(0.0f, fmaxf(__fsub_rd(box[k], hi[k]), __fsub_rd(lo[k], box[D + k])));
    s = __fadd_rd(s, __fmul_rd(g, g));
  }
  return s;
}

// The warp's smallest (value, index), NaN as +inf; ties to the lower index.
__device__ __forceinline__ void WarpArgMin(float& v, int& i) {
  if (v != v) v = Inf();
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(kFull, v, o);
    const int j = __shfl_xor_sync(kFull, i, o);
    if (w < v || (w == v && j < i)) {
      v = w;
      i = j;
    }
  }
}

// The search keys of one target (its centred coordinates and |q|^2 in float4s) against the lane's
// sources, folded into their running minima.
template <int D, int V, int kRows = ChamferRows(D)>
__device__ __forceinline__ void KeyMin(const float4 (&a)[V], const float (&pm2)[kRows][D], float (&mn)[kRows]) {
  float c[4 * V];
#pragma unroll
  for (int v = 0; v < V; v++) {
    c[v * 4] = a[v].x;
    c[v * 4 + 1] = a[v].y;
    c[v * 4 + 2] = a[v].z;
    c[v * 4 + 3] = a[v].w;
  }
#pragma unroll
  for (int r = 0; r < kRows; r++) {
    float acc = c[D];
#pragma unroll
    for (int k = 0; k < D; k++) acc = fmaf(pm2[r][k], c[k], acc);
    mn[r] = fminf(mn[r], acc);
  }
}

// The lowest row among the targets at sorted positions [first, first + n) whose key against the
// source at sorted position src equals `key` (kNone if none), the key recomputed as in KeyMin (-2p
// from the source's row: exact).
template <int D>
__device__ __forceinline__ uint32_t LowestAt(const float* cen, const uint32_t* perm, int64_t first, int64_t n, int64_t src, float key) {
  float pm2[D];
#pragma unroll
  for (int k = 0; k < D; k++) pm2[k] = -2.0f * cen[src * (D + 1) + k];
  uint32_t low = kNone;
  for (int64_t j = first; j < first + n; j++) {
    const float* row = cen + j * (D + 1);
    float acc = row[D];
#pragma unroll
    for (int k = 0; k < D; k++) acc = fmaf(pm2[k], row[k], acc);
    if (acc == key) low = min(low, perm[j]);
  }
  return low;
}

// One unit per warp: kChamferUnit consecutive sorted sources of one cloud (kRows per lane) against
// the target cloud, a chunk of 32 targets at a time through the warp's shared-memory slot. The hot loop
// keeps only a running minimum per chunk (D FMAs and one min per pair); a chunk that beats a source's
// best records where it starts, one that ties it is settled at once on the lowest original index,
// and at the end the winning chunk is searched again for that index.
// Order: first the chunk nearest the centre of the sources' box (in the group nearest it), so that the
// bound is tight early; then every group and chunk whose box is not provably too far.
template <int D>
__device__ void Nearest(const ChamferParams& p) {
  constexpr int kRows = ChamferRows(D);
  constexpr int kWarps = ChamferThreads(D) / 32;
  constexpr int S = D + 1;
  constexpr int V = (S + 3) / 4;  // float4s per staged target
  static_assert(kRows * 32 == kChamferUnit, "a unit is a warp's sources");
  __shared__ float4 tgt[kWarps][kChunk * V];
  // Per source, the best key so far and the sorted position of its chunk: touched once per chunk, so
  // they live in shared memory and leave the registers to the hot loop.
  __shared__ float best[kWarps][kRows][32];
  __shared__ uint32_t win[kWarps][kRows][32];
  // |p|^2 per source (-inf: no bound from it), and the box of the warp's sources (lo, then hi)
  __shared__ float src2[kWarps][kRows][32];
  // per source, best + |p|^2 + err (or a seed's key in place of best): a chunk farther is of no use to it
  __shared__ float rbound[kWarps][kRows][32];
  __shared__ float sbox[kWarps][2 * D];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float inf = Inf();
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * kWarps + warp; u < p.num_units; u += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t* t = p.units + u * 3;
    const bool fwd = t[0] == 0;
    const int64_t b = t[1], begin = t[2];
    const int64_t* s_off = fwd ? p.p_off : p.q_off;
    const int64_t* t_off = fwd ? p.q_off : p.p_off;
    const int64_t so = (fwd ? 0 : p.tp) + s_off[b], n = s_off[b + 1] - s_off[b];
    const int64_t to = (fwd ? p.tp : 0) + t_off[b], m = t_off[b + 1] - t_off[b];
    const int64_t* tcloud = p.clouds + ((fwd ? p.num_pairs : 0) + b) * 4;
    const float* chunk_box = p.boxes + tcloud[2] * 2 * D;
    const float* group_box = p.boxes + (p.num_chunks + tcloud[3]) * 2 * D;
    // within a cloud of fewer than 2^32 points, chunk and group indices fit 32 bits
    const int chunks = static_cast<int>((m + kChunk - 1) / kChunk), groups = static_cast<int>((m + kChamferGroup - 1) / kChamferGroup);

    float pm2[kRows][D];
    float lo[D], hi[D];
#pragma unroll
    for (int k = 0; k < D; k++) {
      lo[k] = inf;
      hi[k] = -inf;
    }
#pragma unroll
    for (int r = 0; r < kRows; r++) {
      const int64_t i = begin + lane + r * 32;
      const float* row = p.p_cen + (so + i) * S;
#pragma unroll
      for (int k = 0; k < D; k++) {
        const float x = i < n ? row[k] : 0.0f;
        pm2[r][k] = -2.0f * x;
        if (i < n) {
          lo[k] = fminf(lo[k], x);
          hi[k] = fmaxf(hi[k], x);
        }
      }
      // -inf: no bound from this row (padding, or a NaN coordinate: its keys are NaN and never win)
      src2[warp][r][lane] = i < n && row[D] == row[D] ? row[D] : -inf;
      best[warp][r][lane] = inf;
      win[warp][r][lane] = kNone;
    }
#pragma unroll
    for (int k = 0; k < D; k++) {
      for (int o = 16; o > 0; o >>= 1) {
        lo[k] = fminf(lo[k], __shfl_xor_sync(kFull, lo[k], o));
        hi[k] = fmaxf(hi[k], __shfl_xor_sync(kFull, hi[k], o));
      }
      sbox[warp][k] = lo[k];  // every lane writes the same values
      sbox[warp][D + k] = hi[k];
    }
    const float(&wlo)[D] = *reinterpret_cast<const float(*)[D]>(&sbox[warp][0]);
    const float(&whi)[D] = *reinterpret_cast<const float(*)[D]>(&sbox[warp][D]);
    // The keys' rounding error is below (5d / 16) 2^-20 X2 for centred norms up to X2 (the chain of d
    // FMAs from a rounded |q|^2, and the rounding of |p|^2 in the bound): d 2^-20 X2 leaves a margin.
    const float err = __fmul_ru(__uint_as_float(p.pair_x2[b]), static_cast<float>(D) * 9.5367432e-7f * 1.001f);
    // Seeds: each source's key to the few targets sorted where its own cell falls in the target cloud's
    // order (the cells' CSR offsets; a Morton code keeps its prefix from a finer grid to a coarser
    // one), so that every source has a bound before the first chunk
    const int64_t* scloud = p.clouds + ((fwd ? 0 : p.num_pairs) + b) * 4;
#pragma unroll 1
    for (int r = 0; r < kRows; r++) {
      const int64_t i = begin + lane + r * 32;
      float rb = -inf;
      const float p2 = src2[warp][r][lane];
      if (p2 != -inf) {
        const uint32_t code = CellOf(p, p.perm[so + i]) - static_cast<uint32_t>(scloud[0]);
        const int ls = static_cast<int>(scloud[1]), lt = static_cast<int>(tcloud[1]);
        const uint32_t tcode = ls >= lt ? code >> ((ls - lt) * D) : code << ((lt - ls) * D);
        int64_t at = p.offsets[tcloud[0] + tcode];  // a sorted position (of this or a later cloud)
        at = at < to + 4 ? to : (at > to + m - 4 ? to + m - 8 : at - 4);
        float seed = inf;
        for (int64_t j = at < to ? to : at; j < at + 8 && j < to + m; j++) {
          const float* row = p.p_cen + j * S;
          float acc = row[D];
#pragma unroll
          for (int k = 0; k < D; k++) acc = fmaf(-2.0f * p.p_cen[(so + i) * S + k], row[k], acc);
          seed = fminf(seed, acc);
        }
        rb = seed == -inf || seed != seed ? inf : __fadd_ru(__fadd_ru(seed, p2), err);
      }
      rbound[warp][r][lane] = rb;
    }
    float bound = -inf;  // the largest rbound: a chunk farther than this from the sources' box is skipped
#pragma unroll
    for (int r = 0; r < kRows; r++) bound = fmaxf(bound, rbound[warp][r][lane]);
    for (int o = 16; o > 0; o >>= 1) bound = fmaxf(bound, __shfl_xor_sync(kFull, bound, o));
    if (!p.prune) bound = inf;

    // The chunk nearest the centre of the sources' box, in the group nearest it
    float ctr[D];
#pragma unroll
    for (int k = 0; k < D; k++) ctr[k] = lo[k] * 0.5f + hi[k] * 0.5f;
    float hv = inf;
    int home_group = 0;
    for (int g0 = 0; g0 < groups; g0 += 32) {
      float v = g0 + lane < groups ? BoxGap<D>(ctr, ctr, group_box + static_cast<int64_t>(g0 + lane) * 2 * D) : inf;
      int i = g0 + lane;
      WarpArgMin(v, i);
      if (v < hv || g0 == 0) {
        hv = v;
        home_group = i;
      }
    }
    int home = home_group * 32 + lane;
    {
      float v = home < chunks ? BoxGap<D>(ctr, ctr, chunk_box + static_cast<int64_t>(home) * 2 * D) : inf;
      WarpArgMin(v, home);
    }

    // The home chunk, then two sweeps over the groups, a ballot per 32 groups and per group's 32 chunks
    // (a lane each): first the chunks whose boxes overlap the sources' box (there most sources find
    // their neighbour, so the bound tightens early), then every other chunk not provably too far, each
    // tested again just before its turn. One loop with one visit site: uniform control flow, no calls.
    int c = home, g0 = -32, sweep = 0;
    uint32_t gm = 0, cm = 0;
    int gl = 0;
    float lg = inf, lc = inf;
    while (c >= 0) {
      const int64_t s0 = to + static_cast<int64_t>(c) * kChunk;
      const int cnt = static_cast<int>(to + m - s0 < kChunk ? to + m - s0 : kChunk);
      __syncwarp();  // the previous chunk is consumed
      if constexpr (S % 4 == 0) {  // rows of whole float4s (d = 3, 7): vector loads
#pragma unroll
        for (int v = 0; v < V; v++) {
          // past the cloud's end: |q|^2 = +inf, a key that never wins
          tgt[warp][lane * V + v] = lane < cnt ? reinterpret_cast<const float4*>(p.p_cen + (s0 + lane) * S)[v]
                                               : make_float4(0.0f, 0.0f, 0.0f, v == V - 1 ? inf : 0.0f);
        }
      } else {
#pragma unroll
        for (int v = 0; v < V; v++) {
          float x[4];
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int k = v * 4 + e;
            x[e] = lane < cnt ? (k < S ? p.p_cen[(s0 + lane) * S + k] : 0.0f) : (k == D ? inf : 0.0f);
          }
          tgt[warp][lane * V + v] = make_float4(x[0], x[1], x[2], x[3]);
        }
      }
      __syncwarp();
      float mn[kRows];
#pragma unroll
      for (int r = 0; r < kRows; r++) mn[r] = inf;
      for (int j0 = 0; j0 < kChunk; j0 += kGroup) {
        // kGroup targets' loads issued before their math: the shared-memory latency paid once per group
        float4 a[kGroup][V];
#pragma unroll
        for (int e = 0; e < kGroup; e++) {
#pragma unroll
          for (int v = 0; v < V; v++) a[e][v] = tgt[warp][(j0 + e) * V + v];
        }
#pragma unroll
        for (int e = 0; e < kGroup; e++) KeyMin<D, V>(a[e], pm2, mn);
      }
      float x = -inf;  // the new bound
      uint32_t ties = 0;
#pragma unroll
      for (int r = 0; r < kRows; r++) {
        float k = best[warp][r][lane];
        if (mn[r] < k) {
          k = mn[r];
          best[warp][r][lane] = k;
          win[warp][r][lane] = static_cast<uint32_t>(s0);
        } else if (mn[r] == k && win[warp][r][lane] != kNone) {
          ties |= 1u << r;
        }
        const float p2 = src2[warp][r][lane];
        if (p2 != -inf) {
          const float rb = fminf(rbound[warp][r][lane], k == -inf ? inf : __fadd_ru(__fadd_ru(k, p2), err));
          rbound[warp][r][lane] = rb;
          x = fmaxf(x, rb);
        }
      }
      // An exact tie with an earlier chunk (duplicates, lattices): keep the chunk holding the lower row.
      // Rare; a loop over the rows rather than unrolled, which keeps its registers out of the hot loop's.
#pragma unroll 1
      for (int r = 0; ties != 0; r++, ties >>= 1) {
        if ((ties & 1u) == 0) continue;
        const int64_t w = win[warp][r][lane], src = so + begin + lane + r * 32;
        const float k = best[warp][r][lane];
        if (LowestAt<D>(p.p_cen, p.perm, s0, cnt, src, k) < LowestAt<D>(p.p_cen, p.perm, w, to + m - w < kChunk ? to + m - w : kChunk, src, k)) {
          win[warp][r][lane] = static_cast<uint32_t>(s0);
        }
      }
      if (p.prune) {
        for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(kFull, x, o));
        bound = x;
      }
      // the next chunk to visit, or -1
      c = -1;
      while (c < 0) {
        if (cm != 0) {
          const int cl = __ffs(cm) - 1;
          cm &= cm - 1;
          if (__shfl_sync(kFull, lc, cl) > bound) continue;
          // the chunk's box against each source's own bound: visited when some source may gain from it
          const int cn = (g0 + gl) * 32 + cl;
          const float* box = chunk_box + static_cast<int64_t>(cn) * 2 * D;
          bool need = !p.prune;
#pragma unroll
          for (int r = 0; r < kRows; r++) {
            float gap = 0.0f;
#pragma unroll
            for (int k = 0; k < D; k++) {
              const float x = -0.5f * pm2[r][k];
              const float g = fmaxf(0.0f, fmaxf(__fsub_rd(box[k], x), __fsub_rd(x, box[D + k])));
              gap = __fadd_rd(gap, __fmul_rd(g, g));
            }
            need = need || !(gap > rbound[warp][r][lane]);
          }
          if (__any_sync(kFull, need)) c = cn;
        } else if (gm != 0) {
          gl = __ffs(gm) - 1;
          gm &= gm - 1;
          if (__shfl_sync(kFull, lg, gl) > bound) continue;  // the bound has tightened since
          const int cc = (g0 + gl) * 32 + lane;
          const bool valid = cc < chunks && cc != home;
          lc = valid ? BoxGap<D>(wlo, whi, chunk_box + static_cast<int64_t>(cc) * 2 * D) : inf;
          // the first sweep takes the overlapping chunks, the second the others (a NaN gap: the second)
          cm = __ballot_sync(kFull, valid && (sweep == 0 ? lc <= 0.0f : !(lc <= 0.0f) && !(lc > bound)));
        } else {
          g0 += 32;
          if (g0 >= groups) {
            if (sweep == 1) break;
            sweep = 1;
            g0 = -32;
            continue;
          }
          lg = g0 + lane < groups ? BoxGap<D>(wlo, whi, group_box + static_cast<int64_t>(g0 + lane) * 2 * D) : inf;
          gm = __ballot_sync(kFull, g0 + lane < groups && (sweep == 0 ? lg <= 0.0f : !(lg > bound)));
        }
      }
    }

#pragma unroll 1
    for (int r = 0; r < kRows; r++) {
      const int64_t i = begin + lane + r * 32;
      if (i >= n) continue;
      int32_t arg = 0;  // no key below +inf: the strict-< scan keeps its initial index
      const int64_t w = win[warp][r][lane];
      const float key = best[warp][r][lane];
      if (w != kNone) {
        const uint32_t low = LowestAt<D>(p.p_cen, p.perm, w, to + m - w < kChunk ? to + m - w : kChunk, so + i, key);
        arg = static_cast<int32_t>(static_cast<int64_t>(low) - to);
      }
      const int64_t src = p.perm[so + i];  // a row: idx_pq / dist_pq run on into idx_qp / dist_qp
      p.dist_pq[src] = key;
      p.idx_pq[src] = arg;
    }
  }
}

// One thread per source row: the distance of the chosen neighbour from the raw coordinates in double,
// rounded once; an empty target cloud gives -1 / +inf.
__device__ void Finalize(const ChamferParams& p) {
  const int d = p.dim;
  const int64_t sources = p.bidirectional ? p.tp + p.tq : p.tp;
  for (int64_t g = Tid(); g < sources; g += Stride()) {
    const bool fwd = g < p.tp;
    const int64_t i = fwd ? g : g - p.tp;
    const int64_t b = PairOf(fwd ? p.p_off : p.q_off, p.num_pairs, i);
    const int64_t* t_off = fwd ? p.q_off : p.p_off;
    const int64_t to = t_off[b], m = t_off[b + 1] - to;
    int32_t* idx_out = fwd ? p.idx_pq + i : p.idx_qp + i;
    float* dist_out = fwd ? p.dist_pq + i : p.dist_qp + i;
    if (m == 0) {
      *idx_out = -1;
      *dist_out = Inf();
      continue;
    }
    const int32_t arg = *idx_out;
    const float* x = (fwd ? p.p_raw : p.q_raw) + i * d;
    const float* y = (fwd ? p.q_raw : p.p_raw) + (to + arg) * d;
    double sum = 0.0;
    for (int k = 0; k < d; k++) {
      const double t = __dsub_rn(static_cast<double>(x[k]), static_cast<double>(y[k]));
      sum = __dadd_rn(sum, __dmul_rn(t, t));
    }
    *dist_out = __double2float_rn(sum);
  }
}

// ---- backward ----

// Source g's destination row, or -1 (an empty target cloud / no reverse direction).
__device__ inline int64_t DestRow(const ChamferParams& p, int64_t g) {
  if (g < p.tp) {
    const int32_t j = p.idx_pq[g];
    if (j < 0) return -1;
    return p.tp + p.q_off[PairOf(p.p_off, p.num_pairs, g)] + j;
  }
  const int64_t j = g - p.tp;
  const int32_t i = p.idx_qp[j];
  if (i < 0) return -1;
  return p.p_off[PairOf(p.q_off, p.num_pairs, j)] + i;
}

__device__ inline int64_t NumSources(const ChamferParams& p) { return p.bidirectional ? p.tp + p.tq : p.tp; }

__device__ void CsrCount(const ChamferParams& p) {
  for (int64_t g = Tid(); g < NumSources(p); g += Stride()) {
    const int64_t r = DestRow(p, g);
    if (r >= 0) atomicAdd(&p.counts[r], 1u);
  }
}

// Exclusive scan of counts into offsets, 1024 rows per block (maxsim_scan.cuh).
__device__ void ScanLocal(const ChamferParams& p) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * 1024 + threadIdx.x;
  const uint32_t v = g < p.rows ? p.counts[g] : 0u;
  uint32_t total;
  const uint32_t excl = block_exclusive_scan<1024>(v, &total);
  if (g < p.rows) p.offsets[g] = excl;
  if (threadIdx.x == 0) p.block_sums[blockIdx.x] = total;
}

// One block: block_sums become exclusive, offsets[rows] the total.
__device__ void ScanSums(const ChamferParams& p) {
  __shared__ uint32_t carry;
  const int64_t blocks = (p.rows + 1023) / 1024;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int64_t base = 0; base < blocks; base += 1024) {
    // serial within the chunk by thread 0: block counts are small (rows / 1024)
    if (threadIdx.x == 0) {
      for (int64_t i = base; i < blocks && i < base + 1024; i++) {
        const uint32_t s = p.block_sums[i];
        p.block_sums[i] = carry;
        carry += s;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) p.offsets[p.rows] = carry;
}

__device__ void ScanAdd(const ChamferParams& p) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * 1024 + threadIdx.x;
  if (g < p.rows) {
    p.offsets[g] += p.block_sums[blockIdx.x];
    p.counts[g] = 0;  // becomes the placement cursor
  }
}

__device__ void CsrFill(const ChamferParams& p) {
  for (int64_t g = Tid(); g < NumSources(p); g += Stride()) {
    const int64_t r = DestRow(p, g);
    if (r >= 0) p.sources[p.offsets[r] + atomicAdd(&p.counts[r], 1u)] = static_cast<uint32_t>(g);
  }
}

// The fill's order depends on scheduling: each row's sources are sorted ascending (heap sort in
// place, one thread per row), which fixes the gradient's summation order.
__device__ void CsrSort(const ChamferParams& p) {
  for (int64_t r = Tid(); r < p.rows; r += Stride()) {
    uint32_t* a = p.sources + p.offsets[r];
    const int64_t n = p.offsets[r + 1] - p.offsets[r];
    if (n < 2) continue;
    auto sift = [&](int64_t root, int64_t end) {
      while (2 * root + 1 < end) {
        int64_t child = 2 * root + 1;
        if (child + 1 < end && a[child] < a[child + 1]) child++;
        if (a[root] >= a[child]) return;
        const uint32_t t = a[root];
        a[root] = a[child];
        a[child] = t;
        root = child;
      }
    };
    for (int64_t s = n / 2 - 1; s >= 0; s--) sift(s, n);
    for (int64_t end = n - 1; end > 0; end--) {
      const uint32_t t = a[0];
      a[0] = a[end];
      a[end] = t;
      sift(0, end);
    }
  }
}

// One thread per gradient row: the own term through its argmin, then every source of its CSR row.
__device__ void Grad(const ChamferParams& p) {
  const int d = p.dim;
  for (int64_t r = Tid(); r < p.rows; r += Stride()) {
    const bool is_p = r < p.tp;
    const int64_t i = is_p ? r : r - p.tp;
    const float* xi = (is_p ? p.p_raw : p.q_raw) + i * d;
    const float* other = is_p ? p.q_raw : p.p_raw;
    double acc[8];
    for (int k = 0; k < d; k++) acc[k] = 0.0;
    const int32_t* own_idx = is_p ? p.idx_pq : (p.bidirectional ? p.idx_qp : nullptr);
    const double* own_w = is_p ? p.w_p : p.w_q;
    if (own_idx != nullptr && own_idx[i] >= 0 && own_w[i] != 0.0) {
      const int64_t b = PairOf(is_p ? p.p_off : p.q_off, p.num_pairs, i);
      const float* y = other + ((is_p ? p.q_off : p.p_off)[b] + own_idx[i]) * d;
      for (int k = 0; k < d; k++) acc[k] = __dadd_rn(acc[k], __dmul_rn(own_w[i], __dsub_rn(xi[k], y[k])));
    }
    for (uint32_t e = p.offsets[r]; e < p.offsets[r + 1]; e++) {
      const int64_t g = p.sources[e];
      const bool src_p = g < p.tp;
      const int64_t j = src_p ? g : g - p.tp;
      const double w = src_p ? p.w_p[j] : p.w_q[j];
      if (w == 0.0) continue;
      const float* y = other + j * d;
      for (int k = 0; k < d; k++) acc[k] = __dadd_rn(acc[k], __dmul_rn(w, __dsub_rn(xi[k], y[k])));
    }
    float* out = (is_p ? p.dp : p.dq) + i * d;
    for (int k = 0; k < d; k++) out[k] = __double2float_rn(__dmul_rn(2.0, acc[k]));
  }
}

// The comparison path: every source adds its term to its own row and subtracts it from its
// neighbour's with float atomics (order-dependent rounding).
__device__ void GradAtomic(const ChamferParams& p) {
  const int d = p.dim;
  for (int64_t g = Tid(); g < NumSources(p); g += Stride()) {
    const int64_t r = DestRow(p, g);
    if (r < 0) continue;
    const bool src_p = g < p.tp;
    const int64_t i = src_p ? g : g - p.tp;
    const double w = src_p ? p.w_p[i] : p.w_q[i];
    const float* xi = (src_p ? p.p_raw : p.q_raw) + i * d;
    const int64_t j = src_p ? r - p.tp : r;
    const float* y = (src_p ? p.q_raw : p.p_raw) + j * d;
    float* own = (src_p ? p.dp : p.dq) + i * d;
    float* nb = (src_p ? p.dq : p.dp) + j * d;
    for (int k = 0; k < d; k++) {
      const float t = static_cast<float>(2.0 * w * (static_cast<double>(xi[k]) - y[k]));
      atomicAdd(own + k, t);
      atomicAdd(nb + k, -t);
    }
  }
}

}  // namespace maxsim_chamfer

using namespace maxsim_chamfer;

extern "C" __global__ void __launch_bounds__(256) chamfer_bounds(const ChamferParams p) { Bounds(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_center(const ChamferParams p) { Center(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_cell_count(const ChamferParams p) { CellCount(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_cell_place(const ChamferParams p) { CellPlace(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_prep(const ChamferParams p) { Prep(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_boxes(const ChamferParams p) { Boxes(p); }
#define CHAMFER_NEAREST(D)                                                                                \
  extern "C" __global__ void __launch_bounds__(ChamferThreads(D), ChamferBlocksPerSm(D)) chamfer_nearest_d##D(const ChamferParams p) { \
    Nearest<D>(p);                                                                                        \
  }
CHAMFER_NEAREST(1)
CHAMFER_NEAREST(2)
CHAMFER_NEAREST(3)
CHAMFER_NEAREST(4)
CHAMFER_NEAREST(5)
CHAMFER_NEAREST(6)
CHAMFER_NEAREST(7)
CHAMFER_NEAREST(8)
static_assert(MAXSIM_CHAMFER_MAX_DIM == 8, "chamfer_nearest_d1..d8 are the point dimensions the engines take");
extern "C" __global__ void __launch_bounds__(256) chamfer_finalize(const ChamferParams p) { Finalize(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_csr_count(const ChamferParams p) { CsrCount(p); }
extern "C" __global__ void __launch_bounds__(1024) chamfer_scan_local(const ChamferParams p) { ScanLocal(p); }
extern "C" __global__ void __launch_bounds__(1024) chamfer_scan_sums(const ChamferParams p) { ScanSums(p); }
extern "C" __global__ void __launch_bounds__(1024) chamfer_scan_add(const ChamferParams p) { ScanAdd(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_csr_fill(const ChamferParams p) { CsrFill(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_csr_sort(const ChamferParams p) { CsrSort(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_grad(const ChamferParams p) { Grad(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_grad_atomic(const ChamferParams p) { GradAtomic(p); }
