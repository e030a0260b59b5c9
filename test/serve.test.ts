// `maxsim serve` over real HTTP on ephemeral loopback ports: every endpoint, results against the library
// and the CLI, batched against unbatched, every kind of bad request, appends racing searches, SIGTERM of
// a spawned server (the client snippets of docs/service.md run against a server in test/readme.test.ts).
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { bf16BitsToFloat, decodeToFloat32, encodeFloats, f16BitsToFloat } from '../src/floats.js';
import { CorpusWriter } from '../src/io/corpus/index.js';
import { encodeNpy, writeNpy } from '../src/io/npy.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { maxsim } from '../src/ops/maxsim.js';
import { quantize } from '../src/ops/quantize.js';
import { searchJson } from '../src/server/answers.js';
import type { MaxsimServer, ServerOptions } from '../src/server/app.js';
import { autoWaitMs, Batcher, type PassInfo, type SearchRun } from '../src/server/batcher.js';
import type { EncodedTokens } from '../src/server/codecs.js';
import { tokenMatrix } from '../src/tensor.js';
import { rng, runSeed } from './helpers.js';
import {
  b64Of,
  buildCorpus as buildCorpusOf,
  call,
  DIM,
  expectError,
  KEY,
  packed,
  post,
  type Reply,
  randomTokens as randomTokensOf,
  start as startServer,
} from './serve-helpers.js';

const CLI = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-serve-'));
const DOCS = 300;
const rand = rng(runSeed ^ 0x5e7e);
const servers: MaxsimServer[] = [];

after(async () => {
  await Promise.all(servers.map((s) => s.close()));
  fs.rmSync(tmp, { recursive: true, force: true });
});

const randomTokens = (tokens: number) => randomTokensOf(tokens, rand);
/** A corpus of DOCS random documents (1..24 tokens, float16, ids doc0..) at `dir`. */
const buildCorpus = (dir: string) => buildCorpusOf(dir, DOCS, rand);
const start = (options: Partial<ServerOptions> & { corpus: string }) => startServer(servers, options);

describe('maxsim serve', () => {
  const dir = path.join(tmp, 'docs.msx');
  let docs: number[][][];
  let url: string;
  const queries = Array.from({ length: 6 }, (_, i) => randomTokens(1 + ((i * 7) % 13)));

  before(async () => {
    docs = buildCorpus(dir);
    ({ url } = await start({ corpus: dir, apiKey: KEY, maxWaitMs: 5 }));
  });

  test('search equals Corpus.search and `maxsim search --corpus`', async () => {
    const r = await post(`${url}/v1/search`, { queries, top_k: 7 });
    assert.equal(r.status, 200, r.text);
    const direct = await openCorpus(dir).search(packed(queries), { topK: 7, backend: 'cpu' });
    assert.deepEqual(
      r.json.results,
      direct.map((row) => row.map((h) => ({ id: h.id, index: h.index, score: h.score }))),
    );
    // the CLI, one query per file
    for (let i = 0; i < 2; i++) {
      const file = path.join(tmp, `q${i}.npy`);
      writeNpy(file, {
        dtype: 'float32',
        shape: [queries[i].length, DIM],
        data: Float32Array.from(queries[i].flat()),
      });
      const cli = spawnSync(
        process.execPath,
        [CLI, 'search', '--queries', file, '--corpus', dir, '--top-k', '7', '--backend', 'cpu'],
        {
          encoding: 'utf8',
          timeout: 30_000,
        },
      );
      assert.equal(cli.status, 0, cli.stderr);
      assert.deepEqual(JSON.parse(cli.stdout.trim()).results, r.json.results[i]);
    }
  });

  test('base64 float32 / float16 / bfloat16 and .npy bodies', async () => {
    const q = queries.slice(0, 3);
    const L = 5;
    const flat = new Float32Array(3 * L * DIM);
    q.forEach((x, i) => {
      flat.set(x.slice(0, L).flat(), i * L * DIM);
    });
    const lengths = q.map((x) => Math.min(L, x.length));
    for (const dtype of ['float32', 'float16', 'bfloat16'] as const) {
      const bits = encodeFloats(flat, dtype);
      const r = await post(`${url}/v1/search`, {
        queries: { b64: b64Of(bits), dtype, shape: [3, L, DIM], lengths },
        top_k: 4,
      });
      assert.equal(r.status, 200, r.text);
      // what the server must have decoded: the rounded values, as nested arrays
      const decode =
        dtype === 'float16' ? f16BitsToFloat : dtype === 'bfloat16' ? bf16BitsToFloat : (x: number) => x;
      const values = Array.from(bits as ArrayLike<number>, decode);
      const nested = lengths.map((l, i) =>
        Array.from({ length: l }, (_, t) => values.slice((i * L + t) * DIM, (i * L + t + 1) * DIM)),
      );
      const want = await post(`${url}/v1/search`, { queries: nested, top_k: 4 });
      assert.deepEqual(r.json, want.json, dtype);
    }
    const one = Float32Array.from(q[0].flat());
    const npy = encodeNpyBytes(one, [q[0].length, DIM]);
    for (const type of ['application/x-npy', 'application/octet-stream']) {
      const r = await post(`${url}/v1/search?top_k=3`, npy, { 'content-type': type });
      assert.equal(r.status, 200, r.text);
      const want = await post(`${url}/v1/search`, { queries: [q[0]], top_k: 3 });
      assert.deepEqual(r.json, want.json);
    }
  });

  test('search restricted to ids', async () => {
    const ids = ['doc3', 'doc10', 'doc200', 'doc42'];
    const r = await post(`${url}/v1/search`, { queries: queries.slice(0, 2), top_k: 3, ids });
    assert.equal(r.status, 200, r.text);
    const sub = openCorpus(dir).readDocuments([3, 10, 200, 42]);
    const m = await maxsim(packed(queries.slice(0, 2)), sub, { backend: 'cpu' });
    for (let qi = 0; qi < 2; qi++) {
      const row = Array.from(m.data.subarray(qi * 4, qi * 4 + 4));
      const order = [0, 1, 2, 3].sort((a, b) => row[b] - row[a] || a - b).slice(0, 3);
      assert.deepEqual(
        r.json.results[qi].map((h: { id: string }) => h.id),
        order.map((o) => ids[o]),
      );
    }
  });

  test('rerank by ids and inline equals scoring the documents directly', async () => {
    const cands = ['doc5', 'doc17', 'doc250', 'doc0', 'doc99'];
    const r = await post(`${url}/v1/rerank`, { query: queries[1], candidates: cands, top_n: 4 });
    assert.equal(r.status, 200, r.text);
    const query = tokenMatrix(Float32Array.from(queries[1].flat()), queries[1].length, DIM);
    const direct = await maxsim(query, openCorpus(dir).readDocuments([5, 17, 250, 0, 99]), {
      backend: 'cpu',
    });
    const order = [0, 1, 2, 3, 4].sort((a, b) => direct[b] - direct[a] || a - b).slice(0, 4);
    assert.deepEqual(
      r.json.results,
      order.map((i) => ({ index: i, id: cands[i], relevance_score: direct[i] })),
    );
    const inline = [docs[7], docs[8], [], docs[9]];
    const r2 = await post(`${url}/v1/rerank`, {
      query: queries[1],
      documents: inline.map((d, i) =>
        i === 3
          ? { embeddings_b64: b64Of(Float32Array.from(d.flat())), dtype: 'float32', shape: [d.length, DIM] }
          : { embeddings: d },
      ),
    });
    assert.equal(r2.status, 200, r2.text);
    const s = await maxsim(query, packed(inline), { backend: 'cpu' });
    // the empty document scores -inf: last
    const sorted = [0, 1, 3].sort((a, b) => s[b] - s[a] || a - b);
    assert.deepEqual(
      r2.json.results.map((x: { index: number }) => x.index),
      [...sorted, 2],
    );
    assert.equal(r2.json.results[3].relevance_score, null);
    assert.equal(r2.json.results[3].empty, true);
    assert.ok(r2.json.results.slice(0, 3).every((x: { empty?: boolean }) => x.empty === undefined));
    // ids carried by inline documents come back with their results (none on the one without)
    const r3 = await post(`${url}/v1/rerank`, {
      query: queries[1],
      documents: [
        { embeddings: docs[7], id: 'a' },
        { embeddings: docs[8] },
        { embeddings: docs[9], id: 'c' },
      ],
    });
    assert.equal(r3.status, 200, r3.text);
    const byIndex = new Map(r3.json.results.map((x: { index: number; id?: string }) => [x.index, x.id]));
    assert.deepEqual([byIndex.get(0), byIndex.get(1), byIndex.get(2)], ['a', undefined, 'c']);
    const bad = await post(`${url}/v1/rerank`, {
      query: queries[1],
      documents: [{ embeddings: docs[7] }, { embeddings: docs[8], id: 'x\ud800' }],
    });
    assert.equal(bad.status, 400, bad.text);
    assert.equal(bad.json.error.field, 'documents[1].id', bad.text);
  });

  test('score equals maxsim', async () => {
    const ds = [docs[1], docs[2], docs[3]];
    const r = await post(`${url}/v1/score`, { queries: queries.slice(0, 2), documents: ds });
    assert.equal(r.status, 200, r.text);
    const m = await maxsim(packed(queries.slice(0, 2)), packed(ds), { backend: 'cpu' });
    assert.deepEqual(r.json.scores, [Array.from(m.data.subarray(0, 3)), Array.from(m.data.subarray(3, 6))]);
    const r2 = await post(`${url}/v1/score`, {
      queries: queries.slice(0, 2),
      documents: ds.map((d) => ({ embeddings: d })),
    });
    assert.deepEqual(r2.json, r.json);
  });

  test('batched answers equal unbatched ones, with different top_k in one pass', async () => {
    const alone = await start({ corpus: dir, maxBatch: 1, maxWaitMs: 0 });
    // a fixed 100 ms wait: the 40 requests gather into passes even on a loaded machine (the default
    // 'auto' wait follows the recent pass time and may not wait at all)
    const gather = await start({ corpus: dir, maxBatch: 64, maxWaitMs: 100 });
    const many = Array.from({ length: 40 }, (_, i) => ({
      queries: [randomTokens(1 + (i % 9)), ...(i % 3 === 0 ? [randomTokens(4)] : [])],
      top_k: 1 + (i % 12),
    }));
    const batched = await Promise.all(many.map((b) => post(`${gather.url}/v1/search`, b)));
    const single: Reply[] = [];
    for (const b of many) single.push(await post(`${alone.url}/v1/search`, b));
    let largest = 0;
    batched.forEach((r, i) => {
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(r.json, single[i].json, `request ${i}`);
      assert.equal(r.json.results[0].length, many[i].top_k);
      largest = Math.max(largest, Number(r.headers.get('x-maxsim-batch')));
    });
    for (const r of single) assert.ok(Number(r.headers.get('x-maxsim-batch')) <= 2);
    assert.ok(largest > 2, `no pass gathered several requests (largest ${largest})`);
  });

  test('pipelined passes (two in flight, short passes) answer like one at a time, for every body encoding', async () => {
    const alone = await start({ corpus: dir, maxBatch: 1, maxWaitMs: 0 });
    const piped = await start({ corpus: dir, maxBatch: 8, passesInFlight: 2 });
    // the same queries in float32 / float16 / bfloat16 base64 (ragged with lengths) and nested JSON:
    // every request decoded straight into the pass's buffer must score as it does alone
    const encodings = ['nested', 'float32', 'float16', 'bfloat16'] as const;
    const bodies = Array.from({ length: 48 }, (_, i) => {
      const items = [randomTokens(1 + (i % 7)), ...(i % 4 === 0 ? [randomTokens(3)] : [])];
      const enc = encodings[i % encodings.length];
      if (enc === 'nested') return { queries: items, top_k: 1 + (i % 10) };
      const L = Math.max(...items.map((t) => t.length));
      const dense = new Float32Array(items.length * L * DIM);
      items.forEach((t, n) => {
        dense.set(t.flat(), n * L * DIM);
      });
      const bytes = enc === 'float32' ? dense : encodeFloats(dense, enc);
      return {
        queries: {
          b64: b64Of(bytes),
          dtype: enc,
          shape: [items.length, L, DIM],
          lengths: items.map((t) => t.length),
        },
        top_k: 1 + (i % 10),
      };
    });
    const info = await call(`${piped.url}/v1/info`, 'GET');
    assert.equal(info.json.batching.passes_in_flight, 2);
    assert.equal(info.json.batching.max_wait_ms, 'auto');
    const batched = await Promise.all(bodies.map((b) => post(`${piped.url}/v1/search`, b)));
    let largest = 0;
    for (let i = 0; i < bodies.length; i++) {
      const single = await post(`${alone.url}/v1/search`, bodies[i]);
      assert.equal(single.status, 200, single.text);
      assert.equal(batched[i].status, 200, batched[i].text);
      assert.deepEqual(batched[i].json, single.json, `request ${i} (${encodings[i % encodings.length]})`);
      const batch = Number(batched[i].headers.get('x-maxsim-batch'));
      assert.ok(batch <= 8, `a pass of ${batch} queries (max-batch 8)`);
      largest = Math.max(largest, batch);
    }
    assert.ok(largest > 2, `no pass gathered several requests (largest ${largest})`);
  });

  test('MAXSIM_HAND_OVER_LEAD (A/B runs): a share in (0, 1] is taken, anything else refused naming it', async () => {
    const before = process.env.MAXSIM_HAND_OVER_LEAD;
    try {
      process.env.MAXSIM_HAND_OVER_LEAD = '0.1';
      const alone = await start({ corpus: dir, maxBatch: 1, maxWaitMs: 0 });
      const piped = await start({ corpus: dir, maxBatch: 8, passesInFlight: 2 });
      const bodies = Array.from({ length: 16 }, (_, i) => ({
        queries: [randomTokens(1 + (i % 5))],
        top_k: 3,
      }));
      const batched = await Promise.all(bodies.map((b) => post(`${piped.url}/v1/search`, b)));
      for (let i = 0; i < bodies.length; i++)
        assert.deepEqual(
          batched[i].json,
          (await post(`${alone.url}/v1/search`, bodies[i])).json,
          `request ${i}`,
        );
      for (const bad of ['0', '1.5', '-0.2', 'soon'])
        await assert.rejects(
          () => {
            process.env.MAXSIM_HAND_OVER_LEAD = bad;
            return start({ corpus: dir, maxBatch: 8 });
          },
          (e: unknown) =>
            e instanceof Error && e.message.includes('MAXSIM_HAND_OVER_LEAD') && e.message.includes(bad),
          bad,
        );
    } finally {
      if (before === undefined) delete process.env.MAXSIM_HAND_OVER_LEAD;
      else process.env.MAXSIM_HAND_OVER_LEAD = before;
    }
  });

  test('long base64 bodies (parsed with their values lifted out): the same answers, bad bytes refused naming the field', async () => {
    // 40 x 16 float32 tokens: 3,414 base64 characters, past the lifted length
    const tokens = randomTokens(40);
    const b64 = b64Of(Float32Array.from(tokens.flat()));
    const body = { queries: { b64, dtype: 'float32', shape: [1, 40, DIM] }, top_k: 4 };
    const want = await post(`${url}/v1/search`, { queries: [tokens], top_k: 4 });
    assert.equal(want.status, 200, want.text);
    const json = { 'content-type': 'application/json' };
    for (const text of [
      JSON.stringify(body),
      JSON.stringify(body, null, 2),
      JSON.stringify(body).replace(':', ' :\n '),
    ]) {
      const got = await post(`${url}/v1/search`, text, json);
      assert.equal(got.status, 200, got.text);
      assert.deepEqual(got.json.results, want.json.results);
    }
    // a raw control character, a non-ASCII character, an escape inside the value: all refused, naming it
    for (const bad of ['\u0001', 'é', '\\n']) {
      const broken = JSON.stringify(body).replace(b64, `${b64.slice(0, 1000)}${bad}${b64.slice(1000)}`);
      expectError(await post(`${url}/v1/search`, broken, json), 400, 'queries.b64');
    }
    // __proto__ beside a long value takes the guarded parser: refused
    const poisoned = JSON.stringify(body).replace('"top_k"', '"__proto__": {"x": 1}, "top_k"');
    assert.equal((await post(`${url}/v1/search`, poisoned, json)).status, 400);
  });

  test('every malformed request gets its 4xx and the server keeps serving', async () => {
    const q = queries[1];
    const cases: [string, () => Promise<Reply>, number, string | RegExp | undefined][] = [
      ['wrong dims', () => post(`${url}/v1/search`, { queries: [[[1, 2, 3]]] }), 400, 'queries[0][0]'],
      [
        'ragged token',
        () => post(`${url}/v1/search`, { queries: [[q[0], q[1].slice(1)]] }),
        400,
        'queries[0][1]',
      ],
      [
        'not numbers',
        () => post(`${url}/v1/search`, { queries: [[q[0].map(String)]] }),
        400,
        'queries[0][0][0]',
      ],
      [
        'Infinity from JSON',
        () =>
          post(`${url}/v1/search`, `{"queries": [[[1e999${',0'.repeat(DIM - 1)}]]]}`, {
            'content-type': 'application/json',
          }),
        400,
        'queries[0][0][0]',
      ],
      [
        'bad base64',
        () => post(`${url}/v1/search`, { queries: { b64: 'abc$', dtype: 'float32', shape: [1, 1, DIM] } }),
        400,
        'queries.b64',
      ],
      [
        'shape / bytes mismatch',
        () =>
          post(`${url}/v1/search`, { queries: { b64: b64Of(new Float32Array(DIM)), shape: [1, 2, DIM] } }),
        400,
        'queries.b64',
      ],
      [
        'wrong dim in shape',
        () => post(`${url}/v1/search`, { queries: { b64: b64Of(new Float32Array(8)), shape: [1, 1, 8] } }),
        400,
        'queries.shape[2]',
      ],
      [
        'NaN in base64',
        () =>
          post(`${url}/v1/search`, {
            queries: { b64: b64Of(new Float32Array(DIM).fill(Number.NaN)), shape: [1, 1, DIM] },
          }),
        400,
        'queries',
      ],
      [
        'float16 infinity in base64',
        () =>
          post(`${url}/v1/search`, {
            queries: {
              b64: b64Of(new Uint16Array(2 * DIM).fill(0x3c00).fill(0x7c00, DIM + 3)),
              dtype: 'float16',
              shape: [1, 2, DIM],
            },
          }),
        400,
        'queries',
      ],
      [
        'bfloat16 NaN in base64',
        () =>
          post(`${url}/v1/search`, {
            queries: {
              b64: b64Of(new Uint16Array(DIM).fill(0x3f80).fill(0xffc1, 5, 6)),
              dtype: 'bfloat16',
              shape: [1, 1, DIM],
            },
          }),
        400,
        'queries',
      ],
      [
        'bad dtype',
        () => post(`${url}/v1/search`, { queries: { b64: '', dtype: 'int8', shape: [0, 1, DIM] } }),
        400,
        /queries/,
      ],
      ['negative top_k', () => post(`${url}/v1/search`, { queries: [q], top_k: -1 }), 400, 'top_k'],
      ['missing queries', () => post(`${url}/v1/search`, { top_k: 3 }), 400, 'queries'],
      [
        'invalid JSON',
        () => post(`${url}/v1/search`, '{"queries": [', { 'content-type': 'application/json' }),
        400,
        'body',
      ],
      // the poisoning check runs where such a key can be (plain JSON.parse elsewhere); the key is named
      [
        'a __proto__ key',
        () =>
          post(`${url}/v1/search`, `{"queries": [${JSON.stringify(q)}], "__proto__": {"x": 1}}`, {
            'content-type': 'application/json',
          }),
        400,
        '__proto__',
      ],
      [
        'a __proto__ key spelled with escapes',
        () =>
          post(`${url}/v1/search`, `{"queries": [${JSON.stringify(q)}], "\\u005f_proto__": {"x": 1}}`, {
            'content-type': 'application/json',
          }),
        400,
        '__proto__',
      ],
      [
        'a constructor.prototype key',
        () =>
          post(
            `${url}/v1/search`,
            `{"queries": [${JSON.stringify(q)}], "constructor": {"prototype": {"x": 1}}}`,
            { 'content-type': 'application/json' },
          ),
        400,
        'constructor.prototype',
      ],
      [
        'an empty JSON body',
        () => post(`${url}/v1/search`, '', { 'content-type': 'application/json' }),
        400,
        'body',
      ],
      [
        'bad .npy',
        () => post(`${url}/v1/search`, new Uint8Array([1, 2, 3]), { 'content-type': 'application/x-npy' }),
        400,
        'body',
      ],
      [
        'unknown id',
        () => post(`${url}/v1/rerank`, { query: q, candidates: ['doc1', 'nope', 'doc999999'] }),
        404,
        'candidates',
      ],
      ['unknown id in ids', () => post(`${url}/v1/search`, { queries: [q], ids: ['x'] }), 404, 'ids'],
      [
        'candidates and documents',
        () => post(`${url}/v1/rerank`, { query: q, candidates: ['doc1'], documents: [] }),
        400,
        'candidates',
      ],
      [
        'inline dims differ',
        () => post(`${url}/v1/rerank`, { query: q, documents: [{ embeddings: [[1, 2]] }] }),
        400,
        'documents[0].embeddings[0]',
      ],
      [
        'wrong content type',
        () => post(`${url}/v1/search`, 'queries', { 'content-type': 'text/plain' }),
        415,
        undefined,
      ],
      [
        'missing auth',
        () => post(`${url}/v1/documents`, { documents: [{ id: 'z', embeddings: q }] }),
        401,
        undefined,
      ],
      [
        'wrong key',
        () =>
          post(
            `${url}/v1/documents`,
            { documents: [{ id: 'z', embeddings: q }] },
            { authorization: 'Bearer nope-nope-nope' },
          ),
        401,
        undefined,
      ],
      [
        'existing id',
        () =>
          post(
            `${url}/v1/documents`,
            { documents: [{ id: 'doc1', embeddings: q }] },
            { authorization: `Bearer ${KEY}` },
          ),
        409,
        undefined,
      ],
      ['unknown route', () => post(`${url}/v1/nothing`, {}), 404, undefined],
    ];
    for (const [name, run, status, field] of cases) {
      const r = await run();
      expectError(r, status, field);
      if (status === 400)
        assert.match(r.json.error.message, /Expected .* for .* but received/, `${name}: ${r.text}`);
      if (status === 401) assert.equal(r.headers.get('www-authenticate'), 'Bearer');
      if (name === 'unknown id') assert.deepEqual(r.json.error.missing, ['nope', 'doc999999']);
      if (name === 'float16 infinity in base64')
        assert.match(r.json.error.message, new RegExp(`Infinity\\) at element ${DIM + 3}`), r.text);
      if (name === 'bfloat16 NaN in base64') assert.match(r.json.error.message, /NaN\) at element 5/, r.text);
    }
    // too large: a server with a small body limit
    const small = await start({ corpus: dir, bodyLimit: 64 * 1024 });
    expectError(await post(`${small.url}/v1/search`, { queries: [randomTokens(600)] }), 413);
    const ok = await post(`${small.url}/v1/search`, { queries: [q], top_k: 2 });
    assert.equal(ok.status, 200);
    assert.equal((await call(`${url}/healthz`, 'GET')).status, 200);
    assert.equal((await post(`${url}/v1/search`, { queries: [q], top_k: 2 })).status, 200);
  });

  test('a full queue answers 429 with Retry-After; a passed deadline 504', async () => {
    // a long wait for company keeps the first queries queued while the rest arrive: the third is refused
    const tight = await start({ corpus: dir, maxBatch: 64, maxWaitMs: 500, maxQueue: 2 });
    const rs = await Promise.all(
      Array.from({ length: 30 }, () =>
        post(`${tight.url}/v1/search`, { queries: [randomTokens(8)], top_k: 3 }),
      ),
    );
    const refused = rs.filter((r) => r.status === 429);
    assert.ok(refused.length > 0, 'no 429');
    assert.ok(rs.some((r) => r.status === 200));
    for (const r of refused) {
      expectError(r, 429);
      assert.ok(Number(r.headers.get('retry-after')) >= 1);
    }
    const slow = await start({ corpus: dir, maxWaitMs: 300, timeoutMs: 20 });
    expectError(await post(`${slow.url}/v1/search`, { queries: [queries[0]] }), 504);
    assert.equal((await call(`${slow.url}/healthz`, 'GET')).status, 200);
  });

  test('with authReads, reads need the key too (metrics, openapi and info included); health stays open', async () => {
    const locked = await start({ corpus: dir, apiKey: KEY, authReads: true });
    const body = { queries: [queries[0]], top_k: 2 };
    expectError(await post(`${locked.url}/v1/search`, body), 401);
    expectError(await call(`${locked.url}/v1/info`, 'GET'), 401);
    expectError(await post(`${locked.url}/v1/search`, body, { authorization: `Bearer ${KEY}x` }), 401);
    assert.equal(
      (await post(`${locked.url}/v1/search`, body, { authorization: `Bearer ${KEY}` })).status,
      200,
    );
    assert.equal((await call(`${locked.url}/healthz`, 'GET')).status, 200);
    assert.equal((await call(`${locked.url}/readyz`, 'GET')).status, 200);
    for (const p of ['/metrics', '/openapi.json', '/v1/info']) {
      expectError(await call(`${locked.url}${p}`, 'GET'), 401);
      assert.equal(
        (await call(`${locked.url}${p}`, 'GET', undefined, { authorization: `Bearer ${KEY}` })).status,
        200,
      );
    }
  });

  test('healthz, readyz, info, metrics, openapi', async () => {
    assert.deepEqual((await call(`${url}/healthz`, 'GET')).json, { status: 'ok' });
    assert.equal((await call(`${url}/readyz`, 'GET')).status, 200);
    const info = (await call(`${url}/v1/info`, 'GET')).json;
    assert.equal(info.corpus.dim, DIM);
    assert.equal(info.corpus.dtype, 'float16');
    assert.equal(info.backend, 'cpu');
    assert.equal(info.mode, 'mapped');
    assert.equal(info.corpus.ids, true);
    const metrics = (await call(`${url}/metrics`, 'GET')).text;
    for (const name of [
      'maxsim_http_requests_total{route="/v1/search",method="POST",status="200"}',
      'maxsim_http_request_duration_seconds_bucket',
      'maxsim_batch_queries_bucket',
      'maxsim_queue_depth',
      'process_resident_memory_bytes',
      'nodejs_eventloop_lag_seconds',
      'maxsim_event_loop_utilization',
      `maxsim_build_info{version="${JSON.parse(fs.readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).version}"} 1`,
      'maxsim_corpus_deleted_documents',
    ])
      assert.ok(metrics.includes(name), name);
    // the runtime's metrics keep their standard names (stock dashboards read them)
    assert.doesNotMatch(metrics, /^maxsim_(process|nodejs)_/m);
    assert.equal(Number(/^maxsim_corpus_documents (\S+)/m.exec(metrics)?.[1]), info.corpus.live);
    // where a search's time went: every phase of the passes and requests that ran, non-negative
    for (const [name, phases] of [
      ['maxsim_pass_phase_seconds', ['gather', 'wait', 'backend', 'merge', 'split', 'answer']],
      ['maxsim_request_phase_seconds', ['parse', 'decode', 'queue', 'encode']],
    ] as const)
      for (const phase of phases) {
        const count = Number(
          new RegExp(`^${name}_count\\{phase="${phase}"\\} (\\S+)`, 'm').exec(metrics)?.[1],
        );
        const sum = Number(new RegExp(`^${name}_sum\\{phase="${phase}"\\} (\\S+)`, 'm').exec(metrics)?.[1]);
        assert.ok(count > 0, `${name} ${phase}: count ${count}`);
        assert.ok(sum >= 0 && Number.isFinite(sum), `${name} ${phase}: sum ${sum}`);
      }
    const elu = Number(/^maxsim_event_loop_utilization (\S+)/m.exec(metrics)?.[1]);
    assert.ok(elu >= 0 && elu <= 1, `event loop utilization ${elu}`);
    const api = (await call(`${url}/openapi.json`, 'GET')).json;
    assert.match(api.openapi, /^3\./);
    for (const p of ['/v1/search', '/v1/rerank', '/v1/score', '/v1/documents', '/v1/info'])
      assert.ok(api.paths[p], p);
  });

  test('one structured log line per request with id, status, latency and batch', async () => {
    const lines: string[] = [];
    const stream = new Writable({
      write(chunk, _enc, done) {
        lines.push(...String(chunk).split('\n').filter(Boolean));
        done();
      },
    });
    const logged = await start({ corpus: dir, logger: { level: 'info', stream } });
    await post(`${logged.url}/v1/search`, { queries: [queries[0]], top_k: 2 }, { 'x-request-id': 'abc-123' });
    await post(`${logged.url}/v1/search`, { queries: [[[1]]] });
    const entries = lines.map((l) => JSON.parse(l)).filter((e) => e.msg === 'request');
    assert.equal(entries.length, 2, lines.join('\n'));
    assert.equal(entries[0].reqId, 'abc-123');
    assert.equal(entries[0].status, 200);
    assert.equal(entries[0].batch, 1);
    assert.equal(typeof entries[0].ms, 'number');
    assert.equal(entries[1].status, 400);
  });
});

describe('search answers as one JSON string', () => {
  test('searchJson writes what JSON.stringify writes: odd ids, -Infinity (no tokens) as null, empty rows; an overflowed score is an error', () => {
    const r = rng(runSeed + 2);
    const ids = [
      'plain',
      'quote"d',
      'back\\slash',
      'line\nbreak',
      'tab\t',
      '\u0001ctl',
      'é ü 中文',
      '😀',
      '</script>',
      '',
    ];
    for (let trial = 0; trial < 20; trial++) {
      const hits = Array.from({ length: Math.floor(r() * 4) }, () =>
        Array.from({ length: Math.floor(r() * 5) }, () => {
          const pick = r();
          const score =
            pick < 0.15 ? -Infinity : pick < 0.2 ? -0 : (r() - 0.5) * 10 ** Math.floor(r() * 40 - 20);
          return { id: ids[Math.floor(r() * ids.length)], index: Math.floor(r() * 1e9), score };
        }),
      );
      const want = JSON.stringify({
        results: hits.map((row) =>
          row.map((h) =>
            Number.isFinite(h.score)
              ? { id: h.id, index: h.index, score: h.score }
              : { id: h.id, index: h.index, score: null, empty: true },
          ),
        ),
      });
      assert.equal(
        searchJson(hits, () => true),
        want,
      );
    }
    // NaN and +Infinity are scores that overflowed float32, never a null; so is -Infinity of a
    // document known to have tokens
    for (const bad of [Number.NaN, Infinity])
      assert.throws(
        () => searchJson([[{ id: 'a', index: 0, score: bad }]], () => true),
        /overflowed float32/,
      );
    assert.throws(
      () => searchJson([[{ id: 'a', index: 0, score: -Infinity }]], () => false),
      /overflowed float32/,
    );
  });
});

describe('the batcher', () => {
  const D = 4;
  /** A search run that answers each query with its own first value as index, taking `ms` per pass. */
  function tracer(ms: number) {
    const t = { passes: [] as number[][], running: 0, most: 0 };
    const run: SearchRun = async (q) => {
      t.running++;
      t.most = Math.max(t.most, t.running);
      const rows = Array.from({ length: q.offsets.length - 1 }, (_, r) => q.values[q.offsets[r] * q.dim]);
      t.passes.push(rows);
      await new Promise((r) => setTimeout(r, ms));
      t.running--;
      return rows.map((index) => [{ index, score: 0, id: String(index) }]);
    };
    return { t, run };
  }
  const job = (n: number) => ({
    dtype: 'float32' as const,
    values: Float32Array.from({ length: D }, (_, j) => (j === 0 ? n : 0)),
    offsets: [0, 1],
    dim: D,
  });

  test('first come first served, at most max-batch per pass and passes-in-flight at once; each request gets its own row', async () => {
    for (const inFlight of [1, 2]) {
      const { t, run } = tracer(15);
      const b = new Batcher(run, {
        maxBatch: 4,
        maxWaitMs: 'auto',
        maxQueue: 1000,
        passesInFlight: inFlight,
      });
      const answers = await Promise.all(
        Array.from({ length: 30 }, (_, i) => b.search(job(i), 1, '', 10_000)),
      );
      answers.forEach((a, i) => {
        assert.equal(a.hits[0][0].index, i);
      });
      assert.deepEqual(
        t.passes.flat(),
        Array.from({ length: 30 }, (_, i) => i),
        'arrival order',
      );
      for (const p of t.passes) assert.ok(p.length <= 4, `a pass of ${p.length}`);
      assert.equal(t.most, inFlight);
      await b.drain();
    }
  });

  test('keepBits: a pass of float16 requests gets their bits as they are, a mixed pass float32; phases reported', async () => {
    const seen: EncodedTokens[] = [];
    const run: SearchRun = async (q, _k, _key, timing) => {
      seen.push(q);
      timing.merge = 0.001;
      return Array.from({ length: q.offsets.length - 1 }, (_, r) => [{ index: r, score: 0, id: String(r) }]);
    };
    const infos: PassInfo[] = [];
    const b = new Batcher(
      run,
      { maxBatch: 64, maxWaitMs: 5, maxQueue: 100, keepBits: (key) => (key === '' ? 'float16' : undefined) },
      (p) => infos.push(p),
    );
    const r = rng(runSeed + 1);
    const f16 = (tokens: number) => {
      const values = encodeFloats(
        Float32Array.from({ length: tokens * D }, () => r() * 2 - 1),
        'float16',
      ) as Uint16Array;
      return { dtype: 'float16' as const, values, offsets: [0, tokens], dim: D };
    };
    const parts = [f16(3), f16(1), f16(5)];
    await Promise.all(parts.map((p) => b.search(p, 1, '', 10_000)));
    assert.equal(seen.length, 1);
    assert.equal(seen[0].dtype, 'float16');
    assert.deepEqual(seen[0].offsets, [0, 3, 4, 9]);
    assert.deepEqual(
      [...seen[0].values],
      parts.flatMap((p) => [...p.values]),
    );
    // with a float32 request among them, or a key the backend takes float32 for: decoded, same values
    const mixed = [f16(2), { ...job(7), offsets: [0, 1] }];
    await Promise.all(mixed.map((p) => b.search(p, 1, '', 10_000)));
    await b.search(f16(2), 1, 'int8', 10_000);
    assert.equal(seen[1].dtype, 'float32');
    assert.deepEqual(
      [...seen[1].values],
      [...decodeToFloat32(mixed[0].values as Uint16Array, 'float16', D), ...mixed[1].values],
    );
    assert.equal(seen[2].dtype, 'float32');
    await b.drain();
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(infos.length, 3);
    for (const info of infos) {
      assert.ok(info.phases, 'search passes report their phases');
      for (const [phase, seconds] of Object.entries(info.phases))
        assert.ok(seconds >= 0 && Number.isFinite(seconds), `${phase}: ${seconds}`);
      assert.equal(info.phases.merge, 0.001);
      assert.equal(info.queued.length, info.requests);
    }
  });

  test('pipelined: the next pass is handed over while one runs, not after it', async () => {
    const { t, run } = tracer(60);
    const b = new Batcher(run, { maxBatch: 4, maxWaitMs: 1, maxQueue: 100, passesInFlight: 2 });
    const first = Array.from({ length: 4 }, (_, i) => b.search(job(i), 1, '', 10_000));
    await new Promise((r) => setTimeout(r, 5));
    const late = b.search(job(9), 1, '', 10_000);
    const started = performance.now();
    assert.equal((await late).hits[0][0].index, 9);
    // alone after the first pass it would end >= 55 ms from here; overlapped it ends with it or soon after
    assert.ok(t.most === 2, 'the second pass did not overlap the first');
    assert.ok(performance.now() - started < 200);
    await Promise.all(first);
    await b.drain();
  });

  test('other work (rerank, score) does not wait for company', async () => {
    const { run } = tracer(1);
    const b = new Batcher(run, { maxBatch: 64, maxWaitMs: 300, maxQueue: 100 });
    const started = performance.now();
    assert.equal(await b.solo(async () => 7, 10_000), 7);
    assert.ok(performance.now() - started < 250, 'the solo pass waited for company');
    await b.drain();
  });

  test("the wait for company ends once the last pass's clients are back (and not before)", async () => {
    const { t, run } = tracer(5);
    const b = new Batcher(run, { maxBatch: 64, maxWaitMs: 300, maxQueue: 100 });
    // 6 closed-loop clients, 3 passes each: the first pass waits for company (nothing to go by);
    // later ones go once all 6 are back, not 300 ms later
    const client = async (c: number) => {
      for (let i = 0; i < 3; i++) await b.search(job(c), 1, '', 10_000);
    };
    const started = performance.now();
    await Promise.all(Array.from({ length: 6 }, (_, c) => client(c)));
    const total = performance.now() - started;
    assert.deepEqual(
      t.passes.map((p) => p.length),
      [6, 6, 6],
      'every pass holds all six clients',
    );
    // the first pass waited its 300 ms; the other two did not (a loaded machine adds some)
    assert.ok(total >= 300, `${total} ms`);
    assert.ok(total < 300 + 250, `${total} ms: a later pass waited for company its clients had brought`);
    await b.drain();
  });

  test("the 'auto' wait is a tenth of the pass time, 1-50 ms", async () => {
    assert.equal(autoWaitMs(0.0001), 1);
    assert.equal(autoWaitMs(0.2), 20);
    assert.equal(autoWaitMs(3), 50);
    const { run } = tracer(40);
    const b = new Batcher(run, { maxBatch: 1, maxWaitMs: 'auto', maxQueue: 100 });
    assert.equal(b.waitMs, 1);
    // a moving average from 10 ms: after 10 passes of 40 ms (or more, on a loaded machine) the wait
    // is within a few tenths of a millisecond of 4 ms, or above it
    for (let i = 0; i < 10; i++) await b.search(job(i), 1, '', 10_000);
    assert.ok(b.waitMs >= 3 && b.waitMs <= 50, `wait ${b.waitMs} ms after passes of 40 ms`);
    await b.drain();
  });
});

describe('maxsim serve appends', () => {
  test('appends need the key and become visible whole: concurrent searches never see part of a segment', async () => {
    const dir = path.join(tmp, 'grow.msx');
    buildCorpus(dir);
    const { url } = await start({ corpus: dir, apiKey: KEY, maxWaitMs: 1 });
    const auth = { authorization: `Bearer ${KEY}` };
    // planted documents: every token 10 * e0, so the query e0 ranks them above every random document
    const planted = Array.from({ length: 3 }, () =>
      Array.from({ length: DIM }, (_, j) => (j === 0 ? 10 : 0)),
    );
    const probe = { queries: [[Array.from({ length: DIM }, (_, j) => (j === 0 ? 1 : 0))]], top_k: 40 };
    const SEG = 4;
    const ROUNDS = 6;
    let done = false;
    const seen: string[][] = [];
    const searching = (async () => {
      for (let i = 0; i < 400 && !done; i++) {
        const r = await post(`${url}/v1/search`, probe);
        assert.equal(r.status, 200, r.text);
        seen.push(r.json.results[0].map((h: { id: string }) => h.id));
      }
    })();
    const appends = [];
    for (let g = 0; g < ROUNDS; g++) {
      const documents = Array.from({ length: SEG }, (_, t) => ({ id: `g${g}-${t}`, embeddings: planted }));
      appends.push(post(`${url}/v1/documents`, { documents }, auth));
    }
    const answers = await Promise.all(appends);
    done = true;
    await searching;
    for (const a of answers) assert.equal(a.status, 201, a.text);
    const counts = answers.map((a) => a.json.documents).sort((a, b) => a - b);
    assert.deepEqual(
      counts,
      Array.from({ length: ROUNDS }, (_, g) => DOCS + SEG * (g + 1)),
    );
    assert.ok(seen.length > 0);
    for (const ids of seen) {
      const groups = new Map<string, number>();
      for (const id of ids.filter((x) => x.startsWith('g')))
        groups.set(id.split('-')[0], (groups.get(id.split('-')[0]) ?? 0) + 1);
      for (const [g, n] of groups) assert.equal(n, SEG, `a search saw ${n} of the ${SEG} documents of ${g}`);
    }
    // after the appends every planted document is found, and the new state is on disk
    const final = await post(`${url}/v1/search`, probe);
    assert.equal(
      final.json.results[0].filter((h: { id: string }) => h.id.startsWith('g')).length,
      SEG * ROUNDS,
    );
    assert.equal(openCorpus(dir).info.documents, DOCS + SEG * ROUNDS);
    // rerank across segments: candidates from the first segment and from appended ones
    const cands = ['g2-1', 'doc4', 'g0-3', 'doc77', 'g5-0'];
    const q = randomTokens(5);
    const r = await post(`${url}/v1/rerank`, { query: q, candidates: cands });
    assert.equal(r.status, 200, r.text);
    const corpus = openCorpus(dir);
    const indices = cands.map((id) =>
      Array.from({ length: corpus.info.documents }, (_, i) => corpus.id(i)).indexOf(id),
    );
    const direct = await maxsim(
      tokenMatrix(Float32Array.from(q.flat()), 5, DIM),
      corpus.readDocuments(indices),
      {
        backend: 'cpu',
      },
    );
    for (const x of r.json.results) assert.equal(x.relevance_score, direct[x.index]);
  });

  test('DELETE /v1/documents needs the key, is visible atomically and equals Corpus.search after the delete', async () => {
    const dir = path.join(tmp, 'shrink.msx');
    buildCorpus(dir);
    const { url } = await start({ corpus: dir, apiKey: KEY, maxWaitMs: 1 });
    const auth = { authorization: `Bearer ${KEY}` };
    const probe = { queries: [randomTokens(5), randomTokens(2)], top_k: 30 };
    const before = await post(`${url}/v1/search`, probe);
    assert.equal(before.status, 200, before.text);
    // the top hits of the first query go
    const gone = before.json.results[0].slice(0, 5).map((h: { id: string }) => h.id);
    expectError(await call(`${url}/v1/documents`, 'DELETE', { ids: gone }), 401);
    const missing = await call(`${url}/v1/documents`, 'DELETE', { ids: [gone[0], 'nope'] }, auth);
    expectError(missing, 404, 'ids');
    assert.equal(openCorpus(dir).info.deleted, 0, 'an unknown id deletes nothing');
    const del = await call(`${url}/v1/documents`, 'DELETE', { ids: gone }, auth);
    assert.equal(del.status, 200, del.text);
    assert.deepEqual([del.json.deleted, del.json.live], [5, DOCS - 5]);
    const info = (await call(`${url}/v1/info`, 'GET')).json.corpus;
    assert.deepEqual([info.documents, info.live, info.deleted], [DOCS, DOCS - 5, 5]);
    const after = await post(`${url}/v1/search`, probe);
    const direct = await openCorpus(dir).search(packed(probe.queries), { topK: 30, backend: 'cpu' });
    assert.deepEqual(
      after.json.results,
      direct.map((row) => row.map((h) => ({ id: h.id, index: h.index, score: h.score }))),
    );
    for (const row of after.json.results)
      for (const h of row) assert.ok(!gone.includes(h.id), `deleted ${h.id} in the results`);
    const rr = await post(`${url}/v1/rerank`, { query: probe.queries[0], candidates: [gone[1]] });
    expectError(rr, 404, 'candidates');
    expectError(await call(`${url}/v1/documents`, 'DELETE', { ids: [gone[2]] }, auth), 404, 'ids');
    // a deleted id may be appended again
    const again = await post(
      `${url}/v1/documents`,
      { documents: [{ id: gone[0], embeddings: randomTokens(3) }] },
      auth,
    );
    assert.equal(again.status, 201, again.text);
  });

  test('an int8 corpus: search and rerank quantize the queries as the library does', async () => {
    const dir = path.join(tmp, 'int8.msx');
    const docs = Array.from({ length: 120 }, () => randomTokens(1 + Math.floor(rand() * 12)));
    const w = CorpusWriter.create(dir, { dim: DIM, dtype: 'int8' });
    w.add(packed(docs));
    w.commit();
    const { url } = await start({ corpus: dir });
    const q = [randomTokens(6), randomTokens(3)];
    const r = await post(`${url}/v1/search`, { queries: q, top_k: 5 });
    assert.equal(r.status, 200, r.text);
    const direct = await openCorpus(dir).search(packed(q), { topK: 5, backend: 'cpu' });
    assert.deepEqual(
      r.json.results,
      direct.map((row) => row.map((h) => ({ id: h.id, index: h.index, score: h.score }))),
    );
    const rr = await post(`${url}/v1/rerank`, { query: q[0], candidates: ['3', '50', '7'] });
    assert.equal(rr.status, 200, rr.text);
    const want = await maxsim(
      quantize(tokenMatrix(Float32Array.from(q[0].flat()), 6, DIM), 'int8'),
      openCorpus(dir).readDocuments([3, 50, 7]),
      {
        backend: 'cpu',
      },
    );
    for (const x of rr.json.results) assert.equal(x.relevance_score, want[x.index]);
    // an append (quantized in the writer's worker thread), then a writer that holds the lock: a clear
    // error, the corpus unchanged, the server serving
    const add = await post(`${url}/v1/documents`, { documents: [{ embeddings: randomTokens(4) }] });
    assert.equal(add.status, 201, add.text);
    assert.equal(add.json.documents, 121);
    fs.writeFileSync(path.join(dir, 'LOCK'), String(process.ppid));
    const busy = await post(`${url}/v1/documents`, { documents: [{ embeddings: randomTokens(4) }] });
    expectError(busy, 503);
    assert.equal(busy.json.error.code, 'corpus_locked');
    assert.equal(busy.headers.get('retry-after'), '1');
    assert.match(busy.json.error.message, /corpus is locked by pid \d+/);
    fs.rmSync(path.join(dir, 'LOCK'));
    assert.equal(openCorpus(dir).info.documents, 121);
    assert.equal((await post(`${url}/v1/search`, { queries: q, top_k: 1 })).status, 200);
  });
});

describe('maxsim serve process', () => {
  test('SIGTERM drains the requests in flight and exits 0', { timeout: 30_000 }, async () => {
    const dir = path.join(tmp, 'sig.msx');
    buildCorpus(dir);
    const child = spawn(
      process.execPath,
      [
        CLI,
        'serve',
        '--corpus',
        dir,
        '--port',
        '0',
        '--backend',
        'cpu',
        '--max-wait-ms',
        '1500',
        '--log-level',
        'silent',
      ],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    const url = await listeningUrl(child);
    const inFlight = Array.from({ length: 5 }, () =>
      post(`${url}/v1/search`, { queries: [randomTokens(3)], top_k: 2 }),
    );
    // wait until all of them are queued (waiting for company), bounded
    for (let i = 0; i < 100; i++) {
      const m = /^maxsim_queue_depth (\d+)/m.exec((await call(`${url}/metrics`, 'GET')).text);
      if (Number(m?.[1]) === 5) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    child.kill('SIGTERM');
    const rs = await Promise.all(
      inFlight.map((p) =>
        p.catch((e) => {
          throw new Error(`in flight: ${e.cause?.message ?? e.message}`);
        }),
      ),
    );
    for (const r of rs) assert.equal(r.status, 200, r.text);
    assert.equal(await exited, 0);
    await assert.rejects(fetch(`${url}/healthz`));
  });

  test('the CLI refuses bad options with one line naming them', () => {
    const dir = path.join(tmp, 'cli.msx');
    buildCorpus(dir);
    const keyFile = path.join(tmp, 'short.key');
    fs.writeFileSync(keyFile, 'short\n');
    const cases: [string[], RegExp][] = [
      [['--corpus', path.join(tmp, 'nothing.msx')], /no such corpus/],
      [['--corpus', dir, '--api-key-file', keyFile], /--api-key-file/],
      [['--corpus', dir, '--auth-reads'], /--auth-reads/],
      [['--corpus', dir, '--backend', 'cpu', '--pin'], /pin/],
      [['--corpus', dir, '--max-batch', '0'], /max-batch/],
      // every numeric flag names itself (--max-wait-ms said 'option')
      [['--corpus', dir, '--max-wait-ms', 'bad'], /--max-wait-ms/],
      [['--corpus', dir, '--max-wait-ms', '-1'], /--max-wait-ms/],
      [['--corpus', dir, '--max-queue', 'x'], /--max-queue/],
      [['--corpus', dir, '--passes-in-flight', '0'], /--passes-in-flight/],
      [['--corpus', dir, '--timeout-ms', 'x'], /--timeout-ms/],
      [['--corpus', dir, '--body-limit', 'x'], /--body-limit/],
      [['--corpus', dir, '--close-grace-ms', 'x'], /--close-grace-ms/],
      [['--corpus', dir, '--max-work', 'x'], /--max-work/],
      [['--corpus', dir, '--threads', 'x'], /--threads/],
      [['--corpus', dir, '--gpus', 'x'], /--gpus/],
      [['--corpus', dir, '--dtype', 'x'], /--dtype/],
    ];
    for (const [args, message] of cases) {
      const r = spawnSync(process.execPath, [CLI, 'serve', '--port', '0', ...args], {
        encoding: 'utf8',
        timeout: 20_000,
      });
      assert.notEqual(r.status, 0, `${args.join(' ')}: ${r.stderr}`);
      assert.equal(r.signal, null);
      const lines = r.stderr.trim().split('\n');
      assert.equal(lines.length, 1, r.stderr);
      assert.match(lines[0], /^maxsim: /);
      assert.match(lines[0], message);
    }
  });
});

function listeningUrl(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    let err = '';
    const timer = setTimeout(() => reject(new Error(`no listening line: ${err}`)), 15_000);
    child.stderr!.on('data', (d) => {
      err += String(d);
      const m = /listening on (http:\/\/\S+)/.exec(err);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.on('exit', (code) => reject(new Error(`exited ${code}: ${err}`)));
  });
}

function encodeNpyBytes(data: Float32Array, shape: number[]): Uint8Array {
  return encodeNpy({ dtype: 'float32', shape, data });
}
