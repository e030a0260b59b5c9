// The service's search pass without the service: a resident float16 corpus (the serve bench's: rows
// drawn from 65,536 random unit tokens) and passes of B float16 queries of 32 tokens, top-10, as the
// server's batcher hands them to the GPU. Per B: the kernel alone (device events), one pass end to end,
// and passes queued back to back (the worker never waits for JS: its per-pass time is what bounds a
// server's requests/s), then where one pass's time goes on the worker (a synchronize at each phase
// boundary). The gap between back to back and the kernel is the
// host work between two kernels: the GPU idles through it. --pass int8: the server's int8 pass (its
// copy with one scale per document scanned, the 4 x k best rescored from the float16 corpus).
//
// Run on a GPU host: node dist/bench/serve-backend.js [--docs 100000] [--doc-len 128] [--batches 117,120,128]
//        [--passes 40] [--pass float16|int8] [--exact-group N|auto (int8: queries per exact launch; the
//        batch itself is the one-launch rescore)]
import { cuda, type JobTimes, onJobTimes } from '../src/backends/cuda.js';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { encodeFloats } from '../src/floats.js';
import { PREFILTER_FACTOR } from '../src/server/segment-search.js';
import { benchKernel, setExactGroup, setJobPhases } from '../src/subpaths/internal.js';
import { denseBatch } from '../src/tensor.js';
import { copyPoolRows, rowPool } from './serve-servers.js';

const arg = (flag: string, otherwise: string) => {
  const i = process.argv.indexOf(flag);
  return i >= 0 ? process.argv[i + 1] : otherwise;
};
const docsN = Number(arg('--docs', '100000'));
const docLen = Number(arg('--doc-len', '128'));
const batches = arg('--batches', '117,120,128').split(',').map(Number);
const passes = Number(arg('--passes', '40'));
const pass = arg('--pass', 'float16');
if (pass !== 'float16' && pass !== 'int8') throw new Error(`--pass: float16 or int8, received ${pass}`);
const groupArg = arg('--exact-group', 'auto');
setExactGroup(groupArg === 'auto' ? 'auto' : Number(groupArg));
for (const [name, v] of [
  ['--docs', docsN],
  ['--doc-len', docLen],
  ['--passes', passes],
  ...batches.map((b) => ['--batches', b] as const),
] as const)
  if (!(Number.isInteger(v) && v >= 1)) throw new Error(`${name}: a positive integer, received ${v}`);

const dim = 128;
const qLen = 32;
const rng = new Rng(11);
const pool = rowPool(rng, dim, 'float16');
const rows = Buffer.allocUnsafeSlow(docsN * docLen * pool.rowBytes);
copyPoolRows(rng, pool, rows, docsN * docLen);
const bits = new Uint16Array(rows.buffer, rows.byteOffset, docsN * docLen * dim);
const gpu = await cuda();
const docs = await gpu.upload(denseBatch(bits, { count: docsN, length: docLen, dim, dtype: 'float16' }));
const eight = pass === 'int8' ? await docs.quantize('int8', { scales: 'document' }) : undefined;
const scan = eight ?? docs;
// the server's pass (src/server/resident-gpu.ts, deviceRuns)
const topK = (q: Parameters<typeof docs.topK>[0]) =>
  eight ? eight.topK(q, 10, { rescore: { docs, candidates: PREFILTER_FACTOR * 10 } }) : docs.topK(q, 10);
const median = (x: number[]) => [...x].sort((a, b) => a - b)[x.length >> 1];
const f2 = (x: number) => x.toFixed(2);
console.log(
  `${gpu.info.name}: ${docsN} docs x ${docLen} tokens, d = ${dim} float16, ${pass} passes (exact group ${groupArg}); queries of ${qLen} tokens, top-10`,
);
for (const b of batches) {
  const q = denseBatch(encodeFloats(randomUnitTokens(rng, b * qLen, dim), 'float16'), {
    count: b,
    length: qLen,
    dim,
    dtype: 'float16',
  });
  const kernel = median((await benchKernel(gpu, q, scan, { warmup: 5, iters: 15 })).ms);
  const one: number[] = [];
  for (let i = 0; i < 10; i++) {
    const t0 = performance.now();
    await topK(q);
    one.push(performance.now() - t0);
  }
  // back to back: every pass queued at once, so the worker goes from one to the next
  const walls: number[] = [];
  for (let r = 0; r < 3; r++) {
    const t0 = performance.now();
    await Promise.all(Array.from({ length: passes }, () => topK(q)));
    walls.push((performance.now() - t0) / passes);
  }
  const back = median(walls);
  const seen = new Map<string, number[]>();
  onJobTimes((_job, times: JobTimes) => {
    const f = (times.phases ?? '').split(' ');
    for (let i = 0; i + 1 < f.length; i += 2) {
      if (!seen.has(f[i])) seen.set(f[i], []);
      seen.get(f[i])?.push(Number(f[i + 1]));
    }
  });
  const error = console.error;
  console.error = () => {}; // setJobPhases prints every job's line
  setJobPhases(true);
  try {
    for (let i = 0; i < 10; i++) await topK(q);
  } finally {
    setJobPhases(false);
    console.error = error;
    onJobTimes(undefined);
  }
  const phases = [...seen].map(([name, t]) => `${name} ${f2(median(t))}`).join(' ');
  console.log(
    `B ${String(b).padStart(4)}: kernel ${f2(kernel)} ms (${((1000 * b) / kernel).toFixed(0)} q/s) | one pass ${f2(median(one))} ms | back to back ${f2(back)} ms per pass (${((1000 * b) / back).toFixed(0)} q/s, +${f2(back - kernel)} ms over the kernel) | phases ms (synchronized): ${phases}`,
  );
}
eight?.dispose();
docs.dispose();
gpu.dispose();
