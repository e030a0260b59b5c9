// The checks at the door of the token constructors (tensor.ts): typed arrays to (storage, dtype),
// integers, dims and lengths, int8 scales, finite values, options objects. Each failure is an
// InvalidArgumentError naming the argument, what was expected and what came.

import { describe } from './describe.js';
import { InvalidArgumentError } from './errors.js';
import { checkEncodable, encodeFloats } from './floats.js';
import type { DType, TokenData, ViewOptions } from './tensor.js';

export function viewOf(options: ViewOptions): boolean {
  const view = options.view === undefined ? false : options.view;
  if (typeof view !== 'boolean') throw new InvalidArgumentError('view', 'true or false', describe(view));
  return view;
}

export const MAX_SAFE = Number.MAX_SAFE_INTEGER;

// Float16Array exists on newer runtimes (Node >= 24 behind no flag); accept it as float16 bits.
const Float16ArrayCtor: (new (...args: never[]) => ArrayBufferView) | undefined = (
  globalThis as unknown as { Float16Array?: new (...args: never[]) => ArrayBufferView }
).Float16Array;

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

export function expectDim(dim: unknown): number {
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
export function normalizeData(
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

export function checkScales(
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

export function checkFiniteData(name: string, data: TokenData, dtype: DType, count: number, dim: number) {
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

/** The buffer's length against the shape: exact, or at least (a view). */
export function checkLength(have: number, need: number, shape: string, view: boolean) {
  if (view ? have >= need : have === need) return;
  throw new InvalidArgumentError(
    'data',
    view
      ? `at least ${need} elements (${shape})`
      : `exactly ${need} elements (${shape}; a larger buffer is a view: pass { view: true })`,
    `${have}`,
  );
}

/** Throws unless `options` is an object (a missing options argument names itself, not a TypeError). */
export function expectOptions<T>(options: T, what: string): NonNullable<T> {
  if (typeof options !== 'object' || options === null)
    throw new InvalidArgumentError('options', `an options object (${what})`, describe(options));
  return options as NonNullable<T>;
}
