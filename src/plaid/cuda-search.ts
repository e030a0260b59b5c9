// Batched search of a PlaidIndex on the GPU: the index (and its source tokens, when kept) uploaded
// once per index and device, every stage of a batch of queries on the device (query x centroids,
// nprobe per token, inverted lists, centroid interaction with pruning, the fused decompress-MaxSim,
// the exact re-score), the same candidate sets and the same returned documents as the CPU path
// (PlaidIndex.search) for the same options.

import { nativeCodec } from '../codec-native.js';
import { InvalidArgumentError } from '../errors.js';
import { decodeToFloat32 } from '../floats.js';
import { type Hit, isTokenBatch, type TokenBatch } from '../tensor.js';
import { type PlaidCudaSearch, type PlaidHandle, plaidCuda } from './cuda-native.js';
import { cudaSearchPlan, type StagePrecision } from './cuda-plan.js';
import { searchSettings } from './defaults.js';
import type { NativeIndex } from './native.js';
import type { IndexSearchOptions, IndexSearchResult, IndexSearchStats } from './plaid.js';

/** What the GPU path needs of an index (PlaidIndex satisfies it). */
export interface DeviceIndexSource {
  readonly native: NativeIndex;
  readonly count: number;
  readonly dim: number;
  readonly centroids: number;
  /** The source documents in index order (parts), or undefined when the index keeps none. */
  sourceTokens(): readonly TokenBatch[] | undefined;
}

export interface CudaIndexSearchOptions extends IndexSearchOptions {
  device?: number;
  /** Keep every stage's output (tests). */
  stages?: boolean;
  /** Device bytes of one pass's scratch (the plan's batch). */
  budget?: number;
  /**
   * The product stages' arithmetic (StagePrecision): default 'float16' where it applies (source
   * tokens kept, dim a multiple of 16 up to 128, values in float16's comfortable range), else 'float32'
   * (a call whose queries fall outside that range, [2^-8, 2^12], runs in float32). An explicit
   * 'float16' for queries or centroids outside it is refused.
   */
  precision?: StagePrecision;
  /**
   * The caller re-scores the returned documents exactly on their tokens (a corpus's index segment,
   * which holds no tokens of its own): float16 then applies, and is the default, as where the index
   * keeps its tokens. The returned scores are then residual scores, to be replaced by the caller's.
   */
  rescored?: boolean;
}

// float16 keeps ~11 bits of every element where magnitudes sit in [2^-8, 2^12]; outside it (tiny or
// huge embeddings) the products would lose their ranking, so the default stays float32.
const FP16_LOW = 2 ** -8;
const FP16_HIGH = 2 ** 12;
const centroidRange = new WeakMap<object, boolean>();

function largest(x: Float32Array): number {
  let m = nativeCodec()?.maxAbs(x);
  if (m === undefined) {
    m = 0;
    for (let i = 0; i < x.length; i++) {
      const a = Math.abs(x[i]);
      if (a > m) m = a;
    }
  }
  return m;
}

function inRange(x: Float32Array): boolean {
  const m = largest(x);
  return m >= FP16_LOW && m <= FP16_HIGH;
}

// The queries' rows as one float32 array: the batch's own data where it is float32 and its rows
// follow each other (no copy), else decoded and packed.
function queryRows(queries: TokenBatch, rows: number): Float32Array {
  const d = queries.dim;
  let dense = queries.dtype === 'float32';
  for (let i = 1; dense && i < queries.count; i++)
    dense = queries.starts[i] === queries.starts[i - 1] + queries.lengths[i - 1];
  const s0 = queries.count > 0 ? queries.starts[0] * d : 0;
  if (dense) return (queries.data as Float32Array).subarray(s0, s0 + rows * d);
  const q = new Float32Array(rows * d);
  let at = 0;
  for (let i = 0; i < queries.count; i++) {
    const s = queries.starts[i] * d;
    const row = queries.data.subarray(s, s + queries.lengths[i] * d) as Float32Array | Uint16Array;
    q.set(decodeToFloat32(row, queries.dtype, d).subarray(0, queries.lengths[i] * d), at);
    at += queries.lengths[i] * d;
  }
  return q;
}

function centroidsInRange(index: DeviceIndexSource): boolean {
  let c = centroidRange.get(index);
  if (c === undefined) {
    c = inRange(index.native.centroids);
    centroidRange.set(index, c);
  }
  return c;
}

// The queries' range is checked by the engine, a pass at a time on its worker (off the JS thread and
// a pass ahead of the device): a pass outside it is refused with this code.
const HALF_RANGE = 'MAXSIM_HALF_RANGE';

function defaultPrecision(index: DeviceIndexSource, exact: boolean): StagePrecision {
  if (!exact || index.dim % 16 !== 0 || index.dim > 128) return 'float32';
  return centroidsInRange(index) ? 'float16' : 'float32';
}

// An explicit 'float16' outside float16's range would rank garbage (products overflow to inf and
// NaN, or vanish), and the final lists could come back short: refused, naming the magnitude.
const RANGE =
  "'float32' where the queries' or the centroids' largest magnitude lies outside [2^-8, 2^12] (float16's range for the ranking stages)";

function checkCentroidRange(index: DeviceIndexSource) {
  if (!centroidsInRange(index))
    throw new InvalidArgumentError(
      'options.precision',
      RANGE,
      `'float16' with centroids of largest magnitude ${largest(index.native.centroids)}`,
    );
}

const uploaded = new WeakMap<object, Map<number, Promise<{ handle: PlaidHandle; bytes: number }>>>();

/** The index resident on `device` (uploaded on first use, kept while the index lives). */
export function deviceIndex(
  index: DeviceIndexSource,
  device = 0,
): Promise<{ handle: PlaidHandle; bytes: number }> {
  const m = uploaded.get(index) ?? new Map<number, Promise<{ handle: PlaidHandle; bytes: number }>>();
  uploaded.set(index, m);
  let p = m.get(device);
  if (!p) {
    const tokens = index.sourceTokens();
    p = plaidCuda().plaidIndex(device, index.native, tokens ? [...tokens] : undefined);
    p.catch(() => m.delete(device));
    m.set(device, p);
  }
  return p;
}

export interface CudaBatchResult {
  results: IndexSearchResult[];
  /** The whole batch's counts and device milliseconds per stage. */
  batch: PlaidCudaSearch['stats'];
  stages?: PlaidCudaSearch['stages'];
  /** The product stages' arithmetic this batch ran with. */
  precision: StagePrecision;
}

/** The k best documents of every query of the batch, through the index on the GPU. */
export async function cudaSearchBatch(
  index: DeviceIndexSource,
  queries: TokenBatch,
  options: CudaIndexSearchOptions,
): Promise<CudaBatchResult> {
  if (!isTokenBatch(queries)) throw new InvalidArgumentError('queries', 'a TokenBatch', typeof queries);
  if (queries.dtype === 'int8') throw new InvalidArgumentError('queries.dtype', 'a float dtype', "'int8'");
  if (queries.dim !== index.dim)
    throw new InvalidArgumentError('queries.dim', `${index.dim} (the index's dim)`, String(queries.dim));
  const { k, nprobe, candidates, rescore, threshold } = searchSettings(options, index.count);
  const device = options.device ?? 0;
  const d = queries.dim;
  let rows = 0;
  let maxLength = 0;
  for (let i = 0; i < queries.count; i++) {
    rows += queries.lengths[i];
    maxLength = Math.max(maxLength, queries.lengths[i]);
  }
  const q = queryRows(queries, rows);
  const lengths = Int32Array.from(queries.lengths.subarray(0, queries.count));
  const exact = index.sourceTokens() !== undefined;
  const rescored = options.rescored ?? false;
  if (typeof rescored !== 'boolean')
    throw new InvalidArgumentError('options.rescored', 'a boolean', String(rescored));
  let precision = options.precision ?? defaultPrecision(index, exact || rescored);
  if (precision !== 'float32' && precision !== 'float16')
    throw new InvalidArgumentError('options.precision', "'float32' or 'float16'", String(precision));
  if (options.precision === 'float16') checkCentroidRange(index);
  const plan = (p: StagePrecision) =>
    cudaSearchPlan({
      centroids: index.centroids,
      dim: d,
      docs: index.count,
      queries: queries.count,
      maxLength,
      nprobe: Math.min(nprobe, index.centroids),
      candidates: Math.max(candidates, k),
      rescore,
      threshold,
      exact,
      rescored,
      stages: options.stages,
      precision: p,
      budget: options.budget,
    });
  const first = plan(precision);
  const { handle } = await deviceIndex(index, device);
  let r: PlaidCudaSearch;
  try {
    r = await plaidCuda().plaidSearch(handle, q, lengths, first);
  } catch (e) {
    if ((e as { code?: unknown }).code !== HALF_RANGE) throw e;
    if (options.precision === 'float16') {
      const m = largest(q);
      throw new InvalidArgumentError(
        'options.precision',
        RANGE,
        m >= FP16_LOW && m <= FP16_HIGH
          ? `'float16' with a pass of up to ${first.batch} queries whose largest magnitude lies outside that range`
          : `'float16' with queries of largest magnitude ${m}`,
      );
    }
    // the default: queries outside float16's range rank in float32 (the same candidates as the CPU)
    precision = 'float32';
    r = await plaidCuda().plaidSearch(handle, q, lengths, plan(precision));
  }
  const n = Math.max(1, queries.count);
  const st = r.stats;
  const results: IndexSearchResult[] = [];
  for (let i = 0; i < queries.count; i++) {
    const hits: Hit[] = [];
    for (let j = r.offsets[i]; j < Math.min(r.offsets[i + 1], r.offsets[i] + k); j++)
      hits.push({ index: r.docs[j], score: r.scores[j] });
    const stats: IndexSearchStats = {
      scores: exact ? 'exact' : 'residual',
      probed: st.probed / n,
      generated: st.generated / n,
      keptCentroids: index.centroids,
      scored: st.scored / n,
      rescored: st.rescored / n,
      ms: {
        centroids: st.msCentroids / n,
        candidates: st.msCandidates / n,
        interaction: st.msInteraction / n,
        residual: st.msResidual / n,
        rescore: st.msRescore / n,
      },
      isa: 'cuda',
    };
    results.push({ hits, stats });
  }
  return { results, batch: st, stages: r.stages, precision };
}
