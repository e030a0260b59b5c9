// Top-K: agrees with a full sort, ties go to the lower index, and the host API ranks correctly; the
// one-comparison scan of topKOfRow and the native heaps of the CUDA jobs (hostTopK: the same C++ code,
// run without a GPU) give exactly the heaps of the plain heap selection, NaN included.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { hitsOfHeaps, nativeCuda } from '../src/backends/cuda.js';
import { referenceMaxsim, referenceTopK } from '../src/backends/reference.js';
import { nativeUnavailableReason } from '../src/native.js';
import { topK } from '../src/ops/maxsim.js';
import { topKOfRow } from '../src/ops/topk.js';
import type { Hit } from '../src/tensor.js';
import { awkwardRow, randomMatrix, randomRagged, rng, runSeed } from './helpers.js';

// The selection as it was before the one-comparison scan: every element through better().
function plainHeapTopK(
  scores: Float32Array | Float64Array,
  k: number,
  offset = 0,
  count = scores.length - offset,
): Hit[] {
  const better = (sa: number, ia: number, sb: number, ib: number) => sa > sb || (sa === sb && ia < ib);
  const n = Math.min(k, count);
  if (n <= 0) return [];
  const hs = new Float64Array(n);
  const hi = new Int32Array(n);
  let size = 0;
  const swap = (a: number, b: number) => {
    [hs[a], hs[b]] = [hs[b], hs[a]];
    [hi[a], hi[b]] = [hi[b], hi[a]];
  };
  for (let i = 0; i < count; i++) {
    const s = scores[offset + i];
    if (size < n) {
      let pos = size++;
      hs[pos] = s;
      hi[pos] = i;
      while (pos > 0 && better(hs[(pos - 1) >> 1], hi[(pos - 1) >> 1], hs[pos], hi[pos])) {
        swap((pos - 1) >> 1, pos);
        pos = (pos - 1) >> 1;
      }
    } else if (better(s, i, hs[0], hi[0])) {
      hs[0] = s;
      hi[0] = i;
      for (let pos = 0; ; ) {
        const l = 2 * pos + 1;
        if (l >= size) break;
        const c = l + 1 < size && better(hs[l], hi[l], hs[l + 1], hi[l + 1]) ? l + 1 : l;
        if (!better(hs[pos], hi[pos], hs[c], hi[c])) break;
        swap(pos, c);
        pos = c;
      }
    }
  }
  const hits: Hit[] = [];
  for (let i = 0; i < size; i++) hits.push({ index: hi[i], score: hs[i] });
  hits.sort((a, b) => (better(a.score, a.index, b.score, b.index) ? -1 : 1));
  return hits;
}

describe('top-k', () => {
  test('matches a full sort on random rows with many ties and -Infinity', () => {
    const rand = rng(runSeed + 11);
    for (let trial = 0; trial < 200; trial++) {
      const n = Math.floor(rand() * 60);
      const row = new Float32Array(n);
      for (let i = 0; i < n; i++) row[i] = rand() < 0.1 ? Number.NEGATIVE_INFINITY : Math.floor(rand() * 8);
      const k = Math.floor(rand() * 70);
      assert.deepEqual(topKOfRow(row, k), referenceTopK(row, k));
    }
  });

  test('the one-comparison scan gives the plain heap selection, NaN and offsets included', () => {
    const rand = rng(runSeed + 13);
    for (let trial = 0; trial < 300; trial++) {
      const n = Math.floor(rand() * (trial < 200 ? 80 : 3000));
      const row = awkwardRow(rand, n, trial % 3 === 0);
      const k = Math.floor(rand() * (n + 5));
      const offset = Math.floor(rand() * (n + 1));
      const count = Math.floor(rand() * (n - offset + 1));
      const context = `trial ${trial}: n ${n}, k ${k}, offset ${offset}, count ${count}`;
      assert.deepStrictEqual(topKOfRow(row, k), plainHeapTopK(row, k), context);
      assert.deepStrictEqual(topKOfRow(row, k, offset, count), plainHeapTopK(row, k, offset, count), context);
      assert.deepStrictEqual(topKOfRow(Float64Array.from(row), k), plainHeapTopK(row, k), context);
    }
  });

  test('long rows: the k best by a full sort, ties to the lower index', () => {
    const rand = rng(runSeed + 14);
    for (const [n, k] of [
      [20_000, 10],
      [5_000, 40],
      [3_000, 3_000],
      [3_000, 4_000],
      [1, 1],
    ]) {
      const row = new Float32Array(n);
      // ascending runs of equal scores: later elements tie with the root and must lose on index
      for (let i = 0; i < n; i++) row[i] = i % 11 === 0 ? Number.NEGATIVE_INFINITY : Math.floor(rand() * 50);
      assert.deepEqual(topKOfRow(row, k), referenceTopK(row, k), `n ${n}, k ${k}`);
      const rising = Float32Array.from({ length: n }, (_, i) => Math.floor(i / 7)); // every element a new best
      assert.deepEqual(topKOfRow(rising, k), referenceTopK(rising, k), `rising, n ${n}, k ${k}`);
    }
  });

  test('the native heaps of the CUDA jobs rank like topKOfRow (no GPU needed)', {
    skip: nativeUnavailableReason() ?? false,
  }, () => {
    const rand = rng(runSeed + 15);
    const host = nativeCuda();
    for (let trial = 0; trial < 150; trial++) {
      const cols = 1 + Math.floor(rand() * (trial < 100 ? 60 : 4000));
      const rows = 1 + Math.floor(rand() * 4);
      const data = new Float32Array(rows * cols);
      for (let r = 0; r < rows; r++) data.set(awkwardRow(rand, cols, trial % 2 === 0), r * cols);
      const k = Math.floor(rand() * (cols + 5));
      const got = hitsOfHeaps(host.internal.hostTopK(data, cols, k), rows);
      const want = Array.from({ length: rows }, (_, r) => topKOfRow(data, k, r * cols, cols));
      assert.deepStrictEqual(got, want, `trial ${trial}: ${rows} x ${cols}, k ${k}`);
    }
    assert.deepStrictEqual(hitsOfHeaps(host.internal.hostTopK(new Float32Array(0), 0, 3), 0), []);
    assert.throws(() => host.internal.hostTopK(new Float32Array(10), 3, 1), /cols/);
    assert.throws(() => host.internal.hostTopK(new Float32Array(10), 5, -1), /k/);
  });

  test('topK and topK rank the MaxSim scores, ties to the lower index', async () => {
    const rand = rng(runSeed + 12);
    const docs = randomRagged([5, 0, 9, 5, 3, 7], 16, 'float32', rand);
    const q = randomMatrix(4, 16, 'float32', rand);
    const hits = await topK(q, docs, 4, { backend: 'cpu' });
    const ref = referenceTopK(Array.from(referenceMaxsim(q, docs)), 4);
    assert.deepEqual(
      hits.map((h) => h.index),
      ref.map((h) => h.index),
    );
    const queries = randomRagged([4, 1], 16, 'float32', rand);
    const all = await topK(queries, docs, 10, { backend: 'cpu' });
    assert.equal(all.length, 2);
    assert.equal(all[0].length, 6);
    assert.equal(all[0][5].score, Number.NEGATIVE_INFINITY); // the empty document ranks last
    assert.equal(all[0][5].index, 1);
    await assert.rejects(() => topK(q, docs, -1), /Expected a non-negative integer for k but received -1/);
  });
});
