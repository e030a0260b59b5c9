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
import { type DeviceCorpus, isDeviceCorpus } from '../backends/cuda.js';
import { InvalidArgumentError } from '../errors.js';
import { encodeFloats } from '../floats.js';
import { checkCompatible, type FloatDType, type TokenBatch } from '../tensor.js';
import {
  addon,
  checkBackend,
  checkDisjoint,
  checkFloatBatch,
  checkGradScores,
  checkThreads,
  checkTrainOptions,
  cudaPlans,
  longestQuery,
  type TrainNativeOptions,
  trainShape,
} from './train-args.js';
import { deviceGradients, deviceSetup, deviceTrain, nativeSide } from './train-device.js';
import type {
  ContrastiveOptions,
  ContrastiveStepResult,
  DeviceContrastiveStepResult,
  DeviceTrainResult,
  GradientArray,
  MaxsimGradients,
  MaxsimTrainOptions,
  MaxsimTrainResult,
  TunedTrainOptions,
} from './train-types.js';

export * from './train-types.js';

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
    ? cudaPlans(options.device, trainShape(queries, docs, pairs, native.stride), kernel, dDPath, tuning, {
        queries: queries.lengths.subarray(0, queries.count),
        docs: docs.lengths.subarray(0, docs.count),
      })
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
    const setup = await deviceSetup(
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
