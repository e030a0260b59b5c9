// The plan of a batched index search on the GPU (native/cuda/plaid_search.cc executes it; the engine
// re-checks it, CheckPlaidPlan): rows per query (the longest query rounded up to a warp), the probe
// lists' size, and how many queries one pass holds in the device memory budget.
import { InvalidArgumentError } from '../errors.js';

/** Most centroids probed per query token on the GPU (native PLAID_MAX_NPROBE). */
export const CUDA_MAX_NPROBE = 32;
/** Longest query on the GPU path (native: plan.lq <= 256). */
export const CUDA_MAX_QUERY = 256;
/** Centroids per probe chunk (native PLAID_PROBE_CHUNK). */
export const PROBE_CHUNK = 2048;
/** Most centroids of an index the GPU searches (native PLAID_MAX_SEARCH_CENTROIDS: the probe merge's lists). */
export const CUDA_MAX_CENTROIDS = 32 * 8 * PROBE_CHUNK;
/** Default device memory for one pass's scratch. */
export const DEFAULT_BUDGET = 4 * 2 ** 30;

export interface CudaSearchPlan {
  lq: number;
  nprobe: number;
  np: 4 | 8 | 16 | 32;
  candidates: number;
  rescore: number;
  batch: number;
  threshold: number;
  exact: boolean;
  stages: boolean;
  precision: StagePrecision;
}

/**
 * The arithmetic of the GPU's two product stages (query x centroids, residual scoring): 'float32'
 * the CPU's fp32 chains bitwise (the same candidates and scores as PlaidIndex.search); 'float16'
 * tensor cores, ranking only (the final list is re-scored exactly on the source tokens, by the
 * index or by the corpus that holds it).
 */
export type StagePrecision = 'float32' | 'float16';

export interface PlanInput {
  centroids: number;
  dim: number;
  docs: number;
  /** Queries in the call and the longest one's tokens. */
  queries: number;
  maxLength: number;
  nprobe: number;
  candidates: number;
  rescore: number;
  threshold: number;
  exact: boolean;
  /** The caller re-scores the returned documents exactly (a corpus that keeps its tokens). */
  rescored?: boolean;
  stages?: boolean;
  precision: StagePrecision;
  /** Device bytes one pass may use for its scratch (default DEFAULT_BUDGET). */
  budget?: number;
}

/** Device bytes one query of a pass needs (worst case: every document a candidate). */
export function bytesPerQuery(
  centroids: number,
  lq: number,
  np: number,
  docs: number,
  candidates: number,
  rescore = 0,
  precision: StagePrecision = 'float32',
): number {
  const chunks = Math.ceil(centroids / PROBE_CHUNK);
  return (
    centroids * lq * (precision === 'float16' ? 2 : 4) + // qc
    (precision === 'float16' && lq === 32 ? centroids * lq + lq * 8 : 0) + // its int8 copy, scales
    chunks * lq * np * 8 + // probe lists per chunk
    Math.ceil(centroids / 128) * lq * 8 + // each token's best per group of 128 centroids
    Math.ceil(centroids / 32) * 4 +
    Math.ceil(docs / 32) * 4 + // candidate bits
    docs * 12 + // candidates, their query, their interaction score
    candidates * 12 + // kept, their scores, residual scores
    rescore * 12 + // the final lists, their residual and exact scores
    lq * 1024 * 4
  );
}

export function cudaSearchPlan(p: PlanInput): CudaSearchPlan {
  if (p.maxLength > CUDA_MAX_QUERY)
    throw new InvalidArgumentError(
      'queries',
      `queries of at most ${CUDA_MAX_QUERY} tokens on the GPU index path`,
      `a query of ${p.maxLength}`,
    );
  if (p.centroids > CUDA_MAX_CENTROIDS)
    throw new InvalidArgumentError(
      'index',
      `an index of at most ${CUDA_MAX_CENTROIDS} centroids on the GPU (search it with backend 'cpu')`,
      `${p.centroids} centroids`,
    );
  if (p.nprobe > Math.min(CUDA_MAX_NPROBE, p.centroids))
    throw new InvalidArgumentError(
      'options.nprobe',
      `an integer in [1, ${Math.min(CUDA_MAX_NPROBE, p.centroids)}] on the GPU`,
      String(p.nprobe),
    );
  const lq = Math.max(32, Math.ceil(p.maxLength / 32) * 32);
  const np = p.nprobe <= 4 ? 4 : p.nprobe <= 8 ? 8 : p.nprobe <= 16 ? 16 : 32;
  if (p.dim * (lq + 16) * 4 > 200 * 1024)
    throw new InvalidArgumentError(
      'queries',
      `dim * (query length rounded to 32 + 16) * 4 <= 200 KiB (shared memory) on the GPU`,
      `dim ${p.dim}, length ${p.maxLength}`,
    );
  const ranked = p.exact || p.rescored === true;
  if (p.precision === 'float16' && (!ranked || p.dim % 16 !== 0 || p.dim > 128))
    throw new InvalidArgumentError(
      'options.precision',
      "'float32' unless the final list is re-scored exactly (source tokens kept) and dim is a multiple of 16 in [16, 128]",
      `'float16' (dim ${p.dim}, ${ranked ? 'tokens kept' : 'no source tokens'})`,
    );
  const candidates = Math.max(1, p.candidates);
  const rescore = Math.max(1, Math.min(p.rescore, candidates));
  const per = bytesPerQuery(p.centroids, lq, np, p.docs, candidates, rescore, p.precision);
  const budget = p.budget ?? DEFAULT_BUDGET;
  // float16: each pass also holds a float16 copy of the centroids (the products' operand)
  const fixed = p.precision === 'float16' ? p.centroids * p.dim * 2 : 0;
  // a call of several passes keeps two in flight (the host prepares one while the device runs the
  // other), so each pass gets half the budget
  const whole = Math.floor((budget - fixed) / per);
  const batch = Math.max(
    1,
    Math.min(p.queries, 65535, p.queries <= whole ? whole : Math.floor((budget - 2 * fixed) / (2 * per))),
  );
  return {
    lq,
    nprobe: p.nprobe,
    np,
    candidates,
    rescore,
    batch,
    threshold: p.threshold,
    // the engine's check and message: float16 needs an exact re-score, on the device (where it holds
    // the tokens) or by the caller; it re-scores on the device only where it holds them
    exact: ranked,
    stages: p.stages ?? false,
    precision: p.precision,
  };
}
