// Top-K: agrees with a full sort, ties go to the lower index, and the host API ranks correctly.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { referenceMaxsim, referenceTopK } from '../src/backends/reference.js';
import { topK, topKAll } from '../src/ops/maxsim.js';
import { topKOfRow } from '../src/ops/topk.js';
import { randomMatrix, randomRagged, rng, runSeed } from './helpers.js';

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

  test('topK and topKAll rank the MaxSim scores, ties to the lower index', async () => {
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
    const all = await topKAll(queries, docs, 10, { backend: 'cpu' });
    assert.equal(all.length, 2);
    assert.equal(all[0].length, 6);
    assert.equal(all[0][5].score, Number.NEGATIVE_INFINITY); // the empty document ranks last
    assert.equal(all[0][5].index, 1);
    await assert.rejects(() => topK(q, docs, -1), /Expected a non-negative integer for k but received -1/);
  });
});
