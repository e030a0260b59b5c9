import assert from 'node:assert/strict';
import { randomFillSync } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { FormatError, InvalidArgumentError } from '../src/errors.js';
import { encodeFloats } from '../src/floats.js';
import { ARRAY_DTYPES, type ArrayData, type ArrayDType, itemSize, type NpyArray } from '../src/io/array.js';
import { arrayToDocs, arrayToMatrix, arrayToQueries, batchToArrays, loadArray } from '../src/io/load.js';
import { encodeNpy, MAP_MIN_BYTES, npyHeader, parseNpy, readNpy, writeNpy } from '../src/io/npy.js';
import {
  encodeSafetensors,
  parseSafetensors,
  readSafetensors,
  writeSafetensors,
} from '../src/io/safetensors.js';
import { denseBatch, type TokenBatch } from '../src/tensor.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-io-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

// Seeded so that a failing fuzz case can be replayed; the seed is in every failure message.
const SEED = Number(process.env.MAXSIM_TEST_SEED ?? Date.now() % 2 ** 31);
function prng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

const CTOR: Record<ArrayDType, new (n: number) => ArrayData> = {
  float32: Float32Array,
  float16: Uint16Array,
  bfloat16: Uint16Array,
  int8: Int8Array,
  int32: Int32Array,
  int64: BigInt64Array,
  uint32: Uint32Array,
  uint64: BigUint64Array,
  float64: Float64Array,
};

function randomArray(dtype: ArrayDType, shape: number[]): NpyArray {
  const n = shape.reduce((a, b) => a * b, 1);
  const data = new CTOR[dtype](n);
  randomFillSync(data);
  return { dtype, shape, data };
}

function bytesOf(data: ArrayData): Buffer {
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}

/** Compares dtype, shape, storage type and bits (NaN-safe). */
function assertSameArray(actual: NpyArray, expected: NpyArray, label = '') {
  assert.equal(actual.dtype, expected.dtype, label);
  assert.deepEqual(actual.shape, expected.shape, label);
  assert.equal(actual.data.constructor, expected.data.constructor, label);
  assert.equal(actual.data.byteOffset % itemSize(actual.dtype), 0, `${label}: aligned`);
  assert.ok(bytesOf(actual.data).equals(bytesOf(expected.data)), `${label}: same bytes`);
}

function ascii(text: string): Uint8Array {
  return Uint8Array.from(text, (c) => c.charCodeAt(0));
}

function concat(...parts: (Uint8Array | number[])[]): Uint8Array {
  return Uint8Array.from(parts.flatMap((p) => [...p]));
}

/** A .npy file built byte by byte: magic, version, header length, header text, data. */
function npyFile(major: number, header: string, data: Uint8Array | number[] = []): Uint8Array {
  const h = major === 3 ? new TextEncoder().encode(header) : ascii(header);
  const len =
    major === 1 ? [h.length & 0xff, h.length >> 8] : [...new Uint8Array(new Uint32Array([h.length]).buffer)];
  return concat([0x93], ascii('NUMPY'), [major, 0], len, h, data);
}

/** A safetensors file built byte by byte from a header string and a data buffer. */
function stFile(header: string, data: Uint8Array | number[] = []): Uint8Array {
  const h = new TextEncoder().encode(header);
  const len = new Uint8Array(new BigUint64Array([BigInt(h.length)]).buffer);
  return concat(len, h, data);
}

function f32Bytes(...values: number[]): Uint8Array {
  return new Uint8Array(new Float32Array(values).buffer);
}

const SHAPES: number[][] = [[], [0], [1], [7], [3, 5], [0, 4], [4, 0], [2, 3, 4], [3, 0, 2], [2, 1, 3, 2]];
const NPY_DICT = (descr: string, shape: string, fortran = 'False') =>
  `{'descr': '${descr}', 'fortran_order': ${fortran}, 'shape': ${shape}, }`;
const NPY_OK_HEADER = `${NPY_DICT('<f4', '(2,)')}${' '.repeat(60)}\n`;

describe('npy round trips', () => {
  for (const dtype of ARRAY_DTYPES) {
    test(dtype, () => {
      const shapes = [...SHAPES, [1 + Math.floor(Math.random() * 40), 1 + Math.floor(Math.random() * 9)]];
      for (const shape of shapes) {
        const array = randomArray(dtype, shape);
        const bytes = encodeNpy(array);
        assert.equal(bytes[6], 1, 'writes format 1.0');
        const headerEnd = 10 + (bytes[8] | (bytes[9] << 8));
        assert.equal(headerEnd % 64, 0, 'data starts 64-byte aligned like NumPy');
        assert.equal(bytes[headerEnd - 1], 0x0a);
        const back = parseNpy(bytes, 'mem.npy', { u2As: 'bfloat16' });
        assertSameArray(back, array, `${dtype} ${JSON.stringify(shape)}`);
      }
    });
  }

  test('files on disk', () => {
    const array = randomArray('float16', [5, 3]);
    const file = path.join(tmp, 'rt.npy');
    writeNpy(file, array);
    assertSameArray(readNpy(file), array);
    assert.ok(Buffer.from(fs.readFileSync(file)).equals(Buffer.from(encodeNpy(array))));
  });

  test('unaligned input data is copied into an aligned array', () => {
    const array = randomArray('float64', [3, 2]);
    const bytes = encodeNpy(array);
    for (let shift = 1; shift < 8; shift++) {
      const backing = new Uint8Array(bytes.length + shift);
      backing.set(bytes, shift);
      assertSameArray(parseNpy(backing.subarray(shift)), array, `shift ${shift}`);
    }
  });

  test('writer rejects inconsistent arrays', () => {
    assert.throws(
      () => encodeNpy({ dtype: 'float32', shape: [2, 3], data: new Float32Array(5) }),
      InvalidArgumentError,
    );
    assert.throws(
      () => encodeNpy({ dtype: 'float32', shape: [2], data: new Uint16Array(2) }),
      InvalidArgumentError,
    );
    assert.throws(
      () => encodeNpy({ dtype: 'float32', shape: [-1], data: new Float32Array(0) }),
      InvalidArgumentError,
    );
  });
});

describe('npy files as NumPy writes them', () => {
  // Byte layouts checked against numpy 2.x np.save / np.lib.format.write_array; `size` is NumPy's file size.
  const fixtures: {
    label: string;
    major: number;
    header: string;
    data: number[];
    size: number;
    expect: NpyArray;
  }[] = [
    {
      label: 'float32 (2, 3)',
      major: 1,
      header: `${NPY_DICT('<f4', '(2, 3)')}${' '.repeat(58)}\n`,
      data: [...f32Bytes(0, 1, 2, 3, 4, 5)],
      size: 152,
      expect: { dtype: 'float32', shape: [2, 3], data: Float32Array.of(0, 1, 2, 3, 4, 5) },
    },
    {
      label: 'float16 (3,)',
      major: 1,
      header: `${NPY_DICT('<f2', '(3,)')}${' '.repeat(60)}\n`,
      data: [0x00, 0x3e, 0x00, 0xc0, 0xff, 0x7b],
      size: 134,
      expect: { dtype: 'float16', shape: [3], data: Uint16Array.of(0x3e00, 0xc000, 0x7bff) },
    },
    {
      label: 'int8 scalar',
      major: 1,
      header: `${NPY_DICT('|i1', '()')}${' '.repeat(62)}\n`,
      data: [0xfb],
      size: 129,
      expect: { dtype: 'int8', shape: [], data: Int8Array.of(-5) },
    },
    {
      label: 'int64 offsets',
      major: 1,
      header: `${NPY_DICT('<i8', '(3,)')}${' '.repeat(60)}\n`,
      data: [0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0],
      size: 152,
      expect: { dtype: 'int64', shape: [3], data: BigInt64Array.of(0n, 3n, 7n) },
    },
    {
      label: 'empty (0, 4)',
      major: 1,
      header: `${NPY_DICT('<f4', '(0, 4)')}${' '.repeat(58)}\n`,
      data: [],
      size: 128,
      expect: { dtype: 'float32', shape: [0, 4], data: new Float32Array(0) },
    },
  ];
  for (const f of fixtures) {
    test(`reads and writes ${f.label} byte for byte`, () => {
      const bytes = npyFile(f.major, f.header, f.data);
      assert.equal(bytes.length, f.size);
      assertSameArray(parseNpy(bytes), f.expect, f.label);
      assert.ok(Buffer.from(encodeNpy(f.expect)).equals(Buffer.from(bytes)), `${f.label}: writer output`);
    });
  }

  test('format 2.0 and 3.0', () => {
    const header = `${NPY_DICT('<f4', '(2, 3)')}${' '.repeat(56)}\n`;
    const expect: NpyArray = { dtype: 'float32', shape: [2, 3], data: Float32Array.of(0, 1, 2, 3, 4, 5) };
    for (const major of [2, 3]) {
      const bytes = npyFile(major, header, f32Bytes(0, 1, 2, 3, 4, 5));
      assert.equal(bytes.length, 152);
      assertSameArray(parseNpy(bytes), expect, `version ${major}.0`);
    }
  });

  test('older and hand-written header styles NumPy also accepts', () => {
    const expect: NpyArray = { dtype: 'float32', shape: [2], data: Float32Array.of(1.5, 2.5) };
    const headers = [
      `${NPY_DICT('<f4', '(2,)')}${' '.repeat(12)}\n`, // old NumPy: 16-byte alignment, no growth padding
      `${NPY_DICT('<f4', '(2L,)')}${' '.repeat(11)}\n`, // Python 2 long integers
      '{"descr": "<f4", "shape": (2,), "fortran_order": False}\n', // double quotes, any key order
      "{'descr':'<f4','fortran_order':False,'shape':(2,)}", // no spaces, no trailing comma or newline
      "{ 'descr' : '<f4' ,\t'fortran_order' : False , 'shape' : ( 2 , ) , }\n",
    ];
    for (const header of headers)
      assertSameArray(parseNpy(npyFile(1, header, f32Bytes(1.5, 2.5))), expect, header);
  });

  test("'<u2' is bfloat16 only on request", () => {
    const bytes = npyFile(1, `${NPY_DICT('<u2', '(2,)')}${' '.repeat(60)}\n`, [0x80, 0x3f, 0x00, 0xc0]);
    assert.throws(
      () => parseNpy(bytes),
      (e: unknown) => e instanceof FormatError && /u2As/.test(e.message),
    );
    const back = parseNpy(bytes, 'x.npy', { u2As: 'bfloat16' });
    assert.equal(back.dtype, 'bfloat16');
    assert.deepEqual([...back.data], [0x3f80, 0xc000]);
  });
});

function assertFormatError(fn: () => unknown, pattern?: RegExp) {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof FormatError, `expected FormatError, got ${e}`);
    if (pattern) assert.match(e.message, pattern);
    return true;
  });
}

describe('malformed npy', () => {
  const data6 = f32Bytes(0, 1, 2, 3, 4, 5);
  const withHeader = (dict: string, data: Uint8Array | number[] = data6) => npyFile(1, `${dict}\n`, data);

  test('bad magic, short files, bad versions', () => {
    assertFormatError(() => parseNpy(new Uint8Array(0)), /too short/);
    assertFormatError(() => parseNpy(ascii('\x93NUM')), /too short/);
    assertFormatError(() => parseNpy(ascii('PK\x03\x04 zip archive')), /not a \.npy file/);
    assertFormatError(() => parseNpy(concat(ascii('\x93NUMPX'), [1, 0, 0, 0])), /not a \.npy file/);
    const good = npyFile(1, NPY_OK_HEADER, f32Bytes(1, 2));
    for (const [major, minor] of [
      [0, 0],
      [4, 0],
      [1, 1],
    ]) {
      const bad = good.slice();
      bad[6] = major;
      bad[7] = minor;
      assertFormatError(() => parseNpy(bad), /version/);
    }
    assertFormatError(() => parseNpy(good.subarray(0, 9)), /truncated/);
  });

  test('truncated header and too-long header', () => {
    const good = npyFile(1, NPY_OK_HEADER, f32Bytes(1, 2));
    assertFormatError(() => parseNpy(good.subarray(0, 40)), /truncated \.npy header/);
    const huge = concat([0x93], ascii('NUMPY'), [2, 0], [0x70, 0x11, 0x01, 0x00], ascii('{}'));
    assertFormatError(() => parseNpy(huge), /more than the 65536 allowed/);
    const max = concat([0x93], ascii('NUMPY'), [2, 0], [0xff, 0xff, 0xff, 0xff]);
    assertFormatError(() => parseNpy(max), /more than/);
  });

  test('fortran order', () => {
    assertFormatError(() => parseNpy(withHeader(NPY_DICT('<f4', '(2, 3)', 'True'))), /np\.ascontiguousarray/);
  });

  test('unsupported dtypes', () => {
    for (const [descr, pattern] of [
      ['>f4', /big-endian.*astype\('<f4'\)/],
      ['>i8', /big-endian/],
      ['|O', /object arrays/],
      ['<c8', /unsupported dtype '<c8'/],
      ['|b1', /unsupported dtype/],
      ['<U5', /unsupported dtype/],
      ['|V2', /bfloat16\?/],
      ['f4', /unsupported dtype/],
      ['constructor', /unsupported dtype/],
      ['__proto__', /unsupported dtype/],
    ] as const) {
      assertFormatError(() => parseNpy(withHeader(NPY_DICT(descr, '(6,)'))), pattern);
    }
    const structured = "{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, 'shape': (3,), }";
    assertFormatError(() => parseNpy(withHeader(structured, new Uint8Array(24))), /structured dtype/);
    const mlBf16 = "{'descr': [('', '|V2')], 'fortran_order': False, 'shape': (3,), }";
    assertFormatError(() => parseNpy(withHeader(mlBf16, new Uint8Array(6))), /ml_dtypes/);
    const subarray = "{'descr': ('<f4', (2,)), 'fortran_order': False, 'shape': (3,), }";
    assertFormatError(() => parseNpy(withHeader(subarray)), /dtype string/);
  });

  test('shape and byte length disagree', () => {
    assertFormatError(
      () => parseNpy(withHeader(NPY_DICT('<f4', '(2, 3)'), data6.subarray(0, 23))),
      /needs 24 .* has 23/,
    );
    assertFormatError(
      () => parseNpy(withHeader(NPY_DICT('<f4', '(2, 3)'), concat(data6, [0]))),
      /needs 24 .* has 25/,
    );
    assertFormatError(() => parseNpy(withHeader(NPY_DICT('<f4', '(2, 2)'))), /needs 16 .* has 24/);
    assertFormatError(() => parseNpy(withHeader(NPY_DICT('<f4', '()'))), /needs 4/);
    const big = '(4294967296, 4294967296, 4294967296)';
    assertFormatError(() => parseNpy(withHeader(NPY_DICT('<f4', big))), /too many elements/);
    assertFormatError(
      () => parseNpy(withHeader(NPY_DICT('<f8', '(1125899906842624, 2)'))),
      /too many elements/,
    );
  });

  test('bad shapes', () => {
    for (const shape of [
      '(-1, 6)',
      '(2.5,)',
      '(6.0,)',
      '(1e3,)',
      "('6',)",
      '(None,)',
      '(True,)',
      '(9007199254740992,)',
      '(99999999999999999999999,)',
      '((6,),)',
    ]) {
      assertFormatError(() => parseNpy(withHeader(NPY_DICT('<f4', shape))), /shape\[0\]/);
    }
    for (const shape of ['[6]', '6', '(6)', "'6'", 'None']) {
      assertFormatError(() => parseNpy(withHeader(NPY_DICT('<f4', shape))), /must be a tuple/);
    }
  });

  test('malformed header dicts', () => {
    const cases = [
      '',
      '[1, 2]',
      "{'descr': '<f4', 'fortran_order': False}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'extra': 1}",
      "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}",
      "{'descr': '<f4', 'fortran_order': 0, 'shape': (6,)}",
      "{'descr': '<f4', 'fortran_order': false, 'shape': (6,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (6,)",
      "{'descr': '<f4, 'fortran_order': False, 'shape': (6,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (6,)} trailing",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (6,,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (,)}",
      "{'descr': '<f4' 'fortran_order': False, 'shape': (6,)}",
      "{'descr': '\\x3cf4', 'fortran_order': False, 'shape': (6,)}",
      "{1: '<f4', 'fortran_order': False, 'shape': (6,)}",
      "{'descr': __import__('os').system('echo pwned'), 'fortran_order': False, 'shape': (6,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), **{}}",
      `{'descr': '<f4', 'fortran_order': False, 'shape': ${'('.repeat(5000)}${')'.repeat(5000)}}`,
      `{'descr': '<f4', 'fortran_order': False, 'shape': (${'1'.repeat(70)},)}`,
    ];
    for (const dict of cases) assertFormatError(() => parseNpy(withHeader(dict)));
  });

  test('format 3.0 header that is not UTF-8', () => {
    const bytes = npyFile(3, `${NPY_DICT('<f4', '(6,)')}\n`, data6);
    bytes[12 + 12] = 0xff; // inside the descr string
    assertFormatError(() => parseNpy(bytes), /UTF-8/);
  });
});

describe('safetensors round trips', () => {
  test('every dtype in one file, with metadata', () => {
    const tensors: Record<string, NpyArray> = {};
    for (const dtype of ARRAY_DTYPES) {
      tensors[`t_${dtype}`] = randomArray(dtype, [1 + Math.floor(Math.random() * 5), 3]);
      tensors[`empty_${dtype}`] = randomArray(dtype, [0, 3]);
      tensors[`scalar_${dtype}`] = randomArray(dtype, []);
    }
    tensors['3d'] = randomArray('bfloat16', [2, 3, 4]);
    tensors['1d'] = randomArray('int8', [5]);
    tensors.__proto__odd = randomArray('float32', [1]);
    const metadata = { format: 'pt', note: 'ünïcode ✓', __proto__x: 'y' };
    const bytes = encodeSafetensors(tensors, metadata);
    const n = Number(new DataView(bytes.buffer).getBigUint64(0, true));
    assert.equal(n % 8, 0, 'header padded to 8 bytes');
    const file = parseSafetensors(bytes, 'mem.safetensors');
    assert.deepEqual(file.metadata, metadata);
    assert.deepEqual([...file.tensors.keys()].sort(), Object.keys(tensors).sort());
    for (const [name, array] of Object.entries(tensors))
      assertSameArray(file.tensors.get(name)!, array, name);
  });

  test('random shapes, on disk, unaligned input', () => {
    for (let round = 0; round < 20; round++) {
      const tensors: Record<string, NpyArray> = {};
      const count = Math.floor(Math.random() * 6);
      for (let i = 0; i < count; i++) {
        const dtype = ARRAY_DTYPES[Math.floor(Math.random() * ARRAY_DTYPES.length)];
        tensors[`x${i}`] = randomArray(dtype, SHAPES[Math.floor(Math.random() * SHAPES.length)]);
      }
      const file = path.join(tmp, `rt${round}.safetensors`);
      writeSafetensors(file, tensors);
      const bytes = fs.readFileSync(file);
      assert.ok(Buffer.from(encodeSafetensors(tensors)).equals(bytes));
      const shift = 1 + Math.floor(Math.random() * 7);
      const backing = new Uint8Array(bytes.length + shift);
      backing.set(bytes, shift);
      for (const parsed of [readSafetensors(file), parseSafetensors(backing.subarray(shift))]) {
        assert.equal(parsed.tensors.size, count);
        for (const [name, array] of Object.entries(tensors))
          assertSameArray(parsed.tensors.get(name)!, array, name);
      }
    }
  });

  test("matches the reference implementation's bytes", () => {
    // From the huggingface/safetensors test suite (test_serialization, test_empty).
    const reference = [
      64, 0, 0, 0, 0, 0, 0, 0, 123, 34, 97, 116, 116, 110, 46, 48, 34, 58, 123, 34, 100, 116, 121, 112, 101,
      34, 58, 34, 70, 51, 50, 34, 44, 34, 115, 104, 97, 112, 101, 34, 58, 91, 49, 44, 50, 44, 51, 93, 44, 34,
      100, 97, 116, 97, 95, 111, 102, 102, 115, 101, 116, 115, 34, 58, 91, 48, 44, 50, 52, 93, 125, 125, 0, 0,
      0, 0, 0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64, 0, 0, 160, 64,
    ];
    const attn: NpyArray = { dtype: 'float32', shape: [1, 2, 3], data: Float32Array.of(0, 1, 2, 3, 4, 5) };
    assert.deepEqual([...encodeSafetensors({ 'attn.0': attn })], reference);
    assertSameArray(parseSafetensors(Uint8Array.from(reference)).tensors.get('attn.0')!, attn);
    assert.deepEqual([...encodeSafetensors({})], [8, 0, 0, 0, 0, 0, 0, 0, 123, 125, 32, 32, 32, 32, 32, 32]);
    const withMeta = stFile('{"__metadata__":{"framework":"pt"}}     ');
    assert.deepEqual([...encodeSafetensors({}, { framework: 'pt' })], [...withMeta]);
    assert.deepEqual(parseSafetensors(withMeta).metadata, { framework: 'pt' });
  });

  test('tensors are laid out widest dtype first, then by name', () => {
    const bytes = encodeSafetensors({
      b: randomArray('int8', [3]),
      a: randomArray('int8', [1]),
      h: randomArray('float16', [1]),
      f: randomArray('float32', [1]),
      o: randomArray('int64', [2]),
    });
    const file = parseSafetensors(bytes);
    assert.deepEqual([...file.tensors.keys()], ['o', 'f', 'h', 'a', 'b']);
  });

  test('a tensor named __proto__ stays a tensor', () => {
    const array = randomArray('float32', [2]);
    const file = parseSafetensors(encodeSafetensors(new Map([['__proto__', array]])));
    assertSameArray(file.tensors.get('__proto__')!, array);
    const meta = parseSafetensors(stFile('{"__metadata__":{"__proto__":"x"}}')).metadata;
    assert.equal(Object.getPrototypeOf(meta), Object.prototype);
    assert.equal(Object.getOwnPropertyDescriptor(meta, '__proto__')?.value, 'x');
  });

  test('writer rejects bad input', () => {
    assert.throws(
      () => encodeSafetensors({ __metadata__: randomArray('float32', [1]) }),
      InvalidArgumentError,
    );
    assert.throws(
      () => encodeSafetensors({ x: { dtype: 'int64', shape: [2], data: new Float64Array(2) } }),
      InvalidArgumentError,
    );
  });
});

describe('malformed safetensors', () => {
  const entry = (dtype: string, shape: unknown, offsets: unknown) =>
    JSON.stringify({ dtype, shape, data_offsets: offsets });
  const f32x6 = f32Bytes(0, 1, 2, 3, 4, 5);

  test('header length', () => {
    assertFormatError(() => parseSafetensors(new Uint8Array(0)), /too short/);
    assertFormatError(() => parseSafetensors(new Uint8Array(7)), /too short/);
    const lengthOnly = (n: bigint, rest: Uint8Array | number[] = []) =>
      concat(new Uint8Array(new BigUint64Array([n]).buffer), rest);
    assertFormatError(
      () => parseSafetensors(lengthOnly(2n ** 63n, ascii('{}'.padEnd(64)))),
      /more than the 100000000/,
    );
    assertFormatError(() => parseSafetensors(lengthOnly(2n ** 64n - 1n)), /more than/);
    assertFormatError(() => parseSafetensors(lengthOnly(100_000_001n)), /more than/);
    assertFormatError(() => parseSafetensors(lengthOnly(100n, [...ascii('{}')])), /only 2 follow/);
    assertFormatError(() => parseSafetensors(lengthOnly(0n)), /start with '\{'/);
  });

  test('header that is not a JSON object', () => {
    for (const header of [
      '{not json}',
      '{"a": 1',
      '[]',
      'null',
      '"str"',
      ' {}',
      '{}\u0000',
      '{"a":{"dtype":"F32",}}',
    ]) {
      assertFormatError(() => parseSafetensors(stFile(header)));
    }
    const invalidUtf8 = stFile('{"\u00e9": 1}');
    invalidUtf8[10] = 0xc3;
    invalidUtf8[11] = 0x28;
    assertFormatError(() => parseSafetensors(invalidUtf8), /UTF-8/);
  });

  test('deep nesting and repeated keys are refused with a clear error (issue 21)', () => {
    const deep = `{"a":${'['.repeat(200_000)}${']'.repeat(200_000)}}`;
    assertFormatError(() => parseSafetensors(stFile(deep)), /nests deeper than 16 levels/);
    const t = entry('F32', [0], [0, 0]);
    assertFormatError(() => parseSafetensors(stFile(`{"x":${t},"x":${t}}`)), /the key "x" twice/);
    // the same key spelled with an escape
    assertFormatError(() => parseSafetensors(stFile(`{"x":${t},"\\u0078":${t}}`)), /the key "x" twice/);
    assertFormatError(
      () => parseSafetensors(stFile('{"__metadata__":{"a":"1"},"__metadata__":{"b":"2"}}')),
      /"__metadata__" twice/,
    );
    // keys repeated inside different tensors' entries are fine
    const ok = parseSafetensors(stFile(`{"x":${t},"y":${t},"__metadata__":{"dtype":"x","shape":"y"}}`));
    assert.deepEqual([...ok.tensors.keys()].sort(), ['x', 'y']);
  });

  test('bad entries name the tensor', () => {
    const cases: [string, RegExp][] = [
      [entry('U8', [6], [0, 6]), /"t".*unsupported dtype "U8"/],
      [entry('F8_E4M3', [6], [0, 6]), /unsupported dtype/],
      [JSON.stringify({ shape: [6], data_offsets: [0, 24] }), /unsupported dtype/],
      [entry('F32', [-6], [0, 24]), /"t".*shape/],
      [entry('F32', [2.5], [0, 10]), /shape/],
      [entry('F32', '6', [0, 24]), /shape/],
      [entry('F32', [6], [0, 24, 48]), /data_offsets/],
      [entry('F32', [6], [-24, 0]), /data_offsets/],
      [entry('F32', [6], [0, 1e20]), /data_offsets/],
      [entry('F32', [6], ['0', '24']), /data_offsets/],
      [entry('F32', [6], [24, 0]), /end before they begin/],
      [entry('F32', [5], [0, 24]), /"t".*needs 20 bytes.*span 24/],
      [entry('F32', [2 ** 40, 2 ** 40], [0, 24]), /more than 2\^53/],
      [entry('F32', [7], [0, 28]), /run past/],
      [entry('F32', [5], [0, 20]), /trailing bytes/],
      [entry('F32', [4], [4, 20]), /gap/],
      ['[]', /expected an object/],
    ];
    for (const [info, pattern] of cases) {
      assertFormatError(() => parseSafetensors(stFile(`{"t":${info}}`, f32x6)), pattern);
    }
  });

  test('overlapping tensors', () => {
    const header = `{"a":${entry('F32', [4], [0, 16])},"b":${entry('F32', [4], [8, 24])}}`;
    assertFormatError(() => parseSafetensors(stFile(header, f32x6)), /"b".*overlap.*"a"/);
    const zeroInside = `{"a":${entry('F32', [6], [0, 24])},"z":${entry('F32', [0], [8, 8])}}`;
    assertFormatError(() => parseSafetensors(stFile(zeroInside, f32x6)), /overlap/);
    const same = `{"a":${entry('F32', [6], [0, 24])},"b":${entry('F32', [6], [0, 24])}}`;
    assertFormatError(() => parseSafetensors(stFile(same, f32x6)), /overlap/);
  });

  test('metadata must be strings', () => {
    assertFormatError(() => parseSafetensors(stFile('{"__metadata__":{"a":1}}')), /__metadata__/);
    assertFormatError(() => parseSafetensors(stFile('{"__metadata__":[]}')), /__metadata__/);
    assert.deepEqual(parseSafetensors(stFile('{"__metadata__":null}')).metadata, {});
  });

  test('any tensor order in the header is accepted', () => {
    const header = `{"b":${entry('F32', [2], [16, 24])},"a":${entry('F32', [4], [0, 16])},"z":${entry('I8', [0], [24, 24])}}`;
    const file = parseSafetensors(stFile(header, f32x6));
    assert.deepEqual([...file.tensors.keys()], ['a', 'b', 'z']);
    assert.deepEqual([...file.tensors.get('b')!.data], [4, 5]);
  });
});

describe('fuzzing', () => {
  function mutate(rand: () => number, good: Uint8Array, headerEnd: number): Uint8Array {
    const kind = rand();
    if (kind < 0.2) return good.slice(0, Math.floor(rand() * good.length));
    if (kind < 0.25) return concat(good, [Math.floor(rand() * 256)]);
    const bad = good.slice();
    const flips = 1 + Math.floor(rand() * 4);
    for (let i = 0; i < flips; i++) {
      // Mostly hit the header, where the parsing is.
      const limit = rand() < 0.85 ? Math.min(headerEnd, bad.length) : bad.length;
      const at = Math.floor(rand() * limit);
      bad[at] = rand() < 0.5 ? bad[at] ^ (1 << Math.floor(rand() * 8)) : Math.floor(rand() * 256);
    }
    return bad;
  }

  function fuzz(
    label: string,
    goods: { bytes: Uint8Array; headerEnd: number }[],
    parse: (b: Uint8Array) => unknown,
  ) {
    const rand = prng(SEED);
    let failures = 0;
    let successes = 0;
    for (let i = 0; i < 2000; i++) {
      const good = goods[i % goods.length];
      const bad = mutate(rand, good.bytes, good.headerEnd);
      try {
        parse(bad);
        successes++;
      } catch (e) {
        if (!(e instanceof FormatError)) {
          assert.fail(`${label} case ${i} (seed ${SEED}) threw ${e instanceof Error ? e.stack : e}`);
        }
        failures++;
      }
    }
    assert.ok(
      failures > 100,
      `${label}: mutations should mostly be caught (${failures} caught, seed ${SEED})`,
    );
    assert.equal(failures + successes, 2000);
  }

  test('npy: mutated files parse or throw FormatError', () => {
    const goods = (['float32', 'float16', 'int8', 'int64', 'uint32', 'float64'] as const).map((dtype, i) => {
      const bytes = encodeNpy(randomArray(dtype, SHAPES[(i * 3) % SHAPES.length]));
      return { bytes, headerEnd: 10 + (bytes[8] | (bytes[9] << 8)) };
    });
    goods.push({ bytes: npyFile(3, `${NPY_DICT('<f4', '(2,)')}\n`, f32Bytes(1, 2)), headerEnd: 70 });
    fuzz('npy', goods, (b) => parseNpy(b, 'fuzz.npy', { u2As: 'bfloat16' }));
  });

  test('safetensors: mutated files parse or throw FormatError', () => {
    const goods = [0, 1, 2].map((seed) => {
      const tensors: Record<string, NpyArray> = {};
      ARRAY_DTYPES.forEach((dtype, i) => {
        if ((i + seed) % 2 === 0) tensors[`t${i}`] = randomArray(dtype, SHAPES[(i + seed) % SHAPES.length]);
      });
      const bytes = encodeSafetensors(tensors, seed === 1 ? { k: 'v' } : undefined);
      return { bytes, headerEnd: 8 + Number(new DataView(bytes.buffer).getBigUint64(0, true)) };
    });
    fuzz('safetensors', goods, (b) => parseSafetensors(b, 'fuzz.safetensors'));
  });
});

describe('load helpers', () => {
  const emb = (shape: number[], dtype: ArrayDType = 'float32'): NpyArray => {
    const n = shape.reduce((a, b) => a * b, 1);
    const values = Float32Array.from({ length: n }, () => Math.random() * 2 - 1);
    if (dtype === 'int8') return { dtype, shape, data: Int8Array.from(values, (v) => Math.round(v * 127)) };
    return { dtype, shape, data: encodeFloats(values, dtype as 'float32' | 'float16' | 'bfloat16') };
  };

  test('loadArray specs', () => {
    const npyPath = path.join(tmp, 'q.npy');
    const q = emb([3, 4]);
    writeNpy(npyPath, q);
    assertSameArray(loadArray(npyPath), q);

    const dir = path.join(tmp, 'dir:with:colons');
    fs.mkdirSync(dir);
    const stPath = path.join(dir, 'docs.safetensors');
    const docs: Record<string, NpyArray> = {
      embeddings: emb([5, 4], 'float16'),
      offsets: { dtype: 'int64', shape: [3], data: BigInt64Array.of(0n, 2n, 5n) },
    };
    writeSafetensors(stPath, docs);
    assertSameArray(loadArray(`${stPath}:embeddings`), docs.embeddings);
    assertSameArray(loadArray(`${stPath}:offsets`), docs.offsets);

    const single = path.join(tmp, 'single.safetensors');
    writeSafetensors(single, { only: q });
    assertSameArray(loadArray(single), q);

    const noExtension = path.join(tmp, 'blob');
    writeNpy(noExtension, q);
    assertSameArray(loadArray(noExtension), q);

    assert.throws(
      () => loadArray(stPath, { argument: '--docs' }),
      (e: unknown) =>
        e instanceof InvalidArgumentError &&
        e.argument === '--docs' &&
        /"embeddings", "offsets"/.test(e.message),
    );
    assert.throws(
      () => loadArray(`${stPath}:nope`),
      (e: unknown) => e instanceof InvalidArgumentError && /"embeddings"/.test(e.message),
    );
    assert.throws(() => loadArray(`${npyPath}:x`), InvalidArgumentError);
    assert.throws(() => loadArray(path.join(tmp, 'missing.npy')), /no such file/);
    assert.throws(
      () => loadArray(tmp, { argument: '--docs' }),
      (e: unknown) =>
        e instanceof InvalidArgumentError && e.argument === '--docs' && /\(a directory\)$/.test(e.message),
    );
    const empty = path.join(tmp, 'empty.safetensors');
    writeSafetensors(empty, {});
    assert.throws(() => loadArray(empty), FormatError);
    const garbage = path.join(tmp, 'garbage.npy');
    fs.writeFileSync(garbage, 'not numpy');
    assert.throws(() => loadArray(garbage), FormatError);
  });

  test('arrayToMatrix and arrayToQueries', () => {
    const m = arrayToMatrix(emb([3, 4], 'bfloat16'), 'query');
    assert.equal(m.kind, 'matrix');
    assert.equal(m.dtype, 'bfloat16');
    assert.equal(m.length, 3);
    assert.equal(m.dim, 4);
    const wrongRank = (e: unknown) =>
      e instanceof InvalidArgumentError && e.argument === 'query' && /\[3\]/.test(e.received);
    assert.throws(() => arrayToMatrix(emb([3]), 'query'), wrongRank);
    assert.throws(() => arrayToMatrix(emb([2, 3, 4]), 'query'), InvalidArgumentError);
    assert.throws(
      () => arrayToMatrix({ dtype: 'int32', shape: [2, 2], data: new Int32Array(4) }, 'query'),
      /int32/,
    );
    assert.throws(() => arrayToMatrix(emb([3, 0]), 'query'), InvalidArgumentError);

    const int8 = emb([3, 4], 'int8');
    assert.throws(
      () => arrayToMatrix(int8, 'query'),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'query scales',
    );
    const scales: NpyArray = { dtype: 'float32', shape: [3], data: Float32Array.of(0.1, 0.2, 0.3) };
    assert.equal(arrayToMatrix(int8, 'query', { scales }).scales?.length, 3);
    assert.throws(() => arrayToMatrix(emb([3, 4]), 'query', { scales }), InvalidArgumentError);

    const nan: NpyArray = { dtype: 'float32', shape: [1, 2], data: Float32Array.of(1, Number.NaN) };
    assert.throws(
      () => arrayToMatrix(nan, 'query'),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'query data',
    );

    const batch = arrayToQueries(emb([2, 3, 4], 'float16'), 'queries');
    assert.equal(batch.kind, 'batch');
    assert.equal((batch as TokenBatch).count, 2);
    assert.equal(arrayToQueries(emb([3, 4]), 'queries').kind, 'matrix');
    assert.throws(() => arrayToQueries(emb([1, 2, 3, 4]), 'queries'), InvalidArgumentError);
  });

  test('files are read into the array: truncated, trailing, short-header and corrupt files fail cleanly', () => {
    const q = emb([3, 4]);
    const good = path.join(tmp, 'stream.npy');
    writeNpy(good, q);
    const bytes = fs.readFileSync(good);
    const variant = (name: string, b: Uint8Array) => {
      const p = path.join(tmp, name);
      fs.writeFileSync(p, b);
      return p;
    };
    assertFormatError(
      () => readNpy(variant('trunc.npy', bytes.subarray(0, bytes.length - 4))),
      /truncated file/,
    );
    assertFormatError(() => readNpy(variant('trail.npy', concat(bytes, [1, 2, 3, 4]))), /trailing bytes/);
    assertFormatError(() => readNpy(variant('head.npy', bytes.subarray(0, 20))), /truncated \.npy header/);
    assertFormatError(() => readNpy(variant('tiny.npy', bytes.subarray(0, 3))), /too short/);
    const u16 = path.join(tmp, 'u16.npy');
    writeNpy(u16, { dtype: 'bfloat16', shape: [2], data: Uint16Array.of(1, 2) });
    assertFormatError(() => readNpy(u16), /pass u2As: 'bfloat16'/);
    assertFormatError(() => loadArray(u16, { u2AsOption: '--bf16' }), /pass --bf16/);
    assert.equal(loadArray(u16, { u2As: 'bfloat16' }).dtype, 'bfloat16');
    // a safetensors file is opened by its header; a truncated one is refused before any tensor is read
    const st = path.join(tmp, 'stream.safetensors');
    const b = emb([2, 4], 'float16');
    writeSafetensors(st, { a: q, b });
    assertSameArray(loadArray(`${st}:b`), b);
    assertSameArray(loadArray(`${st}:a`), q);
    const stBytes = fs.readFileSync(st);
    assertFormatError(
      () => loadArray(`${variant('t.safetensors', stBytes.subarray(0, stBytes.length - 2))}:a`),
      /truncated/,
    );
    assertFormatError(
      () => loadArray(`${variant('h.safetensors', stBytes.subarray(0, 12))}:a`),
      /truncated|only/,
    );
  });

  test('a large .npy is memory-mapped: the right elements, and writes to the array never reach the file', () => {
    assert.ok(MAP_MIN_BYTES <= 256 * 1024 * 1024);
    const d = 64;
    const rows = MAP_MIN_BYTES / (4 * d) + 3; // just above the mapping threshold
    const big = path.join(tmp, 'mapped.npy');
    const header = npyHeader({ dtype: 'float32', shape: [rows, d], data: new Float32Array(rows * d) });
    const fd = fs.openSync(big, 'w');
    fs.writeSync(fd, header);
    const marks = [0, 1, rows * d - 1];
    for (const [k, i] of marks.entries())
      fs.writeSync(fd, Float32Array.of(k + 0.5), 0, 4, header.length + i * 4);
    fs.ftruncateSync(fd, header.length + rows * d * 4); // sparse: the rest reads as zeros
    fs.closeSync(fd);
    try {
      const a = loadArray(big);
      assert.deepEqual(a.shape, [rows, d]);
      const data = a.data as Float32Array;
      for (const [k, i] of marks.entries()) assert.equal(data[i], k + 0.5);
      assert.equal(data[12345], 0);
      data[0] = 99; // a private copy-on-write page
      const again = readNpy(big).data as Float32Array;
      assert.equal(again[0], 0.5);
    } finally {
      fs.rmSync(big, { force: true });
    }
  });

  test('arrayToDocs: packed with offsets or lengths, dense with lengths', () => {
    const packed = emb([6, 4]);
    const offsets: NpyArray = { dtype: 'int64', shape: [4], data: BigInt64Array.of(0n, 2n, 2n, 6n) };
    const ragged = arrayToDocs(packed, { offsets }, 'docs');
    assert.equal(ragged.layout, 'ragged');
    assert.deepEqual([...ragged.lengths], [2, 0, 4]);
    assert.deepEqual([...ragged.starts], [0, 2, 2]);
    const lengths: NpyArray = { dtype: 'int32', shape: [3], data: Int32Array.of(2, 0, 4) };
    assert.deepEqual([...arrayToDocs(packed, { lengths }, 'docs').starts], [0, 2, 2]);
    const variants: NpyArray[] = [
      { dtype: 'int32', shape: [4], data: Int32Array.of(0, 1, 3, 6) },
      { dtype: 'uint32', shape: [4], data: Uint32Array.of(0, 1, 3, 6) },
      { dtype: 'uint64', shape: [4], data: BigUint64Array.of(0n, 1n, 3n, 6n) },
    ];
    for (const o of variants)
      assert.deepEqual([...arrayToDocs(packed, { offsets: o }, 'docs').lengths], [1, 2, 3]);

    assert.throws(
      () => arrayToDocs(packed, {}, 'docs'),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'docs offsets',
    );
    const floatOffsets: NpyArray = { dtype: 'float64', shape: [4], data: Float64Array.of(0, 2, 2, 6) };
    assert.throws(() => arrayToDocs(packed, { offsets: floatOffsets }, 'docs'), /astype\(np\.int64\)/);
    const decreasing: NpyArray = { dtype: 'int64', shape: [3], data: BigInt64Array.of(0n, 4n, 2n) };
    assert.throws(
      () => arrayToDocs(packed, { offsets: decreasing }, 'docs'),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'docs offsets[2]',
    );
    const beyond: NpyArray = { dtype: 'int64', shape: [2], data: BigInt64Array.of(0n, 7n) };
    assert.throws(() => arrayToDocs(packed, { offsets: beyond }, 'docs'), InvalidArgumentError);
    assert.throws(() => arrayToDocs(packed, { offsets, lengths }, 'docs'), InvalidArgumentError);

    const dense = arrayToDocs(emb([3, 5, 4], 'bfloat16'), { lengths }, 'docs');
    assert.equal(dense.layout, 'dense');
    assert.deepEqual([...dense.lengths], [2, 0, 4]);
    assert.equal(arrayToDocs(emb([3, 5, 4])).maxLength, 5);
    assert.throws(() => arrayToDocs(emb([3, 5, 4]), { offsets }, 'docs'), InvalidArgumentError);
    const tooLong: NpyArray = { dtype: 'int32', shape: [3], data: Int32Array.of(2, 6, 1) };
    assert.throws(() => arrayToDocs(emb([3, 5, 4]), { lengths: tooLong }, 'docs'), InvalidArgumentError);
    assert.throws(() => arrayToDocs(emb([7]), {}, 'docs'), InvalidArgumentError);
  });

  test('arrayToDocs: the offsets contract, and lengths errors that speak of lengths', () => {
    const packed = emb([6, 4]);
    const o = (...v: bigint[]): NpyArray => ({
      dtype: 'int64',
      shape: [v.length],
      data: BigInt64Array.of(...v),
    });
    const l = (...v: number[]): NpyArray => ({
      dtype: 'int32',
      shape: [v.length],
      data: Int32Array.of(...v),
    });
    const fails = (opts: { offsets?: NpyArray; lengths?: NpyArray }, argument: string, message: RegExp) =>
      assert.throws(
        () => arrayToDocs(packed, opts, 'docs'),
        (e: unknown) =>
          e instanceof InvalidArgumentError && e.argument === argument && message.test(e.message),
      );
    fails({ offsets: o(2n, 4n, 6n) }, 'docs offsets[0]', /Expected 0 .*received 2$/); // no leading 0
    fails({ offsets: o(0n, 2n, 5n) }, 'docs offsets[2]', /token count 6 .*received 5$/); // ends short
    fails({ offsets: o(0n, 2n, 2n, 6n, 6n, 9n) }, 'docs offsets[5]', /<= 6/); // another file's offsets
    fails({ lengths: l(2, 3) }, 'docs lengths', /summing to 6 .*a sum of 5$/);
    fails({ lengths: l(2, 3, 4) }, 'docs lengths', /summing to 6 .*above 6 by lengths\[2\]$/);
    fails({ lengths: l(2, -1, 5) }, 'docs lengths[1]', /non-negative token count.*received -1$/);
  });

  test('batchToArrays inverts arrayToDocs', () => {
    const packed = emb([6, 4], 'float16');
    const offsets: NpyArray = { dtype: 'int64', shape: [4], data: BigInt64Array.of(0n, 2n, 2n, 6n) };
    const out = batchToArrays(arrayToDocs(packed, { offsets }, 'docs'));
    assertSameArray(out.embeddings, packed);
    assertSameArray(out.offsets, offsets);
    assert.equal(out.scales, undefined);

    // Padding is dropped: a dense batch with lengths packs into its real tokens.
    const dense = emb([3, 5, 4]);
    const lengths: NpyArray = { dtype: 'int32', shape: [3], data: Int32Array.of(2, 0, 4) };
    const packedDense = batchToArrays(arrayToDocs(dense, { lengths }, 'docs'));
    assert.deepEqual(packedDense.embeddings.shape, [6, 4]);
    assert.deepEqual([...packedDense.offsets.data], [0n, 2n, 2n, 6n]);
    const d = dense.data as Float32Array;
    assert.deepEqual([...packedDense.embeddings.data], [...d.subarray(0, 8), ...d.subarray(40, 56)]);

    // int8 carries its scales along.
    const int8 = emb([2, 3, 4], 'int8');
    const scales: NpyArray = { dtype: 'float32', shape: [2, 3], data: Float32Array.of(1, 2, 3, 4, 5, 6) };
    const q8 = denseBatch(int8.data as Int8Array, {
      count: 2,
      length: 3,
      dim: 4,
      lengths: [1, 3],
      scales: scales.data as Float32Array,
    });
    const out8 = batchToArrays(q8);
    assert.deepEqual([...(out8.scales?.data ?? [])], [1, 4, 5, 6]);
    const again = arrayToDocs(out8.embeddings, { offsets: out8.offsets, scales: out8.scales }, 'docs');
    assert.deepEqual([...again.lengths], [1, 3]);

    const m = batchToArrays(arrayToMatrix(emb([3, 4]), 'q'));
    assert.deepEqual([...m.offsets.data], [0n, 3n]);
  });

  test('the documented Python recipe loads as ragged documents', () => {
    // What safetensors.numpy.save_file writes for {"embeddings": float16 [T, d], "offsets": int64 [B+1]}.
    const lengths = [3, 1, 4];
    const embeddings = emb([8, 16], 'float16');
    const file = path.join(tmp, 'recipe.safetensors');
    writeSafetensors(file, {
      embeddings,
      offsets: { dtype: 'int64', shape: [4], data: BigInt64Array.of(0n, 3n, 4n, 8n) },
    });
    const docs = arrayToDocs(
      loadArray(`${file}:embeddings`),
      { offsets: loadArray(`${file}:offsets`) },
      'docs',
    );
    assert.deepEqual([...docs.lengths], lengths);
    assert.equal(docs.dim, 16);
    assert.equal(docs.dtype, 'float16');
  });
});
