// Text in through the service, with the tiny test model: a corpus built from texts (its model recorded)
// served without --model, text searches equal to embedding searches of the same encoded queries,
// reranks by text equal to reranks by the encoded vectors (Cohere / Jina-shaped), documents appended by
// text found by text, POST /v1/encode and GET /v1/model, batching across requests, and hostile bodies
// (empty, 1 MB, 10,000 texts, lone surrogates, mixed fields, no model, a deadline) answered with one-line
// 4xx / 504 errors while the server keeps answering.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { referenceMaxsim } from '../src/backends/reference.js';
import { type ColbertEncoder, loadColbert } from '../src/encode/colbert.js';
import { buildCorpusFromTexts, ENCODER_FILE } from '../src/encode/corpus-texts.js';
import type { MaxsimServer } from '../src/server/app.js';
import { createServer } from '../src/server/index.js';
import { batchItem, raggedBatch, type TokenBatch } from '../src/tensor.js';
import { b64Of, buildCorpus, call, expectError, post, start } from './serve-helpers.js';
import { TINY, tinySkip } from './tiny-model.js';

const skip = tinySkip;

const WORDS = (
  'the of and to in is paris city river seine museum louvre tower eiffel bridge garden street market ' +
  'history king revolution church art painting science music library university'
).split(' ');
let seed = 7;
const rand = () => {
  seed = (seed * 48271) % 2147483647;
  return seed / 2147483647;
};
const sentence = (words: number) =>
  Array.from({ length: words }, () => WORDS[Math.floor(rand() * WORDS.length)]).join(' ');
const DOCS = Array.from({ length: 40 }, () => `${sentence(5 + Math.floor(rand() * 40))}.`);
const QUERIES = ['where is the eiffel tower?', 'a museum of art in paris', 'history of the seine'];

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-serve-text-'));
const servers: MaxsimServer[] = [];
let encoder: ColbertEncoder;
let url: string;
let server: MaxsimServer;
before(async () => {
  if (skip) return;
  encoder = await loadColbert(TINY);
  await buildCorpusFromTexts({
    out: path.join(tmp, 'texts.msx'),
    model: encoder,
    texts: DOCS,
    ids: DOCS.map((_, i) => `t${i}`),
    dtype: 'float32',
  });
  ({ server, url } = await start(servers, { corpus: path.join(tmp, 'texts.msx'), encodeWaitMs: 20 }));
});
after(async () => {
  for (const s of servers) await s.close();
  await encoder?.close();
  fs.rmSync(tmp, { recursive: true, force: true });
});

/** Item b of a batch as [tokens][dim] numbers. */
function nested(batch: TokenBatch, b: number): number[][] {
  const m = batchItem(batch, b);
  const data = m.data as Float32Array;
  return Array.from({ length: m.length }, (_, t) => Array.from(data.subarray(t * m.dim, (t + 1) * m.dim)));
}

function closeScores(a: number[], b: number[], what: string) {
  assert.equal(a.length, b.length, what);
  for (let i = 0; i < a.length; i++)
    assert.ok(
      Math.abs(a[i] - b[i]) <= 1e-5 * Math.max(1, Math.abs(b[i])),
      `${what}[${i}]: ${a[i]} vs ${b[i]}`,
    );
}

/** Every error of the service is one line: code, message, the field named. */
function oneLine(r: { status: number; text: string; json?: unknown }, status: number, field?: string) {
  expectError(r, status, field);
  assert.doesNotMatch((r.json as { error: { message: string } }).error.message, /\n/);
}

describe('maxsim serve with a model', { skip }, () => {
  test('the corpus records its model: the server uses it and names it in /v1/info and /v1/model', async () => {
    assert.ok(
      server.notes.some((l) => /tiny-colbert \(recorded in the corpus, dim 16\)/.test(l)),
      server.notes.join('\n'),
    );
    const info = (await call(`${url}/v1/info`, 'GET')).json;
    assert.deepEqual(
      { ...info.model },
      {
        name: 'tiny-colbert',
        source: 'corpus',
        dim: 16,
        hidden: encoder.info.hidden,
        query_length: 32,
        document_length: 300,
        query_prefix: '[unused0]',
        document_prefix: '[unused1]',
        query_expansion: true,
        attend_to_expansion_tokens: false,
        skiplist: 32,
        lowercase: encoder.settings.doLowerCase,
        backend: 'cpu',
      },
    );
    const model = (await call(`${url}/v1/model`, 'GET')).json;
    assert.equal(model.name, 'tiny-colbert');
    assert.equal(typeof model.encoding.runs, 'number');
    const api = (await call(`${url}/openapi.json`, 'GET')).json;
    assert.ok(api.paths['/v1/encode'] && api.paths['/v1/model']);
    const search = api.paths['/v1/search'].post.requestBody.content['application/json'].schema;
    assert.ok(search.properties.query, 'SearchBody documents query (text)');
  });

  test('a text search equals the embeddings search of the same encoded queries', async () => {
    const byText = await post(`${url}/v1/search`, { queries: QUERIES, top_k: 7 });
    assert.equal(byText.status, 200, byText.text);
    const q = await encoder.encodeQueries(QUERIES);
    assert.deepEqual(Array.from(q.lengths), [32, 32, 32]);
    const b64 = { b64: b64Of(q.data as Float32Array), dtype: 'float32', shape: [3, 32, 16] };
    const byVectors = await post(`${url}/v1/search`, { queries: b64, top_k: 7 });
    assert.equal(byVectors.status, 200, byVectors.text);
    for (let i = 0; i < QUERIES.length; i++) {
      const t = byText.json.results[i];
      const v = byVectors.json.results[i];
      assert.deepEqual(
        t.map((h: { id: string }) => h.id),
        v.map((h: { id: string }) => h.id),
        `query ${i}`,
      );
      closeScores(
        t.map((h: { score: number }) => h.score),
        v.map((h: { score: number }) => h.score),
        `query ${i}`,
      );
    }
    // the float64 MaxSim of the encoded query over the encoded documents ranks the same first hit
    const d = await encoder.encodeDocuments(DOCS);
    const ref = referenceMaxsim(q, d);
    const best = Array.from(ref.subarray(0, DOCS.length)).reduce((b, s, j, a) => (s > a[b] ? j : b), 0);
    assert.equal(byText.json.results[0][0].id, `t${best}`);
    closeScores([byText.json.results[0][0].score], [ref[best]], 'against float64');
    // one query as `query`, and with ids: the same scores
    const one = await post(`${url}/v1/search`, { query: QUERIES[1], top_k: 7 });
    assert.deepEqual(one.json.results[0], byText.json.results[1]);
    const ids = byText.json.results[2].slice(0, 3).map((h: { id: string }) => h.id);
    const restricted = await post(`${url}/v1/search`, { query: QUERIES[2], ids, top_k: 3 });
    assert.equal(restricted.status, 200, restricted.text);
    closeScores(
      restricted.json.results[0].map((h: { score: number }) => h.score),
      byText.json.results[2].slice(0, 3).map((h: { score: number }) => h.score),
      'ids',
    );
  });

  test('rerank by text equals rerank by the encoded vectors (index, relevance_score, top_n, return_documents)', async () => {
    const docs = DOCS.slice(5, 17);
    const byText = await post(`${url}/v1/rerank`, {
      query: QUERIES[0],
      documents: docs,
      top_n: 5,
      return_documents: true,
    });
    assert.equal(byText.status, 200, byText.text);
    const q = await encoder.encodeQueries([QUERIES[0]]);
    const d = await encoder.encodeDocuments(docs);
    const byVectors = await post(`${url}/v1/rerank`, {
      query: nested(q, 0),
      documents: docs.map((_, i) => ({ embeddings: nested(d, i) })),
    });
    assert.equal(byVectors.status, 200, byVectors.text);
    assert.equal(byText.json.results.length, 5);
    assert.deepEqual(
      byText.json.results.map((r: { index: number }) => r.index),
      byVectors.json.results.slice(0, 5).map((r: { index: number }) => r.index),
    );
    closeScores(
      byText.json.results.map((r: { relevance_score: number }) => r.relevance_score),
      byVectors.json.results.slice(0, 5).map((r: { relevance_score: number }) => r.relevance_score),
      'rerank',
    );
    for (const r of byText.json.results) assert.deepEqual(r.document, { text: docs[r.index] });
    assert.equal(byVectors.json.results[0].document, undefined);
    // a text query over candidates of the corpus, and a text query over inline vectors
    const ids = docs.map((_, i) => `t${i + 5}`);
    const cand = await post(`${url}/v1/rerank`, { query: QUERIES[0], candidates: ids, top_n: 5 });
    assert.deepEqual(
      cand.json.results.map((r: { id: string }) => r.id),
      byText.json.results.map((r: { index: number }) => `t${r.index + 5}`),
    );
    const mixed = await post(`${url}/v1/rerank`, {
      query: QUERIES[0],
      documents: docs.map((_, i) => ({ embeddings: nested(d, i) })),
      top_n: 5,
    });
    assert.deepEqual(
      mixed.json.results.map((r: { index: number }) => r.index),
      byText.json.results.map((r: { index: number }) => r.index),
    );
  });

  test('documents appended by text are found by text, scored as the encoded documents', async () => {
    const added = ['the eiffel tower stands by the seine in paris.', 'a garden of music and science.'];
    const r = await post(`${url}/v1/documents`, { texts: added, ids: ['new0', 'new1'] });
    assert.equal(r.status, 201, r.text);
    assert.equal(r.json.added, 2);
    const found = await post(`${url}/v1/search`, { query: 'eiffel tower by the seine', top_k: 100 });
    assert.equal(found.json.results[0].length, DOCS.length + 2);
    const q = await encoder.encodeQueries(['eiffel tower by the seine']);
    const ref = referenceMaxsim(q, await encoder.encodeDocuments(added));
    for (const [i, id] of ['new0', 'new1'].entries()) {
      const hit = found.json.results[0].find((h: { id: string }) => h.id === id);
      assert.ok(hit, id);
      closeScores([hit.score], [ref[i]], id);
    }
    // ids must match the texts, and a corpus with ids needs them
    oneLine(await post(`${url}/v1/documents`, { texts: ['a', 'b'], ids: ['x'] }), 400, 'ids');
    oneLine(
      await post(`${url}/v1/documents`, { texts: ['a'], documents: [{ embeddings: [[1]] }] }),
      400,
      'documents',
    );
  });

  test('POST /v1/encode equals the library (JSON and base64) and batches concurrent requests', async () => {
    const r = await post(`${url}/v1/encode`, { texts: DOCS.slice(0, 3), kind: 'document' });
    assert.equal(r.status, 200, r.text);
    const direct = await encoder.encodeDocuments(DOCS.slice(0, 3));
    assert.deepEqual(r.json.lengths, Array.from(direct.lengths));
    const flat = (r.json.embeddings as number[][][]).flat(2);
    assert.equal(flat.length, direct.data.length);
    assert.ok(flat.every((v, i) => Math.abs(v - (direct.data as Float32Array)[i]) < 1e-5));
    const b = await post(`${url}/v1/encode`, {
      texts: ['where is the tower?'],
      kind: 'query',
      format: 'b64',
    });
    assert.deepEqual(b.json.embeddings.shape, [32, 16]);
    const bytes = Buffer.from(b.json.embeddings.b64, 'base64');
    const got = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
    const want = (await encoder.encodeQueries(['where is the tower?'])).data as Float32Array;
    assert.ok(got.every((v, i) => Math.abs(v - want[i]) < 1e-5));

    const runs = (await call(`${url}/v1/model`, 'GET')).json.encoding.runs;
    const many = await Promise.all(
      QUERIES.flatMap((q) => [q, `${q} again`]).map((q) => post(`${url}/v1/search`, { query: q, top_k: 3 })),
    );
    assert.ok(many.every((x) => x.status === 200));
    const after = (await call(`${url}/v1/model`, 'GET')).json.encoding;
    assert.ok(after.runs - runs < 6, `6 concurrent text searches took ${after.runs - runs} encoder runs`);
    assert.ok(after.largest_run > 1);
    const metrics = (await call(`${url}/metrics`, 'GET')).text;
    assert.match(metrics, /maxsim_encode_run_seconds_count\{kind="query"\} [1-9]/);
    assert.match(metrics, /maxsim_request_phase_seconds_count\{phase="embed"\} [1-9]/);
  });

  test('hostile text bodies get one-line 4xx errors, and the server keeps answering', async () => {
    const huge = 'paris '.repeat(200_000); // 1.2 MB
    const lone = 'tower \ud800 paris';
    const flood = [
      [post(`${url}/v1/search`, { query: '' }), 400, 'query'],
      [post(`${url}/v1/search`, { queries: ['ok', ' \t '] }), 400, 'queries[1]'],
      [post(`${url}/v1/search`, { query: huge }), 413, 'query'],
      [post(`${url}/v1/rerank`, { query: 'x', documents: ['a', huge] }), 413, 'documents[1]'],
      [
        post(`${url}/v1/search`, { queries: Array.from({ length: 10_000 }, (_, i) => `q${i}`) }),
        413,
        'queries',
      ],
      [
        post(`${url}/v1/documents`, { texts: Array.from({ length: 10_000 }, (_, i) => `d${i}`) }),
        413,
        'texts',
      ],
      [post(`${url}/v1/encode`, { texts: Array.from({ length: 10_000 }, () => 'x') }), 413, 'texts'],
      [post(`${url}/v1/search`, { query: lone }), 400, 'query'],
      [post(`${url}/v1/rerank`, { query: 'a', documents: ['b', lone] }), 400, 'documents[1]'],
      [post(`${url}/v1/documents`, { texts: [lone], ids: ['bad'] }), 400, 'texts[0]'],
      [post(`${url}/v1/search`, { queries: ['a', [[0.5]]] }), 400, 'queries'],
      [post(`${url}/v1/search`, { query: 'a', queries: ['b'] }), 400, 'query'],
      [post(`${url}/v1/rerank`, { query: 'a', documents: ['b', { embeddings: [[1]] }] }), 400, 'documents'],
      [
        post(`${url}/v1/rerank`, { query: 'a', candidates: ['t1'], return_documents: true }),
        400,
        'return_documents',
      ],
      [post(`${url}/v1/search`, { query: 7 }), 400, 'query'],
      [post(`${url}/v1/encode`, { texts: ['a'], kind: 'passage' }), 400, 'kind'],
    ] as const;
    const alive = post(`${url}/v1/search`, { query: QUERIES[0], top_k: 2 });
    for (const [reply, status, field] of flood) oneLine(await reply, status, field);
    assert.equal((await alive).status, 200);
    assert.equal((await call(`${url}/healthz`, 'GET')).status, 200);
    const too = (await post(`${url}/v1/search`, { query: huge })).json.error;
    assert.equal(too.code, 'text_too_long');
    assert.match(too.expected, /at most 32768 characters/);
  });

  test('a deadline that passes while a text waits for the encoder: 504, and the run is skipped', async () => {
    const { url: fast, server: s } = await start(servers, {
      corpus: path.join(tmp, 'texts.msx'),
      timeoutMs: 5,
      encodeWaitMs: 200,
    });
    const r = await post(`${fast}/v1/search`, { query: QUERIES[0] });
    oneLine(r, 504);
    assert.equal(r.json.error.code, 'deadline_exceeded');
    await new Promise((resolve) => setTimeout(resolve, 250));
    assert.equal((await call(`${fast}/v1/model`, 'GET')).json.encoding.runs, 0, 'nobody waited: no run');
    assert.equal((await call(`${fast}/readyz`, 'GET')).status, 200);
    assert.ok(s.model);
  });
});

describe('maxsim serve without a model', { skip }, () => {
  test('text fields get 400 no_model naming the field; /v1/model 404; embeddings still work', async () => {
    buildCorpus(path.join(tmp, 'vectors.msx'), 10, rand);
    const { url: plain, server: s } = await start(servers, { corpus: path.join(tmp, 'vectors.msx') });
    assert.equal(s.model, null);
    assert.equal((await call(`${plain}/v1/info`, 'GET')).json.model, null);
    for (const [route, body, field] of [
      ['/v1/search', { query: 'a' }, 'query'],
      ['/v1/search', { queries: ['a', 'b'] }, 'queries'],
      ['/v1/rerank', { query: 'a', candidates: ['doc1'] }, 'query'],
      ['/v1/rerank', { query: [[...Array(16).keys()]], documents: ['a'] }, 'documents'],
      ['/v1/documents', { texts: ['a'], ids: ['x'] }, 'texts'],
      ['/v1/encode', { texts: ['a'] }, 'texts'],
    ] as const) {
      const r = await post(`${plain}${route}`, body);
      oneLine(r, 400, field);
      assert.equal(r.json.error.code, 'no_model', r.text);
    }
    expectError(await call(`${plain}/v1/model`, 'GET'), 404);
    const q = Array.from({ length: 3 }, () => Array.from({ length: 16 }, () => rand() - 0.5));
    assert.equal((await post(`${plain}/v1/search`, { queries: [q], top_k: 2 })).status, 200);
  });

  test("the corpus's model is gone: the server starts, says so, and text gets a 400 saying why", async () => {
    const dir = path.join(tmp, 'moved.msx');
    fs.cpSync(path.join(tmp, 'texts.msx'), dir, { recursive: true });
    const record = JSON.parse(fs.readFileSync(path.join(dir, ENCODER_FILE), 'utf8'));
    record.model = path.join(tmp, 'no-such-model');
    fs.writeFileSync(path.join(dir, ENCODER_FILE), JSON.stringify(record));
    const { url: gone, server: s } = await start(servers, { corpus: dir });
    assert.ok(
      s.notes.some((l) => /no-such-model is gone/.test(l)),
      s.notes.join('\n'),
    );
    const r = await post(`${gone}/v1/search`, { query: 'a' });
    oneLine(r, 400, 'query');
    assert.match(r.json.error.message, /no-such-model\) is gone/);
    // --model names one explicitly
    const { url: named, server: n } = await start(servers, { corpus: dir, model: TINY });
    assert.equal(n.model?.source, 'option');
    assert.equal((await post(`${named}/v1/search`, { query: 'a' })).status, 200);
  });

  test('a document without tokens scores null with empty: true in searches, searches by ids and reranks by id', async () => {
    const dir = path.join(tmp, 'empty-doc.msx');
    const { CorpusWriter } = await import('../src/io/corpus/index.js');
    const w = CorpusWriter.create(dir, { dim: 2, dtype: 'float32', ids: true });
    w.add(raggedBatch(Float32Array.from([1, 0, 0, 1, 0.5, 0.5]), [0, 2, 2, 3], { dim: 2 }), [
      'a',
      'none',
      'c',
    ]);
    w.commit();
    const { url: e } = await start(servers, { corpus: dir });
    const q = [[1, 0]];
    const search = await post(`${e}/v1/search`, { queries: [q], top_k: 3 });
    assert.equal(search.status, 200, search.text);
    assert.deepEqual(search.json.results[0], [
      { id: 'a', index: 0, score: 1 },
      { id: 'c', index: 2, score: 0.5 },
      { id: 'none', index: 1, score: null, empty: true },
    ]);
    const byIds = await post(`${e}/v1/search`, { queries: [q], ids: ['none', 'c'], top_k: 2 });
    assert.deepEqual(byIds.json.results[0], [
      { id: 'c', index: 2, score: 0.5 },
      { id: 'none', index: 1, score: null, empty: true },
    ]);
    const rerank = await post(`${e}/v1/rerank`, { query: q, candidates: ['none', 'a'] });
    assert.deepEqual(rerank.json.results, [
      { index: 1, id: 'a', relevance_score: 1 },
      { index: 0, id: 'none', relevance_score: null, empty: true },
    ]);
  });

  test('a model of another dimension than the corpus is refused at start', async () => {
    const dir = path.join(tmp, 'dim8.msx');
    const { CorpusWriter } = await import('../src/io/corpus/index.js');
    const w = CorpusWriter.create(dir, { dim: 8, dtype: 'float32' });
    w.add(raggedBatch(new Float32Array(16).fill(0.25), [0, 2], { dim: 8 }));
    w.commit();
    await assert.rejects(
      createServer({ corpus: dir, model: TINY, backend: 'cpu', port: 0, logger: false }),
      /Expected a model of the corpus's dimension 8 for model but received .*dim 16/,
    );
  });
});
