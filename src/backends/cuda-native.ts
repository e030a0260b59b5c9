import { loadNative, nativeUnavailableReason } from '../native.js';
import { sortedHits } from '../ops/topk.js';
import type { DType, Hit, TokenBatch } from '../tensor.js';
import type { QuantizeMode8 } from './cuda.js';
import type { DeviceDType } from './cuda-dispatch.js';
import type { SelectKernelInfo, SelectWhere } from './cuda-select-plan.js';

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
  /** wgmma kernels: 1 takes the work units pass-inner (the kernel checks it applies), 0 pass-outer. */
  unitOrder?: 0 | 1;
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
   * `exactGroup`: queries per exact launch where the device selects (exactLaunch planned for that
   * many; absent: all in one).
   */
  twoStage(
    device: NativeDevice,
    scanQueries: TokenBatch | NativeTokenSet,
    scanDocs: NativeTokenSet,
    scanLaunch: NativeLaunch | NativeLaunchHandle,
    exactQueries: TokenBatch | NativeTokenSet,
    exactDocs: NativeTokenSet,
    exactLaunch: NativeLaunch | NativeLaunchHandle,
    spec: { k: number; candidates: number; count: number; select: SelectWhere; exactGroup?: number },
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
export const benchSwitches: {
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

export function jobOptions(): NativeJobOptions | undefined {
  if (!benchSwitches.jobPhases && !benchSwitches.sink && benchSwitches.mapped) return undefined;
  return {
    phases: benchSwitches.jobPhases,
    handoff: benchSwitches.sink !== undefined,
    ...(benchSwitches.mapped ? {} : { mapped: false }),
  };
}

export function reportPhases<T extends { phases?: string; handoff?: JobHandoff }>(job: string, h: T): T {
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
