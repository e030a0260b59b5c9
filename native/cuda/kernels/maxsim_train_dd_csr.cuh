// maxsim_train_dd_csr.cuh: dD, deterministic, first half: the CSR of sources per document token row
// (count / place walks, the three-kernel scan, contention stats).
// Included by maxsim_train.cu only, after its shared helpers (namespace maxsim_train, kThreads,
// load_f32, store_am / load_am, ...); the kernels' extern "C" entry points stay in maxsim_train.cu.
#pragma once

namespace maxsim_train {

// ---- dD, deterministic: CSR of sources per document token row, one document block at a time ------
//
// The sources of row (j, t) are the slots (p, s) with argmax[p * stride + s] == t, p a pair of
// document j with g[p] != 0. The CSR covers the rows of documents [doc_begin, doc_end) only (the host
// walks the blocks in order; every row of dD belongs to exactly one block and is written once, so the
// result does not depend on the blocking). Its cells are (row, query block): warp (j, qb) visits the
// queries of block qb in ascending order, query tokens ascending, 32 at a time (lane = s - s0);
// __match_any_sync groups the lanes with the same destination cell (within a warp's walk the cell is
// a function of the token t, so the match is on t: 32 bits) and a lane's rank in its group is the
// number of lower lanes in it. Count mode: the group's lowest lane adds the group size to the cell
// (an integer red: no round trip, and the sum does not depend on the order). Place mode: every lane
// writes its source at cursor[cell] + rank and the lowest lane advances the cursor. A cell is touched
// by its owner warp only; cells of a row are adjacent in query-block order, so each row's segment
// lists its sources in ascending (query, query token) order: the order the CPU engine sums in,
// independent of qblocks. Place mode keeps a small per-warp cache of (token, cursor) in shared memory,
// written through with every advance: under contention the same few cells come back every round, and
// a hit saves the dependent global round trip.

constexpr int kCursorSlots = 64;  // per warp, direct-mapped on t
constexpr unsigned long long kNoCursor = ~0ull;  // key t = -1: never looked up

template <bool kPlace>
__device__ __forceinline__ void walk_sources(const MaxsimTrainParams& P) {
  __shared__ unsigned long long cursor_cache[kPlace ? kWarps : 1][kCursorSlots];
  const int lane = threadIdx.x & 31;
  unsigned long long* cache = cursor_cache[kPlace ? threadIdx.x >> 5 : 0];
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t qblocks = P.qblocks;
  const int64_t units = static_cast<int64_t>(P.doc_end - P.doc_begin) * qblocks;
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); w < units; w += warps) {
    const int64_t j = P.doc_begin + w / qblocks;
    const int64_t qb = w - (j - P.doc_begin) * qblocks;
    const int ld = P.doc_lengths[j];
    if (ld <= 0) continue;  // uniform over the warp
    const int64_t row0 = P.doc_starts[j] - P.row_begin;  // block-local row of token 0
    const int64_t i_begin = P.pairs == 0 ? qb * P.qblock_size : j;
    const int64_t i_end = P.pairs == 0 ? min(static_cast<int64_t>(P.num_queries), i_begin + P.qblock_size) : j + 1;
    if (kPlace) {  // keys are tokens of this unit's document: start empty
      for (int k = lane; k < kCursorSlots; k += 32) cache[k] = kNoCursor;
      __syncwarp();
    }
    for (int64_t i = i_begin; i < i_end; ++i) {
      const int64_t p = P.pairs == 0 ? i * P.num_docs + j : i;
      const int64_t am = p * P.stride;
      // The first round's argmax (in bounds for lane < stride) goes out with g and the length.
      int32_t t_next = lane < P.stride ? load_am(P, am + lane) : -1;
      const int lq = P.query_lengths[i];
      if (P.grad_scores[p] == 0.0) continue;  // uniform
      for (int s0 = 0; s0 < lq; s0 += 32) {  // uniform trip count: all 32 lanes reach the match
        const int s = s0 + lane;
        const int32_t t_read = s < lq ? t_next : -1;
        if (s0 + 32 < lq) t_next = s + 32 < lq ? load_am(P, am + s + 32) : -1;  // in flight meanwhile
        const bool valid = t_read >= 0 && t_read < ld;
        const int32_t t = valid ? t_read : -1;
        const long long cell = static_cast<long long>((row0 + t) * qblocks + qb);  // used when valid
        const unsigned peers = __match_any_sync(kFull, t);
        const unsigned lower = peers & ((1u << lane) - 1u);
        const uint32_t rank = __popc(lower);
        const uint32_t n = __popc(peers);
        if (kPlace) {
          unsigned long long* slot = cache + (t & (kCursorSlots - 1));
          uint32_t base = 0u;
          if (valid) {
            const unsigned long long e = *slot;
            base = static_cast<uint32_t>(e >> 32) == static_cast<uint32_t>(t) ? static_cast<uint32_t>(e) : P.counts[cell];
          }
          __syncwarp();  // every lane has read the cursor before the group's leader moves it
          if (valid) {
            P.sources[base + rank] = static_cast<uint32_t>(am + s);
            if (lower == 0) {
              P.counts[cell] = base + n;  // write-through: an evicted cell is read back from here
              // Atomic so that two groups of one round mapped to one slot leave one whole entry.
              atomicExch(slot, (static_cast<unsigned long long>(static_cast<uint32_t>(t)) << 32) | (base + n));
            }
          }
          __syncwarp();  // the updates are visible to the next round's reads (possibly other lanes)
        } else if (valid && lower == 0) {
          atomicAdd(P.counts + cell, n);
        }
      }
    }
  }
}

// The same count and placement with one CTA per (document, query block) unit instead of one warp,
// for documents of at most MAXSIM_TRAIN_WALK_MAX_LENGTH tokens (the per-token state lives in shared
// memory). The unit's argmax slots in (query, query token) order, padded to the stride, are cut into
// kWalkWarps consecutive runs, one per warp; a warp walks its run query by query, 32 real query
// tokens per round. Count mode: a shared histogram of the unit's tokens, then each cell's count
// written once (no global atomics; counts need no zeroing). Place mode: each warp counts its run into
// its own histogram; per token, the warps' cursors are the cell's offset plus the counts of the lower
// warps; then each warp walks its run again and places a round's sources at its private cursors, a
// lane after the lower lanes of its round with the same token (the lanes sharing a token are found
// with one shared-memory atomicOr of lane bits per token). Each cell's segment is thus in ascending
// slot order: the same CSR, bit for bit, as walk_sources.
constexpr int kWalkWarps = MAXSIM_TRAIN_WALK_WARPS;
constexpr int kWalkThreads = 32 * kWalkWarps;
constexpr int kWalkAhead = 4;  // rounds of 32 slots whose loads a warp issues before using them

// Walks the run [f0, f1) of the unit's padded slots (queries from i_begin, document j of ld tokens):
// for every round of up to 32 real query tokens of one query with a nonzero score gradient, in slot
// order, the whole warp calls visit(t, slot) (t: the lane's document token, or -1 when the lane has no
// source; slot: its argmax slot index).
template <class Visit>
__device__ __forceinline__ void walk_run(const MaxsimTrainParams& P, int64_t i_begin, int64_t j, int ld, uint32_t f0,
                                         uint32_t f1, Visit&& visit) {
  if (f0 >= f1) return;
  const int lane = threadIdx.x & 31;
  const uint32_t stride = static_cast<uint32_t>(P.stride);
  const uint32_t q0 = f0 / stride, q1 = (f1 - 1) / stride;
  for (uint32_t q = q0; q <= q1; ++q) {  // uniform
    const int64_t i = i_begin + q;
    const int64_t p = P.pairs == 0 ? i * P.num_docs + j : i;
    if (P.grad_scores[p] == 0.0) continue;
    const uint32_t lo = q == q0 ? f0 - q * stride : 0u;
    const uint32_t hi = min(static_cast<uint32_t>(max(P.query_lengths[i], 0)), q == q1 ? f1 - q * stride : stride);
    const int64_t base = p * P.stride;  // the slots' indices are < 2^32 (the host checks): u32 sources
    for (uint32_t s = lo; s < hi; s += 32 * kWalkAhead) {
      int32_t t[kWalkAhead];
#pragma unroll
      for (int a = 0; a < kWalkAhead; ++a) {  // the loads first, all in flight together
        const uint32_t x = s + 32 * a + lane;
        const int32_t v = x < hi ? load_am(P, base + x) : -1;
        t[a] = v >= 0 && v < ld ? v : -1;
      }
#pragma unroll
      for (int a = 0; a < kWalkAhead; ++a) {  // uniform: the round exists
        if (s + 32 * a < hi) visit(t[a], static_cast<uint32_t>(base + s + 32 * a + lane));
      }
    }
  }
}

template <bool kPlace>
__device__ __forceinline__ void walk_block(const MaxsimTrainParams& P) {
  // count: [longest document] histogram; place: [kWalkWarps][longest] cursors, then as many lane masks
  extern __shared__ uint32_t words[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t qblocks = P.qblocks;
  const int64_t units = static_cast<int64_t>(P.doc_end - P.doc_begin) * qblocks;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t j = P.doc_begin + u / qblocks;
    const int64_t qb = u - (j - P.doc_begin) * qblocks;
    const int ld = P.doc_lengths[j];
    if (ld <= 0) continue;  // uniform over the block
    const int64_t row0 = P.doc_starts[j] - P.row_begin;
    const int64_t i_begin = P.pairs == 0 ? qb * P.qblock_size : j;
    const int64_t i_end = P.pairs == 0 ? min(static_cast<int64_t>(P.num_queries), i_begin + P.qblock_size) : j + 1;
    const uint32_t n = static_cast<uint32_t>((i_end - i_begin) * P.stride);  // < 2^32: the host bounds sources
    const uint32_t per = (n + kWalkWarps - 1) / kWalkWarps;
    const uint32_t f0 = min(n, per * warp), f1 = min(n, f0 + per);
    const int used = kPlace ? 2 * kWalkWarps * ld : ld;
    for (int k = threadIdx.x; k < used; k += kWalkThreads) words[k] = 0u;
    __syncthreads();
    uint32_t* hist = words + (kPlace ? warp * ld : 0);  // this warp's (place) or the block's (count)
    walk_run(P, i_begin, j, ld, f0, f1, [&](int32_t t, uint32_t) {
      if (t >= 0) atomicAdd(hist + t, 1u);
    });
    __syncthreads();
    if (!kPlace) {
      for (int t = threadIdx.x; t < ld; t += kWalkThreads) P.counts[(row0 + t) * qblocks + qb] = words[t];
    } else {
      for (int t = threadIdx.x; t < ld; t += kWalkThreads) {  // warp cursors, in warp order
        uint32_t at = P.offsets[(row0 + t) * qblocks + qb];
#pragma unroll
        for (int w = 0; w < kWalkWarps; ++w) {
          const uint32_t c = words[w * ld + t];
          words[w * ld + t] = at;
          at += c;
        }
      }
      __syncthreads();
      uint32_t* cursor = hist;
      uint32_t* mask = words + (kWalkWarps + warp) * ld;  // zero between rounds
      walk_run(P, i_begin, j, ld, f0, f1, [&](int32_t t, uint32_t slot) {
        if (t >= 0) atomicOr(mask + t, 1u << lane);
        __syncwarp();
        uint32_t peers = 0u, at = 0u;
        if (t >= 0) {
          peers = mask[t];
          at = cursor[t];
        }
        __syncwarp();  // every lane has read before the group's lowest lane moves the cursor
        if (t >= 0) {
          const uint32_t lower = peers & ((1u << lane) - 1u);
          P.sources[at + __popc(lower)] = slot;
          if (lower == 0u) {
            cursor[t] = at + __popc(peers);
            mask[t] = 0u;
          }
        }
        __syncwarp();
      });
    }
    __syncthreads();  // the shared words are free for the next unit
  }
}

// Three-kernel scan of counts[0, cells) (every total < 2^32: the host bounds a block's sources):
// scan_reduce: block_sums[b] = sum of tile b; scan_top (one block): block_sums exclusive in place,
// offsets[cells] = total; scan_down: offsets = counts turned exclusive, and counts = offsets (cursor).
__device__ __forceinline__ void scan_reduce_body(const MaxsimTrainParams& P) {
  const int64_t tiles = (P.cells + kScanTile - 1) / kScanTile;
  for (int64_t b = blockIdx.x; b < tiles; b += gridDim.x) {
    uint32_t v = 0;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t idx = b * kScanTile + r * kScanThreads + threadIdx.x;
      if (idx < P.cells) v += P.counts[idx];
    }
    uint32_t total;
    block_exclusive_scan<kScanThreads>(v, &total);
    if (threadIdx.x == 0) P.block_sums[b] = total;
  }
}

__device__ __forceinline__ void scan_top_body(const MaxsimTrainParams& P) {
  const int64_t tiles = (P.cells + kScanTile - 1) / kScanTile;
  uint32_t carry = 0;
  for (int64_t base = 0; base < tiles; base += kScanThreads) {  // uniform trip count
    const int64_t idx = base + threadIdx.x;
    const uint32_t v = idx < tiles ? P.block_sums[idx] : 0u;
    uint32_t total;
    const uint32_t excl = block_exclusive_scan<kScanThreads>(v, &total);
    if (idx < tiles) P.block_sums[idx] = carry + excl;
    carry += total;
  }
  if (threadIdx.x == 0) P.offsets[P.cells] = carry;
}

// The 4 counts of a thread are one 16-byte load and its offsets / cursors one store each when all 4
// exist (first is a multiple of 4 and the buffers are 16-byte aligned).
__device__ __forceinline__ void scan_down_body(const MaxsimTrainParams& P) {
  const int64_t tiles = (P.cells + kScanTile - 1) / kScanTile;
  for (int64_t b = blockIdx.x; b < tiles; b += gridDim.x) {
    const int64_t first = b * kScanTile + 4 * static_cast<int64_t>(threadIdx.x);
    const bool whole = first + 4 <= P.cells;
    uint32_t v[4];
    if (whole) {
      const uint4 c = *reinterpret_cast<const uint4*>(P.counts + first);
      v[0] = c.x;
      v[1] = c.y;
      v[2] = c.z;
      v[3] = c.w;
    } else {
#pragma unroll
      for (int r = 0; r < 4; ++r) v[r] = first + r < P.cells ? P.counts[first + r] : 0u;
    }
    const uint32_t sum = v[0] + v[1] + v[2] + v[3];
    uint32_t total;
    uint32_t at[4];
    at[0] = P.block_sums[b] + block_exclusive_scan<kScanThreads>(sum, &total);
#pragma unroll
    for (int r = 1; r < 4; ++r) at[r] = at[r - 1] + v[r - 1];
    if (whole) {
      const uint4 o = make_uint4(at[0], at[1], at[2], at[3]);
      *reinterpret_cast<uint4*>(P.offsets + first) = o;
      *reinterpret_cast<uint4*>(P.counts + first) = o;  // the placement cursor
    } else {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        if (first + r < P.cells) {
          P.offsets[first + r] = at[r];
          P.counts[first + r] = at[r];
        }
      }
    }
  }
}

// Contention of the block: stats[0] += rows with at least one source (stats[1] = sources is read from
// offsets[cells] by the host). Integer atomics: the result does not depend on their order.
__device__ __forceinline__ void stats_body(const MaxsimTrainParams& P) {
  const int64_t rows = P.row_end - P.row_begin;
  unsigned long long distinct = 0;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (P.offsets[(r + 1) * P.qblocks] > P.offsets[r * P.qblocks]) ++distinct;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) distinct += __shfl_xor_sync(kFull, distinct, o);
  if ((threadIdx.x & 31) == 0 && distinct > 0) atomicAdd(P.stats, distinct);
}

}  // namespace maxsim_train
