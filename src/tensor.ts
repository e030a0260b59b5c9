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
import { describe } from './describe.js';
import { InvalidArgumentError } from './errors.js';
import {
  checkFiniteData,
  checkLength,
  checkScales,
  describeNumber,
  expectDim,
  expectInteger,
  expectOptions,
  findNonFinite,
  MAX_SAFE,
  normalizeData,
  viewOf,
} from './tensor-checks.js';

// The checks other modules use too, where they have always been imported from.
export { describeNumber, expectInteger, findNonFinite, MAX_DIM, optionsObject } from './tensor-checks.js';

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
/** Bytes per element of each dtype. */
export function dtypeSize(dtype: DType): number {
  return dtype === 'float32' ? 4 : dtype === 'int8' ? 1 : 2;
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
