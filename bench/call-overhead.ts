// The fixed cost of one small GPU call, end to end (JS -> native -> GPU -> JS): 1 query of 32
// tokens over 1,000 documents of 32 tokens, d = 128, against the kernel alone (device events).
// What is left above the kernel is planning, query conversion, the job round trip to the GPU
// worker thread, the read-back and the JS results: what a server pays per request.
// Then where it goes (bench/NOTES.md, 'Small-call overhead'), medians over the same calls:
// - handoff: in = submit on the JS thread -> start on the worker thread, run = the job on the worker
//   (host work, launches, copies, the wait on the GPU), out = end of the run -> completion callback
//   on the JS thread, js = the rest of the call's wall time (the JS work before the submit and after
//   the completion: checks, plan, promise, hits);
// - phases: the same jobs with a synchronize at each phase boundary (so they add up to more than the
//   call): each phase's wall time on the worker.
// Run on a GPU host: node dist/bench/call-overhead.js
import { cuda, type JobTimes, onJobTimes } from '../src/backends/cuda.js';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { encodeFloats } from '../src/floats.js';
import { benchKernel, setJobPhases, setMappedScores, setSelectPlacement } from '../src/subpaths/internal.js';
import { denseBatch, tokenMatrix } from '../src/tensor.js';

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
const values = randomUnitTokens(rng, 32, 128);
const query = tokenMatrix(values, 32, 128);
// the same query in float16: no conversion on the GPU against a float16 corpus
const query16 = tokenMatrix(encodeFloats(values, 'float16'), 32, 128, { dtype: 'float16' });
const median = (x: number[]) => [...x].sort((a, b) => a - b)[x.length >> 1];
const f1 = (x: number) => x.toFixed(1);

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

// The handoff of n calls: medians of in / run / out and of the JS rest (wall - in - run - out).
async function handoff(run: () => Promise<unknown>, n = 1000): Promise<string> {
  const got: { last?: JobTimes } = {};
  onJobTimes((_job, times) => {
    got.last = times;
  });
  const parts: Record<'in' | 'run' | 'out' | 'js', number[]> = { in: [], run: [], out: [], js: [] };
  try {
    for (let i = 0; i < 100; i++) await run();
    for (let i = 0; i < n; i++) {
      got.last = undefined;
      const t0 = performance.now();
      await run();
      const us = (performance.now() - t0) * 1000;
      const h = (got.last as JobTimes | undefined)?.handoff; // set by the sink during the call
      if (!h) throw new Error('the job reported no handoff times (an addon built before onJobTimes?)');
      parts.in.push(h.inUs);
      parts.run.push(h.runUs);
      parts.out.push(h.outUs);
      parts.js.push(us - h.inUs - h.runUs - h.outUs);
    }
  } finally {
    onJobTimes(undefined);
  }
  return `in ${f1(median(parts.in))} run ${f1(median(parts.run))} out ${f1(median(parts.out))} js ${f1(median(parts.js))}`;
}

// The phases of n jobs, each phase's median in us ("queries 12.0 fill 3.1 ...").
async function phases(run: () => Promise<unknown>, n = 300): Promise<string> {
  const seen = new Map<string, number[]>();
  onJobTimes((_job, times) => {
    const f = (times.phases ?? '').split(' ');
    for (let i = 0; i + 1 < f.length; i += 2) {
      if (!seen.has(f[i])) seen.set(f[i], []);
      seen.get(f[i])?.push(Number(f[i + 1]) * 1000);
    }
  });
  const error = console.error;
  console.error = () => {}; // setJobPhases also prints every job's line
  setJobPhases(true);
  try {
    for (let i = 0; i < n; i++) await run();
  } finally {
    setJobPhases(false);
    console.error = error;
    onJobTimes(undefined);
  }
  return [...seen].map(([name, t]) => `${name} ${f1(median(t))}`).join(' ');
}

// A job that round-trips to the worker thread and the driver without a kernel (memory():
// cuMemGetInfo), against the calls below.
const roundTrip = await wall(() => gpu.memory());
console.log(`round trip (memory(): JS -> worker -> driver -> JS) ${f1(roundTrip)} us`);

for (const [name, corpus] of [
  ['float16', docs],
  ['int8', i8],
] as const) {
  const kernel = median((await benchKernel(gpu, query, corpus, { warmup: 20, iters: 200 })).ms) * 1000;
  const topk = await wall(() => corpus.topK(query, 10));
  const score = await wall(() => corpus.score(query));
  console.log(
    `${name.padEnd(8)} kernel ${f1(kernel)} us | topK(10) ${f1(topk)} us (+${f1(topk - kernel)}) | score ${f1(score)} us (+${f1(score - kernel)})`,
  );
  if (name === 'float16') {
    const topk16 = await wall(() => corpus.topK(query16, 10));
    console.log(
      `         topK(10), float16 query (no conversion) ${f1(topk16)} us (+${f1(topk16 - kernel)})`,
    );
  }
  // the scores kept in device memory (a NaN fill folded into the query upload, a read-back copy)
  // instead of written by the kernel into pinned host memory, the default for a matrix this small
  setMappedScores(false);
  try {
    const topkDev = await wall(() => corpus.topK(query, 10));
    const scoreDev = await wall(() => corpus.score(query));
    console.log(
      `         scores in device memory: topK(10) ${f1(topkDev)} us (+${f1(topkDev - kernel)}) | score ${f1(scoreDev)} us (+${f1(scoreDev - kernel)})`,
    );
  } finally {
    setMappedScores(true);
  }
  // the selection on the worker's heaps (the whole 1,000-score row read back) instead of the device
  // selection the plan picks for this shape: whether tiny shapes should select on the host
  setSelectPlacement('host');
  try {
    const topkHost = await wall(() => corpus.topK(query, 10));
    console.log(`         topK(10), host selection ${f1(topkHost)} us (+${f1(topkHost - kernel)})`);
    console.log(`  topK  phases us, host selection: ${await phases(() => corpus.topK(query, 10), 200)}`);
  } finally {
    setSelectPlacement('auto');
  }
  console.log(`  topK  handoff us: ${await handoff(() => corpus.topK(query, 10))}`);
  console.log(`  score handoff us: ${await handoff(() => corpus.score(query))}`);
  console.log(
    `  topK  phases us (a synchronize at each boundary): ${await phases(() => corpus.topK(query, 10))}`,
  );
}
i8.dispose();
docs.dispose();
