// The argument blocks of the top-K selection kernels (native/cuda/kernels/maxsim_select.cu), by value.
// Shared by the kernels (nvcc) and the runtime side that launches them (native/cuda/device_select.cc,
// g++): fixed-width plain types only.
#pragma once

// Threads of a selection block (32 warps). Each warp holds R = 32 E keys, so a block takes 1024 E keys
// and keeps at most R: the entry points come in R = 64 (E = 2) and R = 256 (E = 8).
#define MAXSIM_SELECT_THREADS 1024
// Threads of a streaming first-level block (select_stream): a chunk per warp.
#define MAXSIM_SELECT_STREAM_THREADS 256

// One level of the selection: block b reads chunk (b % chunks) of row (b / chunks) of the input and
// writes that chunk's `keep` best keys, best first, to keys_out [rows * chunks * keep] (0 pads a
// chunk with fewer entries). A key is (order-preserving bits of the score) << 32 | (0xffffffff -
// column): larger is better, ties to the lower column, +0 and -0 equal; a NaN score is ~0.
struct MaxsimSelectChunkParams {
  const float* scores;               // level 0: [rows, cols] scores (else null)
  const unsigned long long* keys_in; // later levels: [rows, cols] keys (else null)
  unsigned long long* keys_out;
  long long cols;                    // entries per row of the input
  long long chunks;                  // chunks per row
  int keep;
  int pad_;
};
static_assert(sizeof(MaxsimSelectChunkParams) == 48, "MaxsimSelectChunkParams layout changed: update both sides");

// The last level: block r reduces row r's n <= 1024 E entries (scores or keys, as above), sets
// nan_rows[r] (1 when the row holds a NaN score, else 0) and writes the columns of its `keep` best in
// ascending column order to columns [rows * keep] (-1 throughout a NaN row).
// Optional outputs (null when unused), per kept entry: its score read back from `scores_of` [rows,
// score_cols] (the exact bits, -0 included), and the spans of that column's item in a token set
// (parent_starts / parent_lengths into view_starts / view_lengths: a view of the candidates).
struct MaxsimSelectFinishParams {
  const float* scores;
  const unsigned long long* keys_in;
  int* nan_rows;
  long long n;
  int keep;
  int pad_;
  int* columns;
  const float* scores_of;
  long long score_cols;
  float* picked_scores;
  const long long* parent_starts;
  const int* parent_lengths;
  long long* view_starts;
  int* view_lengths;
};
static_assert(sizeof(MaxsimSelectFinishParams) == 104, "MaxsimSelectFinishParams layout changed: update both sides");

// out[r * keep + j] = matrix[r * matrix_cols + c], c = columns[r * keep + j] (or r * keep + j when
// columns is null): each row's scores of its own candidates, out of the exact stage's matrix.
struct MaxsimSelectGatherParams {
  const float* matrix;
  long long matrix_cols;
  const int* columns;
  float* out;
  long long rows;
  int keep;
  int pad_;
};
static_assert(sizeof(MaxsimSelectGatherParams) == 48, "MaxsimSelectGatherParams layout changed: update both sides");
