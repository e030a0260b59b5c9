import { adoptOnDeviceOf, type DeviceCorpus, isDeviceCorpus, type NativeTokenSet } from '../backends/cuda.js';
import { planBackward, planForward } from '../backends/cuda-train-plan.js';
import { InvalidArgumentError } from '../errors.js';
import type { TokenBatch } from '../tensor.js';
import {
  type CudaTrainAddon,
  checkBackend,
  checkCudaDevice,
  checkDisjoint,
  checkFloatBatch,
  checkGradScores,
  checkTrainOptions,
  cudaAddon,
  longestQuery,
  trainShape,
} from './train-args.js';
import type { DeviceGradients, DeviceTrainResult, MaxsimTrainOptions } from './train-types.js';

/** Checks one side of a device-resident problem: a live float DeviceCorpus or a float host batch. */
export function checkDeviceSide(name: string, side: TokenBatch | DeviceCorpus) {
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
export async function deviceSetup(
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
    backwardPlan: planBackward(dDPath, tuning, shape, {
      queries: dDPath === 'atomic' ? [] : await lengthsOf(queries, addon),
      docs: dDPath === 'atomic' ? [] : await lengthsOf(docs, addon),
    }),
    profile: tuning.profile ? { profile: true } : {},
  };
}

// A device set's items never change once appended, so its lengths are kept per set and fetched
// again only when it has more items (a training loop over the same corpora asks the worker once).
const setLengths = new WeakMap<NativeTokenSet, Int32Array>();

/** A side's item lengths: a batch's own, or a device set's as of now (from the device's worker). */
async function lengthsOf(side: TokenBatch | DeviceCorpus, addon: CudaTrainAddon): Promise<Int32Array> {
  if (!isDeviceCorpus(side)) return side.lengths.subarray(0, side.count);
  const known = setLengths.get(side.native);
  if (known && known.length === side.count) return known;
  const lengths = await addon.setLengths(side.native);
  setLengths.set(side.native, lengths);
  return lengths;
}

export const nativeSide = (side: TokenBatch | DeviceCorpus) => (isDeviceCorpus(side) ? side.native : side);

export async function deviceTrain(
  queries: TokenBatch | DeviceCorpus,
  docs: TokenBatch | DeviceCorpus,
  options: MaxsimTrainOptions,
  cudaTuning: unknown,
): Promise<DeviceTrainResult> {
  const { like, device, addon, pairs, stride, outputDtype, forwardPlan, backwardPlan, profile } =
    await deviceSetup(queries, docs, options, cudaTuning);
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
export function deviceGradients(
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
