// maxsim_plaid_mma.cu: the index search's product stages on tensor cores (mma.sync m16n8k16,
// float16 in, float32 accumulate), for the plans whose final list is re-scored exactly (plan
// precision 'float16', chosen in src/plaid/cuda-search.ts): their scores only rank candidates, so
// they need not be the CPU's fp32 chain bitwise (maxsim_plaid_search.cu keeps that path).
//   plaid_qc_mma        qc = queries x centroids, the layout of plaid_qc ([Q][K][LQ]), from float16
//                       copies (plaid_to_half), and its int8 copy for the interaction (plaid_qc_scale);
//   plaid_residual_mma  the fused decompress-MaxSim: a warp takes a document, 16 tokens (one code
//                       block) as the A fragment's rows, decoded from the codes through a float16
//                       table in shared memory in registers; the query's 32-token chunk as B
//                       fragments from shared memory; qc[i][cid] as the accumulators' start;
//   plaid_exact_mma     the exact re-score on float16 source tokens, the query in two float16 parts
//                       (within ~1e-7 of plaid_exact's float32 chain).
//
// LAUNCH CONTRACT: as native/cuda/plaid_search.cc states next to each launch.
#include "maxsim_plaid_common.cuh"

namespace {

__device__ __forceinline__ void Mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same product accumulated in float16 pairs: c[0] row g, c[1] row g + 8 (columns 2t, 2t + 1).
__device__ __forceinline__ void Mma16816H(uint32_t (&c)[2], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};\n"
      : "+r"(c[0]), "+r"(c[1])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t PackHalf2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ uint32_t PackHalves(__half lo, __half hi) {
  const __half2 h = __halves2half2(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Four 8x8 float16 matrices from shared memory, rows at the lanes' addresses (8 lanes a matrix).
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// The residual kernel's query columns are permuted so that a lane's eight accumulator columns
// ((n tile nt, element j) of lane t) are the contiguous query tokens 8t + 2nt + j of its chunk:
// its qc values of a document token are then one 16-byte load (four of 4 bytes before: the L1
// traffic that bound the kernel). Row r of the shared query chunk holds token QsToken(r).
__device__ __forceinline__ int QsToken(int r) { return 8 * ((r % 8) >> 1) + 2 * (r / 8) + (r & 1); }

// qc[q][cid][32 c + 8t .. + 8) as eight float16 values (qc_half: the host launches this kernel only
// with float16 qc).
__device__ __forceinline__ uint4 QcRow(const PlaidSearchParams& p, int64_t q, int32_t cid, int64_t c, int t) {
  return *reinterpret_cast<const uint4*>(reinterpret_cast<const __half*>(p.qc) + (q * p.k + cid) * p.lq + c * 32 + 8 * t);
}

// An L2 prefetch of the code blocks and centroid ids of stream tokens [t0, t1): the 128-byte lines
// that hold them (no byte outside the two arrays), over the warp's lanes.
__device__ __forceinline__ void PrefetchDoc(const PlaidSearchParams& p, int64_t t0, int64_t t1, int64_t bytes,
                                            int lane) {
  if (t1 <= t0) return;
  const uintptr_t c0 = reinterpret_cast<uintptr_t>(p.codes + (t0 / 16) * bytes) & ~uintptr_t(127);
  const uintptr_t c1 = reinterpret_cast<uintptr_t>(p.codes + ((t1 - 1) / 16 + 1) * bytes - 1) & ~uintptr_t(127);
  const uintptr_t i0 = reinterpret_cast<uintptr_t>(p.cids + t0) & ~uintptr_t(127);
  const uintptr_t i1 = reinterpret_cast<uintptr_t>(p.cids + t1 - 1) & ~uintptr_t(127);
  const int64_t nc = static_cast<int64_t>((c1 - c0) / 128 + 1), ni = static_cast<int64_t>((i1 - i0) / 128 + 1);
  for (int64_t i = lane; i < nc + ni; i += 32) {
    const uintptr_t at = i < nc ? c0 + 128 * i : i0 + 128 * (i - nc);
    asm volatile("prefetch.global.L2 [%0];" ::"l"(at));
  }
}

// One code block (16 tokens x d codes, at most 1 KiB for d <= 128 and 4 bits) and its 16 centroid
// ids, as a warp stages them in shared memory.
constexpr int kStageCodes = 1024, kStageBytes = kStageCodes + 64;

// cp.async of code block blk and its ids into stage (the uploaded ids are padded to whole blocks),
// one commit group per call on every lane.
__device__ __forceinline__ void StageBlock(const PlaidSearchParams& p, uint8_t* stage, int64_t blk, int64_t bytes,
                                           int lane) {
  const int64_t nc = bytes / 16;
  for (int64_t i = lane; i < nc + 4; i += 32) {
    const uint8_t* src = i < nc ? p.codes + blk * bytes + 16 * i
                                : reinterpret_cast<const uint8_t*>(p.cids + blk * 16) + 16 * (i - nc);
    uint8_t* dst = i < nc ? stage + 16 * i : stage + kStageCodes + 16 * (i - nc);
    const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src));
  }
  asm volatile("cp.async.commit_group;\n" ::);
}

template <int N>
__device__ __forceinline__ void StageWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
  __syncwarp();  // every lane's copies visible to the warp
}

}  // namespace

// float16 copies of float32 rows for plaid_qc_mma: p.n x p.d values of p.x (float32) into p.scores
// (as float16), 4 a thread; p.n * p.d is a multiple of 4 (d % 16 == 0 on this path).
extern "C" __global__ void __launch_bounds__(256) plaid_to_half(const PlaidAssignParams p) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x) * 4;
  if (i >= p.n * p.d) return;
  const float4 v = *reinterpret_cast<const float4*>(static_cast<const float*>(p.x) + i);
  *reinterpret_cast<uint2*>(reinterpret_cast<__half*>(p.scores) + i) = make_uint2(PackHalf2(v.x, v.y), PackHalf2(v.z, v.w));
}

// The scales of qc's int8 copy (the interaction's operand): |q_r . c| <= |q_r| cmax (Cauchy-Schwarz,
// cmax = p.cent_norm the largest centroid norm), so row r maps into [-127, 127] by 127 / (|q_r|
// cmax) with no pass over its K products first. p.scores[r] = |q_r| cmax / 127 decodes, p.row_inv[r]
// its inverse (0 for a zero row: padding); p.x float32 [n][d]. grid ceil(n / 256), block 256.
extern "C" __global__ void __launch_bounds__(256) plaid_qc_scale(const PlaidAssignParams p) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  if (r >= p.n) return;
  const float* x = static_cast<const float*>(p.x) + r * p.d;
  float sq = 0.0f;
  for (int64_t k = 0; k < p.d; k++) sq = fmaf(x[k], x[k], sq);
  const float s = sqrtf(sq) * p.cent_norm / 127.0f;
  p.scores[r] = s;
  p.row_inv[r] = s > 0.0f ? 1.0f / s : 0.0f;
}

// Centroid tiles of 128 a plaid_qc_mma block takes in turn (its query tile loaded once), and the
// shared rows: 128 halves + 8 of padding, so ldmatrix's 8 rows of 16 bytes fall in distinct banks.
constexpr int kQcTiles = PLAID_QC_TILES, kQcRow = PLAID_QC_ROW;
constexpr int kQcTileBytes = 128 * kQcRow * 2;
static_assert(3 * kQcTileBytes == PLAID_QC_SMEM, "the launch's dynamic shared memory");

// 128 rows of d float16 values (rows past `rows` repeat the last: their products are never stored)
// into a shared tile by cp.async, one commit group.
__device__ __forceinline__ void QcStage(__half (*dst)[kQcRow], const __half* src, int64_t first, int64_t rows,
                                        int64_t d) {
  const int per = static_cast<int>(d / 8);  // 16-byte chunks a row
  for (int e = threadIdx.x; e < 128 * per; e += blockDim.x) {
    const int r = e / per, c = (e % per) * 8;
    const int64_t row = first + r < rows ? first + r : rows - 1;
    const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(&dst[r][c]));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src + row * d + c));
  }
  asm volatile("cp.async.commit_group;\n" ::);
}

// qc[(r / LQ)][c][r % LQ] = fp16(q_r) . fp16(centroid_c) in fp32, stored as float16, for rows
// r < n and centroids c < k, from float16 copies (plaid_to_half): x [n][d], cent_half [k][d].
// grid (ceil(n / 128), ceil(k / (128 kQcTiles))), block 256 (8 warps of 64 rows x 32 centroids),
// dynamic shared memory PLAID_QC_SMEM; d % 16 == 0, d <= 128, ld % 8 == 0, n % ld == 0, out_half.
// The block's query tile stays in shared memory while its centroid tiles stream through two
// buffers (the next one loads during this one's products); each tile's scores leave through the
// buffer it came in, as runs of 8 rows of one centroid (the [Q][K][LQ] rows of a centroid are
// contiguous), 16-byte stores.
extern "C" __global__ void __launch_bounds__(256, 2) plaid_qc_mma(const PlaidAssignParams p) {
  extern __shared__ __align__(16) unsigned char qc_smem[];
  auto xs = reinterpret_cast<__half(*)[kQcRow]>(qc_smem);
  auto cs = [&](int b) { return reinterpret_cast<__half(*)[kQcRow]>(qc_smem + (1 + b) * kQcTileBytes); };
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * 128;
  const int64_t tile0 = static_cast<int64_t>(blockIdx.y) * kQcTiles;
  const int64_t tiles = min(static_cast<int64_t>(kQcTiles), (p.k + 127) / 128 - tile0);
  const __half* x = static_cast<const __half*>(p.x);
  const __half* cent = static_cast<const __half*>(p.cent_half);
  const int nks = static_cast<int>(p.d / 16);
  const int64_t ld = p.ld;
  QcStage(xs, x, r0, p.n, p.d);  // joins the first tile's group
  QcStage(cs(0), cent, tile0 * 128, p.k, p.d);
  if (tiles > 1) QcStage(cs(1), cent, (tile0 + 1) * 128, p.k, p.d);
  // ldmatrix.x4 row addresses: A, matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15) of a 16-row tile;
  // B, (centroids 0-7, k 0-7 | 8-15) then centroids 8-15 (two n tiles of 8)
  const uint32_t xa = static_cast<uint32_t>(__cvta_generic_to_shared(&xs[wm + (lane & 7) + ((lane >> 3) & 1) * 8][(lane >> 4) * 8]));
  const int brow = wn + (lane >> 4) * 8 + (lane & 7), bcol = ((lane >> 3) & 1) * 8;
  // the int8 copy's inverse scales of the 8 rows this thread stores (its runs below always start at
  // row r0 + 8 (tid % 16))
  float inv8[8];
#pragma unroll
  for (int j = 0; j < 8; j++) {
    const int64_t row = r0 + (tid % 16) * 8 + j;
    inv8[j] = p.qc8 && row < p.n ? p.row_inv[row] : 0.0f;
  }
  for (int64_t ti = 0; ti < tiles; ti++) {
    auto cb = cs(static_cast<int>(ti % 2));
    if (ti + 1 < tiles) asm volatile("cp.async.wait_group 1;\n" ::);
    else asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();
    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;
    const uint32_t ca = static_cast<uint32_t>(__cvta_generic_to_shared(&cb[brow][bcol]));
#pragma unroll
    for (int ks = 0; ks < 8; ks++) {
      if (ks >= nks) break;
      uint32_t a[4][4], b[2][4];
#pragma unroll
      for (int i = 0; i < 4; i++) LdMatrixX4(a[i], xa + static_cast<uint32_t>((16 * i * kQcRow + 16 * ks) * 2));
#pragma unroll
      for (int jj = 0; jj < 2; jj++) LdMatrixX4(b[jj], ca + static_cast<uint32_t>((16 * jj * kQcRow + 16 * ks) * 2));
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) Mma16816(acc[i][j], a[i], b[j / 2][(j % 2) * 2], b[j / 2][(j % 2) * 2 + 1]);
    }
    __syncthreads();  // every warp done with the tile: it becomes the output staging, [centroid][row]
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int h = 0; h < 2; h++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
          for (int e = 0; e < 2; e++)
            cb[wn + 8 * j + 2 * t + e][wm + 16 * i + g + 8 * h] = __float2half_rn(acc[i][j][2 * h + e]);
    __syncthreads();
    const int64_t c0 = (tile0 + ti) * 128;
    for (int e = tid; e < 128 * 16; e += 256) {
      const int cl = e / 16, rc = (e % 16) * 8;
      const int64_t row = r0 + rc, c = c0 + cl;
      if (row >= p.n || c >= p.k) continue;  // n is a multiple of ld: a run of 8 is all in or all out
      const int64_t at = ((row / ld) * p.k + c) * ld + row % ld;
      const uint4 h = *reinterpret_cast<const uint4*>(&cb[cl][rc]);
      *reinterpret_cast<uint4*>(reinterpret_cast<__half*>(p.scores) + at) = h;
      if (p.qc8) {  // the same 8 values in int8, rounded from their float16
        const uint32_t hw[4] = {h.x, h.y, h.z, h.w};
        uint32_t b[2] = {0u, 0u};
#pragma unroll
        for (int j = 0; j < 8; j++) {
          const __half2 v2 = *reinterpret_cast<const __half2*>(&hw[j / 2]);
          const float v = (j % 2 ? __high2float(v2) : __low2float(v2)) * inv8[j];
          const int iv = max(-127, min(127, __float2int_rn(v)));
          b[j / 4] |= (static_cast<uint32_t>(iv) & 0xFFu) << (8 * (j % 4));
        }
        *reinterpret_cast<uint2*>(p.qc8 + at) = make_uint2(b[0], b[1]);
      }
    }
    if (ti + 2 < tiles) {
      __syncthreads();  // the staging read out before the tile after next lands in it
      QcStage(cb, cent, (tile0 + ti + 2) * 128, p.k, p.d);
    }
  }
}

// Most k steps of 16 the residual kernel takes (d <= 128, d % 16 == 0).
#define PLAID_MMA_KS 8
// A row of the shared query chunk: 128 dims + 8 halves of padding.
constexpr int kQsRow = 136;


// The residual scores of listed documents, as plaid_residual (grid (x, Q), block 32 WARPS, a warp a
// document at a time) but on tensor cores: score = sum_i max_t (qc[i][cid_t] + fp16(q_i) . fp16(w_t))
// over the query's tokens i < len, with w_t the token's decoded residual weights. 2-bit tables hold
// a dimension pair per entry ([d / 2][16] half2, index code_k | code_k+1 << 2); 4-bit ones a
// dimension per entry ([d][16] halves). Chunks of 32 query tokens run in turn, each adding its sum
// to score_out (a warp owns its entries).
struct ResidualSmem {
  uint32_t tab[PLAID_MMA_KS * 16 * 8];  // 4 KiB: either table for d <= 128 (64-byte pair rows)
  uint8_t staged[PLAID_SCORE_WARPS][2][kStageBytes];  // 8.5 KiB
  // the query's 32-token chunk in float16, rows padded by 16 bytes so ldmatrix's 8 rows
  // of a matrix fall in different banks, shared by the block's warps (one query) instead of 64
  // registers of B fragments a warp
  __half qs[32][kQsRow];  // 8.5 KiB
};

// kFast: 2 bits and d = 128 known at compile time (no per-step checks), the table offsets from
// rotated code words (see below)
template <bool kFast>
__device__ __forceinline__ void ResidualMma(const PlaidSearchParams& p, ResidualSmem& sm) {
  uint32_t* tab = sm.tab;
  auto& staged = sm.staged;
  auto& qs = sm.qs;
  const int lane = threadIdx.x % 32, wid = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int64_t q = blockIdx.y;
  const int nks = kFast ? PLAID_MMA_KS : static_cast<int>(p.d / 16);
  const int bits = kFast ? 2 : p.bits;
  // kFast: token g's 2-bit code of a dimension word rotated to bits 2-3 (token g + 8's to 18-19),
  // the next dimension's to bits 4-5 (20-21): one LOP3 merges them into both tokens' byte
  // offsets in a pair's 64-byte table row
  const uint32_t rx = (2 * g + 30) & 31, ry = (2 * g + 28) & 31;
  const uint8_t* tabt = reinterpret_cast<const uint8_t*>(tab) + 64 * t;  // pair 8 ks + t
  if (bits == 2) {
    for (int e = threadIdx.x; e < p.d * 8; e += blockDim.x) {
      const int pr = e / 16, idx = e % 16;
      tab[e] = PackHalf2(p.tables[(2 * pr) * 16 + (idx & 3)], p.tables[(2 * pr + 1) * 16 + (idx >> 2)]);
    }
  } else {
    __half* th = reinterpret_cast<__half*>(tab);
    for (int e = threadIdx.x; e < p.d * 16; e += blockDim.x) th[e] = __float2half_rn(p.tables[e]);
  }
  __syncthreads();
  const __half* th = reinterpret_cast<const __half*>(tab);
  const int64_t len = p.q_len[q];
  const int64_t o0 = p.score_off[q], o1 = p.score_off[q + 1];
  const int64_t bytes = (kFast ? 128 : p.d) * 2 * bits;  // one code block: 16 tokens x d codes
  for (int64_t c = 0; c * 32 < p.lq; c++) {
    if (c > 0 && c * 32 >= len) break;  // padding only: nothing to add
    if (c > 0) __syncthreads();  // every warp done with the last chunk
    for (int e = threadIdx.x; e < 32 * (p.d / 2); e += blockDim.x) {
      const int r = static_cast<int>(e / (p.d / 2)), k = static_cast<int>(2 * (e % (p.d / 2)));
      const float2 v = *reinterpret_cast<const float2*>(p.q + (q * p.lq + c * 32 + QsToken(r)) * p.d + k);
      *reinterpret_cast<uint32_t*>(&qs[r][k]) = PackHalf2(v.x, v.y);
    }
    __syncthreads();
    // ldmatrix.x4 row addresses: lanes 8j..8j+7 give matrix j's rows (token 8 * (j / 2) + row
    // of a pair of 8-token tiles; dims 8 * (j % 2) of a k step)
    const uint32_t qrow = static_cast<uint32_t>(__cvta_generic_to_shared(&qs[(lane / 16) * 8 + lane % 8][((lane / 8) % 2) * 8]));
    // the next document's id, then offsets, then an L2 prefetch of its codes and ids, each a block
    // after the last (a load is waited for only where its value is used): a warp's documents are
    // random rows, so without it every block starts on a round trip to memory
    const int64_t step = static_cast<int64_t>(gridDim.x) * PLAID_SCORE_WARPS;
    int64_t e = o0 + static_cast<int64_t>(blockIdx.x) * PLAID_SCORE_WARPS + wid;
    int64_t t0 = 0, t1 = 0;
    int cur = 0;
    int64_t pending = -1;  // the block in flight into staged[wid][cur]
    int64_t pre = -1;  // the block whose qc values qn holds
    uint4 qn[2];  // rows g and g + 8: query tokens 8t .. 8t + 7
    if (e < o1) {
      const int64_t doc = p.score_doc[e];
      t0 = p.doc_off[doc];
      t1 = p.doc_off[doc + 1];
    }
    for (; e < o1; e += step) {
      const int64_t ndoc = e + step < o1 ? p.score_doc[e + step] : -1;
      int64_t nt0 = 0, nt1 = 0;
      int ahead = 0;  // 0: the next id asked; 1: its offsets; 2: its lines prefetched
      auto advance = [&]() {
        if (ahead == 0 && ndoc >= 0) {
          nt0 = p.doc_off[ndoc];
          nt1 = p.doc_off[ndoc + 1];
        } else if (ahead == 1 && ndoc >= 0) {
          PrefetchDoc(p, nt0, nt1, bytes, lane);
        }
        ahead++;
      };
      // the maxima, and the products below, in float16 pairs (columns 2nt, 2nt + 1 of lane t):
      // half the accumulator registers of float32, so 5 blocks an SM without a spill; the values
      // rank candidates for the exact re-score, float16's 11 bits are ample for it
      uint32_t mh[4];
#pragma unroll
      for (int nt = 0; nt < 4; nt++) mh[nt] = 0xFC00FC00u;  // -inf, -inf
      for (int64_t blk = t0 / 16; blk * 16 < t1; blk++) {
        // blk's codes and ids come through staged[wid][cur], copied a block ahead (within the
        // document, then the next document's first block), so the loads overlap the block before
        if (pending != blk) {
          StageWait<0>();  // nothing ahead (the first document, or no time to know the next)
          StageBlock(p, staged[wid][cur], blk, bytes, lane);
        }
        const bool last = (blk + 1) * 16 >= t1;
        if (last && ahead < 1) advance();  // the next document's offsets
        const int64_t next = !last ? blk + 1 : (ndoc >= 0 && nt1 > nt0 ? nt0 / 16 : -1);
        if (next >= 0) {
          StageBlock(p, staged[wid][cur ^ 1], next, bytes, lane);
          StageWait<1>();
        } else {
          StageWait<0>();
        }
        const uint8_t* cw = staged[wid][cur];
        const int32_t* ids = reinterpret_cast<const int32_t*>(cw + kStageCodes);
        const int64_t ra = blk * 16 + g, rb = ra + 8;  // this lane's two token rows
        const bool va = ra >= t0 && ra < t1, vb = rb >= t0 && rb < t1;
        uint32_t acc[4][2];  // rows g and g + 8, each starting from its qc values
        if (pre != blk) {  // else its qc values came a block ahead
          const uint4 z = make_uint4(0u, 0u, 0u, 0u);
          qn[0] = va ? QcRow(p, q, ids[g], c, t) : z;
          qn[1] = vb ? QcRow(p, q, ids[g + 8], c, t) : z;
        }
        {
          const uint32_t xa[4] = {qn[0].x, qn[0].y, qn[0].z, qn[0].w};
          const uint32_t xb[4] = {qn[1].x, qn[1].y, qn[1].z, qn[1].w};
#pragma unroll
          for (int nt = 0; nt < 4; nt++) {  // column (nt, j) of lane t: query token 8t + 2nt + j
            acc[nt][0] = xa[nt];
            acc[nt][1] = xb[nt];
          }
        }
        // the next block of this document: its ids now (L2: the document was prefetched), its qc
        // values after this block's products, so their round trips overlap this block's work
        const int64_t na = (blk + 1) * 16 + g, nb = na + 8;
        const bool pa = !last && na < t1, pb = !last && nb < t1;
        const int32_t ia = pa ? p.cids[na] : 0, ib = pb ? p.cids[nb] : 0;
        const int sa = g * bits, sb = (g + 8) * bits;
#pragma unroll
        for (int ks = 0; ks < PLAID_MMA_KS; ks++) {
          if (ks >= nks) break;
          const int k = 16 * ks + 2 * t;  // dims k, k + 1 and k + 8, k + 9
          uint32_t a[4];
          if constexpr (kFast) {
            const uint2 w0 = *reinterpret_cast<const uint2*>(cw + k * 4);
            const uint2 w1 = *reinterpret_cast<const uint2*>(cw + (k + 8) * 4);
            const uint32_t m = 0x000C000Cu;
            const uint32_t i0 = (__funnelshift_r(w0.x, w0.x, rx) & m) | (__funnelshift_r(w0.y, w0.y, ry) & ~m);
            const uint32_t i1 = (__funnelshift_r(w1.x, w1.x, rx) & m) | (__funnelshift_r(w1.y, w1.y, ry) & ~m);
            const uint8_t* t0p = tabt + 512 * ks;  // pair k / 2
            a[0] = *reinterpret_cast<const uint32_t*>(t0p + (i0 & 0x3Cu));
            a[1] = *reinterpret_cast<const uint32_t*>(t0p + ((i0 >> 16) & 0x3Cu));
            a[2] = *reinterpret_cast<const uint32_t*>(t0p + 256 + (i1 & 0x3Cu));  // pair k / 2 + 4
            a[3] = *reinterpret_cast<const uint32_t*>(t0p + 256 + ((i1 >> 16) & 0x3Cu));
          } else if (bits == 2) {
            const uint2 w0 = *reinterpret_cast<const uint2*>(cw + k * 4);
            const uint2 w1 = *reinterpret_cast<const uint2*>(cw + (k + 8) * 4);
            const uint32_t* t0p = tab + (k / 2) * 16;
            const uint32_t* t1p = tab + (k / 2 + 4) * 16;
            a[0] = t0p[((w0.x >> sa) & 3) | (((w0.y >> sa) & 3) << 2)];
            a[1] = t0p[((w0.x >> sb) & 3) | (((w0.y >> sb) & 3) << 2)];
            a[2] = t1p[((w1.x >> sa) & 3) | (((w1.y >> sa) & 3) << 2)];
            a[3] = t1p[((w1.x >> sb) & 3) | (((w1.y >> sb) & 3) << 2)];
          } else {
            const ulonglong2 w0 = *reinterpret_cast<const ulonglong2*>(cw + k * 8);
            const ulonglong2 w1 = *reinterpret_cast<const ulonglong2*>(cw + (k + 8) * 8);
            const __half* h0 = th + k * 16;
            const __half* h1 = th + (k + 8) * 16;
            a[0] = PackHalves(h0[(w0.x >> sa) & 15], h0[16 + ((w0.y >> sa) & 15)]);
            a[1] = PackHalves(h0[(w0.x >> sb) & 15], h0[16 + ((w0.y >> sb) & 15)]);
            a[2] = PackHalves(h1[(w1.x >> sa) & 15], h1[16 + ((w1.y >> sa) & 15)]);
            a[3] = PackHalves(h1[(w1.x >> sb) & 15], h1[16 + ((w1.y >> sb) & 15)]);
          }
#pragma unroll
          for (int np = 0; np < 2; np++) {
            uint32_t f[4];
            LdMatrixX4(f, qrow + static_cast<uint32_t>((np * 16 * kQsRow + 16 * ks) * 2));
            Mma16816H(acc[2 * np], a, f[0], f[1]);
            Mma16816H(acc[2 * np + 1], a, f[2], f[3]);
          }
        }
        if (!last) {
          const uint4 z = make_uint4(0u, 0u, 0u, 0u);
          qn[0] = pa ? QcRow(p, q, ia, c, t) : z;
          qn[1] = pb ? QcRow(p, q, ib, c, t) : z;
        }
        pre = last ? -1 : blk + 1;  // a block shared with the next document is loaded afresh there
#pragma unroll
        for (int nt = 0; nt < 4; nt++) {
          __half2 v = *reinterpret_cast<__half2*>(&mh[nt]);
          if (va) v = __hmax2(v, *reinterpret_cast<const __half2*>(&acc[nt][0]));
          if (vb) v = __hmax2(v, *reinterpret_cast<const __half2*>(&acc[nt][1]));
          mh[nt] = *reinterpret_cast<uint32_t*>(&v);
        }
        if (ahead < 2) advance();
        __syncwarp();  // every lane done with staged[wid][cur] before it is refilled
        cur ^= 1;
        pending = next;
      }
      while (ahead < 2) advance();
      float m[4][2];
#pragma unroll
      for (int nt = 0; nt < 4; nt++) {
        const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&mh[nt]));
        m[nt][0] = v.x;
        m[nt][1] = v.y;
      }
      // the max over the 8 row groups, then the sum of this chunk's columns (query tokens) < len
      double s = 0.0;
#pragma unroll
      for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
          float v = m[nt][j];
#pragma unroll
          for (int o = 4; o < 32; o *= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
          if (c * 32 + 8 * t + 2 * nt + j < len) s += static_cast<double>(v);
        }
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      if (lane == 0) {
        const float prev = c == 0 ? 0.0f : p.score_out[e];
        p.score_out[e] = t1 > t0 ? prev + static_cast<float>(s) : -INFINITY;
      }
      t0 = nt0;
      t1 = nt1;
    }
  }
}

// 5 blocks an SM (the query chunk in shared memory leaves the registers for it): measured 1.25x
// the register-held query at 3; the fast decode for the default 2 bits at d = 128 another 1.24x;
// float16 accumulators another 1.06x (H100, bench/NOTES.md), 6 blocks with them spill and lose.
extern "C" __global__ void __launch_bounds__(32 * PLAID_SCORE_WARPS, 5) plaid_residual_mma(const PlaidSearchParams p) {
  __shared__ __align__(64) ResidualSmem sm;
  if (p.bits == 2 && p.d == 128) ResidualMma<true>(p, sm);
  else ResidualMma<false>(p, sm);
}

// ---- the exact re-score on tensor cores --------------------------------------------------------

// The position in a shared query row of each dimension, so that one 16-byte load of a document
// token's dimensions 32 kc + 8t .. + 8 is lane t's A fragment of k steps 2 kc and 2 kc + 1 (a
// trailing step of 16 dimensions: an 8-byte load of 32 kc + 4t .. + 4). The same permutation on
// both operands leaves every dot product a sum of the same terms.
__device__ __forceinline__ int ExactDim(int pos, int d) {
  const int s = pos / 16, l = pos % 16, t = (l % 8) / 2, e = l % 2, up = l / 8, kc = s / 2, h = s % 2;
  return 32 * (kc + 1) <= d ? 32 * kc + 8 * t + 4 * h + 2 * up + e : 32 * kc + 4 * t + 2 * up + e;
}

struct ExactSmem {
  __half hi[32][kQsRow];  // fp16(s q) of the chunk's 32 query tokens, dims permuted (ExactDim)
  __half lo[32][kQsRow];  // fp16(s q - hi)
  float inv[32];          // 1 / s: s a power of two that puts the token's largest |q_k| in [2^14, 2^15)
};

// The exact MaxSim of listed documents on their float16 source tokens (grid (x, Q), block 32 WARPS,
// a warp a document at a time), for plans of precision 'float16' with d % 16 == 0, d <= 128: the
// document's 16-token blocks as A rows loaded straight from memory, the query chunk as B fragments
// from shared memory in two float16 parts, so each product keeps ~22 bits of the float32 query
// (float16 x float16 products are exact in the float32 accumulators). Scores within ~1e-7 relative
// of plaid_exact's float32 chain, which took 7 of 65 ms per 1,000 queries at 1M on CUDA cores.
// Chunks of 32 query tokens run in turn, each adding its sum to score_out (a warp owns its entries).
extern "C" __global__ void __launch_bounds__(32 * PLAID_SCORE_WARPS, 4) plaid_exact_mma(const PlaidSearchParams p) {
  __shared__ __align__(64) ExactSmem sm;
  const int lane = threadIdx.x % 32, wid = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int64_t q = blockIdx.y;
  const int d = static_cast<int>(p.d), nks = d / 16, full = d / 32;
  const __half* tok = static_cast<const __half*>(p.tokens);
  const int64_t len = p.q_len[q];
  const int64_t o0 = p.score_off[q], o1 = p.score_off[q + 1];
  const int64_t step = static_cast<int64_t>(gridDim.x) * PLAID_SCORE_WARPS;
  const uint32_t qh = static_cast<uint32_t>(__cvta_generic_to_shared(&sm.hi[(lane / 16) * 8 + lane % 8][((lane / 8) % 2) * 8]));
  const uint32_t ql = static_cast<uint32_t>(__cvta_generic_to_shared(&sm.lo[(lane / 16) * 8 + lane % 8][((lane / 8) % 2) * 8]));
  for (int64_t c = 0; c * 32 < p.lq; c++) {
    if (c > 0 && c * 32 >= len) break;  // padding only: nothing to add
    if (c > 0) __syncthreads();         // every warp done with the last chunk
    const float* qrows = p.q + (q * p.lq + c * 32) * p.d;
    for (int r = wid; r < 32; r += PLAID_SCORE_WARPS) {
      float a = 0.0f;
      for (int k = lane; k < d; k += 32) a = fmaxf(a, fabsf(qrows[r * p.d + k]));
#pragma unroll
      for (int o = 16; o > 0; o /= 2) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
      const int n = a > 0.0f && a <= 3.4e38f ? max(-126, min(127, 14 - ilogbf(a))) : 0;
      if (lane == 0) sm.inv[r] = ldexpf(1.0f, -n);
      for (int pos = 2 * lane; pos < d; pos += 64) {
        const int k = ExactDim(pos, d);  // pos + 1 holds k + 1
        const float x = ldexpf(qrows[r * p.d + k], n), y = ldexpf(qrows[r * p.d + k + 1], n);
        const __half hx = __float2half_rn(x), hy = __float2half_rn(y);
        *reinterpret_cast<uint32_t*>(&sm.hi[r][pos]) = PackHalves(hx, hy);
        *reinterpret_cast<uint32_t*>(&sm.lo[r][pos]) = PackHalf2(x - __half2float(hx), y - __half2float(hy));
      }
    }
    __syncthreads();
    for (int64_t e = o0 + static_cast<int64_t>(blockIdx.x) * PLAID_SCORE_WARPS + wid; e < o1; e += step) {
      const int64_t doc = p.score_doc[e];
      const int64_t t0 = p.doc_off[doc], t1 = p.doc_off[doc + 1];
      float m[4][2];
#pragma unroll
      for (int nt = 0; nt < 4; nt++) m[nt][0] = m[nt][1] = -INFINITY;
      // this block's rows g and g + 8 (zeros past the document), the next block's loaded ahead
      uint4 ra[4], rb[4], na[4], nb[4];
      auto load = [&](int64_t tb, uint4 (&xa)[4], uint4 (&xb)[4]) {
        const int64_t a = tb + g, b = tb + g + 8;
        const uint4 z = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
        for (int kc = 0; kc < 4; kc++) {
          if (kc < full) {
            xa[kc] = a < t1 ? *reinterpret_cast<const uint4*>(tok + a * d + 32 * kc + 8 * t) : z;
            xb[kc] = b < t1 ? *reinterpret_cast<const uint4*>(tok + b * d + 32 * kc + 8 * t) : z;
          } else if (kc == full && 2 * kc < nks) {
            const uint2 u = a < t1 ? *reinterpret_cast<const uint2*>(tok + a * d + 32 * kc + 4 * t) : make_uint2(0u, 0u);
            const uint2 v = b < t1 ? *reinterpret_cast<const uint2*>(tok + b * d + 32 * kc + 4 * t) : make_uint2(0u, 0u);
            xa[kc] = make_uint4(u.x, u.y, 0u, 0u);
            xb[kc] = make_uint4(v.x, v.y, 0u, 0u);
          }
        }
      };
      if (t1 > t0) load(t0, ra, rb);
      for (int64_t tb = t0; tb < t1; tb += 16) {
        if (tb + 16 < t1) load(tb + 16, na, nb);
        float acc[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
          for (int j = 0; j < 4; j++) acc[nt][j] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < PLAID_MMA_KS; ks++) {
          if (ks >= nks) break;
          const int kc = ks / 2;
          const uint32_t a[4] = {ks % 2 ? ra[kc].z : ra[kc].x, ks % 2 ? rb[kc].z : rb[kc].x,
                                 ks % 2 ? ra[kc].w : ra[kc].y, ks % 2 ? rb[kc].w : rb[kc].y};
#pragma unroll
          for (int part = 0; part < 2; part++) {
#pragma unroll
            for (int np = 0; np < 2; np++) {
              uint32_t f[4];
              LdMatrixX4(f, (part ? ql : qh) + static_cast<uint32_t>((np * 16 * kQsRow + 16 * ks) * 2));
              Mma16816(acc[2 * np], a, f[0], f[1]);
              Mma16816(acc[2 * np + 1], a, f[2], f[3]);
            }
          }
        }
        const bool va = tb + g < t1, vb = tb + g + 8 < t1;
#pragma unroll
        for (int nt = 0; nt < 4; nt++) {
          if (va) {
            m[nt][0] = fmaxf(m[nt][0], acc[nt][0]);
            m[nt][1] = fmaxf(m[nt][1], acc[nt][1]);
          }
          if (vb) {
            m[nt][0] = fmaxf(m[nt][0], acc[nt][2]);
            m[nt][1] = fmaxf(m[nt][1], acc[nt][3]);
          }
        }
#pragma unroll
        for (int kc = 0; kc < 4; kc++) {
          ra[kc] = na[kc];
          rb[kc] = nb[kc];
        }
      }
      // the max over the 8 row groups, then the sum of this chunk's columns (query tokens) < len
      double s = 0.0;
#pragma unroll
      for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
          float v = m[nt][j];
#pragma unroll
          for (int o = 4; o < 32; o *= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
          const int i = 8 * nt + 2 * t + j;
          if (c * 32 + i < len) s += static_cast<double>(v * sm.inv[i]);
        }
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      if (lane == 0) {
        const float prev = c == 0 ? 0.0f : p.score_out[e];
        p.score_out[e] = t1 > t0 ? prev + static_cast<float>(s) : -INFINITY;
      }
    }
  }
}
