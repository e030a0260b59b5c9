// Typed face of the native CUDA engine (native/cuda via native/binding/cuda_binding.cc).
//
// cuda() opens a GPU; upload() copies a token batch to it once; the resulting DeviceCorpus scores
// queries against it as often as needed. Every GPU call returns a promise (the work runs on the
// device's own native thread, in call order). Device memory is released by dispose(), or by the
// garbage collector when a corpus is dropped without it.
import { BackendUnavailableError, InvalidArgumentError } from '../errors.js';
import type { QuantizeOptions } from '../ops/quantize.js';
import type { DType, Hit, ScoreMatrix, TokenBatch, TokenMatrix } from '../tensor.js';
import { Corpus } from './cuda-corpus.js';
import { Device } from './cuda-device.js';
import { type CudaDeviceGroup, openDeviceGroup } from './cuda-device-group.js';
import type { DeviceDType, Launch, Variant } from './cuda-dispatch.js';
import { describe } from './cuda-input.js';
import {
  type BenchResult,
  type CudaDeviceInfo,
  type CudaMemory,
  cudaStatus,
  type NativeTokenSet,
  nativeCuda,
} from './cuda-native.js';
import type { Fp8Tokens } from './reference-fp8.js';

export { CENTER_DEFAULT } from './cuda-input.js';
export {
  type BenchResult,
  type CudaDeviceInfo,
  type CudaDeviceStatus,
  type CudaMemory,
  type CudaStatus,
  cudaStatus,
  hitsOfHeaps,
  type JobHandoff,
  type JobTimes,
  type NativeCuda,
  type NativeCudaInternal,
  type NativeDevice,
  type NativeHeaps,
  type NativeJobOptions,
  type NativeLaunch,
  type NativeLaunchHandle,
  type NativeTokenSet,
  nativeCuda,
  onJobTimes,
  setJobPhases,
  setMappedScores,
} from './cuda-native.js';

// ---- fp8 (e4m3) tokens: a GPU-only element type ----------------------------------------------------

export type QuantizeMode8 = 'int8' | 'fp8';

// ---- the public face ----------------------------------------------------------------------------

export interface ScoreOptions {
  /** Force a kernel variant by name (benchmarks, tests); default: the dispatcher's choice. */
  variant?: string;
}

export interface TopKOptions extends ScoreOptions {
  /**
   * Two-stage search in one GPU job: rank every document of this corpus (the int8 copy, say), keep
   * the `candidates` best per query, score those exactly against `docs` (the same documents in a
   * float dtype) and return the k best by that score. `variant` applies to this corpus's scan.
   */
  rescore?: { docs: DeviceCorpus; candidates: number };
}

export interface DeviceCorpus {
  /** Documents (items) on the device. */
  readonly count: number;
  readonly dim: number;
  /**
   * int8: int8 tokens with one float32 scale per token (upload of a quantized batch, or quantize()).
   * fp8: e4m3 codes with one float32 scale per token (quantize('fp8') only).
   */
  readonly dtype: DeviceDType;
  /**
   * int8 / fp8: every document's tokens share one scale (quantize(..., { scales: 'document' }), here or
   * on the host before the upload), so the GPU may take its document-scale kernels (the same scores,
   * faster at many query rows). Kept through select() and through appends of such batches.
   */
  readonly documentScales: boolean;
  /**
   * int8 / fp8 corpora quantized with `center` (or uploaded from a centered batch): the mean mu
   * subtracted from every token before quantizing. score() and topK() add each query's shift
   * sum_i <q_i, mu> back (float64, from the queries as passed), so scores approximate the uncentered
   * ones; a topK with `rescore` returns the float corpus's exact scores. Kept through select().
   */
  readonly mean: Float32Array | undefined;
  /** Tokens on the device (padding is not uploaded). */
  readonly tokens: number;
  /** Longest document. */
  readonly maxLength: number;
  /** Device bytes held. */
  readonly bytes: number;
  readonly disposed: boolean;
  /** One query against every document: [count] scores. */
  score(query: TokenMatrix, options?: ScoreOptions): Promise<Float32Array>;
  /** Every query against every document: rows = queries, cols = documents. */
  score(queries: TokenBatch, options?: ScoreOptions): Promise<ScoreMatrix>;
  /** The k best documents of one query: descending score, ties to the lower index. */
  topK(query: TokenMatrix, k: number, options?: TopKOptions): Promise<Hit[]>;
  /** The k best documents per query of a batch (one list per query, a batch of one included). */
  topK(queries: TokenBatch, k: number, options?: TopKOptions): Promise<Hit[][]>;
  topK(queries: TokenMatrix | TokenBatch, k: number, options?: TopKOptions): Promise<Hit[] | Hit[][]>;
  /** Appends documents (only to a corpus made by CudaDevice.alloc, within its capacity). */
  append(batch: TokenBatch): Promise<void>;
  /**
   * A new corpus, quantized on the GPU. 'int8': per-token symmetric int8 (scale = max|x| / 127, round
   * half to even), byte for byte what the host quantize(batch, 'int8') gives. 'fp8': e4m3 codes of
   * x / scale with scale = max|x| / 448 (round to nearest even, saturating); queries against an fp8
   * corpus are quantized per token on the GPU. `{ scales: 'document' }`: one scale per document, the
   * largest of its tokens' (int8: what the host quantize gives with that option); the default for
   * fp8, whose ranking fidelity it keeps; int8 defaults to `'token'`. `{ center: true }` (default
   * false, CENTER_DEFAULT): quantize the documents less their token mean (or a given Float32Array
   * mean), kept as `mean` (docs/eight-bit.md); it takes one download of this corpus and one upload.
   * This corpus is left as it is.
   */
  quantize(mode: QuantizeMode8, options?: QuantizeOptions): Promise<DeviceCorpus>;
  /** The documents copied back to the host: a ragged batch (int8: with scales), or fp8 codes. */
  download(): Promise<TokenBatch | Fp8Tokens>;
  /**
   * A corpus of some of these documents (indices in any order, repeats allowed), sharing their
   * device memory: only the document spans are new. For rescoring candidates. A view cannot be
   * appended to, downloaded or quantized; it keeps this corpus's memory alive until disposed.
   */
  select(indices: ArrayLike<number>): Promise<DeviceCorpus>;
  /** Frees the device memory now (later calls throw; a second dispose does nothing). */
  dispose(): void;
  /** @internal The native token set (for bench and the harness). */
  readonly native: NativeTokenSet;
}

export interface CudaDevice {
  readonly info: CudaDeviceInfo;
  /** Copies a batch to the GPU (items packed; the batch may be changed or dropped afterwards). */
  upload(batch: TokenBatch): Promise<DeviceCorpus>;
  /** An empty corpus with room for `tokens` tokens in `items` documents, filled by append(). */
  alloc(spec: { dtype: DType; dim: number; tokens: number; items: number }): Promise<DeviceCorpus>;
  memory(): Promise<CudaMemory>;
  /** Returns the allocator's cached blocks to the driver. */
  emptyCache(): Promise<CudaMemory>;
  /** @internal The variant and launch the dispatcher picks for queries against a corpus (bench, tests). */
  plan(
    queries: TokenMatrix | TokenBatch,
    corpus: DeviceCorpus,
    options?: ScoreOptions,
  ): { variant: Variant; launch: Launch };
  /** Disposes every corpus of this device still alive; the device cannot be used afterwards. */
  dispose(): void;
}

/** Options of benchKernel: the scoring options plus the timing loop's. */
export type BenchOptions = ScoreOptions & {
  warmup?: number;
  warmupMs?: number;
  iters?: number;
  rotate?: DeviceCorpus[];
};

/**
 * @internal Benchmarks only (maxsim/internal): times `iters` launches of the kernel the dispatcher
 * picks for queries x corpus with device events, after `warmup` untimed ones and about `warmupMs` of
 * untimed device time (on the H200 a heavy kernel's clock depends on how long the load has run:
 * bench/NOTES.md, 'The power cap'); `rotate` cycles doc sets.
 */
export function benchKernel(
  device: CudaDevice,
  queries: TokenMatrix | TokenBatch,
  corpus: DeviceCorpus,
  options: BenchOptions = {},
): Promise<BenchResult & { variant: string; launch: Launch }> {
  if (!(device instanceof Device))
    throw new InvalidArgumentError('device', 'a CudaDevice from cuda()', describe(device));
  return device.benchLaunches(queries, corpus, options);
}

/** Whether x is a corpus on a CUDA device (from CudaDevice.upload / alloc, or made from one). */
export function isDeviceCorpus(x: unknown): x is DeviceCorpus {
  return x instanceof Corpus;
}

/** @internal A DeviceCorpus for a token set the addon made on the device of `like`. */
export function adoptOnDeviceOf(like: DeviceCorpus, native: NativeTokenSet): DeviceCorpus {
  if (!(like instanceof Corpus)) throw new InvalidArgumentError('corpus', 'a DeviceCorpus', describe(like));
  return like.sibling(native);
}

/**
 * Opens a CUDA device (default 0), or with `devices` ('all' or indices) several GPUs whose upload()
 * shards a corpus across them (cuda-sharded.ts). Throws BackendUnavailableError with the reason when
 * CUDA cannot run.
 */
export function cuda(options?: { device?: number }): Promise<CudaDevice>;
export function cuda(options: { devices: 'all' | readonly number[] }): Promise<CudaDeviceGroup>;
export async function cuda(
  options: { device?: number } | { devices: 'all' | readonly number[] } = {},
): Promise<CudaDevice | CudaDeviceGroup> {
  if (options !== null && typeof options === 'object' && 'devices' in options)
    return openDeviceGroup(options.devices);
  const index = (options as { device?: number }).device ?? 0;
  const status = cudaStatus();
  if (!status.available)
    throw new BackendUnavailableError(`CUDA backend unavailable: ${status.reason ?? 'unknown reason'}`);
  const count = status.devices?.length ?? 0;
  if (!Number.isInteger(index) || index < 0 || index >= count) {
    throw new InvalidArgumentError('device', `a CUDA device index in [0, ${count})`, String(index));
  }
  const native = nativeCuda();
  const handle = native.open(index);
  return new Device(handle, await native.info(handle));
}
