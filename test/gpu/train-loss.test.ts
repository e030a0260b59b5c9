// The contrastive loss of a device-resident step on the GPU (native/cuda/kernels/maxsim_loss.cu):
// contrastiveStep with DeviceCorpus inputs computes the loss and gradScores in its one job from
// the scores the forward left on the device. It must equal the host path it replaces (the same
// forward, contrastiveLoss in JS, the backward with those host gradScores) on random ragged shapes:
// the kernel repeats contrastiveLoss's float64 operations in its order, so every value is the same
// except where CUDA's exp / log and V8's Math.exp / Math.log (both within 1 ulp) round an argument
// differently; a gradScore then moves by an ulp of float64, which can move the float32 gradients by at
// most one ulp where nothing cancels. So: the loss within 1e-12 relative (plus a few ulps of the logits
// where a row's loss cancels: lossClose in helpers.ts), dQ and dD within 1 float32 ulp plus the
// absolute slack such gradScores allow (gradSlack; how many are bitwise equal is logged), repeat runs bitwise identical, an empty positive document refused with
// contrastiveLoss's own error, and the device usable and its memory back afterwards.
// Without a GPU every test skips with the reason.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  adoptOnDeviceOf,
  cudaStatus,
  type DeviceCorpus,
  type NativeTokenSet,
} from '../../src/backends/cuda.js';
import { planBackward, planForward, type TrainShape } from '../../src/backends/cuda-train-plan.js';
import { InvalidArgumentError } from '../../src/errors.js';
import { loadNative } from '../../src/native.js';
import { contrastiveLoss, contrastiveStep, maxsimTrain } from '../../src/ops/train.js';
import type { FloatDType, TokenBatch } from '../../src/tensor.js';
import { randomRagged, rng, runSeed } from '../helpers.js';
import { bitsEqual, excessOver, gpu, gradSlack, lossClose, skip, ulpCompare } from './helpers.js';

const device = Number(process.env.MAXSIM_TEST_DEVICE ?? 0);

async function rows(set: DeviceCorpus): Promise<Float32Array> {
  assert.equal(set.dtype, 'float32');
  return ((await set.download()) as TokenBatch).data as Float32Array;
}

interface Step {
  loss: number;
  scores: Float32Array;
  dQ: Float32Array;
  dD: Float32Array;
}

/** Today's host path on the same device inputs: the forward, contrastiveLoss in JS, the backward. */
async function hostStep(
  dq: DeviceCorpus,
  dd: DeviceCorpus,
  temperature: number,
  labels?: Int32Array,
): Promise<Step> {
  const fwd = await maxsimTrain(dq, dd);
  try {
    const { loss, gradScores } = contrastiveLoss(fwd.scores, fwd.rows, fwd.cols, { temperature, labels });
    const g = await fwd.backward(gradScores);
    const out = { loss, scores: fwd.scores, dQ: await rows(g.dQ), dD: await rows(g.dD) };
    g.dQ.dispose();
    g.dD.dispose();
    return out;
  } finally {
    fwd.dispose();
  }
}

async function deviceStep(
  dq: DeviceCorpus,
  dd: DeviceCorpus,
  temperature: number,
  labels?: Int32Array,
): Promise<Step> {
  const s = await contrastiveStep(dq, dd, { temperature, labels });
  const out = { loss: s.loss, scores: s.scores, dQ: await rows(s.dQ), dD: await rows(s.dD) };
  s.dQ.dispose();
  s.dD.dispose();
  return out;
}

/** Lengths in [lo, hi]. */
function lengths(n: number, lo: number, hi: number, rand: () => number): number[] {
  return Array.from({ length: n }, () => lo + Math.floor(rand() * (hi - lo + 1)));
}

// B queries; per B a dtype and dim that reach each forward kernel on the way (wgmma / mma on
// float16 / bfloat16 with d % 8 == 0, the CUDA-core kernel for float32 d = 33).
const shapes: [number, FloatDType, number][] = [
  [1, 'float32', 33],
  [2, 'float16', 64],
  [7, 'bfloat16', 128],
  [64, 'float16', 128],
  [130, 'bfloat16', 64],
];

describe(`CUDA contrastive loss of device-resident steps (seed ${runSeed})`, { skip }, () => {
  for (const [B, dtype, dim] of shapes) {
    test(`B=${B} ${dtype} d=${dim}: equals contrastiveLoss + backward, labels and diagonal, tau 0.05 and 1; repeats are bitwise`, async () => {
      const rand = rng(runSeed + 1000 + B);
      const g = await gpu();
      const queries = randomRagged(lengths(B, 1, 40, rand), dim, dtype, rand);
      // More documents than queries: the first B non-empty (the diagonal's positives), the rest
      // sometimes empty (-Infinity scores: probability 0, gradient 0).
      const extra = 1 + Math.floor(rand() * 5);
      const docLengths = [...lengths(B, 1, 90, rand), ...lengths(extra, 0, 90, rand)];
      docLengths[B] = 0;
      const docs = randomRagged(docLengths, dim, dtype, rand);
      const labels = Int32Array.from({ length: B }, () => {
        for (;;) {
          const d = Math.floor(rand() * docLengths.length);
          if (docLengths[d] > 0) return d;
        }
      });
      const [dq, dd] = [await g.upload(queries), await g.upload(docs)];
      try {
        for (const temperature of [0.05, 1]) {
          for (const l of [labels, undefined]) {
            const label = `B=${B} tau=${temperature} ${l ? 'labels' : 'diagonal'}`;
            const want = await hostStep(dq, dd, temperature, l);
            const got = await deviceStep(dq, dd, temperature, l);
            assert.ok(bitsEqual(got.scores, want.scores), `${label}: scores`);
            assert.ok(Number.isFinite(got.loss), `${label}: loss ${got.loss}`);
            const rel = Math.abs(got.loss - want.loss) / Math.abs(want.loss);
            assert.ok(
              lossClose(got.loss, want.loss, want.scores, want.scores.length / B, temperature),
              `${label}: loss ${got.loss} vs ${want.loss} (relative ${rel})`,
            );
            const q = ulpCompare(got.dQ, want.dQ);
            const d = ulpCompare(got.dD, want.dD);
            // token values are in [-1, 1] (randomFloats)
            const slack = gradSlack(want.scores, want.scores.length / B, temperature, dq.maxLength, 1);
            const qx = excessOver(got.dQ, want.dQ, slack);
            const dx = excessOver(got.dD, want.dD, slack);
            assert.ok(qx <= 0, `${label}: dQ beyond 1 ulp + ${slack} by ${qx} (max ${q.maxUlp} ulps)`);
            assert.ok(dx <= 0, `${label}: dD beyond 1 ulp + ${slack} by ${dx} (max ${d.maxUlp} ulps)`);
            console.log(
              `# ${label}: loss ${got.loss === want.loss ? 'bitwise equal' : `relative ${rel.toExponential(2)}`}, ` +
                `dQ bitwise ${q.equal}/${got.dQ.length}, dD bitwise ${d.equal}/${got.dD.length}`,
            );
            const again = await deviceStep(dq, dd, temperature, l);
            assert.ok(Object.is(again.loss, got.loss), `${label}: repeat loss ${again.loss} vs ${got.loss}`);
            assert.ok(bitsEqual(again.dQ, got.dQ), `${label}: repeat dQ bitwise`);
            assert.ok(bitsEqual(again.dD, got.dD), `${label}: repeat dD bitwise`);
          }
        }
      } finally {
        dq.dispose();
        dd.dispose();
      }
    });
  }

  test("an empty positive document: contrastiveLoss's error, the device usable and its memory back", async () => {
    const rand = rng(runSeed + 2000);
    const g = await gpu();
    const queries = randomRagged([10, 4, 22], 64, 'float16', rand);
    const docs = randomRagged([30, 0, 12, 50], 64, 'float16', rand);
    const [dq, dd] = [await g.upload(queries), await g.upload(docs)];
    try {
      const before = (await g.memory()).inUse;
      for (const labels of [new Int32Array([0, 1, 2]), undefined, new Int32Array([3, 2, 1])]) {
        const fwd = await maxsimTrain(dq, dd);
        let hostError: unknown;
        try {
          contrastiveLoss(fwd.scores, fwd.rows, fwd.cols, { labels });
        } catch (e) {
          hostError = e;
        }
        fwd.dispose();
        assert.ok(hostError instanceof InvalidArgumentError);
        const want = hostError;
        await assert.rejects(
          () => contrastiveStep(dq, dd, { labels }),
          (e: unknown) =>
            e instanceof InvalidArgumentError && e.message === want.message && e.argument === want.argument,
        );
      }
      assert.equal((await g.memory()).inUse, before, 'device bytes in use after the refused steps');
      const ok = new Int32Array([0, 3, 2]);
      const want = await hostStep(dq, dd, 1, ok);
      const got = await deviceStep(dq, dd, 1, ok);
      assert.ok(lossClose(got.loss, want.loss, want.scores, 4, 1), `loss ${got.loss} vs ${want.loss}`);
      const slack = gradSlack(want.scores, 4, 1, dq.maxLength, 1);
      assert.ok(excessOver(got.dQ, want.dQ, slack) <= 0);
      assert.ok(excessOver(got.dD, want.dD, slack) <= 0);
      assert.equal((await g.memory()).inUse, before, 'device bytes in use after a good step');
    } finally {
      dq.dispose();
      dd.dispose();
    }
  });

  test('the native entry point (trainStep): the device flag of an empty positive, and its argument checks', async () => {
    // TypeScript raises contrastiveLoss's error from the job's emptyPositive (the loss kernel's flag,
    // read back before the backward kernels run); here the addon is called directly.
    const rand = rng(runSeed + 3000);
    const g = await gpu();
    const queries = randomRagged([6, 9], 32, 'bfloat16', rand);
    const docs = randomRagged([14, 0, 20], 32, 'bfloat16', rand);
    const [dq, dd] = [await g.upload(queries), await g.upload(docs)];
    const cuda = (loadNative() as unknown as { cuda: Record<string, (...args: unknown[]) => unknown> }).cuda;
    const info = cudaStatus().devices?.[device];
    assert.ok(info);
    const shape: TrainShape = {
      queryDtype: 'bfloat16',
      docDtype: 'bfloat16',
      dim: 32,
      queries: 2,
      docs: 3,
      pairs: 'all',
      stride: dq.maxLength,
      maxDocLength: dd.maxLength,
    };
    const kernelInfo = cuda.trainKernelInfo as unknown as Parameters<typeof planForward>[4];
    const plan = planForward(
      shape,
      'auto',
      {},
      { ccMajor: info.computeCapability[0], sms: info.sms },
      kernelInfo,
    );
    const step = (contrastive: unknown) =>
      cuda.trainStep(
        device,
        dq.native,
        dd.native,
        { pairs: 'all', stride: shape.stride, plan },
        {
          outputDtype: 'float32',
          plan: planBackward('csr', {}, shape, { queries: queries.lengths, docs: docs.lengths }),
          contrastive,
        },
      ) as Promise<{ scores: Float32Array; emptyPositive?: number; dQ: unknown; dD: unknown; loss: number }>;
    try {
      const before = (await g.memory()).inUse;
      const bad = await step({ temperature: 1, labels: new Int32Array([0, 1]) });
      assert.equal(bad.emptyPositive, 1, 'the first query whose positive is empty');
      assert.equal(bad.dQ, undefined);
      assert.throws(() => step({ temperature: 0 }), /temperature/);
      assert.throws(() => step({ temperature: 1, labels: new Int32Array([0]) }), /labels/);
      assert.throws(() => step({ temperature: 1, labels: new Int32Array([0, 3]) }), /labels\[1\]/);
      assert.throws(() => step({ temperature: 1, labels: [0, 2] }), /labels/);
      assert.throws(() => step(undefined), /contrastive/);
      // The device is usable and its memory back; good labels give the host path's loss.
      const good = new Int32Array([0, 2]);
      const r = await step({ temperature: 0.5, labels: good });
      const host = contrastiveLoss(r.scores, 2, 3, { temperature: 0.5, labels: good });
      assert.ok(lossClose(r.loss, host.loss, r.scores, 3, 0.5), `${r.loss} vs ${host.loss}`);
      for (const set of [r.dQ, r.dD]) adoptOnDeviceOf(dq, set as NativeTokenSet).dispose();
      assert.equal((await g.memory()).inUse, before, 'device bytes in use after the steps');
    } finally {
      dq.dispose();
      dd.dispose();
    }
  });
});
