// The data model: constructors, validation messages, dtype conversions.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { InvalidArgumentError } from '../src/errors.js';
import {
  bf16BitsToFloat,
  decodeToFloat32,
  f16BitsToFloat,
  floatToBf16Bits,
  floatToF16Bits,
} from '../src/floats.js';
import { batchItem, denseBatch, raggedBatch, tokenMatrix, totalTokens } from '../src/tensor.js';
import { rng, runSeed } from './helpers.js';

function throwsArg(fn: () => unknown, argument: RegExp, message: RegExp) {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof InvalidArgumentError, `expected InvalidArgumentError, got ${String(e)}`);
    assert.match(e.argument, argument);
    assert.match(e.message, message);
    assert.match(e.message, /^Expected .+ for .+ but received .+/);
    return true;
  });
}

describe('token batches', () => {
  test('dense batches normalize to spans; lengths default to the capacity', () => {
    const b = denseBatch(new Float32Array(2 * 3 * 4), { count: 2, length: 3, dim: 4 });
    assert.deepEqual(Array.from(b.starts), [0, 3]);
    assert.deepEqual(Array.from(b.lengths), [3, 3]);
    const p = denseBatch(new Float32Array(2 * 3 * 4), { count: 2, length: 3, dim: 4, lengths: [1, 0] });
    assert.equal(totalTokens(p), 1);
    assert.equal(batchItem(p, 0).length, 1);
  });

  test('ragged batches accept number[], Int32Array, Float64Array and BigInt64Array offsets', () => {
    const data = new Float32Array(5 * 2);
    for (const offsets of [
      [0, 2, 2, 5],
      new Int32Array([0, 2, 2, 5]),
      new Float64Array([0, 2, 2, 5]),
      new BigInt64Array([0n, 2n, 2n, 5n]),
    ]) {
      const b = raggedBatch(data, offsets, { dim: 2 });
      assert.deepEqual(Array.from(b.lengths), [2, 0, 3]);
      assert.equal(b.maxLength, 3);
    }
  });

  test('validation names the argument, the expected and the received value', () => {
    const data = new Float32Array(12);
    throwsArg(() => raggedBatch(data, [0, 3, 2], { dim: 2 }), /offsets\[2\]/, /non-decreasing.*received 2/);
    throwsArg(() => raggedBatch(data, [0, 7], { dim: 2 }), /offsets\[1\]/, /<= 6/);
    throwsArg(() => raggedBatch(data, [0, 1.5], { dim: 2 }), /offsets\[1\]/, /integer/);
    throwsArg(() => raggedBatch(new Float32Array(5), [0, 1], { dim: 2 }), /data/, /divisible by dim 2/);
    throwsArg(
      () => denseBatch(new Float32Array(24), { count: 2, length: 3, dim: 4, lengths: [1, 4] }),
      /lengths\[1\]/,
      /\[0, 3\].*capacity/,
    );
    throwsArg(
      () => denseBatch(new Float32Array(24), { count: 2, length: 3, dim: 4, lengths: [1] }),
      /lengths/,
      /2 entries/,
    );
    throwsArg(() => denseBatch(data, { count: 4, length: 3, dim: 4 }), /data/, /exactly 48 elements/);
    throwsArg(() => tokenMatrix(data, 3, 0), /dim/, /integer in \[1, 2\^20\]/);
    throwsArg(() => tokenMatrix(new Uint16Array(4), 1, 4), /data\.dtype/, /float16' or 'bfloat16/);
    throwsArg(() => tokenMatrix(new Int32Array(2), 1, 2), /data/, /Float32Array/);
    throwsArg(() => tokenMatrix(new Int8Array(4), 1, 4), /matrix\.scales/, /Float32Array/);
  });

  test('the offsets contract: B+1 values from 0 to the token count, non-decreasing', () => {
    const data = new Float32Array(10 * 4); // T = 10 tokens of d = 4
    // the loose offsets of issue 20: no leading 0
    throwsArg(() => raggedBatch(data, [2, 5, 10], { dim: 4 }), /^offsets\[0\]$/, /Expected 0 .*received 2$/);
    // ending short of the data
    throwsArg(
      () => raggedBatch(data, [0, 3, 7], { dim: 4 }),
      /^offsets\[2\]$/,
      /the token count 10 of data.*received 7$/,
    );
    throwsArg(() => raggedBatch(data, [0, 3, 11], { dim: 4 }), /^offsets\[2\]$/, /<= 10.*received 11$/);
    throwsArg(() => raggedBatch(data, [0, 6, 5, 10], { dim: 4 }), /^offsets\[2\]$/, /non-decreasing/);
    throwsArg(() => raggedBatch(data, [], { dim: 4 }), /^offsets$/, /at least 1 entry/);
    throwsArg(() => raggedBatch(data, [0], { dim: 4 }), /^offsets\[0\]$/, /token count 10/);
    throwsArg(() => raggedBatch(data, [-1, 10], { dim: 4 }), /^offsets\[0\]$/, /non-negative/);
    throwsArg(
      () => raggedBatch(data, new BigInt64Array([0n, 2n ** 62n]), { dim: 4 }),
      /^offsets\[1\]$/,
      /received 4611686018427387904 \(2\^62\)$/,
    );
    // int8: exactly T scales
    throwsArg(
      () => raggedBatch(new Int8Array(40), [0, 10], { dim: 4, scales: new Float32Array(11) }),
      /scales/,
      /exactly 10 scales/,
    );
    assert.equal(raggedBatch(new Int8Array(40), [0, 10], { dim: 4, scales: new Float32Array(10) }).count, 1);
    // the empty batch over empty data, and covering offsets of every kind
    assert.equal(raggedBatch(new Float32Array(0), [0], { dim: 4 }).count, 0);
    assert.deepEqual([...raggedBatch(data, [0, 0, 10, 10], { dim: 4 }).lengths], [0, 10, 0]);
  });

  test('raggedBatch with view: true: explicit views over a larger buffer', () => {
    const data = new Float32Array(10 * 4);
    data[0] = Number.NaN; // outside the view: never read, never scanned
    data[39] = Number.NaN;
    const v = raggedBatch(data, [2, 5, 8], { dim: 4, view: true });
    assert.equal(v.layout, 'ragged');
    assert.deepEqual([...v.starts], [2, 5]);
    assert.deepEqual([...v.lengths], [3, 3]);
    assert.equal(raggedBatch(data, [3], { dim: 4, view: true }).count, 0);
    throwsArg(() => raggedBatch(data, [2, 11], { dim: 4, view: true }), /^offsets\[1\]$/, /<= 10/);
    throwsArg(() => raggedBatch(data, [5, 2], { dim: 4, view: true }), /^offsets\[1\]$/, /non-decreasing/);
    throwsArg(
      () => raggedBatch(data, [5, 10], { dim: 4, view: true }),
      /^data$/,
      /non-finite value at token 9, component 3/,
    );
    // int8 views need a scale for every token of the buffer
    throwsArg(
      () => raggedBatch(new Int8Array(40), [2, 4], { dim: 4, scales: new Float32Array(4), view: true }),
      /scales/,
      /at least 10/,
    );
    assert.equal(
      raggedBatch(new Int8Array(40), [2, 4], { dim: 4, scales: new Float32Array(12), view: true }).count,
      1,
    );
  });

  test('dim above 2^20 is refused by name in TypeScript, with the limit', () => {
    throwsArg(
      () => tokenMatrix(new Float32Array(2 ** 21), 1, 2 ** 21),
      /^dim$/,
      /\[1, 2\^20\].*received 2097152$/,
    );
    throwsArg(() => raggedBatch(new Float32Array(0), [0], { dim: 2 ** 20 + 1 }), /^dim$/, /2\^20/);
    assert.equal(tokenMatrix(new Float32Array(2 ** 20), 1, 2 ** 20).dim, 2 ** 20);
  });

  test('a missing or null options argument is named, not a TypeError', () => {
    const data = new Float32Array(8);
    throwsArg(() => raggedBatch(data, [0, 2], undefined as never), /^options$/, /dim.*received undefined/);
    throwsArg(() => raggedBatch(data, [0, 2], null as never), /^options$/, /received null/);
    throwsArg(() => denseBatch(data, undefined as never), /^options$/, /count, length and dim/);
    throwsArg(() => tokenMatrix(data, 2, 4, null as never), /^options$/, /received null/);
  });

  test('non-finite values are rejected by default and accepted when the check is off', () => {
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
      const data = new Float32Array(8);
      data[5] = bad;
      throwsArg(() => tokenMatrix(data, 2, 4), /data/, /token 1, component 1/);
      assert.equal(tokenMatrix(data, 2, 4, { checkFinite: false }).length, 2);
      throwsArg(() => raggedBatch(data, [0, 2], { dim: 4 }), /data/, /non-finite/);
    }
    const bits = new Uint16Array([floatToF16Bits(1), 0x7c00]);
    throwsArg(() => tokenMatrix(bits, 1, 2, { dtype: 'float16' }), /data/, /non-finite/);
    const bfBits = new Uint16Array([0x7fc0, 0]);
    throwsArg(() => tokenMatrix(bfBits, 1, 2, { dtype: 'bfloat16' }), /data/, /non-finite/);
    // Padding of a dense batch is not scanned: it is never scored.
    const padded = new Float32Array(8);
    padded[7] = Number.NaN;
    assert.equal(denseBatch(padded, { count: 1, length: 2, dim: 4, lengths: [1] }).count, 1);
  });
});

describe('float16 and bfloat16 conversion', () => {
  test('bulk decoding (a table for float16, bit placement for bfloat16) equals the scalar decoders on every pattern', () => {
    const all = Uint16Array.from({ length: 65536 }, (_, i) => i);
    const f16 = decodeToFloat32(all, 'float16', 1);
    const bf16 = decodeToFloat32(all, 'bfloat16', 1);
    for (let h = 0; h < 65536; h++) {
      assert.ok(Object.is(f16[h], Math.fround(f16BitsToFloat(h))), `float16 0x${h.toString(16)}`);
      const b = bf16BitsToFloat(h);
      assert.ok(
        Number.isNaN(b) ? Number.isNaN(bf16[h]) : Object.is(bf16[h], b),
        `bfloat16 0x${h.toString(16)}`,
      );
    }
  });

  test('round-trips representable values and rounds to nearest even', () => {
    const rand = rng(runSeed);
    for (let i = 0; i < 2000; i++) {
      const x = (rand() * 2 - 1) * 2 ** Math.floor(rand() * 30 - 20);
      const h = f16BitsToFloat(floatToF16Bits(x));
      if (Math.abs(x) < 65504 && Math.abs(x) > 6.2e-5)
        assert.ok(Math.abs(h - x) <= Math.abs(x) * 2 ** -11, `f16 ${x} -> ${h}`);
      const b = bf16BitsToFloat(floatToBf16Bits(x));
      assert.ok(Math.abs(b - x) <= Math.abs(x) * 2 ** -8, `bf16 ${x} -> ${b}`);
    }
    assert.equal(floatToF16Bits(1 + 2 ** -11), floatToF16Bits(1)); // tie to even
    assert.equal(f16BitsToFloat(floatToF16Bits(2 ** -24)), 2 ** -24); // smallest subnormal
    assert.equal(f16BitsToFloat(floatToF16Bits(70000)), Number.POSITIVE_INFINITY);
    assert.equal(bf16BitsToFloat(floatToBf16Bits(1 + 2 ** -8)), 1); // tie to even
  });
});

describe('exact lengths and views (issue 32 item 7)', () => {
  test('tokenMatrix / denseBatch refuse a longer buffer (it silently scored query 0 only); `view: true` takes it', () => {
    const data = new Float32Array(8 * 32 * 4).map((_, i) => (i % 7) - 3);
    throwsArg(() => tokenMatrix(data, 32, 4), /data/, /exactly 128 elements.*view: true/);
    throwsArg(() => tokenMatrix(data.subarray(0, 127), 32, 4), /data/, /exactly 128 elements/);
    throwsArg(() => denseBatch(data, { count: 2, length: 32, dim: 4 }), /data/, /exactly 256 elements/);
    const m = tokenMatrix(data, 32, 4, { view: true });
    assert.equal(m.length, 32);
    assert.deepEqual(Array.from(m.data.subarray(0, 128)), Array.from(data.subarray(0, 128)));
    throwsArg(() => tokenMatrix(data, 300, 4, { view: true }), /data/, /at least 1200 elements/);
    const b = denseBatch(data, { count: 2, length: 32, dim: 4, view: true });
    assert.equal(b.count, 2);
    assert.equal(tokenMatrix(data.subarray(0, 128), 32, 4).length, 32);
    // view: false is the default; anything but a boolean is refused, named
    throwsArg(() => tokenMatrix(data, 32, 4, { view: false }), /data/, /exactly 128 elements/);
    throwsArg(() => tokenMatrix(data, 32, 4, { view: 'yes' as never }), /^view$/, /true or false/);
    throwsArg(
      () => denseBatch(data, { count: 2, length: 32, dim: 4, view: 1 as never }),
      /^view$/,
      /received 1/,
    );
    throwsArg(() => raggedBatch(data, [0, 2], { dim: 4, view: null as never }), /^view$/, /true or false/);
  });

  test('a header-sized claim of empty items is refused before anything is allocated', () => {
    const t0 = performance.now();
    throwsArg(
      () => denseBatch(new Float32Array(0), { count: 100_000_000, length: 0, dim: 16 }),
      /count/,
      /at most 65536 items/,
    );
    assert.ok(performance.now() - t0 < 100, 'refused fast');
    assert.equal(denseBatch(new Float32Array(0), { count: 65_536, length: 0, dim: 16 }).count, 65_536);
  });
});
