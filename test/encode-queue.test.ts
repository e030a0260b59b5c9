// EncodeQueue: concurrent callers share encoder runs and each gets exactly its own items.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { loadColbert } from '../src/encode/colbert.js';
import { EncodeQueue } from '../src/encode/queue.js';
import type { TokenBatch } from '../src/tensor.js';
import { TINY, tinySkip } from './tiny-model.js';

const skip = tinySkip;

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

  test('a caller whose signal aborts leaves the queue with its reason; nobody waiting means no run', async () => {
    const encoder = await loadColbert(TINY);
    const queue = new EncodeQueue(encoder, { waitMs: 40 });
    const gone = new AbortController();
    const alone = queue.encode('query', ['nobody waits for me'], gone.signal);
    gone.abort(new Error('client gone'));
    await assert.rejects(alone, /client gone/);
    await new Promise((resolve) => setTimeout(resolve, 80));
    assert.equal(queue.stats.runs, 0, 'the aborted caller was not encoded');
    assert.equal(queue.depth, 0);

    const leaving = new AbortController();
    const a = queue.encode('document', ['first text about paris'], leaving.signal);
    const b = queue.encode('document', ['second text about the seine', 'third']);
    leaving.abort(new Error('deadline'));
    await assert.rejects(a, /deadline/);
    const got = await b;
    const want = await encoder.encodeDocuments(['second text about the seine', 'third']);
    assert.equal(got.count, 2);
    for (let i = 0; i < 2; i++) {
      const [g, w] = [rows(got, i), rows(want, i)];
      assert.equal(g.length, w.length);
      assert.ok(
        g.every((v, j) => Math.abs(v - w[j]) < 1e-5),
        `item ${i}`,
      );
    }
    assert.equal(queue.stats.texts, 2, 'only the caller left was encoded');
    await assert.rejects(queue.encode('query', ['x'], AbortSignal.abort(new Error('already'))), /already/);
    await encoder.close();
  });
});
