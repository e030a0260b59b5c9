// A search through the index returns as many hits as the full scan, min(k, live documents), where
// its stages reach fewer (k near the corpus size, an empty query, documents with no tokens, deleted
// documents): the short rows are completed from the documents not returned and equal the scan's
// answer (src/ops/corpus-index-fill.ts). A k far past the corpus is no error.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CorpusWriter, deleteDocuments } from '../src/io/corpus/index.js';
import { indexCorpus } from '../src/io/corpus/index-build.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { raggedBatch, type TokenBatch } from '../src/tensor.js';
import { rng, runSeed } from './helpers.js';
import { D, docsOf, fresh, queriesOf, seed } from './plaid-corpus-helpers.js';

/** `n` documents of the structured pool, with a few empty ones spliced in (no token to list). */
function withEmpty(n: number, from: number): { docs: TokenBatch; ids: string[] } {
  const src = docsOf(n, from);
  const offsets = [0];
  const ids: string[] = [];
  const rows: Float32Array[] = [];
  for (let b = 0; b < n; b++) {
    if (b % 37 === 5) {
      offsets.push(offsets[offsets.length - 1]);
      ids.push(`empty${b}`);
    }
    const s = src.starts[b] * D;
    rows.push(src.data.subarray(s, s + src.lengths[b] * D) as Float32Array);
    offsets.push(offsets[offsets.length - 1] + src.lengths[b]);
    ids.push(`d${from + b}`);
  }
  const data = new Float32Array(offsets[offsets.length - 1] * D);
  let at = 0;
  for (const r of rows) {
    data.set(r, at);
    at += r.length;
  }
  return { docs: raggedBatch(data, offsets, { dim: D }), ids };
}

function corpus(n: number, ids: string[] = []): string {
  const dir = fresh();
  const w = CorpusWriter.create(dir, { dim: D, dtype: 'float16', ids: true });
  const made = withEmpty(n, 0);
  w.add(made.docs, made.ids);
  w.commit();
  ids.push(...made.ids);
  return dir;
}

/** The same documents with the same scores, in order, as the scan (ties may swap). */
function sameAsScan(
  got: { index: number; score: number }[],
  want: { index: number; score: number }[],
  what: string,
) {
  assert.equal(got.length, want.length, `${what}: hits (seed ${runSeed})`);
  const exact = new Map(want.map((h) => [h.index, h.score]));
  for (let j = 0; j < got.length; j++) {
    assert.equal(got[j].score, want[j].score, `${what}: score ${j} (seed ${runSeed})`);
    assert.equal(
      exact.get(got[j].index),
      got[j].score,
      `${what}: document ${got[j].index} (seed ${runSeed})`,
    );
  }
  assert.equal(new Set(got.map((h) => h.index)).size, got.length, `${what}: no document twice`);
}

describe('a search through the index returns min(k, live) hits', () => {
  test('k near the corpus size, an empty query, a k far past it: the scan answer', async () => {
    const dir = corpus(220);
    await indexCorpus(dir, { centroids: 64 });
    const c = openCorpus(dir);
    try {
      const live = c.file.info.live;
      const q = queriesOf(4, seed + 3);
      const r = rng(runSeed);
      const all = (await c.searchWithStats(q, { topK: live, index: false })).hits;
      for (const k of [1, 10, 1 + Math.floor(r() * live), live - 1, live, live + 7, 2 ** 40]) {
        const a = await c.searchWithStats(q, { topK: k, index: { nprobe: 2 } });
        const e = await c.searchWithStats(q, { topK: k, index: false });
        a.hits.forEach((row, qi) => {
          assert.equal(row.length, Math.min(k, live), `k ${k}: hits of query ${qi} (seed ${runSeed})`);
          // a completed row is the scan's own answer
          if (a.stats.index!.filled > 0 && row.length === live) sameAsScan(row, e.hits[qi], `k ${k} q ${qi}`);
          // every returned score is the exact one
          for (const h of row) assert.equal(h.score, all[qi].find((x) => x.index === h.index)?.score);
        });
      }
      // an empty query scores 0 against every document, as in the scan
      const empty = raggedBatch(new Float32Array(0), [0, 0], { dim: D });
      const a = await c.searchWithStats(empty, { topK: 5, index: {} });
      const e = await c.searchWithStats(empty, { topK: 5, index: false });
      sameAsScan(a.hits[0], e.hits[0], 'empty query');
      assert.ok(a.stats.index!.filled >= 5);
    } finally {
      c.close();
    }
  });

  test('deleted documents never fill a row; the count is the live one', async () => {
    const ids: string[] = [];
    const dir = corpus(160, ids);
    await indexCorpus(dir, { centroids: 32 });
    deleteDocuments(
      dir,
      ids.filter((_, i) => i % 3 === 1),
    );
    const c = openCorpus(dir);
    try {
      const live = c.file.info.live;
      const q = queriesOf(3, seed + 5);
      const a = await c.searchWithStats(q, { topK: live, index: { nprobe: 1 } });
      const e = await c.searchWithStats(q, { topK: live, index: false });
      a.hits.forEach((row, qi) => {
        assert.ok(
          row.every((h) => !c.file.isDeleted(h.index)),
          'no deleted document',
        );
        sameAsScan(row, e.hits[qi], `deleted, query ${qi}`);
      });
    } finally {
      c.close();
    }
  });

  test('a corpus that keeps only its index: every live document, on the residuals', async () => {
    const dir = corpus(120);
    await indexCorpus(dir, { centroids: 16, dropTokens: true });
    const c = openCorpus(dir);
    try {
      const live = c.file.info.live;
      const q = queriesOf(3, seed + 7);
      const a = await c.searchWithStats(q, { topK: live + 3, index: { nprobe: 1 } });
      const wide = await c.searchWithStats(q, { topK: live, index: { nprobe: 16, candidates: live } });
      assert.equal(a.stats.index!.scores, 'residual');
      a.hits.forEach((row, qi) => {
        assert.equal(row.length, live, `residual, query ${qi} (seed ${runSeed})`);
        assert.equal(new Set(row.map((h) => h.index)).size, live);
        // documents with tokens: the residual scores of the widest search; empty ones -Infinity, last
        const wideScore = new Map(wide.hits[qi].map((h) => [h.index, h.score]));
        for (const h of row) {
          const empty = c.file.lengths[h.index] === 0;
          if (empty) assert.equal(h.score, Number.NEGATIVE_INFINITY);
          else assert.ok(Math.abs(h.score - wideScore.get(h.index)!) <= 1e-5 * (1 + Math.abs(h.score)));
        }
        for (let j = 1; j < row.length; j++) assert.ok(row[j - 1].score >= row[j].score, 'best first');
      });
    } finally {
      c.close();
    }
  });
});
