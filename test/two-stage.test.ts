// Two-stage top-K (int8 scan, exact rescoring of c·K candidates) equals the exact top-K.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { cpuInfo } from '../src/backends/cpu.js';
import { InvalidArgumentError } from '../src/errors.js';
import { maxsim } from '../src/ops/maxsim.js';
import { cpuInt8Isas, cpuInt8SlowerReason, INT8_ISAS, quantize } from '../src/ops/quantize.js';
import { rankRows } from '../src/ops/shape.js';
import { twoStageTopK } from '../src/ops/two-stage.js';
import { matrixAsBatch } from '../src/tensor.js';
import { randomMatrix, randomRagged, rng, runSeed } from './helpers.js';

// every MAXSIM_INT8_SLOW process warning of this file's tests
const slowWarnings: string[] = [];
process.on('warning', (w: Error & { code?: string }) => {
  if (w.code === 'MAXSIM_INT8_SLOW') slowWarnings.push(w.message);
});

describe(`two-stage top-k (seed ${runSeed})`, () => {
  test('equals the exact top-k, scores included, on ragged documents with empty ones', async () => {
    const rand = rng(runSeed + 21);
    for (const d of [64, 100]) {
      const lengths = Array.from({ length: 300 }, (_, i) => (i % 37 === 5 ? 0 : 1 + Math.floor(rand() * 40)));
      const docs = randomRagged(lengths, d, 'float32', rand);
      const queries = randomRagged([32, 7, 1], d, 'float32', rand);
      const exact = rankRows(await maxsim(queries, docs, { backend: 'cpu' }), 10);
      const two = await twoStageTopK(queries, docs, quantize(docs, 'int8'), 10, { backend: 'cpu' });
      assert.deepEqual(two, exact, `d=${d}`);
    }
  });

  // the scan on every int8 kernel set (forced, so a CPU where int8 is slower still runs it); the sets
  // this CPU lacks are skipped by name
  for (const isa of INT8_ISAS) {
    const usable = cpuInt8Isas();
    test(`scan on ${isa} (prefilter 'always') equals the exact top-k`, {
      skip: usable.includes(isa) ? false : `${isa}: this CPU lacks it (usable: ${usable.join(', ')})`,
    }, async () => {
      const rand = rng(runSeed + 24);
      for (const d of isa === 'amx' ? [64, 128] : [33, 128]) {
        const lengths = Array.from({ length: 200 }, (_, i) =>
          i % 29 === 3 ? 0 : 1 + Math.floor(rand() * 50),
        );
        const docs = randomRagged(lengths, d, 'float32', rand);
        const queries = randomRagged([32, 5], d, 'float32', rand);
        const exact = rankRows(await maxsim(queries, docs, { backend: 'cpu' }), 10);
        const options = { backend: 'cpu', prefilter: 'always', int8Isa: isa } as const;
        assert.deepEqual(await twoStageTopK(queries, docs, quantize(docs, 'int8'), 10, options), exact);
      }
    });
  }

  test('where the int8 set is slower than the float one: says why, warns once, ranks exactly without the scan', async () => {
    // the rule, on forced names (any CPU)
    assert.match(cpuInt8SlowerReason(128, 'portable', 'avx2') ?? '', /portable kernel \(forced\)/);
    assert.match(cpuInt8SlowerReason(128, 'avx2', 'avx512') ?? '', /AVX2 kernel .* 512-bit float32/);
    assert.equal(cpuInt8SlowerReason(128, 'avx2', 'avx2'), undefined);
    assert.equal(cpuInt8SlowerReason(128, 'avx512-vnni', 'avx512'), undefined);
    assert.equal(cpuInt8SlowerReason(128, 'amx', 'amx'), undefined);
    const floatIsa = cpuInfo().isa;
    if (floatIsa === 'portable') return; // nothing is slower than portable float32
    {
      const rand = rng(runSeed + 25);
      const docs = randomRagged(
        Array.from({ length: 60 }, () => 1 + Math.floor(rand() * 20)),
        48,
        'float32',
        rand,
      );
      const queries = randomRagged([9, 4], 48, 'float32', rand);
      const exact = rankRows(await maxsim(queries, docs, { backend: 'cpu' }), 10);
      const options = { backend: 'cpu', int8Isa: 'portable', isa: floatIsa } as const;
      // a corpus that is not the int8 copy of docs in content (all zeros): only a skipped scan is exact
      const zeros = quantize(docs, 'int8');
      zeros.data.fill(0);
      for (let i = 0; i < 3; i++)
        assert.deepEqual(await twoStageTopK(queries, docs, zeros, 10, options), exact);
      await new Promise((r) => setImmediate(r)); // process warnings are emitted on the next tick
      // once per process for this reason (the forced-portable scan above may have said it first)
      const same = slowWarnings.filter((w) =>
        w.includes(`portable kernel (forced), several times slower than float32 (${floatIsa})`),
      );
      assert.equal(same.length, 1, slowWarnings.join('\n'));
    }
  });

  test('one query, float16 documents, k larger than the corpus', async () => {
    const rand = rng(runSeed + 22);
    const docs = randomRagged([5, 9, 0, 3], 64, 'float16', rand);
    const q = randomMatrix(16, 64, 'float16', rand);
    const exact = rankRows(await maxsim(matrixAsBatch(q), docs, { backend: 'cpu' }), 10)[0];
    const hits = await twoStageTopK(q, docs, quantize(docs, 'int8'), 10, { backend: 'cpu' });
    assert.equal(hits.length, 4);
    assert.deepEqual(hits, exact);
    assert.equal(hits[3].score, Number.NEGATIVE_INFINITY); // the empty document ranks last
    // the same query as a batch of one: a list per query, the same hits
    const lists = await twoStageTopK(matrixAsBatch(q), docs, quantize(docs, 'int8'), 10, { backend: 'cpu' });
    assert.deepEqual(lists, [hits]);
    await assert.rejects(
      twoStageTopK({} as never, docs, quantize(docs, 'int8'), 10),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'queries',
    );
  });

  test('refuses a corpus that is not the int8 copy of docs, and a bad candidate factor', async () => {
    const rand = rng(runSeed + 23);
    const docs = randomRagged([4, 4], 64, 'float32', rand);
    const q = randomMatrix(2, 64, 'float32', rand);
    await assert.rejects(twoStageTopK(q, docs, docs, 1), InvalidArgumentError);
    await assert.rejects(
      twoStageTopK(q, docs, quantize(randomRagged([4], 64, 'float32', rand), 'int8'), 1),
      /docsInt8/,
    );
    await assert.rejects(
      twoStageTopK(q, docs, quantize(docs, 'int8'), 1, { candidateFactor: 0.5 }),
      /candidateFactor/,
    );
    await assert.rejects(
      // @ts-expect-error: not a prefilter mode
      twoStageTopK(q, docs, quantize(docs, 'int8'), 1, { prefilter: 'never' }),
      (e) => e instanceof InvalidArgumentError && /prefilter/.test(e.message),
    );
  });
});
