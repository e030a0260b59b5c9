import { MAX_THREADS } from '../backends/constants.js';
import { cudaStatus, type DeviceCorpus, isDeviceCorpus, type NativeTokenSet } from '../backends/cuda.js';
import {
  CSR_CHUNK_MIN,
  planBackward,
  planForward,
  type TrainBackwardPlan,
  type TrainDevice,
  type TrainForwardPlan,
  type TrainKernelInfo,
  type TrainLengths,
  type TrainShape,
} from '../backends/cuda-train-plan.js';
import { BackendUnavailableError, InvalidArgumentError } from '../errors.js';
import { loadNative } from '../native.js';
import type { TokenBatch } from '../tensor.js';
import type {
  GradientDtype,
  MaxsimGradients,
  MaxsimTrainOptions,
  TrainCudaTuning,
  TrainDDPath,
  TrainKernel,
  TrainPairs,
} from './train-types.js';

export interface TrainNativeOptions {
  pairs: TrainPairs;
  stride: number;
  threads?: number;
}

export interface TrainAddon {
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

export function addon(): TrainAddon {
  return (loadNative() as unknown as { train: TrainAddon }).train;
}

/**
 * The CUDA training entry points on the addon's `cuda` object (native/binding/cuda_train_binding.cc):
 * each pass runs the plan chosen here (src/backends/cuda-train-plan.ts).
 */
export interface CudaTrainAddon {
  trainKernelInfo: TrainKernelInfo;
  /** The lengths of a device set's items as of the call (the backward's CSR blocks are cut by them). */
  setLengths(set: NativeTokenSet): Promise<Int32Array>;
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
export type NativeTrainState = { readonly __trainState: unique symbol };

export function cudaAddon(): CudaTrainAddon {
  const cuda = (loadNative() as unknown as { cuda: Partial<CudaTrainAddon> }).cuda;
  if (
    typeof cuda.trainForward !== 'function' ||
    typeof cuda.trainBackward !== 'function' ||
    typeof cuda.trainKernelInfo !== 'object'
  ) {
    throw new BackendUnavailableError(
      'CUDA backend unavailable for training: the native addon has no CUDA training entry points (it predates them); reinstall maxsim or rebuild it: `node node_modules/maxsim/scripts/build-native.mjs`',
    );
  }
  return cuda as CudaTrainAddon;
}

/** Whether the passes run on the GPU ('cuda') or the CPU ('cpu', 'auto', undefined). */
export function checkBackend(backend: unknown): boolean {
  if (backend === undefined || backend === 'auto' || backend === 'cpu') return false;
  if (backend === 'cuda') return true;
  throw new InvalidArgumentError('backend', "'auto', 'cpu' or 'cuda'", JSON.stringify(backend));
}

/** The devices checkCudaDevice has accepted, by index. */
export const trainDevices = new Map<number, TrainDevice>();

/**
 * The CUDA device index to train on and its compute capability (major); BackendUnavailableError with
 * the reason when CUDA cannot run.
 */
export function checkCudaDevice(device: unknown): { index: number; gpu: TrainDevice } {
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

export function checkDDPath(path: unknown): TrainDDPath {
  if (path === undefined) return 'csr';
  if (path === 'csr' || path === 'atomic' || path === 'auto') return path;
  throw new InvalidArgumentError('dDPath', "'csr', 'atomic' or 'auto'", JSON.stringify(path));
}

export function checkTuning(tuning: unknown): TrainCudaTuning {
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

export function checkTrainKernel(kernel: unknown): TrainKernel {
  if (kernel === undefined) return 'auto';
  if (kernel === 'auto' || kernel === 'wgmma' || kernel === 'mma' || kernel === 'simt') return kernel;
  throw new InvalidArgumentError('trainKernel', "'auto', 'wgmma', 'mma' or 'simt'", JSON.stringify(kernel));
}

export function checkOutputDtype(dtype: unknown): GradientDtype {
  if (dtype === undefined) return 'float32';
  if (dtype === 'float32' || dtype === 'input') return dtype;
  throw new InvalidArgumentError('outputDtype', "'float32' or 'input'", JSON.stringify(dtype));
}

export function checkThreads(threads: unknown): number | undefined {
  if (threads === undefined) return undefined;
  if (typeof threads !== 'number' || !Number.isInteger(threads) || threads < 0 || threads > MAX_THREADS) {
    throw new InvalidArgumentError(
      'threads',
      `an integer in [0, ${MAX_THREADS}] (0 = all cores)`,
      String(threads),
    );
  }
  return threads;
}

export function checkFloatBatch(name: string, batch: TokenBatch) {
  if (batch.dtype === 'int8') {
    throw new InvalidArgumentError(`${name}.dtype`, "'float32', 'float16' or 'bfloat16'", "'int8'");
  }
}

/** Gradient rows need one owner each: items of a batch may not share tokens. */
export function checkDisjoint(name: string, batch: TokenBatch) {
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

export function longestQuery(queries: TokenBatch): number {
  let m = queries.maxLength;
  for (let i = 0; i < queries.count; i++) m = Math.max(m, queries.lengths[i]);
  return m;
}

/** The longest item's tokens, from the lengths (as the addon reads a batch). */
export function longestItem(batch: TokenBatch): number {
  let m = 0;
  for (let i = 0; i < batch.count; i++) m = Math.max(m, batch.lengths[i]);
  return m;
}

/** The shape the CUDA passes are planned for. */
export function trainShape(
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

/** The device, the addon and the plans of both passes of a host-array training call on the GPU. */
export function cudaPlans(
  device: unknown,
  shape: TrainShape,
  kernel: TrainKernel,
  dDPath: TrainDDPath,
  tuning: TrainCudaTuning,
  lengths: TrainLengths,
) {
  const { index, gpu } = checkCudaDevice(device);
  const cuda = cudaAddon();
  return {
    device: index,
    cuda,
    forward: planForward(shape, kernel, tuning, gpu, cuda.trainKernelInfo),
    backward: planBackward(dDPath, tuning, shape, lengths),
  };
}

/** An upstream gradient: one float per score. */
export function checkGradScores(gradScores: unknown, n: number) {
  if (!(gradScores instanceof Float32Array || gradScores instanceof Float64Array)) {
    throw new InvalidArgumentError('gradScores', 'a Float32Array or Float64Array', typeof gradScores);
  }
  if (gradScores.length !== n) {
    throw new InvalidArgumentError('gradScores', `${n} entries (one per score)`, String(gradScores.length));
  }
}

/** The options both the host-array and the device-resident passes take, checked before any work. */
export function checkTrainOptions(
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
