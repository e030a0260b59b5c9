// Cost of the CRC check on CPU corpus search (issue 20 item 8): the same page-cache-resident corpus
// as bench/corpus-cpu.ts (20,000 x 128 tokens, d = 128, fp16, 655 MB), searched with the check off,
// and with every chunk checked (the first search of a process; later ones check nothing), each
// against the same search without the check (a first search also maps its blocks anew). Queries:
// 1 x 32 tokens and 16 x 32 tokens, top-10. Medians of 5 interleaved rounds after a warm-up.
// Run: node dist/bench/corpus-crc.js [dir]   (the corpus is built on first use and kept)
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { crc32 } from 'node:zlib';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { encodeFloats } from '../src/floats.js';
import { CorpusWriter, checksum, forgetVerifiedChunks } from '../src/io/corpus/index.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { denseBatch } from '../src/tensor.js';
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
const bytes = corpus.info.tokenBytes;
// page cache: read every byte once
corpus.verify();
const raw = fs.readFileSync(corpus.file.segments[0].file);
const t0 = performance.now();
crc32(raw);
const crcMs = performance.now() - t0;
const t1 = performance.now();
checksum(raw);
const nativeMs = performance.now() - t1;
console.log(
  `corpus ${(bytes / 1e6).toFixed(0)} MB; CRC-32 of the segment alone: zlib ${crcMs.toFixed(1)} ms (${(raw.length / crcMs / 1e6).toFixed(2)} GB/s), checksum() ${nativeMs.toFixed(1)} ms (${(raw.length / nativeMs / 1e6).toFixed(2)} GB/s)`,
);
for (const nq of [1, 16]) {
  const q = denseBatch(randomUnitTokens(rng, nq * 32, DIM), { count: nq, length: 32, dim: DIM });
  const cases: Record<string, () => Promise<unknown>> = {
    'no check': () => corpus.search(q, { topK: 10, backend: 'cpu', verify: false }),
    // a fresh Corpus maps its blocks anew: compare first searches with first searches
    'first search, no check': () => openCorpus(dir).search(q, { topK: 10, backend: 'cpu', verify: false }),
    'first search (all chunks checked)': async () => {
      forgetVerifiedChunks();
      const r = await openCorpus(dir).searchWithStats(q, { topK: 10, backend: 'cpu' });
      if (r.stats.verifiedBytes !== bytes)
        throw new Error(`checked ${r.stats.verifiedBytes} of ${bytes} bytes`);
    },
    'later search (checked before)': () => corpus.search(q, { topK: 10, backend: 'cpu' }),
  };
  const times = await interleavedMedians(cases, 5);
  const base = times['no check'].median;
  const firstBase = times['first search, no check'].median;
  for (const [name, t] of Object.entries(times))
    console.log(
      `${nq} x 32 queries  ${name.padEnd(34)} ${t.median.toFixed(1)} ms  ${((t.median / (name.startsWith('first') ? firstBase : base) - 1) * 100).toFixed(1)}%  rounds ${t.rounds.map((x) => x.toFixed(0)).join(' ')}`,
    );
}
