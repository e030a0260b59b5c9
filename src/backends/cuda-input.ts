// What the CUDA face does to its arguments before a job: query batches in the corpus's dtype, the
// range checks, the shapes the dispatcher reads, the means of centered batches. Moved out of cuda.ts
// unchanged.
import { InvalidArgumentError } from '../errors.js';
import { checkEncodable, decodeToFloat32, encodeFloats, OVERFLOW_AT } from '../floats.js';
import { checkMean } from '../ops/center.js';
import { quantize } from '../ops/quantize.js';
import { isTokenBatch, isTokenMatrix, type TokenBatch, type TokenMatrix } from '../tensor.js';
import type { DeviceCorpus } from './cuda.js';
import type { DeviceDType, Launch, Variant } from './cuda-dispatch.js';
import type { NativeLaunch, NativeLaunchHandle } from './cuda-native.js';

export function describe(x: unknown): string {
  if (x === null) return 'null';
  if (typeof x === 'object') return (x as object).constructor?.name ?? 'object';
  return typeof x === 'number' || typeof x === 'string' ? JSON.stringify(x) : typeof x;
}

// The spans of a one-query batch, shared by the calls (read-only: the jobs and plans only read
// them), so that a TokenMatrix query allocates no typed arrays: starts [0], lengths [length].
export const MATRIX_STARTS: Float64Array = new Float64Array([0]);
export const matrixLengths: Map<number, Int32Array> = new Map();

export function asQueryBatch(queries: TokenMatrix | TokenBatch, name = 'queries'): TokenBatch {
  if (isTokenMatrix(queries)) {
    let lengths = matrixLengths.get(queries.length);
    if (!lengths) {
      if (matrixLengths.size >= 64) matrixLengths.clear();
      lengths = new Int32Array([queries.length]);
      matrixLengths.set(queries.length, lengths);
    }
    // matrixAsBatch's batch, with the shared spans
    return {
      kind: 'batch',
      layout: 'dense',
      dtype: queries.dtype,
      data: queries.data,
      dim: queries.dim,
      count: 1,
      maxLength: queries.length,
      starts: MATRIX_STARTS,
      lengths,
      scales: queries.scales,
    };
  }
  if (isTokenBatch(queries)) return queries;
  throw new InvalidArgumentError(name, 'a TokenMatrix or TokenBatch', describe(queries));
}

/**
 * Queries in the corpus dtype: queries are small, so a float32 query meets a float16 corpus here, and
 * float queries meet an int8 corpus quantized on the host (quantize(batch, 'int8'), the same per-token
 * rule as the corpus). int8 queries need an int8 corpus. An fp8 corpus takes float queries as they
 * are: the scoring job quantizes them to e4m3 on the GPU.
 */
export function toDtype(batch: TokenBatch, dtype: DeviceDType, dim: number): TokenBatch {
  if (batch.dim !== dim)
    throw new InvalidArgumentError('queries.dim', `${dim} (the dimension of the corpus)`, String(batch.dim));
  if (dtype === 'int8') return batch.dtype === 'int8' ? batch : quantize(batch, 'int8');
  if (dtype === 'fp8') {
    if (batch.dtype === 'int8')
      throw new InvalidArgumentError(
        'queries.dtype',
        "'float32', 'float16' or 'bfloat16' (the corpus is fp8; float queries are quantized to fp8 on the GPU)",
        "'int8'",
      );
    return batch;
  }
  if (batch.dtype === 'int8')
    throw new InvalidArgumentError(
      'queries.dtype',
      `'float32', 'float16' or 'bfloat16' (the corpus is ${dtype}; int8 queries need an int8 corpus: corpus.quantize('int8'))`,
      "'int8'",
    );
  if (batch.dtype === dtype) return batch;
  const data = encodeFloats(decodeToFloat32(batch.data, batch.dtype, batch.dim), dtype, {
    name: 'queries.data',
    dim: batch.dim,
  });
  return { ...batch, dtype, data, scales: undefined };
}

/**
 * The queries as a scoring job takes them, without a host pass over their values where the job can
 * convert them on the GPU: float queries against an int8 corpus (quantized per token there, the bytes
 * of quantize()) and float32 ones against a float16 / bfloat16 corpus (the round-to-nearest-even bits
 * of encodeFloats) go as they are; others as toDtype makes them.
 */
export function jobQueries(
  batch: TokenBatch,
  dtype: DeviceDType,
  dim: number,
  rangeOnWorker = false,
): TokenBatch {
  if (batch.dim === dim) {
    if (dtype === 'int8') return batch;
    if (batch.dtype === 'float32' && (dtype === 'float16' || dtype === 'bfloat16')) {
      // converted by the job: the values encodeFloats refuses are refused here (the full check, which
      // finds and names the value, only when the quick screen finds one), or with rangeOnWorker by the
      // job's worker before any copy (the caller passes its refusal to rethrowRange)
      if (!rangeOnWorker && !withinMagnitude(batch.data, OVERFLOW_AT[dtype]))
        checkEncodable(batch.data, dtype, { name: 'queries.data', dim });
      return batch;
    }
  }
  return toDtype(batch, dtype, dim);
}

// The worker's refusal of float32 queries holding a value that would become +-Infinity in the corpus
// dtype (native/cuda/engine.h, ResolveQueries): "... within the <dtype> range ...".
export const WORKER_RANGE = /Expected finite values within the (float16|bfloat16) range \(larger ones/;

/**
 * Rethrows a job's error; the worker's range refusal of `batch` (jobQueries with rangeOnWorker)
 * becomes encodeFloats' error, which counts and names the values, as when JS checked them first.
 */
export function rethrowRange(e: unknown, batch: TokenBatch): never {
  const m = e instanceof Error ? WORKER_RANGE.exec(e.message) : null;
  if (m && batch.dtype === 'float32')
    checkEncodable(batch.data, m[1] as 'float16' | 'bfloat16', { name: 'queries.data', dim: batch.dim });
  throw e;
}

/**
 * Whether every value of `data` is below `limit` in magnitude (a quick screen for checkEncodable:
 * +-Infinity and NaN fail it, and checkEncodable then decides). Four lanes, so the loop
 * is not one chain of dependent compares (2.5x the plain loop's speed on 4096 values).
 */
export function withinMagnitude(data: TokenBatch['data'], limit: number): boolean {
  if (!(data instanceof Float32Array)) return false;
  let a0 = 0;
  let a1 = 0;
  let a2 = 0;
  let a3 = 0;
  const n = data.length - (data.length % 4);
  for (let i = 0; i < n; i += 4) {
    const x0 = Math.abs(data[i]);
    const x1 = Math.abs(data[i + 1]);
    const x2 = Math.abs(data[i + 2]);
    const x3 = Math.abs(data[i + 3]);
    a0 = Math.max(a0, x0);
    a1 = Math.max(a1, x1);
    a2 = Math.max(a2, x2);
    a3 = Math.max(a3, x3);
  }
  for (let i = n; i < data.length; i++) {
    const x = Math.abs(data[i]);
    a0 = Math.max(a0, x);
  }
  return a0 < limit && a1 < limit && a2 < limit && a3 < limit;
}

/** A plan of Device.planCached: the launch, and what the jobs pass for it (parsed once). */
export interface CachedPlan {
  variant: Variant;
  launch: Launch;
  handle: NativeLaunch | NativeLaunchHandle;
}

/** What the dispatcher reads of a corpus. */
export type CorpusShape = Pick<DeviceCorpus, 'count' | 'dim' | 'dtype' | 'maxLength'> & {
  tokens?: number;
  documentScales?: boolean;
};

export function shapeOf(c: DeviceCorpus): CorpusShape {
  return {
    count: c.count,
    dim: c.dim,
    dtype: c.dtype,
    maxLength: c.maxLength,
    tokens: c.tokens,
    documentScales: c.documentScales,
  };
}

export function checkCandidates(n: unknown): number {
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0)
    throw new InvalidArgumentError('options.rescore.candidates', 'a non-negative integer', describe(n));
  return n;
}

export function maxLength(batch: TokenBatch): number {
  let m = 0;
  for (let i = 0; i < batch.count; i++) if (batch.lengths[i] > m) m = batch.lengths[i];
  return m;
}

/**
 * Whether DeviceCorpus.quantize centers by default: not yet. Centering ranks better on anisotropic
 * corpora and the same on isotropic ones (docs/eight-bit.md), but here it runs on the host (one
 * download and upload of the corpus, a JS quantizer), which the device quantizer's callers (the
 * server, the benchmarks) should not pay unasked; it becomes the default with a device-side mean.
 */
export const CENTER_DEFAULT = false;

/** The mean of a centered int8 batch being uploaded (float batches have none). */
export function batchMean(batch: TokenBatch): Float32Array | undefined {
  if (batch.mean === undefined) return undefined;
  if (batch.dtype !== 'int8')
    throw new InvalidArgumentError(
      'batch.mean',
      `no mean for a ${batch.dtype} batch (int8 documents only)`,
      'a mean',
    );
  return Float32Array.from(checkMean(batch.mean, batch.dim, 'batch.mean'));
}

/** An append to a corpus must be centered on the corpus's mean, or neither may be centered. */
export function checkSameMean(batch: TokenBatch, mean: Float32Array | undefined): void {
  const got = batch.mean;
  const same =
    got === undefined
      ? mean === undefined
      : mean !== undefined && got.length === mean.length && got.every((v, k) => v === mean[k]);
  if (!same)
    throw new InvalidArgumentError(
      'batch.mean',
      mean === undefined
        ? 'no mean (this corpus is not centered)'
        : "the corpus's mean (quantize with { center: corpus.mean })",
      got === undefined ? 'none' : 'a different mean',
    );
}
