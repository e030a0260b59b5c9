// The plan of a CUDA Chamfer forward pass, decided here and passed down as two tables (the layout of
// ChamferParams::clouds and ::units in native/cuda/kernels/maxsim_chamfer_params.h). The engine
// (native/cuda/chamfer.cc) checks that the tables are the ones the kernels can run on these clouds
// (CheckChamferPlan in native/cuda/chamfer_plan.h) and executes them.
//
// Each cloud gets a grid of 2^(bits x dim) cells (its points are sorted along the grid's Morton
// curve) and a range of chunk and group boxes; the search is cut into units of CHAMFER_UNIT sources,
// one warp each, for every (direction, pair) whose clouds are both non-empty.

import { CHAMFER_CELL_BITS, CHAMFER_CHUNK, CHAMFER_GROUP, CHAMFER_UNIT } from './constants.js';

export interface ChamferPlan {
  /** [2B + 1, 4]: per cloud (P's, then Q's) its first cell, cell bits per axis, first chunk, first group; the last row holds the totals. */
  clouds: Float64Array;
  /** [units, 3]: direction (0: P -> Q, 1: Q -> P), pair, first sorted source. */
  units: Float64Array;
}

/**
 * Cell bits per axis for a cloud of n points: about two points per cell or more (a finer grid does
 * not shorten the sorted runs' boxes), CHAMFER_CELL_BITS bits at most over all axes.
 */
export function chamferCellBits(n: number, dim: number): number {
  let bits = 0;
  while ((bits + 1) * dim <= CHAMFER_CELL_BITS && 2 * 2 ** ((bits + 1) * dim) <= n) bits++;
  return bits;
}

/** The plan for B pairs of clouds of these sizes (P's cloud b has pLengths[b] points). */
export function planChamfer(
  pLengths: ArrayLike<number>,
  qLengths: ArrayLike<number>,
  dim: number,
  bidirectional: boolean,
): ChamferPlan {
  const pairs = pLengths.length;
  const clouds = new Float64Array((2 * pairs + 1) * 4);
  let cell = 0;
  let chunk = 0;
  let group = 0;
  let row = 0;
  for (const lengths of [pLengths, qLengths]) {
    for (let b = 0; b < pairs; b++) {
      const n = lengths[b];
      const bits = chamferCellBits(n, dim);
      clouds.set([cell, bits, chunk, group], 4 * row++);
      if (n > 0) cell += 2 ** (bits * dim);
      chunk += Math.ceil(n / CHAMFER_CHUNK);
      group += Math.ceil(n / CHAMFER_GROUP);
    }
  }
  clouds.set([cell, 0, chunk, group], 4 * row);
  const units: number[] = [];
  const directions = bidirectional ? 2 : 1;
  for (let dir = 0; dir < directions; dir++) {
    const sources = dir === 0 ? pLengths : qLengths;
    const targets = dir === 0 ? qLengths : pLengths;
    for (let b = 0; b < pairs; b++) {
      // an empty target needs no search: the finalize kernel writes its -1 / +inf itself
      if (sources[b] === 0 || targets[b] === 0) continue;
      for (let i = 0; i < sources[b]; i += CHAMFER_UNIT) units.push(dir, b, i);
    }
  }
  return { clouds, units: Float64Array.from(units) };
}
