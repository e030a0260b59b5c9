// Inputs pinned for the life of a job (issue 21): an async native job must not crash, or read other
// spans than it validated, when its inputs are mutated, reassigned and collected, or detached
// (transferred) while it runs. Each case runs in a child process (test/pin-child.ts) so that a crash
// is a signal seen here, not the end of the suite.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { maxsim, raggedBatch, tokenMatrix } from '../src/index.js';
import { nativeUnavailableReason } from '../src/native.js';
import { maxsimSync } from '../src/subpaths/sync.js';
import { rng } from './helpers.js';

const CHILD = fileURLToPath(new URL('./pin-child.js', import.meta.url));
const skip = nativeUnavailableReason();

function runChild(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number | null; signal: string | null; out: string; err: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--expose-gc', CHILD, ...args], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: 120_000,
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    child.stderr.on('data', (d) => {
      err += d;
    });
    child.on('close', (code, signal) => resolve({ code, signal, out, err }));
  });
}

const cases: { op: string; mutation: string; target?: string }[] = [];
for (const op of ['maxsim', 'maxsim-batch', 'topK', 'int8', 'train', 'backward'])
  for (const mutation of ['lengths', 'starts', 'reassign', 'detach']) cases.push({ op, mutation });
for (const op of ['maxsim-batch', 'int8', 'train', 'backward'])
  for (const mutation of ['lengths', 'detach']) cases.push({ op, mutation, target: 'queries' });
cases.push({ op: 'backward', mutation: 'argmax' });
for (const mutation of ['lengths', 'starts', 'reassign', 'detach', 'overwrite'])
  cases.push({ op: 'corpus', mutation, target: 'queries' });

describe('inputs pinned for the life of a CPU job', { skip }, () => {
  // two at a time: the children are single-threaded jobs
  const pending = [...cases];
  const results = new Map<string, ReturnType<typeof runChild>>();
  const next = () => {
    const c = pending.shift();
    if (!c) return;
    const key = `${c.op} ${c.mutation} ${c.target ?? 'docs'}`;
    const p = runChild([c.op, c.mutation], c.target ? { PIN_TARGET: c.target } : {});
    results.set(key, p);
    p.then(next);
  };
  for (const c of cases) {
    const key = `${c.op} ${c.mutation} ${c.target ?? 'docs'}`;
    test(`${c.op}: ${c.target ?? 'docs'} ${c.mutation} while the job runs: no crash, the validated result`, async () => {
      if (results.size === 0) {
        next();
        next();
      }
      while (!results.has(key)) await new Promise((r) => setTimeout(r, 20));
      const r = await results.get(key)!;
      const detail = `exit ${r.code}, signal ${r.signal}\nstdout: ${r.out}\nstderr: ${r.err}`;
      assert.equal(r.signal, null, detail);
      assert.equal(r.code, 0, detail);
      const result = JSON.parse(r.out.trim().split('\n').pop() ?? '{}');
      assert.deepEqual(result, { ok: true, equal: true }, detail);
    });
  }
});

describe('SharedArrayBuffer-backed and detached inputs', { skip }, () => {
  test('token data in a SharedArrayBuffer scores like the same data in an ArrayBuffer', async () => {
    const rand = rng(31);
    const d = 16;
    const plain = Float32Array.from({ length: 7 * d }, () => rand() * 2 - 1);
    const shared = new Float32Array(new SharedArrayBuffer(plain.byteLength));
    shared.set(plain);
    const q = tokenMatrix(plain.slice(0, 3 * d), 3, d);
    const expected = maxsimSync(q, raggedBatch(plain, [0, 2, 7], { dim: d }), { backend: 'cpu' });
    const docs = raggedBatch(shared, [0, 2, 7], { dim: d });
    assert.deepEqual(await maxsim(q, docs, { backend: 'cpu' }), expected);
    assert.deepEqual(maxsimSync(q, docs), expected);
  });

  test('a buffer detached before the call is refused cleanly', async () => {
    const data = new Float32Array(4 * 8);
    const docs = raggedBatch(data, [0, 4], { dim: 8 });
    const q = tokenMatrix(new Float32Array(8), 1, 8);
    structuredClone(data.buffer, { transfer: [data.buffer] });
    await assert.rejects(maxsim(q, docs, { backend: 'cpu' }), /docs/);
  });
});
