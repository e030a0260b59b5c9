#include "train.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "kernels_impl.h"
#include "thread_pool.h"

namespace maxsim_cpu {

namespace {

// Document tokens per transposed chunk: a [d][kChunk] fp32 block stays in L1/L2 while every query
// token of the pair sweeps it. k-major, so the loop over tokens vectorizes without reassociating any
// sum: each dot product accumulates over k in order, whichever tile computes it.
constexpr int64_t kChunk = 64;
// Register tile: kRows query tokens x kTile chunk tokens of dot products stay in registers across all
// of d (8 SSE accumulators on the baseline x86-64 build), so each loaded chunk column feeds kRows
// multiply-adds instead of one load-add-store round trip.
constexpr int kRows = 4;
constexpr int64_t kTile = 8;

// One token row of any float dtype, decoded to fp32.
void DecodeRow(const TokenSpans& s, int64_t row, float* out) {
  const int64_t d = s.dim;
  const int64_t base = row * d;
  switch (s.dtype) {
    case DocType::Float32: {
      const float* src = static_cast<const float*>(s.data) + base;
      std::copy(src, src + d, out);
      return;
    }
    case DocType::Float16: {
      const uint16_t* src = static_cast<const uint16_t*>(s.data) + base;
      for (int64_t k = 0; k < d; k++) out[k] = HalfToFloat(src[k]);
      return;
    }
    case DocType::BFloat16: {
      const uint16_t* src = static_cast<const uint16_t*>(s.data) + base;
      for (int64_t k = 0; k < d; k++) out[k] = Bf16ToFloat(src[k]);
      return;
    }
  }
}

// Every item's real tokens decoded to fp32, items back to back; item i starts at row first_row[i].
struct DecodedItems {
  std::vector<float> values;
  std::vector<int64_t> first_row;
  int64_t rows = 0;
};

DecodedItems Decode(const TokenSpans& s) {
  DecodedItems out;
  out.first_row.resize(static_cast<size_t>(s.count));
  for (int64_t i = 0; i < s.count; i++) {
    out.first_row[i] = out.rows;
    out.rows += s.lengths[i];
  }
  out.values.resize(static_cast<size_t>(out.rows * s.dim));
  for (int64_t i = 0; i < s.count; i++) {
    const int64_t start = static_cast<int64_t>(s.starts[i]);
    for (int64_t t = 0; t < s.lengths[i]; t++) {
      DecodeRow(s, start + t, out.values.data() + (out.first_row[i] + t) * s.dim);
    }
  }
  return out;
}

// dots[m][t] = <qrows[m], chunk token t0 + t> for m < MR, t < kTile, each summed over k in order.
template <int MR>
void DotTile(const float* const* qrows, const float* chunk, int64_t d, int64_t t0, float (*dots)[kTile]) {
  float acc[MR][kTile] = {};
  for (int64_t k = 0; k < d; k++) {
    const float* col = chunk + k * kChunk + t0;
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++) {
      const float qk = qrows[m][k];
#pragma GCC unroll 8
      for (int64_t t = 0; t < kTile; t++) acc[m][t] += qk * col[t];
    }
  }
  for (int m = 0; m < MR; m++) std::copy(acc[m], acc[m] + kTile, dots[m]);
}

// Calls fn(item, worker) for every item on the pool. Items are handed out one at a time; results
// never depend on which worker takes an item, only on the item.
template <class Fn>
void ForEachItem(int64_t count, int workers, const Fn& fn) {
  std::atomic<int64_t> next{0};
  GlobalPool().Run(workers, [&](int worker) {
    for (;;) {
      const int64_t item = next.fetch_add(1);
      if (item >= count) break;
      fn(item, worker);
    }
  });
}

int WorkerCount(int threads, int64_t items) {
  const int64_t wanted = threads > 0 ? threads : GlobalPool().size();
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({wanted, GlobalPool().size(), items})));
}

// The queries paired with document b: all of them, or query b alone.
struct QueryRange {
  int64_t begin;
  int64_t end;
};
QueryRange QueriesOf(int64_t b, int64_t nq, TrainPairs pairs) {
  return pairs == TrainPairs::All ? QueryRange{0, nq} : QueryRange{b, b + 1};
}
int64_t PairIndex(int64_t i, int64_t b, int64_t nd, TrainPairs pairs) {
  return pairs == TrainPairs::All ? i * nd + b : i;
}

}  // namespace

void MaxsimTrainForward(const TokenSpans& queries, const TokenSpans& docs, TrainPairs pairs, int64_t stride,
                        float* scores, int32_t* argmax, int threads) {
  const int64_t nq = queries.count;
  const int64_t nd = docs.count;
  const int64_t d = docs.dim;
  if (nq == 0 || nd == 0) return;
  const DecodedItems q = Decode(queries);
  const int workers = WorkerCount(threads, nd);

  struct Scratch {
    std::vector<float> chunk;    // [d][kChunk] document tokens, k-major
    std::vector<float> row;      // [d] one decoded document token
    std::vector<float> best;     // per query token row: running max
    std::vector<int32_t> where;  // per query token row: its document token
  };
  std::vector<Scratch> scratch(static_cast<size_t>(workers));
  for (Scratch& s : scratch) {
    s.chunk.resize(static_cast<size_t>(d * kChunk));
    s.row.resize(static_cast<size_t>(d));
    s.best.resize(static_cast<size_t>(q.rows));
    s.where.resize(static_cast<size_t>(q.rows));
  }

  ForEachItem(nd, workers, [&](int64_t b, int worker) {
    Scratch& s = scratch[static_cast<size_t>(worker)];
    const QueryRange range = QueriesOf(b, nq, pairs);
    const int64_t ld = docs.lengths[b];
    const int64_t doc_start = static_cast<int64_t>(docs.starts[b]);
    for (int64_t i = range.begin; i < range.end; i++) {
      const int64_t first = q.first_row[i];
      std::fill(s.best.begin() + first, s.best.begin() + first + queries.lengths[i], -INFINITY);
      std::fill(s.where.begin() + first, s.where.begin() + first + queries.lengths[i], -1);
    }
    float* chunk = s.chunk.data();
    for (int64_t c0 = 0; c0 < ld; c0 += kChunk) {
      const int64_t n = std::min(kChunk, ld - c0);
      // Tiles read whole kTile columns; tokens past n are zeros whose dots are never compared.
      if (n < kChunk) std::fill(chunk, chunk + d * kChunk, 0.0f);
      for (int64_t t = 0; t < n; t++) {
        DecodeRow(docs, doc_start + c0 + t, s.row.data());
        for (int64_t k = 0; k < d; k++) chunk[k * kChunk + t] = s.row[k];
      }
      for (int64_t i = range.begin; i < range.end; i++) {
        const int64_t first = q.first_row[i];
        const int64_t last = first + queries.lengths[i];
        for (int64_t r0 = first; r0 < last; r0 += kRows) {
          const int rows = static_cast<int>(std::min<int64_t>(kRows, last - r0));
          const float* qrows[kRows];
          for (int m = 0; m < rows; m++) qrows[m] = q.values.data() + (r0 + m) * d;
          for (int64_t t0 = 0; t0 < n; t0 += kTile) {
            float dots[kRows][kTile];
            if (rows == kRows) {
              DotTile<kRows>(qrows, chunk, d, t0, dots);
            } else {
              for (int m = 0; m < rows; m++) DotTile<1>(qrows + m, chunk, d, t0, dots + m);
            }
            // Strict > in ascending token order: the lowest index wins a tie.
            const int64_t tn = std::min(kTile, n - t0);
            for (int m = 0; m < rows; m++) {
              float best = s.best[r0 + m];
              int32_t where = s.where[r0 + m];
              for (int64_t t = 0; t < tn; t++) {
                if (dots[m][t] > best) {
                  best = dots[m][t];
                  where = static_cast<int32_t>(c0 + t0 + t);
                }
              }
              s.best[r0 + m] = best;
              s.where[r0 + m] = where;
            }
          }
        }
      }
    }
    for (int64_t i = range.begin; i < range.end; i++) {
      const int64_t p = PairIndex(i, b, nd, pairs);
      const int64_t first = q.first_row[i];
      const int32_t lq = queries.lengths[i];
      int32_t* out = argmax + p * stride;
      // Summed in double in token order, like the forward engine.
      double sum = 0.0;
      for (int32_t t = 0; t < lq; t++) {
        sum += s.best[first + t];
        out[t] = s.where[first + t];
      }
      std::fill(out + lq, out + stride, -1);
      scores[p] = ld == 0 ? -INFINITY : static_cast<float>(sum);
    }
  });
}

void MaxsimTrainBackward(const TokenSpans& queries, const TokenSpans& docs, TrainPairs pairs, int64_t stride,
                         const int32_t* argmax, const double* grad_scores, float* dq, float* dd, int threads) {
  const int64_t nq = queries.count;
  const int64_t nd = docs.count;
  const int64_t d = docs.dim;
  if (nq == 0 || nd == 0) return;
  int64_t max_doc = 0;
  for (int64_t b = 0; b < nd; b++) max_doc = std::max<int64_t>(max_doc, docs.lengths[b]);

  // dQ[i, s] = sum_j g[i, j] * D[j, t*]: one owner per query, documents in ascending order.
  {
    const int workers = WorkerCount(threads, nq);
    std::vector<std::vector<double>> acc(static_cast<size_t>(workers), std::vector<double>(static_cast<size_t>(d)));
    std::vector<std::vector<float>> row(static_cast<size_t>(workers), std::vector<float>(static_cast<size_t>(d)));
    ForEachItem(nq, workers, [&](int64_t i, int worker) {
      double* a = acc[static_cast<size_t>(worker)].data();
      float* r = row[static_cast<size_t>(worker)].data();
      const int64_t q_start = static_cast<int64_t>(queries.starts[i]);
      const int64_t j_begin = pairs == TrainPairs::All ? 0 : i;
      const int64_t j_end = pairs == TrainPairs::All ? nd : i + 1;
      for (int32_t s = 0; s < queries.lengths[i]; s++) {
        std::fill(a, a + d, 0.0);
        for (int64_t j = j_begin; j < j_end; j++) {
          const int64_t p = PairIndex(i, j, nd, pairs);
          const double g = grad_scores[p];
          const int32_t t = argmax[p * stride + s];
          if (g == 0.0 || t < 0) continue;  // no gradient, or an empty document
          DecodeRow(docs, static_cast<int64_t>(docs.starts[j]) + t, r);
          for (int64_t k = 0; k < d; k++) a[k] += g * r[k];
        }
        float* out = dq + (q_start + s) * d;
        for (int64_t k = 0; k < d; k++) out[k] = static_cast<float>(a[k]);
      }
    });
  }

  // dD[j, t] = sum over (i, s) with t*(i, j, s) = t of g[i, j] * Q[i, s]: one owner per document,
  // contributions in ascending (i, s) order.
  {
    const DecodedItems q = Decode(queries);
    const int workers = WorkerCount(threads, nd);
    std::vector<std::vector<double>> acc(static_cast<size_t>(workers),
                                         std::vector<double>(static_cast<size_t>(max_doc * d)));
    ForEachItem(nd, workers, [&](int64_t j, int worker) {
      const int64_t ld = docs.lengths[j];
      if (ld == 0) return;
      double* a = acc[static_cast<size_t>(worker)].data();
      std::fill(a, a + ld * d, 0.0);
      const QueryRange range = QueriesOf(j, nq, pairs);
      for (int64_t i = range.begin; i < range.end; i++) {
        const int64_t p = PairIndex(i, j, nd, pairs);
        const double g = grad_scores[p];
        if (g == 0.0) continue;
        for (int32_t s = 0; s < queries.lengths[i]; s++) {
          const int32_t t = argmax[p * stride + s];
          if (t < 0) continue;
          const float* qv = q.values.data() + (q.first_row[i] + s) * d;
          double* at = a + static_cast<int64_t>(t) * d;
          for (int64_t k = 0; k < d; k++) at[k] += g * qv[k];
        }
      }
      float* out = dd + static_cast<int64_t>(docs.starts[j]) * d;
      for (int64_t e = 0; e < ld * d; e++) out[e] = static_cast<float>(a[e]);
    });
  }
}

}  // namespace maxsim_cpu
