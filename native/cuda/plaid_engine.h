// The compressed index on the GPU (kernels: native/cuda/kernels/maxsim_plaid.cu), Node-free.
//
// PlaidEncoder: the centroids (and the two-level assignment's groups) uploaded once; Assign gives
// each row's nearest centroid and Encode a slice of the token stream's ids and residual codes, both
// bitwise what the CPU codec (native/cpu/residual.h) computes for the same inputs.
// PlaidDeviceIndex: an index's arrays (and optionally its source tokens) resident on the device;
// Search runs every stage of a batch of queries there, as the plan (src/plaid/cuda-plan.ts) says.
// Worker thread only, except the destructors (the memory goes back through the worker).
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime.h"

namespace maxsim_cuda {

struct PlaidGroupsHost {
  const float* coarse = nullptr;  // [g][d]
  int64_t g = 0;
  const int32_t* offsets = nullptr;  // [g + 1]
  const int32_t* members = nullptr;
  int64_t probe = 1;
};

class PlaidEncoder {
 public:
  // centroids [k][d]; groups null: exact assignment; cutoffs [d][2^bits - 1]; tables [d][16] (both
  // may be null for an encoder that only assigns).
  PlaidEncoder(Runtime& rt, const float* centroids, int64_t k, int64_t d, const PlaidGroupsHost* groups,
               const float* cutoffs, const float* tables, int bits);
  ~PlaidEncoder();
  PlaidEncoder(const PlaidEncoder&) = delete;
  PlaidEncoder& operator=(const PlaidEncoder&) = delete;
  int64_t k() const { return k_; }
  int64_t d() const { return d_; }
  int bits() const { return bits_; }
  bool grouped() const { return g_ > 0; }
  bool can_encode() const { return cutoffs_ != 0; }

  // Rows x ([n][d] in dtype, contiguous on the host): ids [n] and scores [n] (nullable).
  void Assign(const void* x, DType dtype, int64_t n, int32_t* ids, float* scores);
  // The documents' tokens as stream tokens [first, first + tokens): cids (the stream's array, written
  // at first) and codes (the stream's blocks, or-ed in). Returns sum |x - decoded|^2.
  double Encode(const TokenSet& docs, int64_t first, int32_t* cids, uint8_t* codes);
  double last_ms() const { return last_ms_; }

 private:
  // The assignment of n device rows into best [n] (keys).
  void AssignDevice(cu::CUdeviceptr x, int dtype, int64_t n, cu::CUdeviceptr best);
  Runtime& rt_;
  int64_t k_, d_, g_ = 0, probe_ = 0;
  int bits_;
  cu::CUdeviceptr cent_ = 0, bias_ = 0, coarse_ = 0, coarse_bias_ = 0, members_ = 0, group_off_ = 0;
  cu::CUdeviceptr cutoffs_ = 0, tables_ = 0;
  std::vector<int32_t> offsets_host_;
  double last_ms_ = 0;
};

// The index arrays (residual.h's ResidualIndex layout; offsets as int64).
struct PlaidIndexHost {
  const float* centroids = nullptr;
  int64_t k = 0, d = 0, docs = 0, tokens = 0;
  int bits = 2;
  const float* tables = nullptr;
  const int32_t* cids = nullptr;   // [tokens rounded up to 16]
  const uint8_t* codes = nullptr;
  const double* doc_off = nullptr;  // [docs + 1]
  const double* bag_off = nullptr;
  const int32_t* bags = nullptr;
  const double* ivf_off = nullptr;  // [k + 1]
  const int32_t* ivf = nullptr;
};

// The batch plan TypeScript computes (src/plaid/cuda-plan.ts), checked by Search.
struct PlaidSearchPlan {
  int64_t lq = 32;        // padded rows per query (a multiple of 32, <= 256)
  int64_t nprobe = 8;
  int64_t np = 8;         // probe list size: 4, 8, 16 or 32, >= nprobe
  int64_t candidates = 1024;
  int64_t rescore = 256;  // final list per query (residual or exact scores)
  int64_t batch = 64;     // queries per pass
  float threshold = -INFINITY;
  bool exact = true;      // re-score with the source tokens (when the index holds them)
  bool stages = false;    // keep each stage's output (tests)
  // precision 'float16': the query x centroid and residual products on tensor cores (ranking only;
  // needs exact, d % 16 == 0, d <= 128); else the CPU's fp32 chains bitwise
  bool fp16 = false;
};

struct PlaidStageOutput {
  std::vector<int32_t> probed;            // distinct probed centroids (ascending)
  std::vector<int32_t> candidates;        // ascending
  std::vector<float> interaction;         // per candidate
  std::vector<int32_t> kept;              // by interaction (ascending doc)
  std::vector<float> residual;            // per kept
};

struct PlaidSearchResult {
  // per query: the `rescore` best (or fewer), sorted by score desc, doc asc
  std::vector<int64_t> off;  // [Q + 1]
  std::vector<int32_t> docs;
  std::vector<float> scores;          // exact when exact, else residual
  std::vector<float> residual;        // the residual score of each returned doc
  int64_t probed = 0, generated = 0, kept = 0, scored = 0, rescored = 0;
  double ms_centroids = 0, ms_candidates = 0, ms_interaction = 0, ms_residual = 0, ms_rescore = 0, ms_total = 0;
  double ms_probe = 0;  // of ms_centroids: the probe kernels
  std::vector<PlaidStageOutput> stages;  // per query, when plan.stages
};

class PlaidDeviceIndex {
 public:
  // token_chunks: the source tokens of the stream ([tokens][d] in tokens_dtype) as consecutive host
  // chunks (pointer, bytes) that add up to tokens * d elements, or none.
  PlaidDeviceIndex(Runtime& rt, const PlaidIndexHost& ix, const std::vector<std::pair<const void*, uint64_t>>& token_chunks,
                   DType tokens_dtype);
  ~PlaidDeviceIndex();
  PlaidDeviceIndex(const PlaidDeviceIndex&) = delete;
  PlaidDeviceIndex& operator=(const PlaidDeviceIndex&) = delete;
  int64_t k() const { return k_; }
  int64_t d() const { return d_; }
  int64_t docs() const { return docs_; }
  bool has_tokens() const { return tokens_ != 0; }
  uint64_t bytes() const { return bytes_; }

  // queries: [sum len][d] float32, lengths [Q].
  PlaidSearchResult Search(const float* queries, const int32_t* lengths, int64_t num_q, const PlaidSearchPlan& plan);

 private:
  // The plan's batches in turn, two in flight (plaid_search.cc).
  void SearchBatches(const float* queries, const int32_t* lengths, int64_t num_q, const PlaidSearchPlan& plan,
                     PlaidSearchResult* out);
  // The page-locked buffers the batches' results come back to (plaid_search.cc's Pinned).
  static void* NewPinned();
  static void FreePinned(void* h);
  Runtime& rt_;
  int64_t k_, d_, docs_, tokens_n_;
  int bits_;
  int tokens_dtype_ = 0;
  float cent_norm_ = 0.0f;  // the largest centroid norm (scales qc's int8 copy)
  cu::CUdeviceptr cent_ = 0, tables_ = 0, cids_ = 0, codes_ = 0, doc_off_ = 0, bag_off_ = 0, bags_ = 0, ivf_off_ = 0,
                  ivf_ = 0, tokens_ = 0;
  uint64_t bytes_ = 0;
  void* pinned_[2] = {nullptr, nullptr};
};

// Checks a plan against an index (std::invalid_argument naming the field).
void CheckPlaidPlan(const PlaidSearchPlan& plan, int64_t k, int64_t d, int64_t max_len);

}  // namespace maxsim_cuda
