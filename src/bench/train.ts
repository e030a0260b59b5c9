// The training benchmarks behind `maxsim bench --train` (and bench/train-*.ts): one contrastive step
// at ColPali shape (all pairs B x B, Lq = Ld = 1024, d = 128, fp16 by default) timed by phase, and the
// dD methods under contention. Wall-clock medians (the phases are promise round trips: what a caller
// waits for), plus the kernels' CUDA-event times from one profiled pass.
import { type CudaDevice, cuda, type DeviceCorpus } from '../backends/cuda.js';
import { Rng, randomUnitTokens } from '../demo/random.js';
import { encodeFloats } from '../floats.js';
import {
  contrastiveStep,
  maxsimTrain,
  maxsimTrainTuned,
  type TrainDDPath,
  type TrainKernel,
} from '../ops/train.js';
import { denseBatch, type FloatDType, type TokenBatch } from '../tensor.js';

export interface TrainStepShape {
  /** Queries = documents = B (all pairs). */
  batch: number;
  queryLength: number;
  docLength: number;
  dim: number;
  dtype: FloatDType;
}

export interface TrainStepRow {
  backend: 'cpu' | 'cuda';
  /** 'device': inputs uploaded once, argmax and gradients on the GPU; 'host': host arrays in and out. */
  inputs: 'host' | 'device';
  shape: string;
  dtype: FloatDType;
  dDPath: TrainDDPath;
  dDPathUsed?: string;
  /** The forward kernel asked for (CUDA). */
  trainKernel?: string;
  repeats: number;
  forwardMs: number;
  backwardMs: number;
  stepMs: number;
  backwardOverForward: number;
  stepOverForward: number;
  forwardTflops: number;
  loss: number;
  /** CUDA: milliseconds per phase of one profiled forward / backward (host wall, kernels by events). */
  forwardProfileMs?: Record<string, number>;
  backwardProfileMs?: Record<string, number>;
  /** CUDA: the allocator's peak over this process, and that minus the inputs and their fp32 gradients. */
  peakBytes?: number;
  peakExtraBytes?: number;
}

const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
const since = (t: bigint) => Number(process.hrtime.bigint() - t) / 1e6;

function randomBatch(rng: Rng, count: number, length: number, dim: number, dtype: FloatDType): TokenBatch {
  return denseBatch(encodeFloats(randomUnitTokens(rng, count * length, dim), dtype), {
    count,
    length,
    dim,
    dtype,
    checkFinite: false,
  });
}

// Device gradients are freed at once (device-resident rows never download them).
function drop(g: { dQ: unknown; dD: unknown }) {
  for (const x of [g.dQ, g.dD]) {
    if (typeof (x as DeviceCorpus).dispose === 'function') (x as DeviceCorpus).dispose();
  }
}

/**
 * One training step by phase: forward (maxsimTrain), backward (of a uniform upstream gradient) and a
 * whole contrastiveStep, medians of `repeats` after one warm-up. Run it in a fresh process per shape
 * when the peak memory matters (the peak is the allocator's over the process).
 */
export async function measureTrainStep(
  shape: TrainStepShape,
  options: {
    backend: 'cpu' | 'cuda';
    inputs: 'host' | 'device';
    dDPath: TrainDDPath;
    /** CUDA: the forward kernel (default 'auto'). */
    trainKernel?: TrainKernel;
    repeats: number;
    device?: number;
    onProgress?: (done: number, total: number) => void;
  },
): Promise<TrainStepRow> {
  const { batch: b, queryLength, docLength, dim, dtype } = shape;
  const rng = new Rng(3);
  const hostQueries = randomBatch(rng, b, queryLength, dim, dtype);
  const hostDocs = randomBatch(rng, b, docLength, dim, dtype);
  const gpu: CudaDevice | undefined =
    options.backend === 'cuda' ? await cuda({ device: options.device }) : undefined;
  try {
    const onDevice = options.inputs === 'device';
    if (onDevice && !gpu) throw new Error("inputs 'device' needs the CUDA backend");
    const queries = onDevice && gpu ? await gpu.upload(hostQueries) : hostQueries;
    const docs = onDevice && gpu ? await gpu.upload(hostDocs) : hostDocs;
    const trainKernel = options.trainKernel ?? 'auto';
    const common = { backend: options.backend, dDPath: options.dDPath, device: options.device, trainKernel };
    const grad = new Float32Array(b * b).fill(1 / b);
    const total = options.repeats + 1;
    drop(await (await maxsimTrain(queries, docs, common)).backward(grad)); // warm-up
    options.onProgress?.(1, total);
    const forwards: number[] = [];
    const backwards: number[] = [];
    const steps: number[] = [];
    let loss = 0;
    let used: string | undefined;
    for (let r = 0; r < options.repeats; r++) {
      let t = process.hrtime.bigint();
      const fwd = await maxsimTrain(queries, docs, common);
      forwards.push(since(t));
      t = process.hrtime.bigint();
      const grads = await fwd.backward(grad);
      backwards.push(since(t));
      used = grads.dDPath;
      drop(grads);
      t = process.hrtime.bigint();
      const step = await contrastiveStep(queries, docs, { ...common, temperature: 0.05 });
      steps.push(since(t));
      loss = step.loss;
      drop(step);
      options.onProgress?.(r + 2, total);
    }
    let forwardProfileMs: Record<string, number> | undefined;
    let backwardProfileMs: Record<string, number> | undefined;
    if (gpu) {
      const fwd = await maxsimTrainTuned(queries, docs, { ...common, cudaTuning: { profile: true } });
      forwardProfileMs = fwd.profileMs;
      const grads = await fwd.backward(grad);
      backwardProfileMs = grads.profileMs;
      drop(grads);
    }
    const forwardMs = median(forwards);
    const backwardMs = median(backwards);
    const stepMs = median(steps);
    const peakBytes = gpu ? (await gpu.memory()).peak : undefined;
    const elementBytes = dtype === 'float32' ? 4 : 2;
    const inputsAndGrads = (b * queryLength + b * docLength) * dim * (elementBytes + 4);
    return {
      backend: options.backend,
      inputs: options.inputs,
      shape: `${b},${queryLength},${docLength},${dim},${b}`,
      dtype,
      dDPath: options.dDPath,
      dDPathUsed: used,
      trainKernel,
      repeats: options.repeats,
      forwardMs,
      backwardMs,
      stepMs,
      backwardOverForward: backwardMs / forwardMs,
      stepOverForward: stepMs / forwardMs,
      forwardTflops: (2 * b * b * queryLength * docLength * dim) / (forwardMs / 1e3) / 1e12,
      loss,
      forwardProfileMs,
      backwardProfileMs,
      peakBytes,
      peakExtraBytes: peakBytes === undefined ? undefined : peakBytes - inputsAndGrads,
    };
  } finally {
    gpu?.dispose();
  }
}

export interface ContentionRow {
  shape: string;
  hotTokens: number;
  /** Fraction of argmax slots on the hot tokens. */
  hotFraction: number;
  /** Wall-clock backward (device-resident), median of 5, per dD method. */
  csrMs: number;
  atomicMs: number;
  autoMs: number;
  autoChose: string;
  /** The dD kernels alone (CUDA events), median of 3 profiled passes. */
  csrDdKernelMs: number;
  atomicDdKernelMs: number;
  autoDdKernelMs: number;
  atomicOverCsr: number;
  atomicOverCsrDdKernel: number;
}

/**
 * The backward under contention on the GPU: query tokens lean towards one shared direction and the
 * first `hot` tokens of every document point along it (scaled up), so nearly every max lands on them;
 * the atomic dD scatter then serializes on those rows while the CSR reduces each row once.
 */
export async function measureContention(
  b: number,
  hot: number,
  options: { device?: number; queryLength?: number; docLength?: number; dim?: number } = {},
): Promise<ContentionRow> {
  const lq = options.queryLength ?? 1024;
  const ld = options.docLength ?? 1024;
  const dim = options.dim ?? 128;
  const rng = new Rng(9);
  const q = randomUnitTokens(rng, b * lq, dim);
  const d = randomUnitTokens(rng, b * ld, dim);
  const mean = randomUnitTokens(rng, 1, dim);
  for (let t = 0; t < b * lq; t++) {
    let ss = 0;
    for (let k = 0; k < dim; k++) {
      q[t * dim + k] = mean[k] + 0.5 * q[t * dim + k];
      ss += q[t * dim + k] ** 2;
    }
    for (let k = 0; k < dim; k++) q[t * dim + k] /= Math.sqrt(ss);
  }
  for (let doc = 0; doc < b; doc++) {
    for (let t = 0; t < Math.min(hot, ld); t++) {
      for (let k = 0; k < dim; k++) d[(doc * ld + t) * dim + k] = 4 * mean[k] + 0.01 * (rng.float() - 0.5);
    }
  }
  const batch = (x: Float32Array, length: number) =>
    denseBatch(encodeFloats(x, 'float16'), { count: b, length, dim, dtype: 'float16', checkFinite: false });
  const gpu = await cuda({ device: options.device });
  try {
    const queries = await gpu.upload(batch(q, lq));
    const docs = await gpu.upload(batch(d, ld));
    const grad = new Float32Array(b * b).fill(1 / b);
    const wall: Record<string, number> = {};
    const kernel: Record<string, number> = {};
    let hotFraction = 0;
    let autoChose = '';
    for (const dDPath of ['csr', 'atomic', 'auto'] as const) {
      const fwd = await maxsimTrain(queries, docs, { dDPath, device: options.device });
      const argmax = await fwd.downloadArgmax();
      let hits = 0;
      for (const a of argmax) if (a >= 0 && a < hot) hits++;
      hotFraction = hits / argmax.length;
      const warm = await fwd.backward(grad, { retain: true });
      if (dDPath === 'auto') autoChose = warm.dDPath;
      drop(warm);
      const times: number[] = [];
      for (let r = 0; r < 5; r++) {
        const t = process.hrtime.bigint();
        drop(await fwd.backward(grad, { retain: true }));
        times.push(since(t));
      }
      fwd.dispose();
      wall[dDPath] = median(times);
      const prof = await maxsimTrainTuned(queries, docs, {
        dDPath,
        device: options.device,
        cudaTuning: { profile: true },
      });
      const k: number[] = [];
      for (let r = 0; r < 3; r++) {
        const g = await prof.backward(grad, { retain: true });
        k.push(g.profileMs?.dD ?? Number.NaN);
        drop(g);
      }
      prof.dispose();
      kernel[dDPath] = median(k);
    }
    queries.dispose();
    docs.dispose();
    return {
      shape: `${b},${lq},${ld},${dim},${b}`,
      hotTokens: hot,
      hotFraction,
      csrMs: wall.csr,
      atomicMs: wall.atomic,
      autoMs: wall.auto,
      autoChose,
      csrDdKernelMs: kernel.csr,
      atomicDdKernelMs: kernel.atomic,
      autoDdKernelMs: kernel.auto,
      atomicOverCsr: wall.atomic / wall.csr,
      atomicOverCsrDdKernel: kernel.atomic / kernel.csr,
    };
  } finally {
    gpu.dispose();
  }
}
