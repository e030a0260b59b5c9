// Out-of-core corpus search on the GPU (native/cuda/stream_scan.cc): streamed results equal the
// in-memory GPU scores of the same kernel, at every block size; device memory stays within the
// budget; damaged files fail the scan with a clear error. Skipped with the reason where no GPU runs.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import type { FloatDType, Hit, TokenBatch } from '../../src/index.js';
import { CorpusWriter, deleteDocuments } from '../../src/io/corpus/index.js';
import { openCorpus } from '../../src/ops/corpus-search.js';
import { quantize } from '../../src/ops/quantize.js';
import { rankRows } from '../../src/ops/shape.js';
import { randomRagged, rng, runSeed } from '../helpers.js';
import { gpu, skip } from './helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-gpu-corpus-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));
let serial = 0;

function build(parts: TokenBatch[], dtype: FloatDType): string {
  const dir = path.join(tmp, `c${serial++}.msx`);
  parts.forEach((p, i) => {
    const w = i === 0 ? CorpusWriter.create(dir, { dim: p.dim, dtype }) : CorpusWriter.append(dir);
    w.add(p);
    w.commit();
  });
  return dir;
}

function lengthsOf(rand: () => number, n: number, max: number): number[] {
  return Array.from({ length: n }, (_, i) => (i % 11 === 5 ? 0 : 1 + Math.floor(rand() * max)));
}

const pairs = (rows: Hit[][]) => rows.map((r) => r.map((h) => [h.index, h.score]));

describe('CUDA corpus search', { skip }, () => {
  for (const dtype of ['float16', 'bfloat16', 'float32'] as FloatDType[]) {
    test(`streamed top-k equals the in-memory GPU top-k of the same kernel (${dtype})`, async () => {
      const rand = rng(runSeed + 101);
      const dim = 128;
      const parts = [0, 1].map(() => randomRagged(lengthsOf(rand, 150, 200), dim, dtype, rand));
      const dir = build(parts, dtype);
      const corpus = openCorpus(dir);
      const queries = randomRagged([32, 7, 1], dim, 'float32', rand);
      const dev = await gpu();
      const all = corpus.readDocuments(Array.from({ length: corpus.info.documents }, (_, i) => i));
      const mem = await dev.upload(all);
      try {
        const rowBytes = dim * (dtype === 'float32' ? 4 : 2);
        for (const blockBytes of [1, rowBytes * 1000, rowBytes * 7000, 1 << 30]) {
          const { hits, stats } = await corpus.searchWithStats(queries, {
            topK: 9,
            backend: 'cuda',
            blockBytes,
          });
          assert.equal(stats.backend, 'cuda');
          const scores = await mem.score(queries, { variant: stats.variant });
          const want = rankRows(scores, 9);
          assert.deepEqual(
            pairs(hits),
            pairs(want),
            `blockBytes ${blockBytes} (${stats.blocks} blocks, ${stats.variant})`,
          );
        }
      } finally {
        mem.dispose();
      }
    });
  }

  test('int8 corpora: streamed top-k equals the in-memory GPU int8 top-k of the same kernel', async () => {
    const rand = rng(runSeed + 104);
    const dim = 128;
    const dir = path.join(tmp, `c${serial++}.msx`);
    for (let i = 0; i < 2; i++) {
      const w = i === 0 ? CorpusWriter.create(dir, { dim, dtype: 'int8' }) : CorpusWriter.append(dir);
      w.add(randomRagged(lengthsOf(rand, 120, 160), dim, 'float32', rand));
      w.commit();
    }
    const corpus = openCorpus(dir);
    const queries = randomRagged([32, 5, 64], dim, 'float32', rand);
    const dev = await gpu();
    const all = corpus.readDocuments(Array.from({ length: corpus.info.documents }, (_, i) => i));
    const mem = await dev.upload(all);
    try {
      for (const blockBytes of [1, 129 * 900, 1 << 30]) {
        for (const transfer of ['copy', 'register', 'direct', 'pin', 'auto'] as const) {
          const { hits, stats } = await corpus.searchWithStats(queries, {
            topK: 6,
            backend: 'cuda',
            blockBytes,
            transfer,
          });
          const want = rankRows(await mem.score(quantize(queries, 'int8'), { variant: stats.variant }), 6);
          assert.deepEqual(
            pairs(hits),
            pairs(want),
            `blockBytes ${blockBytes} ${transfer} (${stats.variant})`,
          );
        }
      }
      // and the CPU int8 engine finds the same documents (exact integer products; scales in fp32)
      const cpu = await corpus.search(queries, { topK: 6, backend: 'cpu' });
      const gpuHits = await corpus.search(queries, { topK: 6, backend: 'cuda' });
      for (let q = 0; q < 3; q++) {
        for (const [i, h] of gpuHits[q].entries()) {
          assert.ok(
            Math.abs(h.score - cpu[q][i].score) <= 1e-5 * Math.abs(h.score) + 1e-5,
            `query ${q} rank ${i}`,
          );
        }
      }
    } finally {
      mem.dispose();
    }
  });

  test('every transfer mode gives the in-memory hits; stats.transfer says which and why', async () => {
    const rand = rng(runSeed + 105);
    const dim = 128;
    // three segments; one of ~48 MiB, so pinned-ahead blocks straddle its 32 MiB registration chunks
    const parts = [
      randomRagged(lengthsOf(rand, 150, 200), dim, 'float32', rand),
      randomRagged(
        Array.from({ length: 190 }, (_, i) => (i % 17 === 3 ? 0 : 1000 + (i % 50))),
        dim,
        'float32',
        rand,
      ),
      randomRagged(lengthsOf(rand, 90, 300), dim, 'float32', rand),
    ];
    const dir = build(parts, 'float16');
    const corpus = openCorpus(dir);
    const queries = randomRagged([32, 7, 1, 20], dim, 'float32', rand);
    const dev = await gpu();
    const all = corpus.readDocuments(Array.from({ length: corpus.info.documents }, (_, i) => i));
    const mem = await dev.upload(all);
    type Case = { options: Record<string, unknown>; modes: string[]; reason: RegExp };
    const cases: Case[] = [
      { options: { transfer: 'copy' }, modes: ['copy'], reason: /'copy' asked for/ },
      { options: { transfer: 'register' }, modes: ['register'], reason: /'register'/ },
      // a file system that refuses O_DIRECT reads through the page cache and says so
      { options: { transfer: 'direct' }, modes: ['direct', 'copy'], reason: /'direct'/ },
      {
        options: { hostMemoryBudget: 0 },
        modes: ['direct', 'copy'],
        reason: /exceed the host-memory budget/,
      },
      { options: { transfer: 'pin' }, modes: ['pinned-ahead'], reason: /'pin' asked for/ },
      { options: {}, modes: ['pinned-ahead'], reason: /fit the host-memory budget/ },
    ];
    try {
      for (const blockBytes of [1, 24 * 1024 * 1024 + 4096 * 3 + 256, 1 << 30]) {
        const check = async (c: Case, what: string) => {
          const { hits, stats } = await corpus.searchWithStats(queries, {
            topK: 13,
            backend: 'cuda',
            blockBytes,
            ...c.options,
          });
          const t = stats.transfer!;
          const label = `${what}, blockBytes ${blockBytes}: ${JSON.stringify(t)}`;
          // the same kernel as in memory (the variant is planned for the largest block)
          const ref = pairs(rankRows(await mem.score(queries, { variant: stats.variant }), 13));
          assert.deepEqual(pairs(hits), ref, label);
          assert.ok(c.modes.includes(t.mode), label);
          assert.match(t.reason, c.reason, label);
          if (t.mode === 'copy' && c.modes.includes('direct')) assert.match(t.reason, /O_DIRECT/, label);
          assert.equal(t.corpusBytes, corpus.info.bytes);
          return stats;
        };
        for (const c of cases) await check(c, JSON.stringify(c.options));
        // pinned ahead: kept for the next search, which registers nothing new
        const again = await check(cases[cases.length - 1], 'auto again');
        assert.equal(again.transfer!.registeredBytes, 0);
        assert.ok(corpus.pinnedBytes > 0 && corpus.pinnedBytes <= corpus.info.bytes);
        assert.equal(again.transfer!.pinnedBytes, corpus.pinnedBytes);
        // auto over a budget the files no longer fit gives the pages back
        await check(cases[3], 'auto, budget 0, after a pin-ahead');
        assert.equal(corpus.pinnedBytes, 0);
        // corpus.pin(): auto uses it, copy does not
        await corpus.pin();
        await check({ options: {}, modes: ['pinned'], reason: /pinned whole/ }, 'after pin()');
        await check(
          { options: { transfer: 'copy' }, modes: ['copy'], reason: /not used/ },
          'copy after pin()',
        );
        corpus.unpin();
        assert.equal(corpus.pinnedBytes, 0);
      }
    } finally {
      mem.dispose();
      corpus.close();
    }
  });

  test('deleted documents never appear: equals the streamed search of a corpus without them; ids subsets', async () => {
    const rand = rng(runSeed + 131);
    const dim = 64;
    const docs = randomRagged(lengthsOf(rand, 300, 40), dim, 'float32', rand);
    const dir = path.join(tmp, `c${serial++}.msx`);
    const w = CorpusWriter.create(dir, { dim, dtype: 'float16', ids: true });
    w.add(
      docs,
      Array.from({ length: 300 }, (_, i) => `d${i}`),
    );
    w.commit();
    const queries = randomRagged([16, 3], dim, 'float32', rand);
    const full = openCorpus(dir);
    // delete the 20 best of the first query: the deletions matter
    const top = await full.search(queries, { topK: 20, backend: 'cuda' });
    const gone = top[0].map((h) => h.id);
    deleteDocuments(dir, gone);
    const live = Array.from({ length: 300 }, (_, i) => `d${i}`).filter((x) => !gone.includes(x));
    const refDir = path.join(tmp, `c${serial++}.msx`);
    const r = CorpusWriter.create(refDir, { dim, dtype: 'float16', ids: true });
    const kept = openCorpus(dir).get(live);
    r.addEncoded({ data: kept.data, lengths: kept.lengths }, live);
    r.commit();
    const corpus = openCorpus(dir);
    const ref = openCorpus(refDir);
    const idsScores = (rows: { id: string; score: number }[][]) =>
      rows.map((row) => row.map((h) => [h.id, h.score]));
    for (const topK of [1, 10, 100])
      for (const blockBytes of [dim * 2 * 500, 1 << 30])
        assert.deepEqual(
          idsScores(await corpus.search(queries, { topK, backend: 'cuda', blockBytes })),
          idsScores(await ref.search(queries, { topK, backend: 'cuda', blockBytes })),
          `topK ${topK} blockBytes ${blockBytes}`,
        );
    // restricted to ids: the same set as the CPU path (scores within the GPU kernel's rounding)
    const subset = live.filter((_, i) => i % 3 === 0);
    const onGpu = await corpus.search(queries, { topK: 15, backend: 'cuda', ids: subset });
    const onCpu = await corpus.search(queries, { topK: 15, backend: 'cpu', ids: subset });
    onGpu.forEach((row, q) => {
      for (const h of row) assert.ok(subset.includes(h.id), `${h.id} is outside the subset`);
      // the j-th best of scores perturbed by at most eps is within eps of the j-th best
      for (let j = 0; j < row.length; j++)
        assert.ok(Math.abs(row[j].score - onCpu[q][j].score) <= 1e-3 * (1 + Math.abs(row[j].score)));
    });
  });

  test('device memory stays within a small budget over a larger corpus; progress is reported', async () => {
    const rand = rng(runSeed + 102);
    const dim = 128;
    // 4 segments x 200 documents x 512 tokens x 256 B = 100 MiB of tokens; budget 48 MiB.
    const parts = [0, 1, 2, 3].map(() => randomRagged(Array(200).fill(512), dim, 'float16', rand));
    const dir = build(parts, 'float16');
    const corpus = openCorpus(dir);
    const queries = randomRagged([32, 32], dim, 'float32', rand);
    const seen: number[] = [];
    const budget = 48 * 1024 * 1024;
    const { hits, stats } = await corpus.searchWithStats(queries, {
      topK: 5,
      backend: 'cuda',
      gpuMemory: budget,
      onProgress: (p) => seen.push(p.documents),
    });
    assert.ok(stats.blocks >= 8, `blocks ${stats.blocks}`);
    assert.ok(stats.devicePeakBytes! <= budget, `peak ${stats.devicePeakBytes} > budget ${budget}`);
    assert.equal(seen[seen.length - 1], 800);
    const cpu = await corpus.search(queries, { topK: 5, backend: 'cpu' });
    // CPU and GPU sum in different orders: the same documents, scores within fp32 rounding, rank by
    // rank; two documents whose scores are that close may trade places (seen: ranks 4 and 5)
    for (let q = 0; q < 2; q++) {
      const byIndex = (a: number, b: number) => a - b;
      assert.deepEqual(hits[q].map((h) => h.index).sort(byIndex), cpu[q].map((h) => h.index).sort(byIndex));
      for (const [i, h] of hits[q].entries()) {
        assert.ok(Math.abs(h.score - cpu[q][i].score) < 1e-3 * Math.abs(h.score) + 1e-3);
      }
    }
    await assert.rejects(
      corpus.search(queries, { backend: 'cuda', gpuMemory: 2 * 1024 * 1024 }),
      /gpuMemory/,
    );
  });

  test('a segment truncated after open fails the scan with its name; the backend stays usable', async () => {
    const rand = rng(runSeed + 103);
    const dir = build([randomRagged(Array(64).fill(300), 64, 'float16', rand)], 'float16');
    const corpus = openCorpus(dir);
    fs.truncateSync(path.join(dir, 'seg-000001.msxs'), 4096 + 64 * 300 * 128 * 0.5);
    const q = randomRagged([8], 64, 'float32', rand);
    await assert.rejects(
      corpus.search(q, { backend: 'cuda', blockBytes: 64 * 1024 }),
      /seg-000001\.msxs is truncated/,
    );
    const ok = openCorpus(build([randomRagged([5, 6], 64, 'float16', rand)], 'float16'));
    assert.equal((await ok.search(q, { backend: 'cuda', topK: 2 }))[0].length, 2);
  });
});
