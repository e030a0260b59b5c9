// maxsim_chamfer_grid.cuh: the preparation passes: bounds and centres of the pairs, the grid cells and
// the Morton order (count / place), the centred rows and the cell boxes.
// Included by maxsim_chamfer.cu only, after its shared helpers (namespace maxsim_chamfer: kChunk,
// Stride / Tid, PairOf, CloudOf, OrderedKey, ...); the extern "C" entry points stay in maxsim_chamfer.cu.
#pragma once

namespace maxsim_chamfer {

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

}  // namespace maxsim_chamfer
