// The argument block of the contrastive-loss kernels (native/cuda/kernels/maxsim_loss.cu), by value.
// Shared by the kernels (nvcc) and the training engine that launches them (g++, native/cuda/
// train_loss.cc): fixed-width plain types only.
#pragma once
#include <stdint.h>

// Threads per block of maxsim_loss_rows (one block per score row; the columns are taken this many at
// a time). maxsim_loss_total runs as one block of one thread.
#define MAXSIM_LOSS_THREADS 256

struct MaxsimLossParams {
  const float* scores;    // [rows, cols] row-major: the forward's scores of every query with every document
  const int32_t* labels;  // [rows] positive document per row, each in [0, cols); null: row i's is column i
  double* grad;           // [rows, cols] out: d loss / d scores (the backward's gradScores)
  double* row_loss;       // [rows] out: lse_i - s[i, label_i] / tau
  double* loss;           // [1] out (maxsim_loss_total): the sum of row_loss in row order / rows
  int32_t* bad_row;       // [1] in: INT32_MAX; out: the lowest row whose positive scores -inf (an empty document)
  int64_t rows;
  int64_t cols;
  double tau;  // temperature > 0
};
static_assert(sizeof(MaxsimLossParams) == 72, "MaxsimLossParams layout changed: update both sides");
