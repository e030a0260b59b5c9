// One batch of the device index's search (plaid_engine.h): every stage on the device, two small
// downloads of per-query counts between them (the candidate and kept list sizes), the final lists
// sorted on the host.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <stdexcept>

#include "kernels/maxsim_plaid_params.h"
#include "plaid_engine.h"

namespace maxsim_cuda {

namespace {

template <typename P>
P* Dev(cu::CUdeviceptr p) {
  return reinterpret_cast<P*>(static_cast<uintptr_t>(p));
}

int64_t Div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <typename P>
void Go(Runtime& rt, const std::string& kernel, int64_t gx, int64_t gy, unsigned block, unsigned smem, const P& p) {
  if (gx <= 0 || gy <= 0) return;
  LaunchSpec spec;
  spec.kernel = kernel;
  spec.grid[0] = static_cast<unsigned>(gx);
  spec.grid[1] = static_cast<unsigned>(gy);
  spec.block[0] = block;
  spec.smem = smem;
  rt.LaunchWithParams(spec, &p);
}

using Buf = std::unique_ptr<ScopedBlock>;
Buf Block(Runtime& rt, uint64_t bytes) { return std::make_unique<ScopedBlock>(rt.allocator(), std::max<uint64_t>(bytes, 16)); }

void Zero(Runtime& rt, cu::CUdeviceptr ptr, uint64_t bytes) {
  if (bytes >= 4) Check(Api().cuMemsetD32Async(ptr, 0u, bytes / 4, rt.stream()), "cuMemsetD32Async");
}

template <typename T>
std::vector<T> Fetch(Runtime& rt, cu::CUdeviceptr src, int64_t n) {
  std::vector<T> v(static_cast<size_t>(std::max<int64_t>(n, 0)));
  if (n > 0) rt.Download(v.data(), src, static_cast<uint64_t>(n) * sizeof(T));
  return v;
}

float Elapsed(cu::CUevent a, cu::CUevent b) {
  float ms = 0;
  Check(Api().cuEventElapsedTime(&ms, a, b), "cuEventElapsedTime");
  return ms;
}

bool Better(float sa, int32_t da, float sb, int32_t db) { return sa > sb || (sa == sb && da < db); }

// Offsets [nq + 1] of min(count[q], cap) entries each.
std::vector<int64_t> Capped(const std::vector<int64_t>& off, int64_t cap) {
  std::vector<int64_t> o(off.size(), 0);
  for (size_t q = 0; q + 1 < off.size(); q++) o[q + 1] = o[q] + std::min(off[q + 1] - off[q], cap);
  return o;
}

// One batch's device buffers and offsets, stage by stage (each method enqueues its kernels; the
// offsets between stages come back in two small downloads). Scoped blocks go back to the cache when
// the batch ends, after Collect has synchronized.
class Batch {
 public:
  Batch(Runtime& rt, const PlaidSearchPlan& plan, int64_t nq, const PlaidSearchParams& index)
      : rt_(rt), plan_(plan), nq_(nq), LQ_(plan.lq), d_(index.d), K_(index.k), cw_(Div(index.k, 32)), p_(index),
        ev_(7, nullptr) {
    for (auto& e : ev_) Check(Api().cuEventCreate(&e, cu::CU_EVENT_DEFAULT), "cuEventCreate");
  }
  ~Batch() {
    for (auto e : ev_) Api().cuEventDestroy(e);
  }
  void Mark(int i) { Check(Api().cuEventRecord(ev_[i], rt_.stream()), "cuEventRecord"); }

  // The queries padded to LQ rows and qc = q x centroids.
  void QueryCentroids(const float* queries, const int32_t* lengths) {
    std::vector<float> qpad(static_cast<size_t>(nq_ * LQ_ * d_), 0.0f);
    std::vector<int32_t> qlen(lengths, lengths + nq_);
    int64_t at = 0;
    for (int64_t q = 0; q < nq_; q++) {
      std::memcpy(qpad.data() + q * LQ_ * d_, queries + at * d_, static_cast<size_t>(qlen[q] * d_) * 4);
      at += qlen[q];
    }
    qd_ = Block(rt_, qpad.size() * 4);
    qlen_ = Block(rt_, static_cast<uint64_t>(nq_) * 4);
    rt_.Upload(qd_->get(), qpad.data(), qpad.size() * 4);
    rt_.Upload(qlen_->get(), qlen.data(), static_cast<uint64_t>(nq_) * 4);
    // precision float16: qc is computed on tensor cores and stored in float16
    const bool half = plan_.fp16 && rt_.HasKernel("plaid_qc_mma") && rt_.HasKernel("plaid_residual_mma");
    qc_ = Block(rt_, static_cast<uint64_t>(nq_ * K_ * LQ_) * (half ? 2 : 4));
    PlaidAssignParams a{};
    a.x = Dev<const void>(qd_->get());
    a.cent = p_.cent;
    a.n = nq_ * LQ_;
    a.k = K_;
    a.d = d_;
    a.ld = LQ_;
    a.scores = Dev<float>(qc_->get());
    a.out_half = half ? 1 : 0;
    // float16: tensor cores; plaid_qc (8 x 8 per thread); plaid_dots where a build predates it
    if (half) Go(rt_, "plaid_qc_mma", Div(a.n, 128), Div(K_, 128), 256, 0, a);
    else if (rt_.HasKernel("plaid_qc")) Go(rt_, "plaid_qc", Div(a.n, 128), Div(K_, 128), 256, 0, a);
    else Go(rt_, "plaid_dots", Div(a.n, PLAID_TILE_M), Div(K_, PLAID_TILE_N), PLAID_THREADS, 0, a);
    p_.q = Dev<const float>(qd_->get());
    p_.q_len = Dev<const int32_t>(qlen_->get());
    p_.qc = Dev<float>(qc_->get());
    p_.qc_half = half ? 1 : 0;
    p_.num_q = nq_;
    p_.lq = LQ_;
    p_.words = Div(p_.docs, 32);
    p_.nprobe = plan_.nprobe;
    p_.np = plan_.np;
    p_.chunks = Div(K_, PLAID_PROBE_CHUNK);
    p_.threshold = plan_.threshold;
  }

  // Each token's nprobe best centroids, the distinct ones per query.
  void Probe() {
    partial_ = Block(rt_, static_cast<uint64_t>(nq_ * p_.chunks * LQ_ * p_.np) * 8);
    cbits_ = Block(rt_, static_cast<uint64_t>(nq_ * cw_) * 4);
    probed_ = Block(rt_, static_cast<uint64_t>(nq_ * LQ_ * plan_.nprobe) * 4);
    probed_n_ = Block(rt_, static_cast<uint64_t>(nq_) * 4);
    p_.partial = Dev<unsigned long long>(partial_->get());
    p_.cbits = Dev<uint32_t>(cbits_->get());
    p_.probed = Dev<int32_t>(probed_->get());
    p_.probed_n = Dev<int32_t>(probed_n_->get());
    Zero(rt_, cbits_->get(), static_cast<uint64_t>(nq_ * cw_) * 4);
    Zero(rt_, probed_n_->get(), static_cast<uint64_t>(nq_) * 4);
    Go(rt_, "plaid_probe_partial_" + std::to_string(p_.np), p_.chunks, nq_, static_cast<unsigned>(LQ_), 0, p_);
    Go(rt_, "plaid_probe_merge", Div(nq_ * LQ_ * 32, 256), 1, 256, 0, p_);
  }

  // Inverted lists -> candidate documents (ascending per query).
  void Candidates() {
    dbits_ = Block(rt_, static_cast<uint64_t>(nq_ * p_.words) * 4);
    cand_n_ = Block(rt_, static_cast<uint64_t>(nq_) * 4);
    p_.dbits = Dev<uint32_t>(dbits_->get());
    p_.cand_n = Dev<int32_t>(cand_n_->get());
    Zero(rt_, dbits_->get(), static_cast<uint64_t>(nq_ * p_.words) * 4);
    Go(rt_, "plaid_mark", LQ_ * plan_.nprobe, nq_, 256, 0, p_);
    Go(rt_, "plaid_count", nq_, 1, 1024, 0, p_);
    const std::vector<int32_t> counts = Fetch<int32_t>(rt_, cand_n_->get(), nq_);
    cand_off_.assign(static_cast<size_t>(nq_ + 1), 0);
    for (int64_t q = 0; q < nq_; q++) cand_off_[q + 1] = cand_off_[q] + counts[q];
    total_ = cand_off_[nq_];
    cand_off_d_ = Block(rt_, cand_off_.size() * 8);
    rt_.Upload(cand_off_d_->get(), cand_off_.data(), cand_off_.size() * 8);
    cand_ = Block(rt_, static_cast<uint64_t>(total_) * 4);
    cand_q_ = Block(rt_, static_cast<uint64_t>(total_) * 4);
    ci_ = Block(rt_, static_cast<uint64_t>(total_) * 4);
    p_.cand_off = Dev<const int64_t>(cand_off_d_->get());
    p_.cand = Dev<int32_t>(cand_->get());
    p_.cand_q = Dev<int32_t>(cand_q_->get());
    p_.ci = Dev<float>(ci_->get());
    Go(rt_, "plaid_compact", nq_, 1, 1024, 0, p_);
  }

  // Centroid interaction (with pruning: the kept centroids' bits first), the best `candidates`.
  void Interaction() {
    kbits_ = Block(rt_, static_cast<uint64_t>(nq_ * cw_) * 4);
    if (plan_.threshold > -INFINITY) {
      p_.kbits = Dev<uint32_t>(kbits_->get());
      Go(rt_, "plaid_keep", Div(K_, 256), nq_, 256, 0, p_);
    }
    Go(rt_, "plaid_interaction", std::min<int64_t>(Div(total_, 8), int64_t(1) << 20), 1, 256, 0, p_);
    kept_off_ = Capped(cand_off_, plan_.candidates);
    kept_total_ = kept_off_[nq_];
    kept_off_d_ = Block(rt_, kept_off_.size() * 8);
    rt_.Upload(kept_off_d_->get(), kept_off_.data(), kept_off_.size() * 8);
    kept_ = Block(rt_, static_cast<uint64_t>(kept_total_) * 4);
    kept_ci_ = Block(rt_, static_cast<uint64_t>(kept_total_) * 4);
    sel_n_ = Block(rt_, static_cast<uint64_t>(nq_) * 4);
    Select(cand_off_d_->get(), cand_->get(), ci_->get(), kept_off_d_->get(), kept_->get(), kept_ci_->get());
  }

  // The fused decompress-MaxSim of the kept documents, the best `rescore` of them.
  void Residual() {
    const unsigned smem = static_cast<unsigned>((d_ * LQ_ + d_ * 16) * 4);
    rs_ = Block(rt_, static_cast<uint64_t>(kept_total_) * 4);
    if (p_.qc_half)
      Score("plaid_residual_mma", kept_off_, kept_off_d_->get(), kept_->get(), rs_->get(), 0, 16);
    else Score("plaid_residual", kept_off_, kept_off_d_->get(), kept_->get(), rs_->get(), smem);
    fin_off_ = Capped(kept_off_, plan_.rescore);
    fin_total_ = fin_off_[nq_];
    fin_off_d_ = Block(rt_, fin_off_.size() * 8);
    rt_.Upload(fin_off_d_->get(), fin_off_.data(), fin_off_.size() * 8);
    fin_ = Block(rt_, static_cast<uint64_t>(fin_total_) * 4);
    fin_rs_ = Block(rt_, static_cast<uint64_t>(fin_total_) * 4);
    Select(kept_off_d_->get(), kept_->get(), rs_->get(), fin_off_d_->get(), fin_->get(), fin_rs_->get());
  }

  // Exact MaxSim of the final lists on the source tokens (when the index keeps them).
  void Rescore(bool exact) {
    exact_ = exact;
    fin_ex_ = Block(rt_, static_cast<uint64_t>(fin_total_) * 4);
    if (exact) Score("plaid_exact", fin_off_, fin_off_d_->get(), fin_->get(), fin_ex_->get(), static_cast<unsigned>((d_ * LQ_ + d_ * 16) * 4));
  }

  // Downloads the final lists, sorts each query's by (score desc, doc asc), adds the stage times.
  void Collect(PlaidSearchResult* out) {
    const auto docs = Fetch<int32_t>(rt_, fin_->get(), fin_total_);
    const auto rsc = Fetch<float>(rt_, fin_rs_->get(), fin_total_);
    const auto exs = exact_ ? Fetch<float>(rt_, fin_ex_->get(), fin_total_) : rsc;
    Check(Api().cuEventSynchronize(ev_[5]), "cuEventSynchronize");
    out->ms_centroids += Elapsed(ev_[0], ev_[1]);
    out->ms_probe += Elapsed(ev_[6], ev_[1]);
    out->ms_candidates += Elapsed(ev_[1], ev_[2]);
    out->ms_interaction += Elapsed(ev_[2], ev_[3]);
    out->ms_residual += Elapsed(ev_[3], ev_[4]);
    out->ms_rescore += Elapsed(ev_[4], ev_[5]);
    probed_counts_ = Fetch<int32_t>(rt_, probed_n_->get(), nq_);
    for (int64_t q = 0; q < nq_; q++) {
      out->probed += probed_counts_[q];
      std::vector<int64_t> ord(static_cast<size_t>(fin_off_[q + 1] - fin_off_[q]));
      std::iota(ord.begin(), ord.end(), fin_off_[q]);
      std::sort(ord.begin(), ord.end(), [&](int64_t a, int64_t b) { return Better(exs[a], docs[a], exs[b], docs[b]); });
      for (int64_t i : ord) {
        out->docs.push_back(docs[i]);
        out->scores.push_back(exs[i]);
        out->residual.push_back(rsc[i]);
      }
      out->off.push_back(static_cast<int64_t>(out->docs.size()));
    }
    out->generated += total_;
    out->kept += kept_total_;
    out->scored += kept_total_;
    out->rescored += exact_ ? fin_total_ : 0;
  }

  // Each stage's output per query (tests): probed (ascending), candidates, their interaction
  // scores, the kept documents (ascending) with their residual scores.
  void Stages(PlaidSearchResult* out) {
    const auto pr = Fetch<int32_t>(rt_, probed_->get(), nq_ * LQ_ * plan_.nprobe);
    const auto cd = Fetch<int32_t>(rt_, cand_->get(), total_);
    const auto cis = Fetch<float>(rt_, ci_->get(), total_);
    const auto kd = Fetch<int32_t>(rt_, kept_->get(), kept_total_);
    const auto rss = Fetch<float>(rt_, rs_->get(), kept_total_);
    for (int64_t q = 0; q < nq_; q++) {
      PlaidStageOutput s;
      const auto p0 = pr.begin() + q * LQ_ * plan_.nprobe;
      s.probed.assign(p0, p0 + probed_counts_[q]);
      std::sort(s.probed.begin(), s.probed.end());
      s.candidates.assign(cd.begin() + cand_off_[q], cd.begin() + cand_off_[q + 1]);
      s.interaction.assign(cis.begin() + cand_off_[q], cis.begin() + cand_off_[q + 1]);
      std::vector<int64_t> ord(static_cast<size_t>(kept_off_[q + 1] - kept_off_[q]));
      std::iota(ord.begin(), ord.end(), kept_off_[q]);
      std::sort(ord.begin(), ord.end(), [&](int64_t a, int64_t b) { return kd[a] < kd[b]; });
      for (int64_t i : ord) {
        s.kept.push_back(kd[i]);
        s.residual.push_back(rss[i]);
      }
      out->stages.push_back(std::move(s));
    }
  }

 private:
  // plaid_select: the best out_off[q + 1] - out_off[q] of (doc, score) [in_off[q], ...).
  void Select(cu::CUdeviceptr in_off, cu::CUdeviceptr doc, cu::CUdeviceptr score, cu::CUdeviceptr out_off,
              cu::CUdeviceptr out_doc, cu::CUdeviceptr out_score) {
    p_.sel_in_off = Dev<const int64_t>(in_off);
    p_.sel_doc = Dev<const int32_t>(doc);
    p_.sel_score = Dev<const float>(score);
    p_.sel_out_off = Dev<const int64_t>(out_off);
    p_.sel_out_doc = Dev<int32_t>(out_doc);
    p_.sel_out_score = Dev<float>(out_score);
    p_.sel_out_n = Dev<int32_t>(sel_n_->get());
    Go(rt_, "plaid_select", nq_, 1, 256, 0, p_);
  }
  // plaid_residual(_mma) / plaid_exact over the listed documents [off[q], off[q + 1]) of each query,
  // about per_warp documents a warp (the mma kernel loads the query's fragments once per warp), yet
  // at least ~512 blocks in all while there are documents enough (one query's latency).
  void Score(const char* kernel, const std::vector<int64_t>& off, cu::CUdeviceptr off_d, cu::CUdeviceptr docs,
             cu::CUdeviceptr out, unsigned smem, int64_t per_warp = 1) {
    int64_t most = 0;
    for (int64_t q = 0; q < nq_; q++) most = std::max(most, off[q + 1] - off[q]);
    p_.score_off = Dev<const int64_t>(off_d);
    p_.score_doc = Dev<const int32_t>(docs);
    p_.score_out = Dev<float>(out);
    const int64_t most_x = Div(most, PLAID_SCORE_WARPS);
    const int64_t x = std::min(most_x, std::max(Div(most_x, per_warp), Div(512, nq_)));
    Go(rt_, kernel, std::min<int64_t>(x, 4096), nq_, 32 * PLAID_SCORE_WARPS, smem, p_);
  }

  Runtime& rt_;
  const PlaidSearchPlan& plan_;
  const int64_t nq_, LQ_, d_, K_, cw_;
  PlaidSearchParams p_;
  std::vector<cu::CUevent> ev_;
  Buf qd_, qlen_, qc_, partial_, cbits_, probed_, probed_n_, dbits_, cand_n_, cand_off_d_, cand_, cand_q_, ci_,
      kbits_, kept_off_d_, kept_, kept_ci_, sel_n_, rs_, fin_off_d_, fin_, fin_rs_, fin_ex_;
  std::vector<int64_t> cand_off_, kept_off_, fin_off_;
  std::vector<int32_t> probed_counts_;
  int64_t total_ = 0, kept_total_ = 0, fin_total_ = 0;
  bool exact_ = false;
};

}  // namespace

void PlaidDeviceIndex::SearchBatch(const float* queries, const int32_t* lengths, int64_t, int64_t nq,
                                   const PlaidSearchPlan& plan, PlaidSearchResult* out) {
  PlaidSearchParams ix{};
  ix.cent = Dev<const float>(cent_);
  ix.tables = Dev<const float>(tables_);
  ix.cids = Dev<const int32_t>(cids_);
  ix.codes = Dev<const uint8_t>(codes_);
  ix.doc_off = Dev<const int64_t>(doc_off_);
  ix.bag_off = Dev<const int64_t>(bag_off_);
  ix.bags = Dev<const int32_t>(bags_);
  ix.ivf_off = Dev<const int64_t>(ivf_off_);
  ix.ivf = Dev<const int32_t>(ivf_);
  ix.tokens = Dev<const void>(tokens_);
  ix.tokens_dtype = tokens_dtype_;
  ix.k = k_;
  ix.d = d_;
  ix.docs = docs_;
  ix.bits = bits_;
  Batch b(rt_, plan, nq, ix);
  b.Mark(0);
  b.QueryCentroids(queries, lengths);
  b.Mark(6);
  b.Probe();
  b.Mark(1);
  b.Candidates();
  b.Mark(2);
  b.Interaction();
  b.Mark(3);
  b.Residual();
  b.Mark(4);
  b.Rescore(plan.exact && tokens_ != 0);
  b.Mark(5);
  b.Collect(out);
  if (plan.stages) b.Stages(out);
}

}  // namespace maxsim_cuda
