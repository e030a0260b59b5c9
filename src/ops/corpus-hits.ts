// Hit lists of a corpus search: the tie rule (higher score, then lower index), two best-first lists
// merged, the best k of each row of a score block (deleted documents skipped), and a batch of some
// documents as a view of the same rows.
import type { Hit, TokenBatch } from '../tensor.js';
import { topKOfRow } from './topk.js';

// a ranks before b: higher score, then lower index
function better(a: Hit, b: Hit): boolean {
  return a.score > b.score || (a.score === b.score && a.index < b.index);
}

/** Merges two best-first hit lists into the best k. */
export function mergeHits(a: Hit[], b: Hit[], k: number): Hit[] {
  const out: Hit[] = [];
  let i = 0;
  let j = 0;
  while (out.length < k && (i < a.length || j < b.length)) {
    if (j >= b.length || (i < a.length && better(a[i], b[j]))) out.push(a[i++]);
    else out.push(b[j++]);
  }
  return out;
}

/** The k best of each row of a [rows, cols] score block, indices offset by `base`, best first. */
export function blockTopK(
  scores: Float32Array,
  rows: number,
  cols: number,
  k: number,
  base: number,
  /** Deleted documents (1 at their global index): never in the result, as if absent. */
  skip?: Uint8Array,
): Hit[][] {
  const out: Hit[][] = [];
  let skipped = 0;
  if (skip) for (let c = 0; c < cols; c++) skipped += skip[base + c];
  if (skipped === 0) skip = undefined;
  for (let r = 0; r < rows; r++) {
    const row = scores.subarray(r * cols, (r + 1) * cols);
    const n = Math.min(k, cols - skipped);
    if (n === 0) {
      out.push([]);
      continue;
    }
    if (n > 64) {
      // the n + skipped best hold the n best live ones
      const hits = topKOfRow(row, Math.min(cols, n + skipped))
        .map((h) => ({ index: base + h.index, score: h.score }))
        .filter((h) => !skip || skip[h.index] === 0);
      out.push(hits.slice(0, n));
      continue;
    }
    // Small k: keep a sorted list of the n best (insertion), which beats a heap for the usual k <= 100.
    const best: Hit[] = [];
    for (let c = 0; c < cols; c++) {
      if (skip && skip[base + c] === 1) continue;
      const s = row[c];
      if (best.length === n && !(s > best[n - 1].score)) continue; // equal score: the earlier index stays
      let at = best.length === n ? n - 1 : best.length;
      if (best.length < n) best.push({ index: 0, score: 0 });
      while (at > 0 && s > best[at - 1].score) {
        best[at] = best[at - 1];
        at--;
      }
      best[at] = { index: base + c, score: s };
    }
    out.push(best);
  }
  return out;
}

// Some documents of a batch (local indices, increasing) as a batch over the same rows: no copy.
export function subBatch(docs: TokenBatch, local: number[]): TokenBatch {
  const starts = new Float64Array(local.length);
  const lengths = new Int32Array(local.length);
  let maxLength = 0;
  local.forEach((d, i) => {
    starts[i] = docs.starts[d];
    lengths[i] = docs.lengths[d];
    maxLength = Math.max(maxLength, lengths[i]);
  });
  return { ...docs, count: local.length, starts, lengths, maxLength };
}
