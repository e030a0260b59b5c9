// Token matrices and token batches: the data model every operator takes.
//
// A token matrix is one item (a query or a document): L tokens of dimension d, row-major.
// A token batch is many items, either dense [B, L, d] (optionally with per-item lengths <= L) or
// ragged: a packed [T, d] buffer plus offsets [B+1] into it. Offsets are token indices held as
// float64 (exact to 2^53) or BigInt64, so element indices beyond 2^31 stay exact.
//
// Every batch normalizes to `spans`: per item, the first token index and the token count. That is
// the one shape the native engines consume, so dense, padded and ragged inputs share one code path.

import { checkEmptyItems } from './admission.js';
import { InvalidArgumentError } from './errors.js';

export type FloatDType = 'float32' | 'float16' | 'bfloat16';
export type DType = FloatDType | 'int8';

/** Backing storage per dtype: float32 values, float16/bfloat16 raw bits, int8 values. */
export type TokenData = Float32Array | Uint16Array | Int8Array;

/**
 * What the constructors take as token data: the storage types (kept as they are, zero-copy), plus
 * Float64Array and number[] (what JSON gives), converted to float32 (or to the float16 / bfloat16
 * bits named by `dtype`) at the cost of one copy, so later writes to them are not seen. Any typed
 * array type-checks, so that `readNpy(...).data` passes without a cast; integer arrays other than
 * Int8Array are refused at run time with an InvalidArgumentError.
 */
export type TokenInput = TokenData | Float64Array | readonly number[] | ArrayBufferView;

export interface TokenMatrix {
  readonly kind: 'matrix';
  readonly dtype: DType;
  readonly data: TokenData;
  /** Number of tokens (rows). */
  readonly length: number;
  /** Embedding dimension (columns). */
  readonly dim: number;
  /** int8 only: one float32 scale per token; value = data * scale. */
  readonly scales?: Float32Array;
  /**
   * int8 documents quantized with `center` (src/ops/center.ts): the [dim] vector subtracted from every
   * token before quantizing; value = data * scale + mean. Scoring adds each query's shift back.
   */
  readonly mean?: Float32Array;
}

export interface TokenBatch {
  readonly kind: 'batch';
  readonly layout: 'dense' | 'ragged';
  readonly dtype: DType;
  readonly data: TokenData;
  readonly dim: number;
  /** Number of items B. */
  readonly count: number;
  /** Dense only: tokens per item slot (L). Ragged: the longest item. */
  readonly maxLength: number;
  /** First token of each item (token index into data, float64-exact). */
  readonly starts: Float64Array;
  /** Token count of each item. */
  readonly lengths: Int32Array;
  /** int8 only: one float32 scale per token of `data`. */
  readonly scales?: Float32Array;
  /** int8 documents quantized with `center`: value = data * scale + mean (see TokenMatrix.mean). */
  readonly mean?: Float32Array;
}

export interface ValidationOptions {
  /** Scan for NaN / Infinity (default true). Turn off for trusted input. */
  checkFinite?: boolean;
}

export interface DtypeOptions extends ValidationOptions {
  /** Required when data is a Uint16Array (float16 or bfloat16 bits); inferred otherwise. */
  dtype?: DType;
  /** int8 only. */
  scales?: Float32Array;
}

export interface ViewOptions extends DtypeOptions {
  /**
   * The data is a larger buffer: only the part the shape (or the offsets) names is read, and a
   * buffer longer than that is accepted (default false: its length must match the shape exactly).
   */
  view?: boolean;
}

/** The `view` option: true, false or absent. */
function viewOf(options: ViewOptions): boolean {
  const view = options.view === undefined ? false : options.view;
  if (typeof view !== 'boolean') throw new InvalidArgumentError('view', 'true or false', describe(view));
  return view;
}

const MAX_SAFE = Number.MAX_SAFE_INTEGER;

/** Bytes per element of each dtype. */
export function dtypeSize(dtype: DType): number {
  return dtype === 'float32' ? 4 : dtype === 'int8' ? 1 : 2;
}

// Float16Array exists on newer runtimes (Node >= 24 behind no flag); accept it as float16 bits.
const Float16ArrayCtor: (new (...args: never[]) => ArrayBufferView) | undefined = (
  globalThis as unknown as { Float16Array?: new (...args: never[]) => ArrayBufferView }
).Float16Array;

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  if (ArrayBuffer.isView(value)) {
    const v = value as ArrayBufferView & { length?: number };
    return `${value.constructor.name}(${v.length ?? v.byteLength})`;
  }
  if (Array.isArray(value)) return `Array(${value.length})`;
  if (typeof value === 'number') return String(value);
  if (typeof value === 'string') return JSON.stringify(value);
  return typeof value;
}

/** A number for an error message; beyond 2^32 also as a power of two, so 2^62 reads as such. */
export function describeNumber(value: number | bigint): string {
  const text = String(value);
  const n = typeof value === 'bigint' ? Number(value) : value;
  if (!Number.isFinite(n) || Math.abs(n) < 2 ** 32) return text;
  const log = Math.log2(Math.abs(n));
  const power = Number.isInteger(log) ? `2^${log}` : `about 2^${log.toFixed(1)}`;
  return `${text} (${n < 0 ? '-' : ''}${power})`;
}

export function expectInteger(name: string, value: unknown, min: number, max = MAX_SAFE): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    const range = max === MAX_SAFE ? `>= ${min}` : `in [${min}, ${max}]`;
    throw new InvalidArgumentError(name, `an integer ${range}`, describe(value));
  }
  return value;
}

/** The largest embedding dimension the engines take (README: limits). */
export const MAX_DIM = 2 ** 20;

function expectDim(dim: unknown): number {
  if (typeof dim !== 'number' || !Number.isInteger(dim) || dim < 1 || dim > MAX_DIM)
    throw new InvalidArgumentError(
      'dim',
      'an integer in [1, 2^20] (1,048,576: the largest dimension the engines take)',
      describe(dim),
    );
  return dim;
}

/** Checks an optional options argument: undefined gives {}, anything but an object is refused by name. */
export function optionsObject<T extends object>(options: T | undefined | null, what: string): T {
  if (options === undefined) return {} as T;
  return expectOptions(options, what) as T;
}

/** Accepts any supported typed array and returns (storage, dtype). */
function normalizeData(
  name: string,
  data: unknown,
  dtype: DType | undefined,
): { data: TokenData; dtype: DType } {
  if (Float16ArrayCtor && data instanceof Float16ArrayCtor) {
    if (dtype && dtype !== 'float16')
      throw new InvalidArgumentError(`${name}.dtype`, "'float16' for a Float16Array", dtype);
    const v = data as ArrayBufferView;
    return { data: new Uint16Array(v.buffer, v.byteOffset, v.byteLength / 2), dtype: 'float16' };
  }
  if (data instanceof Float32Array) {
    if (dtype && dtype !== 'float32')
      throw new InvalidArgumentError(`${name}.dtype`, "'float32' for a Float32Array", dtype);
    return { data, dtype: 'float32' };
  }
  if (data instanceof Uint16Array) {
    if (dtype !== 'float16' && dtype !== 'bfloat16') {
      throw new InvalidArgumentError(
        `${name}.dtype`,
        "'float16' or 'bfloat16' for a Uint16Array of raw bits",
        describe(dtype),
      );
    }
    return { data, dtype };
  }
  if (data instanceof Int8Array) {
    if (dtype && dtype !== 'int8')
      throw new InvalidArgumentError(`${name}.dtype`, "'int8' for an Int8Array", dtype);
    return { data, dtype: 'int8' };
  }
  if (data instanceof Float64Array || Array.isArray(data)) {
    // converted (one copy): float32 values, or the bits of the float dtype asked for
    if (dtype === 'int8')
      throw new InvalidArgumentError(
        `${name}.dtype`,
        'a float dtype for float64 / number[] values (int8 data comes as an Int8Array with scales)',
        "'int8'",
      );
    if (Array.isArray(data)) {
      for (let i = 0; i < data.length; i++)
        if (typeof data[i] !== 'number')
          throw new InvalidArgumentError(`${name}[${i}]`, 'a number', describe(data[i]));
    }
    checkEncodable(data as ArrayLike<number>, 'float32', { name });
    const values = Float32Array.from(data as ArrayLike<number>);
    const target = dtype ?? 'float32';
    return { data: encodeFloats(values, target, { name }), dtype: target };
  }
  throw new InvalidArgumentError(
    name,
    'a Float32Array, Uint16Array (float16/bfloat16 bits), Float16Array, Int8Array, Float64Array or number[]',
    describe(data),
  );
}

function checkScales(
  name: string,
  dtype: DType,
  scales: Float32Array | undefined,
  tokens: number,
  checkFinite: boolean,
) {
  if (dtype !== 'int8') {
    if (scales !== undefined)
      throw new InvalidArgumentError(`${name}.scales`, 'no scales for a non-int8 dtype', describe(scales));
    return;
  }
  if (!(scales instanceof Float32Array))
    throw new InvalidArgumentError(
      `${name}.scales`,
      'a Float32Array (one scale per token) for int8 data',
      describe(scales),
    );
  if (scales.length < tokens)
    throw new InvalidArgumentError(
      `${name}.scales`,
      `at least ${tokens} scales (one per token)`,
      `${scales.length}`,
    );
  if (checkFinite) {
    for (let i = 0; i < tokens; i++) {
      const s = scales[i];
      if (!Number.isFinite(s) || s < 0)
        throw new InvalidArgumentError(`${name}.scales[${i}]`, 'a finite non-negative scale', String(s));
    }
  }
}

const f16Exp = 0x7c00;
/** Index of the first non-finite element among the first `count` elements, or -1. */
export function findNonFinite(data: TokenData, dtype: DType, count: number): number {
  if (dtype === 'int8') return -1;
  if (dtype === 'float32') {
    const f = data as Float32Array;
    for (let i = 0; i < count; i++) {
      // x - x is NaN exactly for NaN and +-Infinity.
      if (f[i] - f[i] !== 0) return i;
    }
    return -1;
  }
  const u = data as Uint16Array;
  const mask = dtype === 'float16' ? f16Exp : 0x7f80;
  for (let i = 0; i < count; i++) if ((u[i] & mask) === mask) return i;
  return -1;
}

function checkFiniteData(name: string, data: TokenData, dtype: DType, count: number, dim: number) {
  const bad = findNonFinite(data, dtype, count);
  if (bad >= 0) {
    const token = Math.floor(bad / dim);
    throw new InvalidArgumentError(
      name,
      'finite values (pass checkFinite: false to skip this scan for trusted input)',
      `a non-finite value at token ${token}, component ${bad - token * dim}`,
    );
  }
}

/**
 * One item: `length` tokens of dimension `dim`, row-major; `data` holds exactly length x dim elements,
 * or at least that many with `view: true` (the rest is never read).
 */
export function tokenMatrix(
  data: TokenInput,
  length: number,
  dim: number,
  options: ViewOptions = {},
): TokenMatrix {
  return matrixOf(data, length, dim, options);
}

/** The buffer's length against the shape: exact, or at least (a view). */
function checkLength(have: number, need: number, shape: string, view: boolean) {
  if (view ? have >= need : have === need) return;
  throw new InvalidArgumentError(
    'data',
    view
      ? `at least ${need} elements (${shape})`
      : `exactly ${need} elements (${shape}; a larger buffer is a view: pass { view: true })`,
    `${have}`,
  );
}

function matrixOf(data: TokenInput, length: number, dim: number, options: ViewOptions): TokenMatrix {
  expectOptions(options, 'dtype, scales, checkFinite, view, all optional');
  const view = viewOf(options);
  const n = normalizeData('data', data, options.dtype);
  expectInteger('length', length, 0);
  expectDim(dim);
  const need = length * dim;
  checkLength(n.data.length, need, `length ${length} x dim ${dim}`, view);
  const checkFinite = options.checkFinite ?? true;
  checkScales('matrix', n.dtype, options.scales, length, checkFinite);
  if (checkFinite) checkFiniteData('data', n.data, n.dtype, need, dim);
  return { kind: 'matrix', dtype: n.dtype, data: n.data, length, dim, scales: options.scales };
}

export interface DenseBatchOptions extends ViewOptions {
  /** B: number of items. */
  count: number;
  /** L: tokens per item slot. */
  length: number;
  dim: number;
  /** Real tokens per item (<= length); the rest is padding and never scored. */
  lengths?: ArrayLike<number>;
}

/**
 * Dense batch [B, L, d] with optional per-item lengths; `data` holds exactly B x L x d elements, or at
 * least that many with `view: true` (the rest is never read).
 */
export function denseBatch(data: TokenInput, options: DenseBatchOptions): TokenBatch {
  return dense(data, options);
}

function dense(data: TokenInput, options: DenseBatchOptions): TokenBatch {
  expectOptions(options, 'with count, length and dim, e.g. { count: 8, length: 32, dim: 128 }');
  const view = viewOf(options);
  const n = normalizeData('data', data, options.dtype);
  const count = expectInteger('count', options.count, 0, 2 ** 31 - 1);
  const length = expectInteger('length', options.length, 0, 2 ** 31 - 1);
  const dim = expectDim(options.dim);
  const need = count * length * dim;
  checkLength(n.data.length, need, `count ${count} x length ${length} x dim ${dim}`, view);
  // items without data are not bounded by the buffer: bounded here, before the per-item arrays
  checkEmptyItems(count, need, 'count');
  const starts = new Float64Array(count);
  const lengths = new Int32Array(count);
  if (options.lengths !== undefined) {
    const given = options.lengths;
    if (given.length !== count)
      throw new InvalidArgumentError('lengths', `${count} entries (one per item)`, `${given.length}`);
    for (let b = 0; b < count; b++) {
      const l = given[b];
      if (!Number.isInteger(l) || l < 0 || l > length) {
        throw new InvalidArgumentError(
          `lengths[${b}]`,
          `an integer in [0, ${length}] (the capacity)`,
          String(l),
        );
      }
      lengths[b] = l;
    }
  } else {
    lengths.fill(length);
  }
  for (let b = 0; b < count; b++) starts[b] = b * length;
  const checkFinite = options.checkFinite ?? true;
  checkScales('batch', n.dtype, options.scales, count * length, checkFinite);
  if (checkFinite) {
    for (let b = 0; b < count; b++) {
      const bad = findNonFinite(
        n.data.subarray(starts[b] * dim, (starts[b] + lengths[b]) * dim) as TokenData,
        n.dtype,
        lengths[b] * dim,
      );
      if (bad >= 0) {
        throw new InvalidArgumentError(
          'data',
          'finite values (pass checkFinite: false to skip this scan for trusted input)',
          `a non-finite value in item ${b}, token ${Math.floor(bad / dim)}`,
        );
      }
    }
  }
  return {
    kind: 'batch',
    layout: 'dense',
    dtype: n.dtype,
    data: n.data,
    dim,
    count,
    maxLength: length,
    starts,
    lengths,
    scales: options.scales,
  };
}

/**
 * Token offsets: any typed array or number[] of integers (BigInt64Array / BigUint64Array / Float64Array
 * keep 64-bit offsets exact to 2^53); `readNpy(...).data` of an offsets file passes as it is.
 */
export type Offsets = ArrayLike<number> | ArrayLike<bigint>;

export interface RaggedBatchOptions extends ViewOptions {
  dim: number;
}

/** Throws unless `options` is an object (a missing options argument names itself, not a TypeError). */
function expectOptions<T>(options: T, what: string): NonNullable<T> {
  if (typeof options !== 'object' || options === null)
    throw new InvalidArgumentError('options', `an options object (${what})`, describe(options));
  return options as NonNullable<T>;
}

/**
 * Ragged batch: packed tokens [T, d] and offsets [B+1]; item b is tokens offsets[b] .. offsets[b+1].
 *
 * The offsets contract, the same for every entry point (this function, files given to the CLI with
 * --doc-offsets, corpus build): B+1 integers, offsets[0] = 0, non-decreasing, offsets[B] = T, the token
 * count of `data` (data.length / dim). For int8, `scales` holds exactly T scales.
 *
 * `view: true`: the offsets index a part of a larger buffer, non-decreasing inside [0, T], not
 * required to start at 0 or end at T (tokens outside offsets[0] .. offsets[B] are never read); for
 * int8, `scales` holds at least T scales (one per token of the buffer).
 */
export function raggedBatch(data: TokenInput, offsets: Offsets, options: RaggedBatchOptions): TokenBatch {
  const checked = expectOptions(options, 'with dim, e.g. { dim: 128 }');
  return ragged(data, offsets, checked, viewOf(checked));
}

function ragged(data: TokenInput, offsets: Offsets, options: RaggedBatchOptions, view: boolean): TokenBatch {
  const n = normalizeData('data', data, options.dtype);
  const dim = expectDim(options.dim);
  if (!(Array.isArray(offsets) || ArrayBuffer.isView(offsets))) {
    throw new InvalidArgumentError(
      'offsets',
      'a BigInt64Array, Float64Array, Int32Array, Uint32Array or number[] of B+1 token offsets',
      describe(offsets),
    );
  }
  if (offsets.length < 1)
    throw new InvalidArgumentError(
      'offsets',
      'at least 1 entry (B+1 offsets, [0] for no items)',
      '0 entries',
    );
  if (n.data.length % dim !== 0) {
    throw new InvalidArgumentError(
      'data',
      `a length divisible by dim ${dim} (packed [T, d])`,
      `${n.data.length}`,
    );
  }
  const totalTokens = n.data.length / dim;
  const count = offsets.length - 1;
  const starts = new Float64Array(count);
  const lengths = new Int32Array(count);
  let prev = 0;
  let maxLength = 0;
  for (let i = 0; i <= count; i++) {
    const raw = offsets[i] as number | bigint;
    const o = typeof raw === 'bigint' ? Number(raw) : raw;
    if (!Number.isInteger(o) || o < 0 || o > MAX_SAFE)
      throw new InvalidArgumentError(`offsets[${i}]`, 'a non-negative integer', describeNumber(raw));
    if (i === 0 && !view && o !== 0)
      throw new InvalidArgumentError(
        'offsets[0]',
        '0 (offsets start at the first token of data; pass { view: true } for a view into a larger buffer)',
        describeNumber(raw),
      );
    if (i > 0 && o < prev)
      throw new InvalidArgumentError(
        `offsets[${i}]`,
        `a value >= offsets[${i - 1}] = ${prev} (offsets must be non-decreasing)`,
        describeNumber(raw),
      );
    if (o > totalTokens)
      throw new InvalidArgumentError(
        `offsets[${i}]`,
        `a value <= ${totalTokens} (the tokens in data)`,
        describeNumber(raw),
      );
    if (i > 0) {
      const len = o - prev;
      if (len > 0x7fffffff)
        throw new InvalidArgumentError(
          `item ${i - 1} (offsets[${i}] - offsets[${i - 1}])`,
          'fewer than 2^31 tokens per item',
          describeNumber(len),
        );
      starts[i - 1] = prev;
      lengths[i - 1] = len;
      if (len > maxLength) maxLength = len;
    }
    prev = o;
  }
  if (!view && prev !== totalTokens)
    throw new InvalidArgumentError(
      `offsets[${count}]`,
      `the token count ${totalTokens} of data (offsets end at the last token: data.length ${n.data.length} / dim ${dim}; pass { view: true } for a view into a larger buffer)`,
      describeNumber(offsets[count] as number | bigint),
    );
  const checkFinite = options.checkFinite ?? true;
  if (
    !view &&
    n.dtype === 'int8' &&
    options.scales instanceof Float32Array &&
    options.scales.length !== totalTokens
  )
    throw new InvalidArgumentError(
      'batch.scales',
      `exactly ${totalTokens} scales (one per token of data)`,
      `${options.scales.length}`,
    );
  checkScales('batch', n.dtype, options.scales, totalTokens, checkFinite);
  if (checkFinite) {
    const first = count > 0 ? starts[0] : prev;
    const bad = findNonFinite(
      n.data.subarray(first * dim, prev * dim) as TokenData,
      n.dtype,
      (prev - first) * dim,
    );
    if (bad >= 0) {
      const token = first + Math.floor(bad / dim);
      throw new InvalidArgumentError(
        'data',
        'finite values (pass checkFinite: false to skip this scan for trusted input)',
        `a non-finite value at token ${token}, component ${bad % dim}`,
      );
    }
  }
  return {
    kind: 'batch',
    layout: 'ragged',
    dtype: n.dtype,
    data: n.data,
    dim,
    count,
    maxLength,
    starts,
    lengths,
    scales: options.scales,
  };
}

/** A single matrix seen as a batch of one item (zero-copy). */
export function matrixAsBatch(m: TokenMatrix): TokenBatch {
  return {
    kind: 'batch',
    layout: 'dense',
    dtype: m.dtype,
    data: m.data,
    dim: m.dim,
    count: 1,
    maxLength: m.length,
    starts: new Float64Array([0]),
    lengths: new Int32Array([m.length]),
    scales: m.scales,
    ...(m.mean ? { mean: m.mean } : {}),
  };
}

/** Item `index` of a batch as a matrix (zero-copy view). */
export function batchItem(batch: TokenBatch, index: number): TokenMatrix {
  expectInteger('index', index, 0, batch.count - 1);
  const s = batch.starts[index];
  const l = batch.lengths[index];
  const data = batch.data.subarray(s * batch.dim, (s + l) * batch.dim) as TokenData;
  const scales = batch.scales?.subarray(s, s + l);
  const item = { kind: 'matrix', dtype: batch.dtype, data, length: l, dim: batch.dim, scales } as const;
  return batch.mean ? { ...item, mean: batch.mean } : item;
}

/** The items `indices` of a batch, in that order, as a ragged batch over the same buffer (zero-copy). */
export function selectItems(batch: TokenBatch, indices: ArrayLike<number>): TokenBatch {
  const starts = new Float64Array(indices.length);
  const lengths = new Int32Array(indices.length);
  let maxLength = 0;
  for (let i = 0; i < indices.length; i++) {
    const b = expectInteger(`indices[${i}]`, indices[i], 0, batch.count - 1);
    starts[i] = batch.starts[b];
    lengths[i] = batch.lengths[b];
    if (lengths[i] > maxLength) maxLength = lengths[i];
  }
  return { ...batch, layout: 'ragged', count: indices.length, maxLength, starts, lengths };
}

/** Total real tokens of a batch. */
export function totalTokens(batch: TokenBatch): number {
  let t = 0;
  for (let b = 0; b < batch.count; b++) t += batch.lengths[b];
  return t;
}

export function isTokenMatrix(x: unknown): x is TokenMatrix {
  return typeof x === 'object' && x !== null && (x as TokenMatrix).kind === 'matrix';
}
export function isTokenBatch(x: unknown): x is TokenBatch {
  return typeof x === 'object' && x !== null && (x as TokenBatch).kind === 'batch';
}

/** Checks that queries and documents can be scored together. */
export function checkCompatible(
  queries: TokenMatrix | TokenBatch,
  docs: TokenBatch,
  qName = 'query',
  dName = 'docs',
) {
  if (!isTokenBatch(docs))
    throw new InvalidArgumentError(dName, 'a TokenBatch (denseBatch or raggedBatch)', describe(docs));
  if (!isTokenMatrix(queries) && !isTokenBatch(queries)) {
    throw new InvalidArgumentError(qName, 'a TokenMatrix or TokenBatch', describe(queries));
  }
  if (queries.dim !== docs.dim) {
    throw new InvalidArgumentError(
      `${qName}.dim`,
      `${docs.dim} (the dimension of ${dName})`,
      String(queries.dim),
    );
  }
}

// ---- float16 / bfloat16 conversion (used by io, the reference and tests; never on a hot path) ----

const f32buf = new Float32Array(1);
const u32buf = new Uint32Array(f32buf.buffer);

export function bf16BitsToFloat(bits: number): number {
  u32buf[0] = bits << 16;
  return f32buf[0];
}

/** Round-to-nearest-even float32 -> bfloat16 bits (NaN stays NaN). */
export function floatToBf16Bits(x: number): number {
  f32buf[0] = x;
  return bf16OfF32Bits(u32buf[0]);
}

/** floatToBf16Bits on the float32's bit pattern u (encodeFloats reads patterns in bulk). */
function bf16OfF32Bits(u: number): number {
  if ((u & 0x7fffffff) > 0x7f800000) return ((u >>> 16) | 0x40) & 0xffff;
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}

export function f16BitsToFloat(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/** Round-to-nearest-even float -> float16 bits. */
export function floatToF16Bits(x: number): number {
  f32buf[0] = x;
  return f16OfF32Bits(u32buf[0]);
}

/** floatToF16Bits on the float32's bit pattern u (encodeFloats reads patterns in bulk). */
function f16OfF32Bits(u: number): number {
  const sign = (u >>> 16) & 0x8000;
  const absU = u & 0x7fffffff;
  if (absU > 0x7f800000) return sign | 0x7e00;
  if (absU >= 0x47800000) return sign | 0x7c00; // overflow to infinity (>= 65536 after rounding is handled below)
  if (absU < 0x33000000) return sign; // below half the smallest subnormal
  const exp = absU >>> 23;
  if (exp < 113) {
    // subnormal half
    const mant = (absU & 0x7fffff) | 0x800000;
    const shift = 126 - exp;
    const half = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    const rounded = rem > mid || (rem === mid && half & 1) ? half + 1 : half;
    return sign | rounded;
  }
  const mant = absU & 0x7fffff;
  let h = ((exp - 112) << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && h & 1)) h += 1;
  if (h >= 0x7c00) return sign | 0x7c00;
  return sign | h;
}

/** Reads element i of token data as a number (int8 without its scale). */
export function elementReader(dtype: DType): (data: TokenData, i: number) => number {
  switch (dtype) {
    case 'float32':
    case 'int8':
      return (data, i) => data[i];
    case 'float16':
      return (data, i) => f16BitsToFloat(data[i]);
    case 'bfloat16':
      return (data, i) => bf16BitsToFloat(data[i]);
  }
}

/** What encodeFloats says about values it refuses: the argument's name, and dim to point at a token. */
export interface EncodeFloatsOptions {
  /** The argument the values came from (default 'values'). */
  name?: string;
  /** Elements per token: positions are then given as token and component. */
  dim?: number;
}

/**
 * Converts float32 values to storage of the given float dtype (round to nearest even). Finite values
 * the dtype cannot hold (they would become +-Infinity: |x| >= 65520 for float16) are refused with an
 * InvalidArgumentError naming the argument, how many there are and the first; encodeFloatsClamped
 * stores them as the largest finite value instead. NaN and +-Infinity convert as they are.
 */
export function encodeFloats(
  values: Float32Array,
  dtype: FloatDType,
  options: EncodeFloatsOptions = {},
): Float32Array | Uint16Array {
  // public: a number[] or another dtype name would otherwise convert silently to garbage
  if (!(values instanceof Float32Array))
    throw new InvalidArgumentError(options.name ?? 'values', 'a Float32Array', describe(values));
  if (dtype !== 'float32' && dtype !== 'float16' && dtype !== 'bfloat16')
    throw new InvalidArgumentError('dtype', "'float32', 'float16' or 'bfloat16'", describe(dtype));
  if (dtype === 'float32') return values;
  checkEncodable(values, dtype, options);
  return encodeFloatsUnchecked(values, dtype);
}

/**
 * Throws the InvalidArgumentError of encodeFloats when finite values of `values` would become
 * +-Infinity in `dtype`; for conversions made elsewhere (on the GPU) that must refuse the same values.
 */
export function checkEncodable(
  values: ArrayLike<number>,
  dtype: DType,
  options: EncodeFloatsOptions = {},
): void {
  if (dtype === 'int8') return;
  // float32: float64 values (number[], Float64Array) from 2^128 - 2^103 up round to +-Infinity
  const limit = dtype === 'float32' ? FLOAT32_OVERFLOW_AT : OVERFLOW_AT[dtype];
  const found = findBeyond(values, limit);
  if (!found) return;
  const { dim } = options;
  const at =
    dim !== undefined && dim >= 1
      ? `token ${Math.floor(found.first / dim)}, component ${found.first % dim}`
      : `index ${found.first}`;
  throw new InvalidArgumentError(
    options.name ?? 'values',
    `finite values within the ${dtype} range (|x| < ${limit}; larger ones would become +-Infinity)`,
    `${found.count} value${found.count === 1 ? '' : 's'} beyond it (the first, ${dtype === 'float32' ? found.value : shortestFloat32(found.value)}, at ${at})`,
  );
}

/** The shortest decimal that reads back as the same float32. */
function shortestFloat32(x: number): string {
  for (let p = 1; p < 9; p++) {
    const t = Number(x.toPrecision(p));
    if (Math.fround(t) === Math.fround(x)) return String(t);
  }
  return String(x);
}

function encodeFloatsUnchecked(values: Float32Array, dtype: 'float16' | 'bfloat16'): Uint16Array {
  const out = new Uint16Array(values.length);
  // The bit patterns through a view: no per-element round trip through a scratch float.
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  if (dtype === 'float16') for (let i = 0; i < bits.length; i++) out[i] = f16OfF32Bits(bits[i]);
  else for (let i = 0; i < bits.length; i++) out[i] = bf16OfF32Bits(bits[i]);
  return out;
}

/**
 * Float32 magnitudes from which a float dtype rounds to infinity: 65520 for float16 (its largest
 * finite value is 65504), 0x7f7f8000 read as a float for bfloat16 (largest finite 3.3895e38).
 */
export const OVERFLOW_AT: Readonly<Record<'float16' | 'bfloat16', number>> = {
  float16: 65520,
  bfloat16: 3.3961514278273526e38,
};
const MAX_FINITE_BITS = { float16: 0x7bff, bfloat16: 0x7f7f } as const;
const INFINITY_BITS = { float16: 0x7c00, bfloat16: 0x7f80 } as const;

/** Finite values that `dtype` cannot hold (they would round to +-Infinity): how many, and the first. */
export function findOverflow(
  values: ArrayLike<number>,
  dtype: FloatDType,
): { count: number; first: number; value: number } | undefined {
  if (dtype === 'float32') return undefined;
  return findBeyond(values, OVERFLOW_AT[dtype]);
}

const FLOAT32_OVERFLOW_AT = 3.4028235677973366e38;

function findBeyond(
  values: ArrayLike<number>,
  limit: number,
): { count: number; first: number; value: number } | undefined {
  let count = 0;
  let first = -1;
  for (let i = 0; i < values.length; i++) {
    const x = values[i];
    // NaN fails both comparisons; +-Infinity is not a finite value lost by the conversion
    if ((x >= limit || x <= -limit) && x !== Infinity && x !== -Infinity) {
      if (count++ === 0) first = i;
    }
  }
  return count === 0 ? undefined : { count, first, value: values[first] };
}

/**
 * encodeFloats, with finite values beyond the dtype's range clamped to its largest finite value
 * (same sign) instead of becoming infinite; returns the encoded data and how many were clamped.
 */
export function encodeFloatsClamped(
  values: Float32Array,
  dtype: FloatDType,
): { data: Float32Array | Uint16Array; clamped: number } {
  if (dtype === 'float32') return { data: values, clamped: 0 };
  const out = encodeFloatsUnchecked(values, dtype);
  let clamped = 0;
  for (let i = 0; i < out.length; i++) {
    if ((out[i] & 0x7fff) === INFINITY_BITS[dtype] && Number.isFinite(values[i])) {
      out[i] = (out[i] & 0x8000) | MAX_FINITE_BITS[dtype];
      clamped++;
    }
  }
  return { data: out, clamped };
}

/** Converts token data of any dtype to float32 values (int8 multiplied by its per-token scale). */
export function decodeToFloat32(
  data: TokenData,
  dtype: DType,
  dim: number,
  scales?: Float32Array,
): Float32Array {
  if (dtype === 'float32') return data as Float32Array;
  const out = new Float32Array(data.length);
  if (dtype === 'int8') {
    for (let i = 0; i < data.length; i++) out[i] = data[i] * (scales ? scales[Math.floor(i / dim)] : 1);
    return out;
  }
  if (dtype === 'bfloat16') {
    // a bfloat16 is the top half of a float32: place the bits (exact, NaN payloads included)
    const bits = new Uint32Array(out.buffer);
    for (let i = 0; i < data.length; i++) bits[i] = data[i] << 16;
    return out;
  }
  // float16: every one of the 65,536 values is exact in float32, so one table lookup per element
  const table = f16Table();
  for (let i = 0; i < data.length; i++) out[i] = table[data[i]];
  return out;
}

let f16Values: Float32Array | undefined;
/** f16BitsToFloat of every float16 bit pattern (built once, 256 KiB). */
export function f16Table(): Float32Array {
  if (!f16Values) {
    f16Values = new Float32Array(65536);
    for (let h = 0; h < 65536; h++) f16Values[h] = f16BitsToFloat(h);
  }
  return f16Values;
}

/** Scores of every query against every document: data[q * cols + b], rows = queries, cols = documents. */
export interface ScoreMatrix {
  readonly data: Float32Array;
  readonly rows: number;
  readonly cols: number;
}

/** One ranked hit: the document's index in its batch and its score. */
export interface Hit {
  index: number;
  score: number;
}
