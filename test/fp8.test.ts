// The host side of the GPU-only fp8 e4m3 element type: decoding the codes and the float64 reference
// the GPU tests compare with. Pure TypeScript: runs without a GPU.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { referenceMaxsim } from '../src/backends/reference.js';
import { e4m3ToFloat, type Fp8Tokens, referenceMaxsimFp8 } from '../src/backends/reference-fp8.js';
import { raggedBatch } from '../src/tensor.js';
import { rng, runSeed } from './helpers.js';

describe(`fp8 e4m3 helpers (seed ${runSeed})`, () => {
  test('e4m3ToFloat: zero, subnormals, normals, the largest finite value, NaN', () => {
    assert.equal(e4m3ToFloat(0x00), 0);
    assert.ok(Object.is(e4m3ToFloat(0x80), -0));
    assert.equal(e4m3ToFloat(0x01), 2 ** -9); // smallest subnormal
    assert.equal(e4m3ToFloat(0x07), 7 * 2 ** -9); // largest subnormal
    assert.equal(e4m3ToFloat(0x08), 2 ** -6); // smallest normal
    assert.equal(e4m3ToFloat(0x38), 1);
    assert.equal(e4m3ToFloat(0x3c), 1.5);
    assert.equal(e4m3ToFloat(0xc0), -2);
    assert.equal(e4m3ToFloat(0x7e), 448);
    assert.equal(e4m3ToFloat(0xfe), -448);
    assert.ok(Number.isNaN(e4m3ToFloat(0x7f)));
    assert.ok(Number.isNaN(e4m3ToFloat(0xff)));
    // monotone over the positive finite codes
    for (let c = 1; c < 0x7f; c++) assert.ok(e4m3ToFloat(c) > e4m3ToFloat(c - 1), `code ${c}`);
  });

  test('referenceMaxsimFp8 equals the float64 reference on the decoded values', () => {
    const rand = rng(runSeed + 7);
    const dim = 24;
    const make = (lengths: number[]): Fp8Tokens => {
      const total = lengths.reduce((a, b) => a + b, 0);
      const data = new Uint8Array(total * dim);
      for (let i = 0; i < data.length; i++) {
        let c = Math.floor(rand() * 256);
        if ((c & 0x7f) === 0x7f) c = 0x7e; // no NaN codes
        data[i] = c;
      }
      // powers of two, so that code x scale is exact in float32 as well
      const scales = Float32Array.from({ length: total }, () => 2 ** Math.floor(rand() * 8 - 4));
      const starts = new Float64Array(lengths.length);
      for (let i = 1; i < lengths.length; i++) starts[i] = starts[i - 1] + lengths[i - 1];
      return {
        kind: 'fp8',
        dim,
        count: lengths.length,
        data,
        scales,
        starts,
        lengths: Int32Array.from(lengths),
      };
    };
    const asFloat = (t: Fp8Tokens) => {
      const values = Float32Array.from(t.data, (c, i) => e4m3ToFloat(c) * t.scales[Math.floor(i / dim)]);
      const offsets = [0, ...Array.from(t.lengths).map((_, i) => t.starts[i] + t.lengths[i])];
      return raggedBatch(values, offsets, { dim });
    };
    const q = make([3, 0, 5]);
    const d = make([4, 0, 7, 1]);
    const got = referenceMaxsimFp8(q, d);
    const want = referenceMaxsim(asFloat(q), asFloat(d));
    assert.deepEqual(Array.from(got), Array.from(want));
    assert.equal(got[1], Number.NEGATIVE_INFINITY, 'empty document');
    assert.equal(got[4], 0, 'empty query');
    assert.throws(() => referenceMaxsimFp8(q, { ...d, dim: 8 }), /queries\.dim/);
  });
});
