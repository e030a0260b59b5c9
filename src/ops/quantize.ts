// Per-token symmetric INT8 quantization, and the typed face of the native int8 x int8 MaxSim engine
// (native/cpu/engine_int8.cc via native/binding/int8_binding.cc).
//
// Per token: scale = max|x| / 127 (float32), q = round-half-to-even(x / scale) clamped to
// [-127, 127]; a token of zeros gets scale 0 and zero values. value = q * scale.
// Document scales ({ scales: 'document' }): every token of an item takes the item's scale (its
// largest |x| / 127), still stored once per token. Fidelity drops a little (bench/NOTES.md, 'Quantization fidelity')
// and the GPU's document-scale kernels take such corpora (bench/NOTES.md, 'Document scales').
// Centered ({ center: true }, documents only): the tokens' mean mu is subtracted first and kept as
// `mean`; scoring adds each query's shift back (src/ops/center.ts, docs/eight-bit.md).

import { MAX_THREADS } from '../backends/constants.js';
import { type CpuIsa, cpuInfo } from '../backends/cpu.js';
import { InvalidArgumentError } from '../errors.js';
import { decodeToFloat32 } from '../floats.js';
import { loadNative } from '../native.js';
import { isTokenBatch, isTokenMatrix, type TokenBatch, type TokenMatrix } from '../tensor.js';
import { type CenterOption, checkCenter, checkMean, tokenMean } from './center.js';

export type QuantizeMode = 'int8';

/** Who shares a scale: each token its own (the default), or all the tokens of an item. */
export type ScaleGranularity = 'token' | 'document';

export interface QuantizeOptions {
  scales?: ScaleGranularity;
  /**
   * Documents only: subtract a mean vector mu from every token before quantizing, and keep it as the
   * result's `mean` (scores add each query's shift sum_i <q_i, mu> back). true: the mean of the
   * items' tokens (float64, rounded to float32); a Float32Array: that mean (a corpus's, so that parts
   * quantized apart share it); false (the default): none. Queries must not be centered (scoring
   * refuses them); for documents, centering is what docs/eight-bit.md recommends.
   */
  center?: CenterOption;
}

/** Validates options.scales (default 'token'). */
export function checkScaleGranularity(scales: unknown, name = 'options.scales'): ScaleGranularity {
  if (scales === undefined) return 'token';
  if (scales !== 'token' && scales !== 'document')
    throw new InvalidArgumentError(name, "'token' or 'document'", JSON.stringify(scales) ?? String(scales));
  return scales;
}

export interface RoundTripError {
  /** Largest |x - q * scale| (in double) over every element of every real token. */
  maxAbs: number;
  /** Largest per-token error relative to the token's max|x| (tokens of zeros excluded). */
  maxRel: number;
}

function describeKind(x: unknown): string {
  if (isTokenBatch(x)) return `a ${x.dtype} TokenBatch`;
  if (isTokenMatrix(x)) return `a ${x.dtype} TokenMatrix`;
  return x === null ? 'null' : typeof x;
}

/** Round half to even (banker's rounding) of a finite number. */
export function roundHalfEven(v: number): number {
  const r = Math.round(v); // half up
  return r - v === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** Which tokens of the data are real: [start, length] spans (a matrix is one span). */
function spansOf(x: TokenBatch | TokenMatrix): { starts: ArrayLike<number>; lengths: ArrayLike<number> } {
  if (x.kind === 'matrix') return { starts: [0], lengths: [x.length] };
  if (x.layout === 'ragged') {
    // Every token of a ragged buffer is quantized (tokens outside items cost nothing to keep).
    return { starts: [0], lengths: [Math.floor(x.data.length / x.dim)] };
  }
  return { starts: x.starts, lengths: x.lengths };
}

/** Tokens held by the quantized output (a dense batch keeps its padding slots, at scale 0). */
function tokenCapacity(x: TokenBatch | TokenMatrix): number {
  if (x.kind === 'matrix') return x.length;
  if (x.layout === 'dense') return x.count * x.maxLength;
  return Math.floor(x.data.length / x.dim);
}

/**
 * Quantizes every real token to int8 with its own symmetric scale, or with `{ scales: 'document' }`
 * the scale of its item (a matrix is one item; items of a ragged batch must not share tokens). The
 * layout is kept: a matrix stays a matrix, a dense batch stays dense (padding tokens become zeros with
 * scale 0), a ragged batch stays ragged with the same starts and lengths.
 */
export function quantize(x: TokenMatrix, mode: QuantizeMode, options?: QuantizeOptions): TokenMatrix;
export function quantize(x: TokenBatch, mode: QuantizeMode, options?: QuantizeOptions): TokenBatch;
export function quantize(
  x: TokenBatch | TokenMatrix,
  mode: QuantizeMode,
  options?: QuantizeOptions,
): TokenBatch | TokenMatrix;
export function quantize(
  x: TokenBatch | TokenMatrix,
  mode: QuantizeMode,
  options: QuantizeOptions = {},
): TokenBatch | TokenMatrix {
  if (mode !== 'int8') throw new InvalidArgumentError('mode', "'int8'", JSON.stringify(mode));
  const granularity = checkScaleGranularity(options?.scales);
  if (!isTokenBatch(x) && !isTokenMatrix(x))
    throw new InvalidArgumentError('batch', 'a TokenBatch or TokenMatrix', describeKind(x));
  const center = checkCenter(options?.center, x.dim);
  if (x.dtype === 'int8')
    throw new InvalidArgumentError(
      'batch.dtype',
      "'float32', 'float16' or 'bfloat16' (a float batch to quantize)",
      "'int8'",
    );
  const d = x.dim;
  const values = decodeToFloat32(x.data, x.dtype, d);
  const tokens = tokenCapacity(x);
  const data = new Int8Array(tokens * d);
  const scales = new Float32Array(tokens);
  const { starts, lengths } = spansOf(x);
  const items = x.kind === 'matrix' ? { starts: [0], lengths: [x.length] } : x;
  // the mean of the items' tokens; the residuals x - mu are formed in double, token by token
  const mean =
    center === false
      ? undefined
      : center === true
        ? tokenMean(values, d, items.starts, items.lengths)
        : center;
  // every real token's scale first, then (document scales) each item's largest, then the values once
  for (let b = 0; b < lengths.length; b++) {
    const end = starts[b] + lengths[b];
    for (let t = starts[b]; t < end; t++) {
      const o = t * d;
      let m = 0;
      for (let k = 0; k < d; k++) {
        const a = Math.abs(mean ? values[o + k] - mean[k] : values[o + k]);
        if (a > m) m = a;
        else if (Number.isNaN(a)) {
          m = a; // NaN: no comparison would keep it
          break;
        }
      }
      if (!Number.isFinite(m))
        throw new InvalidArgumentError(
          'batch',
          'finite values to quantize',
          `a non-finite value at token ${t}`,
        );
      scales[t] = m === 0 ? 0 : Math.fround(m / 127); // a zero token: scale 0, values 0
    }
  }
  if (granularity === 'document') {
    // Math.fround(m / 127) is monotone in m, so an item's largest token scale is its largest |x|'s
    checkDisjointItems(items.starts, items.lengths);
    for (let b = 0; b < items.lengths.length; b++) {
      const s0 = items.starts[b];
      const end = s0 + items.lengths[b];
      let sd = 0;
      for (let t = s0; t < end; t++) if (scales[t] > sd) sd = scales[t];
      scales.fill(sd, s0, end);
    }
  }
  for (let b = 0; b < lengths.length; b++)
    for (let t = starts[b]; t < starts[b] + lengths[b]; t++)
      if (scales[t] > 0) quantizeToken(values, data, t * d, d, scales[t], mean);
  const withMean = mean ? { mean } : {};
  if (x.kind === 'matrix')
    return { kind: 'matrix', dtype: 'int8', data, length: x.length, dim: d, scales, ...withMean };
  return {
    kind: 'batch',
    layout: x.layout,
    dtype: 'int8',
    data,
    dim: d,
    count: x.count,
    maxLength: x.maxLength,
    starts: Float64Array.from(x.starts),
    lengths: Int32Array.from(x.lengths),
    scales,
    ...withMean,
  };
}

// 1.5 * 2^52: adding it to a double of magnitude < 2^51 leaves no fraction bits, so the addition itself
// rounds half to even (IEEE default), and subtracting it back is exact. Bitwise roundHalfEven, ~4x
// faster than calling it per value (the rounding of 1,000 queries x 32 tokens: ~85 -> ~20 ms here).
const ROUND_HALF_EVEN = 6755399441055744;

/** Token [o, o + d) of values (less mean, when given) quantized with scale (> 0) into data. */
function quantizeToken(
  values: Float32Array,
  data: Int8Array,
  o: number,
  d: number,
  scale: number,
  mean: Float32Array | undefined,
): void {
  if (mean) {
    for (let k = 0; k < d; k++) {
      const q = (values[o + k] - mean[k]) / scale + ROUND_HALF_EVEN - ROUND_HALF_EVEN;
      data[o + k] = Math.min(127, Math.max(-127, q));
    }
    return;
  }
  for (let k = 0; k < d; k++) {
    const q = values[o + k] / scale + ROUND_HALF_EVEN - ROUND_HALF_EVEN;
    data[o + k] = Math.min(127, Math.max(-127, q));
  }
}

/** Document scales need items that share no token (each token takes its one item's scale). */
function checkDisjointItems(starts: ArrayLike<number>, lengths: ArrayLike<number>): void {
  const order = Array.from({ length: lengths.length }, (_, i) => i)
    .filter((i) => lengths[i] > 0)
    .sort((a, b) => starts[a] - starts[b]);
  for (let j = 1; j < order.length; j++) {
    const prev = order[j - 1];
    if (starts[prev] + lengths[prev] > starts[order[j]])
      throw new InvalidArgumentError(
        'options.scales',
        "'token' for items that share tokens ('document' gives each token its item's scale)",
        `'document' with items ${prev} and ${order[j]} overlapping`,
      );
  }
}

/**
 * Whether every item's tokens share one scale (an int8 batch quantized with { scales: 'document' },
 * or one that happens to be so): what lets a GPU corpus take the document-scale kernels.
 */
export function hasDocumentScales(x: TokenBatch): boolean {
  if (x.dtype !== 'int8' || !(x.scales instanceof Float32Array)) return false;
  const scales = x.scales;
  for (let b = 0; b < x.count; b++) {
    const s0 = x.starts[b];
    const end = s0 + x.lengths[b];
    for (let t = s0 + 1; t < end; t++) if (scales[t] !== scales[s0]) return false;
  }
  return true;
}

/** int8 tokens back to float32 values (q * scale, plus the mean of a centered batch), same layout. */
export function dequantize(x: TokenMatrix): TokenMatrix;
export function dequantize(x: TokenBatch): TokenBatch;
export function dequantize(x: TokenBatch | TokenMatrix): TokenBatch | TokenMatrix;
export function dequantize(x: TokenBatch | TokenMatrix): TokenBatch | TokenMatrix {
  if (!isTokenBatch(x) && !isTokenMatrix(x))
    throw new InvalidArgumentError('batch', 'an int8 TokenBatch or TokenMatrix', describeKind(x));
  if (x.dtype !== 'int8' || !(x.scales instanceof Float32Array))
    throw new InvalidArgumentError('batch.dtype', "'int8' with per-token scales", `'${x.dtype}'`);
  const data = decodeToFloat32(x.data, 'int8', x.dim, x.scales);
  if (x.mean !== undefined) {
    const mean = checkMean(x.mean, x.dim, 'batch.mean');
    for (let i = 0; i < data.length; i++)
      data[i] = x.data[i] * x.scales[Math.floor(i / x.dim)] + mean[i % x.dim];
  }
  if (x.kind === 'matrix') return { kind: 'matrix', dtype: 'float32', data, length: x.length, dim: x.dim };
  return {
    kind: 'batch',
    layout: x.layout,
    dtype: 'float32',
    data,
    dim: x.dim,
    count: x.count,
    maxLength: x.maxLength,
    starts: Float64Array.from(x.starts),
    lengths: Int32Array.from(x.lengths),
  };
}

/** Element-wise error of a quantization over the real tokens of the original. */
export function roundTripError(
  original: TokenBatch | TokenMatrix,
  quantized: TokenBatch | TokenMatrix,
): RoundTripError {
  if (!isTokenBatch(original) && !isTokenMatrix(original))
    throw new InvalidArgumentError('original', 'a TokenBatch or TokenMatrix', describeKind(original));
  if (!isTokenBatch(quantized) && !isTokenMatrix(quantized))
    throw new InvalidArgumentError('quantized', 'a TokenBatch or TokenMatrix', describeKind(quantized));
  if (quantized.dtype !== 'int8')
    throw new InvalidArgumentError('quantized.dtype', "'int8'", `'${quantized.dtype}'`);
  if (original.dtype === 'int8')
    throw new InvalidArgumentError('original.dtype', "'float32', 'float16' or 'bfloat16'", "'int8'");
  if (
    original.kind !== quantized.kind ||
    original.dim !== quantized.dim ||
    tokenCapacity(quantized) < tokenCapacity(original) ||
    (original.kind === 'batch' && quantized.kind === 'batch' && original.count !== quantized.count)
  )
    throw new InvalidArgumentError(
      'quantized',
      `the quantization of original (${describeKind(original)}, dim ${original.dim})`,
      `${describeKind(quantized)}, dim ${quantized.dim}`,
    );
  const d = original.dim;
  const x = decodeToFloat32(original.data, original.dtype, d);
  const q = quantized.data;
  const scales = quantized.scales as Float32Array;
  const mu = quantized.mean === undefined ? undefined : checkMean(quantized.mean, d, 'quantized.mean');
  const { starts, lengths } = spansOf(original);
  let maxAbs = 0;
  let maxRel = 0;
  for (let b = 0; b < lengths.length; b++) {
    const end = starts[b] + lengths[b];
    for (let t = starts[b]; t < end; t++) {
      let m = 0;
      let e = 0;
      // In double: q * scale is exact there (and x - mu nearly so), so this is the quantization error.
      for (let k = t * d; k < (t + 1) * d; k++) {
        m = Math.max(m, Math.abs(x[k]));
        const back = mu ? x[k] - mu[k - t * d] : x[k];
        e = Math.max(e, Math.abs(back - q[k] * scales[t]));
      }
      maxAbs = Math.max(maxAbs, e);
      if (m > 0) maxRel = Math.max(maxRel, e / m);
    }
  }
  return { maxAbs, maxRel };
}

// ---- the native int8 engine ----

/**
 * int8 kernel sets (native/cpu/kernels_int8_*.cc): AMX-INT8 tiles (d % 64 == 0), AVX-512 VNNI and
 * AVX-VNNI (VPDPBUSD), AVX2 (VPMADDWD on int16), plain C++. All give bitwise the same scores.
 */
export type Int8Isa = 'amx' | 'avx512-vnni' | 'avx-vnni' | 'avx2' | 'portable';

/** Every int8 kernel set name, fastest first where a CPU has several. */
export const INT8_ISAS: readonly Int8Isa[] = ['amx', 'avx512-vnni', 'avx-vnni', 'avx2', 'portable'];

export interface Int8Options {
  threads?: number;
  isa?: Int8Isa;
}

interface Int8Addon {
  maxsimInt8Sync(queries: TokenBatch, docs: TokenBatch, options: Int8Options): Float32Array;
  maxsimInt8Async(
    queries: TokenBatch,
    docs: TokenBatch,
    options: Int8Options & { cancel?: Int32Array },
  ): Promise<Float32Array>;
  int8Isas(): Int8Isa[];
}

function int8Addon(): Int8Addon {
  return loadNative().cpu as unknown as Int8Addon;
}

function checkInt8Options(options: { threads?: number; isa?: string }): Int8Options {
  const out: Int8Options = {};
  if (options.threads !== undefined) {
    if (!Number.isInteger(options.threads) || options.threads < 0 || options.threads > MAX_THREADS)
      throw new InvalidArgumentError(
        'threads',
        `an integer in [0, ${MAX_THREADS}] (0 = all cores)`,
        String(options.threads),
      );
    out.threads = options.threads;
  }
  if (options.isa !== undefined) {
    if (!(INT8_ISAS as readonly string[]).includes(options.isa))
      throw new InvalidArgumentError(
        'isa',
        `one of ${INT8_ISAS.map((n) => `'${n}'`).join(', ')} (the int8 kernel sets)`,
        JSON.stringify(options.isa),
      );
    out.isa = options.isa as Int8Isa;
  }
  return out;
}

/** The int8 kernel sets usable on this CPU, fastest first. */
export function cpuInt8Isas(): Int8Isa[] {
  return int8Addon().int8Isas();
}

/** The int8 kernel set that `isa: 'auto'` runs for dimension dim here (AMX needs dim % 64 == 0). */
export function cpuInt8IsaFor(dim: number): Int8Isa {
  return cpuInt8Isas().find((isa) => isa !== 'amx' || dim % 64 === 0) ?? 'portable';
}

/** The float kernel set of the same vector width as an int8 one: what `maxsim bench` compares it with. */
export function float32Counterpart(isa: Int8Isa): CpuIsa {
  const map: Record<Int8Isa, CpuIsa> = {
    amx: 'amx',
    'avx512-vnni': 'avx512',
    'avx-vnni': 'avx2',
    avx2: 'avx2',
    portable: 'portable',
  };
  return map[isa];
}

/**
 * Why int8 x int8 scoring on this CPU is slower than float32 scoring of the same data, or undefined
 * when it is faster: the int8 kernel set that runs (default: auto's for dim) against the float one
 * (default: this CPU's best). Measured (bench/NOTES.md): each SIMD int8 kernel set beats the float
 * kernel of its own vector width, but the AVX2 one (8 int32 lanes of VPMADDWD) does not beat
 * 512-bit float32 (a CPU with AVX-512 and no VNNI, e.g. Skylake-SP), and the portable one is ~10x
 * slower than any SIMD float kernel.
 */
export function cpuInt8SlowerReason(dim: number, int8Isa?: Int8Isa, floatIsa?: CpuIsa): string | undefined {
  const int8 = int8Isa ?? cpuInt8IsaFor(dim);
  const fp32 = floatIsa ?? cpuInfo().isa;
  if (int8 === 'portable' && fp32 !== 'portable')
    return `int8 runs on the portable kernel (${int8Isa ? 'forced' : 'no AVX2, VNNI or AMX-INT8 usable'}), several times slower than float32 (${fp32})`;
  if (int8 === 'avx2' && (fp32 === 'avx512' || fp32 === 'avx512bf16' || fp32 === 'amx'))
    return `int8 runs on the 256-bit AVX2 kernel (${int8Isa ? 'forced' : 'AVX-512 without VNNI'}), slower than 512-bit float32 (${fp32})`;
  return undefined;
}

const warnedInt8 = new Set<string>();

/**
 * cpuInt8SlowerReason as a process warning (code MAXSIM_INT8_SLOW, printed once to stderr by Node),
 * emitted once per reason; returns the reason.
 */
export function warnIfInt8Slower(
  dim: number,
  what: string,
  int8Isa?: Int8Isa,
  floatIsa?: CpuIsa,
): string | undefined {
  const why = cpuInt8SlowerReason(dim, int8Isa, floatIsa);
  if (why !== undefined && !warnedInt8.has(why)) {
    warnedInt8.add(why);
    process.emitWarning(`${what}: int8 is slower than float32 here: ${why}`, { code: 'MAXSIM_INT8_SLOW' });
  }
  return why;
}

/** All-pairs int8 x int8 MaxSim on the CPU, blocking: [nq * B] row-major. */
export function cpuMaxsimInt8Sync(
  queries: TokenBatch,
  docs: TokenBatch,
  options: { threads?: number; isa?: string } = {},
): Float32Array {
  return int8Addon().maxsimInt8Sync(queries, docs, checkInt8Options(options));
}

/** All-pairs int8 x int8 MaxSim on the CPU thread pool, off the JS thread. */
export function cpuMaxsimInt8(
  queries: TokenBatch,
  docs: TokenBatch,
  options: { threads?: number; isa?: string } = {},
  cancel?: Int32Array,
): Promise<Float32Array> {
  // `cancel` (src/abort.ts): the workers stop before their next chunk of documents once [0] is set
  const checked = checkInt8Options(options);
  return int8Addon().maxsimInt8Async(queries, docs, cancel ? { ...checked, cancel } : checked);
}
