// One GPU against a corpus sharded over every GPU of the host (cuda({ devices: 'all' })), resident,
// on the issue's shapes (Nq,Lq,Ld,d,B): all-pairs scores and top-10, wall-clock medians of
// interleaved rounds (the JS call to the results in JS, everything included). Documents are one
// random chunk appended until B (timing only; correctness is test/gpu/sharded.test.ts), float16.
// Run on a GPU host: node dist/bench/sharded-gpu.js [shape ...]   (default: the three shapes below)
import { cuda } from '../src/backends/cuda.js';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { encodeFloats } from '../src/floats.js';
import { benchKernel } from '../src/subpaths/internal.js';
import { denseBatch } from '../src/tensor.js';
import { interleavedMedians } from './interleave.js';

const shapes =
  process.argv.length > 2
    ? process.argv.slice(2)
    : ['1,1024,1024,128,20000', '32,32,300,128,20000', '1,32,128,128,200000'];
const rng = new Rng(41);
const one = await cuda({ device: 0 });
const all = await cuda({ devices: 'all' });
console.log(`GPUs: ${all.devices.map((d) => `${d.info.index} ${d.info.name}`).join(', ')}`);

for (const shape of shapes) {
  const [nq, lq, ld, d, b] = shape.split(',').map(Number);
  const chunk = Math.max(1, Math.min(b, Math.floor(64_000_000 / (ld * d))));
  const data = encodeFloats(randomUnitTokens(rng, chunk * ld, d), 'float16');
  const piece = denseBatch(data, { count: chunk, length: ld, dim: d, dtype: 'float16', checkFinite: false });
  const single = await one.alloc({ dtype: 'float16', dim: d, tokens: b * ld, items: b });
  // room for every append on any one GPU, so the shards fill evenly by the fewest-tokens rule
  const spread = all.devices.length;
  const sharded = await all.alloc({ dtype: 'float16', dim: d, tokens: b * ld * spread, items: b * spread });
  for (let at = 0; at < b; at += chunk) {
    const n = Math.min(chunk, b - at);
    const part =
      n === chunk
        ? piece
        : denseBatch(data.subarray(0, n * ld * d), {
            count: n,
            length: ld,
            dim: d,
            dtype: 'float16',
            checkFinite: false,
          });
    await single.append(part);
    await sharded.append(part);
  }
  // The kernels alone: each GPU's share (B / GPUs documents) timed with device events on all GPUs at
  // once, against the whole corpus on one GPU; the host's fixed cost per call is left out.
  const shares = await Promise.all(
    all.devices.map(async (dev) => {
      const n = Math.ceil(b / spread);
      const share = await dev.alloc({ dtype: 'float16', dim: d, tokens: n * ld, items: n });
      for (let at = 0; at < n; at += chunk) {
        const m = Math.min(chunk, n - at);
        await share.append(
          m === chunk
            ? piece
            : denseBatch(data.subarray(0, m * ld * d), {
                count: m,
                length: ld,
                dim: d,
                dtype: 'float16',
                checkFinite: false,
              }),
        );
      }
      return share;
    }),
  );
  const queries = denseBatch(randomUnitTokens(rng, nq * lq * d, d), {
    count: nq,
    length: lq,
    dim: d,
    dtype: 'float32',
  });
  const times = await interleavedMedians(
    {
      'one GPU, scores': () => single.score(queries),
      'all GPUs, scores': () => sharded.score(queries),
      'one GPU, top-10': () => single.topK(queries, 10),
      'all GPUs, top-10': () => sharded.topK(queries, 10),
    },
    15,
    2,
  );
  const t = (n: string) => times[n].median;
  const flops = 2 * nq * lq * ld * d * b;
  console.log(
    `${shape}  shards ${sharded.shards.map((s) => `${s.device}:${s.count}`).join(' ')}\n` +
      `  scores: one ${t('one GPU, scores').toFixed(3)} ms (${(flops / t('one GPU, scores') / 1e9).toFixed(0)} TFLOP/s), all ${t('all GPUs, scores').toFixed(3)} ms: ${(t('one GPU, scores') / t('all GPUs, scores')).toFixed(2)}x\n` +
      `  top-10: one ${t('one GPU, top-10').toFixed(3)} ms, all ${t('all GPUs, top-10').toFixed(3)} ms: ${(t('one GPU, top-10') / t('all GPUs, top-10')).toFixed(2)}x`,
  );
  const median = (x: number[]) => [...x].sort((p, q) => p - q)[x.length >> 1];
  const kOne = median((await benchKernel(one, queries, single, { iters: 30 })).ms);
  const kAll = await Promise.all(
    all.devices.map((dev, i) => benchKernel(dev, queries, shares[i], { iters: 30 })),
  );
  const kPar = Math.max(...kAll.map((r) => median(r.ms)));
  console.log(
    `  kernels: one GPU ${kOne.toFixed(3)} ms, ${spread} GPUs at once ${kAll.map((r) => median(r.ms).toFixed(3)).join(' / ')} ms: ${(kOne / kPar).toFixed(2)}x`,
  );
  for (const c of [single, sharded, ...shares]) c.dispose();
}
all.dispose();
one.dispose();
