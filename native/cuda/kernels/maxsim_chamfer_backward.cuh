// maxsim_chamfer_backward.cuh: the backward: the CSR of sources per destination row (count, scan, fill,
// sort) and the gradients (deterministic, or atomic).
// Included by maxsim_chamfer.cu only, after its shared helpers (namespace maxsim_chamfer: kChunk,
// Stride / Tid, PairOf, CloudOf, OrderedKey, ...); the extern "C" entry points stay in maxsim_chamfer.cu.
#pragma once

namespace maxsim_chamfer {

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
