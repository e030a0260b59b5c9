// Child process of test/index-follow.test.ts: appends documents of the shared pool (ids p<index>) to
// a corpus and encodes them (corpus append + corpus index), rebuilding the index every third round,
// while the parent searches the corpus in a loop. Args: DIR SEED ROUNDS.
import { CorpusWriter } from '../src/io/corpus/index.js';
import { indexCorpus } from '../src/io/corpus/index-build.js';
import { syntheticCorpus } from '../src/plaid/synthetic.js';
import { raggedBatch } from '../src/tensor.js';

const [dir, seedText, roundsText] = process.argv.slice(2);
const D = 16;
const pool = syntheticCorpus({ docs: 1200, length: [2, 14], dim: D, topics: 10, seed: Number(seedText) });
const PER = 20;
for (let r = 0; r < Number(roundsText); r++) {
  const from = 400 + r * PER;
  const a = pool.offsets[from];
  const w = CorpusWriter.append(dir, { waitMs: 30_000 });
  w.add(
    raggedBatch(
      pool.data.slice(a * D, pool.offsets[from + PER] * D),
      Array.from(pool.offsets.subarray(from, from + PER + 1), (x) => x - a),
      { dim: D },
    ),
    Array.from({ length: PER }, (_, i) => `p${from + i}`),
  );
  w.commit();
  await indexCorpus(
    dir,
    r % 3 === 2 ? { rebuild: true, centroids: 16, seed: r, waitMs: 30_000 } : { waitMs: 30_000 },
  );
}
