// A corpus (.msx) searched through its index on the GPU, as the library's corpus.search and the
// server's passes do: the index stages in float16 and in float32 (index.precision), each against the
// corpus's exhaustive GPU scan in the same run (recall@10 of the ids; the returned scores are exact
// either way, since the corpus keeps its tokens and re-scores the final list).
// Run: node dist/bench/corpus-index-gpu.js [--docs 100000] [--length 64] [--centroids K]
//        [--queries 1000] [--single 50] [--dir DIR] (DIR is kept and reused when it has an index)
import * as fs from 'node:fs';
import { encodeFloats } from '../src/floats.js';
import { CorpusWriter } from '../src/io/corpus/index.js';
import { indexCorpus } from '../src/io/corpus/index-build.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { streamedDocuments, streamedQueries, streamedSynthetic } from '../src/plaid/synthetic.js';
import { denseBatch } from '../src/tensor.js';
import { arg, pct } from './plaid-common.js';

const DOCS = Number(arg('docs', '100000'));
const LEN = Number(arg('length', '64'));
const DIM = 128;
const K = arg('centroids', '') === '' ? undefined : Number(arg('centroids', ''));
const NQ = Number(arg('queries', '1000'));
const SINGLE = Number(arg('single', '50'));
// cpu: a smoke run of the same steps (float32 stages only; float16 is the GPU stages' arithmetic)
const BACKEND = arg('backend', 'cuda') as 'cuda' | 'cpu';
const LQ = 32;
const dir = arg('dir', `/tmp/corpus-index-gpu-${DOCS}x${LEN}.msx`);
const o = { docs: DOCS, length: LEN, dim: DIM, topics: 4096, seed: 1 };
const gen = streamedSynthetic(o);

if (!fs.existsSync(`${dir}/MANIFEST`)) {
  const t = performance.now();
  const w = CorpusWriter.create(dir, { dim: DIM, dtype: 'float16' });
  for (let b = 0; b < DOCS; b += 8192) {
    const { data, lengths } = streamedDocuments(gen, b, Math.min(DOCS, b + 8192));
    w.addEncoded({ data: encodeFloats(data, 'float16') as Uint16Array, lengths });
  }
  await w.commit();
  console.log(
    `corpus: ${DOCS} x ${LEN} x d ${DIM} float16 written in ${((performance.now() - t) / 1000).toFixed(1)} s`,
  );
}
{
  const probe = openCorpus(dir, { follow: false });
  const indexed = probe.info.index !== undefined;
  probe.close();
  if (!indexed) {
    const t = performance.now();
    await indexCorpus(dir, { centroids: K, backend: BACKEND });
    console.log(
      `index: K ${K ?? 'default'}, 2-bit, built (${BACKEND}) in ${((performance.now() - t) / 1000).toFixed(1)} s`,
    );
  }
}

const c = openCorpus(dir, { follow: false });
const qs = streamedQueries(gen, NQ, LQ, 2);
const batch = denseBatch(qs.data, { count: NQ, length: LQ, dim: DIM });
const one = (i: number) =>
  denseBatch(qs.data.subarray(i * LQ * DIM, (i + 1) * LQ * DIM), { count: 1, length: LQ, dim: DIM });
await c.search(one(0), { topK: 10, backend: BACKEND, index: false }); // upload, warm
let t = performance.now();
const exact = await c.search(batch, { topK: 10, backend: BACKEND, index: false });
const scanMs = performance.now() - t;
console.log(
  `exhaustive scan (${BACKEND}, ${NQ} queries in one call): ${(NQ / (scanMs / 1000)).toFixed(0)} q/s`,
);

for (const precision of BACKEND === 'cuda' ? (['float16', 'float32'] as const) : (['float32'] as const)) {
  const index = { precision };
  await c.searchWithStats(one(0), { topK: 10, backend: BACKEND, index }); // index upload, warm
  t = performance.now();
  const r = await c.searchWithStats(batch, { topK: 10, backend: BACKEND, index });
  const ms = performance.now() - t;
  let hit = 0;
  let scoreErr = 0;
  r.hits.forEach((hs, q) => {
    const want = new Map(exact[q].map((h) => [h.id, h.score]));
    for (const h of hs) {
      const s = want.get(h.id);
      if (s === undefined) continue;
      hit++;
      scoreErr = Math.max(scoreErr, Math.abs(s - h.score));
    }
  });
  const lat: number[] = [];
  for (let i = 0; i < SINGLE; i++) {
    const s = performance.now();
    await c.search(one(i), { topK: 10, backend: BACKEND, index });
    lat.push(performance.now() - s);
  }
  const st = r.stats.index;
  console.log(
    `through the index, precision ${precision} (stats: ${st?.precision}, nprobe ${st?.nprobe}, candidates ${st?.candidates}): ` +
      `recall@10 ${(hit / (10 * NQ)).toFixed(3)}, ${(NQ / (ms / 1000)).toFixed(0)} q/s batched ` +
      `(${(scanMs / ms).toFixed(1)}x the scan), one query p50 ${pct(lat, 0.5).toFixed(2)} ms, ` +
      `max |score - exact| of shared hits ${scoreErr.toExponential(1)}`,
  );
}
c.close();
