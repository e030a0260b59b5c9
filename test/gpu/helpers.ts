// GPU test helpers: whether CUDA runs here (every GPU test skips with the reason when it does not),
// one shared device, and the comparison against the float64 reference.

import {
  type CudaDevice,
  type CudaStatus,
  cuda,
  cudaStatus,
  type NativeDevice,
} from '../../src/backends/cuda.js';
import { deviceCaps, dispatchTable, type Variant } from '../../src/backends/cuda-dispatch.js';
import { referenceMaxsim } from '../../src/backends/reference.js';
import { encodeFloats } from '../../src/floats.js';
import { type FloatDType, raggedBatch, type TokenBatch } from '../../src/tensor.js';
import { assertScoresClose, scoreErrorBounds } from '../helpers.js';

export const status: CudaStatus = cudaStatus();

/** The skip reason for GPU tests, or false when a GPU is usable. */
export const skip: string | false = status.available ? false : `CUDA unavailable: ${status.reason}`;

let device: Promise<CudaDevice> | undefined;
/** Device 0 (MAXSIM_TEST_DEVICE to pick another), opened once per test file. */
export function gpu(): Promise<CudaDevice> {
  device ??= cuda({ device: Number(process.env.MAXSIM_TEST_DEVICE ?? 0) });
  return device;
}

/** The addon's handle of a device (for the native test entry points). */
export function nativeHandle(dev: CudaDevice): NativeDevice {
  return (dev as unknown as { handle: NativeDevice }).handle;
}

/**
 * Variants of the table that can run `dtype` / `dim` on this GPU (by their declared requirements);
 * the document-scale variants only for documentScales (corpora with one scale per document).
 */
export function variantsFor(dev: CudaDevice, dtype: string, dim: number, documentScales = false): Variant[] {
  const caps = deviceCaps(dev.info);
  return dispatchTable().variants.filter((v) => {
    if (v.dtype !== dtype) return false;
    const r = v.requires;
    if (r.documentScales && !documentScales) return false;
    if (r.dimMultipleOf !== undefined && dim % r.dimMultipleOf !== 0) return false;
    if (r.minDim !== undefined && dim < r.minDim) return false;
    if (r.maxDim !== undefined && dim > r.maxDim) return false;
    const cc = caps.computeCapability;
    if (
      r.minComputeCapability &&
      (cc[0] < r.minComputeCapability[0] ||
        (cc[0] === r.minComputeCapability[0] && cc[1] < r.minComputeCapability[1]))
    )
      return false;
    if (r.computeCapabilities && !r.computeCapabilities.some((c) => c[0] === cc[0] && c[1] === cc[1]))
      return false;
    return typeof v.smem !== 'number' || v.smem <= caps.smemOptin;
  });
}

/**
 * Tensor-core variants accumulate in fp32 with truncation rather than round-to-nearest (up to one ulp
 * per addition instead of half), so their bound is scoreErrorBounds() times 2, times 2 again for the
 * reordered partial sums. Still orders of magnitude below any indexing or masking bug.
 */
export function boundFactor(v: Variant): number {
  return /mma/.test(v.kernel) ? 4 : 1;
}

/** Asserts GPU scores against the float64 reference on the same (already rounded) inputs; never NaN. */
export function checkScores(
  got: Float32Array,
  queries: TokenBatch,
  docs: TokenBatch,
  factor: number,
  context: string,
  reference?: Float64Array,
) {
  for (let i = 0; i < got.length; i++)
    if (Number.isNaN(got[i]))
      throw new Error(`${context}: score ${i} is NaN (a pair the kernel never wrote)`);
  const ref = reference ?? referenceMaxsim(queries, docs);
  const bounds = scoreErrorBounds(queries, docs).map((b) => b * factor);
  assertScoresClose(got, ref, bounds, context);
}

export function bitsEqual(a: Float32Array, b: Float32Array): boolean {
  if (a.length !== b.length) return false;
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
  return true;
}

/** Float32 bits as integers in the order of the values (-0 and +0 both 0): their difference counts ulps. */
function orderedBits(x: Float32Array): Int32Array {
  const bits = new Int32Array(x.buffer, x.byteOffset, x.length);
  return Int32Array.from(bits, (b) => (b >= 0 ? b : -2147483648 - b));
}

/** The largest distance between a[i] and b[i] in float32 ulps, and how many entries are bitwise equal. */
export function ulpCompare(a: Float32Array, b: Float32Array): { maxUlp: number; equal: number } {
  if (a.length !== b.length) throw new Error(`ulpCompare: lengths ${a.length} and ${b.length}`);
  const x = orderedBits(a);
  const y = orderedBits(b);
  const ab = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const bb = new Uint32Array(b.buffer, b.byteOffset, b.length);
  let maxUlp = 0;
  let equal = 0;
  for (let i = 0; i < x.length; i++) {
    maxUlp = Math.max(maxUlp, Math.abs(x[i] - y[i]));
    if (ab[i] === bb[i]) equal++;
  }
  return { maxUlp, equal };
}

/**
 * The largest |a_i - b_i| beyond 1 float32 ulp of b_i plus `abs` (0 when every element is within):
 * for gradients whose float64 sources may move by an absolute amount (see gradSlack).
 */
export function excessOver(a: Float32Array, b: Float32Array, abs: number): number {
  if (a.length !== b.length) throw new Error(`excessOver: lengths ${a.length} and ${b.length}`);
  let worst = 0;
  for (let i = 0; i < a.length; i++) {
    const ulp = b[i] === 0 ? 2 ** -149 : 2 ** (Math.floor(Math.log2(Math.abs(b[i]))) - 23);
    worst = Math.max(worst, Math.abs(a[i] - b[i]) - ulp - abs);
  }
  return worst;
}

/**
 * How far dQ / dD may move when the gradScores of a contrastive loss move by an ulp of exp / log: a
 * row's lse moves by at most 8 float64 ulps of its magnitude (E, as in lossClose), so each
 * p = exp(s / tau - lse) moves by at most p E and each gradScore by p E / (tau rows); a gradient
 * element sums at most rows * stride of them times |x| <= maxAbs, and the p of a row add up to 1.
 * Absolute, not relative: the label's entry p - 1 cancels, and so can a gradient element.
 */
export function gradSlack(
  scores: Float32Array,
  cols: number,
  tau: number,
  stride: number,
  maxAbs: number,
): number {
  return (2 * lseSlack(scores, cols, tau) * stride * maxAbs) / tau;
}

/** 8 float64 ulps of the largest |lse| a row of these logits can have. */
function lseSlack(scores: Float32Array, cols: number, tau: number): number {
  let m = 0;
  for (const s of scores) if (Number.isFinite(s)) m = Math.max(m, Math.abs(s));
  return 8 * 2 ** -52 * (m / tau + Math.log(cols) + 1);
}

/**
 * Whether a contrastive loss computed on the GPU is within 1e-12 relative of contrastiveLoss's, plus a
 * few float64 ulps of the logits' magnitude: CUDA's exp / log and V8's may round an argument apart by
 * an ulp, which can flip the last bit of a row's lse = max + log(sum), and lse - s[label] / tau then
 * cancels (a row whose positive wins by far has a loss near 0 beside logits in the hundreds).
 */
export function lossClose(
  got: number,
  want: number,
  scores: Float32Array,
  cols: number,
  tau: number,
): boolean {
  return Math.abs(got - want) <= 1e-12 * Math.abs(want) + lseSlack(scores, cols, tau);
}

type Sign = 'P' | 'N' | 'Z';
/** Runs of [count, sign] per document: tiles wholly negative, positive, zero or mixed, on and off the 64- and 128-token edges. */
const signRuns: [number, Sign][][] = [
  [[300, 'N']],
  [
    [128, 'N'],
    [128, 'P'],
  ],
  [
    [128, 'P'],
    [128, 'N'],
  ],
  [[128, 'Z']],
  [
    [128, 'N'],
    [1, 'P'],
  ],
  [
    [64, 'N'],
    [64, 'Z'],
    [64, 'P'],
    [64, 'N'],
  ],
  [],
  [
    [192, 'N'],
    [64, 'Z'],
  ],
  [
    [64, 'Z'],
    [64, 'N'],
  ],
];

function signTokens(signs: Sign[], d: number, rand: () => number): Float32Array {
  const a = new Float32Array(signs.length * d);
  signs.forEach((sg, t) => {
    if (sg === 'Z') return;
    const m = (sg === 'P' ? 1 : -1) * 10 ** (rand() * 2 - 1);
    for (let k = 0; k < d; k++) a[t * d + k] = (0.1 + 0.9 * rand()) * m;
  });
  return a;
}

function signBatch(tokens: Sign[][], d: number, dtype: FloatDType, rand: () => number): TokenBatch {
  const offsets = [0];
  for (const t of tokens) offsets.push(offsets[offsets.length - 1] + t.length);
  return raggedBatch(encodeFloats(signTokens(tokens.flat(), d, rand), dtype), offsets, { dim: d, dtype });
}

/**
 * Queries and documents whose rows' best matches take every sign, tile by tile. Query tokens have all
 * components of one sign (alternating, or all positive, or one negative token); document tokens are
 * all positive, all negative or zero, in runs laid out by signRuns. The wgmma folds take full tiles'
 * maxima on the values' bit patterns and redo a tile with fmaxf when a row's maximum is negative
 * (max3_bits in maxsim_rowmax.cuh); random signs almost never leave a row of a full tile negative, so
 * that redo needs inputs like these.
 */
export function signRunInputs(
  d: number,
  dtype: FloatDType,
  rand: () => number,
): { queries: TokenBatch; docs: TokenBatch } {
  const alt = (n: number): Sign[] => Array.from({ length: n }, (_, i) => (i % 2 ? 'N' : 'P'));
  const queries = signBatch([alt(32), Array(16).fill('P'), ['N'], alt(300)], d, dtype, rand);
  const docs = signBatch(
    signRuns.map((runs) => runs.flatMap(([n, sg]) => Array<Sign>(n).fill(sg))),
    d,
    dtype,
    rand,
  );
  return { queries, docs };
}
