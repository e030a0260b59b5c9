// `maxsim serve --backend cuda`: the GPU-resident corpus (one device corpus per segment) and the
// streamed one (--pin) answer like the CPU server (same ids, scores within float16 rounding), batched
// answers match unbatched ones, appends are uploaded and visible, the int8 prefilter returns the exact
// top-k, GPU memory is reported and released. Skipped with the reason where no GPU runs.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { decodeToFloat32, encodeFloats } from '../../src/floats.js';
import { CorpusWriter } from '../../src/io/corpus/index.js';
import type { MaxsimServer, ServerOptions } from '../../src/server/app.js';
import { createServer } from '../../src/server/index.js';
import { rng, runSeed, writeSegments } from '../helpers.js';
import { skip, status } from './helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-gpu-serve-'));
const servers: MaxsimServer[] = [];
after(async () => {
  await Promise.all(servers.map((s) => s.close()));
  fs.rmSync(tmp, { recursive: true, force: true });
});

const DIM = 64;
const rand = rng(runSeed ^ 0x6e7e);

interface Hit {
  id: string;
  index: number;
  score: number;
}

async function start(options: Partial<ServerOptions> & { corpus: string }) {
  const server = await createServer({ port: 0, logger: false, ...options });
  servers.push(server);
  return { server, url: (await server.listen()).url };
}

// biome-ignore lint/suspicious/noExplicitAny: JSON answers
async function post(url: string, body: unknown): Promise<{ status: number; json: any; batch: number }> {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: r.status, json: await r.json(), batch: Number(r.headers.get('x-maxsim-batch')) };
}

function tokens(n: number): number[][] {
  return Array.from({ length: n }, () => Array.from({ length: DIM }, () => rand() * 2 - 1));
}

/** Same documents ranked, scores within float16 rounding of the queries (the GPU scores fp16 x fp16). */
function assertClose(gpu: Hit[][], cpu: Hit[][], what: string) {
  assert.equal(gpu.length, cpu.length);
  gpu.forEach((row, q) => {
    row.forEach((h, i) => {
      const c = cpu[q][i];
      const tol = 2e-2 * Math.max(1, Math.abs(c.score));
      assert.ok(
        Math.abs(h.score - c.score) <= tol,
        `${what}: query ${q} rank ${i}: ${h.score} vs ${c.score}`,
      );
      // a near tie may swap neighbours; the document must rank within the cpu list then
      if (h.id !== c.id)
        assert.ok(
          cpu[q].some((x) => x.id === h.id && Math.abs(x.score - h.score) <= tol),
          what,
        );
    });
  });
}

describe('maxsim serve on CUDA', { skip }, () => {
  const dir = path.join(tmp, 'docs.msx');
  test('resident and streamed corpora answer like the CPU server; batching; appends; prefilter', async () => {
    // two segments, so the resident corpus merges the top-k of two device corpora
    writeSegments(dir, [1500, 1500], { dim: DIM, maxLength: 40, rand });
    const cpu = await start({ corpus: dir, backend: 'cpu' });
    const gpu = await start({ corpus: dir, backend: 'cuda', maxWaitMs: 5 });
    const streamed = await start({ corpus: dir, backend: 'cuda', pin: true });
    // biome-ignore lint/suspicious/noExplicitAny: a JSON answer
    const info: any = await (await fetch(`${gpu.url}/v1/info`)).json();
    assert.equal(info.mode, 'resident');
    assert.equal(info.backend, 'cuda');
    assert.equal(typeof info.kernels.gpu, 'string');
    assert.equal(
      ((await (await fetch(`${streamed.url}/v1/info`)).json()) as { mode: string }).mode,
      'streamed',
    );

    const queries = Array.from({ length: 5 }, (_, i) => tokens(1 + i * 7));
    const want = (await post(`${cpu.url}/v1/search`, { queries, top_k: 10 })).json.results;
    const got = await post(`${gpu.url}/v1/search`, { queries, top_k: 10 });
    assert.equal(got.status, 200, JSON.stringify(got.json));
    assertClose(got.json.results, want, 'resident');
    assertClose(
      (await post(`${streamed.url}/v1/search`, { queries, top_k: 10 })).json.results,
      want,
      'streamed',
    );

    // batched vs one at a time on the same server (maxBatch 1 server for the reference)
    const alone = await start({ corpus: dir, backend: 'cuda', maxBatch: 1, maxWaitMs: 0 });
    const many = Array.from({ length: 48 }, (_, i) => ({
      queries: [tokens(1 + (i % 31))],
      top_k: 1 + (i % 10),
    }));
    const batched = await Promise.all(many.map((b) => post(`${gpu.url}/v1/search`, b)));
    let identical = 0;
    for (let i = 0; i < many.length; i++) {
      const single = await post(`${alone.url}/v1/search`, many[i]);
      assertClose(batched[i].json.results, single.json.results, `request ${i}`);
      if (JSON.stringify(batched[i].json) === JSON.stringify(single.json)) identical++;
    }
    console.log(
      `# GPU: ${identical} of ${many.length} batched answers byte-identical to unbatched; largest pass ${Math.max(...batched.map((b) => b.batch))}`,
    );
    assert.ok(Math.max(...batched.map((b) => b.batch)) > 1);

    // pipelined: passes of at most 8, two in flight (the CUDA default), float16 base64 bodies decoded
    // straight into each pass's buffer; answers as one at a time
    const piped = await start({ corpus: dir, backend: 'cuda', maxBatch: 8 });
    // biome-ignore lint/suspicious/noExplicitAny: a JSON answer
    const pipedInfo: any = await (await fetch(`${piped.url}/v1/info`)).json();
    assert.equal(pipedInfo.batching.passes_in_flight, 2);
    const f16 = many.map((b) => {
      const bits = encodeFloats(Float32Array.from(b.queries[0].flat()), 'float16');
      return {
        queries: {
          b64: Buffer.from(bits.buffer, bits.byteOffset, bits.byteLength).toString('base64'),
          dtype: 'float16',
          shape: [1, b.queries[0].length, DIM],
        },
        top_k: b.top_k,
      };
    });
    const pipedAnswers = await Promise.all(f16.map((b) => post(`${piped.url}/v1/search`, b)));
    for (let i = 0; i < f16.length; i++) {
      assert.equal(pipedAnswers[i].status, 200, JSON.stringify(pipedAnswers[i].json));
      assert.ok(pipedAnswers[i].batch <= 8, `a pass of ${pipedAnswers[i].batch}`);
      const single = await post(`${alone.url}/v1/search`, f16[i]);
      assertClose(pipedAnswers[i].json.results, single.json.results, `pipelined request ${i}`);
      // a float16 corpus takes float16 queries' bits as they are; the same values sent as float32 are
      // rounded to those bits on the GPU: one query alone, the same plan, the same answer exactly
      const bits = encodeFloats(Float32Array.from(many[i].queries[0].flat()), 'float16') as Uint16Array;
      const values = Array.from(decodeToFloat32(bits, 'float16', DIM));
      const rows = Array.from({ length: values.length / DIM }, (_, t) =>
        values.slice(t * DIM, (t + 1) * DIM),
      );
      const asFloat32 = await post(`${alone.url}/v1/search`, { queries: [rows], top_k: many[i].top_k });
      assert.deepEqual(single.json, asFloat32.json, `float16 bits vs float32 values, request ${i}`);
    }

    // rerank by ids: scored on device views of the candidates
    const cands = ['s0-3', 's1-7', 's0-1499', 's1-0', 's0-42'];
    const rg = await post(`${gpu.url}/v1/rerank`, { query: queries[2], candidates: cands });
    const rc = await post(`${cpu.url}/v1/rerank`, { query: queries[2], candidates: cands });
    assert.equal(rg.status, 200, JSON.stringify(rg.json));
    rg.json.results.forEach((r: { index: number; relevance_score: number }) => {
      const c = rc.json.results.find((x: { index: number }) => x.index === r.index);
      assert.ok(
        Math.abs(r.relevance_score - c.relevance_score) <= 2e-2 * Math.max(1, Math.abs(c.relevance_score)),
      );
    });

    // int8 prefilter: the exact top-k (rescored in float16) of the same documents
    const pf = await post(`${gpu.url}/v1/search`, { queries, top_k: 10, prefilter: 'int8' });
    assert.equal(pf.status, 200, JSON.stringify(pf.json));
    assertClose(pf.json.results, want, 'prefilter');

    // appends are uploaded and visible to the next search
    const planted = Array.from({ length: 4 }, () =>
      Array.from({ length: DIM }, (_, j) => (j === 0 ? 10 : 0)),
    );
    const add = await fetch(`${gpu.url}/v1/documents`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ documents: [0, 1, 2].map((i) => ({ id: `new${i}`, embeddings: planted })) }),
    });
    assert.equal(add.status, 201, await add.text());
    const probe = [[Array.from({ length: DIM }, (_, j) => (j === 0 ? 1 : 0))]];
    const found = await post(`${gpu.url}/v1/search`, { queries: probe, top_k: 3 });
    assert.deepEqual(found.json.results[0].map((h: Hit) => h.id).sort(), ['new0', 'new1', 'new2']);

    // deletes on the resident corpus: the planted documents go, exactly as on the CPU path
    const del = await fetch(`${gpu.url}/v1/documents`, {
      method: 'DELETE',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ids: ['new0', 'new2'] }),
    });
    assert.equal(del.status, 200, await del.text());
    const after = await post(`${gpu.url}/v1/search`, { queries: probe, top_k: 3 });
    assert.equal(after.json.results[0][0].id, 'new1');
    assert.ok(!after.json.results[0].some((h: Hit) => h.id === 'new0' || h.id === 'new2'));
    // another process compacts the corpus: the next append re-uploads the replaced segments
    CorpusWriter.compact(dir);
    const add2 = await fetch(`${gpu.url}/v1/documents`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ documents: [{ id: 'new3', embeddings: planted }] }),
    });
    assert.equal(add2.status, 201, await add2.text());
    const again = await post(`${gpu.url}/v1/search`, { queries: probe, top_k: 3 });
    assert.deepEqual(
      again.json.results[0]
        .slice(0, 2)
        .map((h: Hit) => h.id)
        .sort(),
      ['new1', 'new3'],
    );
    const cpuServer = await start({ corpus: dir, backend: 'cpu' });
    const cpuAnswer = await post(`${cpuServer.url}/v1/search`, { queries: probe, top_k: 10 });
    const gpuAnswer = await post(`${gpu.url}/v1/search`, { queries: probe, top_k: 10 });
    assertClose(gpuAnswer.json.results, cpuAnswer.json.results, 'after an outside compaction');

    const metrics = await (await fetch(`${gpu.url}/metrics`)).text();
    assert.match(metrics, /maxsim_gpu_memory_bytes\{kind="in_use"\} [1-9]/);
    await gpu.server.close();
  });

  test("several GPUs (--gpus): each segment sharded, the answers one GPU's", async () => {
    const count = status.devices?.length ?? 0;
    const devices = count >= 2 ? Array.from({ length: count }, (_, i) => i) : [0, 0];
    const sharded = path.join(tmp, 'sharded.msx');
    writeSegments(sharded, [900, 900], { dim: DIM, maxLength: 40, rand, tag: 'g' });
    const one = await start({ corpus: sharded, backend: 'cuda' });
    const many = await start({ corpus: sharded, backend: 'cuda', devices });
    // biome-ignore lint/suspicious/noExplicitAny: a JSON answer
    const info: any = await (await fetch(`${many.url}/v1/info`)).json();
    assert.equal(info.mode, 'resident');
    const queries = Array.from({ length: 6 }, (_, i) => tokens(1 + i * 5));
    for (const body of [
      { queries, top_k: 10 },
      { queries, top_k: 7, prefilter: 'int8' },
    ]) {
      const a = await post(`${one.url}/v1/search`, body);
      const b = await post(`${many.url}/v1/search`, body);
      assert.equal(b.status, 200, JSON.stringify(b.json));
      assert.deepEqual(b.json.results, a.json.results, JSON.stringify(body).slice(0, 40));
    }
    const cands = ['g0-3', 'g1-7', 'g0-899', 'g1-0'];
    const ra = await post(`${one.url}/v1/rerank`, { query: queries[3], candidates: cands });
    const rb = await post(`${many.url}/v1/rerank`, { query: queries[3], candidates: cands });
    assert.deepEqual(rb.json.results, ra.json.results);
    const metrics = await (await fetch(`${many.url}/metrics`)).text();
    assert.match(metrics, /maxsim_gpu_memory_bytes\{kind="in_use"\} [1-9]/);
    await many.server.close();
    await one.server.close();
  });
});
