// The hybrid first search of a corpus pinned ahead (native/cuda/stream_scan.cc): while chunks are
// still unregistered, some readers register them and the others copy them into pinned staging.
// Whatever the split, the hits equal the in-memory GPU top-k of the same kernel; the copied chunks
// are registered in the background afterwards, so the corpus ends up page-locked whole and a later
// search registers and copies nothing. Skipped with the reason where no GPU runs.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import type { Hit } from '../../src/index.js';
import { CorpusWriter } from '../../src/io/corpus/index.js';
import { openCorpus } from '../../src/ops/corpus-search.js';
import { rankRows } from '../../src/ops/maxsim.js';
import { randomRagged, rng, runSeed } from '../helpers.js';
import { fullyPinned, gpu, skip } from './helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-gpu-hybrid-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));
const pairs = (rows: Hit[][]) => rows.map((r) => r.map((h) => [h.index, h.score]));

describe('CUDA hybrid pin-ahead', { skip }, () => {
  test('registrars and copiers together: exact hits, then the whole corpus pinned', async () => {
    const rand = rng(runSeed + 901);
    const dim = 128;
    // three segments of ~40 MB of float16 each: several 32 MiB pin chunks per file, blocks spanning them
    const dir = path.join(tmp, 'c.msx');
    for (let s = 0; s < 3; s++) {
      const lengths = Array.from({ length: 1600 }, (_, i) =>
        i % 97 === 3 ? 0 : 1 + Math.floor(rand() * 200),
      );
      const w = s === 0 ? CorpusWriter.create(dir, { dim, dtype: 'float16' }) : CorpusWriter.append(dir);
      w.add(randomRagged(lengths, dim, 'float16', rand));
      w.commit();
    }
    const queries = randomRagged([32, 5, 1], dim, 'float32', rand);
    const dev = await gpu();
    for (const [readers, registrars, blockBytes] of [
      [4, 1, 48 * 1024 * 1024],
      [6, 3, 20 * 1024 * 1024 + 4096 + 256],
      [4, 0, 1 << 30],
      [2, 1, 3 * 1024 * 1024],
    ]) {
      const corpus = openCorpus(dir);
      const all = corpus.readDocuments(Array.from({ length: corpus.info.documents }, (_, i) => i));
      const mem = await dev.upload(all);
      try {
        const label = `readers ${readers}, registrars ${registrars}, blockBytes ${blockBytes}`;
        const first = await corpus.searchWithStats(queries, {
          topK: 11,
          backend: 'cuda',
          transfer: 'pin',
          readers,
          registrars,
          blockBytes,
        });
        const want = pairs(rankRows(await mem.score(queries, { variant: first.stats.variant }), 11));
        const t = first.stats.transfer!;
        assert.deepEqual(pairs(first.hits), want, `${label}: ${JSON.stringify(t)}`);
        assert.equal(t.mode, 'pinned-ahead', label);
        assert.equal(t.registrars, registrars, label);
        if (registrars === 0) assert.equal(t.stagedBytes, 0, label);
        assert.ok(t.stagedBytes <= corpus.info.tokenBytes, label);
        // every chunk ends up registered: by the registrars, or by the background filler
        await fullyPinned(corpus);
        assert.equal(corpus.pinnedBytes, corpus.info.bytes, label);
        const again = await corpus.searchWithStats(queries, {
          topK: 11,
          backend: 'cuda',
          transfer: 'pin',
          readers,
          blockBytes,
        });
        assert.deepEqual(pairs(again.hits), want, `${label}, again`);
        assert.equal(again.stats.transfer!.registeredBytes, 0, `${label}, again`);
        assert.equal(again.stats.transfer!.stagedBytes, 0, `${label}, again`);
        assert.equal(again.stats.transfer!.registrars, 0, `${label}, again`);
      } finally {
        mem.dispose();
        corpus.close();
      }
    }
  });

  test('registrars out of range: a clear error naming the option', async () => {
    const dir = path.join(tmp, 'small.msx');
    const rand = rng(runSeed + 902);
    const w = CorpusWriter.create(dir, { dim: 64, dtype: 'float16' });
    w.add(randomRagged([3, 5, 8], 64, 'float16', rand));
    w.commit();
    const corpus = openCorpus(dir);
    const q = randomRagged([4], 64, 'float32', rand);
    try {
      for (const registrars of [-1, 1.5, 99, Number.NaN])
        await assert.rejects(
          corpus.searchWithStats(q, { topK: 2, backend: 'cuda', readers: 4, registrars }),
          /registrars/,
        );
    } finally {
      corpus.close();
    }
  });
});
