import assert from 'node:assert/strict';
import { test } from 'node:test';
import { benchErrorBound, type CudaBenchRow, wrongRows } from '../src/bench/cuda.js';

function row(over: Partial<CudaBenchRow>): CudaBenchRow {
  return {
    shape: '1,32,128,128,100000',
    dtype: 'float16',
    backend: 'cuda',
    ragged: false,
    fillRatio: 1,
    variant: 'maxsim_mma_g1_f16',
    ms: 0.78,
    msMin: 0.77,
    msMax: 0.8,
    tflops: 130,
    gflops: 130000,
    gbps: 4200,
    peakExtraBytes: 0,
    maxRelErr: 2e-7,
    sampledDocs: 6,
    docTokens: 12800000,
    device: 'test',
    ...over,
  };
}

test('bench: rows whose sampled error says the kernel is wrong are reported, rounding is not', () => {
  assert.deepEqual(wrongRows([row({}), row({ dtype: 'fp8', variant: 'v8', maxRelErr: 8e-5 })]), []);
  const bad = wrongRows([row({ maxRelErr: 0.56 }), row({ maxRelErr: Number.POSITIVE_INFINITY })]);
  assert.equal(bad.length, 2);
  assert.match(
    bad[0],
    /1,32,128,128,100000 float16 \(maxsim_mma_g1_f16\): sampled relative error 5\.60e-1 exceeds 0\.001/,
  );
  // NaN (a kernel that wrote garbage) is wrong too
  assert.equal(wrongRows([row({ maxRelErr: Number.NaN })]).length, 1);
  // an 8-bit row is judged by its own bound, and its float16 baseline by the float one
  const eight = row({
    dtype: 'int8',
    variant: 'maxsim_int8_mma_g1',
    maxRelErr: 1e-7,
    baseline: { dtype: 'float16', variant: 'maxsim_mma_g1_f16', ms: 0.8, tflops: 1, gbps: 1, maxRelErr: 0.2 },
  });
  assert.deepEqual(
    wrongRows([eight]).map((m) => m.split(':')[0]),
    ['1,32,128,128,100000 float16 (maxsim_mma_g1_f16)'],
  );
  assert.ok(benchErrorBound('fp8') > benchErrorBound('int8'));
});
