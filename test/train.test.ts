// MaxSim training on the CPU against the float64 reference: scores, argmax, gradients, finite
// differences of the contrastive loss, edge shapes, determinism and argument errors.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { cudaStatus } from '../src/backends/cuda.js';
import { decodeBatch64 } from '../src/backends/reference.js';
import { referenceBackward, referenceMaxsimTrain } from '../src/backends/reference-train.js';
import { BackendUnavailableError, InvalidArgumentError } from '../src/errors.js';
import { encodeFloats } from '../src/floats.js';
import { maxsim } from '../src/ops/maxsim.js';
import {
  contrastiveLoss,
  contrastiveStep,
  maxsimTrain,
  maxsimTrainTuned,
  type TrainDDPath,
  type TrainPairs,
} from '../src/ops/train.js';
import { denseBatch, type FloatDType, raggedBatch, type TokenBatch } from '../src/tensor.js';
import {
  assertGradClose,
  assertScoresClose,
  pairBounds,
  randomDense,
  randomFloats,
  randomRagged,
  rng,
  runSeed,
  scoreErrorBounds,
} from './helpers.js';

const dtypes: FloatDType[] = ['float32', 'float16', 'bfloat16'];

function randomGrad(n: number, rand: () => number): Float64Array {
  return Float64Array.from(randomFloats(n, rand));
}

/** Every element outside the batch's real tokens is zero. */
function assertZeroOutside(grad: Float32Array, batch: TokenBatch, context: string) {
  const real = new Uint8Array(grad.length / batch.dim);
  for (let i = 0; i < batch.count; i++) real.fill(1, batch.starts[i], batch.starts[i] + batch.lengths[i]);
  for (let e = 0; e < grad.length; e++) {
    if (!real[Math.floor(e / batch.dim)]) assert.equal(grad[e], 0, `${context}: padding element ${e}`);
  }
}

async function checkAgainstReference(
  queries: TokenBatch,
  docs: TokenBatch,
  pairs: TrainPairs,
  context: string,
) {
  const rand = rng(runSeed + 100);
  const got = await maxsimTrain(queries, docs, { pairs });
  const ref = referenceMaxsimTrain(queries, docs, pairs);
  assert.equal(got.argmaxStride, ref.stride);
  assertScoresClose(got.scores, ref.scores, pairBounds(queries, docs, pairs), `${context} scores`);
  let compared = 0;
  for (let e = 0; e < ref.argmax.length; e++) {
    // A near-tie may go either way in fp32; everything else must match exactly.
    if (ref.margin[e] > 1e-4) {
      assert.equal(got.argmax[e], ref.argmax[e], `${context}: argmax entry ${e} (seed ${runSeed})`);
      compared++;
    }
  }
  assert.ok(compared > ref.argmax.length / 2, `${context}: too few argmax entries compared`);

  // Scores equal the forward engine's to fp32 rounding.
  const forward = await maxsim(queries, docs, { backend: 'cpu' });
  const bounds = scoreErrorBounds(queries, docs);
  for (let p = 0; p < got.scores.length; p++) {
    const m = pairs === 'all' ? p : p * docs.count + p;
    if (forward.data[m] === Number.NEGATIVE_INFINITY) {
      assert.equal(got.scores[p], Number.NEGATIVE_INFINITY);
      continue;
    }
    assert.ok(Math.abs(got.scores[p] - forward.data[m]) <= 2 * bounds[m], `${context}: score ${p} vs maxsim`);
  }

  const g = randomGrad(got.scores.length, rand);
  const { dQ, dD } = await got.backward(g);
  const expected = referenceBackward(queries, docs, got.argmax, got.argmaxStride, g, pairs);
  assertGradClose(dQ, expected.dQ, `${context} dQ`);
  assertGradClose(dD, expected.dD, `${context} dD`);
  assertZeroOutside(dQ, queries, `${context} dQ`);
  assertZeroOutside(dD, docs, `${context} dD`);
}

describe(`MaxSim training vs float64 reference (seed ${runSeed})`, () => {
  for (const dtype of dtypes) {
    test(`${dtype}: ragged queries and documents, all pairs and diagonal`, async () => {
      const rand = rng(runSeed + 1);
      const d = 48;
      const queries = randomRagged([5, 17, 1, 32, 9], d, dtype, rand);
      const docs = randomRagged([30, 3, 70, 1, 45], d, dtype, rand);
      await checkAgainstReference(queries, docs, 'all', `${dtype} ragged all`);
      await checkAgainstReference(queries, docs, 'diagonal', `${dtype} ragged diagonal`);
    });

    test(`${dtype}: dense padded batches, empty documents and queries`, async () => {
      const rand = rng(runSeed + 2);
      const d = 33;
      const queries = randomDense(4, 12, d, dtype, rand, [12, 3, 0, 7]);
      const docs = randomDense(6, 80, d, dtype, rand, [80, 0, 1, 65, 0, 20]);
      await checkAgainstReference(queries, docs, 'all', `${dtype} dense all`);
    });
  }

  test('long documents cross several token chunks', async () => {
    const rand = rng(runSeed + 3);
    const queries = randomRagged([40, 8], 128, 'float32', rand);
    const docs = randomRagged([300, 129], 128, 'float32', rand);
    await checkAgainstReference(queries, docs, 'all', 'long all');
    await checkAgainstReference(queries, docs, 'diagonal', 'long diagonal');
  });
});

/** A small fp32 problem whose every argmax wins by >= minMargin, so small steps never flip it. */
function wellSeparated(
  rand: () => number,
  queryLengths: number[],
  docLengths: number[],
  minMargin: number,
): { queries: TokenBatch; docs: TokenBatch } {
  for (let attempt = 0; attempt < 1000; attempt++) {
    const queries = randomRagged(queryLengths, 8, 'float32', rand);
    const docs = randomRagged(docLengths, 8, 'float32', rand);
    const { margin } = referenceMaxsimTrain(queries, docs, 'all');
    if (margin.every((m) => m >= minMargin)) return { queries, docs };
  }
  throw new Error(`no well-separated problem found (seed ${runSeed})`);
}

async function checkFiniteDifferences(temperature: number | undefined, labels: Int32Array | undefined) {
  const rand = rng(runSeed + 4);
  const { queries, docs } = wellSeparated(rand, [3, 2, 3], [4, 3, 2, 4], 0.02);
  const step = await contrastiveStep(queries, docs, { temperature, labels });
  const q64 = decodeBatch64(queries);
  const d64 = decodeBatch64(docs);
  const lossAt = (qv: Float64Array, dv: Float64Array) => {
    const ref = referenceMaxsimTrain(queries, docs, 'all', { queries: qv, docs: dv });
    return contrastiveLoss(ref.scores, queries.count, docs.count, { temperature, labels }).loss;
  };
  assert.ok(Math.abs(step.loss - lossAt(q64, d64)) <= 1e-5 * Math.max(1, Math.abs(step.loss)));
  const h = 1e-3;
  for (const [values, analytic, name] of [
    [q64, step.dQ, 'dQ'],
    [d64, step.dD, 'dD'],
  ] as const) {
    let scale = 0;
    for (const v of analytic) scale = Math.max(scale, Math.abs(v));
    assert.ok(scale > 0, `${name}: expected a non-zero gradient`);
    for (let e = 0; e < values.length; e++) {
      const saved = values[e];
      values[e] = saved + h;
      const up = lossAt(q64, d64);
      values[e] = saved - h;
      const down = lossAt(q64, d64);
      values[e] = saved;
      const numeric = (up - down) / (2 * h);
      const err = Math.abs(numeric - analytic[e]);
      assert.ok(
        err <= 1e-3 * scale,
        `${name}[${e}]: finite difference ${numeric}, analytic ${analytic[e]} (seed ${runSeed})`,
      );
    }
  }
}

describe('contrastive loss', () => {
  test('finite differences match the analytic gradient (diagonal positives, temperature 1)', async () => {
    await checkFiniteDifferences(undefined, undefined);
  });

  test('finite differences match the analytic gradient (labels, temperature 0.5)', async () => {
    await checkFiniteDifferences(0.5, new Int32Array([2, 0, 3]));
  });

  test('loss and gradient in closed form on a 2 x 2 matrix', () => {
    const { loss, gradScores } = contrastiveLoss(new Float32Array([1, 0, 0, 2]), 2, 2, { temperature: 0.5 });
    const row0 = Math.log(Math.exp(2) + 1) - 2;
    const row1 = Math.log(1 + Math.exp(4)) - 4;
    assert.ok(Math.abs(loss - (row0 + row1) / 2) < 1e-12);
    const p01 = 1 / (Math.exp(2) + 1);
    assert.ok(Math.abs(gradScores[1] - p01 / (0.5 * 2)) < 1e-12);
    assert.ok(Math.abs(gradScores[0] + p01 / (0.5 * 2)) < 1e-12);
  });

  test('an empty negative document gets probability 0 and no gradient', async () => {
    const rand = rng(runSeed + 5);
    const queries = randomRagged([4, 3], 16, 'float32', rand);
    const docs = randomRagged([5, 6, 0], 16, 'float32', rand);
    const step = await contrastiveStep(queries, docs);
    assert.ok(Number.isFinite(step.loss));
    assert.equal(step.scores[2], Number.NEGATIVE_INFINITY);
    const { gradScores } = contrastiveLoss(step.scores, 2, 3);
    assert.equal(gradScores[2], 0);
    assert.equal(gradScores[5], 0);
    const forward = await maxsimTrain(queries, docs);
    assert.deepEqual(
      Array.from(forward.argmax.subarray(2 * forward.argmaxStride, 3 * forward.argmaxStride)),
      [-1, -1, -1, -1],
    );
  });

  test('an empty positive document is refused', async () => {
    const rand = rng(runSeed + 6);
    const queries = randomRagged([2], 8, 'float32', rand);
    const docs = randomRagged([0, 3], 8, 'float32', rand);
    await assert.rejects(contrastiveStep(queries, docs), /labels\[0\]/);
  });
});

describe('MaxSim training semantics', () => {
  test('ties go to the lowest document token; padding is never chosen', async () => {
    // Document 0: tokens 1 and 3 are copies of one vector. Document 1: one real token whose dots are
    // negative for query 0, where its zero padding would win.
    const docs = denseBatch(new Float32Array([-1, 0, 1, 1, -1, -1, 1, 1, -1, -1, 0, 0, 0, 0, 0, 0]), {
      count: 2,
      length: 4,
      dim: 2,
      lengths: [4, 1],
    });
    const queries = raggedBatch(new Float32Array([1, 1, 3, 3, -1, -1]), [0, 2, 3], { dim: 2 });
    const t = await maxsimTrain(queries, docs);
    // Pairs: (q0, d0), (q0, d1), (q1, d0), (q1, d1); stride 2.
    assert.deepEqual(Array.from(t.argmax), [1, 1, 0, 0, 2, -1, 0, -1]);
    assert.deepEqual(Array.from(t.scores), [2 + 6, -2 - 6, 2, 2]);
    // Both tied query tokens credit token 1 only.
    const { dD } = await t.backward(new Float32Array([1, 0, 0, 0]));
    assert.deepEqual(Array.from(dD.subarray(0, 8)), [0, 0, 4, 4, 0, 0, 0, 0]);
  });

  test('gradients are bitwise identical on repeat and for 1 or 2 threads', async () => {
    const rand = rng(runSeed + 7);
    const queries = randomRagged(
      Array.from({ length: 12 }, () => 1 + Math.floor(rand() * 32)),
      64,
      'bfloat16',
      rand,
    );
    const docs = randomRagged(
      Array.from({ length: 40 }, (_, b) => (b % 3 === 1 ? 0 : 1 + Math.floor(rand() * 100))),
      64,
      'bfloat16',
      rand,
    );
    // Positives avoid the empty documents (b % 3 == 1), which stay in as negatives.
    const labels = Int32Array.from({ length: 12 }, (_, i) => (i * 3) % 40);
    const runs = await Promise.all(
      [undefined, 1, 2, 1].map((threads) => contrastiveStep(queries, docs, { threads, labels })),
    );
    for (const r of runs.slice(1)) {
      assert.deepEqual(Buffer.from(r.dQ.buffer), Buffer.from(runs[0].dQ.buffer));
      assert.deepEqual(Buffer.from(r.dD.buffer), Buffer.from(runs[0].dD.buffer));
      assert.deepEqual(Buffer.from(r.scores.buffer), Buffer.from(runs[0].scores.buffer));
    }
  });

  test("outputDtype 'input': each gradient in its input's dtype, the float32 result rounded to nearest even", async () => {
    const rand = rng(runSeed + 9);
    for (const [qt, dt] of [
      ['float16', 'bfloat16'],
      ['float32', 'float16'],
    ] as const) {
      const queries = randomRagged([5, 9, 1], 24, qt, rand);
      const docs = randomRagged([7, 12, 3, 0], 24, dt, rand);
      const g = Float32Array.from({ length: 12 }, () => rand() - 0.5);
      const f32 = await (await maxsimTrain(queries, docs)).backward(g);
      const cast = await (await maxsimTrain(queries, docs, { outputDtype: 'input' })).backward(g);
      assert.deepEqual(cast.dQ, encodeFloats(f32.dQ, qt), `${qt} dQ`);
      assert.deepEqual(cast.dD, encodeFloats(f32.dD, dt), `${dt} dD`);
      assert.equal(cast.dQ instanceof Float32Array, qt === 'float32');
      const step = await contrastiveStep(queries, docs, { outputDtype: 'input' });
      const plain = await contrastiveStep(queries, docs);
      assert.deepEqual(step.dD, encodeFloats(plain.dD, dt));
      assert.equal(step.loss, plain.loss);
    }
  });

  test('bad inputs are refused with errors that name the argument', async () => {
    const rand = rng(runSeed + 8);
    const queries = randomRagged([2, 3], 8, 'float32', rand);
    const docs = randomRagged([2, 3, 4], 8, 'float32', rand);
    await assert.rejects(maxsimTrain(queries, randomRagged([2], 4, 'float32', rand)), /queries\.dim/);
    await assert.rejects(maxsimTrain(queries, docs, { pairs: 'diagonal' }), (e: unknown) => {
      return e instanceof InvalidArgumentError && e.argument === 'queries.count';
    });
    await assert.rejects(maxsimTrain(queries, docs, { pairs: 'rows' as TrainPairs }), /for pairs/);
    await assert.rejects(maxsimTrain(queries, docs, { threads: -1 }), /for threads/);
    // CUDA-only options are validated on every backend, before any work
    await assert.rejects(maxsimTrain(queries, docs, { dDPath: 'sorted' as TrainDDPath }), (e: unknown) => {
      return e instanceof InvalidArgumentError && e.argument === 'dDPath' && /'auto'/.test(e.message);
    });
    await assert.rejects(
      maxsimTrainTuned(queries, docs, { cudaTuning: { argmaxBits: 8 as 16 } }),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'cudaTuning.argmaxBits',
    );
    for (const docBlock of [-1, 1.5, Number.NaN]) {
      await assert.rejects(
        maxsimTrainTuned(queries, docs, { cudaTuning: { docBlock } }),
        (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'cudaTuning.docBlock',
      );
    }
    await assert.rejects(
      maxsimTrainTuned(queries, docs, { cudaTuning: { queryBlock: -2 } }),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'cudaTuning.queryBlock',
    );
    for (const csrChunk of [-1, 1, 31, 40.5, Number.NaN, 2 ** 31]) {
      await assert.rejects(
        maxsimTrainTuned(queries, docs, { cudaTuning: { csrChunk } }),
        (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'cudaTuning.csrChunk',
      );
    }
    // 'auto' and the tuning knobs are accepted (and ignored) by the CPU engine: same gradients
    const plain = await maxsimTrain(queries, docs);
    const tuned = await maxsimTrainTuned(queries, docs, {
      dDPath: 'auto',
      cudaTuning: { argmaxBits: 32, docBlock: 1, queryBlock: 1, csrChunk: 32 },
    });
    const g = new Float32Array(6).fill(0.5);
    assert.deepEqual(await tuned.backward(g), await plain.backward(g));
    if (!cudaStatus().available) {
      await assert.rejects(maxsimTrain(queries, docs, { backend: 'cuda' }), (e: unknown) => {
        return (
          e instanceof BackendUnavailableError && /CUDA backend unavailable for training/.test(e.message)
        );
      });
    }
    const t = await maxsimTrain(queries, docs);
    await assert.rejects(
      () => t.backward(new Float32Array(5)),
      /Expected 6 entries \(one per score\) for gradScores/,
    );
    await assert.rejects(
      maxsimTrain(queries, docs, { outputDtype: 'float16' as 'input' }),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'outputDtype',
    );
    await assert.rejects(contrastiveStep(queries, docs, { labels: new Int32Array([0, 3]) }), /labels\[1\]/);
    await assert.rejects(contrastiveStep(queries, docs, { labels: new Int32Array([0]) }), /for labels/);
    await assert.rejects(contrastiveStep(queries, docs, { temperature: 0 }), /for temperature/);
    await assert.rejects(contrastiveStep(docs, queries), /docs\.count/);
    const overlapping: TokenBatch = { ...docs, starts: new Float64Array([0, 1, 5]) };
    await assert.rejects(maxsimTrain(queries, overlapping), /share no tokens .* for docs/);
    // The saved argmax is caller-visible; an edited entry cannot make native code read out of bounds.
    t.argmax[0] = 99;
    await assert.rejects(
      async () => t.backward(new Float32Array(6)),
      /Expected argmax entries in \[-1, 2\) for pair 0/,
    );
  });
});
