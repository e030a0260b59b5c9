// Wall-clock timing of one training step at ColPali shape (Lq = Ld = 1024, d = 128, all pairs B x B,
// fp16) on a backend, transfers included. Medians of `repeats` runs of each phase after one warm-up
// step, then one profiled forward + backward (profileMs: host phases in wall time, kernels in CUDA
// event time). inputs 'host' passes host arrays (each pass uploads, the argmax and the gradients
// cross the bus); 'device' (CUDA only) uploads the batches once and trains on the device corpora
// (the argmax stays on the GPU, the gradients come back as device corpora and are not downloaded).
// Run: node dist/bench/train-timing.js [cpu|cuda] [B] [csr|atomic|auto] [repeats] [host|device]
import { cuda, type DeviceCorpus } from '../src/backends/cuda.js';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { contrastiveStep, maxsimTrain, type TrainDDPath } from '../src/ops/train.js';
import { denseBatch, encodeFloats } from '../src/tensor.js';

const backend = (process.argv[2] ?? 'cuda') as 'cpu' | 'cuda';
const b = Number(process.argv[3] ?? 32);
const dDPath = (process.argv[4] ?? 'csr') as TrainDDPath;
const repeats = Number(process.argv[5] ?? 3);
const inputs = (process.argv[6] ?? 'host') as 'host' | 'device';
if (inputs === 'device' && backend !== 'cuda') throw new Error("inputs 'device' needs backend 'cuda'");
const rng = new Rng(3);
const make = () =>
  denseBatch(encodeFloats(randomUnitTokens(rng, b * 1024, 128), 'float16'), {
    count: b,
    length: 1024,
    dim: 128,
    dtype: 'float16',
    checkFinite: false,
  });
const hostQueries = make();
const hostDocs = make();
const gpu = backend === 'cuda' ? await cuda() : undefined;
const onDevice = inputs === 'device' && gpu !== undefined;
const queries = onDevice ? await gpu.upload(hostQueries) : hostQueries;
const docs = onDevice ? await gpu.upload(hostDocs) : hostDocs;
// Device gradients are left on the device (freed at once); host ones are arrays already.
const drop = (g: { dQ: unknown; dD: unknown }) => {
  for (const x of [g.dQ, g.dD])
    if (typeof (x as DeviceCorpus).dispose === 'function') (x as DeviceCorpus).dispose();
};
const seconds = (t: bigint) => Number(process.hrtime.bigint() - t) / 1e9;
const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
// warm-up (module load, allocations) through every phase
drop(
  await (await maxsimTrain(queries, docs, { backend, dDPath })).backward(new Float32Array(b * b).fill(1 / b)),
);
const forwards: number[] = [];
const backwards: number[] = [];
const steps: number[] = [];
let loss = 0;
let usedPath: string | undefined;
for (let r = 0; r < repeats; r++) {
  let t = process.hrtime.bigint();
  const fwd = await maxsimTrain(queries, docs, { backend, dDPath });
  forwards.push(seconds(t));
  t = process.hrtime.bigint();
  const grads = await fwd.backward(new Float32Array(b * b).fill(1 / b));
  backwards.push(seconds(t));
  usedPath = grads.dDPath;
  drop(grads);
  t = process.hrtime.bigint();
  const step = await contrastiveStep(queries, docs, { backend, temperature: 0.05, dDPath });
  steps.push(seconds(t));
  loss = step.loss;
  drop(step);
}
// One more pass with profiling on (CUDA): where the time goes, host phases (wall) and kernels (events).
let forwardProfileMs: Record<string, number> | undefined;
let backwardProfileMs: Record<string, number> | undefined;
if (backend === 'cuda') {
  const fwd = await maxsimTrain(queries, docs, { backend, dDPath, cudaTuning: { profile: true } });
  forwardProfileMs = fwd.profileMs;
  const grads = await fwd.backward(new Float32Array(b * b).fill(1 / b));
  backwardProfileMs = grads.profileMs;
  drop(grads);
}
const forward = median(forwards);
const backward = median(backwards);
const total = median(steps);
const flops = 2 * b * b * 1024 * 1024 * 128;
// Peak device bytes of the caching allocator over the whole run (this process), and what of it is
// not the inputs (fp16 queries and documents) and their fp32 gradients: the "extra" figure.
let peakBytes: number | undefined;
let peakExtraBytes: number | undefined;
if (gpu) {
  peakBytes = (await gpu.memory()).peak;
  peakExtraBytes = peakBytes - 2 * (b * 1024 * 128) * (2 + 4);
  gpu.dispose();
}
console.log(
  JSON.stringify({
    backend,
    inputs,
    shape: `${b},1024,1024,128,${b}`,
    dDPath,
    dDPathUsed: usedPath,
    repeats,
    forwardS: forward,
    backwardS: backward,
    stepS: total,
    backwardOverForward: backward / forward,
    stepOverForward: total / forward,
    forwardTflops: flops / forward / 1e12,
    forwardRunsS: forwards,
    backwardRunsS: backwards,
    stepRunsS: steps,
    forwardProfileMs,
    backwardProfileMs,
    peakBytes,
    peakExtraBytes,
    peakExtraMB: peakExtraBytes === undefined ? undefined : peakExtraBytes / 1e6,
    loss,
  }),
);
