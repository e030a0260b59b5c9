// CPU out-of-core search: an on-disk corpus scored from the page cache (mapped, no copy) against the
// same documents held in memory. 20,000 documents of 128 tokens, d = 128, float16 (655 MB), one query
// of 32 tokens, top-10. Medians of 5 interleaved rounds after a warm-up that also fills the page
// cache. Run: node dist/bench/corpus-cpu.js [dir]   (the corpus is built on first use and kept)
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { encodeFloats } from '../src/floats.js';
import { CorpusWriter } from '../src/io/corpus/index.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { topK } from '../src/ops/maxsim.js';
import { tokenMatrix } from '../src/tensor.js';
import { interleavedMedians } from './interleave.js';

const DOCS = 20000;
const LEN = 128;
const DIM = 128;
const dir = process.argv[2] ?? path.join(os.tmpdir(), 'maxsim-bench-cpu.msx');
const rng = new Rng(5);
if (!fs.existsSync(path.join(dir, 'MANIFEST'))) {
  const w = CorpusWriter.create(dir, { dim: DIM, dtype: 'float16' });
  for (let at = 0; at < DOCS; at += 1000) {
    const data = encodeFloats(randomUnitTokens(rng, 1000 * LEN, DIM), 'float16') as Uint16Array;
    w.addEncoded({ data, lengths: new Int32Array(1000).fill(LEN) });
  }
  w.commit();
}
const corpus = openCorpus(dir);
const docs = corpus.readDocuments(Array.from({ length: DOCS }, (_, i) => i));
const q = tokenMatrix(randomUnitTokens(rng, 32, DIM), 32, DIM);
const cases: Record<string, () => Promise<unknown>> = {
  'in memory': () => topK(q, docs, 10, { backend: 'cpu' }),
  'corpus file': () => corpus.search(q, { topK: 10, backend: 'cpu' }),
};
const times = await interleavedMedians(cases, 5);
const flops = 2 * 32 * DOCS * LEN * DIM;
for (const [name, t] of Object.entries(times)) {
  console.log(
    `${name.padEnd(12)} ${t.median.toFixed(1)} ms  ${(flops / t.median / 1e6).toFixed(0)} GFLOP/s  rounds ${t.rounds.map((x) => x.toFixed(0)).join(' ')}`,
  );
}
console.log(
  `corpus file / in memory: ${(times['corpus file'].median / times['in memory'].median).toFixed(2)}x`,
);
const a = await topK(q, docs, 10, { backend: 'cpu' });
const b = await corpus.search(q, { topK: 10, backend: 'cpu' });
console.log(
  `same top-10: ${JSON.stringify(a) === JSON.stringify(b[0].map(({ index, score }) => ({ index, score })))}`,
);
