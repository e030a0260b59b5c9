// maxsim_8bit.cuh: the 8-bit MaxSim kernel bodies shared by maxsim_int8.cu (int8 x int8, exact int32
// dots) and maxsim_fp8.cu (e4m3 x e4m3, fp32 accumulation), and the device quantizer. The math, the
// structure and the launch contract are described in maxsim_int8.cu; the element type is a policy
// (S8 / E4M3 in maxsim_policy.cuh): how fragments multiply, what the accumulator starts at, how it
// becomes fp32. The mma.sync body is the one of every element type (maxsim_mma.cuh); here are the
// SIMT fallback, the quantizer and the warp-specialized wgmma body.
#pragma once
#include <cuda_fp8.h>

#include <climits>

#include "maxsim_epilogue.cuh"
#include "maxsim_registry.h"
#include "maxsim_mma.cuh"
#include "maxsim_simt.cuh"
#include "maxsim_sm90.cuh"

namespace maxsim {

// ---- device quantizer: one warp per token ----

// One warp per work item, grid-stride: this thread's lane, its warp's first item, the stride.
struct WarpGrid {
  int lane;
  int64_t first, step;
  __device__ __forceinline__ WarpGrid()
      : lane(threadIdx.x & 31),
        first((int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)),
        step((int64_t)gridDim.x * (blockDim.x >> 5)) {}
};

// The scale of a token (or document) whose largest |x| is m > 0: int8 as the host,
// Math.fround(m / 127); fp8 maps m to 448, the largest finite e4m3. Both are monotone in m.
template <class E>
__device__ __forceinline__ float scale_of(float m) {
  if constexpr (E::kFp8) return __fdiv_rn(m, 448.f);
  else return (float)((double)m / 127.0);
}

// Writes token x quantized with `scale` (> 0) to y, lanes over the dimension. fp8: x / scale in fp32,
// then the round-to-nearest-even saturating conversion; int8: rint(x / scale) in double (as the host)
// clamped to [-127, 127]; NaN -> 0.
template <class E, typename T>
__device__ __forceinline__ void quantize_token(const T* x, uint8_t* y, int dim, int lane, float scale) {
  if constexpr (E::kFp8) {
    for (int k = lane; k < dim; k += 32) {
      const float v = __fdiv_rn(to_f32(x[k]), scale);
      y[k] = v == v ? (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3) : 0;
    }
  } else {
    const double ds = (double)scale;
    for (int k = lane; k < dim; k += 32) {
      const double v = (double)to_f32(x[k]) / ds;
      int qv = 0;
      if (v == v) qv = (int)fmin(127.0, fmax(-127.0, rint(v)));
      y[k] = (uint8_t)(int8_t)qv;
    }
  }
}

template <class E, typename T>
__device__ __forceinline__ void quantize8_body(const QuantizeParams& p) {
  const WarpGrid g;
  const int lane = g.lane;
  const int64_t warps = g.step, w0 = g.first;
  const int dim = p.dim;
  const T* __restrict__ src = static_cast<const T*>(p.src);
  // the item table is copied unchanged (the int8 set has the same packing as the source)
  for (int64_t i = w0 * 32 + lane; i < p.count; i += warps * 32) {
    p.dst_starts[i] = p.src_starts[i];
    p.dst_lengths[i] = p.src_lengths[i];
  }
  for (int64_t t = w0; t < p.tokens; t += warps) {
    const T* x = src + t * (int64_t)dim;
    float m = 0.f;
    for (int k = lane; k < dim; k += 32) {
      const float a = fabsf(to_f32(x[k]));
      m = a > m ? a : m;  // NaN never wins (as the host's `a > m`)
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float y = __shfl_xor_sync(0xffffffffu, m, o);
      m = y > m ? y : m;
    }
    uint8_t* y = reinterpret_cast<uint8_t*>(p.dst) + t * (int64_t)dim;
    if (isinf(m)) {
      if (lane == 0) atomicMin(p.bad_token, (unsigned long long)t);
      m = 0.f;  // the result is rejected; write zeros
    }
    if (m == 0.f) {
      for (int k = lane; k < dim; k += 32) y[k] = 0;
      if (lane == 0) p.dst_scales[t] = 0.f;
      continue;
    }
    const float scale = scale_of<E>(m);
    quantize_token<E, T>(x, y, dim, lane, scale);
    if (lane == 0) p.dst_scales[t] = scale;
  }
}

// Document scales: two launches after quantize8_body. First one warp per item of the (packed) set:
// the item's scale is the largest of its tokens' scales (scale_of is monotone, so it is the scale of
// the item's largest |x|), and every token with another scale is marked for requantization by storing
// the item's scale negated (scales are otherwise >= 0). Then one warp per token, over all tokens in
// parallel however long an item is: a marked token is quantized again with its item's scale.
__device__ __forceinline__ void mark_document_scales_body(const QuantizeParams& p) {
  const WarpGrid g;
  const int lane = g.lane;
  for (int64_t i = g.first; i < p.count; i += g.step) {
    float* sc = p.dst_scales + p.dst_starts[i];
    const int len = p.dst_lengths[i];
    float sd = 0.f;
    for (int t = lane; t < len; t += 32) sd = fmaxf(sd, sc[t]);
    sd = warp_max(sd);
    for (int t = lane; t < len; t += 32)
      if (sc[t] != sd) sc[t] = -sd;
  }
}

template <class E, typename T>
__device__ __forceinline__ void requantize_documents_body(const QuantizeParams& p) {
  const WarpGrid g;
  const int lane = g.lane;
  const int dim = p.dim;
  const T* __restrict__ src = static_cast<const T*>(p.src);
  for (int64_t t = g.first; t < p.tokens; t += g.step) {
    const float s = p.dst_scales[t];
    if (!(s < 0.f)) continue;  // warp-uniform
    quantize_token<E, T>(src + t * (int64_t)dim, reinterpret_cast<uint8_t*>(p.dst) + t * (int64_t)dim, dim, lane, -s);
    __syncwarp();  // every lane read the mark before lane 0 replaces it
    if (lane == 0) p.dst_scales[t] = -s;
  }
}


// The quantizer entry points of a family (PREFIX maxsim_int8 or maxsim_fp8, element policy E):
// PREFIX_quantize_{f32,f16,bf16} (per token), then for document scales PREFIX_quantize_mark_documents
// and PREFIX_quantize_documents_{f32,f16,bf16}. Block 256 (8 warps), any grid.
#define MAXSIM_8BIT_QUANTIZE_ENTRIES(PREFIX, E)                                                          \
  MAXSIM_8BIT_QUANTIZE_SOURCE(PREFIX, E, f32, float)                                                     \
  MAXSIM_8BIT_QUANTIZE_SOURCE(PREFIX, E, f16, __half)                                                    \
  MAXSIM_8BIT_QUANTIZE_SOURCE(PREFIX, E, bf16, __nv_bfloat16)                                            \
  extern "C" __global__ void __launch_bounds__(256) PREFIX##_quantize_mark_documents(const QuantizeParams p) { \
    maxsim::mark_document_scales_body(p);                                                                 \
  }
#define MAXSIM_8BIT_QUANTIZE_SOURCE(PREFIX, E, SFX, T)                                                  \
  extern "C" __global__ void __launch_bounds__(256) PREFIX##_quantize_##SFX(const QuantizeParams p) {     \
    maxsim::quantize8_body<maxsim::E, T>(p);                                                              \
  }                                                                                                        \
  extern "C" __global__ void __launch_bounds__(256) PREFIX##_quantize_documents_##SFX(const QuantizeParams p) { \
    maxsim::requantize_documents_body<maxsim::E, T>(p);                                                   \
  }


// =============================================================================================
// wgmma (sm_90a only): the warp-specialized structure of maxsim_wgmma.cu with 8-bit tiles.
//
// One producer warpgroup streams document tiles of TN tokens x 128 bytes (dim <= 128, zero-filled
// past dim) into an S-stage ring in the 128-byte-swizzled K-major layout (one swizzle atom per row),
// plus the TN document scales of the tile into a separate per-stage array (4-byte cp.async); each
// producer thread arrives on "full" through cp.async.mbarrier.arrive (fires when its copies land).
// NCONS consumer warpgroups wait on "full", fence the async proxy, copy the tile's scales of their
// columns to registers, run 4 wgmma.m64nTNk32 per m-block (A = 16 query rows per warp from registers, B by descriptor),
// arrive on "empty" once the last m-block is done, and fold: value = float(acc) * sd_j, then the
// running row max (columns past the document -> -inf). Both types accumulate from zero (scale-d = 0
// on the first k step): int8 in int32, converted by I2FP (full rate; the mma.sync bodies' biased
// accumulator would need a MOV per value to reset it here), fp8 in fp32.
// With two consumer warpgroups the producer gives registers to them (setmaxnreg, maxsim_sm90.cuh),
// which lets w2m2n128 hold two m-blocks of 128-column accumulators.
// End of (document, pass): quad max, times the query-row scale, warp sum, one named barrier, and the
// fixed-order combine of maxsim_wgmma.cu (sums spanning passes carried in the scores array).
//
// LAUNCH CONTRACT: block = (128 * (NCONS + 1), 1, 1); grid = (num_sms, 1, 1) (persistent, any grid
// >= 1 is correct); dynamic smem = S * TN * 132 + 1024 bytes; requires compute capability 9.0 (the
// sm_80 cubin traps), dim % 16 == 0 and dim <= 128 (returns without writing otherwise).
// =============================================================================================

// TMA: the documents come through a 2-D tensor map (box [128 bytes, TN rows], 128-byte swizzle); one
// producer lane arms "full" with the box's bytes and issues it, and the producer warp's 32 lanes copy
// the tile's scales with 4-byte cp.async. (A 1-D tensor map of the scales raised an illegal instruction
// on inputs whose documents start off a multiple of four tokens, most likely because the box then
// starts off a 16-byte boundary: bench/NOTES.md, '8-bit through TMA'.) The map is null otherwise.
//
// DSCALE: the document-scale twins, for corpora whose documents each have one scale shared by all
// their tokens (quantize(..., { scales: 'document' }); the dispatcher takes them only for such
// corpora). The producer copies one scale per stage (the document's first token's) instead of TN;
// the fold takes the row max of the raw dots (int8: an exact integer max, any sign; fp8: on bit
// patterns, as the per-token fold) and multiplies by the scale once per row, at the document's end.
// float(max_j acc_j) * s equals max_j float(acc_j) * s for s >= 0 (conversion and product round
// monotonically), so on such corpora the scores are the per-token kernels', bit for bit.
template <class E, int NCONS, int MB, int TN, int S, bool TMA = false, bool DSCALE = false>
__device__ __forceinline__ void wgmma8_body(const MaxsimParams& p, const TmaMap* docs_map = nullptr) {
#if MAXSIM_HAS_WGMMA
  using Acc = typename E::Acc;
  // int8 converts with I2FP (full rate on sm_90) from an accumulator that starts at zero, like fp8's:
  // no bias to set after each fold (the mma.sync bodies' FADD trick costs a MOV per value here;
  // H200: 1.152 vs 1.285 ms at 32,32,300, 2.96 vs 3.14 at ColPali; bench/NOTES.md, 'Format and exact conversion')
  constexpr bool BIAS = false;  // E::to_f32<false>: I2FP for int8, nothing for fp8
  constexpr int STAGE = TN * 128;  // bytes per stage: TN rows of one 128-byte swizzle atom
  constexpr int NCW = NCONS * 4;   // consumer warps
  constexpr int SPP = NCW * MB;    // 16-row query slices per pass
  constexpr int NACC = TN / 2;
  constexpr bool IMAX = DSCALE && !E::kFp8;  // int8 document scales: the row max on the int32 dots
  static_assert(TN % 64 == 0 && TN <= 128, "tile");
  static_assert(TMA || !DSCALE, "document-scale twins exist for the TMA kernels only");
  extern __shared__ __align__(1024) unsigned char smem_dyn[];
  __shared__ __align__(8) uint64_t full_bar[S];
  __shared__ __align__(8) uint64_t empty_bar[S];
  __shared__ float part[2 * SPP];
  static_assert(SPP <= 32, "combine uses one lane per slice");

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const uint32_t sbase = (smem_u32(smem_dyn) + 1023u) & ~1023u;
  const uint32_t scbase = sbase + S * STAGE;  // [S][TN] document scales
  const float* scales_s = reinterpret_cast<const float*>(smem_dyn + (scbase - smem_u32(smem_dyn)));
  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      // one (copy-completion) arrive per producer thread; TMA: the issuing lane's armed arrive and one
      // per lane of the producer warp for its scale copies
      mbar_init(smem_u32(&full_bar[s]), TMA ? 1 + 32 : 128);
      mbar_init(smem_u32(&empty_bar[s]), NCW);  // one arrive per consumer warp
    }
  }
  __syncthreads();

  const int dim = p.dim;
  const int num_docs = p.num_docs;
  const int nq = p.num_queries - p.query_tile_offset;
  if (nq <= 0 || dim > 128) return;
  const int cpq = max(1, (p.max_query_length + 15) >> 4);
  const int nslices = nq * cpq;
  const int npass = (nslices + SPP - 1) / SPP;
  const uint8_t* __restrict__ docs = static_cast<const uint8_t*>(p.docs);
  const float* __restrict__ dscales = p.doc_scales;

  if (warp < 4) {
    // ------------------------------ producer warpgroup ------------------------------
    if constexpr (RegSplit<NCONS>::producer > 0) setmaxnreg_dec<RegSplit<NCONS>::producer>();
    // The producer's walk: for each pass, each non-empty document of this CTA, each tile, wait until
    // its stage is free, then copy(stage, start, len, tile). The fp16 kernels' produce_tiles
    // (maxsim_wgmma.cu) does the same through a DocWindow, whose registers would spill at w3m2n64's
    // producer budget; here each document's length and start are loaded directly, and the producer
    // runs S tiles ahead, which hides their latency.
    auto produce_tiles = [&](auto&& copy) {
      int t = 0;
      for (int pass = 0; pass < npass; ++pass)
        for (int doc = blockIdx.x; doc < num_docs; doc += gridDim.x) {
          const int len = p.doc_lengths[doc];
          if (len <= 0) continue;
          const int64_t start = p.doc_starts[doc];
          const int ntiles = (len + TN - 1) / TN;
          for (int tile = 0; tile < ntiles; ++tile, ++t) {
            const int s = t % S;
            if (t >= S) mbar_wait(smem_u32(&empty_bar[s]), ((t / S) - 1) & 1);
            copy(s, start, len, tile);
          }
        }
    };
    if constexpr (TMA) {
      // one warp walks the documents: lane 0 issues the tile's box (rows past the document are the next
      // one's, or zeros past the set; the consumers' fold masks them by length), every lane copies a
      // share of its scales (zeros past the document) and arrives when they land
      if (warp == 0) {
        produce_tiles([&](int s, int64_t start, int len, int tile) {
          const uint32_t fb = smem_u32(&full_bar[s]);
          if (lane == 0) {
            const int row = static_cast<int>(start) + tile * TN;  // < 2^31: the runtime checks
            mbar_arrive_expect_tx(fb, STAGE);
            tma_load_2d(sbase + s * STAGE, docs_map, 0, row, fb);
          }
          if constexpr (DSCALE) {
            if (lane == 0) cp_async4(scbase + s * TN * 4, dscales + start, 4);
          } else {
#pragma unroll
            for (int i = 0; i < TN / 32; ++i) {
              const int r = i * 32 + lane;
              const bool ok = tile * TN + r < len;
              cp_async4(scbase + (s * TN + r) * 4, ok ? dscales + start + tile * TN + r : dscales, ok ? 4 : 0);
            }
          }
          cp_async_mbar_arrive(fb);
        });
        cp_async_wait<0>();
      }
      return;
    }
    // Each thread copies one 16-byte chunk of rows prow, prow + 16, ... of a tile (copy_chunk_rows);
    // the swizzle term chunk ^ row % 8 is the same for all of them.
    const int prow = tid >> 3, pchunk = tid & 7;
    const bool kok = pchunk * 16 < dim;
    const uint32_t pdst = prow * 128 + ((pchunk ^ (prow & 7)) << 4);
    const int64_t row_step = 16 * (int64_t)dim;
    produce_tiles([&](int s, int64_t start, int len, int tile) {
      const uint32_t dst = sbase + s * STAGE + pdst;
      const int row0 = tile * TN + prow;
      const int rows_left = len - row0;  // copy `it` holds row row0 + 16 * it
      const uint8_t* src = docs + (start + row0) * (int64_t)dim + pchunk * 16;
      copy_chunk_rows<TN / 16, 16, 16 * 128>(dst, src, row_step, rows_left, kok, docs);
      for (int r = tid; r < TN; r += 128) {
        const bool ok = tile * TN + r < len;
        cp_async4(scbase + (s * TN + r) * 4, ok ? dscales + start + tile * TN + r : dscales, ok ? 4 : 0);
      }
      cp_async_mbar_arrive(smem_u32(&full_bar[s]));  // fires when this thread's copies land
    });
    cp_async_wait<0>();
  } else {
    // ------------------------------ consumer warpgroups ------------------------------
    if constexpr (RegSplit<NCONS>::consumer > 0) setmaxnreg_inc<RegSplit<NCONS>::consumer>();
    const int cw = warp - 4;
    const int ctid = tid - 128;
    const uint8_t* __restrict__ queries = static_cast<const uint8_t*>(p.queries);
    const float* __restrict__ qscales = p.query_scales;
    // 128-byte swizzle, stride between 8-row groups 1024 bytes
    const uint64_t desc_base = (1ull << 62) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 16);
    uint32_t a[MB][4][4];
    float qs[MB][2];
    // scale-d = 0 on the first k step of every tile: no reset after a fold (zeroed once for the asm's
    // "+r" operands)
    Acc acc[MB][NACC];
#pragma unroll
    for (int m = 0; m < MB; ++m)
#pragma unroll
      for (int i = 0; i < NACC; ++i) acc[m][i] = E::template init<BIAS>();
    int dp = 0;
    int t = 0;
    for (int pass = 0; pass < npass; ++pass) {
      int qlen[MB], row0[MB];
#pragma unroll
      for (int m = 0; m < MB; ++m) {
        const QuerySlice<16> sl(p, pass * SPP + m * NCW + cw, nslices, cpq);
        qlen[m] = sl.qlen;
        row0[m] = sl.row0;
        const int64_t qstart = sl.start;
        const uint8_t* qbase = queries + qstart * (int64_t)dim;
        // A fragment (per warp, 16 rows x 32 bytes per k step): reg r = row g + 8*(r&1), bytes
        // 4*t + 16*(r>>1) .. +3, as mma.m16n8k32
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int row = row0[m] + (lane >> 2) + (r & 1) * 8;
            const int k = ks * 32 + (lane & 3) * 4 + (r >> 1) * 16;
            uint32_t v = 0;
            if (row < qlen[m] && k < dim) v = *reinterpret_cast<const uint32_t*>(qbase + (int64_t)row * dim + k);
            a[m][ks][r] = v;
          }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row0[m] + (lane >> 2) + h * 8;
          qs[m][h] = row < qlen[m] ? qscales[qstart + row] : 0.f;
        }
      }
      DocWindow<false> win(p);
      for (int doc = blockIdx.x, i = 0; doc < num_docs; doc += gridDim.x, ++i) {
        const int len = win.at(p, i, nullptr);
        if (len <= 0) {
          if (pass == 0)
            for (int ql = ctid; ql < nq; ql += NCONS * 128)
              p.scores[(int64_t)(p.query_tile_offset + ql) * num_docs + doc] = -INFINITY;
          continue;
        }
        const int ntiles = (len + TN - 1) / TN;
        float rmax[MB][2];
        int imax[MB][2];  // IMAX only
        float sdoc = 0.f;  // DSCALE only: the document's scale
#pragma unroll
        for (int m = 0; m < MB; ++m) {
          rmax[m][0] = rmax[m][1] = -INFINITY;
          imax[m][0] = imax[m][1] = INT_MIN;
        }
        for (int tile = 0; tile < ntiles; ++tile, ++t) {
          const int s = t % S;
          mbar_wait(smem_u32(&full_bar[s]), (t / S) & 1);
          // cp.async wrote the tile (generic proxy); wgmma reads it (async). TMA writes in the async
          // proxy already.
          if constexpr (!TMA) fence_proxy_async();
          const uint32_t st = sbase + s * STAGE;
          // this thread's column scales, read before the stage is released to the producer
          float2 sc[TN / 8];
          if constexpr (DSCALE) {
            sdoc = scales_s[s * TN];
          } else {
#pragma unroll
            for (int i = 0; i < TN / 8; ++i)
              sc[i] = *reinterpret_cast<const float2*>(scales_s + s * TN + i * 8 + (lane & 3) * 2);
          }
          wgmma_fence();
          // all 4 k32 steps unconditionally (zero-filled past dim): a runtime guard would split the
          // wgmma chain (bench/NOTES.md, 'What serializes wgmma')
          const uint64_t desc0 = desc_base | (uint64_t)((st >> 4) & 0x3FFF);
#pragma unroll
          for (int m = 0; m < MB; ++m) {
#pragma unroll
            for (int ks = 0; ks < 4; ++ks)
              WgmmaOp<E, TN>::run(acc[m], a[m][ks], desc0 + (uint64_t)((ks * 32) >> 4), ks > 0);
            wgmma_commit();
          }
          const int rem = len - tile * TN;
          // value j of m-block m: float(acc) * sd of its column (DSCALE: the raw dot; the scale comes
          // at the document's end)
          auto value = [&](int m, int j) {
            if constexpr (DSCALE) return E::template to_f32<BIAS>(acc[m][j]);
            else return E::template to_f32<BIAS>(acc[m][j]) * ((j & 1) ? sc[j >> 2].y : sc[j >> 2].x);
          };
          float before[MB][2];  // the row maxima before this tile, for the exact redo below
#pragma unroll
          for (int m = 0; m < MB; ++m) before[m][0] = rmax[m][0], before[m][1] = rmax[m][1];
#pragma unroll
          for (int m = 0; m < MB; ++m) {
            static_assert(MB == 1 || MB == 2, "MB");
            if (m == MB - 1) wgmma_wait<0>();
            else wgmma_wait<1>();
#pragma unroll
            for (int i = 0; i < NACC; ++i) reg_fence(acc[m][i]);
            if (m == MB - 1) {
              __syncwarp();
              if (lane == 0) mbar_arrive(smem_u32(&empty_bar[s]));
            }
            // Full tiles take a path without the column test: the select and compare per element
            // were a quarter of the fold's instructions (ncu; bench/NOTES.md, 'The 8-bit fold'). For fp8
            // their max runs on the values' bit patterns, one VIMNMX3 per two values (max3_bits),
            // checked below.
            if (rem >= TN) {
              if constexpr (IMAX) {
#pragma unroll
                for (int i = 0; i < TN / 8; ++i) {
                  imax[m][0] = max(imax[m][0], max(acc[m][4 * i], acc[m][4 * i + 1]));
                  imax[m][1] = max(imax[m][1], max(acc[m][4 * i + 2], acc[m][4 * i + 3]));
                }
              } else if constexpr (E::kRowMaxBits) {
                fold_full_bits<MB, NACC>(rmax, m, value);
              } else {
#pragma unroll
                for (int i = 0; i < TN / 8; ++i) {
                  rmax[m][0] = fmaxf(rmax[m][0], fmaxf(value(m, 4 * i), value(m, 4 * i + 1)));
                  rmax[m][1] = fmaxf(rmax[m][1], fmaxf(value(m, 4 * i + 2), value(m, 4 * i + 3)));
                }
              }
            } else if constexpr (IMAX) {
#pragma unroll
              for (int i = 0; i < TN / 8; ++i) {
                const int col = i * 8 + (lane & 3) * 2;
                const bool ok0 = col < rem, ok1 = col + 1 < rem;
                imax[m][0] = max(imax[m][0], max(ok0 ? acc[m][4 * i] : INT_MIN, ok1 ? acc[m][4 * i + 1] : INT_MIN));
                imax[m][1] = max(imax[m][1], max(ok0 ? acc[m][4 * i + 2] : INT_MIN, ok1 ? acc[m][4 * i + 3] : INT_MIN));
              }
            } else {
              fold_masked<MB, NACC>(rmax, m, rem, lane, value);
            }
          }
          // A row whose maximum so far is negative (or a NaN) left the bit-pattern max inexact: the
          // warp redoes this tile with fmaxf from the maxima before it. The accumulators stay intact
          // until the next tile's wgmma. Rare for embeddings: a query token's best match is >= 0.
          if (E::kRowMaxBits && !IMAX && rem >= TN) redo_inexact_rows<MB, NACC>(rmax, before, value);
        }
        if constexpr (DSCALE) {
          // the document's scale, once per row (a thread whose columns were all past the document
          // keeps -inf: 0 * -inf would be a NaN)
#pragma unroll
          for (int m = 0; m < MB; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const float r = IMAX ? (imax[m][h] == INT_MIN ? -INFINITY : __int2float_rn(imax[m][h])) : rmax[m][h];
              rmax[m][h] = r == -INFINITY ? r : r * sdoc;
            }
        }
        // row max over the quad, times the query-row scale, rows past the query dropped, warp sum
#pragma unroll
        for (int m = 0; m < MB; ++m) {
          float r0 = rmax[m][0], r1 = rmax[m][1];
          r0 = fmaxf(r0, __shfl_xor_sync(0xffffffffu, r0, 1));
          r0 = fmaxf(r0, __shfl_xor_sync(0xffffffffu, r0, 2));
          r1 = fmaxf(r1, __shfl_xor_sync(0xffffffffu, r1, 1));
          r1 = fmaxf(r1, __shfl_xor_sync(0xffffffffu, r1, 2));
          const int rowa = row0[m] + (lane >> 2);
          float partial = 0.f;
          if ((lane & 3) == 0) {
            if (rowa < qlen[m]) partial += qs[m][0] * r0;
            if (rowa + 8 < qlen[m]) partial += qs[m][1] * r1;
          }
          partial = warp_sum(partial);
          if (lane == 0) part[(dp & 1) * SPP + m * NCW + cw] = partial;
        }
        // one barrier per (document, pass); the combine of maxsim_wgmma.cu (fixed order)
        named_bar(1, NCONS * 128);
        if (cw == 0 && lane < SPP) combine_pass<SPP>(p, part, dp, pass, nslices, cpq, lane, doc, num_docs);
        ++dp;
      }
    }
  }
#else
  // the sm_80 cubin: never dispatched there (compute capability 9.0 only); fail loudly if launched
  __trap();
#endif
}

}  // namespace maxsim

// ---- the 8-bit family's kernels: one table for int8 (maxsim_int8.cu) and fp8 (maxsim_fp8.cu) ----
// MAXSIM_8BIT_KERNELS(PREFIX, E, KS_CTAS) defines PREFIX_mma_<row> (sm_80+) from the rows of
// MAXSIM_8BIT_MMA_VARIANTS (KS_CTAS: CTAs per SM of the K-split variant), PREFIX_simt, the quantizers,
// and PREFIX_wgmma_<row> (sm_90a) from MAXSIM_8BIT_WGMMA_VARIANTS with their TMA twins
// PREFIX_wgmma_tma_* (the documents' tensor map the second parameter; variants.json "tmaBox":
// [128, TN]) and document-scale twins PREFIX_wgmma_tma_ds_* (DSCALE above) where the row says so.
// The numbers and the smem formulas: maxsim_registry.h.
#define MAXSIM_8BIT_MMA_ENTRY(NAME, E, G, NGRP, TN, S, KD, KSPLIT, CTAS)                          \
  extern "C" __global__ void __launch_bounds__(MAXSIM_MMA_BLOCK(G, NGRP), CTAS) NAME(const MaxsimParams p) { \
    maxsim::mma_body<maxsim::E, G, NGRP, TN, S, KD, KSPLIT>(p);                                  \
  }
#define MAXSIM_8BIT_WGMMA_ENTRY(NAME, E, NCONS, MB, TN, S)                                        \
  extern "C" __global__ void __launch_bounds__(MAXSIM_WGMMA_BLOCK(NCONS), 1) NAME(const MaxsimParams p) { \
    maxsim::wgmma8_body<maxsim::E, NCONS, MB, TN, S>(p);                                          \
  }
#define MAXSIM_8BIT_WGMMA_TMA_ENTRY(NAME, E, NCONS, MB, TN, S, DSCALE)                            \
  extern "C" __global__ void __launch_bounds__(MAXSIM_WGMMA_BLOCK(NCONS), 1)                              \
      NAME(const MaxsimParams p, const __grid_constant__ maxsim::TmaMap docs_map) {               \
    maxsim::wgmma8_body<maxsim::E, NCONS, MB, TN, S, true, DSCALE>(p, &docs_map);                 \
  }
#define MAXSIM_8BIT_MMA_ROW(PREFIX, E, SFX, G, NGRP, TN, S, KD, KSPLIT, CTAS) \
  MAXSIM_8BIT_MMA_ENTRY(PREFIX##_mma_##SFX, E, G, NGRP, TN, S, KD, KSPLIT, CTAS)
#define MAXSIM_8BIT_WGMMA_ROW(PREFIX, E, SFX, NCONS, MB, TN, S, TMA, DS) \
  MAXSIM_8BIT_WGMMA_ENTRY(PREFIX##_wgmma_##SFX, E, NCONS, MB, TN, S)
#define MAXSIM_8BIT_WGMMA_TMA_ROW(PREFIX, E, SFX, NCONS, MB, TN, S, TMA, DS) \
  MAXSIM_IF_##TMA(MAXSIM_8BIT_WGMMA_TMA_ENTRY(PREFIX##_wgmma_tma_##SFX, E, NCONS, MB, TN, S, false))
#define MAXSIM_8BIT_WGMMA_DS_ROW(PREFIX, E, SFX, NCONS, MB, TN, S, TMA, DS) \
  MAXSIM_IF_##DS(MAXSIM_8BIT_WGMMA_TMA_ENTRY(PREFIX##_wgmma_tma_ds_##SFX, E, NCONS, MB, TN, S, true))
#define MAXSIM_8BIT_KERNELS(PREFIX, E, KS_CTAS)                                                  \
  MAXSIM_8BIT_MMA_VARIANTS(MAXSIM_8BIT_MMA_ROW, PREFIX, E, KS_CTAS)                              \
  extern "C" __global__ void __launch_bounds__(MAXSIM_SIMT_BLOCK) PREFIX##_simt(const MaxsimParams p) { \
    maxsim::simt_body<maxsim::E>(p);                                                             \
  }                                                                                              \
  MAXSIM_8BIT_QUANTIZE_ENTRIES(PREFIX, E)                                                        \
  MAXSIM_8BIT_WGMMA_VARIANTS(MAXSIM_8BIT_WGMMA_ROW, PREFIX, E)                                   \
  MAXSIM_8BIT_WGMMA_VARIANTS(MAXSIM_8BIT_WGMMA_TMA_ROW, PREFIX, E)                               \
  MAXSIM_8BIT_WGMMA_VARIANTS(MAXSIM_8BIT_WGMMA_DS_ROW, PREFIX, E)
