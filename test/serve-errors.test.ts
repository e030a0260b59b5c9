// Errors that say what is wrong: each names the field (or header), what was expected and what came,
// in plain words: a corpus range error by the request's element, content types and encodings the
// server does not take, a prototype-poisoning key, the body limit, a duplicate id, schema limits,
// unions, and /readyz counting only live documents.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { gzipSync } from 'node:zlib';
import { encodeNpy } from '../src/io/npy.js';
import type { MaxsimServer } from '../src/server/app.js';
import { rng, runSeed } from './helpers.js';
import { buildCorpus, call, DIM, KEY, post, start } from './serve-helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-errors-'));
const servers: MaxsimServer[] = [];
const rand = rng(runSeed ^ 0xe770);
const auth = { authorization: `Bearer ${KEY}` };
const json = { 'content-type': 'application/json' };

after(async () => {
  await Promise.all(servers.map((s) => s.close()));
  fs.rmSync(tmp, { recursive: true, force: true });
});

/** The error's status, field, expected and received, all present. */
function precise(r: { status: number; text: string; json?: unknown }, status: number, field: string) {
  const e = (r.json as { error?: Record<string, unknown> } | undefined)?.error;
  assert.equal(r.status, status, r.text);
  assert.equal(e?.field, field, r.text);
  assert.equal(typeof e?.expected, 'string', r.text);
  assert.equal(typeof e?.received, 'string', r.text);
  return e as { code: string; message: string; expected: string; received: string };
}

describe('precise errors', () => {
  const dir = path.join(tmp, 'docs.msx');
  let url: string;
  const row = Array.from({ length: DIM }, (_, i) => (i === 0 ? 1 : 0));
  before(async () => {
    buildCorpus(dir, 20, rand);
    ({ url } = await start(servers, { corpus: dir, apiKey: KEY, bodyLimit: 4096 }));
  });

  test('an append beyond float16 names the element of the request, not the writer batch', async () => {
    const big = row.map((v, i) => (i === 3 ? 70000 : v));
    const r = await post(`${url}/v1/documents`, { documents: [{ id: 'n', embeddings: [row, big] }] }, auth);
    const e = precise(r, 400, 'documents[0].embeddings[1][3]');
    assert.equal(e.received, '70000');
    assert.doesNotMatch(r.text, /batch\.data|--clamp/);
  });

  test('content types, charsets and encodings the server does not take: 415 naming the header', async () => {
    const npy = encodeNpy({ dtype: 'float32', shape: [1, DIM], data: Float32Array.from(row) });
    let e = precise(await post(`${url}/v1/search`, npy, json), 415, 'content-type');
    assert.match(e.expected, /application\/x-npy/);
    e = precise(await post(`${url}/v1/search`, '{}', { 'content-type': 'text/plain' }), 415, 'content-type');
    assert.match(e.expected, /application\/json.*application\/x-npy.*application\/octet-stream/);
    e = precise(
      await post(`${url}/v1/search`, '{"queries": []}', {
        'content-type': 'application/json; charset=utf-16',
      }),
      415,
      'content-type',
    );
    assert.equal(e.received, 'charset=utf-16');
    const gz = gzipSync(JSON.stringify({ queries: [[row]] }));
    e = precise(
      await post(`${url}/v1/search`, gz, { ...json, 'content-encoding': 'gzip' }),
      415,
      'content-encoding',
    );
    assert.equal(e.received, '"gzip"');
  });

  test('a __proto__ key is named; the body limit, a duplicate id and schema limits say field, expected and received', async () => {
    const e = precise(
      await post(`${url}/v1/search`, `{"queries": [[${row}]], "__proto__": {}}`, json),
      400,
      '__proto__',
    );
    assert.equal(e.code, 'invalid_argument');
    const tooBig = precise(
      await post(`${url}/v1/search`, `{"queries": "${'A'.repeat(5000)}"}`, json),
      413,
      'body',
    );
    assert.match(tooBig.expected, /4096 bytes/);
    precise(
      await post(`${url}/v1/documents`, { documents: [{ id: 'doc1', embeddings: [row] }] }, auth),
      409,
      'documents[].id',
    );
    const empty = precise(await call(`${url}/v1/documents`, 'DELETE', { ids: [] }, auth), 400, 'ids');
    assert.equal(empty.message, 'Expected at least 1 item for ids but received 0 items');
    const union = precise(await post(`${url}/v1/search`, { queries: [[row]], index: 5 }), 400, 'index');
    assert.equal(union.expected, 'false or an object');
  });

  test('a .npy body of 16-bit integers is refused without the library option hint; /readyz counts live documents', async () => {
    const u2 = encodeNpy({ dtype: 'bfloat16', shape: [1, DIM], data: new Uint16Array(DIM) });
    const r = await post(`${url}/v1/search`, u2, { 'content-type': 'application/x-npy' });
    precise(r, 400, 'body.dtype');
    assert.doesNotMatch(r.text, /u2As/);
    assert.equal((await call(`${url}/v1/documents`, 'DELETE', { ids: ['doc2'] }, auth)).status, 200);
    assert.equal((await call(`${url}/readyz`, 'GET')).json.documents, 19);
  });

  test('a known route asked with another method: 405 with Allow; an unknown route stays 404', async () => {
    let r = await call(`${url}/v1/search`, 'GET');
    const e = precise(r, 405, 'method');
    assert.equal(r.headers.get('allow'), 'POST');
    assert.equal(e.received, 'GET');
    r = await call(`${url}/v1/documents`, 'PUT', {}, auth);
    assert.equal(r.status, 405, r.text);
    assert.equal(r.headers.get('allow'), 'POST, DELETE');
    assert.equal((await call(`${url}/healthz`, 'POST', {})).headers.get('allow'), 'GET, HEAD');
    assert.equal((await call(`${url}/v1/nothing`, 'GET')).status, 404);
  });
});
