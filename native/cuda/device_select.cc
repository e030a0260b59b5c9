// Top-K selection on the device: see device_select.h and kernels/maxsim_select.cu.
#include "device_select.h"

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/maxsim_select_params.h"

namespace maxsim_cuda {

namespace {

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

static_assert(kDeviceSelectMaxKeep <= 256, "the widest entry points keep R = 256 (kSelectEntries)");

const SelectEntryPoints& SelectEntriesFor(int64_t keep) {
  for (const SelectEntryPoints& e : kSelectEntries) {
    if (keep <= e.max_keep) return e;
  }
  return kSelectEntries[kSelectEntryCount - 1];
}

std::string DeviceSelectLimitBreach(int64_t rows, int64_t cols, int64_t keep) {
  // the shape's words only for a refusal: every job asks twice, and a taken shape costs no strings
  const auto shape = [&] {
    return std::to_string(rows) + " rows of " + std::to_string(cols) + " columns, keep " + std::to_string(keep);
  };
  if (rows <= 0 || keep <= 0 || keep > cols) return shape() + ": keep must be in 1 .. columns and rows at least 1";
  if (keep > kDeviceSelectMaxKeep) return shape() + ": keep is past the device selection's " + std::to_string(kDeviceSelectMaxKeep);
  const SelectEntryPoints& e = SelectEntriesFor(keep);
  if (rows * ((cols + e.chunk - 1) / e.chunk) > kDeviceSelectMaxBlocks) return shape() + ": the first level's grid is past its limit";
  // one read-back of the kept entries: scores and columns, and a NaN flag per row
  if (rows * keep * 8 + rows * 4 > static_cast<int64_t>(Runtime::kReadBackBytes)) {
    return shape() + ": the kept entries are past one read-back (" + std::to_string(Runtime::kReadBackBytes) + " bytes)";
  }
  return "";
}

void CheckDeviceSelect(Runtime& rt, const std::string& argument, int64_t rows, int64_t cols, int64_t keep) {
  std::string why = DeviceSelectLimitBreach(rows, cols, keep);
  if (why.empty() && !rt.HasKernel(SelectEntriesFor(keep).finish_scores)) {
    why = std::string("the runtime has not loaded ") + SelectEntriesFor(keep).finish_scores;
  }
  if (!why.empty()) {
    throw std::invalid_argument("Expected 'host' for " + argument + " (" + why + ") but received 'device'");
  }
}

void SelectOnDevice(Runtime& rt, const DeviceSelection& s) {
  CheckDeviceSelect(rt, "the selection", s.rows, s.cols, s.keep);
  const SelectEntryPoints& k = SelectEntriesFor(s.keep);
  // Levels: each keeps the best `keep` of every chunk until one chunk per row is left (each level
  // divides the entries by chunk / keep >= 32).
  std::unique_ptr<ScopedBlock> keys;  // the last level's output
  int64_t n = s.cols;
  // A long row's first level streams (a warp per kSelectStreamSpan scores, a compare per score)
  // instead of sorting every chunk; a runtime whose fatbin predates it takes the chunk level.
  if (n > k.chunk && rt.HasKernel(k.stream_scores)) {
    const int64_t chunks = (n + kSelectStreamSpan - 1) / kSelectStreamSpan;
    constexpr int64_t warps = MAXSIM_SELECT_STREAM_THREADS / 32;
    auto out = std::make_unique<ScopedBlock>(rt.allocator(), static_cast<uint64_t>(s.rows * chunks * s.keep) * 8);
    MaxsimSelectChunkParams p{};
    p.scores = Ptr<const float>(s.scores);
    p.keys_out = Ptr<unsigned long long>(out->get());
    p.cols = n;
    p.chunks = chunks;
    p.keep = static_cast<int>(s.keep);
    LaunchSpec spec = SelectLaunch(k.stream_scores, s.rows * ((chunks + warps - 1) / warps));
    spec.block[0] = MAXSIM_SELECT_STREAM_THREADS;
    rt.LaunchWithParams(spec, &p);
    keys = std::move(out);
    n = chunks * s.keep;
  }
  while (n > k.chunk) {
    const int64_t chunks = (n + k.chunk - 1) / k.chunk;
    auto out = std::make_unique<ScopedBlock>(rt.allocator(), static_cast<uint64_t>(s.rows * chunks * s.keep) * 8);
    MaxsimSelectChunkParams p{};
    p.scores = keys ? nullptr : Ptr<const float>(s.scores);
    p.keys_in = keys ? Ptr<const unsigned long long>(keys->get()) : nullptr;
    p.keys_out = Ptr<unsigned long long>(out->get());
    p.cols = n;
    p.chunks = chunks;
    p.keep = static_cast<int>(s.keep);
    rt.LaunchWithParams(SelectLaunch(keys ? k.chunks_keys : k.chunks_scores, s.rows * chunks), &p);
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
  rt.LaunchWithParams(SelectLaunch(keys ? k.finish_keys : k.finish_scores, s.rows), &f);
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
