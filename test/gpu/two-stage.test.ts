// Device-resident two-stage top-K (src/ops/two-stage.ts: int8 scan on the GPU, exact rescoring of
// the candidates through a view of the float corpus) and the views themselves (corpus.select).
// Skipped with the reason where no GPU runs.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { twoStageTopKAll } from '../../src/ops/two-stage.js';
import { randomRagged, rng, runSeed } from '../helpers.js';
import { gpu, skip } from './helpers.js';

describe('CUDA two-stage top-K and corpus views', { skip }, () => {
  test('select(): a view scores exactly like the corpus, keeps its memory alive, refuses writes', async () => {
    const rand = rng(runSeed + 201);
    const dev = await gpu();
    const lengths = Array.from({ length: 300 }, (_, i) => (i % 17 === 4 ? 0 : 1 + Math.floor(rand() * 120)));
    const corpus = await dev.upload(randomRagged(lengths, 128, 'float16', rand));
    const queries = randomRagged([32, 9], 128, 'float32', rand);
    const full = await corpus.score(queries);
    const picks = [5, 2, 2, 299, 4, 0];
    const view = await corpus.select(picks);
    assert.equal(view.count, picks.length);
    assert.equal(view.maxLength, Math.max(...picks.map((p) => lengths[p])));
    corpus.dispose(); // the view keeps the tokens alive
    const part = await view.score(queries);
    for (let q = 0; q < 2; q++) {
      picks.forEach((p, j) => {
        assert.ok(
          Object.is(part.data[q * picks.length + j], full.data[q * full.cols + p]),
          `query ${q} pick ${j}`,
        );
      });
    }
    await assert.rejects(view.append(randomRagged([3], 128, 'float16', rand)), /view/);
    await assert.rejects(view.download(), /view/);
    await assert.rejects(view.quantize('int8'), /view/);
    view.dispose();
    const other = await dev.upload(randomRagged([4, 5], 128, 'float16', rand));
    await assert.rejects(other.select([0, 2]), /indices\[1\]/);
    const empty = await other.select([]);
    assert.equal(empty.count, 0);
    empty.dispose();
    other.dispose();
  });

  test('two-stage top-10 on device corpora equals the exact top-10 of the float corpus', async () => {
    const rand = rng(runSeed + 202);
    const dev = await gpu();
    const lengths = Array.from({ length: 3000 }, (_, i) => (i % 29 === 7 ? 0 : 8 + Math.floor(rand() * 200)));
    const f16 = await dev.upload(randomRagged(lengths, 128, 'float16', rand));
    const i8 = await f16.quantize('int8');
    try {
      const queries = randomRagged([32, 32, 5, 1], 128, 'float32', rand);
      const exact = await f16.topK(queries, 10);
      const two = await twoStageTopKAll(queries, f16, i8, 10);
      assert.deepEqual(
        two.map((r) => r.map((h) => [h.index, h.score])),
        exact.map((r) => r.map((h) => [h.index, h.score])),
      );
      await assert.rejects(twoStageTopKAll(queries, i8, f16, 10), /docsInt8\.dtype/);
    } finally {
      i8.dispose();
      f16.dispose();
    }
  });
});
