// Embeddings in request bodies: nested JSON arrays, base64 little-endian tensors ({b64, dtype, shape}) or
// .npy bytes, read into packed token rows in the dtype they were sent in (checked: shape, dimension,
// finite values) and decoded to float32 where they are scored: a search pass decodes every request of
// the pass straight into its one query buffer (no float32 copy per request). Every query is scored in
// float32 whatever it sent, so it scores the same alone or gathered with others into one pass.

import { checkEmptyItems, ItemLimitError } from '../admission.js';
import { nativeCodec } from '../codec-native.js';
import { FormatError, InvalidArgumentError } from '../errors.js';
import { f16BitsToFloat, f16Table } from '../floats.js';
import type { NpyArray } from '../io/array.js';
import { parseNpy, parseNpyHeader } from '../io/npy.js';
import type { FloatDType } from '../tensor.js';

/** Items (queries or documents) as packed float32 rows [tokens, dim] with offsets [count + 1]. */
export interface PackedTokens {
  data: Float32Array;
  offsets: number[];
  dim: number;
}

/**
 * Items as packed rows in the dtype they came in: float32 values, or float16 / bfloat16 bit patterns
 * (a view of the request's bytes where aligned). Every value is known finite.
 */
export interface EncodedTokens {
  dtype: FloatDType;
  values: Float32Array | Uint16Array;
  offsets: number[];
  dim: number;
}

export interface B64Tensor {
  b64: string;
  dtype?: string;
  shape: number[];
  /** [n, L, d] only: real tokens of each item (<= L); the rest is padding. */
  lengths?: number[];
}

const DTYPE_BYTES: Record<FloatDType, number> = { float32: 4, float16: 2, bfloat16: 2 };
/** One dtype spelling accepted everywhere: the short names as aliases. */
const DTYPE_ALIASES: Record<string, FloatDType> = {
  float32: 'float32',
  fp32: 'float32',
  f32: 'float32',
  float16: 'float16',
  fp16: 'float16',
  f16: 'float16',
  bfloat16: 'bfloat16',
  bf16: 'bfloat16',
};
// Standard base64 (RFC 4648 section 4) with padding; Buffer.from would skip bad characters silently.
const isLittleEndian = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

function describe(x: unknown): string {
  if (Array.isArray(x)) return `an array of ${x.length}`;
  if (x === null) return 'null';
  if (typeof x === 'string') return x.length > 40 ? `a string of ${x.length} characters` : JSON.stringify(x);
  if (typeof x === 'number') return String(x);
  return typeof x;
}

/**
 * How many items an embedding field holds: 'one' is [L, d] (a query); 'many' is [n, L, d], or one
 * item as [L, d] (nested JSON [tokens][dim], a base64 or .npy shape [L, d]).
 */
export type Arity = 'one' | 'many';

/**
 * Items a field may hold (default: no limit beyond MAX_EMPTY_ITEMS for inputs without data), checked
 * from its shape before anything is allocated per item; `why` says what sets the limit.
 */
export interface ItemLimit {
  items: number;
  why: string;
}

/** Decodes an embedding field of a JSON body. `dim`, when known, is checked here (so the field is named). */
export function decodeEmbeddings(
  value: unknown,
  field: string,
  arity: Arity,
  dim?: number,
  limit?: ItemLimit,
): PackedTokens {
  return toFloat32(readEmbeddings(value, field, arity, dim, limit));
}

/** Reads and checks an embedding field of a JSON body, leaving float16 / bfloat16 undecoded. */
export function readEmbeddings(
  value: unknown,
  field: string,
  arity: Arity,
  dim?: number,
  limit?: ItemLimit,
): EncodedTokens {
  if (Array.isArray(value)) return decodeNested(value, field, arity, dim, limit);
  if (typeof value === 'object' && value !== null && 'b64' in value)
    return readB64(value as B64Tensor, field, arity, dim, limit);
  throw new InvalidArgumentError(
    field,
    arity === 'one'
      ? 'a [tokens][dim] array of numbers or {b64, dtype, shape: [L, d]}'
      : 'a [items][tokens][dim] array of numbers or {b64, dtype, shape: [n, L, d]}',
    describe(value),
  );
}

/** Row `row` checked (`dim` finite float32 numbers) and written at element `at` of `out`. */
function checkRow(row: unknown, field: string, dim: number, out: Float32Array, at: number) {
  if (!Array.isArray(row)) throw new InvalidArgumentError(field, `an array of ${dim} numbers`, describe(row));
  if (row.length !== dim)
    throw new InvalidArgumentError(
      field,
      `${dim} numbers (the embedding dimension)`,
      `${row.length} number${row.length === 1 ? '' : 's'}`,
    );
  for (let j = 0; j < dim; j++) {
    const x = row[j];
    // checked as the float32 it becomes: JSON has no NaN, but 1e999 parses to Infinity and 1e39 (or
    // 3.5e38) is a finite float64 that rounds to Infinity in float32
    if (typeof x !== 'number') throw notFinite(field, j, x);
    const f = Math.fround(x);
    if (f - f !== 0) throw notFinite(field, j, x);
    out[at + j] = f;
  }
}

function notFinite(field: string, j: number, x: unknown): InvalidArgumentError {
  return new InvalidArgumentError(
    `${field}[${j}]`,
    'a finite float32 number (|x| < 3.4028235e38)',
    describe(x),
  );
}

/** [tokens][dim] numbers (one item) rather than [items][tokens][dim]: the first token row holds numbers. */
function isOneItem(value: unknown[]): boolean {
  const first = value[0];
  return Array.isArray(first) && first.length > 0 && typeof first[0] === 'number';
}

function decodeNested(
  value: unknown[],
  field: string,
  arity: Arity,
  dim?: number,
  limit?: ItemLimit,
): EncodedTokens {
  const one = arity === 'one' || isOneItem(value);
  const items = one ? [value] : value;
  if (limit && items.length > limit.items)
    throw new ItemLimitError(field, items.length, limit.items, limit.why);
  // the items and the dimension first (no number read), then one float32 buffer filled in place:
  // a growing number[] copied into a Float32Array cost ~3x the loop
  let d = dim;
  let tokens = 0;
  const offsets = [0];
  for (let i = 0; i < items.length; i++) {
    const item = items[i];
    const itemField = one ? field : `${field}[${i}]`;
    if (!Array.isArray(item))
      throw new InvalidArgumentError(itemField, 'an array of token vectors', describe(item));
    if (d === undefined && item.length > 0) {
      const row = item[0];
      if (!Array.isArray(row) || row.length === 0)
        throw new InvalidArgumentError(`${itemField}[0]`, 'a non-empty array of numbers', describe(row));
      d = row.length;
    }
    tokens += item.length;
    offsets.push(tokens);
  }
  if (d === undefined)
    throw new InvalidArgumentError(field, 'at least one token vector (to know the dimension)', 'none');
  const values = new Float32Array(tokens * d);
  for (let i = 0; i < items.length; i++) {
    const item = items[i] as unknown[];
    const itemField = one ? field : `${field}[${i}]`;
    for (let t = 0; t < item.length; t++)
      checkRow(item[t], `${itemField}[${t}]`, d, values, (offsets[i] + t) * d);
  }
  return { dtype: 'float32', values, offsets, dim: d };
}

function checkShape(shape: unknown, field: string, arity: Arity): number[] {
  const ranks = arity === 'one' ? [2] : [2, 3];
  const what = arity === 'one' ? '[L, d] (2 integers)' : '[n, L, d] (3 integers) or [L, d] for one item';
  if (!Array.isArray(shape) || !ranks.includes(shape.length))
    throw new InvalidArgumentError(`${field}.shape`, what, describe(shape));
  const rank = shape.length;
  shape.forEach((s, i) => {
    if (!Number.isSafeInteger(s) || s < 0 || (i === rank - 1 && s < 1))
      throw new InvalidArgumentError(
        `${field}.shape[${i}]`,
        i === rank - 1 ? 'a positive integer' : 'a non-negative integer',
        describe(s),
      );
  });
  return shape as number[];
}

/** A typed view of little-endian bytes in `dtype` (a copy only where the bytes are not aligned). */
function floatsOf(bytes: Uint8Array, dtype: FloatDType): Float32Array | Uint16Array {
  if (!isLittleEndian)
    throw new Error('base64 tensors are little-endian: big-endian hosts are not supported');
  const size = DTYPE_BYTES[dtype];
  let b = bytes;
  if (b.byteOffset % size !== 0) {
    b = new Uint8Array(bytes.length);
    b.set(bytes);
  }
  const n = b.length / size;
  return dtype === 'float32'
    ? new Float32Array(b.buffer, b.byteOffset, n)
    : new Uint16Array(b.buffer, b.byteOffset, n);
}

/**
 * The admission check of a dense shape, before its bytes are decoded: items within the limit, and
 * an empty tensor (a zero-length axis) claiming at most MAX_EMPTY_ITEMS items.
 */
function admitShape(shape: readonly number[], field: string, limit?: ItemLimit) {
  const items = shape.length === 3 ? shape[0] : 1;
  if (limit && items > limit.items)
    throw new ItemLimitError(`${field}.shape[0]`, items, limit.items, limit.why);
  checkEmptyItems(items, shapeElements(shape), `${field}.shape`);
}

function shapeElements(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

function readB64(t: B64Tensor, field: string, arity: Arity, dim?: number, limit?: ItemLimit): EncodedTokens {
  if (typeof t.b64 !== 'string')
    throw new InvalidArgumentError(`${field}.b64`, 'a base64 string', describe(t.b64));
  const dtype = DTYPE_ALIASES[t.dtype ?? 'float32'];
  if (dtype === undefined || !Object.hasOwn(DTYPE_ALIASES, t.dtype ?? 'float32'))
    throw new InvalidArgumentError(`${field}.dtype`, "'float32', 'float16' or 'bfloat16'", describe(t.dtype));
  const shape = checkShape(t.shape, field, arity);
  admitShape(shape, field, limit);
  // Buffer's decoder skips what is not base64; the string is canonical standard base64 exactly when
  // the bytes encode back to it (native both ways: a regex over large bodies cost the server ~9%)
  const bytes = Buffer.from(t.b64, 'base64');
  if (bytes.toString('base64') !== t.b64)
    throw new InvalidArgumentError(
      `${field}.b64`,
      'standard base64 (A-Z a-z 0-9 + /, padded with =)',
      `invalid base64 (${t.b64.length} characters)`,
    );
  const need = shapeElements(shape) * DTYPE_BYTES[dtype];
  if (bytes.length !== need)
    throw new InvalidArgumentError(
      `${field}.b64`,
      `${need} bytes (shape [${shape.join(', ')}] of ${dtype})`,
      `${bytes.length} bytes`,
    );
  return packDense(floatsOf(bytes, dtype), dtype, shape, t.lengths, field, dim);
}

/** Decodes a .npy body ([L, d] for 'one'; [n, L, d], or [L, d] as one item, for 'many'). */
export function decodeNpy(
  bytes: Uint8Array,
  field: string,
  arity: Arity,
  dim?: number,
  limit?: ItemLimit,
): PackedTokens {
  return toFloat32(readNpy(bytes, field, arity, dim, limit));
}

/** What a .npy body may hold. */
const NPY_DTYPES =
  "'<f4' or '<f2' (float32 or float16; bfloat16 goes in a JSON body as {b64, dtype: 'bfloat16', shape})";

/** Reads and checks a .npy body, leaving float16 undecoded. */
export function readNpy(
  bytes: Uint8Array,
  field: string,
  arity: Arity,
  dim?: number,
  limit?: ItemLimit,
): EncodedTokens {
  let arr: NpyArray;
  try {
    // the header first: its shape is admitted before the data is looked at
    // 16-bit integers read as 'bfloat16' (the library's u2As) only to be refused below in the
    // service's words: the library's hint names an option no HTTP client has
    const header = parseNpyHeader(bytes, field, { u2As: 'bfloat16' });
    if (header.dtype === 'bfloat16')
      throw new InvalidArgumentError(`${field}.dtype`, NPY_DTYPES, "'<u2' or '<i2' (16-bit integers)");
    const shape = checkShape(header.shape, field, arity);
    admitShape(shape, field, limit);
    arr = parseNpy(bytes, field);
  } catch (e) {
    if (e instanceof FormatError) throw new InvalidArgumentError(field, 'a valid .npy array', e.message);
    throw e;
  }
  const dtype = arr.dtype as FloatDType;
  if (!(dtype in DTYPE_BYTES)) throw new InvalidArgumentError(`${field}.dtype`, NPY_DTYPES, arr.dtype);
  const shape = arr.shape;
  return packDense(arr.data as Float32Array | Uint16Array, dtype, shape, undefined, field, dim);
}

function packDense(
  values: Float32Array | Uint16Array,
  dtype: FloatDType,
  shape: number[],
  lengths: number[] | undefined,
  field: string,
  dim?: number,
): EncodedTokens {
  const d = shape[shape.length - 1];
  if (dim !== undefined && d !== dim)
    throw new InvalidArgumentError(
      `${field}.shape[${shape.length - 1}]`,
      `${dim} (the embedding dimension)`,
      String(d),
    );
  const bad = firstNonFinite(values, dtype);
  if (bad >= 0)
    throw new InvalidArgumentError(
      field,
      'finite values',
      `a non-finite value (${valueAt(values, dtype, bad)}) at element ${bad}`,
    );
  if (shape.length === 2) {
    if (lengths !== undefined)
      throw new InvalidArgumentError(`${field}.lengths`, 'no lengths for one [L, d] item', 'lengths');
    return { dtype, values, offsets: [0, shape[0]], dim: d };
  }
  const [n, L] = shape;
  if (lengths === undefined) {
    const offsets = new Array<number>(n + 1);
    for (let i = 0; i <= n; i++) offsets[i] = i * L;
    return { dtype, values, offsets, dim: d };
  }
  if (!Array.isArray(lengths) || lengths.length !== n)
    throw new InvalidArgumentError(`${field}.lengths`, `${n} integers (one per item)`, describe(lengths));
  // every length checked before the packed buffer is sized from them
  let total = 0;
  lengths.forEach((l, i) => {
    if (!Number.isInteger(l) || l < 0 || l > L)
      throw new InvalidArgumentError(`${field}.lengths[${i}]`, `an integer in [0, ${L}]`, describe(l));
    total += l;
  });
  const offsets = [0];
  const packed = dtype === 'float32' ? new Float32Array(total * d) : new Uint16Array(total * d);
  let at = 0;
  lengths.forEach((l, i) => {
    packed.set(values.subarray(i * L * d, (i * L + l) * d) as never, at * d);
    at += l;
    offsets.push(at);
  });
  return { dtype, values: packed, offsets, dim: d };
}

// One loop per dtype, each over one array type: a loop shared by several typed-array kinds goes
// megamorphic in V8 and cost ~10x (the decode took 30-80 us of a 32 x 128 query's ~200 us on the JS
// thread before).

/** Index of the first NaN / infinity, or -1 (float16 / bfloat16: the exponent bits all ones). */
function firstNonFinite(values: Float32Array | Uint16Array, dtype: FloatDType): number {
  const codec = nativeCodec();
  if (codec) return codec.firstNonFinite(values, dtype === 'bfloat16');
  if (dtype === 'float32') return firstNonFiniteF32(values as Float32Array);
  return firstAllOnes(values as Uint16Array, dtype === 'float16' ? 0x7c00 : 0x7f80);
}

function firstNonFiniteF32(v: Float32Array): number {
  for (let i = 0; i < v.length; i++) if (v[i] - v[i] !== 0) return i;
  return -1;
}

function firstAllOnes(bits: Uint16Array, mask: number): number {
  for (let i = 0; i < bits.length; i++) if ((bits[i] & mask) === mask) return i;
  return -1;
}

function valueAt(values: Float32Array | Uint16Array, dtype: FloatDType, i: number): number {
  if (dtype === 'float32') return values[i];
  if (dtype === 'float16') return f16BitsToFloat(values[i]);
  return new Float32Array(new Uint32Array([values[i] << 16]).buffer)[0];
}

function f16Into(bits: Uint16Array, out: Float32Array, at: number) {
  const table = f16Table();
  for (let i = 0; i < bits.length; i++) out[at + i] = table[bits[i]];
}

function bf16Into(bits: Uint16Array, out: Float32Array, at: number) {
  // a bfloat16 is the top half of a float32: place the bits (exact)
  const words = new Uint32Array(out.buffer, out.byteOffset + at * 4, bits.length);
  for (let i = 0; i < bits.length; i++) words[i] = bits[i] << 16;
}

/** The first `tokens * dim` values of `p`, decoded to float32 at element `at` of `out`. */
function decodeInto(p: EncodedTokens, count: number, out: Float32Array, at: number) {
  const src = p.values.subarray(0, count);
  const codec = nativeCodec();
  if (p.dtype === 'float32') out.set(src as Float32Array, at);
  else if (codec) codec.decode16(src as Uint16Array, p.dtype === 'bfloat16', out, at);
  else if (p.dtype === 'float16') f16Into(src as Uint16Array, out, at);
  else bf16Into(src as Uint16Array, out, at);
}

/** Encoded items as float32 (float32 input is used as it is). */
export function toFloat32(p: EncodedTokens): PackedTokens {
  if (p.dtype === 'float32') return { data: p.values as Float32Array, offsets: p.offsets, dim: p.dim };
  const data = new Float32Array(p.values.length);
  decodeInto(p, p.values.length, data, 0);
  return { data, offsets: p.offsets, dim: p.dim };
}

/** Several sets of items decoded and concatenated into one float32 buffer (the batcher's one pass). */
export function concatEncoded(parts: readonly EncodedTokens[], dim: number): PackedTokens {
  let tokens = 0;
  for (const p of parts) tokens += p.offsets[p.offsets.length - 1];
  const data = new Float32Array(tokens * dim);
  const offsets = new Array<number>(1);
  offsets[0] = 0;
  let at = 0;
  for (const p of parts) {
    const n = p.offsets[p.offsets.length - 1];
    decodeInto(p, n * dim, data, at * dim);
    for (let i = 1; i < p.offsets.length; i++) offsets.push(at + p.offsets[i]);
    at += n;
  }
  return { data, offsets, dim };
}

/**
 * Several sets of float16 (or bfloat16) items concatenated as they are, bits copied (no decode): for a
 * backend that takes those bits, e.g. a GPU corpus of the same dtype (float32 queries would be rounded
 * to exactly these bits there, to-nearest-even, so the scores are the same).
 */
export function concatBits(parts: readonly EncodedTokens[], dim: number): EncodedTokens {
  const dtype = parts[0].dtype;
  let tokens = 0;
  for (const p of parts) {
    if (p.dtype !== dtype || dtype === 'float32')
      throw new Error(`concatBits: every part ${dtype} bits, not ${p.dtype}`);
    tokens += p.offsets[p.offsets.length - 1];
  }
  const values = new Uint16Array(tokens * dim);
  const offsets = new Array<number>(1);
  offsets[0] = 0;
  let at = 0;
  for (const p of parts) {
    const n = p.offsets[p.offsets.length - 1];
    values.set((p.values as Uint16Array).subarray(0, n * dim), at * dim);
    for (let i = 1; i < p.offsets.length; i++) offsets.push(at + p.offsets[i]);
    at += n;
  }
  return { dtype, values, offsets, dim };
}

/** Several packed float32 sets concatenated. */
export function concatPacked(parts: readonly PackedTokens[], dim: number): PackedTokens {
  return concatEncoded(
    parts.map((p) => ({ dtype: 'float32', values: p.data, offsets: p.offsets, dim: p.dim })),
    dim,
  );
}

/** Items [from, to) of an encoded set (a view of its values; offsets rebased to 0). */
export function sliceItems(p: EncodedTokens, from: number, to: number): EncodedTokens {
  const base = p.offsets[from];
  const offsets = p.offsets.slice(from, to + 1).map((o) => o - base);
  const values = p.values.subarray(base * p.dim, p.offsets[to] * p.dim);
  return { dtype: p.dtype, values, offsets, dim: p.dim };
}

/** Number of items of a packed set. */
export function itemCount(p: { offsets: readonly number[] }): number {
  return p.offsets.length - 1;
}
