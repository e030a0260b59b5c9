// Top-K jobs of the CUDA engine (engine.h): topK, twoStage and the selection of a score matrix. The
// scores stay on the worker thread, which selects them on the device (device_select.h) or reads them
// back into pinned memory and keeps a heap per query (common/topk_heap.h), wherever the job's plan
// (src/backends/cuda-select-plan.ts) chose.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

#include "../common/topk_heap.h"
#include "device_select.h"
#include "engine.h"

namespace maxsim_cuda {
namespace {

using maxsim_common::TopKHeap;

// Visits the [rows, cols] float matrix at `scores` in read-back chunks: fn(row, first column, column
// count, values), columns of each row in ascending order.
template <typename Fn>
void ForEachChunk(Runtime& rt, cu::CUdeviceptr scores, int64_t rows, int64_t cols, Fn fn) {
  const int64_t total = rows * cols;
  const int64_t chunk = static_cast<int64_t>(Runtime::kReadBackBytes / sizeof(float));
  for (int64_t at = 0; at < total; at += chunk) {
    const int64_t len = std::min(chunk, total - at);
    const auto* p = static_cast<const float*>(rt.ReadBack(scores + static_cast<uint64_t>(at) * sizeof(float), len * sizeof(float)));
    for (int64_t e = at; e < at + len;) {
      const int64_t r = e / cols, c = e % cols;
      const int64_t take = std::min(cols - c, at + len - e);
      fn(r, c, take, p + (e - at));
      e += take;
    }
  }
}

// The top-n heap of every row of a device score matrix into scores / indices [rows * n].
void SelectRows(Runtime& rt, cu::CUdeviceptr matrix, int64_t rows, int64_t cols, int64_t n, float* scores, int32_t* indices) {
  std::vector<TopKHeap> heaps;
  heaps.reserve(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; r++) heaps.emplace_back(scores + r * n, indices + r * n, n);
  ForEachChunk(rt, matrix, rows, cols, [&](int64_t r, int64_t c, int64_t len, const float* p) { heaps[r].Scan(p, len, c); });
}

// The device selection's read-back block: [rows * keep] scores, [rows * keep] int32 columns, [rows]
// int32 NaN flags, read back in one copy.
struct KeptEntries {
  KeptEntries(Runtime& rt, int64_t rows, int64_t keep)
      : rows(rows), keep(keep), block(rt.allocator(), static_cast<uint64_t>(rows * keep * 8 + rows * 4)) {}
  cu::CUdeviceptr scores() const { return block.get(); }
  cu::CUdeviceptr columns() const { return block.get() + static_cast<uint64_t>(rows * keep) * 4; }
  cu::CUdeviceptr nan_rows() const { return block.get() + static_cast<uint64_t>(rows * keep) * 8; }
  // The selection of `keep` per row of the [rows, cols] matrix at `matrix`, into this block.
  DeviceSelection SelectionOf(cu::CUdeviceptr matrix, int64_t cols) const {
    DeviceSelection s;
    s.scores = matrix;
    s.rows = rows;
    s.cols = cols;
    s.keep = keep;
    s.columns = columns();
    s.nan_rows = nan_rows();
    return s;
  }
  // Reads the block back (synchronizes): host scores / columns / flags.
  void Fetch(Runtime& rt) {
    const auto* p = static_cast<const uint8_t*>(rt.ReadBack(block.get(), static_cast<uint64_t>(rows * keep * 8 + rows * 4)));
    host_scores.resize(static_cast<size_t>(rows * keep));
    host_columns.resize(host_scores.size());
    host_nan.resize(static_cast<size_t>(rows));
    std::memcpy(host_scores.data(), p, host_scores.size() * 4);
    std::memcpy(host_columns.data(), p + rows * keep * 4, host_columns.size() * 4);
    std::memcpy(host_nan.data(), p + rows * keep * 8, host_nan.size() * 4);
  }
  bool AnyNaN() const { return std::any_of(host_nan.begin(), host_nan.end(), [](int32_t f) { return f != 0; }); }
  int64_t rows, keep;
  ScopedBlock block;
  std::vector<float> host_scores;
  std::vector<int32_t> host_columns, host_nan;
};

// JobOptions::time_phases: synchronizes at each phase boundary and appends the phase's wall time to
// `line` (a no-op otherwise).
class JobPhases {
 public:
  JobPhases(Runtime& rt, bool on, std::string* line) : rt_(rt), on_(on), line_(line) {}
  void Mark(const char* phase) {
    if (!on_) return;
    rt_.Synchronize();
    const auto now = std::chrono::steady_clock::now();
    *line_ += std::string(line_->empty() ? "" : " ") + phase + " " +
              std::to_string(std::chrono::duration<double, std::milli>(now - last_).count());
    last_ = now;
  }

 private:
  Runtime& rt_;
  bool on_;
  std::string* line_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// SelectRows with the selection on the device: only the n kept entries of each row come back (in
// ascending column order, which sortedHits ranks as it ranks a heap). A row holding a NaN score goes
// through the host heap instead, from the matrix still on the device, so every row gets the host's
// result. The caller has checked the shape (CheckDeviceSelect).
void SelectRowsOnDevice(Runtime& rt, cu::CUdeviceptr matrix, int64_t rows, int64_t cols, int64_t n, float* scores,
                        int32_t* indices, JobPhases* phases) {
  KeptEntries kept(rt, rows, n);
  DeviceSelection s = kept.SelectionOf(matrix, cols);
  s.picked_scores = kept.scores();
  SelectOnDevice(rt, s);
  if (phases) phases->Mark("selectKernel");
  kept.Fetch(rt);
  std::memcpy(scores, kept.host_scores.data(), kept.host_scores.size() * 4);
  std::memcpy(indices, kept.host_columns.data(), kept.host_columns.size() * 4);
  for (int64_t r = 0; r < rows; r++) {
    if (kept.host_nan[r] != 0) {
      SelectRows(rt, matrix + static_cast<uint64_t>(r * cols) * sizeof(float), 1, cols, n, scores + r * n, indices + r * n);
    }
  }
}

// The rows' top-n heaps, selected where the plan chose (a 'device' choice outside the device
// selection's limits is refused, naming `argument`).
void SelectRowsWhere(Runtime& rt, SelectWhere where, const char* argument, cu::CUdeviceptr matrix, int64_t rows, int64_t cols,
                     int64_t n, float* scores, int32_t* indices, JobPhases* phases = nullptr) {
  if (where == SelectWhere::kDevice) {
    CheckDeviceSelect(rt, argument, rows, cols, n);
    SelectRowsOnDevice(rt, matrix, rows, cols, n, scores, indices, phases);
  } else {
    SelectRows(rt, matrix, rows, cols, n, scores, indices);
  }
}

// Sizes h for `rows` heaps of n = min(k, cols).
void Shape(Heaps& h, int64_t rows, int64_t k, int64_t cols) {
  h.n = std::min(k, cols);
  h.scores.resize(static_cast<size_t>(rows * h.n));
  h.indices.resize(h.scores.size());
}

// `count` items of t from item `first` on, for one launch: the same tokens, its spans from there. It
// owns nothing (no runtime: its destructor frees nothing) and must not outlive t.
DeviceTokens Window(const DeviceTokens& t, int64_t first, int64_t count) {
  DeviceTokens w;
  w.dtype = t.dtype;
  w.e4m3 = t.e4m3;
  w.dim = t.dim;
  w.data = t.data;
  w.scales = t.scales;
  w.tokens = w.capacity_tokens = t.tokens;
  w.count = w.capacity_items = count;
  w.max_length = t.max_length;
  w.starts = t.starts + static_cast<uint64_t>(first) * sizeof(int64_t);
  w.lengths = t.lengths + static_cast<uint64_t>(first) * sizeof(int32_t);
  return w;
}

// Stage 2 of TwoStage with the candidates selected on the device: nothing comes back between the
// stages; the GPU also writes the view's spans (each query's candidates in turn), and only each
// query's own exact scores come back. The queries go in groups of job.exact_group, each scored against
// its own queries' candidates (or the whole of exact_docs when that is no more), then each query's own
// scores are gathered from its group's block. False when a scan row held a NaN (nothing kept).
bool StagesOnDevice(Runtime& rt, TwoStageJob& job, const DeviceTokens& qe, cu::CUdeviceptr scan, int64_t rows, int64_t keep,
                    JobPhases& phases, Heaps& h) {
  const int64_t count = job.count;
  const int64_t group = job.exact_group > 0 ? std::min(job.exact_group, rows) : rows;
  const bool whole = group * keep >= count;  // the launch was planned for min(count, group * keep) documents
  std::shared_ptr<DeviceTokens> view = whole ? job.exact_docs : ViewShell(rt, job.exact_docs, rows * keep);
  KeptEntries kept(rt, rows, keep);
  DeviceSelection s = kept.SelectionOf(scan, count);
  if (!whole) {
    s.spans_of = job.exact_docs.get();
    s.view_starts = view->starts;
    s.view_lengths = view->lengths;
  }
  SelectOnDevice(rt, s);
  phases.Mark("scanSelect");
  // group g's block: its rows x its view's documents, row-major, at g's first row x the widest view
  const int64_t width = whole ? count : group * keep;
  ScopedBlock out(rt.allocator(), static_cast<uint64_t>(rows * width) * sizeof(float));
  rt.FillNaN(out.get(), static_cast<uint64_t>(rows * width));
  for (int64_t first = 0; first < rows; first += group) {
    const int64_t n = std::min(group, rows - first);
    const DeviceTokens queries = Window(qe, first, n);
    const DeviceTokens docs = whole ? Window(*view, 0, count) : Window(*view, first * keep, n * keep);
    const cu::CUdeviceptr block = out.get() + static_cast<uint64_t>(first * width) * sizeof(float);
    rt.Launch(queries, docs, job.exact_launch, block);
    // row r's own candidates: columns (r - first) * keep + j of its group's view, or their document
    // indices of exact_docs
    GatherRowScores(rt, block, docs.count, whole ? kept.columns() + static_cast<uint64_t>(first * keep) * 4 : 0, n, keep,
                    kept.scores() + static_cast<uint64_t>(first * keep) * 4);
  }
  phases.Mark("exact");
  kept.Fetch(rt);
  if (kept.AnyNaN()) return false;
  for (int64_t r = 0; r < rows; r++) {
    TopKHeap heap(h.scores.data() + r * h.n, h.indices.data() + r * h.n, h.n);
    for (int64_t j = 0; j < keep; j++) heap.Push(kept.host_scores[r * keep + j], kept.host_columns[r * keep + j]);
  }
  phases.Mark("exactSelect");
  return true;
}

// Stage 2 of TwoStage with the candidates selected by the host heaps (the plan chose the host, or a
// scan row held a NaN): per group of job.exact_group queries (all of them where the host was planned)
// a view holds the union of the group's candidates, its spans from the host mirror, and the union is
// rescored (at most group x keep documents: what exact_launch was planned for).
void StagesOnHost(Runtime& rt, TwoStageJob& job, const DeviceTokens& qe, cu::CUdeviceptr scan, int64_t rows, int64_t keep,
                  JobPhases& phases, Heaps& h) {
  const int64_t count = job.count, n = h.n;
  const int64_t group = job.exact_group > 0 ? std::min(job.exact_group, rows) : rows;
  std::vector<float> cand_scores(static_cast<size_t>(rows * keep));  // the heap order does not matter here
  std::vector<int32_t> cand(cand_scores.size());
  SelectRows(rt, scan, rows, count, keep, cand_scores.data(), cand.data());
  phases.Mark("scanSelect");
  for (int64_t r = 0; r < rows; r++) std::sort(cand.begin() + r * keep, cand.begin() + (r + 1) * keep);
  std::vector<TopKHeap> heaps;
  heaps.reserve(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; r++) heaps.emplace_back(h.scores.data() + r * n, h.indices.data() + r * n, n);
  for (int64_t first = 0; first < rows; first += group) {
    const int64_t g = std::min(group, rows - first);
    const auto from = cand.begin() + first * keep, to = from + g * keep;
    std::vector<int32_t> all(from, to);
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    const int64_t u = static_cast<int64_t>(all.size());
    std::vector<int64_t> column(static_cast<size_t>(g * keep));  // each candidate's column in the union
    for (int64_t j = 0; j < g * keep; j++) column[j] = std::lower_bound(all.begin(), all.end(), from[j]) - all.begin();
    std::shared_ptr<DeviceTokens> view = Select(rt, job.exact_docs, std::vector<int64_t>(all.begin(), all.end()));
    ScopedBlock out(rt.allocator(), static_cast<uint64_t>(g * u) * sizeof(float));
    rt.FillNaN(out.get(), static_cast<uint64_t>(g * u));
    rt.Launch(Window(qe, first, g), *view, job.exact_launch, out.get());
    std::vector<int64_t> next(static_cast<size_t>(g), 0);  // per row: its first candidate not pushed yet
    ForEachChunk(rt, out.get(), g, u, [&](int64_t r, int64_t c, int64_t len, const float* p) {
      const int64_t* col = column.data() + r * keep;
      int64_t& j = next[r];
      for (; j < keep && col[j] < c + len; j++) heaps[first + r].Push(p[col[j] - c], from[r * keep + j]);
    });
  }
  phases.Mark("exact");
}

}  // namespace

Heaps TopK(Runtime& rt, QuerySource& queries, const DeviceTokens& docs, const LaunchSpec& launch, int64_t k,
           SelectWhere select, const JobOptions& options) {
  rt.EnsureReady();
  IdleAtExit idle(rt);
  JobScratch scratch(rt);
  rt.ValidateLaunch(launch);
  Heaps h;
  JobPhases phases(rt, options.time_phases, &h.phases);
  // The job waits on the GPU once, at the read-back (or below, for a job with nothing to select);
  // the queries' deferred checks are judged after it.
  // a small matrix selected on the host is written by the kernel straight into pinned host memory
  // (UseMappedScores); a host batch's shape is known before its upload, so its fill is not folded then
  const bool host_select = select == SelectWhere::kHost;
  if (!queries.is_host || !host_select || !UseMappedScores(rt, options, queries.count, docs.count, MaxQueryLength(queries))) {
    scratch.fold_fill = static_cast<uint64_t>(queries.count) * static_cast<uint64_t>(docs.count);
  }
  std::shared_ptr<DeviceTokens> q = ResolveQueries(rt, queries, docs, scratch);
  phases.Mark("queries");
  const int64_t rows = q->count, cols = docs.count;
  Shape(h, rows, k, cols);
  if (rows == 0 || h.n == 0) {
    rt.Synchronize();
    scratch.CheckDeferred();
    idle.Idle();
    return h;
  }
  if (host_select && UseMappedScores(rt, options, rows, cols, q->max_length)) {
    const float* m = MappedNaNScores(rt, static_cast<uint64_t>(rows * cols));
    phases.Mark("fill");
    rt.Launch(*q, docs, launch, MappedPtr(m));
    rt.Synchronize();
    phases.Mark("scan");
    scratch.CheckDeferred();
    // the heaps of SelectRows, over the same values in the same order
    for (int64_t r = 0; r < rows; r++) {
      TopKHeap(h.scores.data() + r * h.n, h.indices.data() + r * h.n, h.n).Scan(m + r * cols, cols, 0);
    }
    phases.Mark("select");
    idle.Idle();
    return h;
  }
  const cu::CUdeviceptr out = scratch.NaNMatrix(static_cast<uint64_t>(rows * cols));
  phases.Mark("fill");
  rt.Launch(*q, docs, launch, out);
  phases.Mark("scan");
  SelectRowsWhere(rt, select, "select", out, rows, cols, h.n, h.scores.data(), h.indices.data(), &phases);
  scratch.CheckDeferred();
  phases.Mark(select == SelectWhere::kDevice ? "readBack" : "select");
  idle.Idle();  // the read-back synchronized; nothing was enqueued after it
  return h;
}

Heaps TwoStage(Runtime& rt, TwoStageJob& job, const JobOptions& options) {
  rt.EnsureReady();
  IdleAtExit idle(rt);
  rt.ValidateLaunch(job.scan_launch);
  rt.ValidateLaunch(job.exact_launch);
  const int64_t count = job.count;
  if (job.scan_docs->count != count || job.exact_docs->count != count) {
    throw std::invalid_argument("Expected " + std::to_string(count) +
                                " documents in scanDocs and exactDocs (the count the launches were planned for) but received " +
                                std::to_string(job.scan_docs->count) + " and " + std::to_string(job.exact_docs->count));
  }
  JobScratch scratch(rt);
  Heaps h;
  JobPhases phases(rt, options.time_phases, &h.phases);
  std::shared_ptr<DeviceTokens> q = ResolveQueries(rt, job.scan_queries, *job.scan_docs, scratch);
  // Both query sets go up before the scan, so the exact ones are not on the path after it.
  std::shared_ptr<DeviceTokens> qe = ResolveQueries(rt, job.exact_queries, *job.exact_docs, scratch);
  phases.Mark("queries");
  const int64_t rows = q->count;
  const int64_t keep = std::min(job.candidates, count);
  Shape(h, rows, job.k, keep);
  if (rows == 0 || h.n == 0) {
    rt.Synchronize();
    scratch.CheckDeferred();
    return h;
  }
  if (qe->count != rows) {
    throw std::invalid_argument("Expected " + std::to_string(rows) + " exact queries (as scan queries) but received " +
                                std::to_string(qe->count));
  }

  // Stage 1: the scan.
  ScopedBlock scan(rt.allocator(), static_cast<uint64_t>(rows * count) * sizeof(float));
  rt.FillNaN(scan.get(), static_cast<uint64_t>(rows * count));
  rt.Launch(*q, *job.scan_docs, job.scan_launch, scan.get());
  phases.Mark("scan");
  if (job.select == SelectWhere::kDevice) {
    CheckDeviceSelect(rt, "spec.select", rows, count, keep);
    if (StagesOnDevice(rt, job, *qe, scan.get(), rows, keep, phases, h)) {
      scratch.CheckDeferred();  // both stages end with a read-back (synchronized)
      return h;
    }
  }
  StagesOnHost(rt, job, *qe, scan.get(), rows, keep, phases, h);
  scratch.CheckDeferred();
  return h;
}

Heaps SelectMatrix(Runtime& rt, const std::vector<float>& matrix, int64_t rows, int64_t cols, int64_t k, SelectWhere select) {
  rt.EnsureReady();
  IdleAtExit idle(rt);
  Heaps h;
  Shape(h, rows, k, cols);
  if (rows == 0 || h.n == 0) return h;
  ScopedBlock m(rt.allocator(), matrix.size() * sizeof(float));
  rt.Upload(m.get(), matrix.data(), matrix.size() * sizeof(float));
  SelectRowsWhere(rt, select, "select", m.get(), rows, cols, h.n, h.scores.data(), h.indices.data());
  h.on_device = select == SelectWhere::kDevice;
  return h;
}

Heaps HostTopK(const float* matrix, int64_t rows, int64_t cols, int64_t k) {
  Heaps h;
  Shape(h, rows, k, cols);
  for (int64_t r = 0; r < rows; r++) TopKHeap(h.scores.data() + r * h.n, h.indices.data() + r * h.n, h.n).Scan(matrix + r * cols, cols, 0);
  return h;
}

}  // namespace maxsim_cuda
