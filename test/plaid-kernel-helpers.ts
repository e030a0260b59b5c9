// What the compressed index's kernel tests share: a random index (no k-means) and the float64
// reference of the fused residual MaxSim with its error bound.
import { decodeTokens, tablesOf } from '../src/plaid/codec.js';
import type { NativeIndex } from '../src/plaid/native.js';
import { buildLists } from '../src/plaid/plaid.js';

const U = 2 ** -24;

/** A random index (no k-means): random centroids, weights, codes, ragged documents. */
export function randomIndex(
  rand: () => number,
  lengths: number[],
  d: number,
  k: number,
  bits: 2 | 4,
): NativeIndex {
  const levels = 1 << bits;
  const centroids = Float32Array.from({ length: k * d }, () => rand() * 2 - 1);
  const weights = Float32Array.from({ length: d * levels }, () => (rand() * 2 - 1) * 0.3);
  const total = lengths.reduce((a, b) => a + b, 0);
  const padded = Math.ceil(total / 16) * 16;
  const cids = new Int32Array(padded);
  for (let t = 0; t < total; t++) cids[t] = Math.floor(rand() * k);
  const codes = new Uint8Array((padded / 16) * d * 2 * bits);
  for (let i = 0; i < codes.length; i++) codes[i] = Math.floor(rand() * 256);
  // codes of the padding tokens are whatever: the kernels mask those lanes
  const lists = buildLists(Int32Array.from(lengths), cids, k);
  return {
    k,
    d,
    docs: lengths.length,
    bits,
    centroids,
    tables: tablesOf(weights, d, bits),
    cids,
    codes,
    ...lists,
  };
}

function weightsOf(ix: NativeIndex): Float32Array {
  const levels = 1 << ix.bits;
  const w = new Float32Array(ix.d * levels);
  for (let k = 0; k < ix.d; k++) for (let e = 0; e < levels; e++) w[k * levels + e] = ix.tables[k * 16 + e];
  return w;
}

/**
 * float64 MaxSim of the query against decoded documents, with the error bound of each score: fp32
 * rounding, plus the int8 quantization of residual.h where weightMax > 0 (an int8 set's largest weight).
 * keep (a pruning plan, per centroid): the tokens of centroids it leaves out count q . centroid alone.
 */
export function referenceResidual(
  ix: NativeIndex,
  q: Float32Array,
  lq: number,
  doc: number,
  weightMax = 0,
  keep?: Uint8Array,
): { score: number; bound: number } {
  const d = ix.d;
  const b = { bits: ix.bits, d, cutoffs: new Float32Array(0), weights: weightsOf(ix), tables: ix.tables };
  const t0 = ix.docOffsets[doc];
  const t1 = ix.docOffsets[doc + 1];
  if (t1 === t0) return { score: Number.NEGATIVE_INFINITY, bound: 0 };
  const dec = decodeTokens(ix.centroids, b, ix.cids, ix.codes, t0, t1);
  // int8 residual scoring (residual.h): one scale for the table, one per query token
  let wmax = 0;
  for (let k = 0; k < d; k++)
    for (let e = 0; e < 1 << ix.bits; e++) wmax = Math.max(wmax, Math.abs(ix.tables[k * 16 + e]));
  const sw = wmax > 0 ? wmax / (weightMax || 127) : 1;
  let score = 0;
  let bound = 0;
  for (let i = 0; i < lq; i++) {
    let best = Number.NEGATIVE_INFINITY;
    let mag = 0;
    let qmax = 0;
    for (let k = 0; k < d; k++) qmax = Math.max(qmax, Math.abs(q[i * d + k]));
    const sq = qmax > 0 ? qmax / 127 : 1;
    let quant = 0;
    for (let j = 0; j < t1 - t0; j++) {
      let s = 0;
      let cent = 0;
      let m = 0;
      let e8 = 0;
      const c = ix.cids[t0 + j] * d;
      for (let k = 0; k < d; k++) {
        s += q[i * d + k] * dec[j * d + k];
        cent += q[i * d + k] * ix.centroids[c + k];
        const r = Math.abs(dec[j * d + k] - ix.centroids[c + k]);
        // the kernel adds q.c and q.w separately: bound both parts and the decode's rounding
        m += Math.abs(q[i * d + k]) * (Math.abs(ix.centroids[c + k]) + r);
        e8 += (sq / 2) * r + (Math.abs(q[i * d + k]) + sq / 2) * (sw / 2);
      }
      // a token the plan leaves out counts q . centroid alone (the bound's terms cover it)
      best = Math.max(best, !keep || keep[ix.cids[t0 + j]] ? s : cent);
      if (m > mag) mag = m;
      if (e8 > quant) quant = e8;
    }
    score += best;
    bound += (2 * d + lq + 4) * U * mag + (weightMax ? quant * (1 + 1e-5) : 0);
  }
  return { score, bound };
}
