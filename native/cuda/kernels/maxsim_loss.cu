// maxsim_loss.cu: the in-batch contrastive loss of a device-resident training step, on the device
// (native/cuda/train_loss.cc, RunContrastiveLoss): softmax cross-entropy over each row of the
// forward's [rows, cols] score matrix, loss = mean_i (lse_i - s[i, label_i] / tau), and its gradient
// (softmax - onehot) / (tau * rows) in float64, written where the backward reads its gradScores.
//
// The arithmetic is contrastiveLoss's (src/ops/train.ts) operation for operation, in the same order:
// s / tau as a division, the max over the row, the row sum of exp(s / tau - max) taken left to
// right, lse = max + log(sum), a second exp(s / tau - lse) per score, the scale 1 / (tau * rows), and
// the row losses summed in row order. Every +, -, *, / is an explicit round-to-nearest intrinsic, so
// nvcc cannot contract any of them into an FMA. The results equal the JS ones bit for bit wherever
// CUDA's exp / log and V8's Math.exp / Math.log (fdlibm) round alike; both are within 1 ulp of the
// exact value, so they may differ in the last bit for some arguments, and the loss and gradients with
// them (test/gpu/train-loss.test.ts measures it). Deterministic: no atomics in any sum, so repeat runs
// are bitwise identical.
//
// LAUNCH CONTRACT (MaxsimLossParams by value): maxsim_loss_rows: block (MAXSIM_LOSS_THREADS,1,1), any
// grid (blocks stride over the rows); maxsim_loss_total: grid (1,1,1), block (1,1,1), after it.
#include <math.h>
#include <stdint.h>

#include "maxsim_loss_params.h"

namespace {

constexpr int kThreads = MAXSIM_LOSS_THREADS;
constexpr int kWarps = kThreads / 32;
static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps per block");

// Math.max of two numbers: NaN when either is NaN, +0 above -0. It is associative and commutative,
// so the block's tree of it equals the sequential left-to-right fold of the JS loop.
__device__ __forceinline__ double JsMax(double a, double b) {
  if (isnan(a)) return a;
  if (isnan(b)) return b;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}

// s / tau, as the JS divides the float32 score widened to float64.
__device__ __forceinline__ double Scaled(float s, double tau) { return __ddiv_rn(static_cast<double>(s), tau); }

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads) maxsim_loss_rows(const MaxsimLossParams p) {
  __shared__ double terms[kThreads];  // one chunk of exp terms, summed in column order by thread 0
  __shared__ double warp_max[kWarps];
  __shared__ double row_max, row_lse;
  const int t = threadIdx.x;
  const int64_t cols = p.cols;
  const double tau = p.tau;
  // JS: scale = 1 / (tau * rows)
  const double scale = __ddiv_rn(1.0, __dmul_rn(tau, static_cast<double>(p.rows)));
  for (int64_t i = blockIdx.x; i < p.rows; i += gridDim.x) {
    const float* s = p.scores + i * cols;
    const int64_t label = p.labels ? p.labels[i] : i;
    // max_j s[j] / tau
    double m = -INFINITY;
    for (int64_t j = t; j < cols; j += kThreads) m = JsMax(m, Scaled(s[j], tau));
    for (int o = 16; o > 0; o >>= 1) m = JsMax(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((t & 31) == 0) warp_max[t >> 5] = m;
    __syncthreads();
    if (t == 0) {
      double r = warp_max[0];
      for (int w = 1; w < kWarps; w++) r = JsMax(r, warp_max[w]);
      row_max = r;
    }
    __syncthreads();
    const double max = row_max;
    // sum_j exp(s[j] / tau - max), added left to right: the exps of a chunk in parallel, the adds
    // by one thread in column order (a tree would round differently from the JS loop)
    double sum = 0;
    for (int64_t base = 0; base < cols; base += kThreads) {
      const int64_t j = base + t;
      if (j < cols) terms[t] = exp(__dsub_rn(Scaled(s[j], tau), max));
      __syncthreads();
      if (t == 0) {
        const int n = static_cast<int>(cols - base < kThreads ? cols - base : kThreads);
        for (int k = 0; k < n; k++) sum = __dadd_rn(sum, terms[k]);
      }
      __syncthreads();
    }
    if (t == 0) {
      const double lse = __dadd_rn(max, log(sum));
      row_lse = lse;
      const float positive = s[label];
      p.row_loss[i] = __dsub_rn(lse, Scaled(positive, tau));
      // an empty positive document: the host reports labels[i] (the lowest such row, as the JS loop)
      if (positive == -INFINITY) atomicMin(p.bad_row, static_cast<int32_t>(i < INT32_MAX ? i : INT32_MAX - 1));
    }
    __syncthreads();
    const double lse = row_lse;
    double* g = p.grad + i * cols;
    for (int64_t j = t; j < cols; j += kThreads) {
      const double prob = exp(__dsub_rn(Scaled(s[j], tau), lse));
      g[j] = __dmul_rn(__dsub_rn(prob, j == label ? 1.0 : 0.0), scale);
    }
    __syncthreads();  // the next row reuses the shared values
  }
}

// loss = (sum of the row losses in row order) / rows, as the JS total.
extern "C" __global__ void __launch_bounds__(1) maxsim_loss_total(const MaxsimLossParams p) {
  double total = 0;
  for (int64_t i = 0; i < p.rows; i++) total = __dadd_rn(total, p.row_loss[i]);
  *p.loss = __ddiv_rn(total, static_cast<double>(p.rows));
}
