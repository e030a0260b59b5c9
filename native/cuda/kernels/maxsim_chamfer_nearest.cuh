// maxsim_chamfer_nearest.cuh: the nearest-neighbour search over the cell boxes (Nearest<D>) and Finalize
// (the reported distances).
// Included by maxsim_chamfer.cu only, after its shared helpers (namespace maxsim_chamfer: kChunk,
// Stride / Tid, PairOf, CloudOf, OrderedKey, ...); the extern "C" entry points stay in maxsim_chamfer.cu.
#pragma once

namespace maxsim_chamfer {

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

}  // namespace maxsim_chamfer
