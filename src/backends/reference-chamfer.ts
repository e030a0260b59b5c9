// Float64 reference for nearest neighbours and Chamfer distance: brute force over every pair of
// points. Tests judge the native engines against it; nothing on a hot path calls it.
//
// Clouds come in pairs (cloud b of P with cloud b of Q); per-point results are compact: pair by
// pair, point by point. Empty clouds: a directed term over an empty source is 0; a point whose
// target cloud is empty has index -1 and distance +Infinity (so the pair's directed term is
// +Infinity) and receives no gradient.
import type { TokenBatch } from '../tensor.js';

export type ChamferReduction = 'mean' | 'sum' | 'none';

export interface ReferenceNearestResult {
  /** Nearest target per source point (local index in its cloud; -1: empty target cloud). */
  index: Int32Array;
  /** Squared distance to it. */
  distance: Float64Array;
  /** Second-best minus best squared distance (Infinity with one candidate): near-ties show here. */
  gap: Float64Array;
  /** |p|^2 + |q*|^2 per source point, the scale of the tie rule. */
  scale: Float64Array;
}

/** float64 coordinates of item b's point i (values override the batch, for finite differences). */
function point(batch: TokenBatch, values: Float64Array | undefined, b: number, i: number, out: Float64Array) {
  const base = (batch.starts[b] + i) * batch.dim;
  for (let k = 0; k < batch.dim; k++) out[k] = values ? values[base + k] : batch.data[base + k];
}

/** Nearest point of Q's cloud b for every point of P's cloud b; ties to the lowest index. */
export function referenceNearest(
  P: TokenBatch,
  Q: TokenBatch,
  values: { p?: Float64Array; q?: Float64Array } = {},
): ReferenceNearestResult {
  const d = P.dim;
  let total = 0;
  for (let b = 0; b < P.count; b++) total += P.lengths[b];
  const index = new Int32Array(total);
  const distance = new Float64Array(total);
  const gap = new Float64Array(total);
  const scale = new Float64Array(total);
  const p = new Float64Array(d);
  const q = new Float64Array(d);
  let o = 0;
  for (let b = 0; b < P.count; b++) {
    const m = Q.lengths[b];
    // Q's cloud as float64 once.
    const qs = new Float64Array(m * d);
    for (let j = 0; j < m; j++) {
      point(Q, values.q, b, j, q);
      qs.set(q, j * d);
    }
    for (let i = 0; i < P.lengths[b]; i++, o++) {
      point(P, values.p, b, i, p);
      let best = Number.POSITIVE_INFINITY;
      let second = Number.POSITIVE_INFINITY;
      let arg = -1;
      for (let j = 0; j < m; j++) {
        let s = 0;
        for (let k = 0; k < d; k++) {
          const t = p[k] - qs[j * d + k];
          s += t * t;
        }
        if (s < best) {
          second = best;
          best = s;
          arg = j;
        } else if (s < second) {
          second = s;
        }
      }
      index[o] = arg;
      distance[o] = best;
      gap[o] = second - best;
      let sq = 0;
      for (let k = 0; k < d; k++) sq += p[k] * p[k] + (arg >= 0 ? qs[arg * d + k] ** 2 : 0);
      scale[o] = sq;
    }
  }
  return { index, distance, gap, scale };
}

/** Per-pair directed terms: sum or mean over the source cloud's points (0 for an empty source). */
export function referenceDirected(
  src: TokenBatch,
  distance: Float64Array,
  reduction: ChamferReduction,
): Float64Array {
  const out = new Float64Array(src.count);
  let o = 0;
  for (let b = 0; b < src.count; b++) {
    let s = 0;
    for (let i = 0; i < src.lengths[b]; i++) s += distance[o++];
    out[b] = reduction === 'mean' && src.lengths[b] > 0 ? s / src.lengths[b] : s;
  }
  return out;
}

export interface ReferenceChamferResult {
  distances: Float64Array;
  forward: Float64Array;
  reverse: Float64Array;
  pToQ: ReferenceNearestResult;
  qToP?: ReferenceNearestResult;
}

/** Chamfer distance per pair in float64 ('none' reduces like 'sum' per pair). */
export function referenceChamfer(
  P: TokenBatch,
  Q: TokenBatch,
  options: { reduction?: ChamferReduction; bidirectional?: boolean } = {},
  values: { p?: Float64Array; q?: Float64Array } = {},
): ReferenceChamferResult {
  const reduction = options.reduction ?? 'mean';
  const pToQ = referenceNearest(P, Q, values);
  const forward = referenceDirected(P, pToQ.distance, reduction);
  let qToP: ReferenceNearestResult | undefined;
  let reverse: Float64Array = new Float64Array(P.count);
  if (options.bidirectional ?? true) {
    qToP = referenceNearest(Q, P, { p: values.q, q: values.p });
    reverse = referenceDirected(Q, qToP.distance, reduction);
  }
  const distances = new Float64Array(P.count);
  for (let b = 0; b < P.count; b++) distances[b] = forward[b] + reverse[b];
  return { distances, forward, reverse, pToQ, qToP };
}

/**
 * Gradients of sum_i wP[i] dist_pq[i] + sum_j wQ[j] dist_qp[j] with the neighbours held fixed (the
 * analytic subgradient), in the layout of the input buffers. Points with index -1 contribute nothing.
 */
export function referenceChamferBackward(
  P: TokenBatch,
  Q: TokenBatch,
  indexPQ: Int32Array,
  weightP: Float64Array,
  indexQP: Int32Array | undefined,
  weightQ: Float64Array | undefined,
): { dP: Float64Array; dQ: Float64Array } {
  const d = P.dim;
  const dP = new Float64Array(P.data.length);
  const dQ = new Float64Array(Q.data.length);
  const add = (
    src: TokenBatch,
    dst: TokenBatch,
    idx: Int32Array,
    w: Float64Array,
    dSrc: Float64Array,
    dDst: Float64Array,
  ) => {
    let o = 0;
    for (let b = 0; b < src.count; b++) {
      for (let i = 0; i < src.lengths[b]; i++, o++) {
        const j = idx[o];
        if (j < 0) continue;
        const si = (src.starts[b] + i) * d;
        const dj = (dst.starts[b] + j) * d;
        for (let k = 0; k < d; k++) {
          const g = 2 * w[o] * (src.data[si + k] - dst.data[dj + k]);
          dSrc[si + k] += g;
          dDst[dj + k] -= g;
        }
      }
    }
  };
  add(P, Q, indexPQ, weightP, dP, dQ);
  if (indexQP && weightQ) add(Q, P, indexQP, weightQ, dQ, dP);
  return { dP, dQ };
}
