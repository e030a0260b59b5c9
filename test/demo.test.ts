// The demo corpus generator: deterministic, normalized, well-formed, and its planted answers retrievable.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { demoCorpus } from '../src/demo/corpus.js';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { InvalidArgumentError } from '../src/errors.js';
import { decodeToFloat32 } from '../src/floats.js';
import { topK } from '../src/ops/maxsim.js';
import type { TokenBatch } from '../src/tensor.js';

const SMALL = { docs: 600, queries: 4 };

function bytesOf(batch: TokenBatch): Buffer {
  return Buffer.from(batch.data.buffer, batch.data.byteOffset, batch.data.byteLength);
}

describe('demoCorpus', () => {
  const corpus = demoCorpus(SMALL);

  test('is deterministic: the same seed gives the same bytes, another seed other bytes', () => {
    const again = demoCorpus(SMALL);
    assert.ok(bytesOf(again.docs).equals(bytesOf(corpus.docs)));
    assert.ok(bytesOf(again.queries).equals(bytesOf(corpus.queries)));
    assert.deepEqual(Array.from(again.docs.lengths), Array.from(corpus.docs.lengths));
    assert.deepEqual(again.relevant, corpus.relevant);
    const other = demoCorpus({ ...SMALL, seed: 43 });
    assert.ok(!bytesOf(other.docs).equals(bytesOf(corpus.docs)));
  });

  test('has the documented shape: ragged documents of 32-256 tokens, d = 128, queries [4, 32, 128]', () => {
    const { docs, queries } = corpus;
    assert.equal(docs.layout, 'ragged');
    assert.equal(docs.dtype, 'float32');
    assert.equal(docs.count, 600);
    assert.equal(docs.dim, 128);
    for (let b = 0; b < docs.count; b++) {
      assert.ok(docs.lengths[b] >= 32 && docs.lengths[b] <= 256, `document ${b}: ${docs.lengths[b]} tokens`);
      if (b > 0) assert.equal(docs.starts[b], docs.starts[b - 1] + docs.lengths[b - 1]);
    }
    assert.equal(queries.count, 4);
    assert.equal(queries.maxLength, 32);
    assert.equal(queries.dim, 128);
    assert.ok(new Set(docs.lengths).size > 20, 'lengths vary');
  });

  test('every token is L2-normalized', () => {
    for (const batch of [corpus.docs, corpus.queries]) {
      const values = batch.data as Float32Array;
      for (let o = 0; o < values.length; o += batch.dim) {
        let ss = 0;
        for (let k = 0; k < batch.dim; k++) ss += values[o + k] * values[o + k];
        assert.ok(Math.abs(Math.sqrt(ss) - 1) < 1e-5, `token ${o / batch.dim}: norm ${Math.sqrt(ss)}`);
      }
    }
  });

  test('plants 3 distinct relevant documents per query, sorted and in range', () => {
    const all = corpus.relevant.flat();
    assert.equal(corpus.relevant.length, 4);
    for (const docs of corpus.relevant) {
      assert.equal(docs.length, 3);
      assert.deepEqual(
        docs,
        [...docs].sort((a, b) => a - b),
      );
    }
    assert.equal(new Set(all).size, all.length);
    assert.ok(all.every((b) => Number.isInteger(b) && b >= 0 && b < 600));
  });

  test('the planted documents are retrievable: recall@10 >= 0.9 with MaxSim', async () => {
    for (const seed of [1, 2]) {
      const { docs, queries, relevant } = demoCorpus({ docs: 1500, queries: 6, seed });
      const hits = await topK(queries, docs, 10, { backend: 'cpu' });
      let found = 0;
      hits.forEach((row, q) => {
        found += row.filter((h) => relevant[q].includes(h.index)).length;
      });
      assert.ok(found / 18 >= 0.9, `seed ${seed}: ${found} of 18 planted documents in the top 10`);
    }
  });

  test('float16 and bfloat16 storage hold the float32 values, rounded', () => {
    const small = { docs: 50, queries: 2 };
    const reference = demoCorpus(small);
    for (const dtype of ['float16', 'bfloat16'] as const) {
      const { docs, queries } = demoCorpus({ ...small, dtype });
      assert.equal(docs.dtype, dtype);
      assert.equal(queries.dtype, dtype);
      assert.ok(docs.data instanceof Uint16Array);
      const decoded = decodeToFloat32(docs.data, dtype, docs.dim);
      const exact = reference.docs.data as Float32Array;
      const tolerance = dtype === 'float16' ? 1e-3 : 8e-3;
      for (let i = 0; i < exact.length; i++)
        assert.ok(Math.abs(decoded[i] - exact[i]) <= tolerance, `${dtype} ${i}`);
    }
  });

  test('rejects impossible options', () => {
    assert.throws(() => demoCorpus({ docs: 5, queries: 2 }), InvalidArgumentError);
    assert.throws(() => demoCorpus({ minDocLength: 10, maxDocLength: 5 }), InvalidArgumentError);
    assert.throws(() => demoCorpus({ docs: 1.5 }), InvalidArgumentError);
    assert.throws(() => demoCorpus({ noise: -1 }), InvalidArgumentError);
  });
});

describe('Rng', () => {
  test('is deterministic and uniform-ish in [0, 1)', () => {
    const a = new Rng(123);
    const b = new Rng(123);
    let sum = 0;
    for (let i = 0; i < 10_000; i++) {
      const x = a.float();
      assert.equal(x, b.float());
      assert.ok(x >= 0 && x < 1);
      sum += x;
    }
    assert.ok(Math.abs(sum / 10_000 - 0.5) < 0.02);
  });

  test('sample() draws distinct values; randomUnitTokens() has unit rows', () => {
    const rng = new Rng(9);
    const picked = rng.sample(50, 20);
    assert.equal(new Set(picked).size, 20);
    assert.ok(picked.every((x) => x >= 0 && x < 50));
    const tokens = randomUnitTokens(rng, 10, 1);
    assert.ok(tokens.every((x) => Math.abs(Math.abs(x) - 1) < 1e-6));
  });
});
