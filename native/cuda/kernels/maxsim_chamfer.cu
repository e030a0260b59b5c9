// maxsim_chamfer.cu: nearest neighbours and the Chamfer distance between point clouds on the GPU, the
// CUDA twin of native/cpu/chamfer.cc, operation for operation, so the argmin and the distances are
// bitwise those of the CPU's FMA kernel sets (AVX2 / AVX-512):
//   - centre c of a pair = midpoint of its bounding box (c = lo * 0.5f + hi * 0.5f, separate roundings),
//     centred rows x - c and |x - c|^2 summed over k in order with separate fp32 roundings;
//   - search key |q|^2 - 2 p.q as fmaf(-2p_k, q_k, acc) over k in order from acc = |q|^2, targets in
//     ascending order, strict < (ties keep the lowest index; an all-NaN row keeps index 0);
//   - reported distance sum_k (p_k - q_k)^2 in double (separate roundings), rounded once to fp32;
//   - gradients: per row, the own term then the CSR sources in ascending order, fp64, one rounding.
// No float atomics except in the opt-in atomic backward.
//
// LAUNCH CONTRACTS (ChamferParams by value, dynamic smem 0, static smem below 48 KiB):
//   chamfer_center        block (256,1,1), grid (min(num_pairs, 2^20),1,1): blocks stride over pairs.
//   chamfer_prep          block (256,1,1), any grid: threads stride over the tp + tq points.
//   chamfer_nearest_d{1..8} block (ChamferThreads(D),1,1), grid (min(num_tiles, 2^20),1,1): one tile
//                         (kChamferTile sources x one target slice) per block; blocks stride over tiles.
//   chamfer_finalize      any grid, 256 threads: merges the slices, writes idx_* / dist_*.
//   backward (CSR): chamfer_csr_count (any grid, 256 threads; counts zeroed first) -> chamfer_scan_local
//     block (1024,1,1), grid (ceil(rows / 1024),1,1) -> chamfer_scan_sums block (1024,1,1), grid (1,1,1)
//     -> chamfer_scan_add block (1024,1,1), grid (ceil(rows / 1024),1,1) (also resets counts to 0) ->
//     chamfer_csr_fill (any grid, 256) -> chamfer_csr_sort (any grid, 256: one thread per row, heap sort)
//     -> chamfer_grad (any grid, 256: one thread per row).
//   chamfer_grad_atomic   any grid, 256 threads; dp / dq zeroed first. NOT deterministic.
#include <stdint.h>

#include "maxsim_chamfer_params.h"

namespace maxsim_chamfer {

constexpr int kThreads = 256;                 // the other kernels' block
constexpr int kChunk = 256;                   // targets staged in shared memory at a time
constexpr int kSub = 32;                      // targets per running minimum (the argmin's granularity)
constexpr int kGroup = 4;                     // targets loaded from shared memory at once
static_assert(kSub % kGroup == 0 && kChunk % kSub == 0, "whole groups per sub-chunk, whole sub-chunks per chunk");

__device__ inline int64_t Stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }
__device__ inline int64_t Tid() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }

// The pair of compact point g: the largest b with off[b] <= g (off ascending, off[0] = 0).
__device__ inline int64_t PairOf(const int64_t* off, int64_t num_pairs, int64_t g) {
  int64_t lo = 0, hi = num_pairs - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) >> 1;
    if (off[mid] <= g) lo = mid; else hi = mid - 1;
  }
  return lo;
}

__device__ void Center(const ChamferParams& p) {
  __shared__ float s_lo[kThreads][8];
  __shared__ float s_hi[kThreads][8];
  const int d = p.dim;
  for (int64_t b = blockIdx.x; b < p.num_pairs; b += gridDim.x) {
    float lo[8], hi[8];
    for (int k = 0; k < 8; k++) {
      lo[k] = __int_as_float(0x7f800000);   // +inf
      hi[k] = -__int_as_float(0x7f800000);  // -inf
    }
    for (int side = 0; side < 2; side++) {
      const int64_t* off = side == 0 ? p.p_off : p.q_off;
      const float* raw = side == 0 ? p.p_raw : p.q_raw;
      for (int64_t g = off[b] + threadIdx.x; g < off[b + 1]; g += blockDim.x) {
        for (int k = 0; k < d; k++) {
          const float v = raw[g * d + k];
          // the CPU's std::min / std::max: a NaN never replaces the running bound
          lo[k] = v < lo[k] ? v : lo[k];
          hi[k] = hi[k] < v ? v : hi[k];
        }
      }
    }
    for (int k = 0; k < d; k++) {
      s_lo[threadIdx.x][k] = lo[k];
      s_hi[threadIdx.x][k] = hi[k];
    }
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) {
        for (int k = 0; k < d; k++) {
          const float a = s_lo[threadIdx.x + s][k], c = s_hi[threadIdx.x + s][k];
          s_lo[threadIdx.x][k] = a < s_lo[threadIdx.x][k] ? a : s_lo[threadIdx.x][k];
          s_hi[threadIdx.x][k] = s_hi[threadIdx.x][k] < c ? c : s_hi[threadIdx.x][k];
        }
      }
      __syncthreads();
    }
    if (threadIdx.x < d) {
      const int k = threadIdx.x;
      const float l = s_lo[0][k], h = s_hi[0][k];
      p.centers[b * d + k] = isfinite(l) && isfinite(h) ? __fadd_rn(__fmul_rn(l, 0.5f), __fmul_rn(h, 0.5f)) : 0.0f;
    }
    __syncthreads();
  }
}

__device__ void Prep(const ChamferParams& p) {
  const int d = p.dim;
  const int64_t S = d + 1;
  for (int64_t g = Tid(); g < p.tp + p.tq; g += Stride()) {
    const bool is_p = g < p.tp;
    const int64_t i = is_p ? g : g - p.tp;
    const int64_t b = PairOf(is_p ? p.p_off : p.q_off, p.num_pairs, i);
    const float* r = (is_p ? p.p_raw : p.q_raw) + i * d;
    float* o = (is_p ? p.p_cen : p.q_cen) + i * S;
    float sq = 0.0f;
    for (int k = 0; k < d; k++) {
      const float v = __fsub_rn(r[k], p.centers[b * d + k]);
      o[k] = v;
      sq = __fadd_rn(sq, __fmul_rn(v, v));
    }
    o[d] = sq;
  }
}

// The search keys of one target (its centred coordinates and |q|^2 in float4s) against the thread's
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

// One tile: up to kChamferTile sources of one pair and direction (kRows per thread, in registers)
// against one slice [t[3], t[4]) of the target cloud, staged through shared memory kChunk targets
// at a time (each padded to whole float4s: one to three vector loads per target, shared by kRows keys).
// The hot loop keeps only a running minimum per sub-chunk of kSub targets (D FMAs and one min per
// pair); a sub-chunk that beats the best so far records where it starts, and once the slice is done
// the winning sub-chunk is searched again for the first target whose key equals the minimum. That is
// the argmin of a strict-< scan (ties keep the lowest index; NaN keys never win), at a fraction of
// its instructions.
template <int D>
__device__ void Nearest(const ChamferParams& p) {
  constexpr int kRows = ChamferRows(D);
  constexpr int kChamferThreads = ChamferThreads(D);
  constexpr int S = D + 1;
  constexpr int V = (S + 3) / 4;  // float4s per staged target
  __shared__ float4 tgt[kChunk * V];
  // Per source, the best key so far and where its sub-chunk starts (a local target index): touched
  // once per sub-chunk, so they live in shared memory and leave the registers to the hot loop.
  __shared__ float best[kRows][kChamferThreads];
  __shared__ int32_t win[kRows][kChamferThreads];
  const float inf = __int_as_float(0x7f800000);
  for (int64_t tile = blockIdx.x; tile < p.num_tiles; tile += gridDim.x) {
    const int64_t* t = p.tiles + tile * 6;
    const bool fwd = t[0] == 0;
    const int64_t b = t[1], begin = t[2], tb = t[3], te = t[4], split = t[5];
    const int64_t* s_off = fwd ? p.p_off : p.q_off;
    const int64_t* t_off = fwd ? p.q_off : p.p_off;
    const int64_t so = s_off[b], n = s_off[b + 1] - so;
    const int64_t to = t_off[b];
    const float* scen = fwd ? p.p_cen : p.q_cen;
    const float* tcen = fwd ? p.q_cen : p.p_cen;
    const int64_t row0 = (fwd ? 0 : p.tp) + so;  // the sources' first row
    float pm2[kRows][D];
#pragma unroll
    for (int r = 0; r < kRows; r++) {
      const int64_t i = begin + threadIdx.x + r * kChamferThreads;
#pragma unroll
      for (int k = 0; k < D; k++) pm2[r][k] = i < n ? -2.0f * scen[(so + i) * S + k] : 0.0f;
      best[r][threadIdx.x] = inf;
      win[r][threadIdx.x] = -1;
    }
    for (int64_t c0 = tb; c0 < te; c0 += kChunk) {
      const int cn = static_cast<int>(te - c0 < kChunk ? te - c0 : kChunk);
      __syncthreads();  // the previous chunk is consumed
      for (int e = threadIdx.x; e < cn * V; e += kChamferThreads) {
        const int j = e / V, v = e % V;
        const float* row = tcen + (to + c0 + j) * S;
        float x[4];
#pragma unroll
        for (int c = 0; c < 4; c++) x[c] = v * 4 + c < S ? row[v * 4 + c] : 0.0f;
        tgt[e] = make_float4(x[0], x[1], x[2], x[3]);
      }
      __syncthreads();
      for (int sb = 0; sb < cn; sb += kSub) {
        float mn[kRows];
#pragma unroll
        for (int r = 0; r < kRows; r++) mn[r] = inf;
        if (cn - sb >= kSub) {
          // A whole sub-chunk, kGroup targets at a time, their loads issued before their math so the
          // shared-memory latency is paid once per group
          for (int j0 = 0; j0 < kSub; j0 += kGroup) {
            float4 a[kGroup][V];
#pragma unroll
            for (int u = 0; u < kGroup; u++) {
#pragma unroll
              for (int v = 0; v < V; v++) a[u][v] = tgt[(sb + j0 + u) * V + v];
            }
#pragma unroll
            for (int u = 0; u < kGroup; u++) KeyMin<D, V>(a[u], pm2, mn);
          }
        } else {
          for (int j = sb; j < cn; j++) {
            float4 a[V];
#pragma unroll
            for (int v = 0; v < V; v++) a[v] = tgt[j * V + v];
            KeyMin<D, V>(a, pm2, mn);
          }
        }
#pragma unroll
        for (int r = 0; r < kRows; r++) {
          if (mn[r] < best[r][threadIdx.x]) {
            best[r][threadIdx.x] = mn[r];
            win[r][threadIdx.x] = static_cast<int32_t>(c0 + sb);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; r++) {
      const int64_t i = begin + threadIdx.x + r * kChamferThreads;
      if (i >= n) continue;
      int32_t arg = 0;  // no key below +inf: the strict-< scan keeps its initial index
      const int32_t w = win[r][threadIdx.x];
      const float key = best[r][threadIdx.x];
      if (w >= 0) {
        const int64_t end = w + kSub < te ? w + kSub : te;
        for (int64_t j = w; j < end; j++) {
          const float* row = tcen + (to + j) * S;
          float acc = row[D];
#pragma unroll
          for (int k = 0; k < D; k++) acc = fmaf(pm2[r][k], row[k], acc);
          if (acc == key) {
            arg = static_cast<int32_t>(j);
            break;
          }
        }
      }
      const int64_t slot = split * p.rows + row0 + i;
      p.part_key[slot] = key;
      p.part_idx[slot] = arg;
    }
  }
}

// One thread per source row: the best of its splits in target order (strict <: the lowest index
// wins ties), then the distance of the chosen neighbour from the raw coordinates in double, rounded
// once. With one split part_key / part_idx are dist / idx themselves (read, then overwritten).
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
      *dist_out = __int_as_float(0x7f800000);
      continue;
    }
    float best = __int_as_float(0x7f800000);
    int32_t arg = 0;
    for (int s = 0; s < p.num_splits; s++) {
      const float key = p.part_key[s * p.rows + g];
      if (key < best) {
        best = key;
        arg = p.part_idx[s * p.rows + g];
      }
    }
    const float* x = (fwd ? p.p_raw : p.q_raw) + i * d;
    const float* y = (fwd ? p.q_raw : p.p_raw) + (to + arg) * d;
    double sum = 0.0;
    for (int k = 0; k < d; k++) {
      const double t = __dsub_rn(static_cast<double>(x[k]), static_cast<double>(y[k]));
      sum = __dadd_rn(sum, __dmul_rn(t, t));
    }
    *idx_out = arg;
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

// Exclusive scan of counts into offsets, 1024 rows per block (inclusive warp scans, then the warps').
__device__ void ScanLocal(const ChamferParams& p) {
  __shared__ uint32_t warp_tot[32];
  const int64_t g = static_cast<int64_t>(blockIdx.x) * 1024 + threadIdx.x;
  const uint32_t v = g < p.rows ? p.counts[g] : 0u;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t x = v;
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) warp_tot[warp] = x;
  __syncthreads();
  if (warp == 0) {
    uint32_t t = warp_tot[lane];
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t y = __shfl_up_sync(0xffffffffu, t, o);
      if (lane >= o) t += y;
    }
    warp_tot[lane] = t;
  }
  __syncthreads();
  const uint32_t before = warp == 0 ? 0u : warp_tot[warp - 1];
  if (g < p.rows) p.offsets[g] = before + x - v;
  if (threadIdx.x == 1023) p.block_sums[blockIdx.x] = before + x;
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

extern "C" __global__ void __launch_bounds__(256) chamfer_center(const ChamferParams p) { Center(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_prep(const ChamferParams p) { Prep(p); }
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
extern "C" __global__ void __launch_bounds__(256) chamfer_finalize(const ChamferParams p) { Finalize(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_csr_count(const ChamferParams p) { CsrCount(p); }
extern "C" __global__ void __launch_bounds__(1024) chamfer_scan_local(const ChamferParams p) { ScanLocal(p); }
extern "C" __global__ void __launch_bounds__(1024) chamfer_scan_sums(const ChamferParams p) { ScanSums(p); }
extern "C" __global__ void __launch_bounds__(1024) chamfer_scan_add(const ChamferParams p) { ScanAdd(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_csr_fill(const ChamferParams p) { CsrFill(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_csr_sort(const ChamferParams p) { CsrSort(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_grad(const ChamferParams p) { Grad(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_grad_atomic(const ChamferParams p) { GradAtomic(p); }
