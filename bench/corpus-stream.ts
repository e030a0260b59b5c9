// GPU out-of-core search: a ColPali-shaped corpus (1024 tokens x d = 128, float16: 256 KiB per
// document) larger than the device memory budget given to the search, streamed from the corpus files.
// In one run, each transfer mode in turn (--modes, default pinned,auto,copy,direct):
//   pinned   corpus.pin() first (its time printed), then the searches
//   auto     the default (no pin): run 0 is cold (the files pinned ahead of the scan as it goes, when
//            they fit the host-memory budget), later runs warm (the pages kept from run 0)
//   copy     pread through the page cache into pinned buffers (today's copy mode, --no-pin)
//   direct   O_DIRECT reads into pinned buffers (falls back to copy where refused; the reason printed)
//   register each block's pages registered for its copy
// Prints per search docs/s, GB/s, the fraction of the pinned host-to-device copy rate measured in the
// same run, peak device memory, the time to the first scored block and stats.transfer; then a summary
// line comparing each mode's best run with pinned.
// Run: node dist/bench/corpus-stream.js --dir /path/c.msx --docs 100000 --budget-gib 8 --repeats 3
// (100,000 documents: 26.2 GB of fp16 tokens; the corpus is built on first use with one fixed pool of
// random documents repeated, and kept).
import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { nativeCuda } from '../src/backends/cuda.js';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { encodeFloats } from '../src/floats.js';
import { CorpusWriter } from '../src/io/corpus/index.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { quantize } from '../src/ops/quantize.js';
import { raggedBatch } from '../src/tensor.js';

const { values } = parseArgs({
  options: {
    dir: { type: 'string', default: '/tmp/maxsim-stream.msx' },
    docs: { type: 'string', default: '163840' },
    'budget-gib': { type: 'string', default: '8' },
    queries: { type: 'string', default: '4' },
    'query-length': { type: 'string', default: '32' },
    repeats: { type: 'string', default: '2' },
    modes: { type: 'string', default: 'pinned,auto,copy,direct' },
    // extra configurations, 'transfer:depth:readers,...' (e.g. copy:4:16,direct:6:16,pin:8:12)
    grid: { type: 'string', default: '' },
    dtype: { type: 'string', default: 'fp16' },
    // auto: the host-memory budget (default: half of MemAvailable)
    'host-budget-gib': { type: 'string' },
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
const hostMemoryBudget =
  values['host-budget-gib'] === undefined
    ? undefined
    : Math.floor(Number(values['host-budget-gib']) * 1024 ** 3);
// Configurations: each mode with its default depth / readers, then each --grid entry.
type Mode = 'pinned' | 'auto' | 'copy' | 'direct' | 'register' | 'pin';
type Config = { mode: Mode; pipelineDepth?: number; readers?: number };
const MODES: Mode[] = ['pinned', 'auto', 'copy', 'direct', 'register', 'pin'];
const configs: Config[] = [
  ...values
    .modes!.split(',')
    .filter(Boolean)
    .map((m) => ({ mode: m as Mode })),
  ...values
    .grid!.split(',')
    .filter(Boolean)
    .map((g) => {
      const [m, d, r] = g.split(':');
      return { mode: m as Mode, pipelineDepth: Number(d), readers: Number(r) };
    }),
];
for (const c of configs)
  if (!MODES.includes(c.mode))
    throw new Error(`--modes / --grid: unknown mode ${c.mode} (${MODES.join(', ')})`);
const gpuSets: (number[] | 'all' | undefined)[] = values.gpus
  ? [undefined, values.gpus === 'all' ? 'all' : values.gpus.split(',').map(Number)]
  : [undefined];
const best = new Map<string, { GBps: number; firstBlockMs: number }>();
for (const config of configs) {
  // every configuration starts from no pin: 'auto' run 0 measures the cold pin-ahead
  corpus.unpin();
  let pinSeconds: number | undefined;
  if (config.mode === 'pinned') {
    const t = performance.now();
    await corpus.pin();
    pinSeconds = (performance.now() - t) / 1000;
    console.log(
      `pinned ${gb(corpus.pinnedBytes).toFixed(1)} GB of corpus files in ${pinSeconds.toFixed(2)} s`,
    );
  }
  const transfer = config.mode === 'pinned' || config.mode === 'auto' ? 'auto' : config.mode;
  for (const devices of gpuSets)
    for (let r = 0; r < Number(values.repeats); r++) {
      let last = 0;
      const started = performance.now();
      const { hits, stats } = await corpus.searchWithStats(queries, {
        topK: 10,
        backend: 'cuda',
        gpuMemory: budget,
        devices,
        transfer,
        hostMemoryBudget,
        pipelineDepth: config.pipelineDepth,
        readers: config.readers,
        onProgress: (p) => {
          if (p.elapsedMs - last > 2000) {
            last = p.elapsedMs;
            process.stderr.write(
              `  ${p.documents}/${p.totalDocuments} documents, ${(p.elapsedMs / 1000).toFixed(1)} s\n`,
            );
          }
        },
      });
      const wallSeconds = (performance.now() - started) / 1000;
      const t = stats.transfer!;
      const label = `${config.mode}${config.mode === 'auto' ? (r === 0 ? ' (cold)' : ' (warm)') : ''}${
        config.pipelineDepth ? `:${config.pipelineDepth}:${config.readers}` : ''
      }${devices ? ` gpus ${stats.devices?.join(',')}` : ''}`;
      const GBps = gb(stats.bytes / stats.seconds);
      const firstBlockMs = (stats.firstBlockSeconds + t.setupSeconds) * 1000;
      const prev = best.get(label);
      if (!prev || GBps > prev.GBps) best.set(label, { GBps, firstBlockMs });
      console.log(
        JSON.stringify({
          run: r,
          config: label,
          mode: t.mode,
          reason: t.reason,
          depth: t.depth,
          readers: t.readers,
          gpus: stats.devices?.join(',') ?? '0',
          dtype: corpus.info.dtype,
          corpusGB: +gb(corpus.info.tokenBytes).toFixed(2),
          budgetGiB: Number(values['budget-gib']),
          hostBudgetGB: +gb(t.hostMemoryBudget).toFixed(1),
          queries: `${nq}x${lq}`,
          seconds: +stats.seconds.toFixed(3),
          wallSeconds: +wallSeconds.toFixed(3),
          docsPerSecond: Math.round(stats.documents / stats.seconds),
          GBps: +GBps.toFixed(1),
          ofPinnedH2D: +(stats.bytes / stats.seconds / h2d).toFixed(3),
          ofPinnedH2DPerGpu: +(stats.bytes / stats.seconds / h2d / (stats.devices?.length ?? 1)).toFixed(3),
          devicePeakMiB: +((stats.devicePeakBytes ?? 0) / 1024 ** 2).toFixed(0),
          // from the search call: the transfer setup (mapping the files to pin ahead) + the scan's first block
          firstBlockMs: +firstBlockMs.toFixed(1),
          setupMs: +(t.setupSeconds * 1000).toFixed(1),
          pinnedGB: +gb(t.pinnedBytes).toFixed(2),
          registeredGB: +gb(t.registeredBytes).toFixed(2),
          ...(pinSeconds !== undefined ? { pinSeconds: +pinSeconds.toFixed(2) } : {}),
          blocks: stats.blocks,
          variant: stats.variant,
          top1: hits[0][0],
        }),
      );
    }
}
corpus.unpin();
// Each configuration's best run against pinned's best (the issue's target: auto >= 0.85 of pinned,
// first block <= 50 ms) and against the pinned host-to-device rate.
const pinned = best.get('pinned');
console.log(
  JSON.stringify({
    summary: Object.fromEntries(
      [...best].map(([label, b]) => [
        label,
        {
          GBps: +b.GBps.toFixed(1),
          ofPinnedSearch: pinned ? +(b.GBps / pinned.GBps).toFixed(3) : null,
          ofPinnedH2D: +(b.GBps / gb(h2d)).toFixed(3),
          firstBlockMs: +b.firstBlockMs.toFixed(1),
        },
      ]),
    ),
  }),
);
