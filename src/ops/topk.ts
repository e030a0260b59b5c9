// Top-K selection over score rows: descending score, ties broken by the lower document index, so
// results are deterministic whatever the backend.
import { InvalidArgumentError } from '../errors.js';
import type { Hit } from '../tensor.js';

// a ranks before b
function better(sa: number, ia: number, sb: number, ib: number): boolean {
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
  let size = 0;
  const siftDown = (pos: number) => {
    for (;;) {
      const l = 2 * pos + 1;
      if (l >= size) return;
      const r = l + 1;
      // child that ranks worst
      const c = r < size && better(hs[l], hi[l], hs[r], hi[r]) ? r : l;
      if (!better(hs[pos], hi[pos], hs[c], hi[c])) return;
      const ts = hs[pos];
      const ti = hi[pos];
      hs[pos] = hs[c];
      hi[pos] = hi[c];
      hs[c] = ts;
      hi[c] = ti;
      pos = c;
    }
  };
  for (let i = 0; i < count; i++) {
    const s = scores[offset + i];
    if (size < n) {
      let pos = size++;
      hs[pos] = s;
      hi[pos] = i;
      while (pos > 0) {
        const p = (pos - 1) >> 1;
        if (!better(hs[p], hi[p], hs[pos], hi[pos])) break;
        const ts = hs[p];
        const ti = hi[p];
        hs[p] = hs[pos];
        hi[p] = hi[pos];
        hs[pos] = ts;
        hi[pos] = ti;
        pos = p;
      }
    } else if (better(s, i, hs[0], hi[0])) {
      hs[0] = s;
      hi[0] = i;
      siftDown(0);
    }
  }
  const hits: Hit[] = [];
  for (let i = 0; i < size; i++) hits.push({ index: hi[i], score: hs[i] });
  hits.sort((a, b) => (better(a.score, a.index, b.score, b.index) ? -1 : 1));
  return hits;
}

export function checkK(k: unknown): number {
  if (typeof k !== 'number' || !Number.isInteger(k) || k < 0) {
    throw new InvalidArgumentError('k', 'a non-negative integer', String(k));
  }
  return k;
}
