// Typed face of the native CUDA engine (native/cuda via native/binding/cuda_binding.cc).
//
// cuda() opens a GPU; upload() copies a token batch to it once; the resulting DeviceCorpus scores
// queries against it as often as needed. Every GPU call returns a promise (the work runs on the
// device's own native thread, in call order). Device memory is released by dispose(), or by the
// garbage collector when a corpus is dropped without it.
import { BackendUnavailableError, InvalidArgumentError } from '../errors.js';
import { loadNative, nativeUnavailableReason } from '../native.js';
import { topKOfRow } from '../ops/topk.js';
import {
  decodeToFloat32,
  encodeFloats,
  type FloatDType,
  type Hit,
  isTokenBatch,
  isTokenMatrix,
  matrixAsBatch,
  type ScoreMatrix,
  type TokenBatch,
  type TokenMatrix,
} from '../tensor.js';
import {
  type DeviceCaps,
  dispatchTable,
  type Launch,
  launchFor,
  type Problem,
  selectVariant,
  type Variant,
} from './cuda-dispatch.js';

// ---- the addon's `cuda` object ----------------------------------------------------------------

export interface CudaDeviceStatus {
  index: number;
  name: string;
  computeCapability: [number, number];
  sms: number;
  totalMemory: number;
  l2Bytes: number;
  smemOptin: number;
}

export interface CudaStatus {
  available: boolean;
  /** Why CUDA cannot be used (set when available is false). */
  reason?: string;
  /** e.g. 12040 for CUDA 12.4. */
  driverVersion?: number;
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
  readonly dtype: FloatDType;
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
  dtype?: FloatDType;
}

export interface NativeCuda {
  status(): CudaStatus;
  open(device: number): NativeDevice;
  info(device: NativeDevice): Promise<CudaDeviceInfo>;
  memory(device: NativeDevice): Promise<CudaMemory>;
  emptyCache(device: NativeDevice): Promise<CudaMemory>;
  upload(device: NativeDevice, batch: TokenBatch): Promise<NativeTokenSet>;
  alloc(
    device: NativeDevice,
    spec: { dtype: FloatDType; dim: number; tokens: number; items: number },
  ): Promise<NativeTokenSet>;
  append(set: NativeTokenSet, batch: TokenBatch): Promise<NativeTokenSet>;
  score(
    device: NativeDevice,
    queries: TokenBatch | NativeTokenSet,
    docs: NativeTokenSet,
    launch: NativeLaunch,
  ): Promise<Float32Array>;
  bench(
    device: NativeDevice,
    queries: TokenBatch | NativeTokenSet,
    docs: NativeTokenSet,
    launch: NativeLaunch,
    options: { warmup?: number; iters?: number; rotate?: NativeTokenSet[] },
  ): Promise<BenchResult>;
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

// ---- the public face ----------------------------------------------------------------------------

export interface ScoreOptions {
  /** Force a kernel variant by name (benchmarks, tests); default: the dispatcher's choice. */
  variant?: string;
}

export interface DeviceCorpus {
  /** Documents (items) on the device. */
  readonly count: number;
  readonly dim: number;
  readonly dtype: FloatDType;
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
  topK(queries: TokenMatrix | TokenBatch, k: number, options?: ScoreOptions): Promise<Hit[][]>;
  /** Appends documents (only to a corpus made by CudaDevice.alloc, within its capacity). */
  append(batch: TokenBatch): Promise<void>;
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
  alloc(spec: { dtype: FloatDType; dim: number; tokens: number; items: number }): Promise<DeviceCorpus>;
  memory(): Promise<CudaMemory>;
  /** Returns the allocator's cached blocks to the driver. */
  emptyCache(): Promise<CudaMemory>;
  /** The variant and launch the dispatcher picks for queries against a corpus. */
  plan(
    queries: TokenMatrix | TokenBatch,
    corpus: DeviceCorpus,
    options?: ScoreOptions,
  ): { variant: Variant; launch: Launch };
  /** Times `iters` launches with device events after `warmup` untimed ones; `rotate` cycles doc sets. */
  bench(
    queries: TokenMatrix | TokenBatch,
    corpus: DeviceCorpus,
    options?: ScoreOptions & { warmup?: number; iters?: number; rotate?: DeviceCorpus[] },
  ): Promise<BenchResult & { variant: string; launch: Launch }>;
  /** Disposes every corpus of this device still alive; the device cannot be used afterwards. */
  dispose(): void;
}

function describe(x: unknown): string {
  if (x === null) return 'null';
  if (typeof x === 'object') return (x as object).constructor?.name ?? 'object';
  return typeof x === 'number' || typeof x === 'string' ? JSON.stringify(x) : typeof x;
}

function asQueryBatch(queries: TokenMatrix | TokenBatch, name = 'queries'): TokenBatch {
  if (isTokenMatrix(queries)) return matrixAsBatch(queries);
  if (isTokenBatch(queries)) return queries;
  throw new InvalidArgumentError(name, 'a TokenMatrix or TokenBatch', describe(queries));
}

/** Queries in the corpus dtype: queries are small, so a float32 query meets a float16 corpus here. */
function toDtype(batch: TokenBatch, dtype: FloatDType, dim: number): TokenBatch {
  if (batch.dim !== dim)
    throw new InvalidArgumentError('queries.dim', `${dim} (the dimension of the corpus)`, String(batch.dim));
  if (batch.dtype === 'int8')
    throw new InvalidArgumentError(
      'queries.dtype',
      "'float32', 'float16' or 'bfloat16' (the CUDA engine does not score int8 yet)",
      "'int8'",
    );
  if (batch.dtype === dtype) return batch;
  const data = encodeFloats(decodeToFloat32(batch.data, batch.dtype, batch.dim), dtype);
  return { ...batch, dtype, data, scales: undefined };
}

function maxLength(batch: TokenBatch): number {
  let m = 0;
  for (let i = 0; i < batch.count; i++) if (batch.lengths[i] > m) m = batch.lengths[i];
  return m;
}

class Corpus implements DeviceCorpus {
  constructor(
    private readonly device: Device,
    readonly native: NativeTokenSet,
  ) {}
  get count() {
    return this.native.count;
  }
  get dim() {
    return this.native.dim;
  }
  get dtype() {
    return this.native.dtype;
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
    const data = await this.scoreAll(batch, options);
    // cols from the result: an append that completed before this call may have grown the corpus
    return isTokenMatrix(queries)
      ? data
      : { data, rows: batch.count, cols: batch.count > 0 ? data.length / batch.count : this.count };
  }

  async topK(queries: TokenMatrix | TokenBatch, k: number, options: ScoreOptions = {}): Promise<Hit[][]> {
    if (!Number.isInteger(k) || k < 0)
      throw new InvalidArgumentError('k', 'a non-negative integer', String(k));
    const batch = asQueryBatch(queries);
    const data = await this.scoreAll(batch, options);
    const cols = batch.count > 0 ? data.length / batch.count : 0;
    const out: Hit[][] = [];
    for (let q = 0; q < batch.count; q++) out.push(topKOfRow(data, k, q * cols, cols));
    return out;
  }

  async append(batch: TokenBatch): Promise<void> {
    this.check();
    if (!isTokenBatch(batch)) throw new InvalidArgumentError('batch', 'a TokenBatch', describe(batch));
    await nativeCuda().append(this.native, batch);
  }

  dispose(): void {
    this.native.dispose();
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
    const q = toDtype(batch, this.dtype, this.dim);
    if (q.count === 0 || this.count === 0) return new Float32Array(q.count * this.count);
    const { launch } = this.device.planFor(q, this, options);
    return nativeCuda().score(this.device.handle, q, this.native, launch);
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
    this.caps = { computeCapability: info.computeCapability, sms: info.sms, smemOptin: info.smemOptin };
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

  private track(native: NativeTokenSet): Corpus {
    const c = new Corpus(this, native);
    for (const r of this.corpora) if (!r.deref() || r.deref()?.disposed) this.corpora.delete(r);
    this.corpora.add(new WeakRef(c));
    return c;
  }

  async upload(batch: TokenBatch): Promise<DeviceCorpus> {
    this.check();
    if (!isTokenBatch(batch))
      throw new InvalidArgumentError('batch', 'a TokenBatch (denseBatch or raggedBatch)', describe(batch));
    return this.track(await nativeCuda().upload(this.handle, batch));
  }

  async alloc(spec: {
    dtype: FloatDType;
    dim: number;
    tokens: number;
    items: number;
  }): Promise<DeviceCorpus> {
    this.check();
    return this.track(await nativeCuda().alloc(this.handle, spec));
  }

  memory(): Promise<CudaMemory> {
    this.check();
    return nativeCuda().memory(this.handle);
  }

  emptyCache(): Promise<CudaMemory> {
    this.check();
    return nativeCuda().emptyCache(this.handle);
  }

  planFor(q: TokenBatch, corpus: DeviceCorpus, options: ScoreOptions): { variant: Variant; launch: Launch } {
    const problem: Problem = {
      numQueries: q.count,
      maxQueryLength: maxLength(q),
      maxDocLength: corpus.maxLength,
      dim: corpus.dim,
      numDocs: corpus.count,
      dtype: corpus.dtype,
    };
    const variant = selectVariant(problem, this.caps, options.variant, dispatchTable(), this.kernels);
    return { variant, launch: launchFor(variant, problem, this.caps) };
  }

  plan(queries: TokenMatrix | TokenBatch, corpus: DeviceCorpus, options: ScoreOptions = {}) {
    return this.planFor(toDtype(asQueryBatch(queries), corpus.dtype, corpus.dim), corpus, options);
  }

  async bench(
    queries: TokenMatrix | TokenBatch,
    corpus: DeviceCorpus,
    options: ScoreOptions & { warmup?: number; iters?: number; rotate?: DeviceCorpus[] } = {},
  ): Promise<BenchResult & { variant: string; launch: Launch }> {
    this.check();
    const q = toDtype(asQueryBatch(queries), corpus.dtype, corpus.dim);
    const rotate = options.rotate ?? [];
    // Plan for the largest doc set of the rotation so the grid covers every launch.
    let widest = corpus;
    for (const r of rotate) if (r.count > widest.count || r.maxLength > widest.maxLength) widest = r;
    const { variant, launch } = this.planFor(q, widest, options);
    const r = await nativeCuda().bench(this.handle, q, corpus.native, launch, {
      warmup: options.warmup,
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

/** Opens a CUDA device (default 0). Throws BackendUnavailableError with the reason when CUDA cannot run. */
export async function cuda(options: { device?: number } = {}): Promise<CudaDevice> {
  const index = options.device ?? 0;
  const status = cudaStatus();
  if (!status.available)
    throw new BackendUnavailableError(`CUDA backend unavailable: ${status.reason ?? 'unknown reason'}`);
  const count = status.devices?.length ?? 0;
  if (!Number.isInteger(index) || index < 0 || index >= count) {
    throw new InvalidArgumentError('device', `a CUDA device index in [0, ${count})`, String(options.device));
  }
  const native = nativeCuda();
  const handle = native.open(index);
  return new Device(handle, await native.info(handle));
}
