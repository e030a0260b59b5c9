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

}  // namespace

void PlaidDeviceIndex::SearchBatch(const float* queries, const int32_t* lengths, int64_t, int64_t nq,
                                   const PlaidSearchPlan& plan, PlaidSearchResult* out) {
  Runtime& rt = rt_;
  const int64_t LQ = plan.lq, d = d_, K = k_;
  std::vector<cu::CUevent> ev(6, nullptr);
  for (auto& e : ev) Check(Api().cuEventCreate(&e, cu::CU_EVENT_DEFAULT), "cuEventCreate");
  struct Destroy {
    std::vector<cu::CUevent>& ev;
    ~Destroy() {
      for (auto e : ev) Api().cuEventDestroy(e);
    }
  } destroy{ev};
  auto mark = [&](int i) { Check(Api().cuEventRecord(ev[i], rt.stream()), "cuEventRecord"); };
  mark(0);
  // queries padded to LQ rows
  std::vector<float> qpad(static_cast<size_t>(nq * LQ * d), 0.0f);
  std::vector<int32_t> qlen(lengths, lengths + nq);
  int64_t at = 0;
  for (int64_t q = 0; q < nq; q++) {
    std::memcpy(qpad.data() + q * LQ * d, queries + at * d, static_cast<size_t>(qlen[q] * d) * 4);
    at += qlen[q];
  }
  Buf qd = Block(rt, qpad.size() * 4), qlen_d = Block(rt, static_cast<uint64_t>(nq) * 4);
  rt.Upload(qd->get(), qpad.data(), qpad.size() * 4);
  rt.Upload(qlen_d->get(), qlen.data(), static_cast<uint64_t>(nq) * 4);
  Buf qc = Block(rt, static_cast<uint64_t>(nq * K * LQ) * 4);
  {
    PlaidAssignParams a{};
    a.x = Dev<const void>(qd->get());
    a.cent = Dev<const float>(cent_);
    a.n = nq * LQ;
    a.k = K;
    a.d = d;
    a.ld = LQ;
    a.scores = Dev<float>(qc->get());
    Go(rt, "plaid_dots", Div(a.n, PLAID_TILE_M), Div(K, PLAID_TILE_N), PLAID_THREADS, 0, a);
  }
  PlaidSearchParams p{};
  p.cent = Dev<const float>(cent_);
  p.tables = Dev<const float>(tables_);
  p.cids = Dev<const int32_t>(cids_);
  p.codes = Dev<const uint8_t>(codes_);
  p.doc_off = Dev<const int64_t>(doc_off_);
  p.bag_off = Dev<const int64_t>(bag_off_);
  p.bags = Dev<const int32_t>(bags_);
  p.ivf_off = Dev<const int64_t>(ivf_off_);
  p.ivf = Dev<const int32_t>(ivf_);
  p.tokens = Dev<const void>(tokens_);
  p.tokens_dtype = tokens_dtype_;
  p.q = Dev<const float>(qd->get());
  p.q_len = Dev<const int32_t>(qlen_d->get());
  p.qc = Dev<float>(qc->get());
  p.num_q = nq;
  p.lq = LQ;
  p.k = K;
  p.d = d;
  p.docs = docs_;
  p.words = Div(docs_, 32);
  p.nprobe = plan.nprobe;
  p.np = plan.np;
  p.chunks = Div(K, PLAID_PROBE_CHUNK);
  p.threshold = plan.threshold;
  p.bits = bits_;
  // stage 1: each token's nprobe best centroids, the distinct ones per query
  const int64_t cw = Div(K, 32);
  Buf partial = Block(rt, static_cast<uint64_t>(nq * p.chunks * LQ * p.np) * 8);
  Buf cbits = Block(rt, static_cast<uint64_t>(nq * cw) * 4);
  Buf probed = Block(rt, static_cast<uint64_t>(nq * LQ * plan.nprobe) * 4);
  Buf probed_n = Block(rt, static_cast<uint64_t>(nq) * 4);
  p.partial = Dev<unsigned long long>(partial->get());
  p.cbits = Dev<uint32_t>(cbits->get());
  p.probed = Dev<int32_t>(probed->get());
  p.probed_n = Dev<int32_t>(probed_n->get());
  Zero(rt, cbits->get(), static_cast<uint64_t>(nq * cw) * 4);
  Zero(rt, probed_n->get(), static_cast<uint64_t>(nq) * 4);
  Go(rt, "plaid_probe_partial_" + std::to_string(p.np), p.chunks, nq, static_cast<unsigned>(LQ), 0, p);
  Go(rt, "plaid_probe_merge", Div(nq * LQ * 32, 256), 1, 256, 0, p);
  mark(1);
  // stage 2: inverted lists -> candidate documents (ascending)
  Buf dbits = Block(rt, static_cast<uint64_t>(nq * p.words) * 4);
  Buf cand_n = Block(rt, static_cast<uint64_t>(nq) * 4);
  p.dbits = Dev<uint32_t>(dbits->get());
  p.cand_n = Dev<int32_t>(cand_n->get());
  Zero(rt, dbits->get(), static_cast<uint64_t>(nq * p.words) * 4);
  Go(rt, "plaid_mark", LQ * plan.nprobe, nq, 256, 0, p);
  Go(rt, "plaid_count", nq, 1, 1024, 0, p);
  const std::vector<int32_t> counts = Fetch<int32_t>(rt, cand_n->get(), nq);
  std::vector<int64_t> cand_off(static_cast<size_t>(nq + 1), 0);
  for (int64_t q = 0; q < nq; q++) cand_off[q + 1] = cand_off[q] + counts[q];
  const int64_t total = cand_off[nq];
  Buf cand_off_d = Block(rt, cand_off.size() * 8);
  rt.Upload(cand_off_d->get(), cand_off.data(), cand_off.size() * 8);
  Buf cand = Block(rt, static_cast<uint64_t>(total) * 4), cand_q = Block(rt, static_cast<uint64_t>(total) * 4);
  Buf ci = Block(rt, static_cast<uint64_t>(total) * 4);
  p.cand_off = Dev<const int64_t>(cand_off_d->get());
  p.cand = Dev<int32_t>(cand->get());
  p.cand_q = Dev<int32_t>(cand_q->get());
  p.ci = Dev<float>(ci->get());
  Go(rt, "plaid_compact", nq, 1, 1024, 0, p);
  mark(2);
  // stage 3: centroid interaction, the best `candidates` of each query
  Go(rt, "plaid_interaction", std::min<int64_t>(Div(total, 8), int64_t(1) << 20), 1, 256, 0, p);
  const std::vector<int64_t> kept_off = Capped(cand_off, plan.candidates);
  const int64_t kept_total = kept_off[nq];
  Buf kept_off_d = Block(rt, kept_off.size() * 8);
  rt.Upload(kept_off_d->get(), kept_off.data(), kept_off.size() * 8);
  Buf kept = Block(rt, static_cast<uint64_t>(kept_total) * 4), kept_ci = Block(rt, static_cast<uint64_t>(kept_total) * 4);
  Buf sel_n = Block(rt, static_cast<uint64_t>(nq) * 4);
  p.sel_in_off = Dev<const int64_t>(cand_off_d->get());
  p.sel_doc = Dev<const int32_t>(cand->get());
  p.sel_score = Dev<const float>(ci->get());
  p.sel_out_off = Dev<const int64_t>(kept_off_d->get());
  p.sel_out_doc = Dev<int32_t>(kept->get());
  p.sel_out_score = Dev<float>(kept_ci->get());
  p.sel_out_n = Dev<int32_t>(sel_n->get());
  Go(rt, "plaid_select", nq, 1, 256, 0, p);
  mark(3);
  // stage 4: the fused decompress-MaxSim of the kept documents, the best `rescore` of them
  int64_t max_kept = 0;
  for (int64_t q = 0; q < nq; q++) max_kept = std::max(max_kept, kept_off[q + 1] - kept_off[q]);
  const unsigned smem = static_cast<unsigned>((d * LQ + d * 16) * 4);
  Buf rs = Block(rt, static_cast<uint64_t>(kept_total) * 4);
  p.score_off = Dev<const int64_t>(kept_off_d->get());
  p.score_doc = Dev<const int32_t>(kept->get());
  p.score_out = Dev<float>(rs->get());
  Go(rt, "plaid_residual", std::min<int64_t>(Div(max_kept, PLAID_SCORE_WARPS), 4096), nq, 32 * PLAID_SCORE_WARPS, smem, p);
  const std::vector<int64_t> fin_off = Capped(kept_off, plan.rescore);
  const int64_t fin_total = fin_off[nq];
  Buf fin_off_d = Block(rt, fin_off.size() * 8);
  rt.Upload(fin_off_d->get(), fin_off.data(), fin_off.size() * 8);
  Buf fin = Block(rt, static_cast<uint64_t>(fin_total) * 4), fin_rs = Block(rt, static_cast<uint64_t>(fin_total) * 4);
  p.sel_in_off = Dev<const int64_t>(kept_off_d->get());
  p.sel_doc = Dev<const int32_t>(kept->get());
  p.sel_score = Dev<const float>(rs->get());
  p.sel_out_off = Dev<const int64_t>(fin_off_d->get());
  p.sel_out_doc = Dev<int32_t>(fin->get());
  p.sel_out_score = Dev<float>(fin_rs->get());
  Go(rt, "plaid_select", nq, 1, 256, 0, p);
  mark(4);
  // stage 5: exact MaxSim of the final lists on the source tokens
  const bool exact = plan.exact && tokens_ != 0;
  Buf fin_ex = Block(rt, static_cast<uint64_t>(fin_total) * 4);
  if (exact) {
    int64_t max_fin = 0;
    for (int64_t q = 0; q < nq; q++) max_fin = std::max(max_fin, fin_off[q + 1] - fin_off[q]);
    p.score_off = Dev<const int64_t>(fin_off_d->get());
    p.score_doc = Dev<const int32_t>(fin->get());
    p.score_out = Dev<float>(fin_ex->get());
    Go(rt, "plaid_exact", std::min<int64_t>(Div(max_fin, PLAID_SCORE_WARPS), 4096), nq, 32 * PLAID_SCORE_WARPS,
       static_cast<unsigned>(d * LQ * 4 + d * 16 * 4), p);
  }
  mark(5);
  const auto docs = Fetch<int32_t>(rt, fin->get(), fin_total);
  const auto rsc = Fetch<float>(rt, fin_rs->get(), fin_total);
  const auto exs = exact ? Fetch<float>(rt, fin_ex->get(), fin_total) : rsc;
  Check(Api().cuEventSynchronize(ev[5]), "cuEventSynchronize");
  out->ms_centroids += Elapsed(ev[0], ev[1]);
  out->ms_candidates += Elapsed(ev[1], ev[2]);
  out->ms_interaction += Elapsed(ev[2], ev[3]);
  out->ms_residual += Elapsed(ev[3], ev[4]);
  out->ms_rescore += Elapsed(ev[4], ev[5]);
  const auto pn = Fetch<int32_t>(rt, probed_n->get(), nq);
  for (int64_t q = 0; q < nq; q++) {
    out->probed += pn[q];
    const int64_t f0 = fin_off[q], f1 = fin_off[q + 1];
    std::vector<int64_t> ord(static_cast<size_t>(f1 - f0));
    std::iota(ord.begin(), ord.end(), f0);
    std::sort(ord.begin(), ord.end(), [&](int64_t a, int64_t b) { return Better(exs[a], docs[a], exs[b], docs[b]); });
    for (int64_t i : ord) {
      out->docs.push_back(docs[i]);
      out->scores.push_back(exs[i]);
      out->residual.push_back(rsc[i]);
    }
    out->off.push_back(static_cast<int64_t>(out->docs.size()));
  }
  out->generated += total;
  out->kept += kept_total;
  out->scored += kept_total;
  out->rescored += exact ? fin_total : 0;
  if (plan.stages) {
    const auto pr = Fetch<int32_t>(rt, probed->get(), nq * LQ * plan.nprobe);
    const auto cd = Fetch<int32_t>(rt, cand->get(), total);
    const auto cis = Fetch<float>(rt, ci->get(), total);
    const auto kd = Fetch<int32_t>(rt, kept->get(), kept_total);
    const auto rss = Fetch<float>(rt, rs->get(), kept_total);
    for (int64_t q = 0; q < nq; q++) {
      PlaidStageOutput s;
      s.probed.assign(pr.begin() + q * LQ * plan.nprobe, pr.begin() + q * LQ * plan.nprobe + pn[q]);
      std::sort(s.probed.begin(), s.probed.end());
      s.candidates.assign(cd.begin() + cand_off[q], cd.begin() + cand_off[q + 1]);
      s.interaction.assign(cis.begin() + cand_off[q], cis.begin() + cand_off[q + 1]);
      std::vector<int64_t> ord(static_cast<size_t>(kept_off[q + 1] - kept_off[q]));
      std::iota(ord.begin(), ord.end(), kept_off[q]);
      std::sort(ord.begin(), ord.end(), [&](int64_t a, int64_t b) { return kd[a] < kd[b]; });
      for (int64_t i : ord) {
        s.kept.push_back(kd[i]);
        s.residual.push_back(rss[i]);
      }
      out->stages.push_back(std::move(s));
    }
  }
}

}  // namespace maxsim_cuda
