// The argument blocks of the compressed-index kernels (native/cuda/kernels/maxsim_plaid.cu), by value.
// Shared by the kernels (nvcc) and the engine that launches them (native/cuda/plaid_engine.cc, g++):
// fixed-width plain types only.
//
// Bitwise agreement with the CPU codec (native/cpu/residual.h): every dot product x . c is one fp32
// fma chain over k = 0 .. d-1 starting from +0, plus the bias in a separate fp32 add; a best is the
// largest (score, lowest id), compared as a 64-bit key (PlaidKey) so that atomicMax merges partial
// bests in any order. The query x centroid dots of the search are the same chain (the CPU's `dots`).
#pragma once
#include <stdint.h>

// Rows x centroids tiles of the SIMT dot kernels (plaid_assign_best / plaid_dots): 64 x 64 outputs,
// 256 threads of 4 x 4, k in steps of 32 through shared memory.
#define PLAID_TILE_M 64
#define PLAID_TILE_N 64
#define PLAID_TILE_K 32
#define PLAID_THREADS 256
// Query tokens a warp holds (lanes); longer queries run in chunks of 32.
#define PLAID_LANES 32
// Most centroids probed per query token (the probe kernel's per-lane lists).
#define PLAID_MAX_NPROBE 32
// Centroids per probe warp (the probe kernel splits K into chunks of this many).
#define PLAID_PROBE_CHUNK 2048
// Centroids per probe group: each token's best key per group bounds its floor (plaid_group_max), and
// the lists' pass skips the groups under every token's floor. Groups a lane of plaid_probe_floor
// holds (runs of consecutive groups past 32 x 16 of them).
#define PLAID_GROUP 128
#define PLAID_FLOOR_OWN 16
// Probe chunks a lane of plaid_probe_merge holds (its heads in registers): K <= 32 x 8 x 2048 on the
// GPU search path.
#define PLAID_MERGE_OWN 8
#define PLAID_MAX_SEARCH_CENTROIDS (32 * PLAID_MERGE_OWN * PLAID_PROBE_CHUNK)
// Residual / exact scoring: warps per block (one query per block row).
#define PLAID_SCORE_WARPS 4
#define PLAID_MAX_DIM 1024

// plaid_qc_mma: centroid tiles of 128 a block, shared rows of 136 halves, its dynamic shared memory
// (the query tile and two centroid tiles).
#define PLAID_QC_TILES 8
#define PLAID_QC_ROW 136
#define PLAID_QC_SMEM (3 * 128 * PLAID_QC_ROW * 2)

struct PlaidAssignParams {
  const void* x;              // [n][d] rows in `dtype` (0 float32, 1 float16, 2 bfloat16)
  const float* cent;          // [k][d] centroids (fine or coarse), by id
  const float* bias;          // [k] -|c|^2 / 2 (double, rounded once), as the CPU packs it
  const int32_t* members;     // grouped fine pass: centroid ids of each group (null: id = position)
  const int32_t* group_off;   // [g + 1] into members (null: one group of all k centroids)
  const int32_t* tiles;       // [tiles][3]: group, first row slot, rows (<= PLAID_TILE_M)
  const int32_t* rows_of;     // row slots -> row (null: slot = row)
  unsigned long long* best;   // [n] running best keys (plaid_assign_best)
  float* scores;              // [n][k] all scores (plaid_dots with layout 0)
  // grouped: each row's picked groups and the per-group counts / cursors of the scatter
  int32_t* pick;              // [n][probe] (-1: none)
  int32_t* group_count;       // [g]
  const int32_t* group_first; // [g] first slot of each group in rows_of
  int32_t* group_cursor;      // [g]
  int32_t* rows_out;          // scatter target (rows_of of the fine pass)
  // encode
  const float* cutoffs;       // [d][2^b - 1]
  const float* tables;        // [d][16] reconstruction weights
  int32_t* cids;              // [n]
  uint8_t* codes;             // blocks covering stream tokens [first, first + n)
  double* sq_error;           // [1]
  int64_t n;
  int64_t k;
  int64_t g;
  int64_t d;
  int64_t probe;
  int64_t first;              // stream index of row 0 (codes: block first / 16 is block 0)
  int64_t num_tiles;
  int64_t split;              // centroid splits per tile (grid.y) of the flat pass
  int64_t ld;                 // plaid_dots: output rows per block of k (1: [n][k]; LQ: [Q][K][LQ])
  int32_t dtype;
  int32_t bits;
  int32_t out_half;           // plaid_qc_mma: 1 writes scores as float16
  int32_t pad0;
  const void* cent_half;      // plaid_qc_mma: [k][d] float16 centroids (x: [n][d] float16 rows)
  // the int8 copy of qc (plaid_qc_scale, plaid_qc_mma; null: none): [n / ld][k][ld] values
  // round(qc_r,c * row_inv[r]) in [-127, 127]; plaid_qc_scale writes row_inv and scores = the scale
  int8_t* qc8;
  float* row_inv;
  float cent_norm;            // plaid_qc_scale: the largest centroid norm
  int32_t pad1;
};

struct PlaidSearchParams {
  // index (device)
  const float* cent;          // [K][d]
  const float* tables;        // [d][16]
  const int32_t* cids;        // [T rounded to 16]
  const uint8_t* codes;       // blocks of 16 tokens
  const int64_t* doc_off;     // [N + 1]
  const int64_t* bag_off;     // [N + 1]
  const int32_t* bags;
  const int64_t* ivf_off;     // [K + 1]
  const int32_t* ivf;
  const void* tokens;         // [T][d] source tokens in tokens_dtype (null: none kept)
  // queries: Q queries padded to LQ rows each (zeros past each query's length)
  const float* q;             // [Q * LQ][d]
  const int32_t* q_len;       // [Q]
  float* qc;                  // [Q][K][LQ] q_i . centroid_c
  unsigned long long* partial;  // [Q][chunks][LQ][NP] probe keys of each chunk
  uint32_t* cbits;            // [Q][ceil(K / 32)] probed centroids
  int32_t* probed;            // [Q][LQ * nprobe] distinct probed centroids of each query
  int32_t* probed_n;          // [Q]
  uint32_t* dbits;            // [Q][words] candidate documents
  int32_t* cand_n;            // [Q]
  const int64_t* cand_off;    // [Q + 1]
  int32_t* cand;              // candidate documents, ascending per query
  int32_t* cand_q;            // the query of each candidate
  float* ci;                  // centroid-interaction score of each candidate
  // selection (plaid_select): entries [sel_in_off[q], sel_in_off[q + 1]) of (sel_doc, sel_score);
  // the best sel_keep[q] by (score desc, doc asc) go to [sel_out_off[q], ...) of sel_out_*.
  const int64_t* sel_in_off;
  const int32_t* sel_doc;
  const float* sel_score;
  const int64_t* sel_out_off;
  int32_t* sel_out_doc;
  float* sel_out_score;
  int32_t* sel_out_n;         // [Q] entries written
  // scoring of listed documents: [score_off[q], score_off[q + 1]) of score_doc -> score_out
  const int64_t* score_off;
  const int32_t* score_doc;
  float* score_out;
  int64_t num_q;
  int64_t lq;                 // LQ: padded rows per query (a multiple of 32)
  int64_t k;
  int64_t d;
  int64_t docs;
  int64_t words;              // ceil(docs / 32)
  int64_t nprobe;
  int64_t np;                 // the probe lists' size (4, 8, 16 or 32; >= nprobe)
  int64_t chunks;             // ceil(K / PLAID_PROBE_CHUNK)
  int64_t max_entries;        // grid bound of the per-query entry kernels
  float threshold;            // centroid pruning of the interaction (-inf: none)
  int32_t bits;
  int32_t tokens_dtype;
  int32_t pad0;
  // appended last, so that the fields above keep their offsets for kernels built before it
  uint32_t* kbits;            // [Q][ceil(K / 32)] centroids kept by the pruning threshold
  int32_t qc_half;            // 1: qc holds float16 values (precision 'float16'), read through QcAt
  int32_t pad1;
  // [Q][groups][LQ] each token's best key per group of PLAID_GROUP centroids, then [Q][LQ] its
  // floor: the nprobe-th best of those (plaid_group_max / plaid_probe_floor)
  unsigned long long* group_max;
  unsigned long long* probe_floor;
  // plaid_offsets: [3][Q + 1] the candidate, kept and final offsets from cand_n, the kept lists
  // capped at cap_kept and the final at cap_fin entries per query (no host round trip)
  int64_t* offs;
  int64_t cap_kept;
  int64_t cap_fin;
  int64_t groups;             // ceil(K / PLAID_GROUP)
  // [Q][K][LQ] the int8 copy of qc and [Q][LQ] each row's scale (qc ~ qc8 * scale) for
  // plaid_interaction_q8 (null: none)
  const int8_t* qc8;
  const float* qc8_scale;
  float cent_norm;            // the index's largest centroid norm (the int8 copy's scales)
  int32_t pad2;
};

#ifdef __CUDACC__
#define PLAID_HD __host__ __device__
#else
#define PLAID_HD
#endif

// The ordered key of a (score, id) pair: larger is better; ties to the lower id; +0 and -0 equal.
// NaN maps to 0 (below every real score), like a CPU lane that never takes a NaN.
PLAID_HD inline unsigned long long PlaidKey(float s, int32_t id) {
  if (s != s) return 0ull;
  if (s == 0.0f) s = 0.0f;
  uint32_t u;
#ifdef __CUDACC__
  u = __float_as_uint(s);
#else
  __builtin_memcpy(&u, &s, 4);
#endif
  const uint32_t ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(ord) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(id));
}
PLAID_HD inline int32_t PlaidKeyId(unsigned long long key) {
  return static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(key & 0xFFFFFFFFull));
}
// A register best's start: id 0 below any real score (never merged). The device bests start at 0,
// which plaid_encode reads as centroid 0 (a row of NaNs, as on the CPU).
#define PLAID_KEY_NONE 0xFFFFFFFFull
