// A 1M-document ColBERT-shaped corpus (ragged, 32-300 tokens, d = 128, float16, ~42 GB): built with
// bounded memory (peak RSS reported), then searched out of core on the GPU and checked against the
// in-memory path (the whole corpus uploaded to the GPU and scored by the same kernel), and on the
// CPU for one query. Run: node dist/bench/corpus-million.js [dir] [documents]
import * as fs from 'node:fs';
import { cuda } from '../src/backends/cuda.js';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { encodeFloats } from '../src/floats.js';
import { CorpusWriter } from '../src/io/corpus/index.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { rankRows } from '../src/ops/shape.js';
import { raggedBatch } from '../src/tensor.js';

const dir = process.argv[2] ?? '/tmp/million.msx';
const DOCS = Number(process.argv[3] ?? 1_000_000);
const DIM = 128;
const rng = new Rng(21);
const rssGiB = () => (process.resourceUsage().maxRSS * 1024) / 1024 ** 3;

if (!fs.existsSync(`${dir}/MANIFEST`)) {
  // Documents are windows at random offsets of a 4M-token pool of random unit tokens.
  const POOL = 4 << 20;
  const pool = encodeFloats(randomUnitTokens(rng, POOL, DIM), 'float16') as Uint16Array;
  const t = performance.now();
  const w = CorpusWriter.create(dir, { dim: DIM, dtype: 'float16' });
  const len = new Int32Array(1);
  for (let i = 0; i < DOCS; i++) {
    len[0] = rng.intBetween(32, 300);
    const at = rng.int(POOL - len[0]);
    w.addEncoded({ data: pool.subarray(at * DIM, (at + len[0]) * DIM), lengths: len });
    if (i % 200_000 === 0) process.stderr.write(`  ${i} documents, RSS ${rssGiB().toFixed(2)} GiB\n`);
  }
  const info = w.commit();
  const s = (performance.now() - t) / 1000;
  console.log(
    `built ${info.documents} documents, ${info.tokens} tokens, ${(info.bytes / 1e9).toFixed(1)} GB in ${s.toFixed(0)} s; peak RSS ${rssGiB().toFixed(2)} GiB`,
  );
}

const corpus = openCorpus(dir);
const nq = 8;
const queries = raggedBatch(
  randomUnitTokens(rng, nq * 32, DIM),
  Array.from({ length: nq + 1 }, (_, i) => i * 32),
  { dim: DIM },
);
const { hits, stats } = await corpus.searchWithStats(queries, {
  topK: 10,
  backend: 'cuda',
  gpuMemory: 8 * 1024 ** 3,
});
console.log(
  `GPU stream: ${stats.seconds.toFixed(2)} s, ${Math.round(stats.documents / stats.seconds)} docs/s, ` +
    `${(stats.bytes / stats.seconds / 1e9).toFixed(1)} GB/s, peak device ${(stats.devicePeakBytes! / 1024 ** 2).toFixed(0)} MiB, ` +
    `first block ${stats.firstBlockSeconds.toFixed(3)} s, ${stats.blocks} blocks, ${stats.variant}`,
);

// The in-memory path: every document on the GPU at once, scored by the same kernel.
const dev = await cuda();
const all = await dev.alloc({
  dtype: 'float16',
  dim: DIM,
  tokens: corpus.info.tokens,
  items: corpus.info.documents,
});
const t = performance.now();
for (let at = 0; at < corpus.info.documents; at += 50_000) {
  const ids = Array.from({ length: Math.min(50_000, corpus.info.documents - at) }, (_, i) => at + i);
  await all.append(corpus.readDocuments(ids));
}
console.log(
  `uploaded the whole corpus in ${((performance.now() - t) / 1000).toFixed(1)} s (${(all.bytes / 1e9).toFixed(1)} GB on the GPU)`,
);
const want = rankRows(await all.score(queries, { variant: stats.variant }), 10);
const same =
  JSON.stringify(want) === JSON.stringify(hits.map((r) => r.map(({ index, score }) => ({ index, score }))));
console.log(`GPU streamed top-10 == in-memory GPU top-10 for all ${nq} queries: ${same}`);
all.dispose();

const q0 = raggedBatch(queries.data.subarray(0, 32 * DIM) as Float32Array, [0, 32], { dim: DIM });
const tc = performance.now();
const cpu = await corpus.search(q0, { topK: 10, backend: 'cpu' });
const cpuSeconds = (performance.now() - tc) / 1000;
const sameDocs = JSON.stringify(cpu[0].map((h) => h.index)) === JSON.stringify(hits[0].map((h) => h.index));
console.log(
  `CPU stream (1 query): ${cpuSeconds.toFixed(1)} s; same top-10 documents as the GPU: ${sameDocs}`,
);
console.log(`peak RSS of this process: ${rssGiB().toFixed(2)} GiB`);
