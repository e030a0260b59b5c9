// Training support for MaxSim on the CPU: a forward pass that keeps the argmax document token of every
// (query, document, query token) and the backward pass that routes score gradients through it.
// Plain C++ (no Node-API), like engine.h.
//
// Argmax layout: pair p (all pairs: p = i * docs.count + b; diagonal: p = i, query i with document i)
// owns argmax[p * stride + s] for query token s. Ties go to the lowest document token; a document
// without tokens scores -inf and its argmax is -1; slots past a query's length hold -1.
//
// Determinism: every output element has one owning thread and a fixed summation order, so results
// are bitwise identical for any thread count.
#pragma once
#include <cstdint>

#include "engine.h"

namespace maxsim_cpu {

enum class TrainPairs : int { All = 0, Diagonal = 1 };

// scores: [nq, nd] (All) or [nq] (Diagonal, nq == nd). argmax: pairs x stride, stride >= every query
// length. `threads` <= 0: all.
void MaxsimTrainForward(const TokenSpans& queries, const TokenSpans& docs, TrainPairs pairs, int64_t stride,
                        float* scores, int32_t* argmax, int threads);

// grad_scores has the layout of scores. dq / dd have the layout of the token buffers (fp32, one value
// per element) and must be zero on entry: only rows of real tokens are written. argmax must come from
// MaxsimTrainForward on the same inputs (entries are range-checked by the caller). Spans must not
// overlap, so that each gradient row has one owner.
void MaxsimTrainBackward(const TokenSpans& queries, const TokenSpans& docs, TrainPairs pairs, int64_t stride,
                         const int32_t* argmax, const double* grad_scores, float* dq, float* dd, int threads);

}  // namespace maxsim_cpu
