// maxsim_wgmma.cu: the fp16 / bf16 entry points of the warp-specialized Hopper MaxSim kernel (sm_90a
// only) for the compute-bound regime (long queries, ColPali shapes, all-pairs). The body, its design
// and its launch contract are in maxsim_wgmma.cuh, shared with the 8-bit types (maxsim_8bit.cuh):
// here it runs with the F16 / BF16 policies (two 128-byte K atoms per token, wgmma.m64nTNk16, no
// scales, the full-tile row max on bit patterns). The rows: MAXSIM_WGMMA_VARIANTS in maxsim_registry.h.
#include "maxsim_registry.h"
#include "maxsim_wgmma.cuh"

#define MAXSIM_WGMMA_ENTRY(NAME, E, NCONS, MB, TN, S, PP)                                          \
  extern "C" __global__ void __launch_bounds__(MAXSIM_WGMMA_BLOCK(NCONS), 1) NAME(const MaxsimParams p) { \
    maxsim::wgmma_body<maxsim::E, NCONS, MB, TN, S, PP>(p);                                               \
  }
// TMA variants: the documents' tensor map is the second parameter (variants.json "tmaBox": [64, TN])
#define MAXSIM_WGMMA_TMA_ENTRY(NAME, E, NCONS, MB, TN, S, PP)                                           \
  extern "C" __global__ void __launch_bounds__(MAXSIM_WGMMA_BLOCK(NCONS), 1)                                    \
      NAME(const MaxsimParams p, const __grid_constant__ maxsim::TmaMap docs_map) {                     \
    maxsim::wgmma_body<maxsim::E, NCONS, MB, TN, S, PP, true>(p, &docs_map);                                    \
  }

// one registry row (MAXSIM_WGMMA_VARIANTS in maxsim_registry.h, with the numbers and the smem formula)
// -> the f16 and bf16 entry points; then, for the rows that say so, their TMA twins
#define MAXSIM_WGMMA_ROW(SFX, NCONS, MB, TN, S, PP, TMA)                  \
  MAXSIM_WGMMA_ENTRY(maxsim_wgmma_##SFX##_f16, F16, NCONS, MB, TN, S, PP) \
  MAXSIM_WGMMA_ENTRY(maxsim_wgmma_##SFX##_bf16, BF16, NCONS, MB, TN, S, PP)
#define MAXSIM_WGMMA_TMA_ROW(SFX, NCONS, MB, TN, S, PP, TMA)                                     \
  MAXSIM_IF_##TMA(MAXSIM_WGMMA_TMA_ENTRY(maxsim_wgmma_tma_##SFX##_f16, F16, NCONS, MB, TN, S, PP) \
                      MAXSIM_WGMMA_TMA_ENTRY(maxsim_wgmma_tma_##SFX##_bf16, BF16, NCONS, MB, TN, S, PP))
MAXSIM_WGMMA_VARIANTS(MAXSIM_WGMMA_ROW)
MAXSIM_WGMMA_VARIANTS(MAXSIM_WGMMA_TMA_ROW)
