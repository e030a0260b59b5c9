// Top-K selection on the device (kernels: kernels/maxsim_select.cu), for the top-K and two-stage jobs
// of native/binding/cuda_binding.cc: the `keep` best columns of every row of a score matrix that is
// already on the device, so that only they come back, or so that the next stage can start on the GPU.
// Same order as the host heaps (topk_heap.h): score descending, ties to the lower column. A row that
// holds a NaN score is flagged rather than ranked; the job selects such rows on the host instead.
#pragma once
#include <cstdint>
#include <string>

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

// The entry points of the device selection for a keep of at most max_keep (R = 64, E = 2, up to 64;
// R = 256, E = 8, beyond; a block takes 1024 E), each level reducing `chunk` entries of a row to keep.
struct SelectEntryPoints {
  int64_t max_keep, chunk;
  const char *chunks_scores, *chunks_keys, *finish_scores, *finish_keys;
  // the first level of a row longer than `chunk`: a warp streams each kSelectStreamSpan scores
  const char* stream_scores;
};
// Scores per warp of the streaming first level (maxsim_select_stream_scores_r*).
constexpr int64_t kSelectStreamSpan = 4096;
// Ascending max_keep; the last one's is the largest keep the device selection takes (its scratch keys
// take keep * 8 bytes per chunk, at most a quarter of the score matrix). The one definition of the
// limits: the addon hands them to the TypeScript plan (cuda.selectKernelInfo,
// src/backends/cuda-select-plan.ts), which chooses where each selection runs.
constexpr int kSelectEntryCount = 2;
inline constexpr SelectEntryPoints kSelectEntries[kSelectEntryCount] = {
    {64, 2048, "maxsim_select_chunks_scores_r64", "maxsim_select_chunks_keys_r64", "maxsim_select_finish_scores_r64",
     "maxsim_select_finish_keys_r64", "maxsim_select_stream_scores_r64"},
    {256, 8192, "maxsim_select_chunks_scores_r256", "maxsim_select_chunks_keys_r256", "maxsim_select_finish_scores_r256",
     "maxsim_select_finish_keys_r256", "maxsim_select_stream_scores_r256"},
};
constexpr int64_t kDeviceSelectMaxKeep = kSelectEntries[kSelectEntryCount - 1].max_keep;
// The first level's blocks (grid.x): rows * ceil(cols / chunk) at most this.
constexpr int64_t kDeviceSelectMaxBlocks = 2147483647;
// The entry points for a keep in 1 .. kDeviceSelectMaxKeep.
const SelectEntryPoints& SelectEntriesFor(int64_t keep);

// Where a job selects, chosen per selection by the TypeScript plan and passed down with the job.
enum class SelectWhere { kHost, kDevice };

// Why the device selection cannot keep `keep` of each row of a [rows, cols] matrix (keep in range,
// first-level grid and one read-back of the kept entries within limits), or "" when it can. No GPU.
std::string DeviceSelectLimitBreach(int64_t rows, int64_t cols, int64_t keep);

// Throws std::invalid_argument naming `argument` (expected 'host' for this shape, received 'device')
// when the shape breaches the limits or the runtime has not loaded the entry points.
void CheckDeviceSelect(Runtime& rt, const std::string& argument, int64_t rows, int64_t cols, int64_t keep);

// Enqueues the selection (the caller reads the outputs back, which synchronizes); the shape must pass
// CheckDeviceSelect.
void SelectOnDevice(Runtime& rt, const DeviceSelection& s);

// Enqueues out[r * keep + j] = matrix[r * matrix_cols + c] with c = columns[r * keep + j], or r * keep
// + j when columns is 0: each row's scores of its own candidates (a column of -1 gives NaN).
void GatherRowScores(Runtime& rt, cu::CUdeviceptr matrix, int64_t matrix_cols, cu::CUdeviceptr columns, int64_t rows,
                     int64_t keep, cu::CUdeviceptr out);

}  // namespace maxsim_cuda
