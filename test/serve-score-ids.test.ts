// POST /v1/score of documents of the corpus by id ({id} objects): the scores of the stored documents
// (float16 here), unknown ids a 404 naming them, and a list that mixes kinds (or an {id} with
// embeddings) a 400 naming the document.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { encodeFloats, f16BitsToFloat } from '../src/floats.js';
import { maxsim } from '../src/ops/maxsim.js';
import type { MaxsimServer } from '../src/server/app.js';
import { rng, runSeed } from './helpers.js';
import { buildCorpus, expectError, packed, post, randomTokens, start } from './serve-helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-score-ids-'));
const servers: MaxsimServer[] = [];
const rand = rng(runSeed ^ 0x5c0e);

after(async () => {
  await Promise.all(servers.map((s) => s.close()));
  fs.rmSync(tmp, { recursive: true, force: true });
});

/** A document as the float16 corpus stores it. */
const stored = (doc: number[][]) =>
  doc.map((row) =>
    Array.from(encodeFloats(Float32Array.from(row), 'float16') as Uint16Array, f16BitsToFloat),
  );

describe('/v1/score by id', () => {
  const dir = path.join(tmp, 'docs.msx');
  let docs: number[][][];
  let url: string;
  before(async () => {
    docs = buildCorpus(dir, 40, rand);
    ({ url } = await start(servers, { corpus: dir }));
  });

  test('documents of the corpus by id score as the stored documents; unknown ids 404; mixed lists 400', async () => {
    const queries = [randomTokens(3, rand), randomTokens(5, rand)];
    const r = await post(`${url}/v1/score`, { queries, documents: [{ id: 'doc7' }, { id: 'doc2' }] });
    assert.equal(r.status, 200, r.text);
    const m = await maxsim(packed(queries), packed([stored(docs[7]), stored(docs[2])]), { backend: 'cpu' });
    assert.deepEqual(r.json.scores, [Array.from(m.data.subarray(0, 2)), Array.from(m.data.subarray(2, 4))]);
    const unknown = await post(`${url}/v1/score`, { queries, documents: [{ id: 'doc1' }, { id: 'nope' }] });
    expectError(unknown, 404, 'documents');
    assert.deepEqual(unknown.json.error.missing, ['nope']);
    expectError(
      await post(`${url}/v1/score`, { queries, documents: [{ id: 'doc1' }, { embeddings: docs[1] }] }),
      400,
      'documents[1]',
    );
    expectError(
      await post(`${url}/v1/score`, { queries, documents: [{ id: 'doc1', embeddings: docs[1] }] }),
      400,
      'documents[0].embeddings',
    );
    // the queries are checked against the corpus's dimension
    expectError(
      await post(`${url}/v1/score`, { queries: [[[1, 0]]], documents: [{ id: 'doc1' }] }),
      400,
      'queries[0][0]',
    );
  });
});
