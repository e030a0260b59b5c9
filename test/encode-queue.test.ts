// EncodeQueue: concurrent callers share encoder runs and each gets exactly its own items.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, test } from 'node:test';
import { loadColbert } from '../src/encode/colbert.js';
import { EncodeQueue } from '../src/encode/queue.js';
import { loadOrt } from '../src/encode/runtime.js';
import { packageRoot } from '../src/native.js';
import type { TokenBatch } from '../src/tensor.js';

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

function rows(batch: TokenBatch, b: number): number[] {
  const s = batch.starts[b] * batch.dim;
  return Array.from((batch.data as Float32Array).subarray(s, s + batch.lengths[b] * batch.dim));
}

describe('EncodeQueue', { skip }, () => {
  test('concurrent callers share runs; each gets its own items, equal to encoding alone', async () => {
    const encoder = await loadColbert(TINY);
    const queue = new EncodeQueue(encoder, { maxTexts: 10, waitMs: 20 });
    const calls = Array.from({ length: 7 }, (_, c) =>
      Array.from({ length: 1 + (c % 3) }, (_, i) => `caller ${c} text ${i} ${'about paris '.repeat(c + i)}`),
    );
    const kinds = calls.map((_, c) => (c % 2 === 0 ? 'document' : 'query') as 'document' | 'query');
    const results = await Promise.all(calls.map((texts, c) => queue.encode(kinds[c], texts)));
    assert.ok(queue.stats.largestRun > 1, `runs ${queue.stats.runs}, largest ${queue.stats.largestRun}`);
    assert.equal(queue.stats.texts, calls.flat().length);
    for (let c = 0; c < calls.length; c++) {
      const alone =
        kinds[c] === 'query'
          ? await encoder.encodeQueries(calls[c])
          : await encoder.encodeDocuments(calls[c]);
      assert.equal(results[c].count, calls[c].length);
      for (let b = 0; b < calls[c].length; b++) {
        const a = rows(results[c], b);
        const w = rows(alone, b);
        assert.equal(a.length, w.length, `caller ${c} item ${b}`);
        assert.ok(
          a.every((v, i) => Math.abs(v - w[i]) < 1e-5),
          `caller ${c} item ${b}`,
        );
      }
    }
    await assert.rejects(queue.encode('query', ['ok', 7 as unknown as string]), /for texts\[1\]/);
    await encoder.close();
    await assert.rejects(queue.encode('query', ['x']), /closed/);
  });
});
