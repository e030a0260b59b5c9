// Cancellation on the GPU (src/abort.ts): the streamed corpus scan polls a cancel flag before each
// block (native/cuda/stream_scan.cc), stops its readers, frees its slots and rejects with an
// AbortError; scoring and training jobs run to the end of their native call and drop the result.
// After an abort the same device searches and scores as before. Skipped where no GPU runs.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { cudaStatus } from '../../src/backends/cuda.js';
import type { Hit, TokenBatch } from '../../src/index.js';
import { CorpusWriter } from '../../src/io/corpus/index.js';
import { openCorpus } from '../../src/ops/corpus-search.js';
import { maxsim } from '../../src/ops/maxsim.js';
import { contrastiveStep } from '../../src/ops/train.js';
import { randomRagged, rng, runSeed } from '../helpers.js';
import { skip } from './helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-gpu-abort-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

const isAbort = (e: unknown) => {
  assert.equal((e as Error).name, 'AbortError', `expected an AbortError, got ${String(e)}`);
  return true;
};
const pairs = (rows: Hit[][]) => rows.map((r) => r.map((h) => [h.index, h.score]));

describe('CUDA cancellation', { skip }, () => {
  const rand = rng(runSeed + 201);
  const dim = 128;
  const lengths = Array.from({ length: 4000 }, () => 1 + Math.floor(rand() * 120));
  const dir = path.join(tmp, 'c.msx');
  const w = CorpusWriter.create(dir, { dim, dtype: 'float16' });
  w.add(randomRagged(lengths, dim, 'float32', rand));
  w.commit();
  const queries = randomRagged([32, 9, 32, 1], dim, 'float32', rand);

  test('a streamed scan aborted mid-way rejects quickly; the next scans equal an unaborted one', async () => {
    const corpus = openCorpus(dir);
    const n = cudaStatus().devices?.length ?? 1;
    const configs = [
      { transfer: 'copy' as const },
      { transfer: 'register' as const },
      { transfer: 'direct' as const },
      { transfer: 'pin' as const },
      ...(n > 1 ? [{ devices: 'all' as const }] : []),
    ];
    for (const config of configs) {
      const options = { topK: 8, backend: 'cuda' as const, blockBytes: 64 * 1024, ...config };
      const want = await corpus.search(queries, options);
      // aborted as the call returns: the native scan finds the flag set before its first block
      const controller = new AbortController();
      const scan = corpus.search(queries, { ...options, signal: controller.signal });
      controller.abort();
      await assert.rejects(scan, isAbort);
      assert.deepEqual(pairs(await corpus.search(queries, options)), pairs(want));
    }
    // aborted by a timer mid-scan: one document per block, thousands of blocks
    const options = { topK: 8, backend: 'cuda' as const, blockBytes: 1 };
    const want = await corpus.search(queries, options);
    const full = performance.now();
    await corpus.search(queries, options);
    const fullMs = performance.now() - full;
    const controller = new AbortController();
    const started = performance.now();
    const scan = corpus.search(queries, { ...options, signal: controller.signal });
    let abortedAt = 0;
    setTimeout(() => {
      abortedAt = performance.now();
      controller.abort();
    }, 5);
    await assert.rejects(scan, isAbort);
    const latency = performance.now() - abortedAt;
    console.log(
      `# 4000 one-document blocks (${fullMs.toFixed(0)} ms unaborted): rejected ${latency.toFixed(1)} ms after the abort (${(performance.now() - started).toFixed(0)} ms in all)`,
    );
    assert.ok(latency < 200, `rejected ${latency} ms after the abort`);
    assert.deepEqual(pairs(await corpus.search(queries, options)), pairs(want));
    await assert.rejects(corpus.search(queries, { backend: 'cuda', signal: AbortSignal.abort() }), isAbort);
  });

  test('maxsim and contrastiveStep on CUDA: an abort drops the result; the device stays healthy', async () => {
    const docs: TokenBatch = openCorpus(dir).readDocuments(Array.from({ length: 500 }, (_, i) => i));
    const want = await maxsim(queries, docs, { backend: 'cuda' });
    const c = new AbortController();
    const job = maxsim(queries, docs, { backend: 'cuda', signal: c.signal });
    c.abort();
    await assert.rejects(job, isAbort);
    assert.deepEqual((await maxsim(queries, docs, { backend: 'cuda' })).data, want.data);
    const q = randomRagged([6, 3, 8, 5], 16, 'float32', rand);
    const d = randomRagged([10, 4, 12, 7], 16, 'float32', rand);
    const c2 = new AbortController();
    const step = contrastiveStep(q, d, { backend: 'cuda', signal: c2.signal });
    c2.abort();
    await assert.rejects(step, isAbort);
    assert.ok(Number.isFinite((await contrastiveStep(q, d, { backend: 'cuda' })).loss));
  });
});
