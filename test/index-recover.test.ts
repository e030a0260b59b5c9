// `corpus recover` of an indexed corpus (src/io/corpus/recovery-index.ts): with the MANIFEST lost,
// the index comes back from the index files that still describe the adopted segments, so searches
// answer as before (ids and scores); a corpus that kept only its index keeps its documents' vectors;
// a damaged index file is reported and left out (its segment is then scanned exactly, or, keeping
// no tokens, left out and reported); stale files of an older codec are not adopted.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, test } from 'node:test';
import * as zlib from 'node:zlib';
import { CorpusWriter, deleteDocuments, recoverCorpus } from '../src/io/corpus/index.js';
import { indexCorpus } from '../src/io/corpus/index-build.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { build, compare, docsOf, fresh, queriesOf, seed } from './plaid-corpus-helpers.js';

const settings = { nprobe: 8, candidates: 60, rescore: 30 };

async function answers(dir: string) {
  const c = openCorpus(dir);
  try {
    const r = await c.searchWithStats(queriesOf(6, seed + 7), { topK: 5, index: settings });
    return { hits: r.hits.map((row) => row.map((h) => [c.file.id(h.index), h.score])), stats: r.stats };
  } finally {
    c.close();
  }
}

function loseManifest(dir: string) {
  fs.rmSync(path.join(dir, 'MANIFEST'));
}

/** Flips the first byte of the first non-empty array of an index file (its description intact). */
function damage(file: string) {
  const b = fs.readFileSync(file);
  const json = JSON.parse(b.subarray(64, 64 + b.readUInt32LE(12)).toString('utf8')) as {
    arrays: { offset: number; length: number }[];
  };
  const a = json.arrays.find((x) => x.length > 0)!;
  b[a.offset] ^= 0xff;
  fs.writeFileSync(file, b);
}

/** Rewrites the `corpus` field of an index file's description (CRCs recomputed, data untouched). */
function rewriteCorpus(file: string, edit: (corpus: Record<string, unknown>) => unknown) {
  const b = fs.readFileSync(file);
  const at = b.readUInt32LE(12);
  const json = JSON.parse(b.subarray(64, 64 + at).toString('utf8'));
  json.corpus = edit(json.corpus);
  const text = Buffer.from(JSON.stringify(json), 'utf8');
  assert.ok(64 + text.length <= b.readUInt32LE(20), 'the description still fits before the data');
  b.fill(0x20, 64, b.readUInt32LE(20));
  text.copy(b, 64);
  b.writeUInt32LE(text.length, 12);
  b.writeUInt32LE(zlib.crc32(text), 16);
  b.writeUInt32LE(zlib.crc32(b.subarray(0, 24)), 24);
  fs.writeFileSync(file, b);
}

describe('corpus recover with an index', () => {
  test('tokens kept: the index comes back, appends and tombstones too; answers are unchanged', async () => {
    const dir = fresh();
    build(dir, 80, 2);
    await indexCorpus(dir, { centroids: 16 });
    const w = CorpusWriter.append(dir);
    w.add(
      docsOf(40, 400),
      Array.from({ length: 40 }, (_, i) => `a${i}`),
    );
    w.commit();
    await indexCorpus(dir);
    deleteDocuments(dir, ['s0d3', 'a7']);
    const before = await answers(dir);
    assert.equal(before.stats.index?.indexedSegments, 3);
    loseManifest(dir);
    const r = recoverCorpus(dir);
    assert.deepEqual(r.skipped, []);
    assert.equal(r.info.index?.indexedSegments, 3);
    assert.equal(r.info.index?.unindexedSegments, 0);
    assert.equal(r.info.index?.tokens, 'kept');
    assert.equal(r.info.deleted, 2);
    const after = await answers(dir);
    assert.deepEqual(after.hits, before.hits);
    assert.equal(after.stats.index?.indexedSegments, 3);
    // the recovered corpus grows like any other
    const w2 = CorpusWriter.append(dir);
    w2.add(
      docsOf(10, 500),
      Array.from({ length: 10 }, (_, i) => `b${i}`),
    );
    w2.commit();
    const grown = await indexCorpus(dir);
    assert.equal(grown.trained, false);
    assert.equal(grown.info.index?.indexedSegments, 4);
  });

  test('a damaged index file never brings deleted documents back', async () => {
    const dir = fresh();
    build(dir, 60, 2);
    await indexCorpus(dir, { centroids: 16 });
    deleteDocuments(dir, ['s0d3', 's1d7']);
    for (const name of fs.readdirSync(dir).filter((n) => n.endsWith('.msxi'))) damage(path.join(dir, name));
    loseManifest(dir);
    const r = recoverCorpus(dir);
    assert.ok(
      r.skipped.length > 0 && r.skipped.every((s) => s.file.endsWith('.msxi')),
      JSON.stringify(r.skipped),
    );
    assert.deepEqual([r.info.documents, r.info.deleted, r.info.live], [120, 2, 118]);
    const c = openCorpus(dir);
    for (const id of ['s0d3', 's1d7']) assert.throws(() => c.get([id]), /unknown or deleted/, id);
    c.close();
  });

  test('tokens dropped: the documents keep their vectors; answers are unchanged', async () => {
    const dir = fresh();
    build(dir, 60, 2);
    await indexCorpus(dir, { centroids: 16, dropTokens: true });
    const before = await answers(dir);
    assert.equal(before.stats.scores, 'residual');
    loseManifest(dir);
    const r = recoverCorpus(dir);
    assert.deepEqual(r.skipped, []);
    assert.equal(r.info.documents, 120);
    assert.equal(r.info.index?.tokens, 'dropped');
    const after = await answers(dir);
    assert.deepEqual(after.hits, before.hits);
    assert.equal(after.stats.scores, 'residual');
  });

  test('a damaged index file is reported and left out: tokens kept, its segment is scanned exactly', async () => {
    const dir = fresh();
    build(dir, 60, 2);
    await indexCorpus(dir, { centroids: 16 });
    const files = fs.readdirSync(dir).filter((n) => /^ix-\d+-0002\.msxi$/.test(n));
    assert.equal(files.length, 1);
    damage(path.join(dir, files[0]));
    loseManifest(dir);
    const r = recoverCorpus(dir);
    assert.equal(r.skipped.length, 1);
    assert.match(r.skipped[0].reason, /corrupted \(checksum mismatch\)/);
    assert.equal(r.info.index?.indexedSegments, 1);
    assert.equal(r.info.index?.unindexedSegments, 1);
    // every returned score is exact MaxSim (compare checks it against the full scan)
    const after = await compare(dir, 5, settings);
    assert.equal(after.stats.index?.scannedDocuments, 60);
  });

  test('tokens dropped and an index file damaged: that segment is left out and reported, never half-adopted', async () => {
    const dir = fresh();
    build(dir, 50, 1);
    await indexCorpus(dir, { centroids: 16, dropTokens: true });
    const [file] = fs.readdirSync(dir).filter((n) => /^ix-\d+-0001\.msxi$/.test(n));
    damage(path.join(dir, file));
    loseManifest(dir);
    const r = recoverCorpus(dir);
    assert.ok(r.skipped.some((s) => /keeps no tokens .* no vectors left/.test(s.reason)));
    assert.equal(r.info.documents, 0);
    assert.equal(r.info.index?.indexedSegments, 0);
  });

  test('hostile or stale descriptions are reported and not adopted; recovery never throws on them', async () => {
    for (const [what, edit, file] of [
      ['a drift above 1', (c: Record<string, unknown>) => ({ ...c, drift: 2 }), 1],
      ['an unknown role', (c: Record<string, unknown>) => ({ ...c, role: 'other' }), 1],
      ['not an object', () => 'codec', 0],
      ['another segment', (c: Record<string, unknown>) => ({ ...c, segment: 'seg-000009.msxs' }), 1],
      [
        'a wrong segment CRC',
        (c: Record<string, unknown>) => ({ ...c, segmentCrc: ((c.segmentCrc as number) ^ 1) >>> 0 }),
        1,
      ],
      ['another codec', (c: Record<string, unknown>) => ({ ...c, codec: 'ix-000009-0000.msxi' }), 1],
      ['no corpus field (an older file)', () => undefined, 1],
    ] as const) {
      const dir = fresh();
      build(dir, 40, 1);
      await indexCorpus(dir, { centroids: 8 });
      const [name] = fs.readdirSync(dir).filter((n) => new RegExp(`^ix-\\d+-000${file}\\.msxi$`).test(n));
      rewriteCorpus(path.join(dir, name), edit);
      loseManifest(dir);
      const r = recoverCorpus(dir);
      assert.equal(r.info.documents, 40, what);
      assert.equal(r.info.index?.indexedSegments ?? 0, 0, what);
      const c = openCorpus(dir);
      c.close();
    }
  });

  test('after a rebuild, the files of the old codec are not adopted', async () => {
    const dir = fresh();
    build(dir, 60, 2);
    await indexCorpus(dir, { centroids: 8 });
    // a leftover of the old codec (a rebuild removes them; a crash between could leave them)
    const old = fs.readdirSync(dir).filter((n) => n.startsWith('ix-'));
    const saved = old.map((n) => [n, fs.readFileSync(path.join(dir, n))] as const);
    await indexCorpus(dir, { centroids: 16, rebuild: true });
    for (const [n, b] of saved) fs.writeFileSync(path.join(dir, n), b);
    const before = await answers(dir);
    loseManifest(dir);
    const r = recoverCorpus(dir);
    assert.equal(r.info.index?.centroids, 16);
    assert.equal(r.info.index?.indexedSegments, 2);
    assert.deepEqual((await answers(dir)).hits, before.hits);
  });
});
