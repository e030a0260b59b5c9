// One saved index searched in a loop, for side-by-side builds: the corpus and index of
// bench/plaid-scale.ts (its --dir / --index-dir, built there first), its queries, one untimed pass,
// then --reps passes of one query at a time with the default settings (or --grid's one cell); prints
// the p50 and each stage's median. Run it from each checkout in turn, alternating, to compare builds.
//
// Run: node dist/bench/plaid-loop.js --dir /tmp/maxsim-1m --index-dir /tmp/maxsim-1m/index-even
//        [--docs 1000000] [--queries 20] [--reps 5] [--k 10] [--cell def|NPROBExCANDIDATESxRESCORE[xpPRUNE]]
import { fromPartsChecked } from '../src/plaid/parts.js';
import { defaultSearch, type IndexSearchStats, PlaidIndex } from '../src/plaid/plaid.js';
import { streamedQueries, streamedSynthetic } from '../src/plaid/synthetic.js';
import { tokenMatrix } from '../src/tensor.js';
import { arg, gridCell, pct } from './plaid-common.js';
import { loadIndexParts, mapShards } from './plaid-shards.js';

const DOCS = Number(arg('docs', '1000000'));
const LEN = Number(arg('length', '64'));
const DIM = Number(arg('dim', '128'));
const NQ = Number(arg('queries', '20'));
const LQ = Number(arg('lq', '32'));
const REPS = Number(arg('reps', '5'));
const K = Number(arg('k', '10'));
const INDEX_DIR = arg('index-dir', '');
if (!INDEX_DIR) throw new Error('--index-dir: a directory bench/plaid-scale.js saved an index in');
const spec = {
  dir: arg('dir', '/tmp/maxsim-plaid-scale'),
  docs: DOCS,
  perShard: 125000,
  length: LEN,
  dim: DIM,
  seed: 1,
};

// the corpus and queries of plaid-scale.ts (same generator and seeds)
const gen = streamedSynthetic({ docs: DOCS, length: LEN, dim: DIM, topics: 2000, seed: 1 });
const parts = mapShards(spec);
const saved = loadIndexParts(INDEX_DIR);
if (!saved)
  throw new Error(
    `--index-dir ${INDEX_DIR}: no saved index (build it with bench/plaid-scale.js --build-only)`,
  );
const { native, buckets, stats, groups } = fromPartsChecked(saved, INDEX_DIR);
const index = new PlaidIndex(native, buckets, parts, stats, groups);
const qs = streamedQueries(gen, NQ, LQ, 2);
const queries = Array.from({ length: NQ }, (_, i) =>
  tokenMatrix(qs.data.subarray(i * LQ * DIM, (i + 1) * LQ * DIM), LQ, DIM),
);
const cell = gridCell(arg('cell', 'def'), defaultSearch(K, DOCS));
const opts = { k: K, ...cell };

for (const q of queries) await index.search(q, opts);
const walls: number[] = [];
const runs: IndexSearchStats[] = [];
for (let r = 0; r < REPS; r++)
  for (const q of queries) {
    const t = performance.now();
    const res = await index.search(q, opts);
    walls.push(performance.now() - t);
    runs.push(res.stats);
  }
const med = (f: (s: IndexSearchStats) => number) => pct(runs.map(f), 0.5).toFixed(2);
console.log(
  `${arg('cell', 'def')} k=${K}: p50 ${pct(walls, 0.5).toFixed(2)} ms over ${walls.length} searches; stage medians ms: centroids ${med((s) => s.ms.centroids)} candidates ${med((s) => s.ms.candidates)} residual ${med((s) => s.ms.residual)} rescore ${med((s) => s.ms.rescore)}`,
);
