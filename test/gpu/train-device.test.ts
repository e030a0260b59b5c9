// Device-resident training (maxsimTrain / contrastiveStep with DeviceCorpus inputs): the same kernels
// as the host-array CUDA path, so scores, argmax and gradients must be bitwise equal to it, for
// ragged and dense batches with empty items, every float dtype, both pair modes and mixed host /
// device inputs. The saved state follows its contract (released by a backward without retain or by
// dispose(), with errors that say so afterwards), bad inputs are refused with named arguments, and
// the device memory of a step comes back. Without a GPU every test skips with the reason.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { DeviceCorpus } from '../../src/backends/cuda.js';
import { InvalidArgumentError } from '../../src/errors.js';
import { encodeFloats } from '../../src/floats.js';
import { contrastiveStep, maxsimTrain, type TrainPairs } from '../../src/ops/train.js';
import { cudaAddon } from '../../src/ops/train-args.js';
import type { FloatDType, TokenBatch } from '../../src/tensor.js';
import { randomDense, randomRagged, rng, runSeed } from '../helpers.js';
import { bitsEqual, excessOver, gpu, gradSlack, lossClose, skip } from './helpers.js';

const device = Number(process.env.MAXSIM_TEST_DEVICE ?? 0);

/** The real token rows of a host gradient (batch layout) packed in item order, as a device set holds them. */
function packRows(grad: Float32Array, batch: TokenBatch): Float32Array {
  let tokens = 0;
  for (let i = 0; i < batch.count; i++) tokens += batch.lengths[i];
  const out = new Float32Array(tokens * batch.dim);
  let at = 0;
  for (let i = 0; i < batch.count; i++) {
    const n = batch.lengths[i] * batch.dim;
    out.set(grad.subarray(batch.starts[i] * batch.dim, batch.starts[i] * batch.dim + n), at);
    at += n;
  }
  return out;
}

async function deviceRows(set: DeviceCorpus): Promise<Float32Array> {
  assert.equal(set.dtype, 'float32');
  const b = (await set.download()) as TokenBatch;
  return b.data as Float32Array;
}

/** Runs the host-array CUDA path and the device-resident one on the same inputs; everything must be bitwise equal. */
async function compareDeviceWithHost(
  queries: TokenBatch,
  docs: TokenBatch,
  pairs: TrainPairs,
  label: string,
  sides: 'both' | 'docs' = 'both',
) {
  const g = await gpu();
  const host = await maxsimTrain(queries, docs, { pairs, backend: 'cuda', device });
  const dq = sides === 'both' ? await g.upload(queries) : undefined;
  const dd = await g.upload(docs);
  const dev = await maxsimTrain(dq ?? queries, dd, { pairs, device });
  try {
    assert.ok(bitsEqual(dev.scores, host.scores), `${label}: scores`);
    assert.equal(dev.rows, host.rows);
    assert.equal(dev.cols, host.cols);
    assert.equal(dev.argmaxStride, host.argmaxStride);
    assert.deepEqual(await dev.downloadArgmax(), host.argmax, `${label}: argmax`);
    const rand = rng(runSeed + 99);
    const grad = Float32Array.from(host.scores, () => rand() - 0.5);
    const hg = await host.backward(grad);
    assert.equal(dev.released, false);
    const dg = await dev.backward(grad);
    assert.equal(dev.released, true, `${label}: a backward without retain releases the state`);
    assert.equal(dg.dDPath, 'csr');
    assert.equal(dg.dQ.count, queries.count);
    assert.equal(dg.dD.count, docs.count);
    assert.ok(bitsEqual(await deviceRows(dg.dQ), packRows(hg.dQ, queries)), `${label}: dQ`);
    assert.ok(bitsEqual(await deviceRows(dg.dD), packRows(hg.dD, docs)), `${label}: dD`);
    dg.dQ.dispose();
    dg.dD.dispose();
  } finally {
    dev.dispose();
    dq?.dispose();
    dd.dispose();
  }
}

describe(`CUDA device-resident training (seed ${runSeed})`, { skip }, () => {
  for (const dtype of ['float32', 'float16', 'bfloat16'] as FloatDType[]) {
    test(`${dtype}: ragged with empty items, all pairs and diagonal, bitwise equal to the host-array path`, async () => {
      const rand = rng(runSeed + 1);
      const queries = randomRagged([5, 17, 1, 32, 0, 9], 64, dtype, rand);
      const docs = randomRagged([30, 3, 70, 1, 0, 45], 64, dtype, rand);
      await compareDeviceWithHost(queries, docs, 'all', `${dtype} all`);
      await compareDeviceWithHost(queries, docs, 'diagonal', `${dtype} diagonal`);
    });
  }

  test('dense padded batches and odd d (SIMT forward), host queries beside device documents', async () => {
    const rand = rng(runSeed + 2);
    const queries = randomDense(4, 12, 33, 'float32', rand, [12, 3, 0, 7]);
    const docs = randomDense(6, 80, 33, 'float32', rand, [80, 0, 1, 65, 0, 20]);
    await compareDeviceWithHost(queries, docs, 'all', 'dense d=33');
    await compareDeviceWithHost(queries, docs, 'all', 'host queries', 'docs');
  });

  test("outputDtype 'input': gradients cast on the GPU, bitwise the host encoding of the float32 ones", async () => {
    const rand = rng(runSeed + 7);
    const g = await gpu();
    for (const [qt, dt] of [
      ['float16', 'bfloat16'],
      ['float32', 'float16'],
    ] as const) {
      const queries = randomRagged([9, 30, 1, 0], 64, qt, rand);
      const docs = randomRagged([12, 0, 50, 7, 3], 64, dt, rand);
      const [dq, dd] = [await g.upload(queries), await g.upload(docs)];
      const grad = Float32Array.from({ length: 20 }, () => rand() - 0.5);
      const f32 = await (await maxsimTrain(dq, dd)).backward(grad);
      const cast = await (await maxsimTrain(dq, dd, { outputDtype: 'input' })).backward(grad);
      assert.equal(cast.dQ.dtype, qt);
      assert.equal(cast.dD.dtype, dt);
      const bits = async (c: DeviceCorpus) => ((await c.download()) as TokenBatch).data;
      assert.deepEqual(await bits(cast.dQ), encodeFloats(await deviceRows(f32.dQ), qt), `${qt} dQ`);
      assert.deepEqual(await bits(cast.dD), encodeFloats(await deviceRows(f32.dD), dt), `${dt} dD`);
      for (const c of [f32.dQ, f32.dD, cast.dQ, cast.dD, dq, dd]) c.dispose();
    }
  });

  test('contrastiveStep on device corpora equals the host-array CUDA step', async () => {
    const rand = rng(runSeed + 3);
    const queries = randomRagged([12, 5, 30, 8], 64, 'bfloat16', rand);
    const docs = randomRagged([40, 0, 17, 90, 33], 64, 'bfloat16', rand);
    const labels = new Int32Array([0, 2, 3, 4]);
    const options = { labels, device, temperature: 0.2 };
    const host = await contrastiveStep(queries, docs, { ...options, backend: 'cuda' });
    const g = await gpu();
    const [dq, dd] = [await g.upload(queries), await g.upload(docs)];
    const dev = await contrastiveStep(dq, dd, options);
    // The device step computes the loss on the GPU (kernels/maxsim_loss.cu): CUDA's exp / log and V8's
    // may round an argument differently, so the loss is close (lossClose) and the gradients within an
    // ulp plus gradSlack (train-loss.test.ts compares them with the host loss across shapes).
    assert.ok(
      lossClose(dev.loss, host.loss, host.scores, docs.count, 0.2),
      `loss ${dev.loss} vs ${host.loss}`,
    );
    assert.ok(bitsEqual(dev.scores, host.scores));
    const slack = gradSlack(host.scores, docs.count, 0.2, 30, 1); // stride 30, values in [-1, 1]
    assert.ok(excessOver(await deviceRows(dev.dQ), packRows(host.dQ, queries), slack) <= 0, 'dQ');
    assert.ok(excessOver(await deviceRows(dev.dD), packRows(host.dD, docs), slack) <= 0, 'dD');
    for (const c of [dev.dQ, dev.dD, dq, dd]) c.dispose();
  });

  test('retain keeps the state for a second, identical backward; release and dispose are final', async () => {
    const rand = rng(runSeed + 4);
    const g = await gpu();
    const dq = await g.upload(randomRagged([20, 7], 32, 'float16', rand));
    const dd = await g.upload(randomRagged([15, 40, 3], 32, 'float16', rand));
    const fwd = await maxsimTrain(dq, dd);
    const grad = new Float32Array(fwd.scores.length).fill(0.25);
    const a = await fwd.backward(grad, { retain: true });
    assert.equal(fwd.released, false);
    const b = await fwd.backward(grad);
    assert.equal(fwd.released, true);
    assert.ok(bitsEqual(await deviceRows(a.dQ), await deviceRows(b.dQ)), 'repeat dQ is bitwise identical');
    assert.ok(bitsEqual(await deviceRows(a.dD), await deviceRows(b.dD)), 'repeat dD is bitwise identical');
    await assert.rejects(() => fwd.backward(grad), /released by an earlier backward/);
    await assert.rejects(() => fwd.downloadArgmax(), /released/);
    fwd.dispose();
    fwd.dispose();
    const other = await maxsimTrain(dq, dd);
    other.dispose();
    assert.equal(other.released, true);
    await assert.rejects(() => other.backward(grad), InvalidArgumentError);
    // The operands belong to the state: disposing the inputs between the passes changes nothing.
    const kept = await maxsimTrain(dq, dd);
    dq.dispose();
    dd.dispose();
    const c = await kept.backward(grad);
    assert.ok(bitsEqual(await deviceRows(c.dQ), await deviceRows(a.dQ)), 'inputs disposed after the forward');
    for (const x of [a.dQ, a.dD, b.dQ, b.dD, c.dQ, c.dD]) x.dispose();
  });

  test('documents appended between the passes are not part of the step', async () => {
    const rand = rng(runSeed + 8);
    const g = await gpu();
    const queries = randomRagged([6, 11], 32, 'float16', rand);
    const first = randomRagged([9, 14, 5], 32, 'float16', rand);
    const dq = await g.upload(queries);
    const growing = await g.alloc({ dtype: 'float16', dim: 32, tokens: 200, items: 8 });
    await growing.append(first);
    const fixed = await g.upload(first);
    const grad = Float32Array.from({ length: 6 }, () => rand() - 0.5);
    const fwd = await maxsimTrain(dq, growing);
    await growing.append(randomRagged([20, 7], 32, 'float16', rand));
    const got = await fwd.backward(grad);
    const want = await (await maxsimTrain(dq, fixed)).backward(grad);
    assert.equal(got.dD.count, 3);
    assert.equal(got.dD.tokens, 28);
    assert.ok(bitsEqual(await deviceRows(got.dD), await deviceRows(want.dD)), 'dD');
    assert.ok(bitsEqual(await deviceRows(got.dQ), await deviceRows(want.dQ)), 'dQ');
    for (const c of [got.dQ, got.dD, want.dQ, want.dD, dq, growing, fixed]) c.dispose();
  });

  test('setLengths (the lengths the backward plan cuts its CSR blocks by): the items as of the call', async () => {
    const rand = rng(runSeed + 9);
    const g = await gpu();
    const growing = await g.alloc({ dtype: 'float16', dim: 32, tokens: 200, items: 8 });
    assert.deepEqual(await cudaAddon().setLengths(growing.native), new Int32Array(0));
    await growing.append(randomRagged([9, 0, 5], 32, 'float16', rand));
    assert.deepEqual(await cudaAddon().setLengths(growing.native), Int32Array.from([9, 0, 5]));
    await growing.append(randomRagged([20, 7], 32, 'float16', rand));
    assert.deepEqual(await cudaAddon().setLengths(growing.native), Int32Array.from([9, 0, 5, 20, 7]));
    const view = await growing.select([4, 0]);
    assert.deepEqual(await cudaAddon().setLengths(view.native), Int32Array.from([7, 9]));
    view.dispose();
    growing.dispose();
    assert.throws(() => cudaAddon().setLengths(growing.native), /tokenSet/);
  });

  test('every device buffer of a training step comes back', async () => {
    const rand = rng(runSeed + 5);
    const g = await gpu();
    const dq = await g.upload(randomRagged([64, 64, 64, 64], 128, 'float16', rand));
    const dd = await g.upload(randomRagged([100, 200, 50, 300], 128, 'float16', rand));
    const before = (await g.memory()).inUse;
    for (let r = 0; r < 3; r++) {
      const step = await contrastiveStep(dq, dd, { temperature: 0.1 });
      step.dQ.dispose();
      step.dD.dispose();
    }
    const fwd = await maxsimTrain(dq, dd);
    fwd.dispose();
    // Frees go through the worker thread: a memory() call queued after them sees them done.
    assert.equal((await g.memory()).inUse, before, 'device bytes in use after dispose');
    dq.dispose();
    dd.dispose();
  });

  test('bad inputs are refused with errors that name the argument', async () => {
    const rand = rng(runSeed + 6);
    const g = await gpu();
    const q = randomRagged([4, 6], 32, 'float32', rand);
    const dd = await g.upload(randomRagged([5, 9, 2], 32, 'float32', rand));
    await assert.rejects(() => maxsimTrain(q, dd, { backend: 'cpu' }), /backend/);
    const view = await dd.select([0, 0, 1]);
    await assert.rejects(() => maxsimTrain(q, view), /view made by select/);
    const i8 = await dd.quantize('int8');
    await assert.rejects(() => maxsimTrain(q, i8), /docs\.dtype/);
    const narrow = await g.upload(randomRagged([5], 16, 'float32', rand));
    await assert.rejects(() => maxsimTrain(q, narrow), /queries\.dim/);
    await assert.rejects(() => maxsimTrain(q, dd, { device: device + 1 }), /device/);
    await assert.rejects(() => maxsimTrain(q, dd, { pairs: 'diagonal' }), /queries\.count/);
    const fwd = await maxsimTrain(q, dd);
    await assert.rejects(() => fwd.backward(new Float32Array(3)), /gradScores/);
    await assert.rejects(
      () => fwd.backward(new Float32Array(fwd.scores.length), { retain: 'yes' as unknown as boolean }),
      /retain/,
    );
    fwd.dispose();
    for (const c of [view, i8, narrow, dd]) c.dispose();
    await assert.rejects(() => maxsimTrain(q, dd), /disposed/);
  });
});
