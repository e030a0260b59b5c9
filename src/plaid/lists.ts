// The index's document bags and inverted lists, from the centroid id of every token.
import type { NativeIndex } from './native.js';

/** Document offsets, bags (distinct centroids of each document, ascending) and inverted lists. */
export function buildLists(
  lengths: Int32Array,
  cids: Int32Array,
  k: number,
): Pick<NativeIndex, 'docOffsets' | 'bagOffsets' | 'bags' | 'ivfOffsets' | 'ivf'> {
  const n = lengths.length;
  const docOffsets = new Float64Array(n + 1);
  for (let b = 0; b < n; b++) docOffsets[b + 1] = docOffsets[b] + lengths[b];
  const seen = new Int32Array(k).fill(-1);
  const bagOffsets = new Float64Array(n + 1);
  let bags = new Int32Array(Math.max(16, Math.min(docOffsets[n], 1 << 20)));
  let m = 0;
  const counts = new Float64Array(k + 1);
  for (let b = 0; b < n; b++) {
    const from = m;
    for (let t = docOffsets[b]; t < docOffsets[b + 1]; t++) {
      const c = cids[t];
      if (seen[c] === b) continue;
      seen[c] = b;
      if (m === bags.length) {
        const grown = new Int32Array(bags.length * 2);
        grown.set(bags);
        bags = grown;
      }
      bags[m++] = c;
      counts[c + 1]++;
    }
    bags.subarray(from, m).sort();
    bagOffsets[b + 1] = m;
  }
  for (let c = 0; c < k; c++) counts[c + 1] += counts[c];
  const ivf = new Int32Array(m);
  const cursor = counts.slice(0, k);
  for (let b = 0; b < n; b++)
    for (let j = bagOffsets[b]; j < bagOffsets[b + 1]; j++) ivf[cursor[bags[j]]++] = b;
  return { docOffsets, bagOffsets, bags: bags.slice(0, m), ivfOffsets: counts, ivf };
}
