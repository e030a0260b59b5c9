// maxsim_chamfer.cu: nearest neighbours and the Chamfer distance between point clouds on the GPU, the
// CUDA twin of native/cpu/chamfer.cc, so the argmin and the distances are bitwise those of the CPU's
// FMA kernel sets (AVX2 / AVX-512):
//   - centre c of a pair = midpoint of its bounding box (c = lo * 0.5f + hi * 0.5f, separate roundings),
//     centred rows x - c and |x - c|^2 summed over k in order with separate fp32 roundings;
//   - search key |q|^2 - 2 p.q as fmaf(-2p_k, q_k, acc) over k in order from acc = |q|^2; the argmin is
//     the lowest target index among the smallest keys (the CPU's strict-< scan; NaN keys never win, an
//     all-NaN row keeps index 0);
//   - reported distance sum_k (p_k - q_k)^2 in double (separate roundings), rounded once to fp32;
//   - gradients: per row, the own term then the CSR sources in ascending order, fp64, one rounding.
// The search visits the targets in another order than the CPU and skips some, and still finds that
// argmin: every cloud is sorted along a Morton curve of a grid of cells over the pair's bounding box
// (a counting sort through the same CSR kernels as the backward), so that runs of 32 sorted points
// (chunks) have small bounding boxes; a warp skips a chunk when the distance between its sources' box
// and the chunk's box, rounded down, exceeds every source's best key so far plus a bound on the key's
// rounding error (ChamferParams::pair_x2): such a chunk holds no key below or equal to a best. Ties
// between chunks are settled on the original index. No float atomics except in the atomic backward.
// The device functions live by job in maxsim_chamfer_grid.cuh (bounds, cells, Morton order, boxes),
// maxsim_chamfer_nearest.cuh (the search, Finalize) and maxsim_chamfer_backward.cuh (CSR, gradients).
//
// LAUNCH CONTRACTS (ChamferParams by value, dynamic smem 0, static smem below 48 KiB):
//   chamfer_bounds        any grid, 256 threads: the pairs' bounding boxes into bounds (its lo keys set
//                         to 0xffffffff and its hi keys to 0 first).
//   chamfer_center        any grid, 256 threads: centres, extents; zeroes pair_x2.
//   chamfer_cell_count    any grid, 256 threads: counts (cells, zeroed first) += the points of each cell.
//   the scan below with rows = cells, then chamfer_cell_place (any grid, 256: perm), chamfer_csr_sort with
//     rows = cells, sources = perm (each cell's points in row order), then
//   chamfer_prep          any grid, 256 threads: the centred rows in sorted order.
//   chamfer_boxes         block (256,1,1), any grid: one warp per group (a lane per chunk); chunk and group
//                         boxes, pair_x2.
//   chamfer_nearest_d{1..8} block (ChamferThreads(D),1,1), any grid: one unit (kChamferUnit sources) per
//                         warp; warps stride over units. Writes each source's best key and argmin.
//   chamfer_finalize      any grid, 256 threads: the distances of the chosen neighbours; -1 / +inf for
//                         an empty target cloud.
//   backward (CSR): chamfer_csr_count (any grid, 256 threads; counts zeroed first) -> chamfer_scan_local
//     block (1024,1,1), grid (ceil(rows / 1024),1,1) -> chamfer_scan_sums block (1024,1,1), grid (1,1,1)
//     -> chamfer_scan_add block (1024,1,1), grid (ceil(rows / 1024),1,1) (also resets counts to 0) ->
//     chamfer_csr_fill (any grid, 256) -> chamfer_csr_sort (any grid, 256: one thread per row, heap sort)
//     -> chamfer_grad (any grid, 256: one thread per row).
//   chamfer_grad_atomic   any grid, 256 threads; dp / dq zeroed first. NOT deterministic.
#include <stdint.h>

#include "maxsim_chamfer_params.h"
#include "maxsim_scan.cuh"

namespace maxsim_chamfer {

constexpr int kChunk = static_cast<int>(kChamferChunk);
constexpr int kGroup = 4;                     // targets loaded from shared memory at once
constexpr unsigned kFull = 0xffffffffu;
constexpr uint32_t kNone = 0xffffffffu;
static_assert(kChunk == 32 && kChamferGroup == 32 * kChamferChunk, "a lane per target of a chunk, per chunk of a group");

__device__ inline int64_t Stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }
__device__ inline int64_t Tid() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline float Inf() { return __int_as_float(0x7f800000); }

// The pair of compact point g: the largest b with off[b] <= g (off ascending, off[0] = 0).
__device__ inline int64_t PairOf(const int64_t* off, int64_t num_pairs, int64_t g) {
  int64_t lo = 0, hi = num_pairs - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) >> 1;
    if (off[mid] <= g) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// The cloud (index into clouds) whose [base, next base) range of `field` holds x.
__device__ inline int64_t CloudOf(const int64_t* clouds, int64_t num_clouds, int field, int64_t x) {
  int64_t lo = 0, hi = num_clouds - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) >> 1;
    if (clouds[mid * 4 + field] <= x) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Floats as unsigned keys in the floats' order (-0 below +0), for atomicMin / atomicMax.
__device__ inline uint32_t OrderedKey(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}
__device__ inline float FromOrderedKey(uint32_t k) { return __uint_as_float((k & 0x80000000u) != 0 ? (k & 0x7fffffffu) : ~k); }

}  // namespace maxsim_chamfer

// The device functions, by job (each header reopens namespace maxsim_chamfer).
#include "maxsim_chamfer_grid.cuh"
#include "maxsim_chamfer_nearest.cuh"
#include "maxsim_chamfer_backward.cuh"

using namespace maxsim_chamfer;

extern "C" __global__ void __launch_bounds__(256) chamfer_bounds(const ChamferParams p) { Bounds(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_center(const ChamferParams p) { Center(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_cell_count(const ChamferParams p) { CellCount(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_cell_place(const ChamferParams p) { CellPlace(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_prep(const ChamferParams p) { Prep(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_boxes(const ChamferParams p) { Boxes(p); }
#define CHAMFER_NEAREST(D)                                                                                \
  extern "C" __global__ void __launch_bounds__(ChamferThreads(D), ChamferBlocksPerSm(D)) chamfer_nearest_d##D(const ChamferParams p) { \
    Nearest<D>(p);                                                                                        \
  }
CHAMFER_NEAREST(1)
CHAMFER_NEAREST(2)
CHAMFER_NEAREST(3)
CHAMFER_NEAREST(4)
CHAMFER_NEAREST(5)
CHAMFER_NEAREST(6)
CHAMFER_NEAREST(7)
CHAMFER_NEAREST(8)
static_assert(MAXSIM_CHAMFER_MAX_DIM == 8, "chamfer_nearest_d1..d8 are the point dimensions the engines take");
extern "C" __global__ void __launch_bounds__(256) chamfer_finalize(const ChamferParams p) { Finalize(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_csr_count(const ChamferParams p) { CsrCount(p); }
extern "C" __global__ void __launch_bounds__(1024) chamfer_scan_local(const ChamferParams p) { ScanLocal(p); }
extern "C" __global__ void __launch_bounds__(1024) chamfer_scan_sums(const ChamferParams p) { ScanSums(p); }
extern "C" __global__ void __launch_bounds__(1024) chamfer_scan_add(const ChamferParams p) { ScanAdd(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_csr_fill(const ChamferParams p) { CsrFill(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_csr_sort(const ChamferParams p) { CsrSort(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_grad(const ChamferParams p) { Grad(p); }
extern "C" __global__ void __launch_bounds__(256) chamfer_grad_atomic(const ChamferParams p) { GradAtomic(p); }
