// `maxsim serve --backend cuda` on an indexed corpus (src/server/index-path.ts): where the build has
// GPU index stages (corpus-index-search.ts gpuStages) CUDA passes go through the index and equal the
// library's corpus.search on the GPU (ids, exact scores); without them they scan (GPU-resident and
// streamed) and say why in the answer's stats and /v1/info, equal to the library's full scan on the
// GPU (same ids, scores within float16 rounding); exact: true scans either way; a corpus that keeps
// only its index is refused on the GPU naming the backend. Skipped with the reason where no GPU runs.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { InvalidArgumentError } from '../../src/errors.js';
import { indexCorpus } from '../../src/io/corpus/index-build.js';
import { gpuStages } from '../../src/ops/corpus-index-search.js';
import { openCorpus } from '../../src/ops/corpus-search.js';
import type { MaxsimServer } from '../../src/server/app.js';
import { createServer } from '../../src/server/index.js';
import type { TokenBatch } from '../../src/tensor.js';
import { build, fresh, queriesOf, seed } from '../plaid-corpus-helpers.js';
import { call, post } from '../serve-helpers.js';
import { skip } from './helpers.js';

const servers: MaxsimServer[] = [];
after(async () => {
  await Promise.all(servers.map((s) => s.close()));
});

function asJson(q: TokenBatch): number[][][] {
  return Array.from({ length: q.count }, (_, i) =>
    Array.from({ length: q.lengths[i] }, (_, t) => {
      const at = (q.starts[i] + t) * q.dim;
      return Array.from(q.data.subarray(at, at + q.dim) as Float32Array);
    }),
  );
}

describe('serve --backend cuda on an indexed corpus', { skip }, () => {
  test('passes go through the GPU index where it exists, else scan and say why; equal the library', async () => {
    const dir = fresh();
    build(dir, 200, 2);
    await indexCorpus(dir, { centroids: 32 });
    const q = queriesOf(5, seed + 3);
    const c = openCorpus(dir, { follow: false });
    const viaIndex = gpuStages.search !== undefined;
    const scanned = await c.search(q, { topK: 10, backend: 'cuda', index: false });
    const indexed = viaIndex ? await c.search(q, { topK: 10, backend: 'cuda' }) : scanned;
    for (const pin of [false, true]) {
      const server = await createServer({ corpus: dir, backend: 'cuda', port: 0, logger: false, pin });
      servers.push(server);
      const { url } = await server.listen();
      for (const extra of [{}, { exact: true }]) {
        const r = await post(`${url}/v1/search`, { queries: asJson(q), top_k: 10, ...extra });
        assert.equal(r.status, 200, r.text);
        const through = viaIndex && !('exact' in extra);
        assert.equal(r.json.stats.path, through ? 'index' : 'scan');
        if (!through)
          assert.match(
            r.json.stats.reason,
            'exact' in extra ? /exact: true/ : /no index search on the cuda backend/,
          );
        const want = through ? indexed : scanned;
        r.json.results.forEach((row: { id: string; score: number }[], i: number) => {
          assert.deepEqual(
            row.map((h) => h.id),
            want[i].map((h) => h.id),
            `pin ${pin} query ${i}`,
          );
          row.forEach((h, j) => {
            assert.ok(Math.abs(h.score - want[i][j].score) <= 1e-3 * Math.max(1, Math.abs(h.score)));
          });
        });
      }
      const info = await call(`${url}/v1/info`, 'GET');
      assert.equal(info.json.index.search_path, viaIndex ? 'index' : 'scan');
      await server.close();
    }
    c.close();
  });

  test('a corpus that keeps only its index is refused on the GPU, naming the backend', async () => {
    const dir = fresh();
    build(dir, 60, 1);
    await indexCorpus(dir, { centroids: 16, dropTokens: true });
    await assert.rejects(
      createServer({ corpus: dir, backend: 'cuda', port: 0, logger: false }),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'backend',
    );
  });
});
