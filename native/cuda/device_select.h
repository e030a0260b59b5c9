// Top-K selection on the device (kernels: kernels/maxsim_select.cu), for the top-K and two-stage jobs
// of native/binding/cuda_binding.cc: the `keep` best columns of every row of a score matrix that is
// already on the device, so that only they come back, or so that the next stage can start on the GPU.
// Same order as the host heaps (topk_heap.h): score descending, ties to the lower column. A row that
// holds a NaN score is flagged rather than ranked; the job selects such rows on the host instead.
#pragma once
#include <cstdint>

#include "runtime.h"

namespace maxsim_cuda {

struct DeviceSelection {
  cu::CUdeviceptr scores = 0;  // [rows, cols] floats
  int64_t rows = 0, cols = 0;
  int64_t keep = 0;            // 1 .. min(cols, kDeviceSelectMaxKeep)
  cu::CUdeviceptr columns = 0;   // out: [rows * keep] int32, each row's kept columns in ascending order
  cu::CUdeviceptr nan_rows = 0;  // out: [rows] int32, 1 for a row holding a NaN (its columns are not meaningful)
  cu::CUdeviceptr picked_scores = 0;  // optional out: [rows * keep] floats, the kept columns' scores (exact bits)
  // optional: the view spans of the kept columns' items of `spans_of` ([rows * keep] int64 / int32)
  const DeviceTokens* spans_of = nullptr;
  cu::CUdeviceptr view_starts = 0, view_lengths = 0;
};

// The largest keep the device selection takes: its scratch keys take keep * 8 bytes per 2048 (keep
// <= 64) or 8192 scores, at most a quarter of the score matrix. A larger keep is selected on the host.
constexpr int64_t kDeviceSelectMaxKeep = 256;

// Where the jobs select: kAuto (default) on the device wherever DeviceSelectTakes a shape, kHost
// every selection on the host heaps (benchmarks' A/B runs, set explicitly through maxsim/internal).
// Process-wide, read at each selection, so that one process can switch between jobs.
enum class SelectPlacement { kAuto, kHost };
void SetSelectPlacement(SelectPlacement placement);
SelectPlacement GetSelectPlacement();

// Whether SelectOnDevice takes this shape on this runtime (kernels loaded, keep in range, grid and
// read-back sizes within limits, placement kAuto).
bool DeviceSelectTakes(Runtime& rt, int64_t rows, int64_t cols, int64_t keep);

// Enqueues the selection (the caller reads the outputs back, which synchronizes).
void SelectOnDevice(Runtime& rt, const DeviceSelection& s);

// Enqueues out[r * keep + j] = matrix[r * matrix_cols + c] with c = columns[r * keep + j], or r * keep
// + j when columns is 0: each row's scores of its own candidates (a column of -1 gives NaN).
void GatherRowScores(Runtime& rt, cu::CUdeviceptr matrix, int64_t matrix_cols, cu::CUdeviceptr columns, int64_t rows,
                     int64_t keep, cu::CUdeviceptr out);

}  // namespace maxsim_cuda
