// Typed face of the native CUDA engine (native/cuda via native/binding/cuda_binding.cc).
//
// cuda() opens a GPU; upload() copies a token batch to it once; the resulting DeviceCorpus scores
// queries against it as often as needed. Every GPU call returns a promise (the work runs on the
// device's own native thread, in call order). Device memory is released by dispose(), or by the
// garbage collector when a corpus is dropped without it.
import { BackendUnavailableError, InvalidArgumentError } from '../errors.js';
import { loadNative, nativeUnavailableReason } from '../native.js';
import { checkCenter, checkMean, refuseCenteredQueries } from '../ops/center.js';
import { checkScaleGranularity, hasDocumentScales, type QuantizeOptions, quantize } from '../ops/quantize.js';
import { sortedHits } from '../ops/topk.js';
import {
  checkEncodable,
  type DType,
  decodeToFloat32,
  encodeFloats,
  type Hit,
  isTokenBatch,
  isTokenMatrix,
  OVERFLOW_AT,
  raggedBatchView,
  type ScoreMatrix,
  type TokenBatch,
  type TokenMatrix,
} from '../tensor.js';
import { quantizeCentered, shiftHits, shiftScores } from './cuda-center.js';
import {
  type DeviceCaps,
  type DeviceDType,
  deviceCaps,
  dispatchTable,
  type Launch,
  launchFor,
  type Problem,
  selectVariant,
  type Variant,
} from './cuda-dispatch.js';
import {
  planSelect,
  type SelectKernelInfo,
  type SelectShape,
  type SelectWhere,
  smallSelection,
} from './cuda-select-plan.js';
import { type CudaDeviceGroup, openDeviceGroup } from './cuda-sharded.js';

// ---- the addon's `cuda` object ----------------------------------------------------------------

export interface CudaDeviceStatus {
  index: number;
  name: string;
  computeCapability: [number, number];
  sms: number;
  totalMemory: number;
  l2Bytes: number;
  smemOptin: number;
  /** Other devices this one can access directly (peer access over NVLink or PCIe). */
  peers?: number[];
}

export interface CudaStatus {
  available: boolean;
  /** Why CUDA cannot be used (set when available is false). */
  reason?: string;
  /** e.g. 12040 for CUDA 12.4. */
  driverVersion?: number;
  /** Whether the driver encodes TMA tensor maps (set with driverVersion). */
  tensorMaps?: boolean;
  devices?: CudaDeviceStatus[];
  /** Where the kernel fatbins are looked for, and which were found. */
  kernelDir?: string;
  kernelFiles?: string[];
}

export interface CudaDeviceInfo extends CudaDeviceStatus {
  freeMemory: number;
  maxThreadsPerBlock: number;
  /** Kernel entry points in the loaded fatbins (empty if the driver cannot list them: before 12.4). */
  kernels: string[];
  /** Fatbins that did not load on this GPU, with the reason. */
  moduleErrors: string[];
  kernelDir: string;
  /** Whether the driver encodes TMA tensor maps (cuTensorMapEncodeTiled), which the TMA variants need. */
  tensorMaps: boolean;
}

export interface CudaMemory {
  /** Device bytes held by live allocations (rounded to the allocator's size classes). */
  inUse: number;
  /** Freed device bytes kept by the caching allocator for reuse. */
  cached: number;
  /** Highest inUse so far (reset by each bench call). */
  peak: number;
  total: number;
  free: number;
}

export interface BenchResult {
  /** Per-launch device time (CUDA events), milliseconds. */
  ms: number[];
  /** Peak device bytes in use during the bench. */
  peakBytes: number;
}

/** A device handle as the addon returns it (opaque). */
export interface NativeDevice {
  readonly index: number;
}

/** A device token set as the addon returns it. */
export interface NativeTokenSet {
  readonly count: number;
  readonly tokens: number;
  readonly dim: number;
  readonly dtype: DeviceDType;
  readonly maxLength: number;
  readonly capacityTokens: number;
  readonly capacityItems: number;
  readonly bytes: number;
  readonly device: number;
  readonly disposed: boolean;
  dispose(): void;
}

export interface NativeLaunch {
  kernel: string;
  grid: [number, number, number];
  block: [number, number, number];
  smem: number;
  queryTile?: number;
  /** TMA variants: the box of the documents' tensor map (the kernel's second parameter). */
  tmaBox?: [number, number];
  dtype?: DeviceDType;
}

/** A launch parsed once by the addon (cuda.launchHandle), accepted wherever a NativeLaunch is. */
export type NativeLaunchHandle = { readonly __launchHandle: unique symbol };

export interface NativeCuda {
  status(): CudaStatus;
  open(device: number): NativeDevice;
  info(device: NativeDevice): Promise<CudaDeviceInfo>;
  memory(device: NativeDevice): Promise<CudaMemory>;
  emptyCache(device: NativeDevice): Promise<CudaMemory>;
  upload(device: NativeDevice, batch: TokenBatch): Promise<NativeTokenSet>;
  alloc(
    device: NativeDevice,
    spec: { dtype: DType; dim: number; tokens: number; items: number },
  ): Promise<NativeTokenSet>;
  append(set: NativeTokenSet, batch: TokenBatch): Promise<NativeTokenSet>;
  /** A new 8-bit token set quantized on the GPU from a float one (int8: bitwise the host quantize()). */
  quantize(set: NativeTokenSet, mode: QuantizeMode8, scales?: 'token' | 'document'): Promise<NativeTokenSet>;
  /** A view of some items of a set (new spans over the same token memory). */
  select(set: NativeTokenSet, indices: Float64Array): Promise<NativeTokenSet>;
  /** The items of a device token set, copied back (packed, in order). */
  download(set: NativeTokenSet): Promise<{
    dtype: DeviceDType;
    dim: number;
    count: number;
    data: Float32Array | Uint16Array | Int8Array | Uint8Array;
    offsets: Float64Array;
    lengths: Int32Array;
    scales?: Float32Array;
  }>;
  score(
    device: NativeDevice,
    queries: TokenBatch | NativeTokenSet,
    docs: NativeTokenSet,
    launch: NativeLaunch | NativeLaunchHandle,
    options?: NativeJobOptions,
  ): Promise<Float32Array & { handoff?: JobHandoff }>;
  /**
   * The k best documents per query, selected on the device's worker thread (no score matrix to JS),
   * on the GPU or the host heaps as `select` says (planSelect; 'device' outside the device selection's
   * limits is refused).
   */
  topK(
    device: NativeDevice,
    queries: TokenBatch | NativeTokenSet,
    docs: NativeTokenSet,
    launch: NativeLaunch | NativeLaunchHandle,
    k: number,
    select: SelectWhere,
    options?: NativeJobOptions,
  ): Promise<NativeHeaps>;
  /**
   * Two-stage top-K in one job: scan scanDocs, keep `candidates` per query, rescore them against a view
   * of exactDocs (exactLaunch planned for min(count, queries x candidates) documents), keep k.
   * `count`: the documents both sets held when the launches were planned (checked by the job).
   * `select`: where the scan's candidates are selected (planSelect); the exact stage follows.
   */
  twoStage(
    device: NativeDevice,
    scanQueries: TokenBatch | NativeTokenSet,
    scanDocs: NativeTokenSet,
    scanLaunch: NativeLaunch | NativeLaunchHandle,
    exactQueries: TokenBatch | NativeTokenSet,
    exactDocs: NativeTokenSet,
    exactLaunch: NativeLaunch | NativeLaunchHandle,
    spec: { k: number; candidates: number; count: number; select: SelectWhere },
    options?: NativeJobOptions,
  ): Promise<NativeHeaps>;
  /**
   * The launch parsed once, for a plan used again and again (a job then reads none of its
   * properties); absent from addons that predate it.
   */
  launchHandle?(launch: NativeLaunch): NativeLaunchHandle;
  /** The device selection's limits (native/cuda/device_select.h), for planSelect. */
  readonly selectKernelInfo: SelectKernelInfo;
  /** Entries for benchmarks and tests only (reached through maxsim/internal). */
  internal: NativeCudaInternal;
}

/** Benchmark-only switches of a job (never set by product code; see setJobPhases, onJobTimes). */
export interface NativeJobOptions {
  /** Top-K jobs: synchronize at each phase boundary and return each phase's wall time in NativeHeaps.phases. */
  phases?: boolean;
  /** Return the job's handoff times (JobHandoff) on its result. */
  handoff?: boolean;
  /**
   * false: small score matrices stay in device memory and are read back, instead of the kernel
   * writing them into pinned host memory (the default; the same bits either way).
   */
  mapped?: boolean;
}

/**
 * Where a job's wall time went outside the GPU work, in microseconds (native/binding/cuda_task.h):
 * inUs from the submit on the JS thread to the start on the device's worker thread, runUs the run
 * there (host work, launches, copies and the waits on the GPU), outUs from the end of the run to the
 * completion callback on the JS thread (the thread-safe function's wake-up of the event loop).
 */
export interface JobHandoff {
  inUs: number;
  runUs: number;
  outUs: number;
}

/** What a benchmark learns of one job (onJobTimes). */
export interface JobTimes {
  handoff?: JobHandoff;
  /** With setJobPhases(true): "<phase> <ms> ...". */
  phases?: string;
}

/** The addon's benchmark and test entries (cuda.internal). */
export interface NativeCudaInternal {
  /** Kernel timing with device events (CUDA engine, BenchLaunches). */
  bench(
    device: NativeDevice,
    queries: TokenBatch | NativeTokenSet,
    docs: NativeTokenSet,
    launch: NativeLaunch,
    options: { warmup?: number; warmupMs?: number; iters?: number; rotate?: NativeTokenSet[] },
  ): Promise<BenchResult>;
  /** The native heaps of the rows of a host matrix [rows * cols] (synchronous; for tests). */
  hostTopK(scores: Float32Array, cols: number, k: number): NativeHeaps;
  /**
   * The rows of a host matrix [rows * cols] uploaded and selected as topK selects a device score matrix,
   * where `select` says (for tests and benchmarks).
   */
  deviceTopK(
    device: NativeDevice,
    scores: Float32Array,
    cols: number,
    k: number,
    select: SelectWhere,
  ): Promise<NativeHeaps & { onDevice: boolean }>;
  /** Why the engine refuses a 'device' selection of this shape, or '' (no GPU needed; for tests). */
  selectLimitBreach(rows: number, cols: number, keep: number): string;
}

/**
 * Top-K heaps from the addon: row r's heap (n entries, in the layout topKOfRow builds) at
 * [r * n, (r + 1) * n) of scores / indices; sortedHits() ranks it.
 */
export interface NativeHeaps {
  n: number;
  scores: Float32Array;
  indices: Int32Array;
  /** With NativeJobOptions.phases: "<phase> <ms> ..." for each phase of the job. */
  phases?: string;
  /** With NativeJobOptions.handoff. */
  handoff?: JobHandoff;
}

// Benchmark-only switches, set from bench code through maxsim/internal (never from the environment).
const benchSwitches: {
  jobPhases: boolean;
  mapped: boolean;
  sink?: (job: string, times: JobTimes) => void;
} = {
  jobPhases: false,
  mapped: true,
};

/**
 * @internal Benchmarks only: whether the top-K jobs time their phases (each phase synchronizes, which
 * changes the timing, never the result) and print them to stderr ("topK phases ms: queries 0.1 ...").
 */
export function setJobPhases(on: boolean): void {
  benchSwitches.jobPhases = on === true;
}

/**
 * @internal Benchmarks only: `sink` receives the handoff times (and, with setJobPhases, the phases) of
 * every score, topK and twoStage job until it is replaced or removed (undefined).
 */
export function onJobTimes(sink: ((job: string, times: JobTimes) => void) | undefined): void {
  benchSwitches.sink = typeof sink === 'function' ? sink : undefined;
}

/**
 * @internal Benchmarks only: whether small score matrices (score jobs, topK with host selection) are
 * written by the kernel into pinned host memory (true, the default) or kept on the device and read
 * back (false), to compare the two; the results are the same bits.
 */
export function setMappedScores(on: boolean): void {
  benchSwitches.mapped = on !== false;
}

function jobOptions(): NativeJobOptions | undefined {
  if (!benchSwitches.jobPhases && !benchSwitches.sink && benchSwitches.mapped) return undefined;
  return {
    phases: benchSwitches.jobPhases,
    handoff: benchSwitches.sink !== undefined,
    ...(benchSwitches.mapped ? {} : { mapped: false }),
  };
}

function reportPhases<T extends { phases?: string; handoff?: JobHandoff }>(job: string, h: T): T {
  if (h.phases) console.error(`${job} phases ms: ${h.phases}`);
  benchSwitches.sink?.(job, { handoff: h.handoff, phases: h.phases });
  return h;
}

/** The ranked hits of every row of native heaps. */
export function hitsOfHeaps(h: NativeHeaps, rows: number): Hit[][] {
  const out: Hit[][] = [];
  for (let r = 0; r < rows; r++) out.push(sortedHits(h.scores, h.indices, h.n, r * h.n));
  return out;
}

/** The addon's cuda object (throws BackendUnavailableError when the addon is not built). */
export function nativeCuda(): NativeCuda {
  return loadNative().cuda as unknown as NativeCuda;
}

/** Whether CUDA can be used here and on which devices; never throws. */
export function cudaStatus(): CudaStatus {
  const reason = nativeUnavailableReason();
  if (reason) return { available: false, reason };
  try {
    return nativeCuda().status();
  } catch (e) {
    return { available: false, reason: e instanceof Error ? e.message : String(e) };
  }
}

// ---- fp8 (e4m3) tokens: a GPU-only element type ----------------------------------------------------

export type QuantizeMode8 = 'int8' | 'fp8';

/** An fp8 corpus copied back to the host: e4m3 codes [tokens, dim], one float32 scale per token. */
export interface Fp8Tokens {
  kind: 'fp8';
  dim: number;
  count: number;
  data: Uint8Array;
  scales: Float32Array;
  /** First token of each item (items are packed in order). */
  starts: Float64Array;
  lengths: Int32Array;
}

/** The value of an e4m3 code (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; 0x7f / 0xff NaN). */
export function e4m3ToFloat(code: number): number {
  const sign = code & 0x80 ? -1 : 1;
  const e = (code >> 3) & 0xf;
  const m = code & 7;
  if (e === 15 && m === 7) return Number.NaN;
  return sign * (e === 0 ? m * 2 ** -9 : (1 + m / 8) * 2 ** (e - 7));
}

/** Float64 MaxSim of fp8 queries x fp8 documents on the dequantized values (code value x scale). */
export function referenceMaxsimFp8(queries: Fp8Tokens, docs: Fp8Tokens): Float64Array {
  if (queries.dim !== docs.dim)
    throw new InvalidArgumentError('queries.dim', `${docs.dim} (the dimension of docs)`, String(queries.dim));
  const d = docs.dim;
  const lut = Float64Array.from({ length: 256 }, (_, c) => e4m3ToFloat(c));
  const decode = (t: Fp8Tokens) => {
    const out = new Float64Array(t.data.length);
    for (let i = 0; i < out.length; i++) out[i] = lut[t.data[i]] * t.scales[Math.floor(i / d)];
    return out;
  };
  const qv = decode(queries);
  const dv = decode(docs);
  const out = new Float64Array(queries.count * docs.count);
  for (let q = 0; q < queries.count; q++) {
    for (let b = 0; b < docs.count; b++) {
      if (docs.lengths[b] === 0) {
        out[q * docs.count + b] = Number.NEGATIVE_INFINITY;
        continue;
      }
      let total = 0;
      for (let i = 0; i < queries.lengths[q]; i++) {
        const qo = (queries.starts[q] + i) * d;
        let best = Number.NEGATIVE_INFINITY;
        for (let j = 0; j < docs.lengths[b]; j++) {
          const dof = (docs.starts[b] + j) * d;
          let dot = 0;
          for (let k = 0; k < d; k++) dot += qv[qo + k] * dv[dof + k];
          if (dot > best) best = dot;
        }
        total += best;
      }
      out[q * docs.count + b] = total;
    }
  }
  return out;
}

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
  /** The k best documents per query: descending score, ties to the lower index. */
  topK(queries: TokenMatrix | TokenBatch, k: number, options?: TopKOptions): Promise<Hit[][]>;
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
  /** The native token set (for bench and the harness). */
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
  /** The variant and launch the dispatcher picks for queries against a corpus. */
  plan(
    queries: TokenMatrix | TokenBatch,
    corpus: DeviceCorpus,
    options?: ScoreOptions,
  ): { variant: Variant; launch: Launch };
  /** Disposes every corpus of this device still alive; the device cannot be used afterwards. */
  dispose(): void;
}

function describe(x: unknown): string {
  if (x === null) return 'null';
  if (typeof x === 'object') return (x as object).constructor?.name ?? 'object';
  return typeof x === 'number' || typeof x === 'string' ? JSON.stringify(x) : typeof x;
}

// The spans of a one-query batch, shared by the calls (read-only: the jobs and plans only read
// them), so that a TokenMatrix query allocates no typed arrays: starts [0], lengths [length].
const MATRIX_STARTS = new Float64Array([0]);
const matrixLengths = new Map<number, Int32Array>();

function asQueryBatch(queries: TokenMatrix | TokenBatch, name = 'queries'): TokenBatch {
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
function toDtype(batch: TokenBatch, dtype: DeviceDType, dim: number): TokenBatch {
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
function jobQueries(batch: TokenBatch, dtype: DeviceDType, dim: number, rangeOnWorker = false): TokenBatch {
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
const WORKER_RANGE = /Expected finite values within the (float16|bfloat16) range \(larger ones/;

/**
 * Rethrows a job's error; the worker's range refusal of `batch` (jobQueries with rangeOnWorker)
 * becomes encodeFloats' error, which counts and names the values, as when JS checked them first.
 */
function rethrowRange(e: unknown, batch: TokenBatch): never {
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
function withinMagnitude(data: TokenBatch['data'], limit: number): boolean {
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
interface CachedPlan {
  variant: Variant;
  launch: Launch;
  handle: NativeLaunch | NativeLaunchHandle;
}

/** What the dispatcher reads of a corpus. */
type CorpusShape = Pick<DeviceCorpus, 'count' | 'dim' | 'dtype' | 'maxLength'> & {
  tokens?: number;
  documentScales?: boolean;
};

function shapeOf(c: DeviceCorpus): CorpusShape {
  return {
    count: c.count,
    dim: c.dim,
    dtype: c.dtype,
    maxLength: c.maxLength,
    tokens: c.tokens,
    documentScales: c.documentScales,
  };
}

function checkCandidates(n: unknown): number {
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0)
    throw new InvalidArgumentError('options.rescore.candidates', 'a non-negative integer', describe(n));
  return n;
}

// The corpus that rescores `scan`'s candidates: one of this module's corpora, on the same device,
// with the same documents (count and dim).
function rescoreCorpus(rescore: { docs: DeviceCorpus }, scan: Corpus): Corpus {
  const docs = rescore?.docs;
  if (!(docs instanceof Corpus))
    throw new InvalidArgumentError('options.rescore.docs', 'a DeviceCorpus', describe(docs));
  if (docs.count !== scan.count || docs.dim !== scan.dim)
    throw new InvalidArgumentError(
      'options.rescore.docs',
      `the same documents as the scanned corpus (${scan.count} of dim ${scan.dim})`,
      `${docs.count} of dim ${docs.dim}`,
    );
  return docs;
}

function maxLength(batch: TokenBatch): number {
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
function batchMean(batch: TokenBatch): Float32Array | undefined {
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
function checkSameMean(batch: TokenBatch, mean: Float32Array | undefined): void {
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

class Corpus implements DeviceCorpus {
  // A token set's dim and dtype never change (an append must match them): read once, not through
  // the native getters on every call.
  readonly dim: number;
  readonly dtype: DeviceDType;
  constructor(
    private readonly device: Device,
    readonly native: NativeTokenSet,
    private docScales = false,
    readonly mean: Float32Array | undefined = undefined,
  ) {
    this.dim = native.dim;
    this.dtype = native.dtype;
  }
  get documentScales() {
    return this.docScales;
  }
  get count() {
    return this.native.count;
  }
  get tokens() {
    return this.native.tokens;
  }
  get maxLength() {
    return this.native.maxLength;
  }
  get bytes() {
    return this.native.bytes;
  }
  get disposed() {
    return this.native.disposed;
  }

  score(query: TokenMatrix, options?: ScoreOptions): Promise<Float32Array>;
  score(queries: TokenBatch, options?: ScoreOptions): Promise<ScoreMatrix>;
  async score(
    queries: TokenMatrix | TokenBatch,
    options: ScoreOptions = {},
  ): Promise<Float32Array | ScoreMatrix> {
    const batch = asQueryBatch(queries);
    refuseCenteredQueries(queries, 'queries');
    const data = await this.scoreAll(batch, options);
    if (this.mean) shiftScores(batch, this.mean, data);
    // cols from the result: an append that completed before this call may have grown the corpus
    return isTokenMatrix(queries)
      ? data
      : { data, rows: batch.count, cols: batch.count > 0 ? data.length / batch.count : this.count };
  }

  async topK(queries: TokenMatrix | TokenBatch, k: number, options: TopKOptions = {}): Promise<Hit[][]> {
    if (!Number.isInteger(k) || k < 0)
      throw new InvalidArgumentError('k', 'a non-negative integer', String(k));
    const batch = asQueryBatch(queries);
    refuseCenteredQueries(queries, 'queries');
    this.check();
    const q = jobQueries(batch, this.dtype, this.dim, true);
    const rescore = options.rescore;
    const exact = rescore === undefined ? undefined : rescoreCorpus(rescore, this);
    // the selection runs on the GPU (NaN rows and k > 256 on the worker's heaps): k hits per query come back
    const empty = () => Array.from({ length: q.count }, (): Hit[] => []);
    if (!exact) {
      const count = this.count; // one read of the native getter
      if (q.count === 0 || count === 0 || k === 0) return empty();
      const launch = this.device.planCached(q, this, options).handle;
      // planned on k itself, not min(k, count): an append in flight may grow the corpus before the job
      // runs, and the job keeps min(k, its count), which a plan for k (<= count now) still covers
      const select = this.device.selectFor({ rows: q.count, cols: count, keep: k });
      let h: NativeHeaps;
      try {
        h = await nativeCuda().topK(this.device.handle, q, this.native, launch, k, select, jobOptions());
      } catch (e) {
        rethrowRange(e, batch);
      }
      const hits = hitsOfHeaps(reportPhases('topK', h), q.count);
      return this.mean ? shiftHits(batch, this.mean, hits) : hits;
    }
    exact.check();
    const qe = jobQueries(batch, exact.dtype, exact.dim, true);
    const keep = Math.min(this.count, checkCandidates(rescore?.candidates));
    if (q.count === 0 || keep === 0 || k === 0) return empty();
    const scan = this.device.planCached(q, this, options).handle;
    // the view of the candidates holds this many documents (each query's in turn, or the whole float
    // corpus when that is no more; the union, at most as many, where the host selects), none longer
    // than exact's longest; their total length is unknown here, so the rules go by the longest
    const shape = { ...shapeOf(exact), count: Math.min(this.count, q.count * keep), tokens: undefined };
    const rescoring = this.device.planCached(qe, shape, {}).handle;
    const select = this.device.selectFor({ rows: q.count, cols: this.count, keep });
    const spec = { k, candidates: keep, count: this.count, select };
    const native = nativeCuda();
    let h: NativeHeaps;
    try {
      h = await native.twoStage(
        this.device.handle,
        q,
        this.native,
        scan,
        qe,
        exact.native,
        rescoring,
        spec,
        jobOptions(),
      );
    } catch (e) {
      rethrowRange(e, batch);
    }
    return hitsOfHeaps(reportPhases('twoStage', h), q.count);
  }

  async append(batch: TokenBatch): Promise<void> {
    this.check();
    if (!isTokenBatch(batch)) throw new InvalidArgumentError('batch', 'a TokenBatch', describe(batch));
    checkSameMean(batch, this.mean);
    // lowered before the copy is queued: a scoring call planned from now on sees the new documents
    if (!hasDocumentScales(batch)) this.docScales = false;
    await nativeCuda().append(this.native, batch);
  }

  async quantize(mode: QuantizeMode8, options: QuantizeOptions = {}): Promise<DeviceCorpus> {
    this.check();
    if (mode !== 'int8' && mode !== 'fp8')
      throw new InvalidArgumentError('mode', "'int8' or 'fp8'", JSON.stringify(mode));
    // fp8 defaults to one scale per document: its ranking fidelity is the same as per token's
    // (top-10 0.944 vs 0.945 on the demo corpus) and its compute-bound kernels run ~1.3x faster
    const scales =
      options?.scales === undefined && mode === 'fp8' ? 'document' : checkScaleGranularity(options?.scales);
    if (this.dtype === 'int8' || this.dtype === 'fp8')
      throw new InvalidArgumentError(
        'corpus.dtype',
        "'float32', 'float16' or 'bfloat16' (a float corpus to quantize)",
        `'${this.dtype}'`,
      );
    const center = checkCenter(options?.center ?? CENTER_DEFAULT, this.dim);
    if (center === false)
      return this.device.adopt(await nativeCuda().quantize(this.native, mode, scales), scales === 'document');
    const made = await quantizeCentered(this, mode, scales, center, {
      upload: (batch) => nativeCuda().upload(this.device.handle, batch),
      quantize: (set, m, s) => nativeCuda().quantize(set, m, s),
    });
    return this.device.adopt(made.native, scales === 'document', made.mean);
  }

  async download(): Promise<TokenBatch | Fp8Tokens> {
    this.check();
    const r = await nativeCuda().download(this.native);
    if (r.dtype === 'fp8') {
      const starts = Float64Array.from({ length: r.count }, (_, i) => r.offsets[i]);
      return {
        kind: 'fp8',
        dim: r.dim,
        count: r.count,
        data: r.data as Uint8Array,
        scales: r.scales as Float32Array,
        starts,
        lengths: r.lengths,
      };
    }
    // a view: the data may hold tokens past the last item (a corpus allocated with spare capacity)
    return raggedBatchView(r.data as Float32Array | Uint16Array | Int8Array, r.offsets, {
      dim: r.dim,
      dtype: r.dtype,
      scales: r.scales,
      checkFinite: false,
    });
  }

  async select(indices: ArrayLike<number>): Promise<DeviceCorpus> {
    this.check();
    if (indices === null || typeof indices !== 'object' || typeof indices.length !== 'number')
      throw new InvalidArgumentError('indices', 'an array of document indices', describe(indices));
    const view = await nativeCuda().select(this.native, Float64Array.from(indices));
    return this.device.adopt(view, this.docScales, this.mean);
  }

  dispose(): void {
    this.native.dispose();
  }

  /** A corpus for a token set made on this corpus's device (tracked by it; this one may be disposed). */
  sibling(native: NativeTokenSet): Corpus {
    this.device.check();
    return this.device.adopt(native);
  }

  private check() {
    if (this.native.disposed)
      throw new InvalidArgumentError(
        'corpus',
        'a live DeviceCorpus',
        'one that was disposed (dispose() was called)',
      );
    this.device.check();
  }

  private async scoreAll(batch: TokenBatch, options: ScoreOptions): Promise<Float32Array> {
    this.check();
    const q = jobQueries(batch, this.dtype, this.dim, true);
    if (q.count === 0 || this.count === 0) return new Float32Array(q.count * this.count);
    const launch = this.device.planCached(q, this, options).handle;
    const options_ = jobOptions();
    let scores: Float32Array & { handoff?: JobHandoff };
    try {
      scores = await nativeCuda().score(this.device.handle, q, this.native, launch, options_);
    } catch (e) {
      rethrowRange(e, batch);
    }
    if (!options_) return scores;
    reportPhases('score', scores);
    Reflect.deleteProperty(scores, 'handoff'); // reported; the caller gets the plain array
    return scores;
  }
}

class Device implements CudaDevice {
  private readonly corpora = new Set<WeakRef<Corpus>>();
  private disposed = false;
  readonly caps: DeviceCaps;

  constructor(
    readonly handle: NativeDevice,
    readonly info: CudaDeviceInfo,
  ) {
    this.caps = deviceCaps(info);
    this.kernels = new Set(info.kernels);
  }

  /** Entry points in the loaded fatbins (empty when the driver cannot list them). */
  private readonly kernels: ReadonlySet<string>;

  check() {
    if (this.disposed)
      throw new InvalidArgumentError(
        'device',
        'a live CudaDevice',
        'one that was disposed (dispose() was called)',
      );
  }

  /** A corpus for a token set this device made (tracked, so dispose() of the device frees it). */
  adopt(native: NativeTokenSet, documentScales = false, mean?: Float32Array): Corpus {
    return this.track(native, documentScales, mean);
  }

  private track(native: NativeTokenSet, documentScales = false, mean?: Float32Array): Corpus {
    const c = new Corpus(this, native, documentScales, mean);
    for (const r of this.corpora) if (!r.deref() || r.deref()?.disposed) this.corpora.delete(r);
    this.corpora.add(new WeakRef(c));
    return c;
  }

  async upload(batch: TokenBatch): Promise<DeviceCorpus> {
    this.check();
    if (!isTokenBatch(batch))
      throw new InvalidArgumentError('batch', 'a TokenBatch (denseBatch or raggedBatch)', describe(batch));
    const mean = batchMean(batch);
    return this.track(await nativeCuda().upload(this.handle, batch), hasDocumentScales(batch), mean);
  }

  async alloc(spec: { dtype: DType; dim: number; tokens: number; items: number }): Promise<DeviceCorpus> {
    this.check();
    // an empty int8 corpus has document scales until a batch without them is appended
    return this.track(await nativeCuda().alloc(this.handle, spec), spec?.dtype === 'int8');
  }

  memory(): Promise<CudaMemory> {
    this.check();
    return nativeCuda().memory(this.handle);
  }

  emptyCache(): Promise<CudaMemory> {
    this.check();
    return nativeCuda().emptyCache(this.handle);
  }

  /** Where a selection of a job on this device runs (cuda-select-plan.ts): small ones on the host. */
  selectFor(shape: SelectShape): SelectWhere {
    if (smallSelection(shape)) return 'host';
    const limits = nativeCuda().selectKernelInfo;
    if (typeof limits !== 'object' || limits === null)
      throw new BackendUnavailableError(
        'the native addon reports no selection limits (cuda.selectKernelInfo; it predates them); run `npm rebuild maxsim`',
      );
    return planSelect(shape, limits, this.kernels);
  }

  // planCached's plans by shape: a plan is a pure function of the problem (the device's caps, table
  // and kernels are fixed), so a repeated shape, which is what a server sees, skips the rules.
  private readonly plans = new Map<string, CachedPlan>();

  /**
   * planFor, cached by the problem's shape (for the jobs, which only read the launch: the cached
   * objects are never handed to the caller of plan()), with the launch parsed once by the addon.
   */
  planCached(q: TokenBatch, corpus: CorpusShape, options: ScoreOptions): CachedPlan {
    const key = `${q.count} ${maxLength(q)} ${corpus.maxLength} ${corpus.dim} ${corpus.count} ${corpus.tokens} ${corpus.dtype} ${corpus.documentScales === true} ${options.variant}`;
    let plan = this.plans.get(key);
    if (!plan) {
      const p = this.planFor(q, corpus, options);
      plan = { ...p, handle: nativeCuda().launchHandle?.(p.launch as NativeLaunch) ?? p.launch };
      if (this.plans.size >= 256) this.plans.clear(); // shapes vary without bound (corpora grow): keep few
      this.plans.set(key, plan);
    }
    return plan;
  }

  planFor(q: TokenBatch, corpus: CorpusShape, options: ScoreOptions): { variant: Variant; launch: Launch } {
    const problem: Problem = {
      numQueries: q.count,
      maxQueryLength: maxLength(q),
      maxDocLength: corpus.maxLength,
      dim: corpus.dim,
      numDocs: corpus.count,
      docTokens: corpus.tokens,
      dtype: corpus.dtype,
      documentScales: corpus.documentScales === true,
    };
    const variant = selectVariant(problem, this.caps, options.variant, dispatchTable(), this.kernels);
    return { variant, launch: launchFor(variant, problem, this.caps) };
  }

  plan(queries: TokenMatrix | TokenBatch, corpus: DeviceCorpus, options: ScoreOptions = {}) {
    return this.planFor(jobQueries(asQueryBatch(queries), corpus.dtype, corpus.dim), corpus, options);
  }

  async benchLaunches(
    queries: TokenMatrix | TokenBatch,
    corpus: DeviceCorpus,
    options: BenchOptions = {},
  ): Promise<BenchResult & { variant: string; launch: Launch }> {
    this.check();
    const q = toDtype(asQueryBatch(queries), corpus.dtype, corpus.dim);
    const rotate = options.rotate ?? [];
    // Plan for the largest doc set of the rotation so the grid covers every launch.
    let widest = corpus;
    for (const r of rotate) if (r.count > widest.count || r.maxLength > widest.maxLength) widest = r;
    // the document-scale kernels only when every set of the rotation has document scales
    const documentScales = [corpus, ...rotate].every((c) => c.documentScales);
    const { variant, launch } = this.planFor(q, { ...shapeOf(widest), documentScales }, options);
    const r = await nativeCuda().internal.bench(this.handle, q, corpus.native, launch, {
      warmup: options.warmup,
      warmupMs: options.warmupMs,
      iters: options.iters,
      rotate: rotate.map((c) => c.native),
    });
    return { ...r, variant: variant.name, launch };
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const r of this.corpora) r.deref()?.dispose();
    this.corpora.clear();
  }
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
