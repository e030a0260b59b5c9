// Batch top-K on a device corpus with the selection on the device (maxsim_select.cu) against the host
// heaps (setSelectPlacement('host') from maxsim/internal, read by each job), in one process, interleaved:
// 1,000 queries of 32 tokens over 100,000 documents of 32 tokens, d = 128, top-10, int8 and float16.
// The host path reads the whole [1,000 x 100,000] score matrix back (400 MB) and keeps a heap per row
// on one thread; the device path reads back 10 entries per query. Wall-clock medians of 5 rounds;
// the kernels alone (device events) for comparison.
// Run on a GPU host: node dist/bench/topk-gpu.js
import { cuda } from '../src/backends/cuda.js';
import { setSelectPlacement } from '../src/backends/cuda-select-placement.js';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { encodeFloats } from '../src/floats.js';
import { benchKernel } from '../src/subpaths/internal.js';
import { denseBatch } from '../src/tensor.js';
import { interleavedMedians } from './interleave.js';

const DOCS = 100_000;
const QUERIES = 1000;
const rng = new Rng(23);
const gpu = await cuda();
const f16 = await gpu.alloc({ dtype: 'float16', dim: 128, tokens: DOCS * 32, items: DOCS });
for (let at = 0; at < DOCS; at += 25_000) {
  const data = encodeFloats(randomUnitTokens(rng, 25_000 * 32, 128), 'float16');
  await f16.append(
    denseBatch(data, { count: 25_000, length: 32, dim: 128, dtype: 'float16', checkFinite: false }),
  );
}
const i8 = await f16.quantize('int8');
const queries = denseBatch(randomUnitTokens(rng, QUERIES * 32, 128), {
  count: QUERIES,
  length: 32,
  dim: 128,
  dtype: 'float32',
});
const selectOn = (where: 'device' | 'host', run: () => Promise<unknown>) => async () => {
  setSelectPlacement(where === 'host' ? 'host' : 'auto');
  try {
    return await run();
  } finally {
    setSelectPlacement('auto');
  }
};
const cases: Record<string, () => Promise<unknown>> = {
  'int8 top-10, device selection': selectOn('device', () => i8.topK(queries, 10)),
  'int8 top-10, host selection': selectOn('host', () => i8.topK(queries, 10)),
  'fp16 top-10, device selection': selectOn('device', () => f16.topK(queries, 10)),
  'fp16 top-10, host selection': selectOn('host', () => f16.topK(queries, 10)),
};
const times = await interleavedMedians(cases, 5, 1);
for (const [name, t] of Object.entries(times)) console.log(`${name.padEnd(30)} ${t.median.toFixed(2)} ms`);
for (const [name, corpus] of [
  ['int8 kernel', i8],
  ['fp16 kernel', f16],
] as const) {
  const b = await benchKernel(gpu, queries, corpus, { warmup: 2, iters: 5 });
  const ms = [...b.ms].sort((x, y) => x - y)[b.ms.length >> 1];
  console.log(`${name.padEnd(30)} ${ms.toFixed(2)} ms (${b.variant}, device events)`);
}
const device = await i8.topK(queries, 10);
setSelectPlacement('host');
const host = await i8.topK(queries, 10);
setSelectPlacement('auto');
console.log(`device selection equals host selection: ${JSON.stringify(device) === JSON.stringify(host)}`);
i8.dispose();
f16.dispose();
