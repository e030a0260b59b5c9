// Runs maxsim_chamfer.cu's kernels on the host (cuda_shim.h: one thread per CUDA thread, barriers
// for __syncthreads and warp shuffles) with the engine's launch plan, and compares with the CPU
// engine's AVX2 kernel set: argmin, distances and CSR gradients bitwise, atomic gradients close.
// It checks the kernels' index arithmetic, CSR, scan and rounding sequence where no GPU exists; it
// cannot check what only a GPU shows (memory model, launch limits, the driver). Build after
// `node scripts/build-native.mjs addon` (it links the addon's CPU objects), from the repo root:
//   O=build/Release/obj.target; g++ -std=c++20 -O1 -pthread -ffp-contract=off -Inative/cpu -Inative/cuda \
//     -Inative/cuda/kernels -x c++ native/cuda/test/chamfer_emulate.cc -x none \
//     $O/maxsim_native/native/cpu/{chamfer,chamfer_portable,engine,thread_pool,kernels_portable,kernels_neon,cpu_features}.o \
//     $O/maxsim_cpu_avx2/native/cpu/{chamfer_avx2,kernels_avx2}.o \
//     $O/maxsim_cpu_avx512/native/cpu/{chamfer_avx512,kernels_avx512}.o $O/maxsim_cpu_amx/native/cpu/kernels_amx.o \
//     $O/maxsim_cpu_avx512bf16/native/cpu/kernels_avx512bf16.o \
//     -o /tmp/chamfer_emulate && /tmp/chamfer_emulate   # prints OK (0 failures); ~15 s
#include "cuda_shim.h"
#include "maxsim_chamfer.cu"
#include "chamfer.h"
#include "chamfer_plan.h"

#include <algorithm>
#include <cstdio>
#include <random>

using namespace maxsim_cpu;

static int failures = 0;
#define CHECK(c, ...) do { if (!(c)) { failures++; if (failures < 20) { std::printf("FAIL %s: ", #c); std::printf(__VA_ARGS__); std::printf("\n"); } } } while (0)

static int64_t Blocks(int64_t n, int64_t per) { return std::max<int64_t>(1, (n + per - 1) / per); }
static unsigned G(int64_t b) { return static_cast<unsigned>(std::min<int64_t>(b, 1 << 20)); }

// The plan src/backends/cuda-chamfer-plan.ts makes (the TypeScript test compares it with the C++
// planner's table of main bc33815), written again here so the emulation needs no Node; the engine's
// check (CheckChamferPlan) accepts it before it runs.
static maxsim_cuda::ChamferPlan EmulatorPlan(const std::vector<int64_t>& po, const std::vector<int64_t>& qo, int64_t d, bool both) {
  maxsim_cuda::ChamferPlan plan;
  const int64_t pairs = static_cast<int64_t>(po.size()) - 1;
  int64_t cell = 0, chunk = 0, group = 0;
  for (const auto* off : {&po, &qo}) {
    for (int64_t b = 0; b < pairs; b++) {
      const int64_t n = (*off)[b + 1] - (*off)[b];
      int bits = 0;
      while ((bits + 1) * d <= MAXSIM_CHAMFER_CELL_BITS && (int64_t(2) << ((bits + 1) * d)) <= n) bits++;
      plan.clouds.insert(plan.clouds.end(), {cell, bits, chunk, group});
      if (n > 0) cell += int64_t(1) << (bits * d);
      chunk += (n + kChamferChunk - 1) / kChamferChunk;
      group += (n + kChamferGroup - 1) / kChamferGroup;
    }
  }
  plan.clouds.insert(plan.clouds.end(), {cell, 0, chunk, group});
  for (int dir = 0; dir < (both ? 2 : 1); dir++) {
    const auto& s = dir == 0 ? po : qo;
    const auto& t = dir == 0 ? qo : po;
    for (int64_t b = 0; b < pairs; b++) {
      const int64_t n = s[b + 1] - s[b], m = t[b + 1] - t[b];
      if (n == 0 || m == 0) continue;
      for (int64_t i = 0; i < n; i += kChamferUnit) plan.units.insert(plan.units.end(), {dir, b, i});
    }
  }
  maxsim_cuda::CheckChamferPlan(plan, po, qo, d, both);
  return plan;
}

void RunCase(const std::vector<int>& np, const std::vector<int>& nq, int d, bool both, std::mt19937& rng, float offset, bool dup,
             bool prune = true, bool lattice = false) {
  const int64_t B = np.size();
  std::vector<int64_t> po(B + 1, 0), qo(B + 1, 0);
  for (int64_t b = 0; b < B; b++) { po[b + 1] = po[b] + np[b]; qo[b + 1] = qo[b] + nq[b]; }
  const int64_t tp = po[B], tq = qo[B];
  std::uniform_real_distribution<float> U(-1, 1);
  std::vector<float> P(tp * d), Q(tq * d);
  for (auto& v : P) v = U(rng) + offset;
  for (auto& v : Q) v = U(rng) + offset;
  if (dup) for (int64_t j = 1; j < tq; j += 2) for (int k = 0; k < d; k++) Q[j * d + k] = Q[(j - 1) * d + k];
  if (lattice) {  // integer coordinates: exact ties between neighbours in different chunks
    std::uniform_int_distribution<int> I(0, 6);
    for (auto& v : P) v = static_cast<float>(I(rng)) + 0.5f * static_cast<float>(I(rng) & 1);
    for (auto& v : Q) v = static_cast<float>(I(rng));
  }
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

  // "GPU": the binding's plan and launch sequence (native/cuda/chamfer.cc)
  const int64_t T = tp + tq;
  const maxsim_cuda::ChamferPlan plan = EmulatorPlan(po, qo, d, both);
  const int64_t cells = plan.cells();
  std::vector<float> cen(std::max<int64_t>(T, 1) * (d + 1)), centers(B * (3 * d + 2));
  std::vector<uint32_t> perm(std::max<int64_t>(T, 1)), counts(cells + 1, 0), offsets(cells + 1), sums(Blocks(cells, 1024) + 1);
  std::vector<float> boxes((plan.chunks() + plan.groups()) * 2 * d + 1);
  ChamferParams p{};
  p.p_raw = P.data(); p.q_raw = Q.data(); p.p_cen = cen.data(); p.q_cen = cen.data() + tp * (d + 1);
  p.p_off = po.data(); p.q_off = qo.data(); p.centers = centers.data(); p.extent = centers.data() + B * d;
  p.pair_x2 = reinterpret_cast<uint32_t*>(p.extent + B);
  p.bounds = p.pair_x2 + B;
  std::fill(p.bounds, p.bounds + B * d, 0xffffffffu);
  std::fill(p.bounds + B * d, p.bounds + 2 * B * d, 0u);
  p.clouds = plan.clouds.data(); p.units = plan.units.data(); p.perm = perm.data(); p.boxes = boxes.data();
  p.num_pairs = B; p.tp = tp; p.tq = tq; p.dim = d; p.bidirectional = both; p.prune = prune;
  p.num_units = plan.units.size() / 3; p.num_chunks = plan.chunks();
  std::vector<int32_t> idx(tp + tq, 12345);
  std::vector<float> dist(tp + tq, -1);
  p.idx_pq = idx.data(); p.idx_qp = idx.data() + tp; p.dist_pq = dist.data(); p.dist_qp = dist.data() + tp;
  ChamferParams sort = p;
  sort.rows = cells; sort.counts = counts.data(); sort.offsets = offsets.data(); sort.block_sums = sums.data(); sort.sources = perm.data();
  p.rows = T;
  p.offsets = offsets.data();
  Launch(chamfer_bounds, G(Blocks(T, kChamferBoundsRun * 8)), 256, p);
  Launch(chamfer_center, G(Blocks(B, 256)), 256, p);
  Launch(chamfer_cell_count, G(Blocks(T, 256)), 256, sort);
  Launch(chamfer_scan_local, G(Blocks(cells, 1024)), 1024, sort);
  Launch(chamfer_scan_sums, 1, 1024, sort);
  Launch(chamfer_scan_add, G(Blocks(cells, 1024)), 1024, sort);
  Launch(chamfer_cell_place, G(Blocks(T, 256)), 256, sort);
  Launch(chamfer_csr_sort, G(Blocks(cells, 256)), 256, sort);
  // the sort is a permutation within every cloud's own rows
  for (int64_t s = 0; s < T; s++) {
    const bool q = s >= tp;
    const int64_t i = q ? s - tp : s, g = perm[s], gi = q ? g - tp : g;
    const std::vector<int64_t>& off = q ? qo : po;
    const int64_t b = std::upper_bound(off.begin(), off.end(), i) - off.begin() - 1;
    CHECK(g < T && (g >= tp) == q && gi >= off[b] && gi < off[b + 1], "perm[%ld] = %ld outside its cloud", (long)s, (long)g);
  }
  Launch(chamfer_prep, G(Blocks(T, 256)), 256, p);
  Launch(chamfer_boxes, G(Blocks(plan.groups(), 8)), 256, p);
  void (*near[9])(const ChamferParams) = {nullptr, chamfer_nearest_d1, chamfer_nearest_d2, chamfer_nearest_d3, chamfer_nearest_d4, chamfer_nearest_d5, chamfer_nearest_d6, chamfer_nearest_d7, chamfer_nearest_d8};
  if (p.num_units > 0) Launch(near[d], G(Blocks(p.num_units, ChamferThreads(d) / 32)), ChamferThreads(d), p);
  Launch(chamfer_finalize, G(Blocks(both ? tp + tq : tp, 256)), 256, p);
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
  RunCase({3000, 700}, {2500, 1200}, 3, true, rng, 0, false, false);  // every target visited
  RunCase({2000, 333}, {1800, 900}, 3, true, rng, 0, false, true, true);  // lattice ties across chunks
  RunCase({1200}, {1500}, 2, true, rng, 0, false, true, true);
  RunCase({900}, {2100}, 5, true, rng, 1e4f, false);
  std::printf("%s (%d failures)\n", failures ? "FAILED" : "OK", failures);
  return failures != 0;
}
