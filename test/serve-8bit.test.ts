// `maxsim serve --dtype int8` on the CPU: every search pass scans an int8 copy and rescores the
// candidates exactly, so its answers equal the exact server's top-k (same scores) on random corpora
// (ragged, tiny, several segments, k beyond the documents), through appends and deletes; bad dtype
// values are refused naming the argument.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { InvalidArgumentError } from '../src/errors.js';
import { CorpusWriter } from '../src/io/corpus/index.js';
import { topK } from '../src/ops/maxsim.js';
import { quantize } from '../src/ops/quantize.js';
import type { MaxsimServer } from '../src/server/app.js';
import { createServer } from '../src/server/index.js';
import { cpuTwoStage, PREFILTER_FACTOR } from '../src/server/segment-search.js';
import { rng, runSeed } from './helpers.js';
import {
  callJson,
  packed as packedOf,
  type SearchHit,
  searchBoth,
  start as startServer,
} from './serve-helpers.js';

const CLI = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-serve8-'));
const DIM = 24;
const KEY = 'test-key-0123456789';
const rand = rng(runSeed ^ 0x8b17);
const servers: MaxsimServer[] = [];

after(async () => {
  await Promise.all(servers.map((s) => s.close()));
  fs.rmSync(tmp, { recursive: true, force: true });
});

function randomDoc(maxLen: number): number[][] {
  const n = 1 + Math.floor(rand() * maxLen);
  return Array.from({ length: n }, () => Array.from({ length: DIM }, () => rand() * 2 - 1));
}

const packed = (items: number[][][]) => packedOf(items, DIM);

/** A float16 corpus with ids `${tag}${i}`, one segment per entry of `segments` (document counts). */
function buildCorpus(name: string, segments: number[], maxLen: number): string {
  const dir = path.join(tmp, name);
  let w = CorpusWriter.create(dir, { dim: DIM, dtype: 'float16', ids: true });
  let at = 0;
  for (const [g, n] of segments.entries()) {
    if (g > 0) w = CorpusWriter.append(dir);
    const docs = Array.from({ length: n }, () => randomDoc(maxLen));
    w.add(
      packed(docs),
      docs.map((_, i) => `d${at + i}`),
    );
    at += n;
    w.commit();
  }
  return dir;
}

async function start(corpus: string, dtype?: 'int8') {
  return (await startServer(servers, { corpus, apiKey: KEY, dtype })).url;
}

const call = (url: string, method: string, body: unknown, auth = false) =>
  callJson(url, method, body, auth ? KEY : undefined);

type Row = SearchHit;

/** Equal top-k: the same scores in order, and the same documents wherever a score is not tied. */
function assertSameTopK(got: Row[][], want: Row[][], what: string) {
  assert.equal(got.length, want.length, what);
  for (let q = 0; q < want.length; q++) {
    const g = got[q];
    const w = want[q];
    assert.deepEqual(
      g.map((h) => h.score),
      w.map((h) => h.score),
      `${what}, query ${q}: scores`,
    );
    for (let i = 0; i < w.length; i++) {
      const tied = w.some((h, j) => j !== i && h.score === w[i].score);
      if (!tied) assert.deepEqual(g[i], w[i], `${what}, query ${q}, hit ${i}`);
    }
  }
}

async function compare(exact: string, eight: string, queries: number[][][], k: number, what: string) {
  const [want, got] = await searchBoth(exact, eight, queries, k);
  assertSameTopK(got, want, what);
  return want;
}

describe('serve --dtype int8 (CPU)', () => {
  test('answers equal the exact server: ragged, several segments, tiny, k beyond the documents', async () => {
    const shapes: [string, number[], number][] = [
      ['ragged', [400], 40],
      ['segments', [150, 1, 90, 260], 30],
      ['tiny', [2], 3],
      ['one', [1], 1],
    ];
    for (const [name, segments, maxLen] of shapes) {
      const dir = buildCorpus(name, segments, maxLen);
      const [exact, eight] = await Promise.all([start(dir), start(dir, 'int8')]);
      const info = await call(`${eight}/v1/info`, 'GET', undefined);
      assert.equal(info.batching.dtype, 'int8');
      const total = segments.reduce((a, b) => a + b, 0);
      for (const k of [1, 5, 10, total + 3]) {
        const queries = Array.from({ length: 1 + Math.floor(rand() * 6) }, () => randomDoc(12));
        const rows = await compare(exact, eight, queries, k, `${name}, k ${k}`);
        assert.equal(rows[0].length, Math.min(k, total), `${name}, k ${k}: hits`);
      }
      // concurrent requests (one pass or several) answer each their own
      const all = Array.from({ length: 8 }, (_, i) =>
        compare(exact, eight, [randomDoc(8), randomDoc(8)], 1 + i, `${name}, concurrent ${i}`),
      );
      await Promise.all(all);
    }
  });

  test('the scan picks the candidates: the int8 copy decides which documents are rescored', async () => {
    const docs = packed(Array.from({ length: 200 }, () => randomDoc(10)));
    const other = packed(Array.from({ length: 200 }, () => randomDoc(10)));
    const queries = packed([randomDoc(6), randomDoc(6)]);
    const k = 3;
    // a copy of other documents: its int8 top PREFILTER_FACTOR * k are the only candidates
    const hits = await cpuTwoStage(queries, docs, quantize(other, 'int8'), k, {});
    const scan = await topK(quantize(queries, 'int8'), quantize(other, 'int8'), PREFILTER_FACTOR * k, {
      backend: 'cpu',
    });
    const exact = await topK(queries, docs, 200, { backend: 'cpu' });
    for (let q = 0; q < 2; q++) {
      const allowed = new Set(scan[q].map((h) => h.index));
      for (const h of hits[q]) {
        assert.ok(allowed.has(h.index), `query ${q}: document ${h.index} was no candidate`);
        // rescored exactly from the float documents
        assert.equal(h.score, exact[q].find((e) => e.index === h.index)?.score);
      }
    }
    // its own copy: the exact top-k
    const own = await cpuTwoStage(queries, docs, quantize(docs, 'int8'), k, {});
    assert.deepEqual(own, await topK(queries, docs, k, { backend: 'cpu' }));
  });

  test('appends and deletes while serving: the int8 copy follows the snapshot', async () => {
    const dir = buildCorpus('writes', [300], 20);
    const [exact, eight] = await Promise.all([start(dir), start(dir, 'int8')]);
    const queries = Array.from({ length: 4 }, () => randomDoc(10));
    // searches race the writes; each answer is checked after the write it saw
    const racing: Promise<unknown>[] = [];
    for (let round = 0; round < 3; round++) {
      const documents = Array.from({ length: 40 }, (_, i) => ({
        id: `new${round}-${i}`,
        embeddings: randomDoc(20),
      }));
      racing.push(call(`${eight}/v1/search`, 'POST', { queries, top_k: 7 }));
      await call(`${eight}/v1/documents`, 'POST', { documents }, true);
      racing.push(call(`${eight}/v1/search`, 'POST', { queries, top_k: 7 }));
      let rows = await compare(exact, eight, queries, 10, `after append ${round}`);
      assert.ok(
        rows.some((r) => r.some((h) => h.id.startsWith('new'))) || round === 0,
        'appended documents reachable',
      );
      // delete the best hits of the first query: the next answers skip them
      const gone = rows[0].slice(0, 3).map((h) => h.id);
      await call(`${eight}/v1/documents`, 'DELETE', { ids: gone }, true);
      rows = await compare(exact, eight, queries, 10, `after delete ${round}`);
      for (const r of rows) for (const h of r) assert.ok(!gone.includes(h.id), `${h.id} deleted`);
    }
    await Promise.all(racing);
    const info = await call(`${eight}/v1/info`, 'GET', undefined);
    assert.equal(info.corpus.documents, 420);
    assert.equal(info.corpus.deleted, 9);
  });

  test('bad dtype values name the argument', async () => {
    const dir = buildCorpus('bad', [20], 5);
    for (const [dtype, backend, match] of [
      ['int4', 'cpu', /'int8' or 'fp8'.*for dtype but received "int4"/s],
      ['float16', 'cpu', /'int8' or 'fp8'.*for dtype but received "float16"/s],
      ['fp8', 'cpu', /GPU.*for dtype but received 'fp8'/s],
    ] as const) {
      await assert.rejects(
        createServer({
          corpus: dir,
          backend,
          port: 0,
          logger: false,
          dtype: dtype as unknown as 'int8',
        }),
        (e: Error) => e instanceof InvalidArgumentError && e.argument === 'dtype' && match.test(e.message),
        `${dtype} on ${backend}`,
      );
    }
    // an int8 corpus: nothing to quantize
    const int8Dir = path.join(tmp, 'int8-corpus');
    const w = CorpusWriter.create(int8Dir, { dim: DIM, dtype: 'int8' });
    w.add(quantize(packed([randomDoc(4), randomDoc(4)]), 'int8'));
    w.commit();
    await assert.rejects(
      createServer({ corpus: int8Dir, backend: 'cpu', port: 0, logger: false, dtype: 'int8' }),
      /float16, bfloat16 or float32 corpus.*for dtype but received an 'int8' corpus/s,
    );
    const cli = spawnSync(process.execPath, [CLI, 'serve', '--corpus', dir, '--dtype', 'int4'], {
      encoding: 'utf8',
      timeout: 30_000,
    });
    assert.equal(cli.status, 2, cli.stderr);
    assert.match(cli.stderr, /--dtype/);
  });
});
