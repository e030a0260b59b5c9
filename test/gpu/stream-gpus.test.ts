// Out-of-core corpus search on several GPUs (options.devices): each GPU streams a contiguous share of
// the blocks and the running top-Ks merge; the hits must be one GPU's, bitwise, at every block size,
// with the files pinned once for all GPUs or copied. On a one-GPU host the shares run on device 0
// twice (the merge is the same). Skipped with the reason where no GPU runs.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { CorpusWriter } from '../../src/io/corpus/index.js';
import { openCorpus } from '../../src/ops/corpus-search.js';
import type { Hit } from '../../src/tensor.js';
import { randomRagged, rng, runSeed } from '../helpers.js';
import { skip, status } from './helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-gpu-stream-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));
const count = status.devices?.length ?? 0;
const devices = count >= 2 ? Array.from({ length: count }, (_, i) => i) : [0, 0];
const pairs = (rows: Hit[][]) => rows.map((r) => r.map((h) => [h.index, h.score]));

describe(`CUDA corpus search on several GPUs (${devices.join(',')})`, { skip }, () => {
  test('hits equal one GPU bitwise at every block size, copied and pinned', async () => {
    const rand = rng(runSeed + 301);
    const dim = 128;
    const dir = path.join(tmp, 'c.msx');
    const w = CorpusWriter.create(dir, { dim, dtype: 'float16' });
    for (let s = 0; s < 3; s++)
      w.add(
        randomRagged(
          Array.from({ length: 400 }, (_, i) => (i % 13 === 2 ? 0 : 1 + Math.floor(rand() * 150))),
          dim,
          'float32',
          rand,
        ),
      );
    w.commit();
    const corpus = openCorpus(dir);
    const queries = randomRagged([32, 5, 32], dim, 'float32', rand);
    for (const blockBytes of [1, 256 * 1024, 1 << 30]) {
      const one = await corpus.searchWithStats(queries, { topK: 11, backend: 'cuda', blockBytes });
      const many = await corpus.searchWithStats(queries, { topK: 11, backend: 'cuda', blockBytes, devices });
      assert.deepEqual(many.stats.devices, devices);
      assert.equal(many.stats.variant, one.stats.variant);
      assert.deepEqual(pairs(many.hits), pairs(one.hits), `blockBytes ${blockBytes}`);
    }
    await corpus.pin();
    const pinned = await corpus.searchWithStats(queries, {
      topK: 11,
      backend: 'cuda',
      blockBytes: 256 * 1024,
      devices,
    });
    const copied = await corpus.searchWithStats(queries, {
      topK: 11,
      backend: 'cuda',
      blockBytes: 256 * 1024,
      transfer: 'copy', // auto would use the pin
    });
    assert.equal(pinned.stats.transfer!.mode, 'pinned');
    assert.equal(copied.stats.transfer!.mode, 'copy');
    assert.deepEqual(pairs(pinned.hits), pairs(copied.hits), 'pinned on every GPU');
    corpus.unpin();
    // pinned ahead by the scans of every GPU at once (they register the chunks they reach, once)
    for (let round = 0; round < 2; round++) {
      const ahead = await corpus.searchWithStats(queries, {
        topK: 11,
        backend: 'cuda',
        blockBytes: 256 * 1024,
        devices,
        transfer: 'pin',
      });
      assert.equal(ahead.stats.transfer!.mode, 'pinned-ahead');
      if (round === 1) assert.equal(ahead.stats.transfer!.registeredBytes, 0);
      assert.deepEqual(pairs(ahead.hits), pairs(copied.hits), `pinned ahead on every GPU, round ${round}`);
    }
    corpus.unpin();
    await assert.rejects(corpus.search(queries, { backend: 'cuda', devices: [count] }), /devices\[0\]/);
    await assert.rejects(corpus.search(queries, { backend: 'cuda', devices: [] }), /devices/);
    corpus.close();
  });
});
