// The compressed index at scale (default 1M documents x 64 tokens x d = 128, 2-bit): the streamed
// synthetic corpus written once as float16 shards and memory-mapped (bench/plaid-shards.ts), the
// exact float16 full scan as the recall reference (all queries batched per shard), the int8 full scan
// timed one query at a time on the first --scan-queries queries (each shard quantized, untimed, then
// scanned), the index build with its progress, then recall@10 / @100 and p50 / p90 latency (one query
// at a time) over a grid of nprobe x candidates x rescore. RSS and the load average beside each figure.
//
// Run: node dist/bench/plaid-scale.js [--docs 1000000] [--length 64] [--dim 128] [--topics 2000]
//        [--shard 125000] [--dir /tmp/maxsim-plaid-scale] [--queries 10] [--lq 32] [--scan-queries 3]
//        [--centroids K] [--sample N] [--probe P] [--groups G] [--assignment grouped|exact]
//        [--grid def,NPROBExCANDIDATESxRESCORE,...] [--gen-only]
import os from 'node:os';
import { maxsim } from '../src/ops/maxsim.js';
import { quantize } from '../src/ops/quantize.js';
import { buildIndex, defaultSearch } from '../src/plaid/plaid.js';
import { streamedQueries, streamedSynthetic } from '../src/plaid/synthetic.js';
import { denseBatch, type TokenMatrix, tokenMatrix } from '../src/tensor.js';
import { arg, pct } from './plaid-common.js';
import { mapShards, type ShardSpec, writeShards } from './plaid-shards.js';

const DOCS = Number(arg('docs', '1000000'));
const LEN = Number(arg('length', '64'));
const DIM = Number(arg('dim', '128'));
const TOPICS = Number(arg('topics', '2000'));
const NQ = Number(arg('queries', '10'));
const LQ = Number(arg('lq', '32'));
const SCANQ = Math.min(NQ, Number(arg('scan-queries', '3')));
const K = arg('centroids', '');
const SAMPLE = arg('sample', '');
const PROBE = arg('probe', '');
const GROUPS = arg('groups', '');
const ASSIGNMENT = arg('assignment', '') as 'grouped' | 'exact' | '';
const GRID = arg('grid', 'def,4x1024x256,8x1024x256,8x2048x256,16x2048x512,8x4096x512');
const spec: ShardSpec = {
  dir: arg('dir', '/tmp/maxsim-plaid-scale'),
  docs: DOCS,
  perShard: Number(arg('shard', '125000')),
  length: LEN,
  dim: DIM,
  seed: 1,
};

const load = () => `load ${os.loadavg()[0].toFixed(1)}`;
const rss = () => `RSS ${(process.memoryUsage().rss / 2 ** 30).toFixed(2)} GiB`;
const log = (m: string) => console.log(`${m} [${load()}, ${rss()}]`);

const gen = streamedSynthetic({ docs: DOCS, length: LEN, dim: DIM, topics: TOPICS, seed: 1 });
const genMs = writeShards(spec, gen, log);
log(
  `corpus: ${DOCS} docs x ${LEN} tokens x d = ${DIM}, ${TOPICS} topics, float16 shards of ${spec.perShard} docs in ${spec.dir} (generated in ${(genMs / 1000).toFixed(0)} s)`,
);
if (process.argv.includes('--gen-only')) process.exit(0);
const parts = mapShards(spec);
const qs = streamedQueries(gen, NQ, LQ, 2);
const queries: TokenMatrix[] = [];
for (let i = 0; i < NQ; i++)
  queries.push(tokenMatrix(qs.data.subarray(i * LQ * DIM, (i + 1) * LQ * DIM), LQ, DIM));
const qbatch = denseBatch(qs.data, { count: NQ, length: LQ, dim: DIM });

// exact reference: float16 full scan, all queries per shard, each query's best 100 kept
const top: { id: number; s: number }[][] = queries.map(() => []);
let t0 = performance.now();
let first = 0;
for (const p of parts) {
  const s = (await maxsim(qbatch, p, { backend: 'cpu' })).data;
  for (let q = 0; q < NQ; q++) {
    const row = s.subarray(q * p.count, (q + 1) * p.count);
    const cand = top[q];
    for (let b = 0; b < p.count; b++)
      if (cand.length < 100 || row[b] > cand[cand.length - 1].s) {
        cand.push({ id: first + b, s: row[b] });
        if (cand.length > 200) {
          cand.sort((x, y) => y.s - x.s || x.id - y.id);
          cand.length = 100;
        }
      }
  }
  first += p.count;
}
const exact = top.map((c) =>
  c
    .sort((x, y) => y.s - x.s || x.id - y.id)
    .slice(0, 100)
    .map((e) => e.id),
);
log(
  `exact float16 full scan: ${((performance.now() - t0) / NQ / 1000).toFixed(2)} s per query (${NQ} queries batched per shard)`,
);

// int8 full scan, one query at a time, summed over the shards (quantizing a shard is not timed)
const int8Ms = new Array(SCANQ).fill(0);
const q8 = queries.slice(0, SCANQ).map((q) => quantize(q, 'int8'));
for (const p of parts) {
  const d8 = quantize(p, 'int8');
  for (let q = 0; q < SCANQ; q++) {
    const t = performance.now();
    await maxsim(q8[q], d8, { backend: 'cpu' });
    int8Ms[q] += performance.now() - t;
  }
}
const int8 = pct(int8Ms, 0.5);
log(`int8 full scan: p50 ${(int8 / 1000).toFixed(2)} s per query (${SCANQ} queries, one at a time)`);

t0 = performance.now();
let lastLog = 0;
const index = await buildIndex(parts, {
  bits: 2,
  centroids: K ? Number(K) : undefined,
  sample: SAMPLE ? Number(SAMPLE) : undefined,
  probe: PROBE ? Number(PROBE) : undefined,
  groups: GROUPS ? Number(GROUPS) : undefined,
  assignment: ASSIGNMENT || undefined,
  onProgress: (p) => {
    if (p.ms - lastLog < 30000 && p.done !== p.total) return;
    lastLog = p.ms;
    log(`  build ${p.stage} ${p.done}/${p.total} at ${(p.ms / 1000).toFixed(0)} s`);
  },
});
const bs = index.buildStats;
log(
  `build: ${((performance.now() - t0) / 1000).toFixed(0)} s (k-means + buckets ${(bs.msKmeans / 1000).toFixed(0)} s, encode ${(bs.msEncode / 1000).toFixed(0)} s, lists ${(bs.msLists / 1000).toFixed(1)} s); K = ${bs.centroids}, sample ${bs.sample}, assignment ${bs.assignment} (${bs.groups} groups, probe ${bs.probe}); ${bs.bytesPerToken.toFixed(2)} bytes/token; relative squared error ${(bs.meanSquaredError / bs.meanSquaredNorm).toFixed(4)}`,
);

console.log(
  'k nprobe candidates rescore | recall@k | p50 ms p90 ms | x int8 | generated scored | ms: centroids lists interaction residual rescore | load',
);
for (const g of GRID.split(',')) {
  for (const k of [10, 100]) {
    const def = defaultSearch(k);
    const [nprobe, candidates, rescore] =
      g === 'def' ? [def.nprobe, def.candidates, def.rescore] : g.split('x').map(Number);
    const o = { k, nprobe, candidates, rescore: Math.max(k, rescore) };
    await index.search(queries[0], o);
    const lat: number[] = [];
    const stage = [0, 0, 0, 0, 0];
    let found = 0;
    let generated = 0;
    for (let i = 0; i < NQ; i++) {
      const t = performance.now();
      const r = await index.search(queries[i], o);
      lat.push(performance.now() - t);
      const truth = new Set(exact[i].slice(0, k));
      for (const h of r.hits) if (truth.has(h.index)) found++;
      const m = r.stats.ms;
      [m.centroids, m.candidates, m.interaction, m.residual, m.rescore].forEach((v, j) => {
        stage[j] += v / NQ;
      });
      generated += r.stats.generated / NQ;
    }
    const p50 = pct(lat, 0.5);
    console.log(
      `k=${k} ${g === 'def' ? 'default ' : ''}${nprobe} ${candidates} ${o.rescore} | ${(found / (k * NQ)).toFixed(3)} | ${p50.toFixed(1)} ${pct(lat, 0.9).toFixed(1)} | ${(int8 / p50).toFixed(0)}x | ${generated.toFixed(0)} ${Math.min(candidates, generated).toFixed(0)} | ${stage.map((v) => v.toFixed(2)).join(' ')} | ${os.loadavg()[0].toFixed(1)}`,
    );
  }
}
log('done');
