// A request's life in the queue: one whose client went away is dropped (not scored) and counted, and
// a request's deadline counts from its arrival and fires on time while a pass runs. The server runs
// over a corpus large enough for a CPU pass of 64 queries to take a few hundred ms.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { encodeFloats } from '../src/floats.js';
import { CorpusWriter } from '../src/io/corpus/index.js';
import type { MaxsimServer } from '../src/server/app.js';
import { AbandonedError, Batcher, type SearchRun } from '../src/server/batcher.js';
import { raggedBatch } from '../src/tensor.js';
import { rng, runSeed } from './helpers.js';
import { b64Of, call, post, start } from './serve-helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-deadlines-'));
const servers: MaxsimServer[] = [];
const rand = rng(runSeed ^ 0xdead);
const DIM = 128;
const TOKENS = 32;

after(async () => {
  await Promise.all(servers.map((s) => s.close()));
  fs.rmSync(tmp, { recursive: true, force: true });
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `n` queries of TOKENS x DIM as a float16 base64 tensor (small to send, slow to score). */
function queriesOf(n: number) {
  const values = Float32Array.from({ length: n * TOKENS * DIM }, () => rand() * 2 - 1);
  return { b64: b64Of(encodeFloats(values, 'float16')), dtype: 'float16', shape: [n, TOKENS, DIM] };
}

/** A metric's value from /metrics text (0 when absent). */
function metric(text: string, name: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? 0 : Number(line.slice(name.length + 1));
}

/** Polls /metrics until `name` reads `value` (the big pass started, a request queued). */
async function until(url: string, name: string, value: number) {
  let seen = Number.NaN;
  for (let i = 0; i < 400 && seen !== value; i++) {
    seen = metric((await call(`${url}/metrics`, 'GET')).text, name);
    if (seen !== value) await sleep(5);
  }
  assert.equal(seen, value, `${name} never read ${value}`);
}

/**
 * A raw HTTP request whose body is sent in two halves `gapMs` apart; resolves with its socket once
 * all is sent, and `answer` with the status and body of its answer, and the ms from the first byte.
 */
function sendSplit(
  port: number,
  body: string,
  gapMs: number,
): Promise<{ socket: net.Socket; answer: Promise<{ status: number; text: string; ms: number }> }> {
  return new Promise((resolve) => {
    let t0 = 0;
    let data = '';
    const socket = net.connect(port, '127.0.0.1', () => {
      t0 = performance.now();
      const half = Math.floor(body.length / 2);
      socket.write(
        `POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body.slice(0, half)}`,
      );
      setTimeout(() => {
        socket.write(body.slice(half));
        resolve({ socket, answer });
      }, gapMs);
    });
    const answer = new Promise<{ status: number; text: string; ms: number }>((done) => {
      socket.on('data', (d) => {
        data += d.toString('latin1');
        const end = data.indexOf('\r\n\r\n');
        const length = /\r\ncontent-length: *(\d+)/i.exec(data.slice(0, end));
        if (end >= 0 && length && data.length >= end + 4 + Number(length[1]))
          done({
            status: Number(/^HTTP\/1\.1 (\d{3})/.exec(data)?.[1]),
            text: data.slice(end + 4),
            ms: performance.now() - t0,
          });
      });
    });
    socket.on('error', () => {});
  });
}

describe('requests in the queue', () => {
  const dir = path.join(tmp, 'slow.msx');
  before(() => {
    const w = CorpusWriter.create(dir, { dim: DIM, dtype: 'float16', ids: true });
    const n = 4000;
    const data = Float32Array.from({ length: n * TOKENS * DIM }, () => rand() * 2 - 1);
    const offsets = Array.from({ length: n + 1 }, (_, i) => i * TOKENS);
    w.add(
      raggedBatch(data, offsets, { dim: DIM }),
      Array.from({ length: n }, (_, i) => `doc${i}`),
    );
    w.commit();
  });

  test('the batcher drops a request whose client went away: queued, it is never scored; running, its pass stops once nobody waits', async () => {
    const passes: number[][] = [];
    let aborted = 0;
    const run: SearchRun = async (q, _k, _key, _t, signal) => {
      const rows = Array.from({ length: q.offsets.length - 1 }, (_, r) => q.values[q.offsets[r] * q.dim]);
      passes.push(rows);
      await sleep(200);
      if (signal.aborted) aborted++;
      return rows.map((index) => [{ index, score: 0, id: String(index) }]);
    };
    const stages: string[] = [];
    const b = new Batcher(run, {
      maxBatch: 1,
      maxWaitMs: 0,
      maxQueue: 100,
      onAbandoned: (stage) => stages.push(stage),
    });
    const job = (n: number) => ({
      dtype: 'float32' as const,
      values: Float32Array.of(n),
      offsets: [0, 1],
      dim: 1,
    });
    const first = b.search(job(1), 1, '', 10_000);
    const gone = new AbortController();
    const queued = b.search(job(2), 1, '', 10_000, { gone: gone.signal });
    await sleep(50);
    gone.abort();
    await assert.rejects(queued, AbandonedError);
    assert.equal((await first).hits[0][0].index, 1);
    await sleep(20);
    assert.deepEqual(passes, [[1]], 'the abandoned request was scored');
    assert.deepEqual(stages, ['queued']);
    assert.equal(b.depth, 0);
    // inside a running pass: dropped from it, and the pass (nobody else in it) told to stop
    const leaving = new AbortController();
    const running = b.search(job(3), 1, '', 10_000, { gone: leaving.signal });
    await sleep(50);
    leaving.abort();
    await assert.rejects(running, AbandonedError);
    await b.drain();
    assert.deepEqual(passes, [[1], [3]]);
    assert.deepEqual(stages, ['queued', 'running']);
    assert.equal(aborted, 1);
    // gone before it was queued: refused at once
    const left = new AbortController();
    left.abort();
    await assert.rejects(
      new Batcher(run, { maxBatch: 1, maxWaitMs: 0, maxQueue: 9 }).search(job(4), 1, '', 1000, {
        gone: left.signal,
      }),
      AbandonedError,
    );
  });

  test('a client that disconnects while its search waits in the queue is not scored, and is counted', async () => {
    const { url, port } = await start(servers, { corpus: dir, maxBatch: 64, maxWaitMs: 0 });
    const big = post(`${url}/v1/search`, { queries: queriesOf(64), top_k: 3 });
    await until(url, 'maxsim_request_phase_seconds_count{phase="decode"}', 1);
    // the small request queues behind the big one's pass; its client leaves before that pass ends
    const { socket: small } = await sendSplit(port, JSON.stringify({ queries: queriesOf(1), top_k: 3 }), 0);
    await until(url, 'maxsim_queue_depth', 1);
    small.destroy();
    assert.equal((await big).status, 200);
    await sleep(100);
    const text = (await call(`${url}/metrics`, 'GET')).text;
    assert.equal(metric(text, 'maxsim_batch_queries_count'), 1, 'the abandoned request got a pass');
    assert.equal(metric(text, 'maxsim_batch_queries_sum'), 64);
    assert.equal(metric(text, 'maxsim_abandoned_requests_total{stage="queued"}'), 1, text);
    // and among the request counts, as nginx's 499
    assert.equal(
      metric(text, 'maxsim_http_requests_total{route="/v1/search",method="POST",status="499"}'),
      1,
      text,
    );
    assert.equal(metric(text, 'maxsim_queue_depth'), 0);
    // the server goes on serving
    assert.equal((await post(`${url}/v1/search`, { queries: queriesOf(1), top_k: 1 })).status, 200);
  });

  test("a request's deadline counts from its arrival and fires on time while a pass runs", async () => {
    const { url, port } = await start(servers, {
      corpus: dir,
      maxBatch: 64,
      maxWaitMs: 5000,
      timeoutMs: 700,
    });
    // its body takes 300 ms to arrive; meanwhile a full pass starts (64 queries: it waits for nobody),
    // and the small request then waits for company (5 s) behind it: only its deadline answers it
    const sent = sendSplit(port, JSON.stringify({ queries: queriesOf(1), top_k: 3 }), 300);
    await sleep(20);
    const big = post(`${url}/v1/search`, { queries: queriesOf(64), top_k: 3 });
    const { answer } = await sent;
    const r = await answer;
    assert.equal(r.status, 504, r.text);
    assert.ok(r.ms >= 690 && r.ms < 850, `504 after ${Math.round(r.ms)} ms for a 700 ms deadline`);
    assert.match(JSON.parse(r.text).error.message, /deadline of 700 ms/);
    await big;
  });
});
