// `maxsim serve` on an indexed corpus (src/server/index-path.ts): /v1/search goes through the index
// and answers exactly what the library's corpus.search answers on the same snapshot (ids and exact
// scores), `exact: true` / `index: false` scan, index settings are checked and applied, the answers
// say which path ran, /v1/info shows the index, /metrics counts the passes and stages; an append and
// an index rebuild published while the server answers are seen by the next pass, and no answer mixes
// generations (each equals the library's answer on the generation it reports).
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { CorpusWriter } from '../src/io/corpus/index.js';
import { indexCorpus } from '../src/io/corpus/index-build.js';
import { type Corpus, openCorpus } from '../src/ops/corpus-search.js';
import type { MaxsimServer } from '../src/server/app.js';
import type { TokenBatch } from '../src/tensor.js';
import { build, D, docsOf, fresh, queriesOf, seed } from './plaid-corpus-helpers.js';
import { call, expectError, post, start } from './serve-helpers.js';

const servers: MaxsimServer[] = [];
after(async () => {
  await Promise.all(servers.map((s) => s.close()));
});

/** The queries of a batch as JSON arrays [n][L][d]. */
function asJson(q: TokenBatch): number[][][] {
  return Array.from({ length: q.count }, (_, i) =>
    Array.from({ length: q.lengths[i] }, (_, t) => {
      const at = (q.starts[i] + t) * q.dim;
      return Array.from(q.data.subarray(at, at + q.dim) as Float32Array);
    }),
  );
}

type Row = { id: string; index: number; score: number }[];

async function library(c: Corpus, q: TokenBatch, k: number, index?: object | false): Promise<Row[]> {
  const hits = await c.search(q, { topK: k, backend: 'cpu', ...(index === undefined ? {} : { index }) });
  return hits.map((row) => row.map((h) => ({ id: h.id, index: h.index, score: h.score })));
}

describe('serve through the index', () => {
  test('answers equal the library (index and scan), stats, settings, info, metrics', async () => {
    const dir = fresh();
    build(dir, 120, 2);
    await indexCorpus(dir, { centroids: 32 });
    const { url } = await start(servers, { corpus: dir, maxWaitMs: 0 });
    const c = openCorpus(dir, { follow: false });
    const q = queriesOf(6, seed + 7);
    const body = { queries: asJson(q), top_k: 10 };

    const r = await post(`${url}/v1/search`, body);
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.results, await library(c, q, 10));
    assert.equal(r.json.stats.path, 'index');
    assert.equal(r.json.stats.scores, 'exact');
    assert.equal(r.json.stats.generation, c.info.generation);
    assert.deepEqual(
      r.json.stats.index.stages.map((s: { name: string }) => s.name),
      ['centroids', 'candidates', 'interaction', 'residual', 'rescore'],
    );

    for (const [extra, index] of [
      [{ exact: true }, false],
      [{ index: false }, false],
    ] as const) {
      const e = await post(`${url}/v1/search`, { ...body, ...extra });
      assert.equal(e.status, 200, e.text);
      assert.deepEqual(e.json.results, await library(c, q, 10, index));
      assert.equal(e.json.stats.path, 'scan');
      assert.match(e.json.stats.reason, /exact: true|index: false/);
    }

    const tuned = { nprobe: 4, candidates: 40, rescore: 20 };
    const t = await post(`${url}/v1/search`, { ...body, index: tuned });
    assert.equal(t.status, 200, t.text);
    assert.deepEqual(t.json.results, await library(c, q, 10, tuned));
    assert.equal(t.json.stats.index.nprobe, 4);
    assert.equal(t.json.stats.index.candidates, 40);
    assert.equal(t.json.stats.index.interaction, 'lists');
    const variants: (typeof tuned & { interaction?: 'bags' | 'hybrid'; prune?: number })[] = [
      { ...tuned, interaction: 'bags' },
      { ...tuned, interaction: 'hybrid' },
      { ...tuned, prune: 0 },
    ];
    for (const o of variants) {
      const b = await post(`${url}/v1/search`, { ...body, index: o });
      assert.equal(b.status, 200, b.text);
      assert.deepEqual(b.json.results, await library(c, q, 10, o));
      assert.equal(b.json.stats.index.interaction, o.interaction ?? 'lists');
    }

    // bad settings: 400 naming the field, before any pass
    for (const [index, field] of [
      [{ nprobe: 0 }, 'index.nprobe'],
      [{ nprobe: 33 }, 'index.nprobe'],
      [{ rescore: 3 }, 'index.rescore'],
      [{ prune: -1 }, 'index.prune'],
      [{ interaction: 'warp' }, 'index.interaction'],
      [{ nprob: 3 }, undefined],
      ['fast', undefined],
    ] as const)
      expectError(await post(`${url}/v1/search`, { ...body, index }), 400, field);
    expectError(await post(`${url}/v1/search`, { ...body, exact: true, index: tuned }), 400, 'index');

    const info = await call(`${url}/v1/info`, 'GET');
    assert.equal(info.json.index.centroids, 32);
    assert.equal(info.json.index.search_path, 'index');
    assert.equal(info.json.index.tokens, 'kept');
    assert.equal(info.json.index.indexed_segments, 2);

    const m = await call(`${url}/metrics`, 'GET');
    assert.match(m.text, /maxsim_search_passes_total\{path="index",scores="exact"\} [1-9]/);
    assert.match(m.text, /maxsim_search_passes_total\{path="scan",scores="exact"\} [1-9]/);
    assert.match(m.text, /maxsim_index_stage_seconds_count\{stage="residual"\} [1-9]/);
    c.close();
  });

  test('a corpus that keeps only its index: residual scores said so, no scan', async () => {
    const dir = fresh();
    build(dir, 80, 2);
    await indexCorpus(dir, { centroids: 16, dropTokens: true });
    const { url } = await start(servers, { corpus: dir, maxWaitMs: 0 });
    const c = openCorpus(dir, { follow: false });
    const q = queriesOf(3, seed + 17);
    const r = await post(`${url}/v1/search`, { queries: asJson(q), top_k: 5 });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.results, await library(c, q, 5));
    assert.equal(r.json.stats.scores, 'residual');
    assert.equal(r.json.stats.path, 'index');
    expectError(await post(`${url}/v1/search`, { queries: asJson(q), exact: true }), 400, 'exact');
    expectError(await post(`${url}/v1/search`, { queries: asJson(q), index: false }), 400, 'index');
    // ids: decoded from the residuals
    const ids = ['s0d1', 's1d2'];
    const byIds = await post(`${url}/v1/search`, { queries: asJson(q), ids, top_k: 2 });
    assert.equal(byIds.status, 200, byIds.text);
    const want = await c.search(q, { topK: 2, ids, backend: 'cpu' });
    byIds.json.results.forEach((row: Row, i: number) => {
      assert.deepEqual(
        row.map((h) => h.id),
        want[i].map((h) => h.id),
      );
      row.forEach((h, j) => {
        assert.ok(Math.abs(h.score - want[i][j].score) < 1e-5);
      });
    });
    assert.equal((await call(`${url}/v1/info`, 'GET')).json.index.tokens, 'dropped');
    // an append through the server: encoded against the centroids and its tokens dropped
    const add = docsOf(3, 500);
    const documents = asJson(add).map((embeddings, i) => ({ id: `new${i}`, embeddings }));
    const a = await post(`${url}/v1/documents`, { documents });
    assert.equal(a.status, 201, a.text);
    const after = (await call(`${url}/v1/info`, 'GET')).json;
    assert.equal(after.index.unindexed_segments, 0);
    assert.equal(after.index.tokens, 'dropped');
    // the new document answers from the new generation, as the library does on it (residual
    // scores rank approximately, so the document itself need not come first: only near the top)
    const self = docsOf(1, 501);
    const found = await post(`${url}/v1/search`, { queries: asJson(self), top_k: 10 });
    assert.equal(found.json.stats.generation, after.corpus.generation);
    const c2 = openCorpus(dir, { follow: false });
    assert.deepEqual(found.json.results, await library(c2, self, 10));
    assert.ok(
      found.json.results[0].some((h: { id: string }) => h.id === 'new1'),
      JSON.stringify(found.json.results[0].map((h: { id: string }) => h.id)),
    );
    c2.close();
    c.close();
  });

  test('index settings on a corpus without an index: 400', async () => {
    const dir = fresh();
    build(dir, 30, 1);
    const { url } = await start(servers, { corpus: dir });
    const q = queriesOf(1, seed + 3);
    expectError(await post(`${url}/v1/search`, { queries: asJson(q), index: { nprobe: 2 } }), 400, 'index');
    const r = await post(`${url}/v1/search`, { queries: asJson(q) });
    assert.equal(r.json.stats.path, 'scan');
    assert.equal(r.json.stats.reason, undefined);
    assert.equal((await call(`${url}/v1/info`, 'GET')).json.index, null);
  });

  test('an append and an index rebuild published while serving: never a stale or torn answer', async () => {
    const dir = fresh();
    build(dir, 100, 2);
    await indexCorpus(dir, { centroids: 32 });
    const { url } = await start(servers, { corpus: dir, maxWaitMs: 0 });
    const q = queriesOf(4, seed + 11);
    const body = { queries: asJson(q), top_k: 8 };
    // every generation held open (follow: false) so its answer can be computed after it is superseded
    const snapshots = new Map<number, Corpus>();
    const hold = () => {
      const c = openCorpus(dir, { follow: false });
      snapshots.set(c.info.generation, c);
      return c.info.generation;
    };
    const first = hold();
    const answers: { generation: number; results: Row[]; path: string }[] = [];
    let writing = true;
    const reader = (async () => {
      while (writing) {
        const r = await post(`${url}/v1/search`, body);
        assert.equal(r.status, 200, r.text);
        answers.push({
          generation: r.json.stats.generation,
          results: r.json.results,
          path: r.json.stats.path,
        });
      }
    })();
    // a few answers between publishes
    const more = async (n: number) => {
      const until = answers.length + n;
      while (answers.length < until) await new Promise((r) => setTimeout(r, 5));
    };
    await more(2);
    const w = CorpusWriter.append(dir);
    w.add(
      docsOf(60, 200),
      Array.from({ length: 60 }, (_, i) => `a${i}`),
    );
    w.commit();
    const appended = hold();
    await more(2);
    await indexCorpus(dir, { rebuild: true, centroids: 48 });
    const rebuilt = hold();
    await more(2);
    writing = false;
    await reader;
    // the next pass after a publish sees it
    const last = await post(`${url}/v1/search`, body);
    answers.push({
      generation: last.json.stats.generation,
      results: last.json.results,
      path: last.json.stats.path,
    });
    assert.equal(last.json.stats.generation, rebuilt);
    assert.deepEqual(
      last.json.results.map((row: Row) => row.length),
      [8, 8, 8, 8],
    );
    const expected = new Map<number, Row[]>();
    for (const [g, c] of snapshots) expected.set(g, await library(c, q, 8));
    for (const a of answers) {
      assert.ok(expected.has(a.generation), `an answer from generation ${a.generation}`);
      assert.deepEqual(a.results, expected.get(a.generation), `generation ${a.generation}`);
      assert.equal(a.path, 'index');
    }
    // every generation answered (the server followed each publish)
    const seen = new Set(answers.map((a) => a.generation));
    assert.ok(
      [first, appended, rebuilt].every((g) => seen.has(g)),
      JSON.stringify([...seen]),
    );
    // the appended documents are found (scanned while unindexed, then through the rebuilt index)
    const probe = await post(`${url}/v1/search`, { queries: asJson(queriesOfDocs(200, 2)), top_k: 1 });
    assert.match(probe.json.results[0][0].id, /^a/);
    for (const c of snapshots.values()) c.close();
  });
});

/** Queries that are documents of the pool (their best match is themselves). */
function queriesOfDocs(from: number, n: number): TokenBatch {
  const d = docsOf(n, from);
  assert.equal(d.dim, D);
  return d;
}
