// The fixed cost of one small GPU call, end to end (JS -> native -> GPU -> JS): 1 query of 32
// tokens over 1,000 documents of 32 tokens, d = 128, against the kernel alone (device events).
// What is left above the kernel is planning, query conversion, the job round trip to the GPU
// worker thread, the read-back and the JS results: what a server pays per request.
// Run on a GPU host: node dist/bench/call-overhead.js
import { cuda } from '../src/backends/cuda.js';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { benchKernel, setJobPhases } from '../src/subpaths/internal.js';
import { denseBatch, encodeFloats, tokenMatrix } from '../src/tensor.js';

const rng = new Rng(5);
const gpu = await cuda();
const docs = await gpu.upload(
  denseBatch(encodeFloats(randomUnitTokens(rng, 1000 * 32, 128), 'float16'), {
    count: 1000,
    length: 32,
    dim: 128,
    dtype: 'float16',
  }),
);
const i8 = await docs.quantize('int8');
const query = tokenMatrix(randomUnitTokens(rng, 32, 128), 32, 128);
const median = (x: number[]) => [...x].sort((a, b) => a - b)[x.length >> 1];

async function wall(run: () => Promise<unknown>, n = 2000): Promise<number> {
  for (let i = 0; i < 200; i++) await run();
  const t: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await run();
    t.push(performance.now() - t0);
  }
  return median(t) * 1000;
}

// Where the fixed cost goes: a job that round-trips to the worker thread and the driver without a
// kernel (memory(): cuMemGetInfo), against the calls below.
const roundTrip = await wall(() => gpu.memory());
console.log(`round trip (memory(): JS -> worker -> driver -> JS) ${roundTrip.toFixed(1)} us`);

for (const [name, corpus] of [
  ['float16', docs],
  ['int8', i8],
] as const) {
  const kernel = median((await benchKernel(gpu, query, corpus, { warmup: 20, iters: 200 })).ms) * 1000;
  const topk = await wall(() => corpus.topK(query, 10));
  const score = await wall(() => corpus.score(query));
  console.log(
    `${name.padEnd(8)} kernel ${kernel.toFixed(1)} us | topK(10) ${topk.toFixed(1)} us (+${(topk - kernel).toFixed(1)}) | score ${score.toFixed(1)} us (+${(score - kernel).toFixed(1)})`,
  );
}
// The phases of a few topK jobs (each phase ends with a synchronize, so they add up to more than
// the call): where the time above the kernel goes inside the job.
setJobPhases(true);
for (let i = 0; i < 3; i++) await docs.topK(query, 10);
setJobPhases(false);
i8.dispose();
docs.dispose();
