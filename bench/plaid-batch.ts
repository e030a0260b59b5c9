// The batched CPU stages of the compressed index (native/cpu/residual_batch.cc): queries/s of
// searchAll (the batch's native stages together: one pass over the centroids, then one query per
// thread) against search called one query at a time, same process, same index, same options, with
// recall@10 against the exact float32 full scan (batched, all queries at once) and every returned
// hit compared between the two. Both with the source tokens (exact re-score, the default) and on
// the same index without them (residual scores: the native stages are then nearly all the work).
// Rounds alternate between the two ways; the best round of each is reported, with the load average.
//
// Run: node dist/bench/plaid-batch.js [--docs 100000] [--length 64] [--dim 128] [--topics 2000]
//        [--queries 64] [--lq 32] [--centroids K] [--bits 2] [--rounds 3] [--grid def,8x1024x256]
import os from 'node:os';
import { maxsim } from '../src/ops/maxsim.js';
import { buildIndex, defaultSearch, type IndexSearchResult, PlaidIndex } from '../src/plaid/plaid.js';
import { syntheticCorpus, syntheticQueries } from '../src/plaid/synthetic.js';
import { raggedBatch, tokenMatrix } from '../src/tensor.js';
import { arg, gridCell } from './plaid-common.js';

const DOCS = Number(arg('docs', '100000'));
const LEN = Number(arg('length', '64'));
const DIM = Number(arg('dim', '128'));
const TOPICS = Number(arg('topics', '2000'));
const NQ = Number(arg('queries', '64'));
const LQ = Number(arg('lq', '32'));
const BITS = Number(arg('bits', '2')) as 2 | 4;
const K = arg('centroids', '');
const ROUNDS = Number(arg('rounds', '3'));
const GRID = arg('grid', 'def,8x1024x256');

const load = () => `load ${os.loadavg()[0].toFixed(1)}`;
const t = performance.now();
const c = syntheticCorpus({ docs: DOCS, length: LEN, dim: DIM, topics: TOPICS, seed: 1 });
const docs = raggedBatch(c.data, c.offsets, { dim: DIM });
const qs = syntheticQueries(c, NQ, LQ, DIM, 2);
const batch = raggedBatch(
  qs.data,
  Array.from({ length: NQ + 1 }, (_, i) => i * LQ),
  { dim: DIM },
);
const queries = Array.from({ length: NQ }, (_, i) =>
  tokenMatrix(qs.data.subarray(i * LQ * DIM, (i + 1) * LQ * DIM), LQ, DIM),
);
console.log(
  `corpus: ${DOCS} docs x ${LEN} tokens x d = ${DIM}, ${NQ} queries x ${LQ} tokens, generated in ${((performance.now() - t) / 1000).toFixed(1)} s`,
);

const te = performance.now();
const full = await maxsim(batch, docs, { backend: 'cpu' });
const top10 = Array.from({ length: NQ }, (_, q) => {
  const row = full.data.subarray(q * DOCS, (q + 1) * DOCS);
  return new Set(
    Array.from(row.keys())
      .sort((a, b) => row[b] - row[a] || a - b)
      .slice(0, 10),
  );
});
console.log(
  `exact float32 scan of the ${NQ} queries: ${((performance.now() - te) / 1000).toFixed(1)} s [${load()}]`,
);

const tb = performance.now();
const index = await buildIndex(docs, { bits: BITS, centroids: K ? Number(K) : undefined });
const bs = index.buildStats;
console.log(
  `build: ${((performance.now() - tb) / 1000).toFixed(1)} s; K = ${bs.centroids}, ${BITS}-bit, assignment ${bs.assignment} [${load()}]`,
);
const residual = PlaidIndex.fromParts(index.parts());

const recall = (rs: IndexSearchResult[]) =>
  rs.reduce((n, r, q) => n + r.hits.filter((h) => top10[q].has(h.index)).length, 0) / (10 * NQ);

async function oneByOne(
  ix: PlaidIndex,
  o: Parameters<PlaidIndex['search']>[1],
): Promise<IndexSearchResult[]> {
  const out: IndexSearchResult[] = [];
  for (const q of queries) out.push(await ix.search(q, o));
  return out;
}

console.log(
  'index | k nprobe candidates rescore interaction | one-by-one q/s | searchAll q/s | speedup | recall@10 one / all | hits equal | CPU ms/query one / all | load',
);
for (const [name, ix] of [
  ['tokens', index],
  ['no tokens', residual],
] as const) {
  for (const g of GRID.split(',')) {
    const { nprobe, candidates, rescore, prune, interaction } = gridCell(g, defaultSearch(10, DOCS));
    const o = { k: 10, nprobe, candidates, rescore, prune, interaction };
    await ix.searchAll(batch, o); // warm-up (lists' per-thread buffers, page faults)
    await oneByOne(ix, o);
    const best = { one: Number.POSITIVE_INFINITY, all: Number.POSITIVE_INFINITY, cpuOne: 0, cpuAll: 0 };
    let one: IndexSearchResult[] = [];
    let all: IndexSearchResult[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      for (const way of ['one', 'all'] as const) {
        const cpu0 = process.cpuUsage();
        const t0 = performance.now();
        const res = way === 'one' ? await oneByOne(ix, o) : await ix.searchAll(batch, o);
        const ms = performance.now() - t0;
        const cpu = process.cpuUsage(cpu0);
        if (ms < best[way]) {
          best[way] = ms;
          best[way === 'one' ? 'cpuOne' : 'cpuAll'] = (cpu.user + cpu.system) / 1000 / NQ;
        }
        if (way === 'one') one = res;
        else all = res;
      }
    }
    const equal = one.every((r, q) => JSON.stringify(r.hits) === JSON.stringify(all[q].hits));
    console.log(
      `${name} | 10 ${nprobe} ${candidates} ${rescore} ${interaction} | ${((1000 * NQ) / best.one).toFixed(1)} | ${((1000 * NQ) / best.all).toFixed(1)} | ${(best.one / best.all).toFixed(2)}x | ${recall(one).toFixed(3)} / ${recall(all).toFixed(3)} | ${equal ? 'yes' : 'NO'} | ${best.cpuOne.toFixed(1)} / ${best.cpuAll.toFixed(1)} | ${load()}`,
    );
  }
}
