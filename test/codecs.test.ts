// The service's request codecs: the addon's finiteness scans and float16 / bfloat16 decode against
// plain JS references (every float16 pattern; random bits with NaN / infinity planted at random
// places, lengths around the SIMD widths), and the server codecs built on them (base64 bodies with a
// bad value, a pass gathered from ragged parts of every dtype).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { nativeCodec } from '../src/codec-native.js';
import { bf16BitsToFloat, encodeFloats, f16BitsToFloat } from '../src/floats.js';
import { concatBits, concatEncoded, type EncodedTokens, readEmbeddings } from '../src/server/codecs.js';
import { rng, runSeed } from './helpers.js';

const rand = rng(runSeed ^ 0xc0dec);
const codec = nativeCodec();
const LENGTHS = [0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 127, 4096, 4099];

function firstBad16(bits: Uint16Array, mask: number): number {
  return bits.findIndex((b) => (b & mask) === mask);
}

function randomBits(n: number, mask: number): Uint16Array {
  // finite patterns: the exponent never all ones
  return Uint16Array.from({ length: n }, () => {
    const b = Math.floor(rand() * 65536);
    return (b & mask) === mask ? b & ~0x4000 : b;
  });
}

describe('native codec', { skip: codec === undefined ? 'no addon' : false }, () => {
  test('firstNonFinite: float16 / bfloat16 bits and float32, the first bad index or -1', () => {
    for (const [bf16, mask] of [
      [false, 0x7c00],
      [true, 0x7f80],
    ] as const)
      for (const n of LENGTHS) {
        const bits = randomBits(n, mask);
        assert.equal(codec!.firstNonFinite(bits, bf16), -1);
        if (n === 0) continue;
        // one or two bad values, anywhere (the first is reported)
        const at = Math.floor(rand() * n);
        const other = Math.floor(rand() * n);
        bits[at] = mask | Math.floor(rand() * 0x8000) | (rand() < 0.5 ? 0x8000 : 0);
        bits[other] = mask | (bits[other] & 0x8000);
        assert.equal(codec!.firstNonFinite(bits, bf16), firstBad16(bits, mask), `n ${n} bf16 ${bf16}`);
        // a view at an odd offset
        const view = bits.subarray(1);
        assert.equal(codec!.firstNonFinite(view, bf16), firstBad16(view, mask));
      }
    for (const n of LENGTHS) {
      const x = Float32Array.from({ length: n }, () => (rand() - 0.5) * 1e38);
      assert.equal(codec!.firstNonFinite(x, false), -1);
      if (n === 0) continue;
      const at = Math.floor(rand() * n);
      x[at] = [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY][Math.floor(rand() * 3)];
      assert.equal(codec!.firstNonFinite(x, false), at);
    }
  });

  test('maxAbs: the largest magnitude, NaNs ignored, infinity counted, any length and offset', () => {
    const jsMax = (x: Float32Array) =>
      x.reduce((m, v) => (Number.isNaN(v) ? m : Math.max(m, Math.abs(v))), 0);
    for (const n of LENGTHS) {
      const x = Float32Array.from({ length: n }, () => (rand() - 0.5) * 10 ** Math.floor(rand() * 12 - 6));
      assert.equal(codec!.maxAbs(x), jsMax(x), `n ${n}`);
      if (n === 0) continue;
      const view = x.subarray(1);
      assert.equal(codec!.maxAbs(view), jsMax(view));
      x[Math.floor(rand() * n)] = Number.NaN;
      assert.equal(codec!.maxAbs(x), jsMax(x), `n ${n} with a NaN`);
      x[Math.floor(rand() * n)] = -3e38;
      assert.equal(codec!.maxAbs(x), jsMax(x));
      x[Math.floor(rand() * n)] = Number.NEGATIVE_INFINITY;
      assert.equal(codec!.maxAbs(x), Number.POSITIVE_INFINITY);
    }
    assert.equal(codec!.maxAbs(new Float32Array(9).fill(Number.NaN)), 0);
    assert.equal(codec!.maxAbs(Float32Array.of(-0)), 0);
    assert.throws(() => codec!.maxAbs(new Uint16Array(4) as never), /Float32Array for values/);
  });

  test('decode16: every finite float16 pattern, random bfloat16, into any offset', () => {
    const all = Uint16Array.from({ length: 65536 }, (_, h) => h).filter((h) => (h & 0x7c00) !== 0x7c00);
    const out = new Float32Array(all.length + 5).fill(Number.NaN);
    codec!.decode16(all, false, out, 3);
    for (let i = 0; i < all.length; i++)
      if (!Object.is(out[3 + i], Math.fround(f16BitsToFloat(all[i]))))
        assert.fail(`float16 0x${all[i].toString(16)}: ${out[3 + i]}`);
    assert.ok(Number.isNaN(out[2]) && Number.isNaN(out[all.length + 3]), 'nothing written outside');
    for (const n of LENGTHS) {
      const bits = randomBits(n, 0x7f80);
      const o = new Float32Array(n + 1).fill(7);
      codec!.decode16(bits, true, o, 1);
      for (let i = 0; i < n; i++) assert.ok(Object.is(o[1 + i], bf16BitsToFloat(bits[i])));
      assert.equal(o[0], 7);
    }
  });

  test('decode16 refuses wrong arguments and an out-of-range offset', () => {
    const bits = new Uint16Array(8);
    assert.throws(() => codec!.decode16(bits, false, new Float32Array(8), 1), /Expected an integer at in/);
    assert.throws(() => codec!.decode16(bits, false, new Float32Array(8), -1), /Expected an integer at in/);
    assert.throws(() => codec!.decode16(bits, false, new Float32Array(9), 0.5), /Expected an integer at in/);
    for (const at of [1e300, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 64])
      assert.throws(() => codec!.decode16(bits, false, new Float32Array(9), at), /Expected an integer at in/);
    assert.throws(
      () => codec!.decode16(new Float32Array(8) as unknown as Uint16Array, false, new Float32Array(8), 0),
      /Expected a Uint16Array for bits/,
    );
    assert.throws(
      () => codec!.firstNonFinite(new Int32Array(4) as unknown as Float32Array, false),
      /Expected a Float32Array or Uint16Array for values/,
    );
  });
});

describe('server codecs', () => {
  function b64Query(bits: Uint16Array | Float32Array, dtype: string, shape: number[]) {
    return {
      b64: Buffer.from(bits.buffer, bits.byteOffset, bits.byteLength).toString('base64'),
      dtype,
      shape,
    };
  }

  test('a base64 float16 / bfloat16 body with a NaN or infinity names its element', () => {
    for (const [dtype, mask] of [
      ['float16', 0x7c00],
      ['bfloat16', 0x7f80],
    ] as const) {
      const n = 3 * 5 * 8;
      const bits = randomBits(n, mask);
      const at = Math.floor(rand() * n);
      bits[at] = mask | (rand() < 0.5 ? 1 : 0);
      assert.throws(
        () => readEmbeddings(b64Query(bits, dtype, [3, 5, 8]), 'queries', 'many', 8),
        new RegExp(`a non-finite value \\((NaN|-?Infinity)\\) at element ${at}`),
      );
    }
  });

  test('nested JSON numbers: ragged items decoded to float32 in place, a bad value named by position', () => {
    const dim = 1 + Math.floor(rand() * 9);
    const items = Array.from({ length: 1 + Math.floor(rand() * 5) }, () =>
      Array.from({ length: Math.floor(rand() * 4) }, () =>
        Array.from({ length: dim }, () => (rand() - 0.5) * 10 ** Math.floor(rand() * 60 - 30)),
      ),
    );
    if (items.every((it) => it.length === 0)) items[0].push(new Array(dim).fill(0.5));
    const got = readEmbeddings(items, 'queries', 'many', undefined);
    assert.equal(got.dim, dim);
    assert.deepEqual(
      Array.from(got.values),
      items.flat(2).map((x) => Math.fround(x)),
    );
    let at = 0;
    assert.deepEqual(got.offsets, [0, ...items.map((it) => (at += it.length))]);
    // a value that is finite in float64 but not in float32, or not a number, at a random place
    const i = items.findIndex((it) => it.length > 0);
    const t = Math.floor(rand() * items[i].length);
    const j = Math.floor(rand() * dim);
    for (const bad of [1e39, '1', null]) {
      const copy = structuredClone(items) as unknown[][][];
      copy[i][t][j] = bad;
      assert.throws(
        () => readEmbeddings(copy, 'queries', 'many', dim),
        (e: Error) => e.message.includes(`queries[${i}][${t}][${j}]`),
      );
    }
    // a row of the wrong dimension
    const short = structuredClone(items);
    short[i][t] = short[i][t].slice(1);
    assert.throws(() => readEmbeddings(short, 'queries', 'many', dim), /the embedding dimension/);
  });

  test('a pass gathered from ragged parts of every dtype equals each part decoded alone', () => {
    const dim = 1 + Math.floor(rand() * 20);
    const parts: EncodedTokens[] = [];
    const want: number[] = [];
    for (let p = 0; p < 12; p++) {
      const dtype = (['float32', 'float16', 'bfloat16'] as const)[p % 3];
      const items = Math.floor(rand() * 3) + 1;
      const lengths = Array.from({ length: items }, () => Math.floor(rand() * 5));
      const L = Math.max(...lengths);
      const values = Float32Array.from({ length: items * L * dim }, () => (rand() - 0.5) * 8);
      const data = dtype === 'float32' ? values : encodeFloats(values, dtype);
      const part = readEmbeddings(
        { ...b64Query(data as Uint16Array, dtype, [items, L, dim]), lengths },
        'queries',
        'many',
        dim,
      );
      parts.push(part);
      for (const v of part.values)
        want.push(dtype === 'float32' ? v : dtype === 'float16' ? f16BitsToFloat(v) : bf16BitsToFloat(v));
    }
    const got = concatEncoded(parts, dim);
    assert.equal(got.data.length, want.length);
    for (let i = 0; i < want.length; i++)
      assert.ok(Object.is(got.data[i], Math.fround(want[i])), `element ${i}`);
    const offsets = [0];
    for (const p of parts)
      for (let i = 1; i < p.offsets.length; i++)
        offsets.push(offsets.at(-1)! + p.offsets[i] - p.offsets[i - 1]);
    assert.deepEqual(got.offsets, offsets);
    // float16 parts alone keep their bits
    const halves = parts.filter((p) => p.dtype === 'float16');
    const bits = concatBits(halves, dim);
    assert.deepEqual(
      Array.from(bits.values),
      halves.flatMap((p) => Array.from(p.values)),
    );
  });
});
