// Centered 8-bit corpora on the GPU (src/backends/cuda-center.ts): DeviceCorpus.quantize(mode,
// { center: true }) quantizes the documents less their token mean, keeps it as `mean`, and score /
// topK add each query's shift back. int8: the bytes of the host quantize(..., { center: true }), the
// scores within the fp32 bound of the residual scores plus the shift; fp8: closer to the fp32 scores
// than plain fp8 on an anisotropic corpus; the two-stage rescore unchanged. Skips without a GPU.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { referenceMaxsim } from '../../src/backends/reference.js';
import { anisotropicCorpus, pseudoQueries } from '../../src/bench/corpora.js';
import { encodeFloats } from '../../src/floats.js';
import { queryShifts } from '../../src/ops/center.js';
import { quantize } from '../../src/ops/quantize.js';
import { raggedBatch, type TokenBatch } from '../../src/tensor.js';
import { assertScoresClose, rng, runSeed, scoreErrorBounds } from '../helpers.js';
import { gpu, skip } from './helpers.js';

/** A ragged float batch with a strong common vector and empty documents. */
function shifted(lengths: number[], d: number, rand: () => number, dtype: 'float32' | 'float16' = 'float32') {
  const offsets = [0];
  for (const l of lengths) offsets.push(offsets[offsets.length - 1] + l);
  const total = offsets[offsets.length - 1];
  const u = Float32Array.from({ length: d }, () => 2 * (rand() * 2 - 1));
  const x = Float32Array.from({ length: total * d }, (_, i) => rand() * 2 - 1 + u[i % d]);
  return raggedBatch(encodeFloats(x, dtype), offsets, { dim: d, dtype });
}

const residuals = (x: TokenBatch): TokenBatch => ({ ...x, mean: undefined });

describe(`CUDA centered 8-bit corpora (seed ${runSeed})`, { skip }, () => {
  test('int8: the host bytes and mean; score and topK within the bound, the shift added; select keeps it', async () => {
    const dev = await gpu();
    const rand = rng(runSeed + 1);
    for (const dtype of ['float32', 'float16'] as const)
      for (const d of [8, 48, 128]) {
        const floats = shifted([20, 0, 1, 64, 7, 0, 33], d, rand, dtype);
        const host = quantize(floats, 'int8', { center: true });
        const f = await dev.upload(floats);
        const c = await f.quantize('int8', { center: true });
        try {
          assert.deepEqual(Array.from(c.mean ?? []), Array.from(host.mean ?? []), `${dtype} d=${d} mean`);
          const back = (await c.download()) as TokenBatch;
          assert.deepEqual(Array.from(back.data), Array.from(host.data), `${dtype} d=${d} bytes`);
          assert.deepEqual(Array.from(back.scales ?? []), Array.from(host.scales ?? []));
          const queries = shifted([5, 32, 0], d, rand);
          const q8 = quantize(queries, 'int8');
          // the job quantizes the float queries per token (the bytes of q8); the shift uses the float values
          const shift = queryShifts(queries, host.mean as Float32Array);
          const resid = referenceMaxsim(q8, residuals(host));
          const ref = Float64Array.from(resid, (v, i) => v + shift[Math.floor(i / host.count)]);
          const got = await c.score(queries);
          assertScoresClose(got.data, ref, scoreErrorBounds(q8, residuals(host)), `${dtype} d=${d} score`);
          const hits = await c.topK(queries, 4);
          hits.forEach((row, qi) => {
            for (const h of row) assert.equal(h.score, got.data[qi * host.count + h.index], `topK ${qi}`);
          });
          const view = await c.select([3, 0, 1]);
          assert.equal(view.mean, c.mean);
          const vs = await view.score(queries);
          // another launch shape may take another kernel: the same value up to fp32 summation order
          const close = (a: number, b: number) => Math.abs(a - b) <= 2 ** -18 * (1 + Math.abs(b));
          for (let qi = 0; qi < 3; qi++)
            assert.ok(close(vs.data[qi * 3], got.data[qi * host.count + 3]), `view ${qi}`);
          view.dispose();
          // the two-stage rescore: exact float scores, the float corpus's own top-k
          const two = await c.topK(queries, 3, { rescore: { docs: f, candidates: 7 } });
          const exact = await f.topK(queries, 3);
          assert.deepEqual(
            two.map((r) => r.map((h) => h.index)),
            exact.map((r) => r.map((h) => h.index)),
            `${dtype} d=${d} two-stage`,
          );
          two.forEach((r, qi) => {
            r.forEach((h, j) => {
              assert.ok(close(h.score, exact[qi][j].score), `two-stage score ${qi} ${j}`);
            });
          });
        } finally {
          c.dispose();
          f.dispose();
        }
      }
  });

  test('an uploaded centered int8 batch keeps its mean; appends must match it; centered queries refused', async () => {
    const dev = await gpu();
    const rand = rng(runSeed + 2);
    const floats = shifted([9, 3, 0, 12], 16, rand);
    const host = quantize(floats, 'int8', { center: true });
    const up = await dev.upload(host);
    const queries = shifted([4, 6], 16, rand);
    try {
      assert.deepEqual(Array.from(up.mean ?? []), Array.from(host.mean ?? []));
      const shift = queryShifts(quantize(queries, 'int8'), host.mean as Float32Array);
      const ref = Float64Array.from(referenceMaxsim(quantize(queries, 'int8'), residuals(host)), (v, i) => {
        return v + shift[Math.floor(i / host.count)];
      });
      // int8 queries: the shift from their int8 values
      assertScoresClose(
        (await up.score(quantize(queries, 'int8'))).data,
        ref,
        scoreErrorBounds(quantize(queries, 'int8'), residuals(host)),
        'uploaded',
      );
      await assert.rejects(up.score(host), /queries\.mean/);
    } finally {
      up.dispose();
    }
    const room = await dev.alloc({ dtype: 'int8', dim: 16, tokens: 100, items: 10 });
    try {
      await assert.rejects(room.append(host), /batch\.mean/);
      await room.append(quantize(floats, 'int8'));
    } finally {
      room.dispose();
    }
    await assert.rejects(dev.upload({ ...floats, mean: host.mean }), /batch\.mean/);
  });

  test('fp8 (and int8, document scales): centered scores closer to fp32 than plain on an anisotropic corpus', async () => {
    const dev = await gpu();
    if (dev.info.computeCapability[0] < 9) return; // fp8 e4m3 needs sm_90
    const docs = anisotropicCorpus({ docs: 200, seed: runSeed % 10_000 });
    const { queries } = pseudoQueries(docs, { queries: 8, length: 32, noise: 0.1, seed: 1 });
    const exact = referenceMaxsim(queries, docs);
    const f = await dev.upload(docs);
    try {
      for (const [mode, scales] of [
        ['fp8', 'token'],
        ['fp8', 'document'],
        ['int8', 'document'],
      ] as const) {
        const worst: number[] = [];
        for (const center of [false, true]) {
          const c = await f.quantize(mode, { scales, center });
          assert.equal(c.mean === undefined, !center);
          const got = (await c.score(queries)).data;
          worst.push(got.reduce((m, g, i) => Math.max(m, Math.abs(g - exact[i])), 0));
          c.dispose();
        }
        assert.ok(worst[1] < worst[0], `${mode} ${scales}: centered error ${worst[1]} vs plain ${worst[0]}`);
      }
    } finally {
      f.dispose();
    }
  });
});
