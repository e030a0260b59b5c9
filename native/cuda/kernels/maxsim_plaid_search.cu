// maxsim_plaid_search.cu: the search stages of the compressed index on the GPU (the stage list is
// in maxsim_plaid.cu's header; native/cuda/plaid_search.cc drives them). The query x centroid dots
// are maxsim_plaid.cu's plaid_dots.
//
// LAUNCH CONTRACT: as native/cuda/plaid_search.cc states next to each launch.
#include "maxsim_plaid_common.cuh"

// The search's query x centroid dots, qc[(r / LQ)][c][r % LQ] = q_r . centroid_c for the padded
// query rows r < n and centroids c < k: the same fp32 fma chain over k ascending as plaid_dots (and the
// CPU's dots), in 128 x 128 tiles of 8 x 8 per thread (4 float4 shared reads per 64 fma), each
// thread's 4 consecutive rows of a centroid stored as one float4. grid (ceil(n / 128), ceil(k / 128)),
// block 256; n a multiple of 32 (whole padded queries).
extern "C" __global__ void __launch_bounds__(256) plaid_qc(const PlaidAssignParams p) {
  constexpr int BM = 128, BK = 32, PAD = BM + 4;
  __shared__ __align__(16) float xs[BK][PAD];
  __shared__ __align__(16) float cs[BK][PAD];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * BM, c0 = static_cast<int64_t>(blockIdx.y) * BM;
  const float* x = static_cast<const float*>(p.x);
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; i++)
#pragma unroll
    for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;
  for (int64_t k0 = 0; k0 < p.d; k0 += BK) {
    const int kn = static_cast<int>(p.d - k0 < BK ? p.d - k0 : BK);
    __syncthreads();
    for (int e = tid; e < BM * BK; e += 256) {
      const int r = e / BK, kk = e % BK;
      xs[kk][r] = (r0 + r < p.n && kk < kn) ? x[(r0 + r) * p.d + k0 + kk] : 0.0f;
      cs[kk][r] = (c0 + r < p.k && kk < kn) ? p.cent[(c0 + r) * p.d + k0 + kk] : 0.0f;
    }
    __syncthreads();
    for (int kk = 0; kk < kn; kk++) {
      const float4 a0 = *reinterpret_cast<const float4*>(&xs[kk][4 * ty]);
      const float4 a1 = *reinterpret_cast<const float4*>(&xs[kk][64 + 4 * ty]);
      const float4 b0 = *reinterpret_cast<const float4*>(&cs[kk][4 * tx]);
      const float4 b1 = *reinterpret_cast<const float4*>(&cs[kk][64 + 4 * tx]);
      const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
  }
  const int64_t ld = p.ld;
#pragma unroll
  for (int g = 0; g < 2; g++) {
    const int64_t row = r0 + g * 64 + 4 * ty;  // 4 rows of one query (ld is a multiple of 32)
    if (row >= p.n) continue;
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const int64_t c = c0 + (j < 4 ? 4 * tx + j : 64 + 4 * tx + j - 4);
      if (c >= p.k) continue;
      const float4 v = make_float4(acc[4 * g][j], acc[4 * g + 1][j], acc[4 * g + 2][j], acc[4 * g + 3][j]);
      *reinterpret_cast<float4*>(p.scores + (row / ld) * p.k * ld + c * ld + row % ld) = v;
    }
  }
}

namespace {

template <int NP>
__device__ __forceinline__ void Insert(unsigned long long (&top)[NP], unsigned long long key) {
  if (key <= top[NP - 1]) return;
  top[NP - 1] = key;
#pragma unroll
  for (int m = NP - 1; m > 0; m--) {
    if (top[m] > top[m - 1]) {
      const unsigned long long t = top[m];
      top[m] = top[m - 1];
      top[m - 1] = t;
    }
  }
}

// The probe passes read qc through shared tiles: TC centroids x LQ rows, a contiguous range of qc
// (a centroid's LQ values are adjacent), staged by 16-byte cp.async into one of two buffers while
// the block scans the other, each thread its own token's column. Each thread loading its own
// column (2 or 4 bytes a load) bound both passes: 0.7 TB/s on float16 qc.
constexpr int kProbeTileBytes = 8192;

// TC: the largest power of two <= PLAID_GROUP whose tile fits (it divides PLAID_GROUP, so a tile
// never straddles two groups).
__device__ __forceinline__ int64_t ProbeTile(const PlaidSearchParams& p) {
  const int64_t es = p.qc_half ? 2 : 4;
  int64_t tc = PLAID_GROUP;
  while (tc > 1 && tc * p.lq * es > kProbeTileBytes) tc /= 2;
  return tc;
}

// cp.async of qc's centroids [c, c + n) of query q into dst (n * LQ * es is a multiple of 64),
// one commit group on every thread.
__device__ __forceinline__ void StageProbeTile(const PlaidSearchParams& p, unsigned char* dst, int64_t q, int64_t c,
                                               int64_t n) {
  const int64_t es = p.qc_half ? 2 : 4;
  const unsigned char* src = reinterpret_cast<const unsigned char*>(p.qc) + (q * p.k + c) * p.lq * es;
  for (int64_t e = threadIdx.x; e < n * p.lq * es / 16; e += blockDim.x) {
    const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(dst + 16 * e));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(at), "l"(src + 16 * e));
  }
  asm volatile("cp.async.commit_group;\n" ::);
}

__device__ __forceinline__ float ProbeTileAt(const PlaidSearchParams& p, const unsigned char* tile, int64_t at) {
  return p.qc_half ? __half2float(reinterpret_cast<const __half*>(tile)[at]) : reinterpret_cast<const float*>(tile)[at];
}

// The tiles t < tiles of chunk ch (centroids c0 + t TC ..) for which want(t) holds, in order, two
// in flight: visit(tile, its first centroid, its count) on every thread, between barriers.
template <typename W, typename V>
__device__ __forceinline__ void ScanChunk(const PlaidSearchParams& p, int64_t q, int64_t c0, int64_t c1, W&& want,
                                          V&& visit) {
  __shared__ __align__(16) unsigned char tiles[2][kProbeTileBytes];
  const int64_t tc = ProbeTile(p), count = (c1 - c0 + tc - 1) / tc;
  auto next = [&](int64_t t) {
    while (t < count && !want(t)) t++;
    return t;
  };
  int64_t t = next(0);
  if (t < count) StageProbeTile(p, tiles[0], q, c0 + t * tc, min(tc, c1 - c0 - t * tc));
  for (int b = 0; t < count; b ^= 1) {
    const int64_t u = next(t + 1);
    if (u < count) {
      StageProbeTile(p, tiles[b ^ 1], q, c0 + u * tc, min(tc, c1 - c0 - u * tc));
      asm volatile("cp.async.wait_group 1;\n" ::);
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::);
    }
    __syncthreads();
    visit(static_cast<const unsigned char*>(tiles[b]), c0 + t * tc, min(tc, c1 - c0 - t * tc));
    __syncthreads();  // the buffer read out before the tile after next lands in it
    t = u;
  }
}

template <int NP>
__device__ void ProbePartial(const PlaidSearchParams& p) {
  __shared__ uint32_t need;
  const int64_t q = blockIdx.y, ch = blockIdx.x;
  const int64_t i = threadIdx.x;
  const bool valid = i < p.q_len[q];
  unsigned long long top[NP];
#pragma unroll
  for (int m = 0; m < NP; m++) top[m] = 0;
  const int64_t c0 = ch * PLAID_PROBE_CHUNK;
  const int64_t c1 = min(p.k, c0 + PLAID_PROBE_CHUNK);
  // keys under the floor cannot be among the token's nprobe best: they skip the insert (a key of 0
  // returns at its first compare), and a group whose best key is under every token's floor is not
  // even read (its keys would all be skipped)
  const unsigned long long floor = valid ? p.probe_floor[q * p.lq + i] : ~0ull;
  const int64_t g0 = c0 / PLAID_GROUP, gn = (c1 - c0 + PLAID_GROUP - 1) / PLAID_GROUP;
  if (threadIdx.x == 0) need = 0;
  __syncthreads();
  uint32_t mine = 0;
  if (valid)
    for (int64_t g = 0; g < gn; g++)
      if (p.group_max[(q * p.groups + g0 + g) * p.lq + i] >= floor) mine |= 1u << g;
  if (mine) atomicOr(&need, mine);
  __syncthreads();
  const uint32_t groups = need;
  const int64_t tc = ProbeTile(p), per = PLAID_GROUP / tc;
  ScanChunk(
      p, q, c0, c1, [&](int64_t t) { return ((groups >> (t / per)) & 1u) != 0; },
      [&](const unsigned char* tile, int64_t c, int64_t n) {
        if (!valid) return;
        int64_t cc = 0;
        for (; cc + 8 <= n; cc += 8) {
          float v[8];
#pragma unroll
          for (int u = 0; u < 8; u++) v[u] = ProbeTileAt(p, tile, (cc + u) * p.lq + i);
#pragma unroll
          for (int u = 0; u < 8; u++) {
            const unsigned long long key = PlaidKey(v[u], static_cast<int32_t>(c + cc + u));
            Insert<NP>(top, key >= floor ? key : 0ull);
          }
        }
        for (; cc < n; cc++) {
          const unsigned long long key = PlaidKey(ProbeTileAt(p, tile, cc * p.lq + i), static_cast<int32_t>(c + cc));
          Insert<NP>(top, key >= floor ? key : 0ull);
        }
      });
  if (!valid) return;
  unsigned long long* out = p.partial + ((q * p.chunks + ch) * p.lq + i) * NP;
#pragma unroll
  for (int m = 0; m < NP; m++) out[m] = top[m];
}

}  // namespace

// grid (chunks, Q), block LQ: token i's best key of each group of PLAID_GROUP centroids in chunk
// blockIdx.x, group_max[q][group][i] (0 past the query's length).
extern "C" __global__ void __launch_bounds__(256) plaid_group_max(const PlaidSearchParams p) {
  const int64_t q = blockIdx.y, ch = blockIdx.x;
  const int64_t i = threadIdx.x;
  const bool valid = i < p.q_len[q];
  const int64_t c0 = ch * PLAID_PROBE_CHUNK;
  const int64_t c1 = min(p.k, c0 + PLAID_PROBE_CHUNK);
  unsigned long long best = 0;
  ScanChunk(
      p, q, c0, c1, [](int64_t) { return true; },
      [&](const unsigned char* tile, int64_t c, int64_t n) {
        if (valid) {
          int64_t cc = 0;
          for (; cc + 8 <= n; cc += 8) {
            float v[8];
#pragma unroll
            for (int u = 0; u < 8; u++) v[u] = ProbeTileAt(p, tile, (cc + u) * p.lq + i);
#pragma unroll
            for (int u = 0; u < 8; u++) {
              const unsigned long long key = PlaidKey(v[u], static_cast<int32_t>(c + cc + u));
              best = key > best ? key : best;
            }
          }
          for (; cc < n; cc++) {
            const unsigned long long key = PlaidKey(ProbeTileAt(p, tile, cc * p.lq + i), static_cast<int32_t>(c + cc));
            best = key > best ? key : best;
          }
        }
        if ((c + n) % PLAID_GROUP == 0 || c + n == c1) {  // the group's last tile
          p.group_max[(q * p.groups + (c + n - 1) / PLAID_GROUP) * p.lq + i] = best;
          best = 0;
        }
      });
}

// One warp per (query, token): its floor, the nprobe-th best of its group maxima (0 while there are
// fewer groups), merged into at most 32 x PLAID_FLOOR_OWN runs of consecutive groups where K is
// larger. Those maxima are nprobe distinct keys at or above it, so the token's nprobe best keys are
// too.
extern "C" __global__ void __launch_bounds__(256) plaid_probe_floor(const PlaidSearchParams p) {
  const int lane = threadIdx.x % 32;
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (w >= p.num_q * p.lq) return;
  const int64_t q = w / p.lq, i = w % p.lq;
  const int64_t run = (p.groups + 32 * PLAID_FLOOR_OWN - 1) / (32 * PLAID_FLOOR_OWN);
  unsigned long long key[PLAID_FLOOR_OWN];
#pragma unroll
  for (int o = 0; o < PLAID_FLOOR_OWN; o++) {
    key[o] = 0ull;
    const int64_t g0 = (lane + 32 * o) * run, g1 = min(p.groups, g0 + run);
    if (i < p.q_len[q])
      for (int64_t g = g0; g < g1; g++) {
        const unsigned long long k = p.group_max[(q * p.groups + g) * p.lq + i];
        key[o] = k > key[o] ? k : key[o];
      }
  }
  unsigned long long b = 0;
  for (int64_t m = 0; m < p.nprobe; m++) {
    unsigned long long mine = 0;
#pragma unroll
    for (int o = 0; o < PLAID_FLOOR_OWN; o++) mine = key[o] > mine ? key[o] : mine;
    b = WarpMaxKey(mine, 32);
    if (b == 0) break;
#pragma unroll
    for (int o = 0; o < PLAID_FLOOR_OWN; o++)
      if (key[o] == b) key[o] = 0;
  }
  if (lane == 0) p.probe_floor[q * p.lq + i] = b;
}

// grid (chunks, Q), block LQ: token i's best NP centroids of chunk blockIdx.x.
#define PLAID_PROBE(NP) \
  extern "C" __global__ void __launch_bounds__(256) plaid_probe_partial_##NP(const PlaidSearchParams p) { ProbePartial<NP>(p); }
PLAID_PROBE(4)
PLAID_PROBE(8)
PLAID_PROBE(16)
PLAID_PROBE(32)

// One warp per (query, token): its nprobe best of the chunks' lists, each probed centroid the query
// probes for the first time appended to its distinct list. The lists are sorted (best first) and
// keys unique (they hold the id), so a k-way merge takes them in order: each lane holds the heads
// of its chunks (lane + 32 o, o < PLAID_MERGE_OWN: the plan's limit on K), the warp's best head
// wins a round and only its list advances.
extern "C" __global__ void __launch_bounds__(256) plaid_probe_merge(const PlaidSearchParams p) {
  const int lane = threadIdx.x % 32;
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (w >= p.num_q * p.lq) return;
  const int64_t q = w / p.lq, i = w % p.lq;
  if (i >= p.q_len[q]) return;
  const int64_t cw = (p.k + 31) / 32;
  auto list = [&](int64_t ch) { return p.partial + ((q * p.chunks + ch) * p.lq + i) * p.np; };
  unsigned long long head[PLAID_MERGE_OWN];
  int pos[PLAID_MERGE_OWN];
#pragma unroll
  for (int o = 0; o < PLAID_MERGE_OWN; o++) {
    const int64_t ch = lane + 32 * o;
    pos[o] = 0;
    head[o] = ch < p.chunks ? list(ch)[0] : 0ull;
  }
  for (int64_t m = 0; m < p.nprobe; m++) {
    unsigned long long mine = 0;
#pragma unroll
    for (int o = 0; o < PLAID_MERGE_OWN; o++) mine = head[o] > mine ? head[o] : mine;
    const unsigned long long b = WarpMaxKey(mine, 32);
    if (b == 0) break;
#pragma unroll
    for (int o = 0; o < PLAID_MERGE_OWN; o++)
      if (head[o] == b) {  // the one list that held it (keys are unique)
        pos[o]++;
        head[o] = pos[o] < p.np ? list(lane + 32 * o)[pos[o]] : 0ull;
      }
    if (lane == 0) {
      const int32_t c = PlaidKeyId(b);
      const uint32_t bit = 1u << (c % 32);
      if (!(atomicOr(p.cbits + q * cw + c / 32, bit) & bit)) {
        const int32_t at = atomicAdd(p.probed_n + q, 1);
        p.probed[q * p.lq * p.nprobe + at] = c;
      }
    }
  }
}

// grid (LQ * nprobe, Q), block 256: the inverted list of one distinct probed centroid -> document bits.
extern "C" __global__ void __launch_bounds__(256) plaid_mark(const PlaidSearchParams p) {
  const int64_t q = blockIdx.y;
  if (blockIdx.x >= p.probed_n[q]) return;
  const int32_t c = p.probed[q * p.lq * p.nprobe + blockIdx.x];
  uint32_t* bits = p.dbits + q * p.words;
  for (int64_t j = p.ivf_off[c] + threadIdx.x; j < p.ivf_off[c + 1]; j += blockDim.x) {
    const int32_t doc = p.ivf[j];
    atomicOr(bits + doc / 32, 1u << (doc % 32));
  }
}

// grid Q, block 1024: candidate count of each query.
extern "C" __global__ void __launch_bounds__(1024) plaid_count(const PlaidSearchParams p) {
  __shared__ int32_t part[32];
  const int64_t q = blockIdx.x;
  const uint32_t* bits = p.dbits + q * p.words;
  int32_t n = 0;
  for (int64_t w = threadIdx.x; w < p.words; w += blockDim.x) n += __popc(bits[w]);
  for (int o = 16; o > 0; o /= 2) n += __shfl_xor_sync(0xffffffffu, n, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = n;
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t s = 0;
    for (int i = 0; i < 32; i++) s += part[i];
    p.cand_n[q] = s;
  }
}

// grid 1, block 32: the batch's offsets from the candidate counts (one lane walks them: Q is a
// pass's few hundred queries), so no count goes to the host and back between the stages.
extern "C" __global__ void __launch_bounds__(32) plaid_offsets(const PlaidSearchParams p) {
  if (threadIdx.x != 0) return;
  int64_t* cand = p.offs;
  int64_t* kept = p.offs + (p.num_q + 1);
  int64_t* fin = p.offs + 2 * (p.num_q + 1);
  cand[0] = kept[0] = fin[0] = 0;
  for (int64_t q = 0; q < p.num_q; q++) {
    const int64_t n = p.cand_n[q], k = min(n, p.cap_kept);
    cand[q + 1] = cand[q] + n;
    kept[q + 1] = kept[q] + k;
    fin[q + 1] = fin[q] + min(k, p.cap_fin);
  }
}

// grid Q, block 1024: the candidate documents of each query in ascending order at cand_off[q].
extern "C" __global__ void __launch_bounds__(1024) plaid_compact(const PlaidSearchParams p) {
  __shared__ int32_t warp_sum[32];
  __shared__ int32_t base;
  const int64_t q = blockIdx.x;
  const uint32_t* bits = p.dbits + q * p.words;
  const int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
  if (threadIdx.x == 0) base = 0;
  __syncthreads();
  for (int64_t w0 = 0; w0 < p.words; w0 += blockDim.x) {
    const int64_t w = w0 + threadIdx.x;
    uint32_t word = w < p.words ? bits[w] : 0u;
    const int32_t c = __popc(word);
    int32_t incl = c;
    for (int o = 1; o < 32; o *= 2) {
      const int32_t v = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += v;
    }
    if (lane == 31) warp_sum[wid] = incl;
    __syncthreads();
    if (wid == 0) {
      int32_t v = warp_sum[lane];
      for (int o = 1; o < 32; o *= 2) {
        const int32_t u = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += u;
      }
      warp_sum[lane] = v;  // inclusive
    }
    __syncthreads();
    int64_t at = p.cand_off[q] + base + (wid > 0 ? warp_sum[wid - 1] : 0) + incl - c;
    while (word) {
      const int bit = __ffs(word) - 1;
      word &= word - 1;
      p.cand[at] = static_cast<int32_t>(w * 32 + bit);
      p.cand_q[at] = static_cast<int32_t>(q);
      at++;
    }
    __syncthreads();
    if (threadIdx.x == 0) base += warp_sum[31];
    __syncthreads();
  }
}

// grid (ceil(K / 256), Q), block 256: the centroids whose best query-token score reaches the
// threshold (PLAID's centroid pruning; the CPU's keep[c]), one bit each.
extern "C" __global__ void __launch_bounds__(256) plaid_keep(const PlaidSearchParams p) {
  const int64_t q = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  const int64_t len = p.q_len[q];
  float best = -INFINITY;
  if (c < p.k) {
    const int64_t row = (q * p.k + c) * p.lq;
    for (int64_t i = 0; i < len; i++) best = fmaxf(best, QcAt(p, row + i));
  }
  const uint32_t word = __ballot_sync(0xffffffffu, c < p.k && best >= p.threshold);
  if (threadIdx.x % 32 == 0 && c < p.k) p.kbits[q * ((p.k + 31) / 32) + c / 32] = word;
}

// One warp per candidate (grid-stride over all queries' candidates), lanes over query tokens:
// sum_i max over the bag's kept centroids of qc[i][c] (an empty max counts 0), summed in double in
// token order, as the CPU's centroid_doc. With a threshold only the centroids plaid_keep kept count
// (their rows are not even read).
extern "C" __global__ void __launch_bounds__(256) plaid_interaction(const PlaidSearchParams p) {
  const int lane = threadIdx.x % 32;
  const int64_t total = p.cand_off[p.num_q];
  const int64_t chunks = p.lq / 32;
  const bool prune = p.threshold > -INFINITY;
  const int64_t cw = (p.k + 31) / 32;
  for (int64_t e = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x / 32) {
    const int64_t q = p.cand_q[e], doc = p.cand[e];
    const int64_t len = p.q_len[q];
    const uint32_t* kb = prune ? p.kbits + q * cw : nullptr;
    auto kept = [&](int32_t c) { return !prune || ((kb[c >> 5] >> (c & 31)) & 1u); };
    float rm[8];
#pragma unroll
    for (int c = 0; c < 8; c++) rm[c] = -INFINITY;
    const int64_t qc = q * p.k * p.lq + lane;
    const int64_t j0 = p.bag_off[doc], j1 = p.bag_off[doc + 1];
    if (chunks == 1) {
      // queries of <= 32 tokens: 4 independent loads in flight
      float m = -INFINITY;
      int64_t j = j0;
      for (; j + 4 <= j1; j += 4) {
        const int32_t c0 = p.bags[j], c1 = p.bags[j + 1], c2 = p.bags[j + 2], c3 = p.bags[j + 3];
        const float v0 = kept(c0) ? QcAt(p, qc + static_cast<int64_t>(c0) * p.lq) : -INFINITY;
        const float v1 = kept(c1) ? QcAt(p, qc + static_cast<int64_t>(c1) * p.lq) : -INFINITY;
        const float v2 = kept(c2) ? QcAt(p, qc + static_cast<int64_t>(c2) * p.lq) : -INFINITY;
        const float v3 = kept(c3) ? QcAt(p, qc + static_cast<int64_t>(c3) * p.lq) : -INFINITY;
        m = fmaxf(m, fmaxf(fmaxf(v0, v1), fmaxf(v2, v3)));
      }
      for (; j < j1; j++) {
        const int32_t c = p.bags[j];
        if (kept(c)) m = fmaxf(m, QcAt(p, qc + static_cast<int64_t>(c) * p.lq));
      }
      rm[0] = lane < len ? m : -INFINITY;
    } else {
      for (int64_t j = j0; j < j1; j++) {
        const int32_t cid = p.bags[j];
        if (!kept(cid)) continue;
        const int64_t row = qc + static_cast<int64_t>(cid) * p.lq;
#pragma unroll
        for (int c = 0; c < 8; c++)
          if (c < chunks && c * 32 + lane < len) rm[c] = fmaxf(rm[c], QcAt(p, row + c * 32));
      }
    }
    double s = 0.0;
#pragma unroll
    for (int c = 0; c < 8; c++) {
      if (c >= chunks) break;
      for (int i = 0; i < 32; i++) {
        const float v = __shfl_sync(0xffffffffu, rm[c], i);
        if (c * 32 + i < len && v != -INFINITY) s += static_cast<double>(v);
      }
    }
    if (lane == 0) p.ci[e] = static_cast<float>(s);
  }
}

// The max over document doc's bag of row[c * stride] (a lane's slice of qc row c; none for a
// centroid pruned away), N rows in flight and folded as a tree, for the slice type T and its max.
template <int N, typename T, typename Max>
__device__ __forceinline__ T BagMax(const PlaidSearchParams& p, int64_t q, int64_t doc, const T* row, int64_t stride,
                                    T none, Max mx) {
  const bool prune = p.threshold > -INFINITY;
  const uint32_t* kb = prune ? p.kbits + q * ((p.k + 31) / 32) : nullptr;
  auto at = [&](int32_t c) { return !prune || ((kb[c >> 5] >> (c & 31)) & 1u) ? row[static_cast<int64_t>(c) * stride] : none; };
  const int64_t j1 = p.bag_off[doc + 1];
  int64_t j = p.bag_off[doc];
  T m = none;
  for (; j + N <= j1; j += N) {
    T v[N];
#pragma unroll
    for (int u = 0; u < N; u++) v[u] = at(p.bags[j + u]);
#pragma unroll
    for (int h = 1; h < N; h *= 2)
#pragma unroll
      for (int u = 0; u < N; u += 2 * h) v[u] = mx(v[u], v[u + h]);
    m = mx(m, v[0]);
  }
  for (; j < j1; j++) m = mx(m, at(p.bags[j]));
  return m;
}

// plaid_interaction for float16 qc and queries of <= 32 tokens (lq == 32): a half-warp per candidate,
// each lane holding two tokens (one 4-byte load of a qc row), so a warp keeps two candidates' loads
// in flight for the instructions one took. The maxima are grouped and the sums ordered as in
// plaid_interaction, so the scores are bitwise the same.
extern "C" __global__ void __launch_bounds__(256) plaid_interaction_h2(const PlaidSearchParams p) {
  const int lane = threadIdx.x % 32, hl = lane % 16, base = lane & 16;
  const int64_t total = p.cand_off[p.num_q];
  const __half2* qc2 = reinterpret_cast<const __half2*>(p.qc);
  // the maxima stay float16 pairs (one HMNMX2 a row, not two conversions and two FMNMX): the max
  // of float16 values converted once is the max of their conversions, so the scores do not move
  const __half2 none = __float2half2_rn(-INFINITY);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; 2 * w < total; w += warps) {
    const int64_t e = 2 * w + lane / 16;
    const bool active = e < total;
    __half2 mh = none;
    int64_t len = 0;
    if (active) {
      const int64_t q = p.cand_q[e], doc = p.cand[e];
      len = p.q_len[q];
      // rows of 16 token pairs
      mh = BagMax<4>(p, q, doc, qc2 + q * p.k * 16 + hl, 16, none, [](__half2 a, __half2 b) { return __hmax2(a, b); });
    }
    const float2 m = __half22float2(mh);
    double s = 0.0;
#pragma unroll
    for (int i = 0; i < 32; i += 2) {
      const float a = __shfl_sync(0xffffffffu, m.x, base + i / 2);
      const float b = __shfl_sync(0xffffffffu, m.y, base + i / 2);
      if (i < len && a != -INFINITY) s += static_cast<double>(a);
      if (i + 1 < len && b != -INFINITY) s += static_cast<double>(b);
    }
    if (active && hl == 0) p.ci[e] = static_cast<float>(s);
  }
}

// plaid_interaction_h2 on qc's int8 copy (queries of <= 32 tokens): a quarter-warp a candidate,
// lane l its tokens 4l .. 4l + 3 as one word of bytes, so a bag row is one 32-byte sector (64 for
// float16) and its maxima one VIMNMX a row; score = sum over tokens < len of max * scale (-128: an
// empty bag, or every centroid of it pruned). Ranks candidates only (the float16 plans).
extern "C" __global__ void __launch_bounds__(256) plaid_interaction_q8(const PlaidSearchParams p) {
  const int lane = threadIdx.x % 32, l8 = lane % 8;
  const int64_t total = p.cand_off[p.num_q];
  const uint32_t* qc4 = reinterpret_cast<const uint32_t*>(p.qc8);
  const uint32_t none = 0x80808080u;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; 4 * w < total; w += warps) {
    const int64_t e = 4 * w + lane / 8;
    const bool active = e < total;
    uint32_t m = none;
    float s = 0.0f;
    if (active) {
      const int64_t q = p.cand_q[e], doc = p.cand[e];
      const int64_t len = p.q_len[q];
      // rows of 8 words
      m = BagMax<8>(p, q, doc, qc4 + q * p.k * 8 + l8, 8, none, [](uint32_t a, uint32_t b) { return __vmaxs4(a, b); });
      const float* sc = p.qc8_scale + q * 32 + 4 * l8;
#pragma unroll
      for (int b = 0; b < 4; b++) {
        const int v = static_cast<int8_t>(static_cast<uint8_t>(m >> (8 * b)));
        if (4 * l8 + b < len && v != -128) s = fmaf(static_cast<float>(v), sc[b], s);
      }
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    s += __shfl_xor_sync(0xffffffffu, s, 4);
    if (active && l8 == 0) p.ci[e] = s;
  }
}

// grid Q, block 256: the best sel_out_off[q + 1] - sel_out_off[q] entries of [sel_in_off[q], ...) by
// (score desc, doc asc), exactly: radix select of the k-th largest 64-bit key, 8 bits per pass.
extern "C" __global__ void __launch_bounds__(256) plaid_select(const PlaidSearchParams p) {
  __shared__ int32_t hist[256];
  __shared__ unsigned long long prefix_s;
  __shared__ int64_t remaining_s;
  __shared__ int32_t written;
  const int64_t q = blockIdx.x;
  const int64_t i0 = p.sel_in_off[q], i1 = p.sel_in_off[q + 1];
  const int64_t keep = p.sel_out_off[q + 1] - p.sel_out_off[q];
  unsigned long long prefix = 0;
  if (keep < i1 - i0) {
    if (threadIdx.x == 0) remaining_s = keep;
    unsigned long long mask = 0;
    for (int shift = 56; shift >= 0; shift -= 8) {
      for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
      __syncthreads();
      for (int64_t e = i0 + threadIdx.x; e < i1; e += blockDim.x) {
        const unsigned long long key = PlaidKey(p.sel_score[e], p.sel_doc[e]);
        if ((key & mask) == prefix) atomicAdd(hist + ((key >> shift) & 0xFF), 1);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        int64_t rem = remaining_s;
        int b = 255;
        for (; b > 0; b--) {
          if (hist[b] >= rem) break;
          rem -= hist[b];
        }
        remaining_s = rem;
        prefix_s = prefix | (static_cast<unsigned long long>(b) << shift);
      }
      __syncthreads();
      prefix = prefix_s;
      mask |= 0xFFull << shift;
    }
  }
  if (threadIdx.x == 0) written = 0;
  __syncthreads();
  const int64_t o0 = p.sel_out_off[q];
  for (int64_t e = i0 + threadIdx.x; e < i1; e += blockDim.x) {
    if (keep == 0) break;
    const unsigned long long key = PlaidKey(p.sel_score[e], p.sel_doc[e]);
    if (keep < i1 - i0 && key < prefix) continue;
    const int32_t at = atomicAdd(&written, 1);
    if (at < keep) {
      p.sel_out_doc[o0 + at] = p.sel_doc[e];
      p.sel_out_score[o0 + at] = p.sel_score[e];
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) p.sel_out_n[q] = written < keep ? written : static_cast<int32_t>(keep);
}

namespace {

// After it, lane l holds max over the warp of v[l] (recursive halving: 31 shuffles for 32 values).
__device__ __forceinline__ float TransposeMax(float (&v)[32], int lane) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const bool upper = lane & o;
#pragma unroll
    for (int j = 0; j < o; j++) {
      const float send = upper ? v[j] : v[j + o];
      const float keep = upper ? v[j + o] : v[j];
      v[j] = fmaxf(keep, __shfl_xor_sync(0xffffffffu, send, o));
    }
  }
  return v[0];
}

// Weights of dimensions [k0, k0 + 8) of stream token t (zeros past d): RESIDUAL, the decoded
// residual weights (the block's code word of each dimension through the shared table); else the
// source token's elements (one 16-byte load for 16-bit tokens when d % 8 == 0).
template <bool RESIDUAL>
__device__ __forceinline__ void Weights8(const PlaidSearchParams& p, const float* tab, int64_t t, int64_t k0,
                                         float (&w)[8]) {
  if (RESIDUAL) {
    const uint8_t* cw = p.codes + (t / 16) * p.d * 2 * p.bits;
    const int sh = static_cast<int>(t % 16) * p.bits;
    const uint32_t mask = (1u << p.bits) - 1;
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const int64_t k = k0 + j;
      if (k >= p.d) {
        w[j] = 0.0f;
        continue;
      }
      const unsigned long long word = p.bits == 2 ? *reinterpret_cast<const uint32_t*>(cw + k * 4)
                                                  : *reinterpret_cast<const unsigned long long*>(cw + k * 8);
      w[j] = tab[k * 16 + ((word >> sh) & mask)];
    }
  } else if (p.tokens_dtype != 0 && p.d % 8 == 0) {
    const uint4 v = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.tokens) + t * p.d + k0);
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const uint16_t lo = static_cast<uint16_t>(u[j] & 0xFFFF), hi = static_cast<uint16_t>(u[j] >> 16);
      if (p.tokens_dtype == 1) {
        w[2 * j] = __half2float(__ushort_as_half(lo));
        w[2 * j + 1] = __half2float(__ushort_as_half(hi));
      } else {
        w[2 * j] = __uint_as_float(static_cast<uint32_t>(lo) << 16);
        w[2 * j + 1] = __uint_as_float(static_cast<uint32_t>(hi) << 16);
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < 8; j++) w[j] = k0 + j < p.d ? LoadElem(p.tokens, p.tokens_dtype, t * p.d + k0 + j) : 0.0f;
  }
}

// Document tokens [tb, tb + 32 NT) (lane: tokens tb + lane + 32 n) against the query: each token's
// dots with query tokens of every 32-chunk, one fma chain over k ascending (the CPU's order), plus
// qc[i][cid] for RESIDUAL; rm[c] takes the max over these tokens of chunk c's token lane.
template <bool RESIDUAL, int NT>
__device__ __forceinline__ void TokenRun(const PlaidSearchParams& p, const float* qt, const float* tab, int64_t q,
                                         int64_t tb, int64_t t1, int lane, int64_t chunks, float (&rm)[8]) {
  int64_t t[NT];
  bool valid[NT];
#pragma unroll
  for (int n = 0; n < NT; n++) {
    t[n] = tb + 32 * n + lane;
    valid[n] = t[n] < t1;
  }
  for (int c = 0; c < chunks; c++) {
    float acc[NT][32];
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
      for (int i = 0; i < 32; i++) acc[n][i] = 0.0f;
    for (int64_t k0 = 0; k0 < p.d; k0 += 8) {
      float w[NT][8];
#pragma unroll
      for (int n = 0; n < NT; n++) {
        if (valid[n]) Weights8<RESIDUAL>(p, tab, t[n], k0, w[n]);
        else
#pragma unroll
          for (int j = 0; j < 8; j++) w[n][j] = 0.0f;
      }
      const int kn = static_cast<int>(p.d - k0 < 8 ? p.d - k0 : 8);
#pragma unroll
      for (int j = 0; j < 8; j++) {
        if (j >= kn) break;
        const float4* qk = reinterpret_cast<const float4*>(qt + (k0 + j) * p.lq + c * 32);
#pragma unroll
        for (int i4 = 0; i4 < 8; i4++) {
          const float4 v = qk[i4];
#pragma unroll
          for (int n = 0; n < NT; n++) {
            acc[n][i4 * 4 + 0] = fmaf(v.x, w[n][j], acc[n][i4 * 4 + 0]);
            acc[n][i4 * 4 + 1] = fmaf(v.y, w[n][j], acc[n][i4 * 4 + 1]);
            acc[n][i4 * 4 + 2] = fmaf(v.z, w[n][j], acc[n][i4 * 4 + 2]);
            acc[n][i4 * 4 + 3] = fmaf(v.w, w[n][j], acc[n][i4 * 4 + 3]);
          }
        }
      }
    }
    float m = -INFINITY;
#pragma unroll
    for (int n = 0; n < NT; n++) {
      if (valid[n] && RESIDUAL) {
        const int64_t row = (q * p.k + p.cids[t[n]]) * p.lq + c * 32;
#pragma unroll
        for (int i = 0; i < 32; i++) acc[n][i] = acc[n][i] + QcAt(p, row + i);
      } else if (!valid[n]) {
#pragma unroll
        for (int i = 0; i < 32; i++) acc[n][i] = -INFINITY;
      }
      m = fmaxf(m, TransposeMax(acc[n], lane));
    }
#pragma unroll
    for (int cc = 0; cc < 8; cc++)
      if (cc == c) rm[cc] = fmaxf(rm[cc], m);
  }
}

// Scores listed documents of one query per block (grid (entries / WARPS, Q), block 32 WARPS): the
// query's tokens transposed in shared memory ([d][LQ]); a warp takes a document, lanes its tokens
// (64 at a time, 2 per lane, while that many remain); RESIDUAL: q . decoded = qc[i][cid] + sum_k
// q_ik w[k][code] (the CPU's order), codes decoded through the shared [d][16] table; else the kept
// source tokens. Sum of the token maxes in double, token order.
template <bool RESIDUAL>
__device__ void ScoreDocs(const PlaidSearchParams& p) {
  extern __shared__ __align__(16) float smem[];
  float* qt = smem;                   // [d][LQ]
  float* tab = smem + p.d * p.lq;     // [d][16]
  const int64_t q = blockIdx.y;
  const int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
  const int64_t len = p.q_len[q];
  for (int64_t e = threadIdx.x; e < p.d * p.lq; e += blockDim.x) {
    const int64_t k = e / p.lq, i = e % p.lq;
    qt[e] = p.q[(q * p.lq + i) * p.d + k];
  }
  if (RESIDUAL)
    for (int64_t e = threadIdx.x; e < p.d * 16; e += blockDim.x) tab[e] = p.tables[e];
  __syncthreads();
  const int64_t o0 = p.score_off[q], o1 = p.score_off[q + 1];
  const int64_t chunks = p.lq / 32;
  for (int64_t e = o0 + static_cast<int64_t>(blockIdx.x) * PLAID_SCORE_WARPS + wid; e < o1;
       e += static_cast<int64_t>(gridDim.x) * PLAID_SCORE_WARPS) {
    const int64_t doc = p.score_doc[e];
    const int64_t t0 = p.doc_off[doc], t1 = p.doc_off[doc + 1];
    float rm[8];
#pragma unroll
    for (int c = 0; c < 8; c++) rm[c] = -INFINITY;
    int64_t tb = t0;
    for (; tb + 32 < t1; tb += 64) TokenRun<RESIDUAL, 2>(p, qt, tab, q, tb, t1, lane, chunks, rm);
    if (tb < t1) TokenRun<RESIDUAL, 1>(p, qt, tab, q, tb, t1, lane, chunks, rm);
    double s = 0.0;
#pragma unroll
    for (int c = 0; c < 8; c++) {
      if (c >= chunks) break;
      for (int i = 0; i < 32; i++) {
        const float v = __shfl_sync(0xffffffffu, rm[c], i);
        if (c * 32 + i < len) s += static_cast<double>(v);
      }
    }
    if (lane == 0) p.score_out[e] = t1 > t0 ? static_cast<float>(s) : -INFINITY;
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(32 * PLAID_SCORE_WARPS) plaid_residual(const PlaidSearchParams p) {
  ScoreDocs<true>(p);
}
extern "C" __global__ void __launch_bounds__(32 * PLAID_SCORE_WARPS) plaid_exact(const PlaidSearchParams p) {
  ScoreDocs<false>(p);
}
