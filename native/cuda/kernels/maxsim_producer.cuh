// The producer side of the tensor-core kernels: how document tiles reach shared memory. The walks over
// a CTA's documents (DocWindow for the wgmma kernels, DocCursor for the mma.sync groups),
// and the cp.async copies of token rows and of the 8-bit kernels' scales. The TMA box loads and the
// mbarrier handshake are in maxsim_sm90.cuh.
#pragma once
#include "maxsim_common.cuh"

namespace maxsim {

// ---- the wgmma kernels' walk over a CTA's documents ------------------------------------------
// (maxsim_wgmma.cuh: producer and consumer warps all step through every document of a work unit, a
// group's share being every NGRP-th; the mma.sync kernels' groups take DocCursor below.)
// The lengths (and, for the producer, starts) of documents first + i * step (scoring: the CTA's
// documents, first = blockIdx.x, step = gridDim.x; training: a document group), read 32 at a time by
// the lanes of a warp, one window ahead of use: the document loops then never stall on a dependent
// global load per document (a full memory latency each while the tile stream saturates DRAM). Every
// lane of the warp must call at() with the same i, in increasing order.
// GROUPED: first and step are the constructor's (kept in registers); else the CTA's own documents,
// read from blockIdx / gridDim (no registers held: the w4n64 consumers spill otherwise).
template <bool STARTS, bool GROUPED = false>
struct DocWindow {
  int first_, step_;
  int len_cur = 0, len_nxt = 0;
  int64_t start_cur = 0, start_nxt = 0;
  __device__ __forceinline__ int first() const { return GROUPED ? first_ : (int)blockIdx.x; }
  __device__ __forceinline__ int step() const { return GROUPED ? step_ : (int)gridDim.x; }
  __device__ __forceinline__ void fetch(const MaxsimParams& p, int64_t i0) {
    const int64_t doc = first() + (i0 + (threadIdx.x & 31)) * (int64_t)step();
    const bool ok = doc < p.num_docs;
    len_nxt = ok ? p.doc_lengths[doc] : 0;
    if (STARTS) start_nxt = ok ? p.doc_starts[doc] : 0;
  }
  __device__ __forceinline__ DocWindow(const MaxsimParams& p, int first_doc, int doc_step)
      : first_(first_doc), step_(doc_step) {
    fetch(p, 0);
  }
  // length (and start) of document first + i * step
  __device__ __forceinline__ int at(const MaxsimParams& p, int i, int64_t* start) {
    if ((i & 31) == 0) {
      len_cur = len_nxt;
      start_cur = start_nxt;
      fetch(p, i + 32);
    }
    if (STARTS) *start = __shfl_sync(0xffffffffu, start_cur, i & 31);
    return __shfl_sync(0xffffffffu, len_cur, i & 31);
  }
};

// ---- a producer's walk over its documents ---------------------------------------------------
// Documents first, first + step, ... (a group's share of a persistent grid), skipping empty ones.
// The next document's length and start are read one document ahead, so moving on never waits on a
// dependent global load (a full DRAM latency per document while the stream saturates DRAM).
struct DocCursor {
  int doc, step, len = 0, nlen;
  int64_t start = 0, nstart;
  const int32_t* lengths;
  const int64_t* starts;
  int num_docs;
  __device__ __forceinline__ DocCursor(const MaxsimParams& p, int first, int stride)
      : doc(first - stride), step(stride), lengths(p.doc_lengths), starts(p.doc_starts), num_docs(p.num_docs) {
    nlen = first < num_docs ? lengths[first] : 0;
    nstart = first < num_docs ? starts[first] : 0;
  }
  // moves to the next non-empty document; doc >= num_docs past the last one
  __device__ __forceinline__ void next() {
    for (;;) {
      doc += step;
      if (doc >= num_docs) return;
      len = nlen;
      start = nstart;
      const int nd = doc + step;
      nlen = nd < num_docs ? lengths[nd] : 0;
      nstart = nd < num_docs ? starts[nd] : 0;
      if (len > 0) return;
    }
  }
};

// ---- cp.async copies ---------------------------------------------------------------------
// One producer thread's share of a stage: the same 16-byte chunk of NIT token rows, RSTEP rows
// apart, to dst + it * DST_STEP. Only the row test changes from copy to copy (addresses computed
// per copy made producers issue-bound: bench/NOTES.md, 'Producer address arithmetic'). Rows at or past rows_left, and
// every row when the chunk lies past dim (!kok), are zero-filled (`any`: a valid address never read).
template <int NIT, int RSTEP, int DST_STEP, typename E>
__device__ __forceinline__ void copy_chunk_rows(uint32_t dst, const E* src, int64_t src_step, int rows_left, bool kok,
                                                const E* any) {
#pragma unroll
  for (int it = 0; it < NIT; ++it, src += src_step) {
    const bool ok = kok && it * RSTEP < rows_left;
    cp_async16(dst + it * DST_STEP, ok ? src : any, ok ? 16 : 0);
  }
}
// 4-byte cp.async (for the document scales, which are only 4-byte aligned); src_bytes in {0, 4}.
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

}  // namespace maxsim
