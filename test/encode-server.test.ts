// POST /v1/encode and GET /v1/model on a Fastify app (the routes `maxsim serve --model` adds): text in,
// the encoder's embeddings out (JSON or base64), batched across concurrent requests, bad bodies 400.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import Fastify, { type FastifyInstance } from 'fastify';
import { loadColbert } from '../src/encode/colbert.js';
import { loadOrt } from '../src/encode/runtime.js';
import { packageRoot } from '../src/native.js';
import { registerEncodeRoutes } from '../src/server/routes/encode.js';

const TINY = path.join(packageRoot, 'test', 'fixtures', 'tiny-colbert');
const hasOrt = await loadOrt().then(
  () => true,
  () => false,
);
const skip = !fs.existsSync(path.join(TINY, 'model.onnx'))
  ? 'test/fixtures/tiny-colbert/model.onnx not made yet'
  : !hasOrt && !process.env.CI
    ? 'onnxruntime-node is not installed'
    : false;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-encode-server-'));
const servers: FastifyInstance[] = [];
after(async () => {
  for (const s of servers) await s.close();
  fs.rmSync(tmp, { recursive: true, force: true });
});

describe('POST /v1/encode', { skip }, () => {
  test('embeddings equal the library, JSON and base64; batched across requests; bad bodies are 400s', async () => {
    const docs = ['The Eiffel Tower is in Paris.', 'The Louvre is a museum.', 'Rivers: the Seine.'];
    // as the service configures Ajv: no type coercion, extra fields refused
    const app = Fastify({
      logger: false,
      ajv: { customOptions: { coerceTypes: false, removeAdditional: false } },
    });
    servers.push(app);
    const encoder = await loadColbert(TINY);
    const queue = registerEncodeRoutes(app, encoder, { waitMs: 30 });
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    const post = (body: unknown) =>
      fetch(`${url}/v1/encode`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });

    const r = await post({ texts: docs, kind: 'document' });
    assert.equal(r.status, 200);
    const json = (await r.json()) as { dim: number; lengths: number[]; embeddings: number[][][] };
    const direct = await (await loadColbert(TINY)).encodeDocuments(docs);
    assert.equal(json.dim, 16);
    assert.deepEqual(json.lengths, Array.from(direct.lengths));
    const flat = json.embeddings.flat(2);
    assert.ok(flat.every((v, i) => Math.abs(v - (direct.data as Float32Array)[i]) < 1e-5));

    const b = (await (
      await post({ texts: ['where is the tower?'], kind: 'query', format: 'b64' })
    ).json()) as {
      lengths: number[];
      embeddings: { b64: string; shape: number[] };
    };
    assert.deepEqual(b.lengths, [32]);
    assert.deepEqual(b.embeddings.shape, [32, 16]);
    const bytes = Buffer.from(b.embeddings.b64, 'base64');
    const q = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
    const dq = await encoder.encodeQueries(['where is the tower?']);
    assert.ok(q.every((v, i) => Math.abs(v - (dq.data as Float32Array)[i]) < 1e-5));

    const before = queue.stats.runs;
    const many = await Promise.all(
      Array.from({ length: 6 }, (_, i) => post({ texts: [`text ${i}`, `more ${i}`] })),
    );
    assert.ok(many.every((x) => x.status === 200));
    assert.ok(queue.stats.runs - before < 6, `6 requests took ${queue.stats.runs - before} runs`);

    const bad = await post({ texts: ['a', 3] });
    assert.equal(bad.status, 400);
    assert.match(((await bad.json()) as { message: string }).message, /texts\/1/);
    assert.equal((await post({ texts: ['a'], kind: 'passage' })).status, 400);
    assert.equal((await post({ texts: ['a'], extra: 1 })).status, 400);

    const model = (await (await fetch(`${url}/v1/model`)).json()) as {
      dim: number;
      settings: { queryLength: number };
    };
    assert.equal(model.dim, 16);
    assert.equal(model.settings.queryLength, 32);
    await encoder.close();
  });
});
