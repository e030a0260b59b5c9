// The index as a product, end to end on one corpus directory: build a structured synthetic corpus
// (src/plaid/synthetic.ts), `corpus index` it, search through the index (exact scores) and with the
// full scan, then `--drop-tokens` and search again (residual scores): the bytes on disk before and
// after, recall@k of both index searches against the exact scan of the same run, and p50 per query
// (one query at a time). Node: node dist/bench/index-product.js [--docs 10000] [--length 32]
// [--dim 128] [--centroids 2048] [--bits 2] [--queries 20] [--k 10] [--dir /tmp/maxsim-ip-bench]
import * as fs from 'node:fs';
import * as os from 'node:os';
import { CorpusWriter } from '../src/io/corpus/index.js';
import { indexCorpus } from '../src/io/corpus/index-build.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { syntheticCorpus, syntheticQueries } from '../src/plaid/synthetic.js';
import { raggedBatch, type TokenBatch } from '../src/tensor.js';
import { arg, pct } from './plaid-common.js';

const DOCS = Number(arg('docs', '10000'));
const LEN = Number(arg('length', '32'));
const DIM = Number(arg('dim', '128'));
const K = Number(arg('centroids', '2048'));
const BITS = Number(arg('bits', '2')) as 2 | 4;
const NQ = Number(arg('queries', '20'));
const TOP = Number(arg('k', '10'));
const DIR = arg('dir', '/tmp/maxsim-ip-bench');

function dirBytes(dir: string): number {
  return fs.readdirSync(dir).reduce((a, n) => a + fs.statSync(`${dir}/${n}`).size, 0);
}

async function timed(c: ReturnType<typeof openCorpus>, q: TokenBatch[], index: object | false) {
  const ms: number[] = [];
  const hits: string[][] = [];
  let scores = '';
  for (const one of q) {
    const t0 = performance.now();
    const r = await c.searchWithStats(one, { topK: TOP, backend: 'cpu', index });
    ms.push(performance.now() - t0);
    hits.push(r.hits[0].map((h) => h.id));
    scores = r.stats.scores ?? '';
  }
  return { ms, hits, scores };
}

function recall(got: string[][], exact: string[][]): number {
  let found = 0;
  let total = 0;
  got.forEach((row, i) => {
    const want = new Set(exact[i]);
    total += want.size;
    for (const id of row) if (want.has(id)) found++;
  });
  return found / total;
}

fs.rmSync(DIR, { recursive: true, force: true });
const t0 = performance.now();
const c = syntheticCorpus({ docs: DOCS, length: LEN, dim: DIM, topics: 64, seed: 1 });
const w = CorpusWriter.create(DIR, { dim: DIM, dtype: 'float16', ids: true });
w.add(
  raggedBatch(c.data, Array.from(c.offsets), { dim: DIM }),
  Array.from({ length: DOCS }, (_, i) => `d${i}`),
);
w.commit();
const corpusBytes = dirBytes(DIR);
const t1 = performance.now();
const built = await indexCorpus(DIR, { centroids: K, bits: BITS });
const t2 = performance.now();
const indexedBytes = dirBytes(DIR);
const qs = syntheticQueries(c, NQ, 32, DIM, 2);
const queries = Array.from({ length: NQ }, (_, i) =>
  raggedBatch(qs.data.subarray(i * 32 * DIM, (i + 1) * 32 * DIM), [0, 32], { dim: DIM }),
);
let corpus = openCorpus(DIR);
const exact = await timed(corpus, queries, false);
const kept = await timed(corpus, queries, {});
corpus.close();
const t3 = performance.now();
await indexCorpus(DIR, { dropTokens: true });
const t4 = performance.now();
const droppedBytes = dirBytes(DIR);
corpus = openCorpus(DIR);
const dropped = await timed(corpus, queries, {});
corpus.close();
const tokens = DOCS * LEN;
const mib = (b: number) => (b / 2 ** 20).toFixed(1);
console.log(
  `host ${os.cpus().length} cores, load ${os
    .loadavg()
    .map((x) => x.toFixed(1))
    .join(' ')}`,
);
console.log(
  `corpus: ${DOCS} docs x ${LEN} tokens x d=${DIM} fp16, ${mib(corpusBytes)} MiB (${(corpusBytes / tokens).toFixed(1)} B/token), written in ${((t1 - t0) / 1000).toFixed(1)} s`,
);
console.log(
  `index: ${BITS}-bit, K=${K}, built in ${((t2 - t1) / 1000).toFixed(1)} s; files with tokens ${mib(indexedBytes)} MiB; index ${built.info.index!.bytesPerToken.toFixed(1)} B/token`,
);
console.log(
  `drop-tokens: ${((t4 - t3) / 1000).toFixed(1)} s; ${mib(droppedBytes)} MiB (${(droppedBytes / tokens).toFixed(1)} B/token): ${(corpusBytes / droppedBytes).toFixed(2)}x smaller than the fp16 corpus, ${(indexedBytes / droppedBytes).toFixed(2)}x smaller than corpus + index`,
);
console.log('| search | scores | recall@k vs exact scan | p50 ms | p90 ms |');
console.log('| --- | --- | --- | --- | --- |');
for (const [name, r] of [
  ['full scan (index: false)', exact],
  ['index, tokens kept', kept],
  ['index only (--drop-tokens)', dropped],
] as const)
  console.log(
    `| ${name} | ${r.scores} | ${recall(r.hits, exact.hits).toFixed(3)} | ${pct(r.ms, 0.5).toFixed(1)} | ${pct(r.ms, 0.9).toFixed(1)} |`,
  );
