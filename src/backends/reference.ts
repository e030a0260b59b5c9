// Float64 reference for every operator: plain loops, no tiling, no shortcuts. Tests judge the fast
// kernels against these; nothing on a hot path calls them.

import { elementReader } from '../floats.js';
import { type Hit, matrixAsBatch, type TokenBatch, type TokenMatrix } from '../tensor.js';

/**
 * All tokens of a batch as float64 values (int8 multiplied by its per-token scale, plus the mean a
 * centered quantization subtracted).
 */
export function decodeBatch64(batch: TokenBatch): Float64Array {
  const read = elementReader(batch.dtype);
  const out = new Float64Array(batch.data.length);
  const d = batch.dim;
  const mean = batch.mean;
  for (let i = 0; i < out.length; i++) {
    const v = read(batch.data, i);
    out[i] = (batch.scales ? v * batch.scales[Math.floor(i / d)] : v) + (mean ? mean[i % d] : 0);
  }
  return out;
}

function asBatch(x: TokenMatrix | TokenBatch): TokenBatch {
  return x.kind === 'matrix' ? matrixAsBatch(x) : x;
}

/**
 * MaxSim of every query against every document: out[q * B + b] = sum_i max_j <Q_i, D_j>.
 * A document without tokens scores -Infinity; a query without tokens scores 0.
 */
export function referenceMaxsim(queries: TokenMatrix | TokenBatch, docs: TokenBatch): Float64Array {
  const qb = asBatch(queries);
  const q = decodeBatch64(qb);
  const dv = decodeBatch64(docs);
  const d = docs.dim;
  const out = new Float64Array(qb.count * docs.count);
  for (let qi = 0; qi < qb.count; qi++) {
    const qs = qb.starts[qi];
    const lq = qb.lengths[qi];
    for (let b = 0; b < docs.count; b++) {
      const ds = docs.starts[b];
      const ld = docs.lengths[b];
      if (ld === 0) {
        out[qi * docs.count + b] = Number.NEGATIVE_INFINITY;
        continue;
      }
      let sum = 0;
      for (let i = 0; i < lq; i++) {
        const qo = (qs + i) * d;
        let best = Number.NEGATIVE_INFINITY;
        for (let j = 0; j < ld; j++) {
          const dO = (ds + j) * d;
          let dot = 0;
          for (let k = 0; k < d; k++) dot += q[qo + k] * dv[dO + k];
          if (dot > best) best = dot;
        }
        sum += best;
      }
      out[qi * docs.count + b] = sum;
    }
  }
  return out;
}

/** Top-k of one row of scores: descending score, ties to the lower index. */
export function referenceTopK(scores: ArrayLike<number>, k: number): Hit[] {
  const idx = Array.from({ length: scores.length }, (_, i) => i);
  idx.sort((a, b) => (scores[b] > scores[a] ? 1 : scores[b] < scores[a] ? -1 : a - b));
  return idx.slice(0, Math.min(k, idx.length)).map((i) => ({ index: i, score: scores[i] }));
}
