// An index opened while another process appends and re-indexes (test/index-writer-child.ts): a
// reader that follows the directory searches in a loop through every publish (appends, encodes,
// rebuilds that remove the old index files) and never gets an error or a torn result: every hit is
// a distinct document whose id names its content (a pool document) and whose score is that
// document's MaxSim, and generations only move forward.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { indexCorpus } from '../src/io/corpus/index-build.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { build, D, docsOf, fresh, queriesOf, seed } from './plaid-corpus-helpers.js';

const CHILD = fileURLToPath(new URL('./index-writer-child.js', import.meta.url));

/** float64 MaxSim of query qi against pool document p (float32 rows of the pool). */
function maxsimOf(q: ReturnType<typeof queriesOf>, qi: number, p: number): number {
  const doc = docsOf(1, p);
  let total = 0;
  for (let i = 0; i < q.lengths[qi]; i++) {
    let best = Number.NEGATIVE_INFINITY;
    for (let j = 0; j < doc.lengths[0]; j++) {
      let s = 0;
      for (let k = 0; k < D; k++) s += q.data[(q.starts[qi] + i) * D + k] * doc.data[j * D + k];
      best = Math.max(best, s);
    }
    total += best;
  }
  return total;
}

test('a reader searching through the index while another process appends and re-indexes', async () => {
  const dir = fresh();
  build(dir, 100, 1);
  await indexCorpus(dir, { centroids: 16 });
  const child = spawn(process.execPath, [CHILD, dir, String(seed), '6'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (b) => {
    stderr += b;
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  let running = true;
  void exited.then(() => {
    running = false;
  });
  const c = openCorpus(dir);
  const q = queriesOf(3, seed + 31);
  const generations: number[] = [];
  let searches = 0;
  while (running || searches === 0) {
    const r = await c.searchWithStats(q, { topK: 10 });
    searches++;
    generations.push(r.stats.generation!);
    assert.equal(r.stats.path, 'index');
    r.hits.forEach((row, qi) => {
      assert.equal(new Set(row.map((h) => h.id)).size, row.length, 'distinct documents');
      for (const h of row) {
        const m = /^(?:s0d|p)(\d+)$/.exec(h.id);
        assert.ok(m, h.id);
        const want = maxsimOf(q, qi, Number(m[1]));
        // stored as float16: the score within its rounding of the pool document's MaxSim
        assert.ok(
          Math.abs(h.score - want) <= 2e-3 * Math.max(1, Math.abs(want)),
          `${h.id}: ${h.score} vs ${want}`,
        );
      }
    });
  }
  assert.equal(await exited, 0, stderr);
  if (process.env.SHOW) console.log(searches, JSON.stringify([...new Set(generations)]));
  for (let i = 1; i < generations.length; i++) assert.ok(generations[i] >= generations[i - 1]);
  // the last publish is seen, and the appended documents are found
  const last = await c.searchWithStats(docsOf(1, 400 + 5 * 20), { topK: 1 });
  assert.equal(last.hits[0][0].id, `p${400 + 5 * 20}`);
  assert.ok(new Set(generations).size >= 2, `searches saw generations ${[...new Set(generations)]}`);
  c.close();
});
