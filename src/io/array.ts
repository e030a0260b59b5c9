// The in-memory array shared by the .npy and .safetensors readers and writers: a dtype name, a C-order
// shape and a typed array. float16 / bfloat16 are raw bits in a Uint16Array, as in tensor.ts.

import * as fs from 'node:fs';
import { FormatError, InvalidArgumentError } from '../errors.js';
import { openForWriting, writeError } from './text-file.js';

export type ArrayDType =
  | 'float32'
  | 'float16'
  | 'bfloat16'
  | 'int8'
  | 'int32'
  | 'int64'
  | 'uint32'
  | 'uint64'
  | 'float64';

export type ArrayData =
  | Float32Array
  | Uint16Array
  | Int8Array
  | Int32Array
  | BigInt64Array
  | Uint32Array
  | BigUint64Array
  | Float64Array;

export interface NpyArray {
  dtype: ArrayDType;
  /** C-order (row-major) shape; [] is a scalar. */
  shape: number[];
  /** Exactly product(shape) elements. */
  data: ArrayData;
}

type TypedArrayCtor = {
  new (buffer: ArrayBufferLike, byteOffset: number, length: number): ArrayData;
  new (length: number): ArrayData;
  readonly BYTES_PER_ELEMENT: number;
  readonly name: string;
};

const CTORS: Record<ArrayDType, TypedArrayCtor> = {
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

export const ARRAY_DTYPES = Object.keys(CTORS) as ArrayDType[];

export function isArrayDType(x: unknown): x is ArrayDType {
  return typeof x === 'string' && Object.hasOwn(CTORS, x);
}

export function itemSize(dtype: ArrayDType): number {
  return CTORS[dtype].BYTES_PER_ELEMENT;
}

// Both formats store little-endian data and the typed arrays below are views in host order.
const HOST_IS_LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/**
 * Element count of a shape, or undefined when it is not exact (beyond 2^53). Shape entries must already be
 * checked as non-negative safe integers.
 */
export function shapeProduct(shape: readonly number[]): number | undefined {
  if (shape.includes(0)) return 0;
  let n = 1;
  for (const d of shape) {
    n *= d;
    if (n > Number.MAX_SAFE_INTEGER) return undefined;
  }
  return n;
}

export function formatShape(shape: readonly number[]): string {
  return `[${shape.join(', ')}]`;
}

/**
 * A typed array over bytes[byteOffset, byteOffset + count * itemSize): a zero-copy view when the offset is
 * aligned for the element size, otherwise an aligned copy (typed arrays cannot be unaligned).
 */
export function viewAs(
  file: string,
  dtype: ArrayDType,
  bytes: Uint8Array,
  byteOffset: number,
  count: number,
): ArrayData {
  if (!HOST_IS_LITTLE_ENDIAN)
    throw new FormatError(file, 'reading little-endian arrays on a big-endian host is not supported');
  const ctor = CTORS[dtype];
  const size = ctor.BYTES_PER_ELEMENT;
  const start = bytes.byteOffset + byteOffset;
  if (start % size === 0) return new ctor(bytes.buffer, start, count);
  const copy = new Uint8Array(count * size);
  copy.set(bytes.subarray(byteOffset, byteOffset + count * size));
  return new ctor(copy.buffer, 0, count);
}

/** The raw little-endian bytes of an array's data (a view, no copy). */
export function arrayBytes(array: NpyArray): Uint8Array {
  return new Uint8Array(array.data.buffer, array.data.byteOffset, array.data.byteLength);
}

/** Checks that an array is well formed before writing it; `name` labels the argument in errors. */
export function checkArray(name: string, array: NpyArray): void {
  if (typeof array !== 'object' || array === null) {
    throw new InvalidArgumentError(name, 'an array { dtype, shape, data }', String(array));
  }
  if (!isArrayDType(array.dtype)) {
    throw new InvalidArgumentError(`${name}.dtype`, `one of ${ARRAY_DTYPES.join(', ')}`, String(array.dtype));
  }
  if (!Array.isArray(array.shape) || !array.shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
    throw new InvalidArgumentError(`${name}.shape`, 'an array of non-negative integers', String(array.shape));
  }
  const ctor = CTORS[array.dtype];
  if (!(array.data instanceof ctor)) {
    const got = ArrayBuffer.isView(array.data) ? array.data.constructor.name : typeof array.data;
    throw new InvalidArgumentError(`${name}.data`, `a ${ctor.name} for dtype '${array.dtype}'`, got);
  }
  const count = shapeProduct(array.shape);
  if (count !== array.data.length) {
    throw new InvalidArgumentError(
      `${name}.data`,
      `${count ?? 'more than 2^53'} elements (shape ${formatShape(array.shape)})`,
      `${array.data.length}`,
    );
  }
  if (!HOST_IS_LITTLE_ENDIAN)
    throw new InvalidArgumentError(name, 'a little-endian host', 'a big-endian host');
}

/**
 * Reads a whole file into a fresh (so 0-aligned) buffer. Reads in chunks because a single read is capped
 * at 2 GiB; the buffer itself is capped by the runtime's typed array limit.
 */
export function readFileBytes(path: string): Uint8Array {
  const fd = fs.openSync(path, 'r');
  try {
    const size = fs.fstatSync(fd).size;
    let bytes: Uint8Array;
    try {
      bytes = new Uint8Array(size);
    } catch {
      throw new FormatError(path, `the file is ${size} bytes, more than this runtime can hold in one buffer`);
    }
    const chunk = 1 << 30;
    let done = 0;
    while (done < size) {
      const n = fs.readSync(fd, bytes, done, Math.min(chunk, size - done), done);
      if (n === 0) throw new FormatError(path, `the file shrank while being read (${done} of ${size} bytes)`);
      done += n;
    }
    return bytes;
  } finally {
    fs.closeSync(fd);
  }
}

/** Writes all chunks to a file in order (no concatenated copy of large data). */
export function writeFileChunks(path: string, chunks: readonly Uint8Array[]): void {
  // a FIFO, a directory or a missing directory is refused naming the path (a FIFO hung here)
  const fd = openForWriting(path);
  try {
    for (const c of chunks) {
      let done = 0;
      try {
        while (done < c.length) done += fs.writeSync(fd, c, done, c.length - done);
      } catch (e) {
        throw writeError(path, e);
      }
    }
  } finally {
    fs.closeSync(fd);
  }
}

export function concatBytes(chunks: readonly Uint8Array[]): Uint8Array {
  let total = 0;
  for (const c of chunks) total += c.length;
  const out = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}
