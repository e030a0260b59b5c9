// The residual codec and the PLAID-style search stages on the CPU, in plain C++ (no Node-API): the
// assignment of tokens to their nearest centroid, the b-bit residual encode, query x centroid dots,
// centroid interaction over documents as bags of centroid ids, and the fused decompress-and-MaxSim.
//
// Residual codes (ISA-independent layout): the index's token stream (documents back to back) is cut
// into blocks of kResidualBlock = 16 tokens. A block stores, dimension by dimension, the 16 tokens'
// b-bit codes as one little-endian word of 16 * b bits (token t at bits [t * b, (t + 1) * b)), so a
// block is d * 2b bytes and one dimension of 16 tokens is one 32-bit (b = 2) or 64-bit (b = 4) load.
// A token decodes as centroid[cid] + weight[k][code_k] for every dimension k. The kernels never
// decode a vector to memory: with qc[i][c] = q_i . centroid_c known from the probe stage,
//   q_i . decoded_j = qc[i][cid_j] + sum_k q_ik * weight[k][code_jk],
// and the second term is computed with the codes of W tokens expanded to weights in a vector register
// (a lane permute of the dimension's 16-entry table) and multiplied into W lanes of tokens at once.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../common/tokens.h"

namespace maxsim_cpu {

constexpr int kResidualBlock = 16;

// Per dimension 16 floats: entry e is the reconstruction weight of code e & (2^b - 1) (the 2-bit
// table repeats its 4 weights, so any lane permute of 8 or 16 entries reads the right one).
constexpr int kResidualTable = 16;

struct ResidualQuery {
  const float* qt = nullptr;   // [d][lq]: query tokens transposed
  const float* qct = nullptr;  // [k][lqp]: q_i . centroid_c (rows of lqp floats, k * lqp < 2^31)
  int64_t lq = 0;
  int64_t lqp = 0;  // lq rounded up to a multiple of 16 (at least 16)
  int64_t k = 0;
  int64_t d = 0;
  // The int8 form, filled for kernel sets with int8_residual (ResidualInt8Query): the query as
  // q + 128 bytes in lane blocks [lqp / 16][dq][16][4] (dq = ceil(d / 4), zero past lq and d),
  // per query token the scale sq_i * sw (0 past lq), and the residual table as int8 quads.
  const uint8_t* q8 = nullptr;
  const float* qscale = nullptr;  // [lqp]
  const int8_t* tab8 = nullptr;   // [dq][16]: round(weight[4p + j][e] / sw) at byte 4j + e (2-bit)
  int64_t dq = 0;
  // Token pruning (ResidualPrunePlan): keepc null decodes every token; else only the tokens whose
  // centroid keepc flags ([k]), the others counting q . c alone (their residual term left out).
  const uint8_t* keepc = nullptr;
};

struct ResidualCodes {
  const int32_t* cids = nullptr;  // [tokens rounded up to 16]: centroid of each token (0 past the end)
  const uint8_t* codes = nullptr; // blocks of 16 tokens, d * 2 * bits bytes each
  const float* tables = nullptr;  // [d][16]
  int bits = 2;
  int64_t d = 0;
};

struct ResidualKernels {
  const char* name;
  int lanes;
  // Nearest centroid by max(x . c + bias[c]) (ties: lowest c) for n rows of x ([n][d] floats).
  // cpack: centroids packed in lane blocks [kp / lanes][d][lanes]; bias [kp] (-inf past k).
  void (*assign)(const float* x, int64_t n, const float* cpack, const float* bias, int64_t kp, int64_t d,
                 int32_t* id, float* score);
  // qct[c][i] = q_i . centroid_c for c in [c_begin, c_end): qpack holds lqp / lanes lane blocks of
  // the query ([block][d][lanes]); centroids row-major [k][d]; qct rows of lqp floats.
  void (*dots)(const float* qpack, int64_t lqp, const float* centroids, int64_t c_begin, int64_t c_end, int64_t d,
               float* qct);
  // sum_i max_j q_i . decoded_j over document tokens [start, start + len) of the token stream
  // (-inf for len == 0, 0 for lq == 0).
  float (*residual_doc)(const ResidualQuery& q, const ResidualCodes& c, int64_t start, int64_t len);
  // sum_i max_{c in bag, keep[c]} qct[c][i] over i < lq, an empty max counting 0. qct rows of lqp
  // (a multiple of 16) floats; keep null: every centroid kept. scratch: lqp floats.
  float (*centroid_doc)(const float* qct, int64_t lqp, int64_t lq, const int32_t* bag, int64_t n,
                        const uint8_t* keep, float* scratch);
  // residual_doc reads the int8 form of the query for these code widths (bit 1 << bits set): query
  // and residual weights quantized to int8 (one scale per query token, one for the table), integer
  // dot products (VPDPBUSD, or VPMADDUBSW on AVX2), fp32 q . c added per token before the max. Error
  // per token pair at most sum_k |q_k| sw / 2 + (|w_k| + sw / 2) sq / 2 (sq = max_k |q_k| / 127,
  // sw = max |w| / int8_weight_max: the scales).
  int int8_residual;
  // the largest int8 weight the table takes: 127, or 63 where the dot's int16 pairs would saturate
  int int8_weight_max = 127;
};

const ResidualKernels* ResidualAvx512();
const ResidualKernels* ResidualAvx512Vnni();  // avx512's kernels, 2-bit residual scoring in int8
const ResidualKernels* ResidualAvxVnni();   // avx2's kernels, 2-bit residual in int8 (VEX VPDPBUSD)
const ResidualKernels* ResidualAvx2Int8();  // avx2's kernels, 2-bit residual in int8 (VPMADDUBSW)
const ResidualKernels* ResidualAvx2();
const ResidualKernels* ResidualPortable();
std::vector<const ResidualKernels*> UsableResidualKernels();
// `requested` empty or "auto": the best usable; null and *error set when unknown or unusable.
const ResidualKernels* SelectResidualKernels(const std::string& requested, std::string* error);

// Assignment of n contiguous float32 rows to the nearest centroid (L2: bias = -|c|^2 / 2) or the
// largest dot product (l2 false). ids[n]; scores[n] (nullable): the maximized value.
void ResidualAssign(const ResidualKernels& k, const float* x, int64_t n, const float* centroids, int64_t nc,
                    int64_t d, bool l2, int32_t* ids, float* scores, int threads);

// Two-level assignment: the fine centroids split into g groups under coarse centroids. A row is
// scored against every coarse centroid (the same rule as the fine ones: fp32 dot x . c accumulated
// as one fma chain over k = 0 .. d-1, then + bias, bias = float(-|c|^2 / 2) computed in double), the
// `probe` best non-empty groups are taken (ties: lowest group id), and the row's centroid is the best
// fine centroid among their members by the same rule (ties: lowest fine id). probe = g is the exact
// assignment; an index stores its groups so every later encode (append, CUDA) gives the same ids.
struct ResidualGroups {
  const float* coarse = nullptr;    // [g][d]
  int64_t g = 0;
  const int32_t* offsets = nullptr;  // [g + 1] into members
  const int32_t* members = nullptr;  // each group's fine centroid ids, ascending
  int64_t probe = 1;
};

// ResidualAssign (l2) through the groups.
void ResidualAssignGrouped(const ResidualKernels& k, const float* x, int64_t n, const float* centroids, int64_t nc,
                           int64_t d, const ResidualGroups& groups, int32_t* ids, float* scores, int threads);

// Encodes the tokens of `docs` (documents in order, back to back) as stream tokens [first, first +
// tokens) against the centroids (through `groups` when not null): cids and codes are the whole
// stream's arrays (cids [stream tokens rounded up to 16]; codes in blocks, see above, zero before the
// first call: codes are or-ed in, so a block shared by two consecutive calls gets both halves).
// cutoffs [d][2^b - 1] ascending: code = the number of cutoffs below the residual component.
// sq_error (nullable): sum over tokens of |x - decoded|^2, in double.
void ResidualEncode(const ResidualKernels& k, const TokenSet& docs, int64_t first, const float* centroids,
                    int64_t nc, const ResidualGroups* groups, const float* cutoffs, const float* weights, int bits,
                    int32_t* cids, uint8_t* codes, double* sq_error, int threads);

// The search index as the stages read it (all arrays borrowed).
struct ResidualIndex {
  const float* centroids = nullptr;  // [k][d]
  int64_t k = 0;
  int64_t d = 0;
  ResidualCodes codes;
  const double* doc_offsets = nullptr;  // [docs + 1]: first token of each document in the stream
  int64_t docs = 0;
  const double* bag_offsets = nullptr;  // [docs + 1] into bags
  const int32_t* bags = nullptr;        // each document's distinct centroid ids, ascending
  const double* ivf_offsets = nullptr;  // [k + 1] into ivf
  const int32_t* ivf = nullptr;         // each centroid's documents, ascending
};

struct ResidualSearchParams {
  int64_t nprobe = 4;        // centroids probed per query token
  int64_t candidates = 256;  // documents kept by centroid interaction, scored by the residual kernel
  float threshold = -INFINITY;  // centroid pruning (bags): centroids whose best query-token score is below
  // candidate scoring: true = from the probed lists only (CandidatesByLists in residual.cc), false =
  // centroid interaction over each reached document's whole bag
  bool lists = false;
  // lists only: > 0 keeps the lists' best max(refine, candidates), re-scored by the bag interaction
  // ('hybrid': PLAID's stages 2 and 3 with the cheap list score as stage 2)
  int64_t refine = 0;
  // the residual stage's token pruning (ResidualPrunePlan): infinity decodes every token
  float prune = INFINITY;
  int threads = 0;
};

struct ResidualSearchStats {
  int64_t probed = 0;     // distinct centroids probed
  int64_t generated = 0;  // documents reached through the inverted lists
  int64_t kept_centroids = 0;  // centroids above the pruning threshold
  int64_t scored = 0;     // documents scored by the residual kernel
  // ms_candidates: the list walk (lists) or the union and bag interaction (bags); ms_interaction: the selection
  double ms_centroids = 0, ms_candidates = 0, ms_interaction = 0, ms_residual = 0;
};

// One query ([lq][d] float32): the `scored` best documents by centroid interaction, scored by the
// fused residual MaxSim; ids and scores sorted by score (descending, ties to the lower id).
void ResidualSearch(const ResidualKernels& k, const ResidualIndex& index, const float* query, int64_t lq,
                    const ResidualSearchParams& p, std::vector<int32_t>* ids, std::vector<float>* scores,
                    ResidualSearchStats* stats);

// One query's result in a batch.
struct ResidualSearchResult {
  std::vector<int32_t> ids;
  std::vector<float> scores;
  ResidualSearchStats stats;
};

// Scratch of one pass of a batch: the passed queries' centroid scores (k x lqp floats each) stay
// under it, a larger batch runs as several passes (a single query over it still runs alone).
constexpr int64_t kResidualBatchScratch = int64_t{256} << 20;

// nq queries (queries: their [lengths[i]][d] float32 rows back to back), each with exactly the ids,
// scores and counts ResidualSearch gives it. A pass computes the query x centroid scores of all its
// queries in one pass over the centroids (each chunk read once for all of them while it is in cache),
// then runs the later stages one query per worker (single-threaded inside) when it holds at least as
// many queries as workers, else query by query with each stage over the pool. Stats: each query's own
// stage times, plus its share of the pass's centroid scoring. nq == 1 is ResidualSearch. scratch:
// the passes' budget (tests make it small to run many passes).
void ResidualSearchBatch(const ResidualKernels& k, const ResidualIndex& index, const float* queries,
                         const int64_t* lengths, int64_t nq, const ResidualSearchParams& p,
                         std::vector<ResidualSearchResult>* out, int64_t scratch = kResidualBatchScratch);

// The residual stage's pruning plan from a query's centroid scores qct ([k][lqp]) and probes
// (probe_ids [lq][np], best first: the first is each token's best centroid): keepc[c] = 1 when
// centroid c scores at least best_i - prune |best_i| for some query token i (best_i: i's best
// centroid score; prune a fraction of it, so the rule does not depend on the vectors' scale). The tokens of the
// other centroids are not decoded: each counts its q . c alone (PLAID's centroid pruning, here in
// the residual stage; a token far below every query token's best rarely holds a max, and where it
// does its residual term is what the score loses). keepc [k].
void ResidualPrunePlan(const float* qct, int64_t k, int64_t lq, int64_t lqp, int64_t np, const int32_t* probe_ids,
                       float prune, int threads, std::vector<uint8_t>* keepc);

// Scores listed documents by the fused residual kernel (for tests and benchmarks): qc is computed
// here. keepc (nullable): a pruning plan (ResidualQuery).
void ResidualScoreDocs(const ResidualKernels& k, const ResidualIndex& index, const float* query, int64_t lq,
                       const int32_t* docs, int64_t n, float* out, int threads, const uint8_t* keepc = nullptr);

// The probes of ProbeCentroids (each query token's np best centroids, best first) for a query, and
// its pruning plan: for tests.
void ResidualPrunePlanOf(const ResidualKernels& k, const ResidualIndex& index, const float* query, int64_t lq,
                         int64_t np, float prune, std::vector<uint8_t>* keepc);
// Centroid interaction of listed documents (keep nullable).
void CentroidScoreDocs(const ResidualKernels& k, const ResidualIndex& index, const float* query, int64_t lq,
                       const uint8_t* keep, const int32_t* docs, int64_t n, float* out, int threads);

}  // namespace maxsim_cpu
