// maxsim_train_dd_gather.cuh: dD, second half: the gathers over the CSR (rows, split rows, combine) and the
// opt-in atomic scatter.
// Included by maxsim_train.cu only, after its shared helpers (namespace maxsim_train, kThreads,
// load_f32, store_am / load_am, ...); the kernels' extern "C" entry points stay in maxsim_train.cu.
#pragma once

namespace maxsim_train {

// Sums, in source order, the sources [e_begin, e_end) of the CSR (ascending (query, query token)) for
// the columns k0 + lane + 32 m into acc (fp64: acc += g * Q[q_row, k], separately rounded multiply and
// add), 32 sources' metadata per round.
template <typename T>
__device__ __forceinline__ void sum_sources(const MaxsimTrainParams& P, int64_t e_begin, int64_t e_end, int64_t k0,
                                            int lane, double (&acc)[kVec]) {
  const int64_t dim = P.dim;
  const T* __restrict__ queries = static_cast<const T*>(P.queries);
  const uint32_t stride = static_cast<uint32_t>(P.stride);
  // The next batch's source indices are loaded before this batch is summed (rows with many sources,
  // as under contention, are a serial walk: hide one round trip per batch).
  uint32_t next = e_begin + lane < e_end ? P.sources[e_begin + lane] : 0u;
  for (int64_t e0 = e_begin; e0 < e_end; e0 += 32) {
    const int64_t e = e0 + lane;
    const uint32_t slot = next;
    if (e + 32 < e_end) next = P.sources[e + 32];
    double g = 0.0;
    long long off = -1;
    if (e < e_end) {
      const uint32_t p = slot / stride;
      const uint32_t s = slot - p * stride;
      g = P.grad_scores[p];
      off = (P.query_starts[query_of(P, p)] + s) * dim;
    }
    accumulate_sources<T>(queries, off, g, static_cast<int>(e_end - e0 < 32 ? e_end - e0 : 32), k0, dim, lane, acc);
  }
}

// The metadata of CSR source slot (= p * stride + s): its weight, its query's first row and s, kept
// apart until staged (adding them at load time would wait for the load). p < 2^32: 32-bit division.
struct CsrMeta {
  double g;
  int64_t start;
  uint32_t s;
};
__device__ __forceinline__ CsrMeta csr_meta(const MaxsimTrainParams& P, uint32_t slot, bool valid, uint32_t stride) {
  CsrMeta m{0.0, 0, 0u};
  if (valid) {
    const uint32_t p = slot / stride;
    m.s = slot - p * stride;
    m.g = P.grad_scores[p];
    m.start = P.query_starts[P.pairs == 0 ? p / static_cast<uint32_t>(P.num_docs) : p];
  }
  return m;
}

// Fast path of sum_sources (source indices are u32 like the offsets): the lane's columns col + m
// (m < 4); st = the warp's 32 staging slots. Per batch b: its (row, weight) are staged, then the
// metadata of batch b + 1 (whose slot indices arrived during batch b - 1) and the slot indices of
// batch b + 2 are requested, then b is summed while they are in flight.
template <typename T>
__device__ __forceinline__ void sum_sources_vec(const MaxsimTrainParams& P, uint32_t e_begin, uint32_t e_end, int col,
                                                bool active, Src* st, int lane, double (&acc)[kVec]) {
  const int64_t dim = P.dim;
  const T* queries = static_cast<const T*>(P.queries);
  const uint32_t stride = static_cast<uint32_t>(P.stride);
  const uint32_t* sources = P.sources;
  const uint32_t e = e_begin + lane;  // no wrap: e_end + 64 < 2^32 (a block's sources are bounded)
  CsrMeta m = csr_meta(P, e < e_end ? sources[e] : 0u, e < e_end, stride);
  uint32_t slot = e + 32 < e_end ? sources[e + 32] : 0u;
  for (uint32_t e0 = e_begin; e0 < e_end; e0 += 32) {
    const int n = static_cast<int>(min(e_end - e0, 32u));
    __syncwarp();  // the previous batch is summed before its slots are overwritten
    if (lane < n) st[lane] = Src{queries + (m.start + m.s) * dim, m.g};
    __syncwarp();
    const uint32_t en = e0 + 32 + lane;  // this lane's source in the next batch
    if (e0 + 32 < e_end) {               // uniform
      m = csr_meta(P, slot, en < e_end, stride);
      slot = en + 32 < e_end ? sources[en + 32] : 0u;
    }
    accumulate_vec<T>(st, n, col, active, acc);
  }
}

// A row's sources [begin, end) and whether it is split (more than P.chunk sources).
__device__ __forceinline__ bool row_is_split(const MaxsimTrainParams& P, int64_t begin, int64_t end) {
  return end - begin > P.chunk;
}

// One warp per document row of the block: walks its segment (ascending (query, query token)) and
// writes the row once. Rows without sources are written as zeros. Split rows (more than P.chunk
// sources) are left to gather_split / combine: for a row of one chunk both definitions below agree.
//
// The value of a row (whatever the warps, the blocking or the GPU): cut its sources, in CSR order,
// into chunks of P.chunk from its first source; each chunk's sum in fp64 from +0.0 in source order;
// the chunk sums added in chunk order in fp64 (starting from the first); one rounding to fp32.
template <typename T>
__device__ __forceinline__ void gather_scalar(const MaxsimTrainParams& P) {
  const int lane = threadIdx.x & 31;
  const int64_t dim = P.dim;
  const int64_t rows = P.row_end - P.row_begin;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); w < rows; w += warps) {
    const int64_t begin = P.offsets[w * P.qblocks];
    const int64_t end = P.offsets[(w + 1) * P.qblocks];
    if (row_is_split(P, begin, end)) continue;  // uniform over the warp
    const int64_t r = P.row_begin + w;
    for (int64_t k0 = 0; k0 < dim; k0 += kChunk) {
      double acc[kVec];
#pragma unroll
      for (int m = 0; m < kVec; ++m) acc[m] = 0.0;
      sum_sources<T>(P, begin, end, k0, lane, acc);
#pragma unroll
      for (int m = 0; m < kVec; ++m) {
        const int64_t k = k0 + lane + 32 * m;
        if (k < dim) P.dd[r * dim + k] = __double2float_rn(acc[m]);
      }
    }
  }
}

template <typename T>
__device__ __forceinline__ void gather_vec(const MaxsimTrainParams& P) {
  __shared__ Src staged[kWarps][32];
  const int lane = threadIdx.x & 31;
  Src* st = staged[threadIdx.x >> 5];
  const int dim = P.dim;
  const int64_t rows = P.row_end - P.row_begin;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); w < rows; w += warps) {
    const uint32_t begin = P.offsets[w * P.qblocks];
    const uint32_t end = P.offsets[(w + 1) * P.qblocks];
    if (row_is_split(P, begin, end)) continue;  // uniform over the warp
    const int64_t r = P.row_begin + w;
    for (int k0 = 0; k0 < dim; k0 += kChunk) {
      const int col = k0 + 4 * lane;
      const bool active = col < dim;
      double acc[kVec];
#pragma unroll
      for (int m = 0; m < kVec; ++m) acc[m] = 0.0;
      sum_sources_vec<T>(P, begin, end, col, active, st, lane, acc);
      if (active) {
        store_rounded4(P.dd + r * dim + col, acc);
      }
    }
  }
}

template <typename T>
__device__ __forceinline__ void gather_body(const MaxsimTrainParams& P) {
  if ((P.dim & 3) == 0) {
    gather_vec<T>(P);
  } else {
    gather_scalar<T>(P);
  }
}

// Split rows, step 1 (one thread per row of the block): counts[r] = chunks of row r (0 when the row
// is not split). The scan kernels then turn counts into chunk_off (exclusive, chunk_off[rows] = total).
__device__ __forceinline__ void chunk_count_body(const MaxsimTrainParams& P) {
  const int64_t rows = P.row_end - P.row_begin;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = static_cast<int64_t>(P.offsets[(r + 1) * P.qblocks]) - static_cast<int64_t>(P.offsets[r * P.qblocks]);
    P.counts[r] = n > P.chunk ? static_cast<uint32_t>((n + P.chunk - 1) / P.chunk) : 0u;
  }
}

// Step 2 (one thread per row): chunk_row[c] = r for the chunks c of row r. The host bounds the
// chunks by max_chunks (sum over split rows of ceil(n / chunk) <= 2 * sources / chunk); the guard
// only keeps a wrong bound from writing out of bounds.
__device__ __forceinline__ void chunk_map_body(const MaxsimTrainParams& P) {
  const int64_t rows = P.row_end - P.row_begin;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c1 = min(static_cast<int64_t>(P.chunk_off[r + 1]), P.max_chunks);
    for (int64_t c = P.chunk_off[r]; c < c1; ++c) P.chunk_row[c] = static_cast<uint32_t>(r);
  }
}

// Step 3 (one warp per chunk): the fp64 sum of chunk c of its row over the columns [k_begin,
// k_begin + kChunk), into partials[c * kChunk + column - k_begin] (every column of the slice, also
// those >= dim: combine never stores them).
template <typename T>
__device__ __forceinline__ void gather_split_scalar(const MaxsimTrainParams& P) {
  const int lane = threadIdx.x & 31;
  const int64_t rows = P.row_end - P.row_begin;
  const int64_t total = min(static_cast<int64_t>(P.chunk_off[rows]), P.max_chunks);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); c < total; c += warps) {
    const int64_t r = P.chunk_row[c];
    const int64_t begin = P.offsets[r * P.qblocks];
    const int64_t end = P.offsets[(r + 1) * P.qblocks];
    const int64_t e_begin = begin + (c - static_cast<int64_t>(P.chunk_off[r])) * P.chunk;
    const int64_t e_end = min(end, e_begin + P.chunk);
    double acc[kVec];
#pragma unroll
    for (int m = 0; m < kVec; ++m) acc[m] = 0.0;
    sum_sources<T>(P, e_begin, e_end, P.k_begin, lane, acc);
#pragma unroll
    for (int m = 0; m < kVec; ++m) P.partials[c * kChunk + lane + 32 * m] = acc[m];
  }
}

template <typename T>
__device__ __forceinline__ void gather_split_vec(const MaxsimTrainParams& P) {
  __shared__ Src staged[kWarps][32];
  const int lane = threadIdx.x & 31;
  Src* st = staged[threadIdx.x >> 5];
  const int col = static_cast<int>(P.k_begin) + 4 * lane;
  const bool active = col < P.dim;
  const int64_t rows = P.row_end - P.row_begin;
  const int64_t total = min(static_cast<int64_t>(P.chunk_off[rows]), P.max_chunks);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); c < total; c += warps) {
    const int64_t r = P.chunk_row[c];
    const int64_t begin = P.offsets[r * P.qblocks];
    const int64_t end = P.offsets[(r + 1) * P.qblocks];
    const int64_t e_begin = begin + (c - static_cast<int64_t>(P.chunk_off[r])) * P.chunk;
    const int64_t e_end = min(end, e_begin + P.chunk);
    double acc[kVec];
#pragma unroll
    for (int m = 0; m < kVec; ++m) acc[m] = 0.0;
    sum_sources_vec<T>(P, static_cast<uint32_t>(e_begin), static_cast<uint32_t>(e_end), col, active, st, lane, acc);
    double2* out = reinterpret_cast<double2*>(P.partials + c * kChunk + 4 * lane);
    out[0] = make_double2(acc[0], acc[1]);
    out[1] = make_double2(acc[2], acc[3]);
  }
}

template <typename T>
__device__ __forceinline__ void gather_split_body(const MaxsimTrainParams& P) {
  if ((P.dim & 3) == 0) {
    gather_split_vec<T>(P);
  } else {
    gather_split_scalar<T>(P);
  }
}

// Step 4 (one warp per row of the block, lane l over the columns k_begin + 4 l + m, whatever dim: the
// partials are by column): split rows add their chunk sums in chunk order (kCombineAhead chunks'
// loads in flight) and write the columns [k_begin, k_begin + kChunk) of the row once.
constexpr int kCombineAhead = 4;
__device__ __forceinline__ void combine_body(const MaxsimTrainParams& P) {
  const int lane = threadIdx.x & 31;
  const int64_t dim = P.dim;
  const int64_t rows = P.row_end - P.row_begin;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t k = P.k_begin + 4 * lane;
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); w < rows; w += warps) {
    const int64_t c0 = P.chunk_off[w];
    const int64_t c1 = min(static_cast<int64_t>(P.chunk_off[w + 1]), P.max_chunks);
    if (c0 >= c1) continue;  // not split (uniform over the warp)
    const int64_t r = P.row_begin + w;
    const double2* part = reinterpret_cast<const double2*>(P.partials + 4 * lane);  // chunk c: part[c * kChunk / 2 + h]
    double t[kVec];
    {
      const double2 a = part[c0 * (kChunk / 2)], b = part[c0 * (kChunk / 2) + 1];
      t[0] = a.x;
      t[1] = a.y;
      t[2] = b.x;
      t[3] = b.y;
    }
    for (int64_t c = c0 + 1; c < c1; c += kCombineAhead) {
      double2 v[kCombineAhead][2];
#pragma unroll
      for (int u = 0; u < kCombineAhead; ++u) {
        if (c + u < c1) {
          v[u][0] = part[(c + u) * (kChunk / 2)];
          v[u][1] = part[(c + u) * (kChunk / 2) + 1];
        }
      }
#pragma unroll
      for (int u = 0; u < kCombineAhead; ++u) {
        if (c + u < c1) {  // uniform
          t[0] = __dadd_rn(t[0], v[u][0].x);
          t[1] = __dadd_rn(t[1], v[u][0].y);
          t[2] = __dadd_rn(t[2], v[u][1].x);
          t[3] = __dadd_rn(t[3], v[u][1].y);
        }
      }
    }
    if ((dim & 3) == 0) {
      if (k < dim) {
        *reinterpret_cast<float4*>(P.dd + r * dim + k) =
            make_float4(__double2float_rn(t[0]), __double2float_rn(t[1]), __double2float_rn(t[2]), __double2float_rn(t[3]));
      }
    } else {
#pragma unroll
      for (int m = 0; m < kVec; ++m) {
        if (k + m < dim) P.dd[r * dim + k + m] = __double2float_rn(t[m]);
      }
    }
  }
}

// ---- dD, atomic scatter (not deterministic: float atomics in arrival order) ---------------------

__device__ __forceinline__ void atomic_body(const MaxsimTrainParams& P) {
  const int lane = threadIdx.x & 31;
  const int64_t dim = P.dim;
  const int64_t total = P.num_pairs * P.stride;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t slot = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); slot < total; slot += warps) {
    const int64_t p = slot / P.stride;
    const int64_t s = slot - p * P.stride;
    const int64_t i = query_of(P, p);
    const int64_t j = doc_of(P, p);
    if (s >= P.query_lengths[i]) continue;
    const double g = P.grad_scores[p];
    const int32_t t = load_am(P, slot);
    if (g == 0.0 || t < 0 || t >= P.doc_lengths[j]) continue;
    const int64_t q_off = (P.query_starts[i] + s) * dim;
    float* out = P.dd + (P.doc_starts[j] + t) * dim;
    for (int64_t k = lane; k < dim; k += 32) {
      const float x = load_f32(P.queries, P.query_dtype, q_off + k);
      atomicAdd(out + k, __double2float_rn(__dmul_rn(g, static_cast<double>(x))));
    }
  }
}

}  // namespace maxsim_train
