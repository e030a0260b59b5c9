#include "chamfer.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/maxsim_chamfer_params.h"

namespace maxsim_cuda {

namespace {

constexpr int64_t kMaxGrid = int64_t(1) << 20;

template <typename P>
P* DevPtr(cu::CUdeviceptr p) {
  return reinterpret_cast<P*>(static_cast<uintptr_t>(p));
}

int64_t Blocks(int64_t n, int64_t per) { return std::max<int64_t>(1, (n + per - 1) / per); }

void Launch(Runtime& rt, const std::string& kernel, int64_t blocks, unsigned threads, const ChamferParams& p) {
  if (blocks <= 0) return;
  LaunchSpec spec;
  spec.kernel = kernel;
  spec.grid[0] = static_cast<unsigned>(std::min(blocks, kMaxGrid));
  spec.block[0] = threads;
  rt.LaunchWithParams(spec, &p);
}

void Zero(Runtime& rt, cu::CUdeviceptr ptr, uint64_t words) {
  if (words > 0) Check(Api().cuMemsetD32Async(ptr, 0u, words, rt.stream()), "cuMemsetD32Async");
}

std::unique_ptr<ScopedBlock> Block(Runtime& rt, uint64_t bytes) {
  return std::make_unique<ScopedBlock>(rt.allocator(), std::max<uint64_t>(bytes, 16));
}

// Device time between two events recorded around a pass's kernels on the runtime's stream.
class PassTimer {
 public:
  explicit PassTimer(Runtime& rt) : rt_(rt) {
    Check(Api().cuEventCreate(&start_, cu::CU_EVENT_DEFAULT), "cuEventCreate");
    Check(Api().cuEventCreate(&end_, cu::CU_EVENT_DEFAULT), "cuEventCreate");
    Check(Api().cuEventRecord(start_, rt_.stream()), "cuEventRecord");
  }
  // Records the end, waits for it, returns the milliseconds.
  double Stop() {
    Check(Api().cuEventRecord(end_, rt_.stream()), "cuEventRecord");
    Check(Api().cuEventSynchronize(end_), "cuEventSynchronize");
    float ms = 0;
    Check(Api().cuEventElapsedTime(&ms, start_, end_), "cuEventElapsedTime");
    return ms;
  }
  ~PassTimer() {
    Api().cuEventDestroy(start_);
    Api().cuEventDestroy(end_);
  }

 private:
  Runtime& rt_;
  cu::CUevent start_ = nullptr, end_ = nullptr;
};

}  // namespace

ChamferSession::ChamferSession(Runtime& rt, const ChamferClouds& c)
    : rt_(rt), pairs_(c.pairs()), tp_(c.tp()), tq_(c.tq()), dim_(c.dim), p_off_(c.p_off), q_off_(c.q_off) {
  if (tp_ + tq_ >= (int64_t(1) << 32) - 1) {
    throw std::invalid_argument("Expected fewer than 2^32 points in all (the CSR indexes them in 32 bits) but received " +
                                std::to_string(tp_ + tq_));
  }
  const uint64_t T = static_cast<uint64_t>(tp_ + tq_);
  Allocator& a = rt_.allocator();
  try {
    raw_ = a.Alloc(std::max<uint64_t>(T * dim_ * sizeof(float), 16));
    off_ = a.Alloc(2 * (pairs_ + 1) * sizeof(int64_t));
    idx_ = a.Alloc(std::max<uint64_t>(T * sizeof(int32_t), 16));
    dist_ = a.Alloc(std::max<uint64_t>(T * sizeof(float), 16));
    rt_.Upload(raw_, c.p, static_cast<uint64_t>(tp_ * dim_) * sizeof(float));
    rt_.Upload(raw_ + static_cast<uint64_t>(tp_ * dim_) * sizeof(float), c.q, static_cast<uint64_t>(tq_ * dim_) * sizeof(float));
    rt_.Upload(off_, p_off_.data(), (pairs_ + 1) * sizeof(int64_t));
    rt_.Upload(off_ + (pairs_ + 1) * sizeof(int64_t), q_off_.data(), (pairs_ + 1) * sizeof(int64_t));
  } catch (...) {  // no destructor runs for a constructor that throws
    for (cu::CUdeviceptr b : {raw_, off_, idx_, dist_}) a.Free(b);
    throw;
  }
}

ChamferSession::~ChamferSession() {
  Runtime* rt = &rt_;
  rt->Post([rt, blocks = std::vector<cu::CUdeviceptr>{raw_, off_, cen_, centers_, idx_, dist_}] {
    for (cu::CUdeviceptr b : blocks) rt->allocator().Free(b);  // Free(0) is a no-op
  });
}

ChamferTiming ChamferSession::Forward(const ChamferPlan& plan, bool both, int32_t* idx_pq, float* dist_pq, int32_t* idx_qp,
                                      float* dist_qp, bool prune) {
  ChamferTiming timing;
  has_argmin_ = false;
  CheckChamferPlan(plan, p_off_, q_off_, dim_, both);
  if (pairs_ == 0) return timing;
  const uint64_t T = static_cast<uint64_t>(tp_ + tq_);
  if (!cen_) {
    cen_ = rt_.allocator().Alloc(std::max<uint64_t>(T * (dim_ + 1) * sizeof(float), 16));
    // centres [B, d], extents [B], pair_x2 [B], bounds [B, 2, d]
    centers_ = rt_.allocator().Alloc(std::max<uint64_t>(pairs_ * (3 * dim_ + 2) * sizeof(float), 16));
  }
  const int64_t cells = plan.cells();
  // One upload for the plan's tables; the cell sort's CSR and the boxes in blocks of their own
  auto tables = Block(rt_, (plan.clouds.size() + plan.units.size()) * sizeof(int64_t));
  rt_.Upload(tables->get(), plan.clouds.data(), plan.clouds.size() * sizeof(int64_t));
  rt_.Upload(tables->get() + plan.clouds.size() * sizeof(int64_t), plan.units.data(), plan.units.size() * sizeof(int64_t));
  auto perm = Block(rt_, T * sizeof(uint32_t));
  auto boxes = Block(rt_, static_cast<uint64_t>(plan.chunks() + plan.groups()) * 2 * dim_ * sizeof(float));
  auto counts = Block(rt_, static_cast<uint64_t>(cells) * 4);
  auto offsets = Block(rt_, static_cast<uint64_t>(cells + 1) * 4);
  auto sums = Block(rt_, static_cast<uint64_t>(Blocks(cells, 1024)) * 4);

  ChamferParams p{};
  p.p_raw = DevPtr<const float>(raw_);
  p.q_raw = p.p_raw + tp_ * dim_;
  p.p_cen = DevPtr<float>(cen_);
  p.q_cen = p.p_cen + tp_ * (dim_ + 1);
  p.p_off = DevPtr<const int64_t>(off_);
  p.q_off = p.p_off + pairs_ + 1;
  p.centers = DevPtr<float>(centers_);
  p.extent = p.centers + pairs_ * dim_;
  p.pair_x2 = reinterpret_cast<uint32_t*>(p.extent + pairs_);
  p.bounds = p.pair_x2 + pairs_;
  p.clouds = DevPtr<const int64_t>(tables->get());
  p.units = p.clouds + plan.clouds.size();
  p.perm = DevPtr<uint32_t>(perm->get());
  p.boxes = DevPtr<float>(boxes->get());
  p.idx_pq = DevPtr<int32_t>(idx_);
  p.idx_qp = p.idx_pq + tp_;
  p.dist_pq = DevPtr<float>(dist_);
  p.dist_qp = p.dist_pq + tp_;
  p.num_pairs = pairs_;
  p.tp = tp_;
  p.tq = tq_;
  p.num_units = static_cast<int64_t>(plan.units.size() / 3);
  p.num_chunks = plan.chunks();
  p.dim = static_cast<int32_t>(dim_);
  p.bidirectional = both ? 1 : 0;
  p.prune = prune ? 1 : 0;
  // The cell sort's view: a CSR over cells whose entries are the rows, in perm
  ChamferParams sort = p;
  sort.rows = cells;
  sort.counts = DevPtr<uint32_t>(counts->get());
  sort.offsets = DevPtr<uint32_t>(offsets->get());
  sort.block_sums = DevPtr<uint32_t>(sums->get());
  sort.sources = p.perm;
  p.rows = tp_ + tq_;
  p.offsets = sort.offsets;  // the nearest-neighbour kernel seeds its search from the cells' offsets

  const int d = static_cast<int>(dim_);
  const int64_t warps_per_block = ChamferThreads(d) / 32;
  PassTimer timer(rt_);
  const cu::CUdeviceptr bounds = reinterpret_cast<uintptr_t>(p.bounds);
  const uint64_t keys = static_cast<uint64_t>(pairs_ * dim_);
  Check(Api().cuMemsetD32Async(bounds, 0xffffffffu, keys, rt_.stream()), "cuMemsetD32Async");  // lo keys: the top
  Zero(rt_, bounds + keys * 4, keys);                                                             // hi keys: the bottom
  Launch(rt_, "chamfer_bounds", Blocks(tp_ + tq_, kChamferBoundsRun * 8), 256, p);  // 8 warps a block
  Launch(rt_, "chamfer_center", Blocks(pairs_, 256), 256, p);
  Zero(rt_, counts->get(), static_cast<uint64_t>(cells));
  Launch(rt_, "chamfer_cell_count", Blocks(tp_ + tq_, 256), 256, sort);
  Launch(rt_, "chamfer_scan_local", Blocks(cells, 1024), 1024, sort);
  Launch(rt_, "chamfer_scan_sums", 1, 1024, sort);
  Launch(rt_, "chamfer_scan_add", Blocks(cells, 1024), 1024, sort);
  Launch(rt_, "chamfer_cell_place", Blocks(tp_ + tq_, 256), 256, sort);
  Launch(rt_, "chamfer_csr_sort", Blocks(cells, 256), 256, sort);
  Launch(rt_, "chamfer_prep", Blocks(tp_ + tq_, 256), 256, p);
  Launch(rt_, "chamfer_boxes", Blocks(plan.groups(), 256 / 32), 256, p);
  Launch(rt_, "chamfer_nearest_d" + std::to_string(dim_), Blocks(p.num_units, warps_per_block), ChamferThreads(d), p);
  Launch(rt_, "chamfer_finalize", Blocks(both ? tp_ + tq_ : tp_, 256), 256, p);
  timing.kernel_ms = timer.Stop();
  rt_.Download(idx_pq, idx_, static_cast<uint64_t>(tp_) * 4);
  rt_.Download(dist_pq, dist_, static_cast<uint64_t>(tp_) * 4);
  if (both) {
    rt_.Download(idx_qp, idx_ + static_cast<uint64_t>(tp_) * 4, static_cast<uint64_t>(tq_) * 4);
    rt_.Download(dist_qp, dist_ + static_cast<uint64_t>(tp_) * 4, static_cast<uint64_t>(tq_) * 4);
  }
  has_argmin_ = true;
  both_ = both;
  return timing;
}

ChamferTiming ChamferSession::Backward(const double* w, bool atomic, float* grads) {
  ChamferTiming timing;
  if (!has_argmin_) throw std::logic_error("chamfer backward before its forward pass");
  if (pairs_ == 0) return timing;
  const int64_t rows = tp_ + tq_;
  const int64_t sources = both_ ? rows : tp_;
  ChamferParams p{};
  p.p_raw = DevPtr<const float>(raw_);
  p.q_raw = p.p_raw + tp_ * dim_;
  p.p_off = DevPtr<const int64_t>(off_);
  p.q_off = p.p_off + pairs_ + 1;
  p.idx_pq = DevPtr<int32_t>(idx_);
  p.idx_qp = p.idx_pq + tp_;
  p.num_pairs = pairs_;
  p.tp = tp_;
  p.tq = tq_;
  p.rows = rows;
  p.dim = static_cast<int32_t>(dim_);
  p.bidirectional = both_ ? 1 : 0;
  auto w_dev = Block(rt_, static_cast<uint64_t>(rows) * 8);
  auto g_dev = Block(rt_, static_cast<uint64_t>(rows * dim_) * 4);
  rt_.Upload(w_dev->get(), w, static_cast<uint64_t>(sources) * 8);
  p.w_p = DevPtr<const double>(w_dev->get());
  p.w_q = p.w_p + tp_;
  p.dp = DevPtr<float>(g_dev->get());
  p.dq = p.dp + tp_ * dim_;
  std::unique_ptr<ScopedBlock> counts, offsets, sums, list;
  PassTimer timer(rt_);
  if (atomic) {
    Zero(rt_, g_dev->get(), static_cast<uint64_t>(rows * dim_));
    Launch(rt_, "chamfer_grad_atomic", Blocks(sources, 256), 256, p);
  } else {
    const int64_t scan_blocks = Blocks(rows, 1024);
    counts = Block(rt_, static_cast<uint64_t>(rows) * 4);
    offsets = Block(rt_, static_cast<uint64_t>(rows + 1) * 4);
    sums = Block(rt_, static_cast<uint64_t>(scan_blocks) * 4);
    list = Block(rt_, static_cast<uint64_t>(sources) * 4);
    p.counts = DevPtr<uint32_t>(counts->get());
    p.offsets = DevPtr<uint32_t>(offsets->get());
    p.block_sums = DevPtr<uint32_t>(sums->get());
    p.sources = DevPtr<uint32_t>(list->get());
    Zero(rt_, counts->get(), static_cast<uint64_t>(rows));
    Launch(rt_, "chamfer_csr_count", Blocks(sources, 256), 256, p);
    Launch(rt_, "chamfer_scan_local", scan_blocks, 1024, p);
    Launch(rt_, "chamfer_scan_sums", 1, 1024, p);
    Launch(rt_, "chamfer_scan_add", scan_blocks, 1024, p);
    Launch(rt_, "chamfer_csr_fill", Blocks(sources, 256), 256, p);
    Launch(rt_, "chamfer_csr_sort", Blocks(rows, 256), 256, p);
    Launch(rt_, "chamfer_grad", Blocks(rows, 256), 256, p);
  }
  timing.kernel_ms = timer.Stop();
  rt_.Download(grads, g_dev->get(), static_cast<uint64_t>(rows * dim_) * 4);
  return timing;
}

}  // namespace maxsim_cuda
