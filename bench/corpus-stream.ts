// GPU out-of-core search: a ColPali-shaped corpus (1024 tokens x d = 128, float16: 256 KiB per
// document) larger than the device memory budget given to the search, streamed from the corpus file
// (page cache) through pinned buffers. Prints docs/s, GB/s, the fraction of the pinned host-to-device
// copy rate measured in the same run, peak device memory and the time to the first scored block.
// Run: node dist/bench/corpus-stream.js --dir /path/c.msx --docs 163840 --budget-gib 8
// (the corpus is built on first use with one fixed pool of random documents repeated, and kept).
import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { nativeCuda } from '../src/backends/cuda.js';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { CorpusWriter } from '../src/io/corpus.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { quantize } from '../src/ops/quantize.js';
import { encodeFloats, raggedBatch } from '../src/tensor.js';

const { values } = parseArgs({
  options: {
    dir: { type: 'string', default: '/tmp/maxsim-stream.msx' },
    docs: { type: 'string', default: '163840' },
    'budget-gib': { type: 'string', default: '8' },
    queries: { type: 'string', default: '4' },
    'query-length': { type: 'string', default: '32' },
    repeats: { type: 'string', default: '2' },
    transfer: { type: 'string', default: 'copy,register' },
    // extra configurations, 'transfer:depth:readers,...' (e.g. copy:4:16,register:8:8)
    grid: { type: 'string', default: '' },
    dtype: { type: 'string', default: 'fp16' },
    pin: { type: 'boolean', default: false },
    // several GPUs: 'all' or indices (0,1); each configuration then also runs on device 0 alone
    gpus: { type: 'string', default: '' },
  },
});
const DOCS = Number(values.docs);
const LEN = 1024;
const DIM = 128;
const dir = values.dir!;
const rng = new Rng(9);
const gb = (b: number) => b / 1e9;

if (!fs.existsSync(path.join(dir, 'MANIFEST'))) {
  fs.mkdirSync(path.dirname(dir), { recursive: true });
  const pool = 64;
  const int8 = values.dtype === 'int8';
  const floats = randomUnitTokens(rng, pool * LEN, DIM);
  const q8 = int8 ? quantize(raggedBatch(floats, [0, pool * LEN], { dim: DIM }), 'int8') : undefined;
  const data = q8 ? (q8.data as Int8Array) : (encodeFloats(floats, 'float16') as Uint16Array);
  const t = performance.now();
  const w = CorpusWriter.create(dir, { dim: DIM, dtype: int8 ? 'int8' : 'float16' });
  for (let at = 0; at < DOCS; at += pool) {
    const n = Math.min(pool, DOCS - at);
    w.addEncoded({
      data: data.subarray(0, n * LEN * DIM),
      lengths: new Int32Array(n).fill(LEN),
      scales: q8?.scales?.subarray(0, n * LEN),
    });
  }
  const info = w.commit();
  const s = (performance.now() - t) / 1000;
  console.log(
    `built ${info.documents} documents, ${gb(info.bytes).toFixed(1)} GB in ${s.toFixed(1)} s (${(gb(info.bytes) / s).toFixed(2)} GB/s)`,
  );
}

const corpus = openCorpus(dir);
const nq = Number(values.queries);
const lq = Number(values['query-length']);
const queries = raggedBatch(
  randomUnitTokens(rng, nq * lq, DIM),
  Array.from({ length: nq + 1 }, (_, i) => i * lq),
  { dim: DIM },
);
const cuda = nativeCuda() as unknown as {
  measureHostToDevice(device: number, bytes: number, iters: number): Promise<Float64Array>;
};
const copies = await cuda.measureHostToDevice(0, 256 * 1024 * 1024, 20);
const sorted = [...copies].sort((a, b) => a - b);
const h2d = (256 * 1024 * 1024) / sorted[sorted.length >> 1];
console.log(`pinned host-to-device copy: ${gb(h2d).toFixed(1)} GB/s (median of 20 x 256 MiB)`);

const budget = Number(values['budget-gib']) * 1024 ** 3;
// Configurations: each --transfer with its default depth / readers, then each --grid entry.
type Config = { transfer: 'copy' | 'register'; pipelineDepth?: number; readers?: number };
const configs: Config[] = [
  ...values.transfer!.split(',').map((t) => ({ transfer: t as Config['transfer'] })),
  ...values
    .grid!.split(',')
    .filter(Boolean)
    .map((g) => {
      const [t, d, r] = g.split(':');
      return { transfer: t as Config['transfer'], pipelineDepth: Number(d), readers: Number(r) };
    }),
];
if (values.pin) {
  const t = performance.now();
  await corpus.pin();
  console.log(
    `pinned ${gb(corpus.pinnedBytes).toFixed(1)} GB of corpus files in ${((performance.now() - t) / 1000).toFixed(2)} s`,
  );
  configs.unshift({ transfer: 'copy' }); // the first configuration runs on the pinned files
}
const gpuSets: (number[] | 'all' | undefined)[] = values.gpus
  ? [undefined, values.gpus === 'all' ? 'all' : values.gpus.split(',').map(Number)]
  : [undefined];
for (const [ci, config] of configs.entries()) {
  if (values.pin && ci === 1) corpus.unpin();
  for (const devices of gpuSets)
    for (let r = 0; r < Number(values.repeats); r++) {
      let last = 0;
      const { hits, stats } = await corpus.searchWithStats(queries, {
        topK: 10,
        backend: 'cuda',
        gpuMemory: budget,
        devices,
        ...config,
        onProgress: (p) => {
          if (p.elapsedMs - last > 2000) {
            last = p.elapsedMs;
            process.stderr.write(
              `  ${p.documents}/${p.totalDocuments} documents, ${(p.elapsedMs / 1000).toFixed(1)} s\n`,
            );
          }
        },
      });
      console.log(
        JSON.stringify({
          run: r,
          transfer: values.pin && ci === 0 ? 'pinned' : config.transfer,
          depth: config.pipelineDepth ?? 'default',
          readers: config.readers ?? 'default',
          gpus: stats.devices?.join(',') ?? '0',
          dtype: corpus.info.dtype,
          corpusGB: +gb(corpus.info.tokenBytes).toFixed(2),
          budgetGiB: Number(values['budget-gib']),
          queries: `${nq}x${lq}`,
          seconds: +stats.seconds.toFixed(3),
          docsPerSecond: Math.round(stats.documents / stats.seconds),
          GBps: +gb(stats.bytes / stats.seconds).toFixed(1),
          ofPinnedH2D: +(stats.bytes / stats.seconds / h2d).toFixed(3),
          ofPinnedH2DPerGpu: +(stats.bytes / stats.seconds / h2d / (stats.devices?.length ?? 1)).toFixed(3),
          devicePeakMiB: +((stats.devicePeakBytes ?? 0) / 1024 ** 2).toFixed(0),
          firstBlockSeconds: +stats.firstBlockSeconds.toFixed(3),
          blocks: stats.blocks,
          variant: stats.variant,
          top1: hits[0][0],
        }),
      );
    }
}
