// Top-K selection on the device: see device_select.h and kernels/maxsim_select.cu.
#include "device_select.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/maxsim_select_params.h"

namespace maxsim_cuda {

namespace {

constexpr int64_t kChunk = MAXSIM_SELECT_CHUNK;

LaunchSpec SelectLaunch(const char* kernel, int64_t blocks) {
  LaunchSpec spec;
  spec.kernel = kernel;
  spec.grid[0] = static_cast<unsigned>(blocks);
  spec.block[0] = MAXSIM_SELECT_THREADS;
  return spec;
}

template <typename T>
T* Ptr(cu::CUdeviceptr p) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(p));
}

}  // namespace

bool DeviceSelectTakes(Runtime& rt, int64_t rows, int64_t cols, int64_t keep) {
  static_assert(kDeviceSelectMaxKeep <= MAXSIM_SELECT_MAX_KEEP, "the kernels keep at most MAXSIM_SELECT_MAX_KEEP");
  // MAXSIM_HOST_SELECT=1 (benchmarks only): every selection on the host, for A/B runs in one process
  static const bool host_only = std::getenv("MAXSIM_HOST_SELECT") != nullptr;
  if (host_only) return false;
  if (rows <= 0 || keep <= 0 || keep > kDeviceSelectMaxKeep || keep > cols) return false;
  // grid.x of the first level, and one read-back of the kept entries (columns, scores, flags)
  if (rows * ((cols + kChunk - 1) / kChunk) > 2147483647LL) return false;
  if (rows * keep * 8 + rows * 4 > static_cast<int64_t>(Runtime::kReadBackBytes)) return false;
  return rt.HasKernel("maxsim_select_finish_scores");
}

void SelectOnDevice(Runtime& rt, const DeviceSelection& s) {
  if (!DeviceSelectTakes(rt, s.rows, s.cols, s.keep)) {
    throw std::invalid_argument("Expected a shape the device selection takes but received " + std::to_string(s.rows) +
                                " rows of " + std::to_string(s.cols) + ", keep " + std::to_string(s.keep));
  }
  Check(Api().cuMemsetD32Async(s.nan_rows, 0, static_cast<size_t>(s.rows), rt.stream()), "cuMemsetD32Async");
  // Levels: each keeps the best `keep` of every chunk of 2048 until one chunk per row is left.
  std::unique_ptr<ScopedBlock> keys;  // the last level's output
  int64_t n = s.cols;
  while (n > kChunk) {
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    auto out = std::make_unique<ScopedBlock>(rt.allocator(), static_cast<uint64_t>(s.rows * chunks * s.keep) * 8);
    MaxsimSelectChunkParams p{};
    p.scores = keys ? nullptr : Ptr<const float>(s.scores);
    p.keys_in = keys ? Ptr<const unsigned long long>(keys->get()) : nullptr;
    p.keys_out = Ptr<unsigned long long>(out->get());
    p.nan_rows = Ptr<int>(s.nan_rows);
    p.cols = n;
    p.chunks = chunks;
    p.keep = static_cast<int>(s.keep);
    rt.LaunchWithParams(SelectLaunch(keys ? "maxsim_select_chunks_keys" : "maxsim_select_chunks_scores", s.rows * chunks), &p);
    keys = std::move(out);
    n = chunks * s.keep;
  }
  MaxsimSelectFinishParams f{};
  f.scores = keys ? nullptr : Ptr<const float>(s.scores);
  f.keys_in = keys ? Ptr<const unsigned long long>(keys->get()) : nullptr;
  f.nan_rows = Ptr<int>(s.nan_rows);
  f.n = n;
  f.keep = static_cast<int>(s.keep);
  f.columns = Ptr<int>(s.columns);
  if (s.picked_scores) {
    f.scores_of = Ptr<const float>(s.scores);
    f.score_cols = s.cols;
    f.picked_scores = Ptr<float>(s.picked_scores);
  }
  if (s.spans_of) {
    if (s.spans_of->count != s.cols) {
      throw std::invalid_argument("Expected " + std::to_string(s.cols) + " items in the set to take spans from but received " +
                                  std::to_string(s.spans_of->count));
    }
    f.parent_starts = Ptr<const long long>(s.spans_of->starts);
    f.parent_lengths = Ptr<const int>(s.spans_of->lengths);
    f.view_starts = Ptr<long long>(s.view_starts);
    f.view_lengths = Ptr<int>(s.view_lengths);
  }
  rt.LaunchWithParams(SelectLaunch(keys ? "maxsim_select_finish_keys" : "maxsim_select_finish_scores", s.rows), &f);
}

void GatherRowScores(Runtime& rt, cu::CUdeviceptr matrix, int64_t matrix_cols, cu::CUdeviceptr columns, int64_t rows,
                     int64_t keep, cu::CUdeviceptr out) {
  if (rows <= 0 || keep <= 0) return;
  MaxsimSelectGatherParams p{};
  p.matrix = Ptr<const float>(matrix);
  p.matrix_cols = matrix_cols;
  p.columns = columns ? Ptr<const int>(columns) : nullptr;
  p.out = Ptr<float>(out);
  p.rows = rows;
  p.keep = static_cast<int>(keep);
  LaunchSpec spec;
  spec.kernel = "maxsim_select_gather";
  spec.grid[0] = static_cast<unsigned>(std::min<int64_t>((rows * keep + 255) / 256, 65535));
  spec.block[0] = 256;
  rt.LaunchWithParams(spec, &p);
}

}  // namespace maxsim_cuda
