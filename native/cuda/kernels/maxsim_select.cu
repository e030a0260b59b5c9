// maxsim_select.cu: top-K selection on the device (native/cuda/device_select.cc drives it), so that a
// top-K job reads back K entries per query instead of its whole score row, and the two-stage job moves
// from the int8 scan to the exact rescoring without a host round trip.
//
// Each score becomes a 64-bit key, (order-preserving bits of the score) << 32 | (0xffffffff - column),
// so one unsigned comparison ranks by score and then towards the lower column, the order of the host
// heaps (topk_heap.h, topKOfRow). +0 and -0 map to the same bits, as they compare equal there. A NaN
// has no place in that order: it gets a key above every real one, so that a row holding one keeps a
// NaN key first and the last level flags the row for the host to select instead.
//
// A block takes a chunk of 32 warps x R keys (R = 32 E, E keys per lane). Each warp sorts its R keys
// in registers (bitonic; partners in other lanes by shuffle, in the same lane by index), then the
// warps' runs are merged pairwise, keeping the best R of each pair (the larger of A[i] and B[R-1-i] is
// a bitonic sequence holding them, which a bitonic merge sorts), until warp 0 holds the chunk's best
// R. A level writes each chunk's best `keep` (<= R); levels repeat until one chunk per row is left,
// which the finish kernel reduces the same way and sorts by column.
//
// The first level of a long row streams instead (select_stream): each warp walks its span of the row
// keeping its best R keys sorted in registers and a threshold, the keep-th best so far; a lane queues
// only keys above it (min(E, 4) at most), and the warp merges the queues into its best once a lane's is full.
// After the first few merges almost every key fails the threshold, so the level costs a load and a
// compare per score instead of a sort (100,000 columns x 128 rows: the chunk level took 0.26 ms).
//
// LAUNCH CONTRACT: block (1024, 1, 1), no dynamic shared memory, `keep` <= R of the entry point.
//   maxsim_select_chunks_{scores,keys}_r{64,256}: grid (rows * chunks, 1, 1), chunk = 1024 E keys
//   maxsim_select_finish_{scores,keys}_r{64,256}: grid (rows, 1, 1), n <= 1024 E
//   maxsim_select_stream_scores_r{64,256}: block (MAXSIM_SELECT_STREAM_THREADS, 1, 1), grid
//     (rows * ceil(chunks / warps per block), 1, 1), a chunk per warp of ceil(cols / chunks) scores
//   maxsim_select_gather: block (256, 1, 1), grid covering rows * keep
#include "maxsim_select_params.h"

namespace {

using u64 = unsigned long long;
constexpr int kWarps = MAXSIM_SELECT_THREADS / 32;
constexpr int kStreamWarps = MAXSIM_SELECT_STREAM_THREADS / 32;
constexpr u64 kNaNKey = ~0ull;  // above every real key (whose top half is at most +inf's 0xff800000)

__device__ __forceinline__ u64 score_key(float s, long long column) {
  if (s != s) return kNaNKey;
  unsigned b = __float_as_uint(s);
  if (b == 0x80000000u) b = 0;  // -0 ranks as +0
  const unsigned ordered = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<u64>(ordered) << 32) | (0xffffffffu - static_cast<unsigned>(column));
}

__device__ __forceinline__ int key_column(u64 key) { return static_cast<int>(0xffffffffu - static_cast<unsigned>(key)); }

// Entry e of a row as a key: from scores (level 0) or from the keys of the level before. Past the
// row's end: 0, below every real key.
template <bool kFromScores>
__device__ __forceinline__ u64 load_key(const float* scores, const u64* keys, long long row, long long cols, long long e) {
  if (e >= cols) return 0;
  if constexpr (kFromScores) return score_key(scores[row * cols + e], e);
  return keys[row * cols + e];
}

// One compare-exchange step of a bitonic network over a warp's 32 E keys (key i = lane + 32 e):
// stage k, distance j; pairs in a k-block with (i & k) == 0 end largest first, the others smallest
// first (so every pair sorts descending once k exceeds the warp's keys).
template <int E>
__device__ __forceinline__ void bitonic_step(u64 (&x)[E], unsigned k, unsigned j, unsigned lane) {
  if (j >= 32) {
    const int je = static_cast<int>(j / 32);
#pragma unroll
    for (int e = 0; e < E; e++) {
      if ((e & je) != 0) continue;
      const bool descending = ((lane + 32u * e) & k) == 0;
      const u64 a = x[e], b = x[e + je];
      if ((a < b) == descending) {
        x[e] = b;
        x[e + je] = a;
      }
    }
  } else {
#pragma unroll
    for (int e = 0; e < E; e++) {
      const unsigned i = lane + 32u * e;
      const u64 other = __shfl_xor_sync(0xffffffffu, x[e], static_cast<int>(j));
      const bool lower = (i & j) == 0;
      const bool descending = (i & k) == 0;
      x[e] = (lower == descending) ? (x[e] > other ? x[e] : other) : (x[e] < other ? x[e] : other);
    }
  }
}

// Sorts the warp's keys, largest first.
template <int E>
__device__ __forceinline__ void warp_sort(u64 (&x)[E], unsigned lane) {
#pragma unroll
  for (unsigned k = 2; k <= 32u * E; k <<= 1) {
#pragma unroll
    for (unsigned j = k >> 1; j > 0; j >>= 1) bitonic_step<E>(x, k, j, lane);
  }
}

// The block's 1024 E keys (warp w holds its slice in x) -> warp 0's x holds the best 32 E, largest
// first. Every thread of the block must call it.
template <int E>
__device__ void block_best(u64 (&x)[E], u64* runs) {
  constexpr int R = 32 * E;
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  warp_sort<E>(x, lane);
  for (unsigned active = kWarps; active > 1; active >>= 1) {
    const unsigned half = active / 2;
    if (warp >= half && warp < active) {
#pragma unroll
      for (int e = 0; e < E; e++) runs[(warp - half) * R + lane + 32 * e] = x[e];
    }
    __syncthreads();
    if (warp < half) {
#pragma unroll
      for (int e = 0; e < E; e++) {
        const u64 other = runs[warp * R + (R - 1) - (lane + 32 * e)];
        x[e] = x[e] > other ? x[e] : other;
      }
#pragma unroll
      for (unsigned j = R / 2; j > 0; j >>= 1) bitonic_step<E>(x, 2u * R, j, lane);
    }
    __syncthreads();
  }
}

template <int E, bool kFromScores>
__device__ void select_chunks(const MaxsimSelectChunkParams& p) {
  __shared__ u64 runs[kWarps / 2 * 32 * E];
  const long long row = blockIdx.x / p.chunks, chunk = blockIdx.x % p.chunks;
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long first = chunk * (1024ll * E) + warp * (32ll * E);
  u64 x[E];
#pragma unroll
  for (int e = 0; e < E; e++) x[e] = load_key<kFromScores>(p.scores, p.keys_in, row, p.cols, first + lane + 32 * e);
  block_best<E>(x, runs);
  if (warp != 0) return;
  u64* out = p.keys_out + (row * p.chunks + chunk) * p.keep;
#pragma unroll
  for (int e = 0; e < E; e++) {
    const int i = static_cast<int>(lane) + 32 * e;
    if (i < p.keep) out[i] = x[e];
  }
}

// Merges this lane's queue q (n entries) into the warp's best R keys (sorted largest first; the top R
// of both stay, sorted) and returns the new threshold, the keep-th best. Every lane of the warp calls it.
template <int E, int Q>
__device__ __forceinline__ u64 merge_queue(u64 (&best)[E], const u64 (&q)[Q], int n, int keep, unsigned lane) {
  constexpr int R = 32 * E;
  u64 y[E];
#pragma unroll
  for (int e = 0; e < E; e++) y[e] = e < Q && e < n ? q[e < Q ? e : 0] : 0;  // q: n entries
  warp_sort<E>(y, lane);
  // best descending against y ascending (y[R - 1 - i]: lane 31 - lane, entry E - 1 - e): the larger of
  // each pair is a bitonic sequence holding the best R of both
#pragma unroll
  for (int e = 0; e < E; e++) {
    const u64 other = __shfl_sync(0xffffffffu, y[E - 1 - e], static_cast<int>(31 - lane));
    best[e] = best[e] > other ? best[e] : other;
  }
#pragma unroll
  for (unsigned j = R / 2; j > 0; j >>= 1) bitonic_step<E>(best, 2u * R, j, lane);
  // best[(keep - 1) / 32] of lane (keep - 1) % 32, by masks: a select by the runtime index becomes an
  // indexed load, which puts best in local memory
  const int at = keep - 1;
  u64 v = 0;
#pragma unroll
  for (int e = 0; e < E; e++) v |= best[e] & (0ull - static_cast<u64>(e == (at >> 5)));
  return __shfl_sync(0xffffffffu, v, at & 31);
}

template <int E>
__device__ void select_stream(const MaxsimSelectChunkParams& p) {
  constexpr int kUnroll = 4;  // loads in flight per lane
  constexpr int Q = E < 4 ? E : 4;  // a lane's queue (R = 256: 4, or its registers spill)
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long blocks_per_row = (p.chunks + kStreamWarps - 1) / kStreamWarps;
  const long long row = blockIdx.x / blocks_per_row;
  const long long chunk = (blockIdx.x % blocks_per_row) * kStreamWarps + warp;
  if (chunk >= p.chunks) return;  // the whole warp: nothing below syncs the block
  const long long span = (p.cols + p.chunks - 1) / p.chunks;
  const long long first = chunk * span, last = first + span < p.cols ? first + span : p.cols;
  const float* src = p.scores + row * p.cols;
  u64 best[E], q[Q];
#pragma unroll
  for (int e = 0; e < E; e++) best[e] = 0;
#pragma unroll
  for (int e = 0; e < Q; e++) q[e] = 0;
  int n = 0;
  u64 threshold = 0;  // below every real key: the first keys all queue
  for (long long base = first; base < last; base += 32 * kUnroll) {
    float s[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) {
      const long long c = base + 32 * u + lane;
      s[u] = c < last ? src[c] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; u++) {
      const long long c = base + 32 * u + lane;
      const u64 key = c < last ? score_key(s[u], c) : 0;
      if (key > threshold) {
        // shifted in (the newest first): an indexed store would put the queue in local memory
#pragma unroll
        for (int e = Q - 1; e > 0; e--) q[e] = q[e - 1];
        q[0] = key;
        n++;
      }
      if (__any_sync(0xffffffffu, n == Q)) {
        threshold = merge_queue<E, Q>(best, q, n, p.keep, lane);
        n = 0;
      }
    }
  }
  if (__any_sync(0xffffffffu, n > 0)) merge_queue<E, Q>(best, q, n, p.keep, lane);
  u64* out = p.keys_out + (row * p.chunks + chunk) * p.keep;
#pragma unroll
  for (int e = 0; e < E; e++) {
    const int i = static_cast<int>(lane) + 32 * e;
    if (i < p.keep) out[i] = best[e];
  }
}

template <int E, bool kFromScores>
__device__ void select_finish(const MaxsimSelectFinishParams& p) {
  __shared__ u64 runs[kWarps / 2 * 32 * E];
  const long long row = blockIdx.x;
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  u64 x[E];
#pragma unroll
  for (int e = 0; e < E; e++) x[e] = load_key<kFromScores>(p.scores, p.keys_in, row, p.n, warp * (32ll * E) + lane + 32 * e);
  block_best<E>(x, runs);
  if (warp != 0) return;
  // a NaN key ranks first: the row is the host's
  const bool nan = __shfl_sync(0xffffffffu, x[0], 0) == kNaNKey;
  if (lane == 0) p.nan_rows[row] = nan ? 1 : 0;
  // The best `keep` again, keyed by column alone (0xffffffff - column: largest first = ascending column).
#pragma unroll
  for (int e = 0; e < E; e++) {
    const int i = static_cast<int>(lane) + 32 * e;
    x[e] = i < p.keep && !nan ? static_cast<u64>(static_cast<unsigned>(x[e])) : 0;
  }
  warp_sort<E>(x, lane);
#pragma unroll
  for (int e = 0; e < E; e++) {
    const int j = static_cast<int>(lane) + 32 * e;
    if (j >= p.keep) continue;
    // key 0: a flagged row (or fewer real entries than keep, which only such a row has); its slot
    // gets column -1, an empty span and a NaN, so that nothing reads out of bounds before the host
    // redoes the row
    const bool real = x[e] != 0;
    const int column = real ? key_column(x[e]) : -1;
    const long long at = row * p.keep + j;
    p.columns[at] = column;
    if (p.picked_scores) p.picked_scores[at] = real ? p.scores_of[row * p.score_cols + column] : __int_as_float(0x7fc00000);
    if (p.view_starts) {
      p.view_starts[at] = real ? p.parent_starts[column] : 0;
      p.view_lengths[at] = real ? p.parent_lengths[column] : 0;
    }
  }
}

}  // namespace

#define MAXSIM_SELECT_ENTRIES(R, E)                                                                                   \
  extern "C" __global__ void __launch_bounds__(MAXSIM_SELECT_THREADS)                                                  \
      maxsim_select_chunks_scores_r##R(const MaxsimSelectChunkParams p) {                                              \
    select_chunks<E, true>(p);                                                                                         \
  }                                                                                                                    \
  extern "C" __global__ void __launch_bounds__(MAXSIM_SELECT_THREADS)                                                  \
      maxsim_select_chunks_keys_r##R(const MaxsimSelectChunkParams p) {                                                \
    select_chunks<E, false>(p);                                                                                        \
  }                                                                                                                    \
  extern "C" __global__ void __launch_bounds__(MAXSIM_SELECT_THREADS)                                                  \
      maxsim_select_finish_scores_r##R(const MaxsimSelectFinishParams p) {                                             \
    select_finish<E, true>(p);                                                                                         \
  }                                                                                                                    \
  extern "C" __global__ void __launch_bounds__(MAXSIM_SELECT_THREADS)                                                  \
      maxsim_select_finish_keys_r##R(const MaxsimSelectFinishParams p) {                                               \
    select_finish<E, false>(p);                                                                                        \
  }                                                                                                                    \
  extern "C" __global__ void __launch_bounds__(MAXSIM_SELECT_STREAM_THREADS, 1)                                         \
      maxsim_select_stream_scores_r##R(const MaxsimSelectChunkParams p) {                                              \
    select_stream<E>(p);                                                                                               \
  }

MAXSIM_SELECT_ENTRIES(64, 2)
MAXSIM_SELECT_ENTRIES(256, 8)

extern "C" __global__ void __launch_bounds__(256) maxsim_select_gather(const MaxsimSelectGatherParams p) {
  const long long total = p.rows * p.keep;
  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < total; i += gridDim.x * 256ll) {
    const long long row = i / p.keep;
    const long long column = p.columns ? p.columns[i] : i;
    p.out[i] = column < 0 ? __int_as_float(0x7fc00000) : p.matrix[row * p.matrix_cols + column];
  }
}
