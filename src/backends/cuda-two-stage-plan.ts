// How the CUDA two-stage job's exact stage is split (native/cuda/engine_topk.cc, StagesOnDevice). One
// launch scores all its queries against the candidates of all of them, so R queries in one launch
// cost R x R x candidates pairs, of which R x candidates are wanted; groups of G queries cost
// R x G x candidates pairs and R / G launches. Minimising R / G x launch + R x G x candidates x pair
// gives G = sqrt(launch / (candidates x pair)): 8 for a server's int8 pass (32-token queries, 128-token
// documents, 40 candidates), where one launch for 112 queries took 0.81 ms on an H200.

import { InvalidArgumentError } from '../errors.js';

/** A small exact launch's fixed cost on the GPU (launch, ramp and tail), seconds. */
const LAUNCH_SECONDS = 6e-6;
/** The dense rate a small exact launch reaches, FLOP/s (below the all-pairs kernels' ~600 T). */
const SMALL_LAUNCH_FLOPS = 4e14;

let forced: number | undefined;

/**
 * @internal Tests and A/B runs only (maxsim/internal): every two-stage job's exact stage in groups of
 * `queries` (a positive integer), or 'auto' for the plan's own choice.
 */
export function setExactGroup(queries: number | 'auto'): void {
  if (queries !== 'auto' && !(Number.isSafeInteger(queries) && queries >= 1))
    throw new InvalidArgumentError('queries', "a positive integer or 'auto'", String(queries));
  forced = queries === 'auto' ? undefined : queries;
}

/**
 * Queries per exact launch for `rows` queries of `keep` candidates each (rows itself: one launch, as
 * where the host selects: its union of the candidates is rescored in one launch).
 */
export function exactGroupFor(p: {
  rows: number;
  keep: number;
  queryLength: number;
  docLength: number;
  dim: number;
  select: 'device' | 'host';
}): number {
  if (forced !== undefined) return Math.min(forced, Math.max(1, p.rows));
  if (p.select === 'host') return Math.max(1, p.rows);
  const pair = (2 * Math.max(1, p.queryLength) * Math.max(1, p.docLength) * p.dim) / SMALL_LAUNCH_FLOPS;
  const best = Math.round(Math.sqrt(LAUNCH_SECONDS / (Math.max(1, p.keep) * pair)));
  return Math.min(Math.max(1, p.rows), Math.max(1, best));
}
