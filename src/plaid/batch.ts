// The CPU stages' side of PlaidIndex.search and searchAll: the options checked into what the native
// stages take, and a batch of queries flattened for the batched stages (native/cpu/residual_batch.cc:
// one pass over the centroids for a pass of queries, the later stages one query per thread), its
// results cut back into one result per query, each what the single-query stages return for it.
import { InvalidArgumentError } from '../errors.js';
import { decodeToFloat32 } from '../floats.js';
import { isTokenBatch, type TokenBatch, type TokenMatrix } from '../tensor.js';
import { defaultSearch, INTERACTIONS, searchSettings } from './defaults.js';
import {
  type NativeIndex,
  type NativeSearchOptions,
  type NativeSearchStats,
  residualAddon,
} from './native.js';
import type { IndexSearchOptions } from './plaid.js';

/** What one query's native stages return. */
export interface NativeHits {
  ids: Int32Array;
  scores: Float32Array;
  stats: NativeSearchStats;
}

/** The checked settings of a search: k and rescore for the exact stage, the rest for the native stages. */
export function cpuSearchPlan(
  options: IndexSearchOptions,
  docs: number,
  centroids: number,
): { k: number; rescore: number; native: NativeSearchOptions } {
  const { k, nprobe, candidates, rescore, threshold, prune } = searchSettings(options, docs);
  const interaction = options.interaction ?? defaultSearch(k, docs).interaction;
  if (!INTERACTIONS.includes(interaction))
    throw new InvalidArgumentError('options.interaction', "'lists', 'bags' or 'hybrid'", String(interaction));
  const native: NativeSearchOptions = {
    nprobe: Math.min(nprobe, centroids),
    candidates: Math.max(candidates, k),
    threshold,
    prune,
    interaction,
    threads: options.threads,
    isa: options.isa,
  };
  return { k, rescore, native };
}

/** The batch's queries as matrices over its data (what search takes) and as float32 rows back to back. */
export function splitQueries(
  queries: TokenBatch,
  dim: number,
): { matrices: TokenMatrix[]; rows: Float32Array; lengths: Int32Array } {
  if (!isTokenBatch(queries)) throw new InvalidArgumentError('queries', 'a TokenBatch', typeof queries);
  if (queries.dtype === 'int8') throw new InvalidArgumentError('queries.dtype', 'a float dtype', "'int8'");
  if (queries.dim !== dim)
    throw new InvalidArgumentError('queries.dim', `${dim} (the index's dim)`, String(queries.dim));
  const lengths = Int32Array.from(queries.lengths.subarray(0, queries.count));
  const rows = new Float32Array(lengths.reduce((n, l) => n + l, 0) * dim);
  const matrices: TokenMatrix[] = [];
  let at = 0;
  for (let i = 0; i < queries.count; i++) {
    const s = queries.starts[i] * dim;
    const data = queries.data.subarray(s, s + lengths[i] * dim);
    matrices.push({ kind: 'matrix', dtype: queries.dtype, data, length: lengths[i], dim });
    rows.set(decodeToFloat32(data, queries.dtype, dim).subarray(0, lengths[i] * dim), at);
    at += lengths[i] * dim;
  }
  return { matrices, rows, lengths };
}

/** The native stages of every query of the batch, one result per query. */
export async function nativeSearchBatch(
  index: NativeIndex,
  rows: Float32Array,
  lengths: Int32Array,
  options: NativeSearchOptions,
): Promise<NativeHits[]> {
  if (lengths.length === 0) return [];
  const r = await residualAddon().searchBatch(index, rows, lengths, options);
  return r.stats.map((stats, i) => ({
    ids: r.ids.subarray(r.offsets[i], r.offsets[i + 1]),
    scores: r.scores.subarray(r.offsets[i], r.offsets[i + 1]),
    stats,
  }));
}
