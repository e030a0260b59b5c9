// maxsim_plaid.cu: the compressed index on the GPU, the codec and the dot tiles (native/cuda/
// plaid_engine.cc drives these; the search stages are in maxsim_plaid_search.cu).
//
// Encode (bitwise the CPU codec's, native/cpu/residual.cc): tokens x centroids dots on CUDA cores as
// one fp32 fma chain per output in k order (the CPU kernels' order), folded into 64-bit (score, id)
// keys (PlaidKey) with atomicMax, so partial bests merge in any order with the CPU's tie rule; the
// two-level assignment scores the coarse centroids (plaid_dots), picks each row's best groups
// (plaid_pick_groups), scatters rows to groups (plaid_scatter_rows) and runs the fine pass per group
// tile (plaid_assign_best); plaid_encode buckets the residuals and packs the 16-token code words.
//
// Search (a batch of queries, every stage on the device): plaid_dots (q x centroids, the CPU's
// `dots` chain), plaid_group_max / plaid_probe_floor / plaid_probe_partial / plaid_probe_merge
// (each token's nprobe best centroids, the distinct ones per query), plaid_mark / plaid_count / plaid_compact (inverted lists -> candidate
// documents, ascending), plaid_interaction (centroid interaction with the pruning threshold),
// plaid_select (exact top-n by (score desc, doc asc), radix select on the keys), plaid_residual (the
// fused decompress-MaxSim: codes decoded to weights in registers, never written out) and
// plaid_exact (MaxSim of the kept source tokens).
//
// LAUNCH CONTRACT: plaid_dots / plaid_assign_best: block PLAID_THREADS; the others as the engine
// states next to each launch.
#include "maxsim_plaid_common.cuh"

// Best (score, id) of each row over a range of centroids, merged into p.best by atomicMax.
// blockIdx.x: a tile (p.tiles: group, first slot, rows; null: rows [64 x, 64 x + 64) of all k);
// blockIdx.y: a share of the group's centroids (p.split shares).
extern "C" __global__ void __launch_bounds__(PLAID_THREADS) plaid_assign_best(const PlaidAssignParams p) {
  __shared__ __align__(16) float xs[PLAID_TILE_K][kPad];
  __shared__ __align__(16) float cs[PLAID_TILE_K][kPad];
  __shared__ int64_t rows[PLAID_TILE_M];
  __shared__ int32_t cols[PLAID_TILE_N];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  int64_t c_begin = 0, c_end = p.k;
  if (p.tiles) {
    const int32_t* t = p.tiles + blockIdx.x * 3;
    if (tid < PLAID_TILE_M) rows[tid] = tid < t[2] ? p.rows_of[t[1] + tid] : -1;
    c_begin = p.group_off[t[0]];
    c_end = p.group_off[t[0] + 1];
  } else if (tid < PLAID_TILE_M) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * PLAID_TILE_M + tid;
    rows[tid] = r < p.n ? r : -1;
  }
  const int64_t share = (c_end - c_begin + p.split - 1) / p.split;
  const int64_t s_begin = c_begin + share * blockIdx.y;
  const int64_t s_end = min(c_end, s_begin + share);
  unsigned long long best[4] = {PLAID_KEY_NONE, PLAID_KEY_NONE, PLAID_KEY_NONE, PLAID_KEY_NONE};
  for (int64_t c0 = s_begin; c0 < s_end; c0 += PLAID_TILE_N) {
    __syncthreads();
    if (tid < PLAID_TILE_N) {
      const int64_t pos = c0 + tid;
      cols[tid] = pos < s_end ? (p.members ? p.members[pos] : static_cast<int32_t>(pos)) : -1;
    }
    float acc[4][4];
    DotTile(p.x, p.dtype, p.cent, p.d, rows, cols, xs, cs, acc);
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int32_t c = cols[4 * tx + j];
      if (c < 0) continue;
      const float b = p.bias[c];
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const unsigned long long key = PlaidKey(acc[i][j] + b, c);
        best[i] = key > best[i] ? key : best[i];
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const unsigned long long b = WarpMaxKey(best[i], 16);
    const int64_t row = rows[4 * ty + i];
    if (tx == 0 && row >= 0 && b != PLAID_KEY_NONE) atomicMax(p.best + row, b);
  }
}

// All scores: out[(r / ld) * k * ld + c * ld + r % ld] = x_r . cent_c (+ bias[c] when bias is set),
// for rows r < n (blockIdx.x: 64 rows) and centroids c < k (blockIdx.y: 64 centroids). ld = 1: the
// [n][k] coarse scores; ld = LQ: the search's qc [Q][K][LQ] (stores staged through shared memory
// so that each centroid's LQ tokens go out contiguous).
extern "C" __global__ void __launch_bounds__(PLAID_THREADS) plaid_dots(const PlaidAssignParams p) {
  __shared__ __align__(16) float xs[PLAID_TILE_K][kPad];
  __shared__ __align__(16) float cs[PLAID_TILE_K][kPad];
  __shared__ float out[PLAID_TILE_N][kPad];
  __shared__ int64_t rows[PLAID_TILE_M];
  __shared__ int32_t cols[PLAID_TILE_N];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * PLAID_TILE_M;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * PLAID_TILE_N;
  if (tid < PLAID_TILE_M) rows[tid] = r0 + tid < p.n ? r0 + tid : -1;
  if (tid < PLAID_TILE_N) cols[tid] = c0 + tid < p.k ? static_cast<int32_t>(c0 + tid) : -1;
  float acc[4][4];
  DotTile(p.x, p.dtype, p.cent, p.d, rows, cols, xs, cs, acc);
#pragma unroll
  for (int j = 0; j < 4; j++) {
    const int32_t c = cols[4 * tx + j];
    const float b = (p.bias && c >= 0) ? p.bias[c] : 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) out[4 * tx + j][4 * ty + i] = p.bias ? acc[i][j] + b : acc[i][j];
  }
  __syncthreads();
  const int64_t ld = p.ld > 0 ? p.ld : 1;
  for (int e = tid; e < PLAID_TILE_M * PLAID_TILE_N; e += PLAID_THREADS) {
    const int c = e / PLAID_TILE_M, r = e % PLAID_TILE_M;
    if (rows[r] < 0 || cols[c] < 0) continue;
    const int64_t row = rows[r];
    p.scores[(row / ld) * p.k * ld + static_cast<int64_t>(cols[c]) * ld + row % ld] = out[c][r];
  }
}

// Each row's `probe` best non-empty groups by (coarse score desc, group asc): one warp per row, one
// pass over the groups per pick (the key just below the previous pick).
extern "C" __global__ void __launch_bounds__(256) plaid_pick_groups(const PlaidAssignParams p) {
  const int lane = threadIdx.x % 32;
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (row >= p.n) return;
  const float* s = p.scores + row * p.g;
  if (lane == 0)
    for (int64_t m = 0; m < p.probe; m++) p.pick[row * p.probe + m] = -1;
  __syncwarp();
  unsigned long long prev = ~0ull;
  for (int64_t m = 0; m < p.probe; m++) {
    unsigned long long b = 0;
    for (int64_t j = lane; j < p.g; j += 32) {
      if (p.group_off[j + 1] == p.group_off[j]) continue;
      const unsigned long long key = PlaidKey(s[j], static_cast<int32_t>(j));
      if (key < prev && key > b) b = key;
    }
    b = WarpMaxKey(b, 32);
    const int32_t j = b == 0 ? -1 : PlaidKeyId(b);
    if (lane == 0) {
      p.pick[row * p.probe + m] = j;
      if (j >= 0) atomicAdd(p.group_count + j, 1);
    }
    if (j < 0) break;
    prev = b;
  }
}

// Rows to the slots of their picked groups (order within a group is free: the fine pass merges by key).
extern "C" __global__ void __launch_bounds__(256) plaid_scatter_rows(const PlaidAssignParams p) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= p.n * p.probe) return;
  const int32_t j = p.pick[e];
  if (j < 0) return;
  const int32_t at = atomicAdd(p.group_cursor + j, 1);
  p.rows_out[p.group_first[j] + at] = static_cast<int32_t>(e / p.probe);
}

// One thread per (16-token block, dimension): the residual codes of the block's tokens in [first,
// first + n) packed into one word (token t at bits [t b, (t + 1) b)); the block's other bits stay 0
// (the host ors the edge blocks into the stream). Also each row's centroid id and |x - decoded|^2.
extern "C" __global__ void __launch_bounds__(256) plaid_encode(const PlaidAssignParams p) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t b0 = p.first / 16;
  const int64_t blocks = (p.first + p.n + 15) / 16 - b0;
  double err = 0.0;
  if (e < blocks * p.d) {
    const int64_t blk = e / p.d, k = e % p.d;
    const int ncut = (1 << p.bits) - 1;
    const float* cut = p.cutoffs + k * ncut;
    unsigned long long word = 0;
    for (int lane = 0; lane < 16; lane++) {
      const int64_t row = (b0 + blk) * 16 + lane - p.first;
      if (row < 0 || row >= p.n) continue;
      const int32_t cid = p.best[row] == 0 ? 0 : PlaidKeyId(p.best[row]);
      if (k == 0) p.cids[row] = cid;
      const float xv = LoadElem(p.x, p.dtype, row * p.d + k);
      const float cv = p.cent[static_cast<int64_t>(cid) * p.d + k];
      const float r = xv - cv;
      int code = 0;
      while (code < ncut && cut[code] < r) code++;
      word |= static_cast<unsigned long long>(code) << (lane * p.bits);
      const double diff = static_cast<double>(xv) - (static_cast<double>(cv) + p.tables[k * 16 + code]);
      err += diff * diff;
    }
    uint8_t* dst = p.codes + blk * p.d * 2 * p.bits + k * 2 * p.bits;
    if (p.bits == 2) *reinterpret_cast<uint32_t*>(dst) = static_cast<uint32_t>(word);
    else *reinterpret_cast<unsigned long long*>(dst) = word;
  }
  for (int o = 16; o > 0; o /= 2) err += __shfl_xor_sync(0xffffffffu, err, o);
  if (threadIdx.x % 32 == 0 && err != 0.0) atomicAdd(p.sq_error, err);
}

