// The epilogue of the tensor-core kernels: which query rows a warp holds (a "slice"), and how the row
// maxima of a (document, pass) become scores. Each warp reduces its rows' maxima over the quad, drops
// rows past the query, weights them (the 8-bit kernels' query scales) and sums them in a fixed
// butterfly order; the slices of a query are then added in slice order by one thread, continuing a
// sum that spans passes (carried in a register by the mma.sync groups, in the scores array itself by
// the wgmma kernels). No atomics: the scores are bitwise deterministic. This is where the scoring
// contract's sum_i max_j is assembled; zero-length documents (-inf) are written by the bodies.
#pragma once
#include "maxsim_common.cuh"

namespace maxsim {

// Slice `slice` of a launch whose queries are cut into cpq chunks of ROWS tokens: query q, its length,
// the chunk's first row and the query's first token. Past the last slice: an empty query 0.
template <int ROWS>
struct QuerySlice {
  bool valid;
  int chunk, q, qlen, row0;
  int64_t start;
  __device__ __forceinline__ QuerySlice(const MaxsimParams& p, int slice, int nslices, int cpq) {
    valid = slice < nslices;
    const int qi = valid ? slice / cpq : 0;
    chunk = valid ? slice % cpq : 0;
    q = p.query_tile_offset + qi;
    qlen = valid ? p.query_lengths[q] : 0;
    row0 = chunk * ROWS;
    start = valid ? p.query_starts[q] : 0;
  }
};

// mma.sync: the warp's sum over the 32 rows of its slice; weight(mt, h, v) is row (mt, h)'s term.
template <class Weight>
__device__ __forceinline__ float slice_sum32(const float (&rmax)[2][2], int row0, int qlen, int lane, Weight&& weight) {
  float partial = 0.f;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float v = rmax[mt][h];
      v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
      v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
      const int row = row0 + mt * 16 + h * 8 + (lane >> 2);
      partial += ((lane & 3) == 0 && row < qlen) ? weight(mt, h, v) : 0.f;
    }
  return warp_sum(partial);
}

// mma.sync: the group's slices of this pass into the scores. G == 1: the warp's lane 0 carries the
// query's sum in `run`; otherwise the warps' partials meet in part[] (double-buffered by pass parity)
// and thread 0 of the group adds them in slice order. Every thread of the group calls it.
template <int G, class GroupSync>
__device__ __forceinline__ void combine_group(const MaxsimParams& p, float* part, float partial, float& run, int pass,
                                              int wig, int gtid, int lane, const QuerySlice<32>& sl, int cpq,
                                              int nslices, int doc, int num_docs, GroupSync&& group_sync) {
  if (G == 1) {
    if (lane == 0 && sl.valid) {
      run = (sl.chunk == 0) ? partial : run + partial;
      if (sl.chunk == cpq - 1) p.scores[(int64_t)sl.q * num_docs + doc] = run;
    }
  } else {
    if (lane == 0) part[(pass & 1) * G + wig] = partial;
    group_sync();
    if (gtid == 0) {
      for (int w = 0; w < G; ++w) {
        const int s2 = pass * G + w;
        if (s2 >= nslices) break;
        const int c2 = s2 % cpq;
        const float pv = part[(pass & 1) * G + w];
        run = (c2 == 0) ? pv : run + pv;
        if (c2 == cpq - 1)
          p.scores[(int64_t)(p.query_tile_offset + s2 / cpq) * num_docs + doc] = run;
      }
    }
  }
}

// wgmma: after the group's barrier, lane w (< SPP) of its first warp ends a segment (a query, or the
// pass) and adds that query's slices of the pass in slice order, continuing the sum carried in the
// scores array when the query began in an earlier pass. part: the group's [2][SPP] partials, the half
// of (document, pass) counter dp in use. Same order as a sequential sum: deterministic.
template <int SPP>
__device__ __forceinline__ void combine_pass(const MaxsimParams& p, const float* part, int dp, int pass, int nslices,
                                             int cpq, int lane, int doc, int num_docs) {
  const int w = lane;
  const int s2 = pass * SPP + w;
  if (s2 < nslices) {
    const int c2 = s2 % cpq;
    if (c2 == cpq - 1 || w == SPP - 1) {
      const float* pp = part + (dp & 1) * SPP;
      float* dst = p.scores + (int64_t)(p.query_tile_offset + s2 / cpq) * num_docs + doc;
      const int w0 = max(0, w - c2);
      float r = (w - c2 >= 0) ? pp[w0] : *dst + pp[w0];
      for (int j = w0 + 1; j <= w; ++j) r += pp[j];
      *dst = r;
    }
  }
}

}  // namespace maxsim
