// float16 / bfloat16 bits and float32 values, both ways: one value (bit helpers), whole arrays
// (encodeFloats / decodeToFloat32, with the overflow checks and the clamp), and the element reader
// the references use. Used by the batch constructors, io, the references and tests; never on a
// scoring hot path.

import { describe } from './describe.js';
import { InvalidArgumentError } from './errors.js';
import type { DType, FloatDType, TokenData } from './tensor.js';

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
