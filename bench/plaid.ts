// The compressed index on a structured synthetic corpus (src/plaid/synthetic.ts: Zipf-weighted topic
// centres, per-document facets, Gaussian token noise, unit-norm tokens; queries drawn from a target
// document's facets): build time, bytes per token, reconstruction error, then recall@10 / @100
// against the exact full scan and the latency per query (one query at a time, p50 / p90) over a grid
// of nprobe x candidates, with the exact float32 and int8 full scans timed in the same run.
//
// Run: node dist/bench/plaid.js [--docs 100000] [--length 64] [--dim 128] [--topics 2000]
//        [--queries 20] [--lq 32] [--centroids K] [--bits 2,4] [--sample N]
//        [--grid def,NPROBExCANDIDATES[xRESCORE[xbags]],...] [--threshold T] (xbags: PLAID's bag interaction)
//        [--isa avx2,avx2int8] (residual kernel sets, alternated query by query in each cell; default: auto)
import os from 'node:os';
import { maxsim } from '../src/ops/maxsim.js';
import { quantize } from '../src/ops/quantize.js';
import type { ResidualIsa } from '../src/plaid/native.js';
import { buildIndex, defaultSearch } from '../src/plaid/plaid.js';
import { syntheticCorpus, syntheticQueries } from '../src/plaid/synthetic.js';
import { raggedBatch, type TokenMatrix, tokenMatrix } from '../src/tensor.js';
import { arg, gridCell, pct } from './plaid-common.js';

const DOCS = Number(arg('docs', '100000'));
const LEN = Number(arg('length', '64'));
const DIM = Number(arg('dim', '128'));
const TOPICS = Number(arg('topics', '2000'));
const NQ = Number(arg('queries', '20'));
const LQ = Number(arg('lq', '32'));
const BITS = arg('bits', '2').split(',').map(Number) as (2 | 4)[];
const K = arg('centroids', '');
const SAMPLE = arg('sample', '');
const GRID = arg('grid', 'def,4x512x64,4x512x256,8x1024x64,8x1024x256,8x2048x256,16x2048x512,8x4096x256');
const THRESHOLD = Number(arg('threshold', '-Infinity'));
const ISAS = arg('isa', '') ? (arg('isa', '').split(',') as ResidualIsa[]) : [undefined];

function topIds(scores: Float32Array, k: number): number[] {
  return Array.from(scores.keys())
    .sort((a, b) => scores[b] - scores[a] || a - b)
    .slice(0, k);
}

const t = performance.now();
const c = syntheticCorpus({ docs: DOCS, length: LEN, dim: DIM, topics: TOPICS, seed: 1 });
const docs = raggedBatch(c.data, c.offsets, { dim: DIM });
console.log(
  `corpus: ${DOCS} docs x ${LEN} tokens x d = ${DIM}, ${TOPICS} topics, generated in ${((performance.now() - t) / 1000).toFixed(1)} s`,
);
const qs = syntheticQueries(c, NQ, LQ, DIM, 2);
const queries: TokenMatrix[] = [];
for (let i = 0; i < NQ; i++)
  queries.push(tokenMatrix(qs.data.subarray(i * LQ * DIM, (i + 1) * LQ * DIM), LQ, DIM));

// exact references and the full scans (float32 and int8), one query at a time
const exact: number[][] = [];
const fullMs: number[] = [];
for (const q of queries) {
  const t0 = performance.now();
  const s = await maxsim(q, docs, { backend: 'cpu' });
  fullMs.push(performance.now() - t0);
  exact.push(topIds(s, 100));
}
const docs8 = quantize(docs, 'int8');
const int8Ms: number[] = [];
for (const q of queries.slice(0, Math.min(5, NQ))) {
  const q8 = quantize(q, 'int8');
  const t0 = performance.now();
  await maxsim(q8, docs8, { backend: 'cpu' });
  int8Ms.push(performance.now() - t0);
}
console.log(
  `full scan: float32 p50 ${pct(fullMs, 0.5).toFixed(0)} ms, int8 p50 ${pct(int8Ms, 0.5).toFixed(0)} ms per query (${LQ} query tokens)`,
);

for (const BITS_NOW of BITS) {
  const tb = performance.now();
  const index = await buildIndex(docs, {
    bits: BITS_NOW,
    centroids: K ? Number(K) : undefined,
    sample: SAMPLE ? Number(SAMPLE) : undefined,
  });
  const bs = index.buildStats;
  console.log(
    `build: ${((performance.now() - tb) / 1000).toFixed(1)} s (k-means + buckets ${(bs.msKmeans / 1000).toFixed(1)} s, encode ${(bs.msEncode / 1000).toFixed(1)} s, lists ${(bs.msLists / 1000).toFixed(1)} s); K = ${bs.centroids}, sample ${bs.sample}, ${BITS_NOW}-bit: ${bs.bytesPerToken.toFixed(2)} bytes/token (fp16: ${2 * DIM}); relative squared error ${(bs.meanSquaredError / bs.meanSquaredNorm).toFixed(4)}`,
  );

  console.log(
    'isa k nprobe candidates rescore | recall@k | p50 ms p90 ms | CPU ms/query | x int8 | generated scored | ms: centroids candidates select residual rescore | residual ms/1024 docs | load',
  );
  for (const g of GRID.split(',')) {
    for (const k of [10, 100]) {
      const def = defaultSearch(k, DOCS);
      const { nprobe, candidates, rescore, prune, interaction } = gridCell(g, def);
      // per set: latencies, hits, stage times, CPU; the sets take turns query by query (shared machine)
      const per = ISAS.map(() => ({
        lat: [] as number[],
        found: 0,
        stage: [0, 0, 0, 0, 0],
        gen: 0,
        scored: 0,
        cpu: 0,
      }));
      const opts = (isa: ResidualIsa | undefined) => ({
        k,
        nprobe,
        candidates,
        rescore: Math.max(k, rescore),
        threshold: THRESHOLD,
        prune,
        interaction,
        isa,
      });
      for (const isa of ISAS) await index.search(queries[0], opts(isa)); // warm-up
      for (let i = 0; i < NQ; i++) {
        for (let s = 0; s < ISAS.length; s++) {
          const o = per[s];
          const cpu0 = process.cpuUsage();
          const t0 = performance.now();
          const r = await index.search(queries[i], opts(ISAS[s]));
          o.lat.push(performance.now() - t0);
          const cu = process.cpuUsage(cpu0);
          o.cpu += (cu.user + cu.system) / 1000 / NQ;
          const truth = new Set(exact[i].slice(0, k));
          for (const h of r.hits) if (truth.has(h.index)) o.found++;
          const m = r.stats.ms;
          [m.centroids, m.candidates, m.interaction, m.residual, m.rescore].forEach((v, j) => {
            o.stage[j] += v / NQ;
          });
          o.gen += r.stats.generated / NQ;
          o.scored += r.stats.scored / NQ;
        }
      }
      for (let s = 0; s < ISAS.length; s++) {
        const { lat, found, stage, gen, scored, cpu } = per[s];
        const p50 = pct(lat, 0.5);
        console.log(
          `${ISAS[s] ?? 'auto'} k=${k} ${g === 'def' ? 'default ' : ''}${nprobe} ${candidates} ${Math.max(k, rescore)}${interaction === 'lists' ? '' : ` ${interaction}`}${prune < Infinity ? ` p${prune}` : ''} | ${(found / (k * NQ)).toFixed(3)} | ${p50.toFixed(1)} ${pct(lat, 0.9).toFixed(1)} | ${cpu.toFixed(1)} | ${(pct(int8Ms, 0.5) / p50).toFixed(0)}x | ${gen.toFixed(0)} ${scored.toFixed(0)} | ${stage.map((v) => v.toFixed(2)).join(' ')} | ${((stage[3] / scored) * 1024).toFixed(2)} | ${os.loadavg()[0].toFixed(1)}`,
        );
      }
    }
  }
}
