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
//        [--grid def,NPROBExCANDIDATESxRESCORE,...] [--gen-only] [--index-dir DIR [--build-only]]
// --index-dir: the built index is saved there (header + raw arrays) and, when present, memory-mapped
// instead of built (the build line then repeats the saved build's figures); the exact reference's
// top-100 ids are cached beside it (ref-*.json), so a later run re-measures only the scans and search.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { maxsim } from '../src/ops/maxsim.js';
import { quantize } from '../src/ops/quantize.js';
import { fromPartsChecked } from '../src/plaid/parts.js';
import { buildIndex, defaultSearch, PlaidIndex } from '../src/plaid/plaid.js';
import { streamedQueries, streamedSynthetic } from '../src/plaid/synthetic.js';
import { denseBatch, type TokenMatrix, tokenMatrix } from '../src/tensor.js';
import { arg, gridCell, pct } from './plaid-common.js';
import { loadIndexParts, mapShards, type ShardSpec, saveIndexParts, writeShards } from './plaid-shards.js';

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
const INDEX_DIR = arg('index-dir', '');
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

let t0 = performance.now();
const cpu0 = process.cpuUsage();
let lastLog = 0;
const saved = INDEX_DIR ? loadIndexParts(INDEX_DIR) : undefined;
let index: PlaidIndex;
if (saved) {
  const { native, buckets, stats, groups } = fromPartsChecked(saved, INDEX_DIR);
  index = new PlaidIndex(native, buckets, parts, stats, groups);
  log(
    `index mapped from ${INDEX_DIR} in ${((performance.now() - t0) / 1000).toFixed(1)} s (built by an earlier run: its figures follow)`,
  );
} else {
  index = await buildIndex(parts, {
    bits: 2,
    centroids: K ? Number(K) : undefined,
    sample: SAMPLE ? Number(SAMPLE) : undefined,
    probe: PROBE ? Number(PROBE) : undefined,
    groups: GROUPS ? Number(GROUPS) : undefined,
    assignment: ASSIGNMENT || undefined,
    onProgress: (p) => {
      if (p.ms - lastLog < 30000 && p.done !== p.total) return;
      lastLog = p.ms;
      const c = process.cpuUsage(cpu0);
      log(
        `  build ${p.stage} ${p.done}/${p.total} at ${(p.ms / 1000).toFixed(0)} s (CPU ${((c.user + c.system) / 1e6).toFixed(0)} s)`,
      );
    },
  });
  const c = process.cpuUsage(cpu0);
  log(
    `  build CPU time ${((c.user + c.system) / 1e6).toFixed(0)} s (2 cores: the wall time of an otherwise idle machine is about half)`,
  );
  if (INDEX_DIR) saveIndexParts(INDEX_DIR, index.parts());
}
const bs = index.buildStats;
log(
  `build: ${((bs.msKmeans + bs.msEncode + bs.msLists) / 1000).toFixed(0)} s (k-means + buckets ${(bs.msKmeans / 1000).toFixed(0)} s, encode ${(bs.msEncode / 1000).toFixed(0)} s, lists ${(bs.msLists / 1000).toFixed(1)} s); K = ${bs.centroids}, sample ${bs.sample}, assignment ${bs.assignment} (${bs.groups} groups, probe ${bs.probe}); ${bs.bytesPerToken.toFixed(2)} bytes/token; relative squared error ${(bs.meanSquaredError / bs.meanSquaredNorm).toFixed(4)}`,
);
if (process.argv.includes('--build-only')) process.exit(0);

// exact reference: float16 full scan, all queries per shard, each query's best 100 kept
const refFile = INDEX_DIR ? path.join(INDEX_DIR, `ref2-${DOCS}-${NQ}x${LQ}.json`) : '';
const top: { id: number; s: number }[][] = queries.map(() => []);
t0 = performance.now();
let first = 0;
const cached =
  refFile && fs.existsSync(refFile)
    ? (JSON.parse(fs.readFileSync(refFile, 'utf8')) as number[][])
    : undefined;
for (const p of cached ? [] : parts) {
  const s = (await maxsim(qbatch, p, { backend: 'cpu' })).data;
  for (let q = 0; q < NQ; q++) {
    const row = s.subarray(q * p.count, (q + 1) * p.count);
    const cand = top[q];
    // floor: the 100th best score of the kept set after its last sort (every better row is pushed)
    let floor = cand.length >= 100 ? cand[99].s : Number.NEGATIVE_INFINITY;
    for (let b = 0; b < p.count; b++)
      if (row[b] >= floor) {
        cand.push({ id: first + b, s: row[b] });
        if (cand.length > 200) {
          cand.sort((x, y) => y.s - x.s || x.id - y.id);
          cand.length = 100;
          floor = cand[99].s;
        }
      }
    cand.sort((x, y) => y.s - x.s || x.id - y.id);
    if (cand.length > 100) cand.length = 100;
  }
  first += p.count;
}
const exact =
  cached ??
  top.map((c) =>
    c
      .sort((x, y) => y.s - x.s || x.id - y.id)
      .slice(0, 100)
      .map((e) => e.id),
  );
if (cached) log(`exact float16 full scan: top-100 ids from ${refFile} (an earlier run's scan)`);
else {
  log(
    `exact float16 full scan: ${((performance.now() - t0) / NQ / 1000).toFixed(2)} s per query (${NQ} queries batched per shard)`,
  );
  if (refFile) fs.writeFileSync(refFile, JSON.stringify(exact));
}

// int8 full scan, one query at a time, summed over the shards (quantizing a shard is not timed)
const int8Ms = new Array(SCANQ).fill(0);
const q8 = queries.slice(0, SCANQ).map((q) => quantize(q, 'int8'));
for (const p of SCANQ > 0 ? parts : []) {
  const d8 = quantize(p, 'int8');
  for (let q = 0; q < SCANQ; q++) {
    const t = performance.now();
    await maxsim(q8[q], d8, { backend: 'cpu' });
    int8Ms[q] += performance.now() - t;
  }
}
const int8 = pct(int8Ms, 0.5);
if (SCANQ > 0)
  log(`int8 full scan: p50 ${(int8 / 1000).toFixed(2)} s per query (${SCANQ} queries, one at a time)`);
else log('int8 full scan: skipped (--scan-queries 0; the x int8 column is blank)');

// one untimed pass over the queries: the grid measures a warm page cache (index and touched source pages)
for (const q of queries) await index.search(q, { k: 10 });
log('warm-up pass over the queries done (untimed)');
console.log(
  'k nprobe candidates rescore | recall@k | p50 ms p90 ms | CPU ms/query | x int8 | generated scored | ms: centroids candidates select residual rescore | load',
);
for (const g of GRID.split(',')) {
  for (const k of [10, 100]) {
    const def = defaultSearch(k, DOCS);
    const { nprobe, candidates, rescore, prune, interaction } = gridCell(g, def);
    const o = { k, nprobe, candidates, rescore: Math.max(k, rescore), prune, interaction };
    await index.search(queries[0], o);
    const lat: number[] = [];
    const stage = [0, 0, 0, 0, 0];
    let found = 0;
    let generated = 0;
    const cpu0 = process.cpuUsage();
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
    const cu = process.cpuUsage(cpu0);
    const p50 = pct(lat, 0.5);
    console.log(
      `k=${k} ${g === 'def' ? 'default ' : ''}${nprobe} ${candidates} ${o.rescore}${interaction === 'lists' ? '' : ` ${interaction}`}${prune < Infinity ? ` p${prune}` : ''} | ${(found / (k * NQ)).toFixed(3)} | ${p50.toFixed(1)} ${pct(lat, 0.9).toFixed(1)} | ${((cu.user + cu.system) / 1000 / NQ).toFixed(1)} | ${SCANQ > 0 ? `${(int8 / p50).toFixed(0)}x` : '-'} | ${generated.toFixed(0)} ${Math.min(candidates, generated).toFixed(0)} | ${stage.map((v) => v.toFixed(2)).join(' ')} | ${os.loadavg()[0].toFixed(1)}`,
    );
  }
}
log('done');
