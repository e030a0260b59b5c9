// `maxsim serve --backend cuda --dtype int8|fp8`: every search pass scans the 8-bit copy beside the
// resident float16 corpus and rescores the candidates exactly in the same job, so the answers are the
// exact GPU server's top-k (scores within the float accumulation order of two fp16 kernels), batched
// and one at a time, through appends and deletes; the budget and pin are refused naming dtype.
// Skipped with the reason where no GPU runs.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { InvalidArgumentError } from '../../src/errors.js';
import { encodeFloats, f16BitsToFloat } from '../../src/floats.js';
import { CorpusWriter } from '../../src/io/corpus/index.js';
import type { MaxsimServer, ServerOptions } from '../../src/server/app.js';
import { createServer } from '../../src/server/index.js';
import { randomRagged, rng, runSeed, writeSegments } from '../helpers.js';
import { b64Of, callJson, type SearchHit, searchBoth, start as startServer } from '../serve-helpers.js';
import { skip } from './helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-gpu-serve8-'));
const servers: MaxsimServer[] = [];
after(async () => {
  await Promise.all(servers.map((s) => s.close()));
  fs.rmSync(tmp, { recursive: true, force: true });
});

const DIM = 64;
const rand = rng(runSeed ^ 0x8e8e);

type Hit = SearchHit;

const start = (options: Partial<ServerOptions> & { corpus: string }) =>
  startServer(servers, { backend: 'cuda', ...options });

const call = callJson;

function tokens(n: number): number[][] {
  return Array.from({ length: n }, () => Array.from({ length: DIM }, () => rand() * 2 - 1));
}

/** The same documents in order (near ties may swap), scores within fp32 accumulation-order noise. */
function assertSameTopK(got: Hit[][], want: Hit[][], what: string) {
  assert.equal(got.length, want.length, what);
  want.forEach((row, q) => {
    assert.equal(got[q].length, row.length, `${what}: query ${q} hits`);
    row.forEach((w, i) => {
      const g = got[q][i];
      const tol = 1e-4 * Math.max(1, Math.abs(w.score));
      assert.ok(
        Math.abs(g.score - w.score) <= tol,
        `${what}: query ${q} rank ${i}: ${g.score} vs ${w.score}`,
      );
      if (g.id !== w.id)
        assert.ok(
          row.some((x) => x.id === g.id && Math.abs(x.score - g.score) <= tol),
          `${what}: query ${q} rank ${i}: ${g.id} instead of ${w.id}`,
        );
    });
  });
}

async function compare(exact: string, eight: string, queries: number[][][], k: number, what: string) {
  const [want, got] = await searchBoth(exact, eight, queries, k);
  assertSameTopK(got, want, what);
  return want;
}

describe('maxsim serve --dtype int8 | fp8 on CUDA', { skip }, () => {
  const dir = path.join(tmp, 'docs.msx');
  test('8-bit passes answer the exact top-k; batched; appends and deletes', async () => {
    writeSegments(dir, [3000, 700], { dim: DIM, maxLength: 60, rand });
    const exact = await start({ corpus: dir, maxWaitMs: 2 });
    for (const dtype of ['int8', 'fp8'] as const) {
      const eight = await start({ corpus: dir, dtype, maxWaitMs: 2 });
      const info = await call(`${eight.url}/v1/info`, 'GET');
      assert.equal(info.mode, 'resident');
      assert.equal(info.batching.dtype, dtype);
      for (const k of [1, 10, 100]) {
        const queries = Array.from({ length: 6 }, (_, i) => tokens(1 + i * 6));
        await compare(exact.url, eight.url, queries, k, `${dtype}, k ${k}`);
      }
      // concurrent requests share passes: each answer its own
      await Promise.all(
        Array.from({ length: 40 }, (_, i) =>
          compare(exact.url, eight.url, [tokens(1 + (i % 32))], 1 + (i % 12), `${dtype}, concurrent ${i}`),
        ),
      );
    }
    // float16 base64 bodies keep their bits in an 8-bit pass (quantized on the device): one request
    // at a time (a pass of its own: the same plan), the same answer bit for bit as the same values
    // sent as JSON numbers (a float32 pass); sharing passes with JSON requests (other pass sizes,
    // other plans), the same top-k within the kernels' accumulation-order noise
    for (const dtype of ['int8', 'fp8'] as const) {
      const eight = await start({ corpus: dir, dtype, maxWaitMs: 5 });
      const bits = Array.from(
        { length: 8 },
        (_, i) => encodeFloats(Float32Array.from(tokens(1 + i * 4).flat()), 'float16') as Uint16Array,
      );
      const asJson = bits.map((b) => {
        const rows: number[][] = [];
        for (let t = 0; t < b.length / DIM; t++)
          rows.push(Array.from(b.subarray(t * DIM, (t + 1) * DIM), f16BitsToFloat));
        return { queries: [rows], top_k: 10 };
      });
      const asB64 = bits.map((b) => ({
        queries: { b64: b64Of(b), dtype: 'float16', shape: [1, b.length / DIM, DIM] },
        top_k: 10,
      }));
      const want: Hit[][] = [];
      for (let i = 0; i < bits.length; i++) {
        const json = await call(`${eight.url}/v1/search`, 'POST', asJson[i]);
        const b64 = await call(`${eight.url}/v1/search`, 'POST', asB64[i]);
        assert.deepEqual(b64.results, json.results, `${dtype} float16 body ${i} alone`);
        want.push(json.results[0]);
      }
      const mixed = await Promise.all(
        asB64.flatMap((body, i) => [
          call(`${eight.url}/v1/search`, 'POST', body),
          call(`${eight.url}/v1/search`, 'POST', asJson[(i + 1) % asJson.length]),
        ]),
      );
      assertSameTopK(
        mixed.filter((_, j) => j % 2 === 0).map((r) => r.results[0]),
        want,
        `${dtype} float16 bodies sharing passes`,
      );
    }

    // writes while serving int8: the new segment gets its copy, deletes are masked
    const eight = await start({ corpus: dir, dtype: 'int8' });
    const queries = Array.from({ length: 4 }, () => tokens(16));
    for (let round = 0; round < 2; round++) {
      const documents = Array.from({ length: 50 }, (_, i) => ({
        id: `new${round}-${i}`,
        embeddings: tokens(30),
      }));
      await call(`${eight.url}/v1/documents`, 'POST', { documents });
      let rows = await compare(exact.url, eight.url, queries, 10, `after append ${round}`);
      const gone = rows[0].slice(0, 3).map((h) => h.id);
      await call(`${eight.url}/v1/documents`, 'DELETE', { ids: gone });
      rows = await compare(exact.url, eight.url, queries, 10, `after delete ${round}`);
      for (const r of rows) for (const h of r) assert.ok(!gone.includes(h.id), `${h.id} was deleted`);
    }
  });

  test('refused naming dtype: a budget without room for both copies, pin', async () => {
    const small = path.join(tmp, 'small.msx');
    const w = CorpusWriter.create(small, { dim: DIM, dtype: 'float16' });
    w.add(randomRagged([40, 50, 60], DIM, 'float32', rand));
    w.commit();
    const bytes = (40 + 50 + 60) * DIM * 2;
    for (const options of [{ gpuMemory: bytes + 100 }, { pin: true }])
      await assert.rejects(
        createServer({ corpus: small, backend: 'cuda', port: 0, logger: false, dtype: 'int8', ...options }),
        (e: Error) => e instanceof InvalidArgumentError && e.argument === 'dtype',
        JSON.stringify(options),
      );
  });
});
