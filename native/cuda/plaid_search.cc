// The batches of the device index's search (plaid_engine.h): every stage on the device with no host
// round trip inside a batch, two batches in flight, the final lists sorted on the host.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>

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

// float16 keeps ~11 bits of an element whose magnitude lies in [2^-8, 2^12]; queries whose largest
// magnitude lies outside would rank by overflowed or vanished products. Refused with a code of its
// own, so that the default precision reruns the call in float32 and an explicit one says why. The
// largest magnitude as the largest of the bits without the sign (NaN counts as the largest of all).
void RefuseHalfRange(const float* x, int64_t n) {
  if (n <= 0) return;
  uint32_t m = 0;
  for (int64_t i = 0; i < n; i++) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    m = std::max(m, u & 0x7fffffffu);
  }
  float f;
  std::memcpy(&f, &m, 4);
  if (f >= 0x1p-8f && f <= 0x1p12f) return;
  char v[32];
  std::snprintf(v, sizeof v, "%g", f);
  throw CudaError(std::string("queries of largest magnitude ") + v +
                      " lie outside [2^-8, 2^12], float16's range for the ranking products",
                  "MAXSIM_HALF_RANGE");
}

bool Better(float sa, int32_t da, float sb, int32_t db) { return sa > sb || (sa == sb && da < db); }

// Host memory a batch's results come back to (page-locked, so the copies are asynchronous): grown
// as needed, kept by the index (two, one per batch in flight).
struct Pinned {
  void* p = nullptr;
  uint64_t bytes = 0;
};

void* Reserve(Pinned& h, uint64_t bytes) {
  if (bytes > h.bytes) {
    if (h.p) Check(Api().cuMemFreeHost(h.p), "cuMemFreeHost");
    h.p = nullptr;
    h.bytes = 0;
    Check(Api().cuMemHostAlloc(&h.p, bytes, 0), "cuMemHostAlloc");
    h.bytes = bytes;
  }
  return h.p;
}

// One batch's device buffers, stage by stage. Every stage is enqueued without a host round trip
// (the offsets between stages are computed on the device, the buffers sized by the plan's caps),
// and the results come back by asynchronous copies, so the host prepares the next batch while the
// device runs this one. Scoped blocks go back to the cache when the batch is destroyed, after
// Collect has waited for its copies.
class Batch {
 public:
  Batch(Runtime& rt, const PlaidSearchPlan& plan, int64_t nq, const PlaidSearchParams& index, Pinned& host)
      : rt_(rt), plan_(plan), nq_(nq), LQ_(plan.lq), d_(index.d), K_(index.k), cw_(Div(index.k, 32)), p_(index),
        host_(host), ev_(8, nullptr) {
    for (auto& e : ev_) Check(Api().cuEventCreate(&e, cu::CU_EVENT_DEFAULT), "cuEventCreate");
  }
  ~Batch() {
    for (auto e : ev_) Api().cuEventDestroy(e);
  }
  void Mark(int i) { Check(Api().cuEventRecord(ev_[i], rt_.stream()), "cuEventRecord"); }

  // The queries padded to LQ rows (staged straight into their device copy) and qc = q x centroids.
  // In float16 the pass's queries are checked first against float16's range for the ranking
  // products (RefuseHalfRange); here, on the worker a pass ahead of the device, the check is off the
  // critical path, where on the JS thread it cost 2.2 ms of a 1,000-query call.
  void QueryCentroids(const float* queries, const int32_t* lengths) {
    std::vector<int32_t> qlen(lengths, lengths + nq_);
    int64_t rows = 0;
    for (int64_t q = 0; q < nq_; q++) rows += qlen[q];
    if (plan_.fp16) RefuseHalfRange(queries, rows * d_);
    qd_ = Block(rt_, static_cast<uint64_t>(nq_ * LQ_ * d_) * 4);
    qlen_ = Block(rt_, static_cast<uint64_t>(nq_) * 4);
    {
      const std::vector<float> zeros(static_cast<size_t>(LQ_ * d_), 0.0f);
      StagedWriter w(rt_.staging(), rt_.stream(), qd_->get());
      int64_t at = 0;
      for (int64_t q = 0; q < nq_; q++) {
        w.Write(queries + at * d_, static_cast<uint64_t>(qlen[q] * d_) * 4);
        w.Write(zeros.data(), static_cast<uint64_t>((LQ_ - qlen[q]) * d_) * 4);
        at += qlen[q];
      }
      w.Finish();
    }
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
    // float16: tensor cores on float16 copies of the queries and centroids (32 MB of fp32 centroids
    // read once a batch, not by every row tile); plaid_qc (8 x 8 per thread); plaid_dots where a
    // build predates it
    if (half) {
      q16_ = Block(rt_, static_cast<uint64_t>(a.n * d_) * 2);
      c16_ = Block(rt_, static_cast<uint64_t>(K_ * d_) * 2);
      PlaidAssignParams h{};
      h.x = a.x;
      h.scores = Dev<float>(q16_->get());
      h.n = a.n;
      h.d = d_;
      Go(rt_, "plaid_to_half", Div(a.n * d_ / 4, 256), 1, 256, 0, h);
      h.x = p_.cent;
      h.scores = Dev<float>(c16_->get());
      h.n = K_;
      Go(rt_, "plaid_to_half", Div(K_ * d_ / 4, 256), 1, 256, 0, h);
      // queries of <= 32 tokens: an int8 copy of qc for the interaction (half its bytes)
      if (LQ_ == 32 && rt_.HasKernel("plaid_qc_scale") && rt_.HasKernel("plaid_interaction_q8")) {
        qc8_ = Block(rt_, static_cast<uint64_t>(nq_ * K_ * LQ_));
        qscale_ = Block(rt_, static_cast<uint64_t>(2 * a.n) * 4);
        h.x = a.x;
        h.n = a.n;
        h.scores = Dev<float>(qscale_->get());
        h.row_inv = Dev<float>(qscale_->get()) + a.n;
        h.cent_norm = p_.cent_norm;
        Go(rt_, "plaid_qc_scale", Div(a.n, 256), 1, 256, 0, h);
        a.qc8 = Dev<int8_t>(qc8_->get());
        a.row_inv = h.row_inv;
        p_.qc8 = a.qc8;
        p_.qc8_scale = h.scores;
      }
      a.x = Dev<const void>(q16_->get());
      a.cent_half = Dev<const void>(c16_->get());
      Go(rt_, "plaid_qc_mma", Div(a.n, 128), Div(K_, 128 * PLAID_QC_TILES), 256, PLAID_QC_SMEM, a);
    } else if (rt_.HasKernel("plaid_qc")) Go(rt_, "plaid_qc", Div(a.n, 128), Div(K_, 128), 256, 0, a);
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
    // each token's floor first, so the lists skip keys that cannot be among its best
    p_.groups = Div(K_, PLAID_GROUP);
    group_max_ = Block(rt_, static_cast<uint64_t>(nq_ * p_.groups * LQ_) * 8);
    floor_ = Block(rt_, static_cast<uint64_t>(nq_ * LQ_) * 8);
    p_.group_max = Dev<unsigned long long>(group_max_->get());
    p_.probe_floor = Dev<unsigned long long>(floor_->get());
    Go(rt_, "plaid_group_max", p_.chunks, nq_, static_cast<unsigned>(LQ_), 0, p_);
    Go(rt_, "plaid_probe_floor", Div(nq_ * LQ_ * 32, 256), 1, 256, 0, p_);
    Go(rt_, "plaid_probe_partial_" + std::to_string(p_.np), p_.chunks, nq_, static_cast<unsigned>(LQ_), 0, p_);
    Go(rt_, "plaid_probe_merge", Div(nq_ * LQ_ * 32, 256), 1, 256, 0, p_);
  }

  // Inverted lists -> candidate documents (ascending per query), and the batch's offsets.
  void Candidates() {
    dbits_ = Block(rt_, static_cast<uint64_t>(nq_ * p_.words) * 4);
    cand_n_ = Block(rt_, static_cast<uint64_t>(nq_) * 4);
    offs_ = Block(rt_, static_cast<uint64_t>(3 * (nq_ + 1)) * 8);
    p_.dbits = Dev<uint32_t>(dbits_->get());
    p_.cand_n = Dev<int32_t>(cand_n_->get());
    p_.offs = Dev<int64_t>(offs_->get());
    p_.cap_kept = plan_.candidates;
    p_.cap_fin = plan_.rescore;
    Zero(rt_, dbits_->get(), static_cast<uint64_t>(nq_ * p_.words) * 4);
    Go(rt_, "plaid_mark", LQ_ * plan_.nprobe, nq_, 256, 0, p_);
    Go(rt_, "plaid_count", nq_, 1, 1024, 0, p_);
    Go(rt_, "plaid_offsets", 1, 1, 32, 0, p_);
    // every list at its bound: a query reaches at most every document (the plan budgets that)
    const uint64_t most = static_cast<uint64_t>(nq_ * p_.docs);
    cand_ = Block(rt_, most * 4);
    cand_q_ = Block(rt_, most * 4);
    ci_ = Block(rt_, most * 4);
    p_.cand_off = Off(0);
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
    // a warp per candidate (a half-warp for float16 qc and queries of <= 32 tokens: 31.7 -> 18.4 ms
    // per 1,000 queries), grid-stride (the count is on the device only): the more blocks, the faster
    // measured (one resident wave 42.9 ms, 8,192 blocks 33.3, a candidate per warp 29.8), and empty
    // blocks exit at once
    // (a quarter-warp on qc's int8 copy where it exists: half the bytes of float16 rows)
    const bool q8 = p_.qc8 != nullptr;
    const bool h2 = !q8 && p_.qc_half && LQ_ == 32 && rt_.HasKernel("plaid_interaction_h2");
    Go(rt_, q8 ? "plaid_interaction_q8" : h2 ? "plaid_interaction_h2" : "plaid_interaction",
       std::min<int64_t>(Div(nq_ * p_.docs, q8 ? 32 : h2 ? 16 : 8), std::max<int64_t>(8192, 2048 * nq_)), 1, 256, 0,
       p_);
    kept_ = Block(rt_, static_cast<uint64_t>(nq_ * plan_.candidates) * 4);
    kept_ci_ = Block(rt_, static_cast<uint64_t>(nq_ * plan_.candidates) * 4);
    sel_n_ = Block(rt_, static_cast<uint64_t>(nq_) * 4);
    Select(Off(0), cand_->get(), ci_->get(), Off(1), kept_->get(), kept_ci_->get());
  }

  // The fused decompress-MaxSim of the kept documents, the best `rescore` of them.
  void Residual() {
    const unsigned smem = static_cast<unsigned>((d_ * LQ_ + d_ * 16) * 4);
    rs_ = Block(rt_, static_cast<uint64_t>(nq_ * plan_.candidates) * 4);
    if (p_.qc_half) Score("plaid_residual_mma", plan_.candidates, Off(1), kept_->get(), rs_->get(), 0, 16);
    else Score("plaid_residual", plan_.candidates, Off(1), kept_->get(), rs_->get(), smem);
    fin_ = Block(rt_, static_cast<uint64_t>(nq_ * plan_.rescore) * 4);
    fin_rs_ = Block(rt_, static_cast<uint64_t>(nq_ * plan_.rescore) * 4);
    Select(Off(1), kept_->get(), rs_->get(), Off(2), fin_->get(), fin_rs_->get());
  }

  // Exact MaxSim of the final lists on the source tokens (when the index keeps them), then the
  // copies of the results to the host, queued behind it.
  void Rescore(bool exact) {
    exact_ = exact;
    fin_ex_ = Block(rt_, static_cast<uint64_t>(nq_ * plan_.rescore) * 4);
    // float16 plans over float16 tokens: on tensor cores, the query in two float16 parts (within
    // ~1e-7 of the float32 chain); float32 plans keep the CPU's chain
    if (exact && p_.qc_half && p_.tokens_dtype == 1 && rt_.HasKernel("plaid_exact_mma"))
      Score("plaid_exact_mma", plan_.rescore, Off(2), fin_->get(), fin_ex_->get(), 0, 16);
    else if (exact)
      Score("plaid_exact", plan_.rescore, Off(2), fin_->get(), fin_ex_->get(),
            static_cast<unsigned>((d_ * LQ_ + d_ * 16) * 4));
    Mark(5);
    const uint64_t fin = static_cast<uint64_t>(nq_ * plan_.rescore) * 4, offs = static_cast<uint64_t>(3 * (nq_ + 1)) * 8;
    uint8_t* h = static_cast<uint8_t*>(Reserve(host_, offs + 3 * fin + static_cast<uint64_t>(nq_) * 4));
    const cu::CUdeviceptr from[5] = {offs_->get(), fin_->get(), fin_rs_->get(), exact ? fin_ex_->get() : fin_rs_->get(),
                                     probed_n_->get()};
    const uint64_t bytes[5] = {offs, fin, fin, fin, static_cast<uint64_t>(nq_) * 4};
    uint64_t at = 0;
    for (int i = 0; i < 5; i++) {
      Check(Api().cuMemcpyDtoHAsync(h + at, from[i], bytes[i], rt_.stream()), "cuMemcpyDtoHAsync");
      at += bytes[i];
    }
    Mark(7);
  }

  // Waits for the batch's copies, sorts each query's final list by (score desc, doc asc), adds the
  // counts and stage times.
  void Collect(PlaidSearchResult* out) {
    Check(Api().cuEventSynchronize(ev_[7]), "cuEventSynchronize");
    const uint64_t fin = static_cast<uint64_t>(nq_ * plan_.rescore);
    const auto* offs = static_cast<const int64_t*>(host_.p);
    const auto* docs = reinterpret_cast<const int32_t*>(offs + 3 * (nq_ + 1));
    const auto* rsc = reinterpret_cast<const float*>(docs + fin);
    const auto* exs = rsc + fin;
    const auto* probed = reinterpret_cast<const int32_t*>(exs + fin);
    cand_off_.assign(offs, offs + nq_ + 1);
    kept_off_.assign(offs + nq_ + 1, offs + 2 * (nq_ + 1));
    fin_off_.assign(offs + 2 * (nq_ + 1), offs + 3 * (nq_ + 1));
    probed_counts_.assign(probed, probed + nq_);
    out->ms_centroids += Elapsed(ev_[0], ev_[1]);
    out->ms_probe += Elapsed(ev_[6], ev_[1]);
    out->ms_candidates += Elapsed(ev_[1], ev_[2]);
    out->ms_interaction += Elapsed(ev_[2], ev_[3]);
    out->ms_residual += Elapsed(ev_[3], ev_[4]);
    out->ms_rescore += Elapsed(ev_[4], ev_[5]);
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
    out->generated += cand_off_[nq_];
    out->kept += kept_off_[nq_];
    out->scored += kept_off_[nq_];
    out->rescored += exact_ ? fin_off_[nq_] : 0;
  }

  // Each stage's output per query (tests; after Collect): probed (ascending), candidates, their
  // interaction scores, the kept documents (ascending) with their residual scores.
  void Stages(PlaidSearchResult* out) {
    const auto pr = Fetch<int32_t>(rt_, probed_->get(), nq_ * LQ_ * plan_.nprobe);
    const auto cd = Fetch<int32_t>(rt_, cand_->get(), cand_off_[nq_]);
    const auto cis = Fetch<float>(rt_, ci_->get(), cand_off_[nq_]);
    const auto kd = Fetch<int32_t>(rt_, kept_->get(), kept_off_[nq_]);
    const auto rss = Fetch<float>(rt_, rs_->get(), kept_off_[nq_]);
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
  // Offsets j (0 candidates, 1 kept, 2 final) of the batch, [Q + 1] on the device.
  const int64_t* Off(int j) const { return Dev<const int64_t>(offs_->get()) + j * (nq_ + 1); }
  // plaid_select: the best out_off[q + 1] - out_off[q] of (doc, score) [in_off[q], ...).
  void Select(const int64_t* in_off, cu::CUdeviceptr doc, cu::CUdeviceptr score, const int64_t* out_off,
              cu::CUdeviceptr out_doc, cu::CUdeviceptr out_score) {
    p_.sel_in_off = in_off;
    p_.sel_doc = Dev<const int32_t>(doc);
    p_.sel_score = Dev<const float>(score);
    p_.sel_out_off = out_off;
    p_.sel_out_doc = Dev<int32_t>(out_doc);
    p_.sel_out_score = Dev<float>(out_score);
    p_.sel_out_n = Dev<int32_t>(sel_n_->get());
    Go(rt_, "plaid_select", nq_, 1, 256, 0, p_);
  }
  // plaid_residual(_mma) / plaid_exact over the listed documents [off[q], off[q + 1]) of each query
  // (at most `most` each), about per_warp documents a warp (the mma kernel loads the query's
  // fragments once per warp), yet at least ~512 blocks in all (one query's latency).
  void Score(const char* kernel, int64_t most, const int64_t* off, cu::CUdeviceptr docs, cu::CUdeviceptr out,
             unsigned smem, int64_t per_warp = 1) {
    p_.score_off = off;
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
  Pinned& host_;
  std::vector<cu::CUevent> ev_;
  Buf qd_, qlen_, qc_, qc8_, qscale_, q16_, c16_, group_max_, floor_, partial_, cbits_, probed_, probed_n_, dbits_, cand_n_, offs_, cand_,
      cand_q_, ci_, kbits_, kept_, kept_ci_, sel_n_, rs_, fin_, fin_rs_, fin_ex_;
  std::vector<int64_t> cand_off_, kept_off_, fin_off_;
  std::vector<int32_t> probed_counts_;
  bool exact_ = false;
};

}  // namespace

void PlaidDeviceIndex::SearchBatches(const float* queries, const int32_t* lengths, int64_t num_q,
                                     const PlaidSearchPlan& plan, PlaidSearchResult* out) {
  for (const char* k : {"plaid_offsets", "plaid_group_max", "plaid_probe_floor"})
    if (!rt_.HasKernel(k))
      throw std::runtime_error(std::string("the CUDA kernels predate this addon (no ") + k +
                               "): install the matching maxsim-cuda-kernels package");
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
  ix.cent_norm = cent_norm_;
  const bool exact = plan.exact && tokens_ != 0;
  // two batches in flight: batch i is enqueued whole before batch i - 1 is collected, so the host's
  // work (padding, launches, sorting) overlaps the device's. They alternate between the runtime's
  // two streams, so one's kernels fill the tails of the other's (1.03x, bench/NOTES.md); every
  // batch is collected before the job ends, so both streams end idle and the first is restored.
  const cu::CUstream first = rt_.stream();
  struct Restore {
    Runtime& rt;
    cu::CUstream s;
    // on an error a pass may still run on either stream: both are drained before the job's blocks
    // and pinned buffers serve another job (after a whole job both are idle already)
    ~Restore() {
      rt.SetStream(s);
      try {
        Api().cuStreamSynchronize(s);
        Api().cuStreamSynchronize(rt.side_stream());
      } catch (...) {  // a poisoned backend: nothing will run on it again
      }
    }
  } restore{rt_, first};
  auto on = [&](int64_t i) { rt_.SetStream(i % 2 ? rt_.side_stream() : first); };
  std::unique_ptr<Batch> prev;
  int64_t row = 0, n = 0;
  for (int64_t q0 = 0; q0 < num_q; q0 += plan.batch, n++) {
    const int64_t nq = std::min(plan.batch, num_q - q0);
    on(n);
    auto b = std::make_unique<Batch>(rt_, plan, nq, ix, *static_cast<Pinned*>(pinned_[n % 2]));
    b->Mark(0);
    b->QueryCentroids(queries + row * d_, lengths + q0);
    b->Mark(6);
    b->Probe();
    b->Mark(1);
    b->Candidates();
    b->Mark(2);
    b->Interaction();
    b->Mark(3);
    b->Residual();
    b->Mark(4);
    b->Rescore(exact);
    for (int64_t i = 0; i < nq; i++) row += lengths[q0 + i];
    if (prev) {
      on(n - 1);
      prev->Collect(out);
      if (plan.stages) prev->Stages(out);
    }
    prev = std::move(b);
  }
  on(n - 1);
  if (prev) {
    prev->Collect(out);
    if (plan.stages) prev->Stages(out);
  }
}

void* PlaidDeviceIndex::NewPinned() { return new Pinned(); }

void PlaidDeviceIndex::FreePinned(void* h) {
  auto* p = static_cast<Pinned*>(h);
  if (p->p) Api().cuMemFreeHost(p->p);
  delete p;
}

}  // namespace maxsim_cuda
