// Float64 reference for MaxSim training: the argmax forward and the backward pass as plain loops.
// Tests judge the native training engine against these; nothing on a hot path calls them.
import type { TokenBatch } from '../tensor.js';
import { decodeBatch64 } from './reference.js';

export type ReferencePairs = 'all' | 'diagonal';

export interface ReferenceTrainResult {
  /** [Nq * B] ('all') or [B] ('diagonal'); -Infinity for an empty document. */
  scores: Float64Array;
  /** argmax[p * stride + s]: the document token query token s of pair p matches (-1: none). */
  argmax: Int32Array;
  /** Best minus second-best dot product per argmax entry (Infinity with one candidate): near-ties show up here. */
  margin: Float64Array;
  stride: number;
}

/** Optional float64 token values that replace the batches' own (for finite differences). */
export interface ReferenceValues {
  queries?: Float64Array;
  docs?: Float64Array;
}

function longest(batch: TokenBatch): number {
  let m = batch.maxLength;
  for (let i = 0; i < batch.count; i++) m = Math.max(m, batch.lengths[i]);
  return m;
}

function pairCount(queries: TokenBatch, docs: TokenBatch, pairs: ReferencePairs): number {
  return pairs === 'all' ? queries.count * docs.count : queries.count;
}

/** The (query, document) of pair p. */
function pairAt(p: number, docs: TokenBatch, pairs: ReferencePairs): [number, number] {
  return pairs === 'all' ? [Math.floor(p / docs.count), p % docs.count] : [p, p];
}

/** Scores and argmax with the engine's rules: ties to the lowest document token, padding never chosen. */
export function referenceMaxsimTrain(
  queries: TokenBatch,
  docs: TokenBatch,
  pairs: ReferencePairs = 'all',
  values: ReferenceValues = {},
): ReferenceTrainResult {
  const qv = values.queries ?? decodeBatch64(queries);
  const dv = values.docs ?? decodeBatch64(docs);
  const d = docs.dim;
  const stride = longest(queries);
  const n = pairCount(queries, docs, pairs);
  const scores = new Float64Array(n);
  const argmax = new Int32Array(n * stride).fill(-1);
  const margin = new Float64Array(n * stride).fill(Number.POSITIVE_INFINITY);
  for (let p = 0; p < n; p++) {
    const [i, b] = pairAt(p, docs, pairs);
    const ld = docs.lengths[b];
    if (ld === 0) {
      scores[p] = Number.NEGATIVE_INFINITY;
      continue;
    }
    let sum = 0;
    for (let s = 0; s < queries.lengths[i]; s++) {
      const qo = (queries.starts[i] + s) * d;
      let best = Number.NEGATIVE_INFINITY;
      let second = Number.NEGATIVE_INFINITY;
      let where = -1;
      for (let t = 0; t < ld; t++) {
        const dOff = (docs.starts[b] + t) * d;
        let dot = 0;
        for (let k = 0; k < d; k++) dot += qv[qo + k] * dv[dOff + k];
        if (dot > best) {
          second = best;
          best = dot;
          where = t;
        } else if (dot > second) {
          second = dot;
        }
      }
      sum += best;
      argmax[p * stride + s] = where;
      margin[p * stride + s] = best - second;
    }
    scores[p] = sum;
  }
  return { scores, argmax, margin, stride };
}

/**
 * Gradients of sum_p gradScores[p] * score[p] through a saved argmax, in float64, with the layouts of
 * the token buffers: dQ[i, s] = sum_j g[i, j] D[j, t*], dD[j, t] = sum over t* = t of g[i, j] Q[i, s].
 */
export function referenceBackward(
  queries: TokenBatch,
  docs: TokenBatch,
  argmax: Int32Array,
  stride: number,
  gradScores: ArrayLike<number>,
  pairs: ReferencePairs = 'all',
  values: ReferenceValues = {},
): { dQ: Float64Array; dD: Float64Array } {
  const qv = values.queries ?? decodeBatch64(queries);
  const dv = values.docs ?? decodeBatch64(docs);
  const d = docs.dim;
  const dQ = new Float64Array(queries.data.length);
  const dD = new Float64Array(docs.data.length);
  for (let p = 0; p < pairCount(queries, docs, pairs); p++) {
    const [i, b] = pairAt(p, docs, pairs);
    const g = gradScores[p];
    for (let s = 0; s < queries.lengths[i]; s++) {
      const t = argmax[p * stride + s];
      if (t < 0 || g === 0) continue;
      const qo = (queries.starts[i] + s) * d;
      const dOff = (docs.starts[b] + t) * d;
      for (let k = 0; k < d; k++) {
        dQ[qo + k] += g * dv[dOff + k];
        dD[dOff + k] += g * qv[qo + k];
      }
    }
  }
  return { dQ, dD };
}
