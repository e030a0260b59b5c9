// Centered 8-bit documents (src/ops/center.ts): quantize(docs, 'int8', { center }) subtracts the
// token mean mu and keeps it; scores add each query's shift sum_i <q_i, mu> back. Checked against the
// float64 reference: the shift is exact there, the CPU engine's centered scores are within the fp32
// bound of the residual scores, and the scores of the original documents within the quantization
// bound that the residuals' (smaller) scales give. Empty documents, ragged and dense, d = 1,
// all-equal tokens, non-finite values and bad options.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { decodeBatch64, referenceMaxsim } from '../src/backends/reference.js';
import { anisotropicCorpus, anisotropy, pseudoQueries } from '../src/bench/corpora.js';
import { InvalidArgumentError } from '../src/errors.js';
import { decodeToFloat32 } from '../src/floats.js';
import { queryShifts, tokenMean } from '../src/ops/center.js';
import { maxsim, maxsimSync } from '../src/ops/maxsim.js';
import { cpuInt8Isas, dequantize, quantize, roundTripError } from '../src/ops/quantize.js';
import { twoStageTopK } from '../src/ops/two-stage.js';
import { batchItem, denseBatch, raggedBatch, type TokenBatch } from '../src/tensor.js';
import { assertScoresClose, randomDense, randomRagged, rng, runSeed, scoreErrorBounds } from './helpers.js';

/** Random tokens plus a strong common vector (what centering is for): ragged, with empty documents. */
function shifted(lengths: number[], d: number, rand: () => number, common = 3): TokenBatch {
  const x = randomRagged(lengths, d, 'float32', rand);
  const u = Float32Array.from({ length: d }, () => common * (rand() * 2 - 1));
  const data = x.data as Float32Array;
  for (let i = 0; i < data.length; i++) data[i] += u[i % d];
  return x;
}

/** The batch without its mean: the residuals the engine scores. */
const residuals = (x: TokenBatch): TokenBatch => ({ ...x, mean: undefined });

/** Per query: sum_i ||q_i||_1 (the query tokens' values as the engine sees them). */
function l1Norms(q: TokenBatch): Float64Array {
  const v = decodeBatch64(q);
  const d = q.dim;
  return Float64Array.from({ length: q.count }, (_, b) => {
    let s = 0;
    for (let t = q.starts[b]; t < q.starts[b] + q.lengths[b]; t++)
      for (let k = 0; k < d; k++) s += Math.abs(v[t * d + k]);
    return s;
  });
}

describe(`centered int8 documents (seed ${runSeed})`, () => {
  test('the mean is the float64 mean of the items rounded to float32; mu = 0 gives the plain bytes', () => {
    const rand = rng(runSeed + 1);
    const docs = shifted([5, 0, 17, 1], 9, rand);
    const q = quantize(docs, 'int8', { center: true });
    const x = docs.data as Float32Array;
    const want = new Float64Array(9);
    for (let t = 0; t < 23; t++) for (let k = 0; k < 9; k++) want[k] += x[t * 9 + k];
    assert.deepEqual(
      Array.from(q.mean ?? []),
      Array.from(want, (s) => Math.fround(s / 23)),
    );
    assert.deepEqual(Array.from(tokenMean(x, 9, docs.starts, docs.lengths)), Array.from(q.mean ?? []));
    const zero = quantize(docs, 'int8', { center: new Float32Array(9) });
    const plain = quantize(docs, 'int8');
    assert.deepEqual(Array.from(zero.data), Array.from(plain.data));
    assert.deepEqual(Array.from(zero.scales ?? []), Array.from(plain.scales ?? []));
    assert.equal(plain.mean, undefined);
    assert.equal(quantize(docs, 'int8', { center: false }).mean, undefined);
  });

  test('residuals within half a residual scale; dequantize adds the mean back; document scales', () => {
    const rand = rng(runSeed + 2);
    for (const scales of ['token', 'document'] as const) {
      const docs = shifted([7, 0, 30, 2], 24, rand);
      const q = quantize(docs, 'int8', { scales, center: true });
      const mu = q.mean as Float32Array;
      const x = docs.data as Float32Array;
      const dq = dequantize(q).data as Float32Array;
      const s = q.scales as Float32Array;
      for (let b = 0; b < docs.count; b++) {
        let sd = 0;
        for (let t = docs.starts[b]; t < docs.starts[b] + docs.lengths[b]; t++) {
          let m = 0;
          for (let k = 0; k < 24; k++) m = Math.max(m, Math.abs(x[t * 24 + k] - mu[k]));
          if (scales === 'token') assert.equal(s[t], Math.fround(m / 127), `token ${t} scale`);
          sd = Math.max(sd, Math.fround(m / 127));
          for (let k = 0; k < 24; k++) {
            const back = q.data[t * 24 + k] * s[t] + mu[k];
            assert.ok(
              Math.abs(x[t * 24 + k] - back) <= (s[t] / 2) * (1 + 2 ** -20) + 2 ** -22 * Math.abs(mu[k]),
            );
            assert.equal(dq[t * 24 + k], Math.fround(back));
          }
        }
        if (scales === 'document')
          for (let t = docs.starts[b]; t < docs.starts[b] + docs.lengths[b]; t++) assert.equal(s[t], sd);
      }
      const e = roundTripError(docs, q);
      const ePlain = roundTripError(docs, quantize(docs, 'int8', { scales }));
      assert.ok(e.maxAbs < ePlain.maxAbs, `${scales}: centered error ${e.maxAbs} < plain ${ePlain.maxAbs}`);
    }
  });

  test('the shift is exact in float64: MaxSim(q, D - mu) + sum_i <q_i, mu> = MaxSim(q, D)', () => {
    const rand = rng(runSeed + 3);
    for (const d of [1, 3, 17, 64]) {
      const docs = quantize(shifted([4, 0, 1, 33, 0, 12], d, rand), 'int8', { center: true });
      const queries = quantize(randomRagged([3, 0, 17], d, 'float32', rand), 'int8');
      const full = referenceMaxsim(queries, docs);
      const resid = referenceMaxsim(queries, residuals(docs));
      const c = queryShifts(queries, docs.mean as Float32Array);
      for (let qi = 0; qi < queries.count; qi++)
        for (let b = 0; b < docs.count; b++) {
          const i = qi * docs.count + b;
          if (docs.lengths[b] === 0) {
            assert.equal(full[i], Number.NEGATIVE_INFINITY);
            assert.equal(resid[i], Number.NEGATIVE_INFINITY);
            continue;
          }
          // float64 rounding of sums of Lq * d products only
          assert.ok(Math.abs(resid[i] + c[qi] - full[i]) <= 1e-12 * (1 + Math.abs(full[i])), `d=${d} ${i}`);
        }
    }
  });

  test('CPU engine, every int8 kernel set: centered scores within the fp32 bound of the reference', async () => {
    const rand = rng(runSeed + 4);
    for (const d of [1, 3, 17, 33, 64, 128]) {
      const ragged = quantize(shifted([40, 0, 1, 17, 0, 65], d, rand), 'int8', { center: true });
      const dense = quantize(
        denseBatch((shifted([8 * 12], d, rand).data as Float32Array).slice(), {
          count: 8,
          length: 12,
          dim: d,
          lengths: [12, 0, 1, 5, 12, 7, 0, 3],
        }),
        'int8',
        { center: true, scales: 'document' },
      );
      const queries = quantize(randomRagged([1, 17, 0, 33], d, 'float32', rand), 'int8');
      for (const docs of [ragged, dense]) {
        const ref = referenceMaxsim(queries, docs);
        // the engine's error is the fp32 error of the residual scores; the shift adds one rounding
        const bounds = scoreErrorBounds(queries, residuals(docs));
        for (const isa of cpuInt8Isas().filter((n) => n !== 'amx' || d % 64 === 0)) {
          const ctx = `${isa} d=${d} ${docs.layout}`;
          assertScoresClose(maxsimSync(queries, docs, { isa }).data, ref, bounds, ctx);
          assertScoresClose((await maxsim(queries, docs, { isa, backend: 'cpu' })).data, ref, bounds, ctx);
        }
        const one = batchItem(queries, 1);
        assertScoresClose(
          maxsimSync(one, docs),
          ref.subarray(docs.count, 2 * docs.count),
          bounds.subarray(docs.count, 2 * docs.count),
          `one query d=${d}`,
        );
        // an empty query scores 0 against every non-empty document, -Infinity against empty ones
        const got = maxsimSync(queries, docs).data.subarray(2 * docs.count, 3 * docs.count);
        for (let b = 0; b < docs.count; b++)
          assert.equal(got[b], docs.lengths[b] === 0 ? Number.NEGATIVE_INFINITY : 0);
      }
    }
  });

  test('scores of the original documents within the derived quantization bound, tighter than plain', async () => {
    // |max_j <q, d_j> - max_j <q, dq_j>| <= max_j |<q, d_j - dq_j>| <= ||q||_1 max_j scale_j / 2 (per
    // query token), plus the engine's fp32 error; centering shrinks the scales, so the bound and the error
    const rand = rng(runSeed + 5);
    const d = 48;
    const docs = shifted([30, 0, 64, 5, 128, 17], d, rand, 2);
    const queries = quantize(randomRagged([8, 32, 1, 20, 5, 32], d, 'float32', rand), 'int8');
    const exact = referenceMaxsim(queries, docs);
    const l1 = l1Norms(queries);
    // one pair's error is a draw (either may round luckier); over all pairs the centered error and
    // bound are smaller because the scales are
    const errors: number[] = [];
    const bounds: number[] = [];
    for (const center of [false, true]) {
      const q8 = quantize(docs, 'int8', { center });
      const got = (await maxsim(queries, q8, { backend: 'cpu' })).data;
      const fp32 = scoreErrorBounds(queries, center ? residuals(q8) : q8);
      let total = 0;
      let totalBound = 0;
      for (let qi = 0; qi < queries.count; qi++)
        for (let b = 0; b < docs.count; b++) {
          const i = qi * docs.count + b;
          if (docs.lengths[b] === 0) {
            assert.equal(got[i], Number.NEGATIVE_INFINITY);
            continue;
          }
          let smax = 0;
          for (let t = docs.starts[b]; t < docs.starts[b] + docs.lengths[b]; t++)
            smax = Math.max(smax, (q8.scales as Float32Array)[t]);
          const bound = l1[qi] * (smax / 2) * (1 + 2 ** -20) + fp32[i] + Math.abs(exact[i]) * 2 ** -23;
          const err = Math.abs(got[i] - exact[i]);
          assert.ok(err <= bound, `center ${center} ${i}: error ${err} > bound ${bound} (seed ${runSeed})`);
          total += err;
          totalBound += bound;
        }
      errors.push(total);
      bounds.push(totalBound);
    }
    assert.ok(
      bounds[1] < bounds[0],
      `centered summed bound ${bounds[1]} < plain ${bounds[0]} (seed ${runSeed})`,
    );
    assert.ok(
      errors[1] < errors[0],
      `centered summed error ${errors[1]} < plain ${errors[0]} (seed ${runSeed})`,
    );
  });

  test('all-equal tokens: zero residuals, scores are the shift alone', () => {
    const v = [0.5, -2, 3.25];
    const data = new Float32Array(Array.from({ length: 7 }, () => v).flat());
    const docs = quantize(raggedBatch(data, [0, 3, 3, 7], { dim: 3 }), 'int8', { center: true });
    assert.deepEqual(Array.from(docs.mean ?? []), v);
    assert.ok((docs.scales as Float32Array).every((s) => s === 0));
    const queries = quantize(randomRagged([2, 5], 3, 'float32', rng(runSeed + 6)), 'int8');
    const got = maxsimSync(queries, docs).data;
    const ref = referenceMaxsim(queries, docs);
    for (let i = 0; i < ref.length; i++) {
      if (ref[i] === Number.NEGATIVE_INFINITY) assert.equal(got[i], Number.NEGATIVE_INFINITY);
      else assert.equal(got[i], Math.fround(ref[i]));
    }
  });

  test('two-stage top-k over centered documents equals the exact top-k', async () => {
    const rand = rng(runSeed + 7);
    const docs = shifted(
      Array.from({ length: 60 }, (_, i) => (i % 9 === 4 ? 0 : 1 + Math.floor(rand() * 40))),
      32,
      rand,
    );
    const queries = randomDense(3, 8, 32, 'float32', rand);
    const exact = referenceMaxsim(queries, docs);
    const hits = await twoStageTopK(queries, docs, quantize(docs, 'int8', { center: true }), 5, {
      backend: 'cpu',
      prefilter: 'always',
      candidateFactor: 60,
    });
    for (let qi = 0; qi < 3; qi++) {
      const want = Array.from({ length: 60 }, (_, b) => b)
        .sort((a, b) => exact[qi * 60 + b] - exact[qi * 60 + a] || a - b)
        .slice(0, 5);
      assert.deepEqual(
        hits[qi].map((h) => h.index),
        want,
      );
    }
  });

  test('NaN and Infinity refused with the token named; bad center options and centered queries refused', () => {
    const d = 4;
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY])
      for (const center of [false, true, new Float32Array(d)]) {
        const data = new Float32Array(3 * d).fill(1);
        data[2 * d + 1] = bad;
        const x = raggedBatch(data, [0, 1, 3], { dim: d, checkFinite: false });
        assert.throws(
          () => quantize(x, 'int8', { center }),
          (e) => e instanceof InvalidArgumentError && /non-finite value at token 2/.test(e.message),
          `${bad} center ${center}`,
        );
      }
    const x = randomRagged([2, 3], d, 'float32', rng(runSeed + 8));
    for (const center of ['yes', 1, new Float32Array(d + 1), new Float64Array(d), null]) {
      assert.throws(
        () => quantize(x, 'int8', { center: center as unknown as boolean }),
        (e) => e instanceof InvalidArgumentError && /options\.center/.test(e.message),
      );
    }
    const nanMean = new Float32Array(d);
    nanMean[2] = Number.NaN;
    assert.throws(
      () => quantize(x, 'int8', { center: nanMean }),
      (e) => e instanceof InvalidArgumentError && /options\.center\[2\]/.test(e.message),
    );
    const docs = quantize(x, 'int8', { center: true });
    assert.throws(
      () => maxsimSync(docs, docs),
      (e) => e instanceof InvalidArgumentError && /queries\.mean/.test(e.message),
    );
    const wrong = { ...docs, mean: new Float32Array(d + 1) };
    assert.throws(
      () => maxsimSync(quantize(x, 'int8'), wrong),
      (e) => e instanceof InvalidArgumentError && /docs\.mean/.test(e.message),
    );
  });
});

describe(`the anisotropic corpus and pseudo-queries (seed ${runSeed})`, () => {
  test('deterministic, unit tokens, mean cosine ~0.9; isotropic with common = 0', () => {
    const a = anisotropicCorpus({ docs: 60, seed: 5 });
    const b = anisotropicCorpus({ docs: 60, seed: 5 });
    assert.deepEqual(Array.from(a.data), Array.from(b.data));
    assert.equal(a.count, 60);
    const x = a.data as Float32Array;
    for (let t = 0; t < x.length / a.dim; t++) {
      let ss = 0;
      for (let k = 0; k < a.dim; k++) ss += x[t * a.dim + k] ** 2;
      assert.ok(Math.abs(ss - 1) < 1e-5);
    }
    const s = anisotropy(a);
    assert.ok(s.meanCosine > 0.85 && s.meanCosine < 0.95, `mean cosine ${s.meanCosine}`);
    assert.ok(s.meanNorm > 0.9, `mean norm ${s.meanNorm}`);
    const iso = anisotropy(anisotropicCorpus({ docs: 60, common: 0, seed: 5 }));
    assert.ok(iso.meanCosine < 0.2, `isotropic mean cosine ${iso.meanCosine}`);
    assert.throws(() => anisotropicCorpus({ noise: -1 }), InvalidArgumentError);
  });

  test('pseudo-queries: tokens of their source document, the norms kept, centering ranks better', async () => {
    const docs = anisotropicCorpus({ docs: 120, seed: runSeed % 1000 });
    const { queries, sources } = pseudoQueries(docs, { queries: 12, length: 16, noise: 0, seed: 3 });
    assert.equal(queries.count, 12);
    const x = decodeToFloat32(docs.data, docs.dtype, docs.dim);
    const qv = queries.data as Float32Array;
    for (let i = 0; i < 16; i++) {
      const b = sources[0];
      const row = qv.subarray(i * docs.dim, (i + 1) * docs.dim);
      let found = false;
      for (let t = docs.starts[b]; t < docs.starts[b] + docs.lengths[b] && !found; t++)
        found = row.every((v, k) => Math.abs(v - x[t * docs.dim + k]) < 1e-6);
      assert.ok(found, `query 0 token ${i} comes from document ${b}`);
    }
    const exact = referenceMaxsim(queries, docs);
    const q8 = quantize(queries, 'int8');
    const err = async (center: boolean) => {
      const got = (await maxsim(q8, quantize(docs, 'int8', { center }), { backend: 'cpu' })).data;
      return got.reduce((m, g, i) => Math.max(m, Math.abs(g - exact[i])), 0);
    };
    assert.ok((await err(true)) < (await err(false)));
  });
});
