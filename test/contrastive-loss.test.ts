// contrastiveLoss keeps its numbers bit for bit: the device-resident step's kernel
// (native/cuda/kernels/maxsim_loss.cu) and the CPU training tests are held to them. The reference
// here is the formula written plainly (s / tau at every use, the scale inside the loop, the one-hot
// subtracted from every entry); the library's loop divides once per score and hoists the scale, which
// must change no bit, for any temperature, labels or not, and scores with -Infinity, NaN and signed zeros.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { contrastiveLoss } from '../src/ops/train.js';
import { rng, runSeed } from './helpers.js';

function plainLoss(
  scores: Float32Array,
  rows: number,
  cols: number,
  tau: number,
  labels?: Int32Array,
): { loss: number; gradScores: Float64Array } {
  const grad = new Float64Array(rows * cols);
  let total = 0;
  for (let i = 0; i < rows; i++) {
    const label = labels ? labels[i] : i;
    const row = i * cols;
    let max = Number.NEGATIVE_INFINITY;
    for (let j = 0; j < cols; j++) max = Math.max(max, scores[row + j] / tau);
    let sum = 0;
    for (let j = 0; j < cols; j++) sum += Math.exp(scores[row + j] / tau - max);
    const logSumExp = max + Math.log(sum);
    total += logSumExp - scores[row + label] / tau;
    for (let j = 0; j < cols; j++) {
      const p = Math.exp(scores[row + j] / tau - logSumExp);
      grad[row + j] = (p - (j === label ? 1 : 0)) * (1 / (tau * rows));
    }
  }
  return { loss: total / rows, gradScores: grad };
}

describe(`contrastiveLoss (seed ${runSeed})`, () => {
  test('bitwise equal to the plain formula on random shapes with -Infinity, NaN and signed zeros', () => {
    const rand = rng(runSeed + 41);
    for (let t = 0; t < 400; t++) {
      const rows = 1 + Math.floor(rand() * 40);
      const cols = rows + Math.floor(rand() * 30);
      const spread = [0.01, 1, 40, 3000][t % 4];
      const scores = Float32Array.from({ length: rows * cols }, () =>
        rand() < 0.05 ? Number.NEGATIVE_INFINITY : (rand() - 0.5) * spread,
      );
      const labels =
        rand() < 0.5 ? Int32Array.from({ length: rows }, () => Math.floor(rand() * cols)) : undefined;
      for (let i = 0; i < rows; i++) scores[i * cols + (labels ? labels[i] : i)] = (rand() - 0.5) * spread;
      if (t % 17 === 0) scores[Math.floor(rand() * scores.length)] = Number.NaN;
      if (t % 13 === 0) {
        scores.fill(0);
        for (let k = 0; k < scores.length; k += 2) scores[k] = -0;
      }
      const tau = [0.05, 1, 0.3, 7, 1e-3][t % 5];
      const want = plainLoss(scores, rows, cols, tau, labels);
      const got = contrastiveLoss(scores, rows, cols, { temperature: tau, labels });
      assert.ok(Object.is(got.loss, want.loss), `case ${t}: loss ${got.loss} vs ${want.loss}`);
      const a = new Uint8Array(got.gradScores.buffer);
      const b = new Uint8Array(want.gradScores.buffer);
      assert.equal(a.length, b.length);
      for (let k = 0; k < a.length; k++) {
        if (a[k] !== b[k])
          assert.fail(
            `case ${t}: gradScores[${k >> 3}] ${got.gradScores[k >> 3]} vs ${want.gradScores[k >> 3]}`,
          );
      }
    }
  });
});
