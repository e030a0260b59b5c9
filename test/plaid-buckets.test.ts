// The residual codec's buckets (src/plaid/codec.ts fitBuckets): evenly spaced levels per dimension
// with cutoffs halfway between them, fitted by Lloyd's iteration under that constraint; checked on
// fresh random columns (Gaussian, heavy-tailed, skewed, constant, two-valued, one row) against the
// squared error of a least-squares line (no better line for the fitted codes), against nudged
// levels, and against the Gaussian's known uniform-quantizer error.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { bucketOf, fitBuckets } from '../src/plaid/codec.js';
import { rng, runSeed } from './helpers.js';

function gauss(rand: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
}

/** Squared error of dimension k's column under levels lo + j step (nearest level, clamped). */
function sqError(col: Float32Array, levels: number, lo: number, step: number): number {
  let e = 0;
  for (const r of col) {
    const j = step > 0 ? Math.min(levels - 1, Math.max(0, Math.round((r - lo) / step))) : 0;
    e += (r - (lo + j * step)) ** 2;
  }
  return e;
}

describe('residual buckets', () => {
  test(`evenly spaced levels, cutoffs halfway, no better nearby line (seed ${runSeed})`, () => {
    const rand = rng(runSeed);
    let worst = 1;
    for (const bits of [2, 4] as const)
      for (const kind of ['gauss', 'laplace', 'skew'] as const) {
        const n = 1 + Math.floor(rand() * 5000);
        const d = 1 + Math.floor(rand() * 6);
        const x = new Float32Array(n * d);
        for (let i = 0; i < x.length; i++) {
          const g = gauss(rand);
          const scale = 0.01 + (i % d) * 0.02;
          x[i] =
            kind === 'gauss'
              ? g * scale
              : kind === 'laplace'
                ? (rand() < 0.5 ? -1 : 1) * Math.log(1 / (1 - rand())) * scale
                : Math.exp(g) * scale;
        }
        const b = fitBuckets(x, d, bits);
        const levels = 1 << bits;
        const what = `${kind} ${bits}-bit n ${n} d ${d}`;
        for (let k = 0; k < d; k++) {
          const w = b.weights.subarray(k * levels, (k + 1) * levels);
          const step = (w[levels - 1] - w[0]) / (levels - 1);
          assert.ok(step >= 0, `${what}: ascending levels`);
          for (let j = 0; j < levels; j++)
            assert.ok(
              Math.abs(w[j] - (w[0] + j * step)) <= 1e-6 * (Math.abs(w[0]) + Math.abs(w[levels - 1])),
              what,
            );
          for (let j = 0; j < levels - 1; j++)
            assert.ok(
              Math.abs(b.cutoffs[k * (levels - 1) + j] - (w[j] + w[j + 1]) / 2) <=
                1e-6 * (Math.abs(w[j]) + Math.abs(w[j + 1]) + 1e-30),
              `${what}: cutoff ${j}`,
            );
          const col = Float32Array.from({ length: n }, (_, i) => x[i * d + k]);
          // the encode's rule picks the nearest level (ties aside)
          for (let i = 0; i < Math.min(n, 200); i++) {
            const c = bucketOf(b, k, col[i]);
            const near = Math.abs(col[i] - w[c]);
            for (let j = 0; j < levels; j++)
              assert.ok(near <= Math.abs(col[i] - w[j]) + 1e-7 * Math.abs(step), `${what}: nearest`);
          }
          // no line nearby does much better (Lloyd's fixed point may sit on a saddle of the
          // piecewise error, so nudges can win a little: under 0.3% from 2,000 values, under 4% on a few hundred)
          const e = sqError(col, levels, w[0], step);
          let best = e;
          for (let i = -10; i <= 10; i++)
            for (let j = -10; j <= 10; j++)
              best = Math.min(best, sqError(col, levels, w[0] + 0.02 * i * step, step * (1 + 0.02 * j)));
          if (n >= 2000) worst = Math.max(worst, e / best);
          assert.ok(
            e <= best * (n >= 2000 ? 1.005 : 1.05) + 1e-12,
            `${what}: ${e} against a nudged line's ${best}`,
          );
          // the Gaussian's best uniform quantizer: 0.1188 (2-bit), 0.01154 (4-bit) of the variance
          if (kind === 'gauss' && n >= 4000) {
            let v = 0;
            for (const r of col) v += r * r;
            assert.ok(e / v <= (bits === 2 ? 0.13 : 0.014), `${what}: relative error ${e / v}`);
          }
        }
      }
    if (process.env.MAXSIM_TEST_VERBOSE) console.log(`worst fitted / nudged error ${worst}`);
  });

  test('degenerate columns: one row, a constant, two values', () => {
    for (const bits of [2, 4] as const) {
      const levels = 1 << bits;
      const one = fitBuckets(Float32Array.of(0.25, -3), 2, bits);
      assert.equal(one.weights[0], 0.25);
      assert.equal(one.weights[levels], -3);
      for (let j = 1; j < levels; j++) assert.equal(one.weights[j], 0.25);
      const constant = fitBuckets(new Float32Array(100).fill(0.5), 1, bits);
      assert.deepEqual(Array.from(constant.weights), new Array(levels).fill(0.5));
      assert.equal(bucketOf(constant, 0, 0.5), 0);
      // two values: the outer levels land on them, both decode exactly
      const two = fitBuckets(
        Float32Array.from({ length: 64 }, (_, i) => (i % 2 ? 0.75 : -0.5)),
        1,
        bits,
      );
      assert.equal(two.weights[bucketOf(two, 0, -0.5)], -0.5);
      assert.ok(Math.abs(two.weights[bucketOf(two, 0, 0.75)] - 0.75) <= 1e-7);
    }
  });
});
