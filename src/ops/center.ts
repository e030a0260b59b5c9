// Centered 8-bit documents. Real ColBERT tokens share one strong direction (mean cosine ~0.93), so a
// per-token or per-document 8-bit scale spends most of its range on it. quantize(docs, mode,
// { center }) subtracts a mean vector mu from every document token before quantizing and keeps mu
// with the batch. For a non-empty document, max_j <q_i, d_j - mu> = max_j <q_i, d_j> - <q_i, mu>, so
// each query's scores shift by the constant c(Q) = sum_i <q_i, mu>: rankings are unchanged in exact
// arithmetic, and scoring adds c(Q) back (in float64, from the query values as passed: int8 ones as
// data * scale) so reported scores approximate the uncentered ones. Empty documents stay -Infinity.
// Queries are never centered: their shift would depend on the document.

import { InvalidArgumentError } from '../errors.js';
import { elementReader } from '../floats.js';
import type { TokenBatch, TokenMatrix } from '../tensor.js';

/** What a quantization centers on: nothing (false), the mean of its own tokens (true), or a given mean. */
export type CenterOption = boolean | Float32Array;

function describe(x: unknown): string {
  if (x === null) return 'null';
  if (ArrayBuffer.isView(x)) return `${x.constructor.name}(${(x as unknown as { length: number }).length})`;
  return typeof x === 'string' ? JSON.stringify(x) : typeof x === 'object' ? 'an object' : String(x);
}

/** Validates a mean vector: a Float32Array of dim finite values. */
export function checkMean(mean: unknown, dim: number, name: string): Float32Array {
  if (!(mean instanceof Float32Array) || mean.length !== dim)
    throw new InvalidArgumentError(name, `a Float32Array of ${dim} values (the dimension)`, describe(mean));
  for (let k = 0; k < dim; k++)
    if (!Number.isFinite(mean[k]))
      throw new InvalidArgumentError(`${name}[${k}]`, 'a finite value', String(mean[k]));
  return mean;
}

/** Validates options.center (default false) against the data's dimension. */
export function checkCenter(center: unknown, dim: number, name = 'options.center'): CenterOption {
  if (center === undefined || center === false || center === true) return center === true;
  if (center instanceof Float32Array) return checkMean(center, dim, name);
  throw new InvalidArgumentError(
    name,
    'true, false or a Float32Array mean of the dimension',
    describe(center),
  );
}

/**
 * The mean of the given tokens (spans into [tokens, dim] values), summed in float64 and rounded once
 * to float32 (the stored mu, which both the residuals and the shift use). No tokens: zeros.
 */
export function tokenMean(
  values: Float32Array,
  dim: number,
  starts: ArrayLike<number>,
  lengths: ArrayLike<number>,
): Float32Array {
  const sum = new Float64Array(dim);
  let n = 0;
  for (let b = 0; b < lengths.length; b++) {
    const end = starts[b] + lengths[b];
    for (let t = starts[b]; t < end; t++) {
      const o = t * dim;
      for (let k = 0; k < dim; k++) sum[k] += values[o + k];
    }
    n += lengths[b];
  }
  const mean = new Float32Array(dim);
  if (n > 0) for (let k = 0; k < dim; k++) mean[k] = sum[k] / n;
  for (let k = 0; k < dim; k++) if (!Number.isFinite(mean[k])) refuseNonFinite(values, dim, starts, lengths);
  return mean;
}

/** Names the first token holding a NaN / Infinity (what quantize says of one). */
function refuseNonFinite(
  values: Float32Array,
  dim: number,
  starts: ArrayLike<number>,
  lengths: ArrayLike<number>,
): never {
  for (let b = 0; b < lengths.length; b++)
    for (let t = starts[b]; t < starts[b] + lengths[b]; t++)
      for (let k = 0; k < dim; k++)
        if (!Number.isFinite(values[t * dim + k]))
          throw new InvalidArgumentError(
            'batch',
            'finite values to quantize',
            `a non-finite value at token ${t}`,
          );
  // finite tokens whose float64 sum overflowed cannot happen (|x| < 2^128, fewer than 2^53 tokens)
  throw new InvalidArgumentError('batch', 'finite values to quantize', 'a mean that is not finite');
}

/** The mean of several parts' tokens: their means weighted by their token counts (float64). */
export function combineMeans(parts: ReadonlyArray<{ mean: Float32Array; tokens: number }>): Float32Array {
  const dim = parts[0]?.mean.length ?? 0;
  const sum = new Float64Array(dim);
  let n = 0;
  for (const p of parts) {
    for (let k = 0; k < dim; k++) sum[k] += p.mean[k] * p.tokens;
    n += p.tokens;
  }
  const mean = new Float32Array(dim);
  if (n > 0) for (let k = 0; k < dim; k++) mean[k] = sum[k] / n;
  return mean;
}

/** c(Q) = sum_i <q_i, mu> for every query of the batch, in float64 (int8 values times their scale). */
export function queryShifts(queries: TokenBatch, mean: Float32Array): Float64Array {
  const d = queries.dim;
  const read = elementReader(queries.dtype);
  const scales = queries.dtype === 'int8' ? queries.scales : undefined;
  const out = new Float64Array(queries.count);
  for (let q = 0; q < queries.count; q++) {
    let c = 0;
    const end = queries.starts[q] + queries.lengths[q];
    for (let t = queries.starts[q]; t < end; t++) {
      let dot = 0;
      for (let k = 0; k < d; k++) dot += read(queries.data, t * d + k) * mean[k];
      c += scales ? dot * scales[t] : dot;
    }
    out[q] = c;
  }
  return out;
}

/** Adds row q's shift to every score of row q ([rows, cols] row-major, in place); -Infinity stays. */
export function addShifts(scores: Float32Array, shifts: Float64Array, cols: number): Float32Array {
  for (let q = 0; q < shifts.length; q++) {
    const c = shifts[q];
    if (c === 0) continue;
    for (let i = q * cols; i < (q + 1) * cols; i++) scores[i] += c;
  }
  return scores;
}

/** Queries must not be centered: the shift of a centered query would depend on the document. */
export function refuseCenteredQueries(queries: TokenBatch | TokenMatrix, name: string): void {
  if (queries.mean !== undefined)
    throw new InvalidArgumentError(
      `${name}.mean`,
      'queries without a mean (center only documents: a centered query shifts each document differently)',
      describe(queries.mean),
    );
}

/**
 * The documents' scores with the centering shift added back (when docs carry a mean), checking the
 * mean and refusing centered queries. `scores` is [queries.count, docs.count], changed in place.
 */
export function uncenterScores(queries: TokenBatch, docs: TokenBatch, scores: Float32Array): Float32Array {
  if (docs.mean === undefined) return scores;
  const mean = checkMean(docs.mean, docs.dim, 'docs.mean');
  return addShifts(scores, queryShifts(queries, mean), docs.count);
}
