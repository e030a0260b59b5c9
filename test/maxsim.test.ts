// MaxSim on the CPU engine against the float64 reference: every kernel set this CPU runs, every
// float dtype, dense / padded / ragged documents, and the edge shapes.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { type CpuIsa, cpuInfo } from '../src/backends/cpu.js';
import { referenceMaxsim } from '../src/backends/reference.js';
import { InvalidArgumentError } from '../src/errors.js';
import { maxsim, maxsimSync, topK } from '../src/ops/maxsim.js';
import {
  denseBatch,
  type FloatDType,
  matrixAsBatch,
  raggedBatch,
  type TokenBatch,
  tokenMatrix,
} from '../src/tensor.js';
import {
  assertScoresClose,
  randomDense,
  randomMatrix,
  randomRagged,
  rng,
  runSeed,
  scoreErrorBounds,
} from './helpers.js';

const isas = cpuInfo().isas as CpuIsa[];
const dtypes: FloatDType[] = ['float32', 'float16', 'bfloat16'];

function check(queries: TokenBatch, docs: TokenBatch, got: Float32Array, context: string) {
  assertScoresClose(got, referenceMaxsim(queries, docs), scoreErrorBounds(queries, docs), context);
}

describe(`CPU MaxSim vs float64 reference (seed ${runSeed})`, () => {
  for (const isa of isas) {
    for (const dtype of dtypes) {
      test(`${isa} ${dtype}: one query, ragged documents, awkward d`, () => {
        const rand = rng(runSeed + 1);
        for (const d of [1, 7, 96, 100, 128]) {
          const lengths = Array.from({ length: 23 }, (_, i) =>
            i % 7 === 3 ? 0 : 1 + Math.floor(rand() * 40),
          );
          const docs = randomRagged(lengths, d, dtype, rand);
          for (const lq of [1, 5, 16, 33]) {
            const q = randomMatrix(lq, d, dtype, rand);
            const got = maxsimSync(q, docs, { isa });
            check(matrixAsBatch(q), docs, got, `${isa} ${dtype} d=${d} lq=${lq}`);
          }
        }
      });

      test(`${isa} ${dtype}: all pairs, ragged queries, padded dense documents`, () => {
        const rand = rng(runSeed + 2);
        const d = 64;
        const queries = randomRagged([1, 32, 0, 17, 40], d, dtype, rand);
        const docs = randomDense(9, 30, d, dtype, rand, [30, 0, 1, 29, 12, 30, 5, 13, 24]);
        const m = maxsimSync(queries, docs, { isa });
        assert.equal(m.rows, 5);
        assert.equal(m.cols, 9);
        check(queries, docs, m.data, `${isa} ${dtype} all pairs`);
      });
    }
  }

  test('a long query (300 tokens) against long documents, bf16 pair path and fp32', async () => {
    const rand = rng(runSeed + 3);
    for (const dtype of dtypes) {
      const q = randomMatrix(300, 128, dtype, rand);
      const docs = randomRagged([300, 1, 129, 64], 128, dtype, rand);
      check(matrixAsBatch(q), docs, await maxsim(q, docs, { backend: 'cpu' }), `long ${dtype}`);
    }
  });

  test('mixed dtypes: fp32 queries against bf16 and fp16 documents', () => {
    const rand = rng(runSeed + 4);
    const q = randomMatrix(20, 48, 'float32', rand);
    for (const dtype of ['float16', 'bfloat16'] as const) {
      const docs = randomRagged([10, 0, 31], 48, dtype, rand);
      check(matrixAsBatch(q), docs, maxsimSync(q, docs), `mixed ${dtype}`);
    }
  });
});

describe('CPU MaxSim semantics', () => {
  test('an empty document scores -Infinity, an empty query scores 0', () => {
    const rand = rng(runSeed + 5);
    const docs = randomRagged([0, 3], 8, 'float32', rand);
    const s = maxsimSync(randomMatrix(4, 8, 'float32', rand), docs);
    assert.equal(s[0], Number.NEGATIVE_INFINITY);
    assert.ok(Number.isFinite(s[1]));
    const empty = tokenMatrix(new Float32Array(0), 0, 8);
    assert.deepEqual(Array.from(maxsimSync(empty, docs)), [Number.NEGATIVE_INFINITY, 0]);
  });

  test('padding never wins the max, even when every real score is negative', () => {
    // Document slot of 4 tokens with only 1 real; padding holds zeros whose dot would be 0 > real.
    const data = new Float32Array([-1, -1, 0, 0, 0, 0, 0, 0]);
    const docs = denseBatch(data, { count: 1, length: 4, dim: 2, lengths: [1] });
    const q = tokenMatrix(new Float32Array([1, 1]), 1, 2);
    assert.deepEqual(Array.from(maxsimSync(q, docs)), [-2]);
  });

  test('B = 0 gives an empty result; Nq = 0 gives an empty matrix', async () => {
    const q = tokenMatrix(new Float32Array(4), 1, 4);
    const none = raggedBatch(new Float32Array(0), [0], { dim: 4 });
    assert.equal((await maxsim(q, none)).length, 0);
    const m = await maxsim(none, randomRagged([2], 4, 'float32', rng(1)));
    assert.equal(m.data.length, 0);
    assert.equal(m.rows, 0);
  });

  test('results are bitwise identical on repeat, sync and async, any thread count', async () => {
    const rand = rng(runSeed + 6);
    const docs = randomRagged(
      Array.from({ length: 200 }, () => Math.floor(rand() * 80)),
      96,
      'float32',
      rand,
    );
    const q = randomMatrix(32, 96, 'float32', rand);
    const a = maxsimSync(q, docs, { backend: 'cpu' });
    const b = await maxsim(q, docs, { backend: 'cpu' });
    const c = maxsimSync(q, docs, { backend: 'cpu', threads: 1 });
    assert.deepEqual(Buffer.from(b.buffer), Buffer.from(a.buffer));
    assert.deepEqual(Buffer.from(c.buffer), Buffer.from(a.buffer));
  });

  test('concurrent async calls all complete with correct results', async () => {
    const rand = rng(runSeed + 7);
    const docs = randomRagged(
      Array.from({ length: 50 }, () => 1 + Math.floor(rand() * 50)),
      32,
      'float32',
      rand,
    );
    const queries = Array.from({ length: 6 }, () => randomMatrix(8, 32, 'float32', rand));
    const results = await Promise.all(queries.map((q) => maxsim(q, docs, { backend: 'cpu' })));
    results.forEach((r, i) => {
      check(matrixAsBatch(queries[i]), docs, r, `concurrent ${i}`);
    });
  });

  test('64-bit offsets: documents that start past 2^31 elements score exactly', () => {
    // A lazily zeroed bf16 buffer of 2^31 + 2^20 elements; only the documents at its far end hold data.
    const d = 128;
    const totalTokens = (2 ** 31 + 2 ** 20) / d;
    const data = new Uint16Array(totalTokens * d);
    const rand = rng(runSeed + 8);
    const first = totalTokens - 100;
    const lengths = [40, 0, 60];
    const offsets = [first];
    for (const l of lengths) offsets.push(offsets[offsets.length - 1] + l);
    const tail = randomRagged(lengths, d, 'bfloat16', rand);
    data.set(tail.data as Uint16Array, first * d);
    const docs = raggedBatch(data, offsets, { dim: d, dtype: 'bfloat16', checkFinite: false, view: true });
    assert.ok(docs.starts[0] * d > 2 ** 31);
    const q = randomMatrix(16, d, 'bfloat16', rand);
    check(matrixAsBatch(q), tail, maxsimSync(q, docs), '64-bit offsets');
  });

  test('one query or a batch: the answer takes the shape of the queries, the same scores', async () => {
    const rand = rng(runSeed + 8);
    const docs = randomRagged([5, 0, 12, 3, 9, 1], 16, 'float32', rand);
    const q = randomMatrix(7, 16, 'float32', rand);
    const batch = randomRagged([7, 4, 0], 16, 'float32', rand);
    const one: Float32Array = await maxsim(q, docs, { backend: 'cpu' });
    const many = await maxsim(matrixAsBatch(q), docs, { backend: 'cpu' });
    assert.ok(one instanceof Float32Array);
    assert.deepEqual([many.rows, many.cols], [1, docs.count]);
    assert.deepEqual(Buffer.from(one.buffer), Buffer.from(many.data.buffer));
    const all = maxsimSync(batch, docs, { backend: 'cpu' });
    check(batch, docs, all.data, 'maxsimSync, a batch');
    assert.deepEqual(all.data, (await maxsim(batch, docs, { backend: 'cpu' })).data);
    const hits = await topK(q, docs, 3, { backend: 'cpu' });
    const lists = await topK(batch, docs, 3, { backend: 'cpu' });
    assert.deepEqual(hits, (await topK(matrixAsBatch(q), docs, 3, { backend: 'cpu' }))[0]);
    assert.equal(lists.length, 3);
    for (const [r, list] of lists.entries()) {
      const row = Array.from(all.data.subarray(r * docs.count, (r + 1) * docs.count));
      const order = row.map((s, i) => [s, i]).sort((a, b) => b[0] - a[0] || a[1] - b[1]);
      assert.deepEqual(
        list.map((h) => h.index),
        order.slice(0, 3).map((x) => x[1]),
      );
    }
  });

  test('a null options argument is named, not a TypeError', async () => {
    const q = tokenMatrix(new Float32Array(4), 1, 4);
    const docs = randomRagged([1], 4, 'float32', rng(3));
    const named = (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'options';
    await assert.rejects(maxsim(q, docs, null as never), named);
    assert.throws(() => maxsimSync(q, docs, null as never), named);
    await assert.rejects(maxsim(matrixAsBatch(q), docs, 7 as never), named);
    await assert.rejects(topK(q, docs, 1, null as never), named);
  });

  test('int8 inputs are refused with a message naming the argument', () => {
    const q = tokenMatrix(new Int8Array(4), 1, 4, { scales: new Float32Array([1]) });
    const docs = randomRagged([1], 4, 'float32', rng(1));
    assert.throws(() => maxsimSync(q, docs), /query\.dtype/);
  });

  test('dimension mismatch and wrong kinds are refused before any native call', () => {
    const docs = randomRagged([2], 8, 'float32', rng(2));
    assert.throws(
      () => maxsimSync(tokenMatrix(new Float32Array(4), 1, 4), docs),
      /Expected 8 \(the dimension of docs\) for query\.dim but received 4/,
    );
    for (const bad of [null, {}, new Float32Array(8)])
      assert.throws(
        () => maxsimSync(bad as never, docs),
        (e: unknown) =>
          e instanceof InvalidArgumentError &&
          e.argument === 'queries' &&
          /a TokenMatrix \(one query\) or a TokenBatch/.test(e.message),
      );
    assert.throws(
      () => maxsimSync(tokenMatrix(new Float32Array(8), 1, 8), docs, { backend: 'cuda' }),
      /synchronous/,
    );
    assert.throws(
      () => maxsimSync(tokenMatrix(new Float32Array(8), 1, 8), docs, { isa: 'bogus' as CpuIsa }),
      /isa/,
    );
  });
});
