// Top-K selection over score rows: descending score, ties broken by the lower document index, so
// results are deterministic whatever the backend.
import { InvalidArgumentError } from '../errors.js';
import type { Hit } from '../tensor.js';

/** Whether hit a (score, index) ranks before hit b: the one order every top-K of maxsim follows. */
export function better(sa: number, ia: number, sb: number, ib: number): boolean {
  return sa > sb || (sa === sb && ia < ib);
}

/** The k best of scores[offset .. offset + count), as hits with indices relative to offset. */
export function topKOfRow(
  scores: Float32Array | Float64Array,
  k: number,
  offset = 0,
  count = scores.length - offset,
): Hit[] {
  const n = Math.min(k, count);
  if (n <= 0) return [];
  // Binary min-heap of the n best so far; the root is the worst of them.
  const hs = new Float64Array(n);
  const hi = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    hs[i] = scores[offset + i];
    hi[i] = i;
    siftUp(hs, hi, i);
  }
  // Rows are scanned in ascending index, so a later element beats the root only with a strictly
  // greater score (an equal one loses on index; NaN compares false, as in better()): one comparison
  // rejects almost every element once the heap is full.
  const end = offset + count;
  for (
    let at = firstAbove(scores, offset + n, end, hs[0]);
    at < end;
    at = firstAbove(scores, at + 1, end, hs[0])
  ) {
    hs[0] = scores[at];
    hi[0] = at - offset;
    siftDown(hs, hi, n, 0);
  }
  return sortedHits(hs, hi, n);
}

/**
 * The hits of a heap built as topKOfRow builds it, best first. The native top-K (cuda.ts) returns its
 * heaps in the same layout, so both rank through this one comparison sort.
 */
export function sortedHits(hs: ArrayLike<number>, hi: ArrayLike<number>, size: number, from = 0): Hit[] {
  const hits: Hit[] = [];
  for (let i = from; i < from + size; i++) hits.push({ index: hi[i], score: hs[i] });
  hits.sort((a, b) => (better(a.score, a.index, b.score, b.index) ? -1 : 1));
  return hits;
}

// The first i in [from, end) with scores[i] > worst, else end. A loop of its own without calls, so
// that V8 optimizes it whole (a rarely taken call inside the scan loop deopts its OSR code).
function firstAbove(scores: Float32Array | Float64Array, from: number, end: number, worst: number): number {
  for (let i = from; i < end; i++) if (scores[i] > worst) return i;
  return end;
}

function siftUp(hs: Float64Array, hi: Int32Array, pos: number) {
  while (pos > 0) {
    const p = (pos - 1) >> 1;
    if (!better(hs[p], hi[p], hs[pos], hi[pos])) return;
    swap(hs, hi, p, pos);
    pos = p;
  }
}

function siftDown(hs: Float64Array, hi: Int32Array, size: number, pos: number) {
  for (;;) {
    const l = 2 * pos + 1;
    if (l >= size) return;
    const r = l + 1;
    // child that ranks worst
    const c = r < size && better(hs[l], hi[l], hs[r], hi[r]) ? r : l;
    if (!better(hs[pos], hi[pos], hs[c], hi[c])) return;
    swap(hs, hi, pos, c);
    pos = c;
  }
}

function swap(hs: Float64Array, hi: Int32Array, a: number, b: number) {
  const ts = hs[a];
  const ti = hi[a];
  hs[a] = hs[b];
  hi[a] = hi[b];
  hs[b] = ts;
  hi[b] = ti;
}

export function checkK(k: unknown, name = 'k'): number {
  if (typeof k !== 'number' || !Number.isInteger(k) || k < 0) {
    throw new InvalidArgumentError(name, 'a non-negative integer', String(k));
  }
  return k;
}
