// Wall-clock timing of one training step at ColPali shape (Lq = Ld = 1024, d = 128, all pairs B x B,
// fp16) on a backend, transfers included: a first measurement of the training path, not a kernel
// benchmark. Run: node dist/bench/train-timing.js [cpu|cuda] [B]
import { cuda } from '../src/backends/cuda.js';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { contrastiveStep, maxsimTrain } from '../src/ops/train.js';
import { denseBatch, encodeFloats } from '../src/tensor.js';

const backend = (process.argv[2] ?? 'cuda') as 'cpu' | 'cuda';
const b = Number(process.argv[3] ?? 32);
const rng = new Rng(3);
const make = () =>
  denseBatch(encodeFloats(randomUnitTokens(rng, b * 1024, 128), 'float16'), {
    count: b,
    length: 1024,
    dim: 128,
    dtype: 'float16',
    checkFinite: false,
  });
const queries = make();
const docs = make();
const seconds = (t: bigint) => Number(process.hrtime.bigint() - t) / 1e9;
await maxsimTrain(queries, docs, { backend }); // warm-up (module load, allocations)
let t = process.hrtime.bigint();
const fwd = await maxsimTrain(queries, docs, { backend });
const forward = seconds(t);
t = process.hrtime.bigint();
await fwd.backward(new Float32Array(b * b).fill(1 / b));
const backward = seconds(t);
t = process.hrtime.bigint();
const step = await contrastiveStep(queries, docs, { backend, temperature: 0.05 });
const total = seconds(t);
const flops = 2 * b * b * 1024 * 1024 * 128;
// Peak device bytes of the caching allocator over the whole run, and what of it is not the inputs
// (fp16 queries and documents) and their fp32 gradients.
let peakBytes: number | undefined;
let peakExtraBytes: number | undefined;
if (backend === 'cuda') {
  const gpu = await cuda();
  peakBytes = (await gpu.memory()).peak;
  peakExtraBytes = peakBytes - 2 * (b * 1024 * 128) * (2 + 4);
  gpu.dispose();
}
console.log(
  JSON.stringify({
    backend,
    shape: `${b},1024,1024,128,${b}`,
    forwardS: forward,
    backwardS: backward,
    stepS: total,
    forwardTflops: flops / forward / 1e12,
    peakBytes,
    peakExtraBytes,
    loss: step.loss,
  }),
);
