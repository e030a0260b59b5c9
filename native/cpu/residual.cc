// The residual codec over the per-ISA kernels (residual.h): kernel selection, centroid packing,
// the exact and two-level assignment, and the encode's bucketing, threaded on the engine's pool.
// The search stages are in residual_search.cc.
#include "residual.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "../common/half_bits.h"
#include "cpu_features.h"
#include "engine.h"
#include "residual_pool.h"

namespace maxsim_cpu {

using namespace residual_detail;

namespace {

// Centroids in lane blocks [kp / lanes][d][lanes] (zero past nc) and their bias (-inf past nc).
void PackCentroids(const float* c, int64_t nc, int64_t d, int lanes, bool l2, std::vector<float>* pack,
                   std::vector<float>* bias) {
  const int64_t kp = RoundUp(nc, lanes);
  pack->assign(static_cast<size_t>(kp * d), 0.0f);
  bias->assign(static_cast<size_t>(kp), -INFINITY);
  for (int64_t j = 0; j < nc; j++) {
    double sq = 0.0;
    for (int64_t k = 0; k < d; k++) {
      const float v = c[j * d + k];
      (*pack)[(j / lanes) * d * lanes + k * lanes + j % lanes] = v;
      sq += static_cast<double>(v) * v;
    }
    (*bias)[j] = l2 ? static_cast<float>(-0.5 * sq) : 0.0f;
  }
}

// Row `t` of a token set's data as float32 into dst.
void LoadRow(const TokenSet& s, int64_t t, float* dst) {
  const int64_t d = s.dim;
  if (s.dtype == DType::Float32) {
    std::memcpy(dst, static_cast<const float*>(s.data) + t * d, static_cast<size_t>(d) * 4);
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(s.data) + t * d;
    if (s.dtype == DType::Float16)
      for (int64_t k = 0; k < d; k++) dst[k] = F16BitsFloat(p[k]);
    else
      for (int64_t k = 0; k < d; k++) dst[k] = Bf16BitsFloat(p[k]);
  }
}


// The groups of a two-level assignment, packed for the kernels: coarse bias, and per group its
// members' centroids in lane blocks (pack from pack_at[grp], kp[grp] lanes) with their bias.
struct GroupPlan {
  const ResidualGroups* g = nullptr;
  int64_t d = 0;
  std::vector<float> coarse_bias;
  std::vector<float> pack, bias;
  std::vector<int64_t> pack_at, bias_at, kp;
};

void PlanGroups(const ResidualKernels& kern, const float* centroids, int64_t d, const ResidualGroups& g,
                GroupPlan* plan) {
  plan->g = &g;
  plan->d = d;
  std::vector<float> cp, cb;
  PackCentroids(g.coarse, g.g, d, kern.lanes, true, &cp, &cb);
  plan->coarse_bias.assign(cb.begin(), cb.begin() + g.g);
  plan->pack_at.resize(g.g);
  plan->bias_at.resize(g.g);
  plan->kp.resize(g.g);
  std::vector<float> rows;
  for (int64_t j = 0; j < g.g; j++) {
    const int64_t m = g.offsets[j + 1] - g.offsets[j];
    rows.resize(static_cast<size_t>(std::max<int64_t>(1, m * d)));
    for (int64_t i = 0; i < m; i++)
      std::memcpy(rows.data() + i * d, centroids + static_cast<int64_t>(g.members[g.offsets[j] + i]) * d,
                  static_cast<size_t>(d) * 4);
    plan->pack_at[j] = static_cast<int64_t>(plan->pack.size());
    plan->bias_at[j] = static_cast<int64_t>(plan->bias.size());
    plan->kp[j] = RoundUp(m, kern.lanes);
    if (m == 0) continue;
    PackCentroids(rows.data(), m, d, kern.lanes, true, &cp, &cb);
    plan->pack.insert(plan->pack.end(), cp.begin(), cp.end());
    plan->bias.insert(plan->bias.end(), cb.begin(), cb.end());
  }
}

// Rows [n][d] through the groups (one worker): coarse scores by the dots kernel, each row's probe
// best non-empty groups, then per group the rows that chose it against its members.
void AssignRowsGrouped(const ResidualKernels& kern, const GroupPlan& plan, const float* x, int64_t n, int32_t* ids,
                       float* scores) {
  const ResidualGroups& g = *plan.g;
  const int64_t d = plan.d;
  const int64_t np = std::max<int64_t>(16, RoundUp(n, 16));
  std::vector<float> xpack, xt;
  PackQuery(x, n, d, np, kern.lanes, &xpack, &xt);
  std::vector<float> qct(static_cast<size_t>(g.g * np));
  kern.dots(xpack.data(), np, g.coarse, 0, g.g, d, qct.data());
  const int64_t probe = std::max<int64_t>(1, std::min(g.probe, g.g));
  std::vector<int32_t> pick(static_cast<size_t>(n * probe), -1);
  std::vector<float> ps(static_cast<size_t>(n * probe));
  std::vector<int32_t> have(static_cast<size_t>(n), 0);
  std::vector<int64_t> count(static_cast<size_t>(g.g + 1), 0);
  int32_t first_nonempty = 0;
  while (g.offsets[first_nonempty + 1] == g.offsets[first_nonempty]) first_nonempty++;
  // Groups outer, rows inner: qct is read in order (rows inner strode a 4 MB table per row).
  for (int64_t j = 0; j < g.g; j++) {
    if (g.offsets[j + 1] == g.offsets[j]) continue;
    const float* sj = qct.data() + j * np;
    const float bj = plan.coarse_bias[j];
    for (int64_t r = 0; r < n; r++) {
      int32_t* top = pick.data() + r * probe;
      float* pr = ps.data() + r * probe;
      const float s = sj[r] + bj;
      // insertion into the row's sorted top list (groups arrive in ascending id, so ties keep the lower)
      int64_t at = have[r];
      while (at > 0 && Better(s, static_cast<int32_t>(j), pr[at - 1], top[at - 1])) at--;
      if (at >= probe) continue;
      for (int64_t m = std::min<int64_t>(have[r], probe - 1); m > at; m--) {
        pr[m] = pr[m - 1];
        top[m] = top[m - 1];
      }
      pr[at] = s;
      top[at] = static_cast<int32_t>(j);
      have[r] = static_cast<int32_t>(std::min<int64_t>(probe, have[r] + 1));
    }
  }
  for (int64_t r = 0; r < n; r++) {
    int32_t* top = pick.data() + r * probe;
    if (have[r] == 0) top[have[r]++] = first_nonempty;  // NaN scores: any valid group
    for (int64_t m = 0; m < have[r]; m++) count[top[m] + 1]++;
  }
  for (int64_t j = 0; j < g.g; j++) count[j + 1] += count[j];
  std::vector<int32_t> rows_of(static_cast<size_t>(count[g.g]));
  std::vector<int64_t> cursor(count.begin(), count.end() - 1);
  for (int64_t r = 0; r < n; r++)
    for (int64_t m = 0; m < probe && pick[r * probe + m] >= 0; m++)
      rows_of[cursor[pick[r * probe + m]]++] = static_cast<int32_t>(r);
  std::vector<float> best(static_cast<size_t>(n), -INFINITY);
  std::fill(ids, ids + n, -1);
  std::vector<float> buf, sc;
  std::vector<int32_t> pos;
  for (int64_t j = 0; j < g.g; j++) {
    const int64_t m = count[j + 1] - count[j];
    if (m == 0) continue;
    buf.resize(static_cast<size_t>(m * d));
    for (int64_t i = 0; i < m; i++)
      std::memcpy(buf.data() + i * d, x + rows_of[count[j] + i] * d, static_cast<size_t>(d) * 4);
    pos.resize(static_cast<size_t>(m));
    sc.resize(static_cast<size_t>(m));
    kern.assign(buf.data(), m, plan.pack.data() + plan.pack_at[j], plan.bias.data() + plan.bias_at[j], plan.kp[j],
                d, pos.data(), sc.data());
    for (int64_t i = 0; i < m; i++) {
      const int32_t r = rows_of[count[j] + i];
      const int32_t id = g.members[g.offsets[j] + pos[i]];
      if (ids[r] < 0 || Better(sc[i], id, best[r], ids[r])) {
        ids[r] = id;
        best[r] = sc[i];
      }
    }
  }
  if (scores) std::copy(best.begin(), best.end(), scores);
}

}  // namespace


std::vector<const ResidualKernels*> UsableResidualKernels() {
  std::vector<const ResidualKernels*> out;
  bool avx512 = false, avx2 = false;
  for (const IsaKernels* k : UsableIsas()) {
    const std::string name = k->name;
    if (name == "avx512") avx512 = true;
    if (name == "avx2") avx2 = true;
  }
  // the int8 residual set runs in the int8 engine's VNNI translation unit: admitted like it
  if (avx512 && ResidualAvx512() && ResidualAvx512Vnni() && Admitted("int8", "avx512-vnni"))
    out.push_back(ResidualAvx512Vnni());
  if (avx512 && ResidualAvx512()) out.push_back(ResidualAvx512());
  // AVX2 without AVX-512: the int8 sets first (measured faster than fp32 in bench/results/plaid-cpu.md)
  if (avx2 && ResidualAvx2() && ResidualAvxVnni() && Admitted("residual", "avxvnni"))
    out.push_back(ResidualAvxVnni());
  if (avx2 && ResidualAvx2() && ResidualAvx2Int8()) out.push_back(ResidualAvx2Int8());
  if (avx2 && ResidualAvx2()) out.push_back(ResidualAvx2());
  out.push_back(ResidualPortable());
  return out;
}

const ResidualKernels* SelectResidualKernels(const std::string& requested, std::string* error) {
  const auto usable = UsableResidualKernels();
  if (requested.empty() || requested == "auto") return usable.front();
  for (const ResidualKernels* k : usable)
    if (requested == k->name) return k;
  std::string names;
  for (const ResidualKernels* k : usable) names += std::string(names.empty() ? "'" : ", '") + k->name + "'";
  *error = "Expected one of " + names + " (usable here) for isa but received '" + requested + "'";
  return nullptr;
}

void ResidualAssign(const ResidualKernels& kern, const float* x, int64_t n, const float* centroids, int64_t nc,
                    int64_t d, bool l2, int32_t* ids, float* scores, int threads) {
  std::vector<float> pack, bias;
  PackCentroids(centroids, nc, d, kern.lanes, l2, &pack, &bias);
  const int64_t kp = RoundUp(nc, kern.lanes);
  constexpr int64_t kRows = 256;
  ForEach((n + kRows - 1) / kRows, threads, [&](int, int64_t item) {
    const int64_t r0 = item * kRows;
    const int64_t m = std::min(kRows, n - r0);
    kern.assign(x + r0 * d, m, pack.data(), bias.data(), kp, d, ids + r0, scores ? scores + r0 : nullptr);
  });
}

void ResidualAssignGrouped(const ResidualKernels& kern, const float* x, int64_t n, const float* centroids, int64_t,
                           int64_t d, const ResidualGroups& groups, int32_t* ids, float* scores, int threads) {
  GroupPlan plan;
  PlanGroups(kern, centroids, d, groups, &plan);
  constexpr int64_t kRows = 4096;
  ForEach((n + kRows - 1) / kRows, threads, [&](int, int64_t item) {
    const int64_t r0 = item * kRows;
    AssignRowsGrouped(kern, plan, x + r0 * d, std::min(kRows, n - r0), ids + r0, scores ? scores + r0 : nullptr);
  });
}

void ResidualEncode(const ResidualKernels& kern, const TokenSet& docs, int64_t first_token, const float* centroids,
                    int64_t nc, const ResidualGroups* groups, const float* cutoffs, const float* weights, int bits,
                    int32_t* cids, uint8_t* codes, double* sq_error, int threads) {
  const int64_t d = docs.dim;
  const int64_t ncut = (1 << bits) - 1;
  std::vector<double> first(static_cast<size_t>(docs.count + 1), 0.0);  // part offset of each document
  for (int64_t b = 0; b < docs.count; b++) first[b + 1] = first[b] + docs.lengths[b];
  const int64_t total = static_cast<int64_t>(first[docs.count]);
  std::vector<float> pack, bias;
  GroupPlan plan;
  if (groups) PlanGroups(kern, centroids, d, *groups, &plan);
  else PackCentroids(centroids, nc, d, kern.lanes, true, &pack, &bias);
  const int64_t kp = RoundUp(nc, kern.lanes);
  // Chunks are whole blocks of the stream, so every code word has one owner within a call.
  constexpr int64_t kChunk = 256 * kResidualBlock;
  const int64_t c_first = first_token / kChunk;
  const int64_t chunks = total == 0 ? 0 : (first_token + total - 1) / kChunk - c_first + 1;
  std::vector<double> err(static_cast<size_t>(Workers(threads)), 0.0);
  const int64_t block_bytes = d * 2 * bits;
  std::vector<float> cut_t(static_cast<size_t>(ncut * d));  // [m][d]
  for (int64_t k = 0; k < d; k++)
    for (int64_t m = 0; m < ncut; m++) cut_t[m * d + k] = cutoffs[k * ncut + m];
  ForEach(chunks, threads, [&](int w, int64_t item) {
    const int64_t g0 = std::max(first_token, (c_first + item) * kChunk);  // stream index
    const int64_t t0 = g0 - first_token;                                 // part index
    const int64_t n = std::min((c_first + item + 1) * kChunk - g0, total - t0);
    std::vector<float> rows(static_cast<size_t>(n * d));
    // The document holding part token t0, then a walk forward through the chunk.
    int64_t doc = std::upper_bound(first.begin(), first.end(), static_cast<double>(t0)) - first.begin() - 1;
    for (int64_t t = 0; t < n; t++) {
      while (static_cast<double>(t0 + t) >= first[doc + 1]) doc++;
      const int64_t src = static_cast<int64_t>(docs.starts[doc]) + (t0 + t - static_cast<int64_t>(first[doc]));
      LoadRow(docs, src, rows.data() + t * d);
    }
    if (groups) AssignRowsGrouped(kern, plan, rows.data(), n, cids + g0, nullptr);
    else kern.assign(rows.data(), n, pack.data(), bias.data(), kp, d, cids + g0, nullptr);
    // Per token: the residual's buckets counted lane-wise over the transposed cutoffs (ascending, so
    // the count is the index of the first cutoff not below r), the decode error in double in kAcc
    // independent sums, then the codes or-ed into the token's lane of its block.
    constexpr int kAcc = 8;
    std::vector<float> r(static_cast<size_t>(d)), wt(static_cast<size_t>(d));
    std::vector<int32_t> q(static_cast<size_t>(d));
    double acc[kAcc] = {};
    for (int64_t t = 0; t < n; t++) {
      const int64_t g = g0 + t;
      const float* x = rows.data() + t * d;
      const float* c = centroids + static_cast<int64_t>(cids[g]) * d;
      for (int64_t k = 0; k < d; k++) {
        r[k] = x[k] - c[k];
        q[k] = 0;
      }
      for (int64_t m = 0; m < ncut; m++) {
        const float* cm = cut_t.data() + m * d;
        for (int64_t k = 0; k < d; k++) q[k] += cm[k] < r[k];
      }
      for (int64_t k = 0; k < d; k++) wt[k] = weights[k * kResidualTable + q[k]];
      int64_t k = 0;
      for (; k + kAcc <= d; k += kAcc)
        for (int j = 0; j < kAcc; j++) {
          const double diff = static_cast<double>(x[k + j]) - (static_cast<double>(c[k + j]) + wt[k + j]);
          acc[j] += diff * diff;
        }
      for (; k < d; k++) {
        const double diff = static_cast<double>(x[k]) - (static_cast<double>(c[k]) + wt[k]);
        acc[0] += diff * diff;
      }
      uint8_t* block = codes + (g / kResidualBlock) * block_bytes;
      const int bit = static_cast<int>(g % kResidualBlock) * bits;
      uint8_t* at = block + bit / 8;
      for (int64_t k = 0; k < d; k++) at[k * 2 * bits] |= static_cast<uint8_t>(q[k] << (bit % 8));
    }
    for (int j = 0; j < kAcc; j++) err[w] += acc[j];
  });
  if (sq_error) {
    double s = 0.0;
    for (double e : err) s += e;
    *sq_error = s;
  }
}

}  // namespace maxsim_cpu
