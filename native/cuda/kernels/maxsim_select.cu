// maxsim_select.cu: top-K selection on the device (native/cuda/device_select.cc drives it), so that a
// top-K job reads back K entries per query instead of its whole score row, and the two-stage job moves
// from the int8 scan to the exact rescoring without a host round trip.
//
// Each score becomes a 64-bit key, (order-preserving bits of the score) << 32 | (0xffffffff - column),
// so one unsigned comparison ranks by score and then towards the lower column, the order of the host
// heaps (topk_heap.h, topKOfRow). +0 and -0 map to the same bits, as they compare equal there. A NaN
// has no place in that order: its row is flagged, and the host selects that row instead.
// A level sorts chunks of MAXSIM_SELECT_CHUNK keys (bitonic, in shared memory) and keeps each chunk's
// best `keep`; levels repeat until one chunk per row is left, which the finish kernel sorts.
//
// LAUNCH CONTRACT: block (MAXSIM_SELECT_THREADS, 1, 1), no dynamic shared memory.
//   maxsim_select_chunks_{scores,keys}: grid (rows * chunks, 1, 1)
//   maxsim_select_finish_{scores,keys}: grid (rows, 1, 1)
//   maxsim_select_gather: block (256, 1, 1), grid covering rows * keep
#include "maxsim_select_params.h"

namespace {

using u64 = unsigned long long;
constexpr int kChunk = MAXSIM_SELECT_CHUNK;
constexpr int kThreads = MAXSIM_SELECT_THREADS;
static_assert(kChunk == 2 * kThreads, "each thread sorts two entries");

__device__ __forceinline__ u64 score_key(float s, long long column) {
  unsigned b = __float_as_uint(s);
  if (b == 0x80000000u) b = 0;  // -0 ranks as +0
  const unsigned ordered = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<u64>(ordered) << 32) | (0xffffffffu - static_cast<unsigned>(column));
}

__device__ __forceinline__ int key_column(u64 key) { return static_cast<int>(0xffffffffu - static_cast<unsigned>(key)); }

// Entry e of a row as a key: from scores (level 0; a NaN flags the row and takes key 0) or from the
// keys of the level before. Past the row's end: 0, below every real key.
template <bool kFromScores>
__device__ __forceinline__ u64 load_key(const float* scores, const u64* keys, int* nan_rows, long long row, long long cols,
                                        long long e) {
  if (e >= cols) return 0;
  if constexpr (kFromScores) {
    const float s = scores[row * cols + e];
    if (s != s) {
      nan_rows[row] = 1;
      return 0;
    }
    return score_key(s, e);
  } else {
    return keys[row * cols + e];
  }
}

// Sorts the block's kChunk keys in s, largest first (bitonic network; one compare-exchange per thread
// per step).
__device__ void sort_descending(u64* s) {
  const unsigned t = threadIdx.x;
  for (unsigned k = 2; k <= kChunk; k <<= 1) {
    for (unsigned j = k >> 1; j > 0; j >>= 1) {
      const unsigned i = ((t & ~(j - 1)) << 1) | (t & (j - 1));  // the pair (i, i + j)
      const u64 a = s[i], b = s[i + j];
      const bool descending = (i & k) == 0;
      if ((a < b) == descending) {
        s[i] = b;
        s[i + j] = a;
      }
      __syncthreads();
    }
  }
}

template <bool kFromScores>
__device__ void select_chunks(const MaxsimSelectChunkParams& p) {
  __shared__ u64 s[kChunk];
  const long long row = blockIdx.x / p.chunks, chunk = blockIdx.x % p.chunks;
  const long long first = chunk * kChunk;
  for (int h = 0; h < 2; h++) {
    const int at = threadIdx.x + h * kThreads;
    s[at] = load_key<kFromScores>(p.scores, p.keys_in, p.nan_rows, row, p.cols, first + at);
  }
  __syncthreads();
  sort_descending(s);
  u64* out = p.keys_out + (row * p.chunks + chunk) * p.keep;
  for (int j = threadIdx.x; j < p.keep; j += kThreads) out[j] = s[j];
}

template <bool kFromScores>
__device__ void select_finish(const MaxsimSelectFinishParams& p) {
  __shared__ u64 s[kChunk];
  const long long row = blockIdx.x;
  for (int h = 0; h < 2; h++) {
    const int at = threadIdx.x + h * kThreads;
    s[at] = load_key<kFromScores>(p.scores, p.keys_in, p.nan_rows, row, p.n, at);
  }
  __syncthreads();
  sort_descending(s);
  // The best `keep` again, keyed by column alone (0xffffffff - column: larger first = ascending column).
  u64 mine[2];
  for (int h = 0; h < 2; h++) {
    const int at = threadIdx.x + h * kThreads;
    mine[h] = at < p.keep ? static_cast<u64>(static_cast<unsigned>(s[at])) : 0;
  }
  __syncthreads();
  for (int h = 0; h < 2; h++) s[threadIdx.x + h * kThreads] = mine[h];
  __syncthreads();
  sort_descending(s);
  for (int j = threadIdx.x; j < p.keep; j += kThreads) {
    // key 0: fewer real entries than keep, which only a flagged (NaN) row has; its slot gets column
    // -1, an empty span and a NaN, so that nothing reads out of bounds before the host redoes the row
    const bool real = s[j] != 0;
    const int column = real ? key_column(s[j]) : -1;
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

extern "C" __global__ void __launch_bounds__(kThreads) maxsim_select_chunks_scores(const MaxsimSelectChunkParams p) {
  select_chunks<true>(p);
}

extern "C" __global__ void __launch_bounds__(kThreads) maxsim_select_chunks_keys(const MaxsimSelectChunkParams p) {
  select_chunks<false>(p);
}

extern "C" __global__ void __launch_bounds__(kThreads) maxsim_select_finish_scores(const MaxsimSelectFinishParams p) {
  select_finish<true>(p);
}

extern "C" __global__ void __launch_bounds__(kThreads) maxsim_select_finish_keys(const MaxsimSelectFinishParams p) {
  select_finish<false>(p);
}

extern "C" __global__ void __launch_bounds__(256) maxsim_select_gather(const MaxsimSelectGatherParams p) {
  const long long total = p.rows * p.keep;
  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < total; i += gridDim.x * 256ll) {
    const long long row = i / p.keep;
    const long long column = p.columns ? p.columns[i] : i;
    p.out[i] = column < 0 ? __int_as_float(0x7fc00000) : p.matrix[row * p.matrix_cols + column];
  }
}
