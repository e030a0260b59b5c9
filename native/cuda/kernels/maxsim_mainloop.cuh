// The MMA issue of the tensor-core kernels: the A fragments of the query rows (registers), the
// mma.sync steps over a stage of document tokens (sm_80+), and the wgmma steps of an m-block with their
// waits (sm_90a). The element type comes in as a policy (maxsim_policy.cuh); EPW is its elements per
// 32-bit register (2 for 16-bit types, 4 for 8-bit), which sets the fragment's k offsets.
#pragma once
#include "maxsim_common.cuh"

namespace maxsim {

// The A fragment of 16 query rows over NKS k steps of 8 * EPW elements (the m16n8k16 layout for 16-bit
// types, m16n8k32 for 8-bit, which wgmma shares): register r holds row row_base + lane / 4 + 8 * (r & 1)
// at k = k0 + EPW * (lane % 4) + 4 * EPW * (r >> 1); rows past qlen and k past dim read as zero.
template <int NKS, int EPW, typename Elem>
__device__ __forceinline__ void load_a16(uint32_t (&a)[NKS][4], const Elem* qbase, int row_base, int qlen, int k0,
                                         int dim, int lane) {
#pragma unroll
  for (int ks = 0; ks < NKS; ++ks)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = row_base + (lane >> 2) + (r & 1) * 8;
      const int k = k0 + ks * (8 * EPW) + (lane & 3) * EPW + (r >> 1) * (4 * EPW);
      uint32_t v = 0;
      if (row < qlen && k < dim) v = *reinterpret_cast<const uint32_t*>(qbase + (int64_t)row * dim + k);
      a[ks][r] = v;
    }
}

// mma.sync: one n16 block (tile rows np * 16 ..) of a stage over its first nks_run k steps, for both
// m16 tiles of the warp's 32-row slice. B via ldmatrix.x4 (b16 view) from rows of RS elements:
// matrices (n 0-7, k lo), (n 0-7, k hi), (n 8-15, k lo), (n 8-15, k hi) of the block.
template <class E, int NKS, int RS, int EPW>
__device__ __forceinline__ void mma_n16(typename E::Acc (&acc)[2][2][4], const uint32_t (&a)[2][NKS][4], uint32_t sb,
                                        int np, int nks_run, int lane) {
  constexpr int EB = 4 / EPW;  // bytes per element
#pragma unroll
  for (int ks = 0; ks < NKS; ++ks) {
    if (ks < nks_run) {
      const int n = np * 16 + (lane & 7) + ((lane >> 4) << 3);
      const int k = ks * (8 * EPW) + ((lane >> 3) & 1) * (4 * EPW);
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4(sb + (n * RS + k) * EB, b0, b1, b2, b3);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        E::mma(acc[mt][0], a[mt][ks], b0, b1);
        E::mma(acc[mt][1], a[mt][ks], b2, b3);
      }
    }
  }
}

#if MAXSIM_HAS_WGMMA
// wgmma: every m-block's NKS k steps on the stage at descriptor desc0 (koff(ks): the k step's byte
// offset in the stage), one commit group per m-block so that the fold of block 0 overlaps block 1.
// All k steps run unconditionally (zero-filled past dim): a runtime guard splits the HGMMA chain into
// basic blocks and ptxas then serializes every wgmma (bench/NOTES.md, 'What serializes wgmma').
template <class E, int TN, int MB, int NKS, int NACC, class KOff>
__device__ __forceinline__ void wgmma_tile(typename E::Acc (&acc)[MB][NACC], const uint32_t (&a)[MB][NKS][4],
                                           uint64_t desc0, KOff&& koff) {
#pragma unroll
  for (int m = 0; m < MB; ++m) {
#pragma unroll
    for (int ks = 0; ks < NKS; ++ks) WgmmaOp<E, TN>::run(acc[m], a[m][ks], desc0 + (uint64_t)(koff(ks) >> 4), ks > 0);
    wgmma_commit();
  }
}
// Waits until m-block m is done (at most MB - 1 - m groups pending, so later ones keep running) and
// fences its accumulators; after the last one the warp releases the stage (one arrive per warp).
template <int MB, int NACC, typename Acc>
__device__ __forceinline__ void wgmma_mblock_done(Acc (&acc)[MB][NACC], int m, int lane, uint32_t empty_bar) {
  static_assert(MB == 1 || MB == 2, "MB");
  if (m == MB - 1) wgmma_wait<0>();
  else wgmma_wait<1>();
#pragma unroll
  for (int i = 0; i < NACC; ++i) reg_fence(acc[m][i]);
  if (m == MB - 1) {
    __syncwarp();
    if (lane == 0) mbar_arrive(empty_bar);
  }
}
#endif

}  // namespace maxsim
