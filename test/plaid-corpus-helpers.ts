// Shared fixtures of the corpus index tests: a structured pool of documents, corpora built from
// slices of it, and the comparison of a search through the index with the full scan.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after } from 'node:test';
import { fileURLToPath } from 'node:url';
import { CorpusWriter } from '../src/io/corpus/index.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { syntheticCorpus, syntheticQueries } from '../src/plaid/synthetic.js';
import { raggedBatch, type TokenBatch } from '../src/tensor.js';
import { runSeed } from './helpers.js';

export const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-plaid-corpus-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));
let serial = 0;
export const fresh = () => path.join(tmp, `c${serial++}.msx`);
const CLI = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
export const cli = (...args: string[]) =>
  spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 60_000 });
export const D = 16;
export const seed = runSeed % 100000;

// one structured pool (topics drawn from the seed): segments and appends take disjoint slices of it
const pool = syntheticCorpus({ docs: 1200, length: [2, 14], dim: D, topics: 10, seed });

/** Documents [from, from + n) of the pool; `shift`: moved far from its topics. */
export function docsOf(n: number, from: number, shift = 0): TokenBatch {
  const a = pool.offsets[from];
  const data = pool.data.slice(a * D, pool.offsets[from + n] * D);
  if (shift) for (let i = 0; i < data.length; i++) data[i] = data[i] * 4 + shift;
  return raggedBatch(
    data,
    Array.from(pool.offsets.subarray(from, from + n + 1), (x) => x - a),
    { dim: D },
  );
}

export function queriesOf(n: number, s: number): TokenBatch {
  const q = syntheticQueries(pool, n, 5, D, s);
  return raggedBatch(
    q.data,
    Array.from({ length: n + 1 }, (_, i) => i * 5),
    { dim: D },
  );
}

/** A corpus with ids, in `segments` appends of `per` documents. */
export function build(dir: string, per: number, segments: number, dtype: 'float16' | 'int8' = 'float16') {
  for (let s = 0; s < segments; s++) {
    const w = s === 0 ? CorpusWriter.create(dir, { dim: D, dtype, ids: true }) : CorpusWriter.append(dir);
    const docs = docsOf(per, s * per);
    w.add(
      docs,
      Array.from({ length: per }, (_, i) => `s${s}d${i}`),
    );
    w.commit();
  }
}

/** Index search vs the full scan: recall@k and every returned score equal to the scan's. */
export async function compare(dir: string, k: number, index: object = {}, queries = 12) {
  const c = openCorpus(dir);
  try {
    const q = queriesOf(queries, seed + 99);
    const a = await c.searchWithStats(q, { topK: k, index });
    const e = await c.searchWithStats(q, { topK: k, index: false });
    let found = 0;
    let total = 0;
    a.hits.forEach((row, i) => {
      const exact = new Map(e.hits[i].map((h) => [h.index, h.score]));
      total += e.hits[i].length;
      for (const h of row) {
        if (exact.has(h.index)) {
          found++;
          assert.equal(h.score, exact.get(h.index), 'a returned score is the exact one');
        }
        assert.ok(!c.file.isDeleted(h.index), 'no deleted document');
      }
      // ranked best first
      for (let j = 1; j < row.length; j++) assert.ok(row[j - 1].score >= row[j].score);
    });
    return { recall: total > 0 ? found / total : 1, stats: a.stats, hits: a.hits, exact: e.hits };
  } finally {
    c.close();
  }
}
