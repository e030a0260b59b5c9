// Runs maxsim_chamfer.cu's kernels on the host (cuda_shim.h: one thread per CUDA thread, barriers
// for __syncthreads and warp shuffles) with the binding's launch plan, and compares with the CPU
// engine's AVX2 kernel set: argmin, distances and CSR gradients bitwise, atomic gradients close.
// It checks the kernels' index arithmetic, CSR, scan and rounding sequence where no GPU exists; it
// cannot check what only a GPU shows (memory model, launch limits, the driver). Build after
// `node scripts/build-native.mjs addon` (it links the addon's CPU objects), from the repo root:
//   O=build/Release/obj.target; g++ -std=c++20 -O1 -pthread -ffp-contract=off -Inative/cpu -Inative/cuda \
//     -Inative/cuda/kernels -x c++ native/cuda/test/chamfer_emulate.cc -x none \
//     $O/maxsim_native/native/cpu/{chamfer,chamfer_portable,engine,thread_pool,kernels_portable,kernels_neon}.o \
//     $O/maxsim_cpu_avx2/native/cpu/{chamfer_avx2,kernels_avx2}.o \
//     $O/maxsim_cpu_avx512/native/cpu/{chamfer_avx512,kernels_avx512}.o $O/maxsim_cpu_amx/native/cpu/kernels_amx.o \
//     -o /tmp/chamfer_emulate && /tmp/chamfer_emulate   # prints OK (0 failures); ~15 s
#include "cuda_shim.h"
#include "maxsim_chamfer.cu"
#include "chamfer.h"
#include "chamfer_plan.h"

#include <cstdio>
#include <random>

using namespace maxsim_cpu;

static int failures = 0;
#define CHECK(c, ...) do { if (!(c)) { failures++; if (failures < 20) { std::printf("FAIL %s: ", #c); std::printf(__VA_ARGS__); std::printf("\n"); } } } while (0)

static int64_t Blocks(int64_t n, int64_t per) { return std::max<int64_t>(1, (n + per - 1) / per); }
static unsigned G(int64_t b) { return static_cast<unsigned>(std::min<int64_t>(b, 1 << 20)); }

static int splits_seen = 0;

void RunCase(const std::vector<int>& np, const std::vector<int>& nq, int d, bool both, std::mt19937& rng, float offset, bool dup,
             int64_t slots = 1) {
  const int64_t B = np.size();
  std::vector<int64_t> po(B + 1, 0), qo(B + 1, 0);
  for (int64_t b = 0; b < B; b++) { po[b + 1] = po[b] + np[b]; qo[b + 1] = qo[b] + nq[b]; }
  const int64_t tp = po[B], tq = qo[B];
  std::uniform_real_distribution<float> U(-1, 1);
  std::vector<float> P(tp * d), Q(tq * d);
  for (auto& v : P) v = U(rng) + offset;
  for (auto& v : Q) v = U(rng) + offset;
  if (dup) for (int64_t j = 1; j < tq; j += 2) for (int k = 0; k < d; k++) Q[j * d + k] = Q[(j - 1) * d + k];
  // CPU engine (spans over the packed buffers)
  std::vector<double> ps(B), qs(B);
  std::vector<int32_t> pl(B), ql(B);
  for (int64_t b = 0; b < B; b++) { ps[b] = po[b]; qs[b] = qo[b]; pl[b] = np[b]; ql[b] = nq[b]; }
  PointSpans sp{P.data(), ps.data(), pl.data(), B, d}, sq{Q.data(), qs.data(), ql.data(), B, d};
  const ChamferKernels* k = ChamferAvx2();
  std::vector<int32_t> cipq(tp), ciqp(tq);
  std::vector<float> cdpq(tp), cdqp(tq);
  ChamferForward(*k, sp, sq, cipq.data(), cdpq.data(), both ? ciqp.data() : nullptr, both ? cdqp.data() : nullptr, 2);
  std::vector<double> wp(tp), wq(tq);
  for (auto& w : wp) w = U(rng);
  for (auto& w : wq) w = U(rng);
  std::vector<float> cgp(tp * d, 0), cgq(tq * d, 0);
  ChamferBackward(sp, sq, cipq.data(), wp.data(), both ? ciqp.data() : nullptr, both ? wq.data() : nullptr, cgp.data(), cgq.data(), 2);

  // "GPU": the binding's plan
  ChamferParams p{};
  std::vector<float> pcen(tp * (d + 1)), qcen(tq * (d + 1)), centers(B * d);
  p.p_raw = P.data(); p.q_raw = Q.data(); p.p_cen = pcen.data(); p.q_cen = qcen.data();
  p.p_off = po.data(); p.q_off = qo.data(); p.centers = centers.data();
  p.num_pairs = B; p.tp = tp; p.tq = tq; p.rows = tp + tq; p.dim = d; p.bidirectional = both;
  Launch(chamfer_center, G(B), 256, p);
  Launch(chamfer_prep, G(Blocks(tp + tq, 256)), 256, p);
  // the engine's plan (chamfer_plan.h), with small slices so that these small clouds get split too
  const maxsim_cuda::ChamferPlan plan = maxsim_cuda::PlanChamfer(po, qo, both, slots, 40);
  p.num_tiles = plan.tiles.size() / 6;
  p.num_splits = plan.splits;
  p.tiles = plan.tiles.data();
  std::vector<int32_t> idx(tp + tq, 12345);
  std::vector<float> dist(tp + tq, -1);
  p.idx_pq = idx.data(); p.idx_qp = idx.data() + tp; p.dist_pq = dist.data(); p.dist_qp = dist.data() + tp;
  std::vector<float> part_key(plan.splits * (tp + tq), -7.0f);
  std::vector<int32_t> part_idx(plan.splits * (tp + tq), 54321);
  if (plan.splits > 1) { p.part_key = part_key.data(); p.part_idx = part_idx.data(); }
  else { p.part_key = p.dist_pq; p.part_idx = p.idx_pq; }
  void (*near[9])(const ChamferParams) = {nullptr, chamfer_nearest_d1, chamfer_nearest_d2, chamfer_nearest_d3, chamfer_nearest_d4, chamfer_nearest_d5, chamfer_nearest_d6, chamfer_nearest_d7, chamfer_nearest_d8};
  if (p.num_tiles > 0) Launch(near[d], G(p.num_tiles), ChamferThreads(d), p);
  Launch(chamfer_finalize, G(Blocks(both ? tp + tq : tp, 256)), 256, p);
  if (plan.splits > 1) splits_seen++;
  for (int64_t i = 0; i < tp; i++) {
    CHECK(idx[i] == cipq[i], "d=%d pq %ld: %d vs %d", d, (long)i, idx[i], cipq[i]);
    CHECK(std::memcmp(&dist[i], &cdpq[i], 4) == 0, "d=%d dist pq %ld: %g vs %g", d, (long)i, dist[i], cdpq[i]);
  }
  if (both) for (int64_t j = 0; j < tq; j++) {
    CHECK(idx[tp + j] == ciqp[j], "d=%d qp %ld: %d vs %d", d, (long)j, idx[tp + j], ciqp[j]);
    CHECK(std::memcmp(&dist[tp + j], &cdqp[j], 4) == 0, "dist qp");
  }
  // backward, as the binding: weights / indices concatenated, unused Q entries -1 / 0
  std::vector<int32_t> bidx(cipq);
  bidx.resize(tp + tq, -1);
  std::vector<double> bw(wp);
  bw.resize(tp + tq, 0.0);
  if (both) { std::copy(ciqp.begin(), ciqp.end(), bidx.begin() + tp); std::copy(wq.begin(), wq.end(), bw.begin() + tp); }
  p.idx_pq = bidx.data(); p.idx_qp = bidx.data() + tp; p.w_p = bw.data(); p.w_q = bw.data() + tp;
  for (int atomic = 0; atomic < 2; atomic++) {
    std::vector<float> g((tp + tq) * d, 0.0f);
    p.dp = g.data(); p.dq = g.data() + tp * d;
    const int64_t sources = both ? tp + tq : tp, rows = tp + tq;
    std::vector<uint32_t> counts(rows, 0), offsets(rows + 1, 0), sums(Blocks(rows, 1024)), list(std::max<int64_t>(sources, 1));
    p.counts = counts.data(); p.offsets = offsets.data(); p.block_sums = sums.data(); p.sources = list.data();
    if (atomic) {
      Launch(chamfer_grad_atomic, G(Blocks(sources, 256)), 256, p);
    } else {
      Launch(chamfer_csr_count, G(Blocks(sources, 256)), 256, p);
      Launch(chamfer_scan_local, G(Blocks(rows, 1024)), 1024, p);
      Launch(chamfer_scan_sums, 1, 1024, p);
      Launch(chamfer_scan_add, G(Blocks(rows, 1024)), 1024, p);
      Launch(chamfer_csr_fill, G(Blocks(sources, 256)), 256, p);
      Launch(chamfer_csr_sort, G(Blocks(rows, 256)), 256, p);
      Launch(chamfer_grad, G(Blocks(rows, 256)), 256, p);
    }
    for (int64_t e = 0; e < tp * d; e++) {
      if (atomic) CHECK(std::fabs(g[e] - cgp[e]) <= 1e-5f * (1 + std::fabs(cgp[e])), "atomic dp %ld %g vs %g", (long)e, g[e], cgp[e]);
      else CHECK(std::memcmp(&g[e], &cgp[e], 4) == 0, "d=%d csr dp %ld %g vs %g", d, (long)e, g[e], cgp[e]);
    }
    for (int64_t e = 0; e < tq * d; e++) {
      if (atomic) CHECK(std::fabs(g[tp * d + e] - cgq[e]) <= 1e-5f * (1 + std::fabs(cgq[e])), "atomic dq");
      else CHECK(std::memcmp(&g[tp * d + e], &cgq[e], 4) == 0, "d=%d csr dq %ld %g vs %g", d, (long)e, g[tp * d + e], cgq[e]);
    }
  }
}

int main() {
  std::mt19937 rng(7);
  for (int d = 1; d <= 8; d++) RunCase({300, 0, 1, 700, 5, 0}, {200, 4, 0, 1300, 1, 0}, d, true, rng, 0, false);
  RunCase({600, 50}, {1100, 3}, 3, false, rng, 0, false);
  RunCase({900}, {2100}, 3, true, rng, 1e4f, false);
  RunCase({800, 513}, {512, 700}, 3, true, rng, 0, true);
  RunCase({1500}, {3}, 3, true, rng, 0, false);  // hub rows: many sources per target
  // split target clouds (slices merged by chamfer_finalize), ragged and with exact ties across slices
  RunCase({300, 0, 1, 700, 5}, {200, 4, 0, 1300, 1}, 3, true, rng, 0, false, 64);
  RunCase({800, 513}, {512, 700}, 3, true, rng, 0, true, 64);
  RunCase({900}, {2100}, 5, true, rng, 1e4f, false, 64);
  if (splits_seen == 0) { failures++; std::printf("FAIL: no case split its target clouds\n"); }
  std::printf("%s (%d failures)\n", failures ? "FAILED" : "OK", failures);
  return failures != 0;
}
