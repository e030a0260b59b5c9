// MaxSim training on host arrays: a forward pass that saves, for every (query, document, query token),
// the document token that won the max, and a backward pass that routes score gradients through it.
// The native CPU engine (native/cpu/train.cc) does the token loops; the contrastive loss over the
// small [Nq, B] score matrix is computed here in float64.
//
// Gradients are deterministic: bitwise identical run to run and for any thread count.
// backend 'cuda' runs both passes on a GPU (native/cuda/kernels/maxsim_train.cu) with the same
// semantics and layouts: with host arrays in and out, each pass uploads the batches and the argmax
// makes a round trip; with device corpora (cuda().upload) in, the argmax stays on the device between
// the passes and the gradients come back as device corpora (device-resident training).

import { checkSignal, throwIfAborted, untilAborted } from '../abort.js';
import {
  adoptOnDeviceOf,
  cudaStatus,
  type DeviceCorpus,
  isDeviceCorpus,
  type NativeTokenSet,
} from '../backends/cuda.js';
import {
  CSR_CHUNK_MIN,
  planBackward,
  planForward,
  type TrainBackwardPlan,
  type TrainDevice,
  type TrainForwardPlan,
  type TrainKernelInfo,
  type TrainPlanTuning,
  type TrainShape,
} from '../backends/cuda-train-plan.js';
import { BackendUnavailableError, InvalidArgumentError } from '../errors.js';
import { loadNative } from '../native.js';
import { checkCompatible, encodeFloats, type FloatDType, type TokenBatch } from '../tensor.js';

/** 'all': every query with every document (scores [Nq, B]); 'diagonal': query i with document i. */
export type TrainPairs = 'all' | 'diagonal';
/** 'auto' trains on the CPU; 'cuda' only when asked for explicitly. */
export type TrainBackend = 'cpu' | 'cuda' | 'auto';
/**
 * How the CUDA backward pass builds dD: 'csr' (default) inverts the argmax into per-row source lists
 * and sums each row in a fixed order (bitwise reproducible); 'atomic' scatters with float atomics
 * (not reproducible, equal to rounding); 'auto' measures the contention on the CSR's histogram (rows
 * with sources / sources) and runs the atomic scatter where there is little to reduce, the CSR
 * otherwise (reproducible only when it picks the CSR; the gradients report the path that ran).
 */
export type TrainDDPath = 'csr' | 'atomic' | 'auto';

/**
 * Internal knobs of the CUDA passes, for tests and benchmarks (maxsimTrainTuned, from
 * maxsim/internal; not among the public options); they feed the plan (src/backends/cuda-train-plan.ts)
 * and none changes the gradients' values except csrChunk (see below).
 * argmaxBits: device storage of the argmax (0 automatic: int16 when every document is shorter than
 * 32768 tokens); docBlock / queryBlock: documents per CSR block and queries per CSR cell (0 automatic);
 * forwardGrid: at most this many forward CTAs (0 automatic); forwardTma: false makes the wgmma forward
 * read documents with cp.async instead of TMA (A/B measurements); csrChunk:
 * sources per chunk of a split dD row (0 automatic = CSR_CHUNK, else >= CSR_CHUNK_MIN; rows with more
 * sources are summed by one warp per chunk; it sets the fp64 association of long rows, so unlike the
 * others it may change the last bit of their gradients); csrBlockWalk: false counts and places the
 * CSR with one warp per (document, query block) instead of one CTA (A/B measurements; the same CSR);
 * profile: the passes report profileMs (host phases: wall time; kernels: CUDA event time).
 * @internal
 */
export interface TrainCudaTuning extends TrainPlanTuning {
  profile?: boolean;
}
/**
 * Forward kernel for backend 'cuda': 'auto' (default) runs a tensor-core kernel where one applies
 * (float16 / bfloat16 queries and documents of one dtype, dim % 8 == 0, dim <= 128): the Hopper
 * wgmma kernel for all pairs on compute capability 9.x, the mma.sync kernel otherwise (8.0 or newer),
 * and the CUDA-core kernel (bitwise equal to the CPU engine) elsewhere; 'wgmma', 'mma' and 'simt'
 * force one (where it does not apply it is refused). The two tensor-core kernels give the same
 * scores and argmax; their dot products round differently from the CPU's sequential fp32 sums, so
 * scores agree with the CPU to fp32 rounding and the argmax may differ at near-ties only.
 */
export type TrainKernel = 'auto' | 'wgmma' | 'mma' | 'simt';

/**
 * Gradient dtype: 'float32' (default) or 'input': each gradient in its input's dtype (float16 and
 * bfloat16 as Uint16Array bits, rounded to nearest even from the float32 result; float32 inputs keep
 * float32). On device-resident inputs the cast runs on the GPU.
 */
export type GradientDtype = 'float32' | 'input';
/** A host gradient array: Float32Array, or float16 / bfloat16 bits with outputDtype 'input'. */
export type GradientArray = Float32Array | Uint16Array;

export interface MaxsimTrainOptions {
  /** Default 'all'. 'diagonal' needs as many queries as documents. */
  pairs?: TrainPairs;
  /**
   * Cancels the forward pass and the backward passes of its result: rejects with an AbortError at
   * once; a native pass in flight cannot stop early, runs to its end in the background and its result
   * is dropped. Device corpora: checked before and after the forward pass.
   */
  signal?: AbortSignal;
  backend?: TrainBackend;
  /** CPU worker threads (default all cores); results do not depend on it. */
  threads?: number;
  /** Gradient dtype (default 'float32'). */
  outputDtype?: GradientDtype;
  /** CUDA device index for backend 'cuda' (default 0). */
  device?: number;
  /** dD method for backend 'cuda' (default 'csr'). */
  dDPath?: TrainDDPath;
  /** Forward kernel for backend 'cuda' (default 'auto'). */
  trainKernel?: TrainKernel;
}

/** @internal maxsimTrainTuned's options: the public ones and the CUDA passes' knobs. */
export interface TunedTrainOptions extends MaxsimTrainOptions {
  cudaTuning?: TrainCudaTuning;
}

export interface MaxsimGradients<A extends GradientArray = Float32Array> {
  /** Same layout and length as queries.data; zero outside real tokens. */
  dQ: A;
  /** Same layout and length as docs.data; zero outside real tokens. */
  dD: A;
  /** backend 'cuda' only: the dD method that ran ('auto' resolves to one of them). */
  dDPath?: 'csr' | 'atomic';
  /** @internal backend 'cuda' with cudaTuning.profile: milliseconds per phase. */
  profileMs?: Record<string, number>;
}

export interface MaxsimTrainResult<A extends GradientArray = Float32Array> {
  /** [rows * cols] row-major; -Infinity for an empty document. */
  scores: Float32Array;
  /** Queries. */
  rows: number;
  /** Documents for 'all', 1 for 'diagonal'. */
  cols: number;
  pairs: TrainPairs;
  /**
   * argmax[p * argmaxStride + s]: the index (within its document) of the document token that query
   * token s of pair p matched; ties go to the lowest index. -1 for an empty document and for slots past
   * the query's length. Pair p is i * cols + b for 'all' and i for 'diagonal'.
   */
  argmax: Int32Array;
  /** Slots per pair in argmax: the longest query (queries.maxLength for a dense batch). */
  argmaxStride: number;
  /**
   * Gradients of sum_p gradScores[p] * scores[p]. Reads the batches again: do not modify them between
   * the forward and the backward pass. Entries for empty documents are ignored.
   */
  backward(gradScores: Float32Array | Float64Array): Promise<MaxsimGradients<A>>;
  /** True once dispose() has dropped the saved state. */
  readonly released: boolean;
  /**
   * Drops the saved state (the argmax, emptied here, and the references to both batches) so its memory
   * can be collected; a later backward() throws. The same call as DeviceTrainResult.dispose().
   */
  dispose(): void;
  /** @internal backend 'cuda' with cudaTuning.profile: milliseconds per phase of the forward. */
  profileMs?: Record<string, number>;
}

export interface ContrastiveOptions {
  /** Cancels the step between its native calls (see MaxsimTrainOptions.signal). */
  signal?: AbortSignal;
  /** Scores are divided by it before the softmax (default 1; must be > 0). */
  temperature?: number;
  /** Positive document of each query (default: query i's positive is document i, which needs Nq <= B). */
  labels?: Int32Array;
  backend?: TrainBackend;
  threads?: number;
  /** CUDA device index for backend 'cuda' (default 0). */
  device?: number;
  /** dD method for backend 'cuda' (default 'csr'). */
  dDPath?: TrainDDPath;
  /** Forward kernel for backend 'cuda' (default 'auto'). */
  trainKernel?: TrainKernel;
  /** Gradient dtype (default 'float32'). */
  outputDtype?: GradientDtype;
}

export interface ContrastiveStepResult<A extends GradientArray = Float32Array> extends MaxsimGradients<A> {
  /** Mean over queries of the softmax cross-entropy. */
  loss: number;
  /** [Nq * B] row-major. */
  scores: Float32Array;
}

/** Gradients of a device-resident backward pass: device corpora (free them with dispose()). */
export interface DeviceGradients {
  /** The queries' items (same order and lengths, packed): float32, or their dtype with outputDtype 'input'. */
  dQ: DeviceCorpus;
  /** The documents' items (same order and lengths, packed): float32, or their dtype with outputDtype 'input'. */
  dD: DeviceCorpus;
  /** The dD method that ran ('auto' resolves to one of them). */
  dDPath: 'csr' | 'atomic';
  /** @internal with cudaTuning.profile: milliseconds per phase. */
  profileMs?: Record<string, number>;
}

/**
 * A device-resident forward pass (maxsimTrain with a DeviceCorpus among its inputs): the scores on
 * the host, the argmax and both operands kept on the device for the backward pass.
 */
export interface DeviceTrainResult {
  /** [rows * cols] row-major; -Infinity for an empty document. */
  scores: Float32Array;
  rows: number;
  cols: number;
  pairs: TrainPairs;
  /** Slots per pair of the argmax: the longest query. */
  argmaxStride: number;
  /** True once the saved state is freed: by a backward pass without retain, or by dispose(). */
  readonly released: boolean;
  /** The saved argmax copied to the host, in MaxsimTrainResult.argmax's layout. */
  downloadArgmax(): Promise<Int32Array>;
  /**
   * Gradients of sum_p gradScores[p] * scores[p], on the device. Frees the saved state when it is
   * done, unless { retain: true } (then call backward again or dispose()). The operands are the
   * device memory the forward read: appending to a corpus in between does not change them.
   */
  backward(gradScores: Float32Array | Float64Array, options?: { retain?: boolean }): Promise<DeviceGradients>;
  /** Frees the saved state now (a second call does nothing). */
  dispose(): void;
  /** @internal with cudaTuning.profile: milliseconds per phase of the forward. */
  profileMs?: Record<string, number>;
}

/** contrastiveStep on device-resident inputs: the gradients stay on the device. */
export interface DeviceContrastiveStepResult extends DeviceGradients {
  loss: number;
  scores: Float32Array;
}

interface TrainNativeOptions {
  pairs: TrainPairs;
  stride: number;
  threads?: number;
}

interface TrainAddon {
  forwardAsync(
    queries: TokenBatch,
    docs: TokenBatch,
    options: TrainNativeOptions,
  ): Promise<{ scores: Float32Array; argmax: Int32Array }>;
  backwardAsync(
    queries: TokenBatch,
    docs: TokenBatch,
    argmax: Int32Array,
    gradScores: Float64Array,
    options: TrainNativeOptions,
  ): Promise<MaxsimGradients>;
}

function addon(): TrainAddon {
  return (loadNative() as unknown as { train: TrainAddon }).train;
}

/**
 * The CUDA training entry points on the addon's `cuda` object (native/binding/cuda_train_binding.cc):
 * each pass runs the plan chosen here (src/backends/cuda-train-plan.ts).
 */
interface CudaTrainAddon {
  trainKernelInfo: TrainKernelInfo;
  trainForward(
    device: number,
    queries: TokenBatch,
    docs: TokenBatch,
    options: { pairs: TrainPairs; stride: number; plan: TrainForwardPlan; profile?: boolean },
  ): Promise<{
    scores: Float32Array;
    argmax: Int32Array;
    stride: number;
    profileMs?: Record<string, number>;
  }>;
  /** keep: device-resident (the argmax and the operands stay on the device, in `state`). */
  trainForward(
    device: number,
    queries: TokenBatch | NativeTokenSet,
    docs: TokenBatch | NativeTokenSet,
    options: { pairs: TrainPairs; stride: number; plan: TrainForwardPlan; keep: true; profile?: boolean },
  ): Promise<{ scores: Float32Array; state: NativeTrainState; profileMs?: Record<string, number> }>;
  trainBackward(
    device: number,
    queries: TokenBatch,
    docs: TokenBatch,
    argmax: Int32Array,
    gradScores: Float64Array,
    options: { pairs: TrainPairs; stride: number; plan: TrainBackwardPlan; profile?: boolean },
  ): Promise<MaxsimGradients>;
  trainBackwardState(
    device: number,
    state: NativeTrainState,
    gradScores: Float64Array,
    options: { retain: boolean; outputDtype: GradientDtype; plan: TrainBackwardPlan; profile?: boolean },
  ): Promise<{
    dQ: NativeTokenSet;
    dD: NativeTokenSet;
    dDPath: 'csr' | 'atomic';
    profileMs?: Record<string, number>;
  }>;
  /** contrastiveStep of device-resident inputs as one job (forward, loss on the device, backward). */
  trainStep(
    device: number,
    queries: TokenBatch | NativeTokenSet,
    docs: TokenBatch | NativeTokenSet,
    forwardOptions: { pairs: 'all'; stride: number; plan: TrainForwardPlan },
    backwardOptions: {
      plan: TrainBackwardPlan;
      outputDtype: GradientDtype;
      contrastive: { temperature: number; labels?: Int32Array };
    },
  ): Promise<
    | { scores: Float32Array; emptyPositive: number; loss?: undefined }
    | {
        scores: Float32Array;
        emptyPositive?: undefined;
        loss: number;
        dQ: NativeTokenSet;
        dD: NativeTokenSet;
        dDPath: 'csr' | 'atomic';
      }
  >;
  trainArgmax(device: number, state: NativeTrainState): Promise<Int32Array>;
  trainRelease(state: NativeTrainState): void;
}

/** What a device-resident forward keeps on the device (an opaque native handle). */
type NativeTrainState = { readonly __trainState: unique symbol };

function cudaAddon(): CudaTrainAddon {
  const cuda = (loadNative() as unknown as { cuda: Partial<CudaTrainAddon> }).cuda;
  if (
    typeof cuda.trainForward !== 'function' ||
    typeof cuda.trainBackward !== 'function' ||
    typeof cuda.trainKernelInfo !== 'object'
  ) {
    throw new BackendUnavailableError(
      'CUDA backend unavailable for training: the native addon has no CUDA training entry points (it predates them); run `npm rebuild maxsim`',
    );
  }
  return cuda as CudaTrainAddon;
}

/** Whether the passes run on the GPU ('cuda') or the CPU ('cpu', 'auto', undefined). */
function checkBackend(backend: unknown): boolean {
  if (backend === undefined || backend === 'auto' || backend === 'cpu') return false;
  if (backend === 'cuda') return true;
  throw new InvalidArgumentError('backend', "'auto', 'cpu' or 'cuda'", JSON.stringify(backend));
}

/** The devices checkCudaDevice has accepted, by index. */
const trainDevices = new Map<number, TrainDevice>();

/**
 * The CUDA device index to train on and its compute capability (major); BackendUnavailableError with
 * the reason when CUDA cannot run.
 */
function checkCudaDevice(device: unknown): { index: number; gpu: TrainDevice } {
  // A device that trained once stays usable: skip status() (it queries every device and lists the
  // kernel files: ~0.2 ms, a step's worth of overhead at B = 128).
  const asked = device === undefined ? 0 : device;
  const known = typeof asked === 'number' ? trainDevices.get(asked) : undefined;
  if (known) return { index: asked as number, gpu: known };
  const status = cudaStatus();
  if (!status.available) {
    throw new BackendUnavailableError(
      `CUDA backend unavailable for training: ${status.reason ?? 'unknown reason'}; use backend 'cpu' (or 'auto', which trains on the CPU)`,
    );
  }
  const count = status.devices?.length ?? 0;
  const index = device ?? 0;
  if (typeof index !== 'number' || !Number.isInteger(index) || index < 0 || index >= count) {
    throw new InvalidArgumentError('device', `a CUDA device index in [0, ${count})`, String(device));
  }
  const info = status.devices?.[index];
  const gpu = { ccMajor: info?.computeCapability[0] ?? 0, sms: info?.sms ?? 0 };
  trainDevices.set(index, gpu);
  return { index, gpu };
}

function checkDDPath(path: unknown): TrainDDPath {
  if (path === undefined) return 'csr';
  if (path === 'csr' || path === 'atomic' || path === 'auto') return path;
  throw new InvalidArgumentError('dDPath', "'csr', 'atomic' or 'auto'", JSON.stringify(path));
}

function checkTuning(tuning: unknown): TrainCudaTuning {
  if (tuning === undefined) return {};
  if (typeof tuning !== 'object' || tuning === null) {
    throw new InvalidArgumentError('cudaTuning', 'an object', String(tuning));
  }
  const t = tuning as TrainCudaTuning;
  for (const key of ['profile', 'forwardTma', 'csrBlockWalk'] as const) {
    if (t[key] !== undefined && typeof t[key] !== 'boolean') {
      throw new InvalidArgumentError(`cudaTuning.${key}`, 'a boolean', String(t[key]));
    }
  }
  if (t.argmaxBits !== undefined && t.argmaxBits !== 0 && t.argmaxBits !== 16 && t.argmaxBits !== 32) {
    throw new InvalidArgumentError('cudaTuning.argmaxBits', '0, 16 or 32', String(t.argmaxBits));
  }
  for (const key of ['docBlock', 'queryBlock', 'forwardGrid'] as const) {
    const v = t[key];
    if (v !== undefined && !(Number.isInteger(v) && v >= 0 && v <= 2147483647)) {
      throw new InvalidArgumentError(`cudaTuning.${key}`, 'an integer >= 0 (0 = automatic)', String(v));
    }
  }
  const chunk = t.csrChunk;
  if (
    chunk !== undefined &&
    !(Number.isInteger(chunk) && (chunk === 0 || (chunk >= CSR_CHUNK_MIN && chunk <= 2147483647)))
  ) {
    throw new InvalidArgumentError(
      'cudaTuning.csrChunk',
      `0 (automatic) or an integer >= ${CSR_CHUNK_MIN}`,
      String(chunk),
    );
  }
  return {
    argmaxBits: t.argmaxBits,
    docBlock: t.docBlock,
    queryBlock: t.queryBlock,
    forwardGrid: t.forwardGrid,
    forwardTma: t.forwardTma,
    csrChunk: t.csrChunk,
    csrBlockWalk: t.csrBlockWalk,
    profile: t.profile,
  };
}

function checkTrainKernel(kernel: unknown): TrainKernel {
  if (kernel === undefined) return 'auto';
  if (kernel === 'auto' || kernel === 'wgmma' || kernel === 'mma' || kernel === 'simt') return kernel;
  throw new InvalidArgumentError('trainKernel', "'auto', 'wgmma', 'mma' or 'simt'", JSON.stringify(kernel));
}

function checkOutputDtype(dtype: unknown): GradientDtype {
  if (dtype === undefined) return 'float32';
  if (dtype === 'float32' || dtype === 'input') return dtype;
  throw new InvalidArgumentError('outputDtype', "'float32' or 'input'", JSON.stringify(dtype));
}

function checkThreads(threads: unknown): number | undefined {
  if (threads === undefined) return undefined;
  if (typeof threads !== 'number' || !Number.isInteger(threads) || threads < 0 || threads > 1024) {
    throw new InvalidArgumentError('threads', 'an integer in [0, 1024] (0 = all cores)', String(threads));
  }
  return threads;
}

function checkFloatBatch(name: string, batch: TokenBatch) {
  if (batch.dtype === 'int8') {
    throw new InvalidArgumentError(`${name}.dtype`, "'float32', 'float16' or 'bfloat16'", "'int8'");
  }
}

/** Gradient rows need one owner each: items of a batch may not share tokens. */
function checkDisjoint(name: string, batch: TokenBatch) {
  const items = Array.from({ length: batch.count }, (_, i) => i).filter((i) => batch.lengths[i] > 0);
  items.sort((a, b) => batch.starts[a] - batch.starts[b]);
  for (let k = 1; k < items.length; k++) {
    const prev = items[k - 1];
    if (batch.starts[prev] + batch.lengths[prev] > batch.starts[items[k]]) {
      throw new InvalidArgumentError(
        name,
        'items that share no tokens (gradients of shared tokens are ambiguous)',
        `items ${prev} and ${items[k]} overlapping`,
      );
    }
  }
}

function longestQuery(queries: TokenBatch): number {
  let m = queries.maxLength;
  for (let i = 0; i < queries.count; i++) m = Math.max(m, queries.lengths[i]);
  return m;
}

/** The longest item's tokens, from the lengths (as the addon reads a batch). */
function longestItem(batch: TokenBatch): number {
  let m = 0;
  for (let i = 0; i < batch.count; i++) m = Math.max(m, batch.lengths[i]);
  return m;
}

/** The shape the CUDA passes are planned for. */
function trainShape(
  queries: TokenBatch | DeviceCorpus,
  docs: TokenBatch | DeviceCorpus,
  pairs: TrainPairs,
  stride: number,
): TrainShape {
  return {
    queryDtype: queries.dtype,
    docDtype: docs.dtype,
    dim: queries.dim,
    queries: queries.count,
    docs: docs.count,
    pairs,
    stride,
    maxDocLength: isDeviceCorpus(docs) ? docs.maxLength : longestItem(docs),
  } as TrainShape;
}

/**
 * Forward pass for training: scores plus the saved argmax, and the matching backward pass. With a
 * DeviceCorpus among the inputs it runs on that corpus's GPU and stays there (DeviceTrainResult).
 */
export async function maxsimTrain(
  queries: TokenBatch,
  docs: TokenBatch,
  options?: MaxsimTrainOptions & { outputDtype?: 'float32' },
): Promise<MaxsimTrainResult>;
export async function maxsimTrain(
  queries: TokenBatch,
  docs: TokenBatch,
  options: MaxsimTrainOptions,
): Promise<MaxsimTrainResult<GradientArray>>;
export async function maxsimTrain(
  queries: TokenBatch | DeviceCorpus,
  docs: TokenBatch | DeviceCorpus,
  options?: MaxsimTrainOptions,
): Promise<DeviceTrainResult>;
export async function maxsimTrain(
  queries: TokenBatch | DeviceCorpus,
  docs: TokenBatch | DeviceCorpus,
  options: MaxsimTrainOptions = {},
): Promise<MaxsimTrainResult<GradientArray> | DeviceTrainResult> {
  return train(queries, docs, options, undefined);
}

/**
 * maxsimTrain with the CUDA passes' internal knobs (options.cudaTuning): for tests and benchmarks
 * (maxsim/internal).
 * @internal
 */
export async function maxsimTrainTuned(
  queries: TokenBatch,
  docs: TokenBatch,
  options?: TunedTrainOptions & { outputDtype?: 'float32' },
): Promise<MaxsimTrainResult>;
export async function maxsimTrainTuned(
  queries: TokenBatch,
  docs: TokenBatch,
  options: TunedTrainOptions,
): Promise<MaxsimTrainResult<GradientArray>>;
export async function maxsimTrainTuned(
  queries: TokenBatch | DeviceCorpus,
  docs: TokenBatch | DeviceCorpus,
  options?: TunedTrainOptions,
): Promise<DeviceTrainResult>;
export async function maxsimTrainTuned(
  queries: TokenBatch | DeviceCorpus,
  docs: TokenBatch | DeviceCorpus,
  options: TunedTrainOptions = {},
): Promise<MaxsimTrainResult<GradientArray> | DeviceTrainResult> {
  return train(queries, docs, options, options.cudaTuning);
}

async function train(
  queries: TokenBatch | DeviceCorpus,
  docs: TokenBatch | DeviceCorpus,
  options: MaxsimTrainOptions,
  cudaTuning: unknown,
): Promise<MaxsimTrainResult<GradientArray> | DeviceTrainResult> {
  const signal = checkSignal(options.signal);
  throwIfAborted(signal);
  if (isDeviceCorpus(queries) || isDeviceCorpus(docs)) return deviceTrain(queries, docs, options, cudaTuning);
  checkCompatible(queries, docs, 'queries', 'docs');
  checkFloatBatch('queries', queries);
  checkFloatBatch('docs', docs);
  checkDisjoint('queries', queries);
  checkDisjoint('docs', docs);
  const onGpu = checkBackend(options.backend);
  const threads = checkThreads(options.threads);
  const { dDPath, kernel, tuning, pairs, outputDtype } = checkTrainOptions(
    queries,
    docs,
    options,
    cudaTuning,
  );
  const native: TrainNativeOptions = { pairs, stride: longestQuery(queries), threads };
  // backend 'cuda': the device and the plans of both passes, decided before any work (no closure
  // here may capture the batches: dispose() must let them go)
  const gpu = onGpu
    ? cudaPlans(options.device, trainShape(queries, docs, pairs, native.stride), kernel, dDPath, tuning)
    : undefined;
  const profile = tuning.profile ? { profile: true } : {};
  // the native passes cannot stop early: an abort rejects at once and drops their result
  const forward: { scores: Float32Array; argmax: Int32Array; profileMs?: Record<string, number> } =
    await untilAborted(
      signal,
      gpu
        ? gpu.cuda.trainForward(gpu.device, queries, docs, {
            pairs,
            stride: native.stride,
            plan: gpu.forward,
            ...profile,
          })
        : addon().forwardAsync(queries, docs, native),
    );
  const { scores, profileMs } = forward;
  // The saved state, dropped by dispose(): the argmax and the batches the backward pass reads again.
  let saved: { queries: TokenBatch; docs: TokenBatch; argmax: Int32Array } | undefined = {
    queries,
    docs,
    argmax: forward.argmax,
  };
  // float32 from the engines; 'input' encodes each side in its input's dtype.
  // (the dtypes taken out first: no closure kept by the result may hold the batches past dispose())
  const queriesDtype = queries.dtype as FloatDType;
  const docsDtype = docs.dtype as FloatDType;
  const dim = queries.dim;
  // gradients the input dtype cannot hold are refused by encodeFloats (never silently +-Infinity)
  const cast = (g: MaxsimGradients): MaxsimGradients<GradientArray> =>
    outputDtype === 'input'
      ? {
          ...g,
          dQ: encodeFloats(g.dQ, queriesDtype, { name: "dQ (outputDtype 'input')", dim }),
          dD: encodeFloats(g.dD, docsDtype, { name: "dD (outputDtype 'input')", dim }),
        }
      : g;
  const result: MaxsimTrainResult<GradientArray> = {
    scores,
    rows: queries.count,
    cols: pairs === 'all' ? docs.count : 1,
    pairs,
    argmax: forward.argmax,
    argmaxStride: native.stride,
    ...(profileMs ? { profileMs } : {}),
    get released() {
      return saved === undefined;
    },
    async backward(gradScores) {
      if (!saved)
        throw new InvalidArgumentError(
          'training state',
          'one not yet released',
          'one released by dispose() (run maxsimTrain again for another backward pass)',
        );
      const { queries: q, docs: d, argmax } = saved;
      checkGradScores(gradScores, scores.length);
      throwIfAborted(signal);
      // A private float64 copy: the caller may reuse its array while the backward pass runs.
      const g = Float64Array.from(gradScores);
      const grads = await untilAborted(
        signal,
        gpu
          ? gpu.cuda.trainBackward(gpu.device, q, d, argmax, g, {
              pairs,
              stride: native.stride,
              plan: gpu.backward,
              ...profile,
            })
          : addon().backwardAsync(q, d, argmax, g, native),
      );
      return cast(grads);
    },
    dispose() {
      // a backward pass already running holds its own references (its job pins its inputs)
      saved = undefined;
      result.argmax = new Int32Array(0);
    },
  };
  return result;
}

/** The device, the addon and the plans of both passes of a host-array training call on the GPU. */
function cudaPlans(
  device: unknown,
  shape: TrainShape,
  kernel: TrainKernel,
  dDPath: TrainDDPath,
  tuning: TrainCudaTuning,
) {
  const { index, gpu } = checkCudaDevice(device);
  const cuda = cudaAddon();
  return {
    device: index,
    cuda,
    forward: planForward(shape, kernel, tuning, gpu, cuda.trainKernelInfo),
    backward: planBackward(dDPath, tuning, shape.maxDocLength),
  };
}

/** An upstream gradient: one float per score. */
function checkGradScores(gradScores: unknown, n: number) {
  if (!(gradScores instanceof Float32Array || gradScores instanceof Float64Array)) {
    throw new InvalidArgumentError('gradScores', 'a Float32Array or Float64Array', typeof gradScores);
  }
  if (gradScores.length !== n) {
    throw new InvalidArgumentError('gradScores', `${n} entries (one per score)`, String(gradScores.length));
  }
}

/** The options both the host-array and the device-resident passes take, checked before any work. */
function checkTrainOptions(
  queries: { count: number },
  docs: { count: number },
  options: MaxsimTrainOptions,
  cudaTuning: unknown,
): {
  dDPath: TrainDDPath;
  kernel: TrainKernel;
  tuning: TrainCudaTuning;
  pairs: TrainPairs;
  outputDtype: GradientDtype;
} {
  const dDPath = checkDDPath(options.dDPath);
  const kernel = checkTrainKernel(options.trainKernel);
  const tuning = checkTuning(cudaTuning);
  const pairs = options.pairs ?? 'all';
  if (pairs !== 'all' && pairs !== 'diagonal') {
    throw new InvalidArgumentError('pairs', "'all' or 'diagonal'", JSON.stringify(pairs));
  }
  const outputDtype = checkOutputDtype(options.outputDtype);
  if (pairs === 'diagonal' && queries.count !== docs.count) {
    throw new InvalidArgumentError(
      'queries.count',
      `${docs.count} (one query per document for pairs 'diagonal')`,
      String(queries.count),
    );
  }
  return { dDPath, kernel, tuning, pairs, outputDtype };
}

/** Checks one side of a device-resident problem: a live float DeviceCorpus or a float host batch. */
function checkDeviceSide(name: string, side: TokenBatch | DeviceCorpus) {
  if (isDeviceCorpus(side)) {
    if (side.disposed)
      throw new InvalidArgumentError(
        name,
        'a live DeviceCorpus',
        'one that was disposed (dispose() was called)',
      );
    if (side.dtype === 'int8' || side.dtype === 'fp8')
      throw new InvalidArgumentError(
        `${name}.dtype`,
        "'float32', 'float16' or 'bfloat16'",
        `'${side.dtype}'`,
      );
    return;
  }
  checkFloatBatch(name, side);
  checkDisjoint(name, side);
}

// maxsimTrain with a DeviceCorpus among the inputs (a host batch beside it is uploaded once and kept
// with the state): forward on the GPU, argmax and operands kept there, gradients as device corpora.
/** What both device-resident entry points (deviceTrain, contrastiveStep) check and plan first. */
function deviceSetup(
  queries: TokenBatch | DeviceCorpus,
  docs: TokenBatch | DeviceCorpus,
  options: MaxsimTrainOptions,
  cudaTuning: unknown,
) {
  const like = (isDeviceCorpus(queries) ? queries : docs) as DeviceCorpus;
  checkDeviceSide('queries', queries);
  checkDeviceSide('docs', docs);
  if (queries.dim !== docs.dim)
    throw new InvalidArgumentError('queries.dim', `${docs.dim} (the dimension of docs)`, String(queries.dim));
  if (options.backend === 'cpu')
    throw new InvalidArgumentError(
      'backend',
      "'cuda' or 'auto' (the inputs are on a CUDA device)",
      "'cpu' (download() them to train on the CPU)",
    );
  checkBackend(options.backend);
  const device = like.native.device;
  for (const [name, side] of [
    ['queries', queries],
    ['docs', docs],
  ] as const) {
    if (isDeviceCorpus(side) && side.native.device !== device)
      throw new InvalidArgumentError(
        name,
        `a corpus on device ${device}`,
        `one on device ${side.native.device}`,
      );
  }
  if (options.device !== undefined && options.device !== device)
    throw new InvalidArgumentError(
      'device',
      `${device} (the device of the inputs) or undefined`,
      String(options.device),
    );
  const { gpu } = checkCudaDevice(device);
  const { dDPath, kernel, tuning, pairs, outputDtype } = checkTrainOptions(
    queries,
    docs,
    options,
    cudaTuning,
  );
  const stride = isDeviceCorpus(queries) ? queries.maxLength : longestQuery(queries);
  const addon = cudaAddon();
  const shape = trainShape(queries, docs, pairs, stride);
  return {
    like,
    device,
    addon,
    pairs,
    stride,
    outputDtype,
    forwardPlan: planForward(shape, kernel, tuning, gpu, addon.trainKernelInfo),
    backwardPlan: planBackward(dDPath, tuning, shape.maxDocLength),
    profile: tuning.profile ? { profile: true } : {},
  };
}

const nativeSide = (side: TokenBatch | DeviceCorpus) => (isDeviceCorpus(side) ? side.native : side);

async function deviceTrain(
  queries: TokenBatch | DeviceCorpus,
  docs: TokenBatch | DeviceCorpus,
  options: MaxsimTrainOptions,
  cudaTuning: unknown,
): Promise<DeviceTrainResult> {
  const { like, device, addon, pairs, stride, outputDtype, forwardPlan, backwardPlan, profile } = deviceSetup(
    queries,
    docs,
    options,
    cudaTuning,
  );
  const fwd = await addon.trainForward(device, nativeSide(queries), nativeSide(docs), {
    pairs,
    stride,
    plan: forwardPlan,
    keep: true,
    ...profile,
  });
  const { scores, state } = fwd;
  let released = false;
  const checkLive = () => {
    if (released)
      throw new InvalidArgumentError(
        'training state',
        'one not yet released',
        'one released by an earlier backward() without { retain: true } or by dispose()',
      );
  };
  const result: DeviceTrainResult = {
    scores,
    rows: queries.count,
    cols: pairs === 'all' ? docs.count : 1,
    pairs,
    argmaxStride: stride,
    ...(fwd.profileMs ? { profileMs: fwd.profileMs } : {}),
    get released() {
      return released;
    },
    async downloadArgmax() {
      checkLive();
      return addon.trainArgmax(device, state);
    },
    async backward(gradScores, backwardOptions = {}) {
      checkLive();
      checkGradScores(gradScores, scores.length);
      const retain = backwardOptions.retain ?? false;
      if (typeof retain !== 'boolean') throw new InvalidArgumentError('retain', 'a boolean', String(retain));
      // The native call drops the handle's reference when not retaining; the job keeps the state alive.
      const job = addon.trainBackwardState(device, state, Float64Array.from(gradScores), {
        retain,
        outputDtype,
        plan: backwardPlan,
        ...profile,
      });
      if (!retain) released = true;
      return deviceGradients(like, await job);
    },
    dispose() {
      if (released) return;
      released = true;
      addon.trainRelease(state);
    },
  };
  return result;
}

/** The device sets of a backward job adopted as corpora on the inputs' device. */
function deviceGradients(
  like: DeviceCorpus,
  r: { dQ: NativeTokenSet; dD: NativeTokenSet; dDPath: 'csr' | 'atomic'; profileMs?: Record<string, number> },
): DeviceGradients {
  return {
    dQ: adoptOnDeviceOf(like, r.dQ),
    dD: adoptOnDeviceOf(like, r.dD),
    dDPath: r.dDPath,
    ...(r.profileMs ? { profileMs: r.profileMs } : {}),
  };
}

/** Validates temperature and labels against a [rows, cols] score matrix before any work is done. */
function checkLossOptions(
  rows: number,
  cols: number,
  options: { temperature?: number; labels?: Int32Array },
): { tau: number; labels?: Int32Array } {
  const tau = options.temperature ?? 1;
  if (typeof tau !== 'number' || !(tau > 0) || !Number.isFinite(tau)) {
    throw new InvalidArgumentError('temperature', 'a finite number > 0', String(tau));
  }
  if (rows < 1) throw new InvalidArgumentError('queries.count', 'at least 1 query', String(rows));
  const labels = options.labels;
  if (labels === undefined) {
    if (rows > cols) {
      throw new InvalidArgumentError(
        'docs.count',
        `at least ${rows} documents (query i's positive is document i without labels)`,
        String(cols),
      );
    }
    return { tau };
  }
  if (!(labels instanceof Int32Array) || labels.length !== rows) {
    throw new InvalidArgumentError(
      'labels',
      `an Int32Array of ${rows} entries (one per query)`,
      labels instanceof Int32Array ? `${labels.length} entries` : typeof labels,
    );
  }
  for (let i = 0; i < rows; i++) {
    if (labels[i] < 0 || labels[i] >= cols) {
      throw new InvalidArgumentError(`labels[${i}]`, `a document index in [0, ${cols})`, String(labels[i]));
    }
  }
  return { tau, labels };
}

/**
 * In-batch softmax cross-entropy over a [rows, cols] score matrix, in float64:
 * loss = mean_i [logsumexp_j(S[i, j] / tau) - S[i, label_i] / tau], and its gradient
 * (softmax - onehot) / (tau * rows). Empty documents (-Infinity) get probability 0 and gradient 0.
 */
export function contrastiveLoss(
  scores: Float32Array | Float64Array,
  rows: number,
  cols: number,
  options: { temperature?: number; labels?: Int32Array } = {},
): { loss: number; gradScores: Float64Array } {
  const { tau, labels } = checkLossOptions(rows, cols, options);
  const grad = new Float64Array(rows * cols);
  // The device-resident step computes the same values on the GPU (kernels/maxsim_loss.cu) with these
  // operations in this order: change one and change it there. x holds a row's s / tau (divided once
  // per score; the values are the same as dividing at each use).
  const x = new Float64Array(cols);
  const scale = 1 / (tau * rows);
  let total = 0;
  for (let i = 0, row = 0; i < rows; i++, row += cols) {
    const label = labels ? labels[i] : i;
    if (scores[row + label] === Number.NEGATIVE_INFINITY) throw emptyPositive(i, label);
    let max = Number.NEGATIVE_INFINITY;
    for (let j = 0; j < cols; j++) {
      const v = scores[row + j] / tau;
      x[j] = v;
      max = Math.max(max, v);
    }
    let sum = 0;
    for (let j = 0; j < cols; j++) sum += Math.exp(x[j] - max);
    const logSumExp = max + Math.log(sum);
    total += logSumExp - x[label];
    // p - 0 is p: only the label's entry subtracts
    for (let j = 0; j < cols; j++) grad[row + j] = Math.exp(x[j] - logSumExp) * scale;
    grad[row + label] = (Math.exp(x[label] - logSumExp) - 1) * scale;
  }
  return { loss: total / rows, gradScores: grad };
}

/** contrastiveLoss's error for a positive document without tokens (score -Infinity). */
function emptyPositive(i: number, label: number): InvalidArgumentError {
  return new InvalidArgumentError(
    `labels[${i}]`,
    'a positive document with tokens',
    `empty document ${label}`,
  );
}

/**
 * One in-batch contrastive step: scores of every query against every document, loss, gradients.
 * With a DeviceCorpus among the inputs, everything but the [Nq, B] loss runs on its GPU and the
 * gradients stay there.
 */
export async function contrastiveStep(
  queries: TokenBatch,
  docs: TokenBatch,
  options?: ContrastiveOptions & { outputDtype?: 'float32' },
): Promise<ContrastiveStepResult>;
export async function contrastiveStep(
  queries: TokenBatch,
  docs: TokenBatch,
  options: ContrastiveOptions,
): Promise<ContrastiveStepResult<GradientArray>>;
export async function contrastiveStep(
  queries: TokenBatch | DeviceCorpus,
  docs: TokenBatch | DeviceCorpus,
  options?: ContrastiveOptions,
): Promise<DeviceContrastiveStepResult>;
export async function contrastiveStep(
  queries: TokenBatch | DeviceCorpus,
  docs: TokenBatch | DeviceCorpus,
  options: ContrastiveOptions = {},
): Promise<ContrastiveStepResult<GradientArray> | DeviceContrastiveStepResult> {
  if (isDeviceCorpus(queries) || isDeviceCorpus(docs)) {
    const { tau, labels } = checkLossOptions(queries.count, docs.count, options);
    const signal = checkSignal(options.signal);
    throwIfAborted(signal);
    const setup = deviceSetup(
      queries,
      docs,
      {
        pairs: 'all',
        backend: options.backend,
        device: options.device,
        dDPath: options.dDPath,
        trainKernel: options.trainKernel,
        outputDtype: options.outputDtype,
      },
      undefined,
    );
    // One job: the forward, the loss of its scores and gradScores on the device, the backward (no
    // scores -> JS -> gradScores round trip, no second handoff). It cannot stop early.
    const r = await setup.addon.trainStep(
      setup.device,
      nativeSide(queries),
      nativeSide(docs),
      { pairs: 'all', stride: setup.stride, plan: setup.forwardPlan },
      {
        plan: setup.backwardPlan,
        outputDtype: setup.outputDtype,
        contrastive: { temperature: tau, ...(labels ? { labels } : {}) },
      },
    );
    if (r.emptyPositive !== undefined)
      throw emptyPositive(r.emptyPositive, labels ? labels[r.emptyPositive] : r.emptyPositive);
    const grads = deviceGradients(setup.like, r);
    if (signal?.aborted) {
      grads.dQ.dispose();
      grads.dD.dispose();
      throwIfAborted(signal);
    }
    return { loss: r.loss, scores: r.scores, ...grads };
  }
  checkCompatible(queries, docs, 'queries', 'docs');
  checkLossOptions(queries.count, docs.count, options);
  const forward = await maxsimTrain(queries, docs, {
    pairs: 'all',
    backend: options.backend,
    threads: options.threads,
    device: options.device,
    dDPath: options.dDPath,
    trainKernel: options.trainKernel,
    outputDtype: options.outputDtype,
    signal: options.signal,
  });
  const { loss, gradScores } = contrastiveLoss(forward.scores, forward.rows, forward.cols, options);
  const { dQ, dD, dDPath } = await forward.backward(gradScores);
  return { loss, scores: forward.scores, dQ, dD, ...(dDPath ? { dDPath } : {}) };
}
