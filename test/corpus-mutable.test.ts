// The mutable corpus (src/io/corpus/, src/ops/corpus-search.ts): unique ids, get by id, deletions
// (tombstones) applied exactly at search time, search restricted to ids, compaction, and crash
// injection at every write step of delete and compact. Exactness is checked against a corpus built
// with only the live documents (same bytes): same ids, same scores, same order.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { InvalidArgumentError } from '../src/errors.js';
import { CorpusFile, CorpusWriter, deleteDocuments, recoverCorpus } from '../src/io/corpus/index.js';
import { buildCorpusFromFilesSync } from '../src/io/corpus-build.js';
import { readNpy, writeNpy } from '../src/io/npy.js';
import { type CorpusHit, openCorpus } from '../src/ops/corpus-search.js';
import type { TokenBatch } from '../src/tensor.js';
import { failEveryStep, randomRagged, rng, runSeed } from './helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-corpus-mutable-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));
let serial = 0;
const fresh = () => path.join(tmp, `c${serial++}.msx`);
const CLI = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
const cli = (...args: string[]) =>
  spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 60_000 });

const DIM = 8;

function lengthsOf(rand: () => number, n: number): number[] {
  return Array.from({ length: n }, (_, i) => (i % 9 === 4 ? 0 : 1 + Math.floor(rand() * 6)));
}

/** A corpus of `n` documents with ids d0..d{n-1}, in `segments` appends. */
function build(dir: string, n: number, seed: number, dtype: 'float16' | 'int8' = 'float16', segments = 3) {
  const rand = rng(seed);
  const docs = randomRagged(lengthsOf(rand, n), DIM, 'float32', rand);
  const ids = Array.from({ length: n }, (_, i) => `d${i}`);
  const per = Math.ceil(n / segments);
  for (let s = 0; s < segments; s++) {
    const w = s === 0 ? CorpusWriter.create(dir, { dim: DIM, dtype, ids: true }) : CorpusWriter.append(dir);
    const from = s * per;
    const to = Math.min(n, from + per);
    const lengths = Array.from(docs.lengths.subarray(from, to));
    const start = docs.starts[from] ?? 0;
    const tokens = lengths.reduce((a, b) => a + b, 0);
    const part = randomRaggedFrom(docs, start, tokens, lengths);
    w.add(part, ids.slice(from, to));
    w.commit();
  }
  return { docs, ids };
}

function randomRaggedFrom(docs: TokenBatch, start: number, tokens: number, lengths: number[]): TokenBatch {
  const starts = new Float64Array(lengths.length);
  let at = 0;
  lengths.forEach((l, i) => {
    starts[i] = at;
    at += l;
  });
  return {
    ...docs,
    data: docs.data.subarray(start * DIM, (start + tokens) * DIM),
    count: lengths.length,
    starts,
    lengths: Int32Array.from(lengths),
    maxLength: Math.max(0, ...lengths),
  };
}

/** A corpus holding exactly the given documents of `src` (same stored bytes), in their order. */
function reference(src: string, keep: string[]): string {
  const c = CorpusFile.open(src);
  const dir = fresh();
  const w = CorpusWriter.create(dir, { dim: DIM, dtype: c.info.dtype, ids: true });
  const docs = c.getDocuments(keep);
  w.addEncoded({ data: docs.data, lengths: docs.lengths, scales: docs.scales }, keep);
  w.commit();
  return dir;
}

function idsAndScores(hits: CorpusHit[][]): [string, number][][] {
  return hits.map((row) => row.map((h) => [h.id, h.score]));
}

function sameBits(a: TokenBatch, b: TokenBatch) {
  assert.equal(a.count, b.count);
  for (let i = 0; i < a.count; i++) {
    assert.equal(a.lengths[i], b.lengths[i], `length of ${i}`);
    const n = a.lengths[i] * a.dim;
    assert.deepEqual(
      Array.from(a.data.subarray(a.starts[i] * a.dim, a.starts[i] * a.dim + n)),
      Array.from(b.data.subarray(b.starts[i] * b.dim, b.starts[i] * b.dim + n)),
      `tokens of ${i}`,
    );
  }
}

function listing(dir: string): string[] {
  return fs
    .readdirSync(dir)
    .filter((n) => n !== 'LOCK')
    .sort();
}

describe('unique ids', () => {
  test('build refuses an id repeated within a batch, naming it and both positions', () => {
    const dir = fresh();
    const w = CorpusWriter.create(dir, { dim: DIM, ids: true });
    const batch = randomRagged([2, 3, 1], DIM, 'float32', rng(runSeed));
    assert.throws(
      () => w.add(batch, ['a', 'b', 'a']),
      (e: Error) =>
        e.name === 'InvalidArgumentError' && /"a" at ids\[2\] repeats ids\[0\] of this batch/.test(e.message),
    );
    w.abort();
    assert.equal(fs.existsSync(path.join(dir, 'MANIFEST')), false);
  });

  test('append refuses an id already in the corpus (naming the document) or added earlier by the writer', () => {
    const dir = fresh();
    build(dir, 10, runSeed + 1, 'float16', 1);
    const before = listing(dir);
    const w = CorpusWriter.append(dir);
    const batch = randomRagged([2], DIM, 'float32', rng(runSeed + 2));
    assert.throws(() => w.add(batch, ['d7']), /"d7" at ids\[0\] already in the corpus \(document 7\)/);
    w.add(batch, ['new']);
    assert.throws(() => w.add(batch, ['new']), /already added by an earlier add\(\)/);
    w.abort();
    assert.deepEqual(listing(dir), before);
    // a deleted id may be used again
    deleteDocuments(dir, ['d7']);
    const w2 = CorpusWriter.append(dir);
    w2.add(batch, ['d7']);
    const info = w2.commit();
    assert.equal(info.live, 10);
    const c = CorpusFile.open(dir);
    assert.equal(c.indexOf('d7'), 10);
  });

  test('a blank id (empty or only whitespace) is refused naming ids[i]; nothing is written', () => {
    const dir = fresh();
    build(dir, 4, runSeed + 30, 'float16', 1);
    const before = listing(dir);
    const batch = randomRagged([2, 1], DIM, 'float32', rng(runSeed + 31));
    for (const blank of ['', ' ', '\t \r', '\u00a0']) {
      const w = CorpusWriter.append(dir);
      assert.throws(
        () => w.add(batch, ['ok', blank]),
        (e: Error) =>
          e instanceof InvalidArgumentError &&
          e.argument === 'ids[1]' &&
          e.message ===
            `Expected a non-blank document id (not empty, not only whitespace) for ids[1] but received ${JSON.stringify(blank)}`,
        JSON.stringify(blank),
      );
      w.abort();
    }
    assert.deepEqual(listing(dir), before);
    // through the CLI: a line of spaces in the ids file
    const npy = path.join(tmp, `blank-${serial}.npy`);
    const lens = path.join(tmp, `blank-${serial}-lens.npy`);
    const ids = path.join(tmp, `blank-${serial++}.txt`);
    writeNpy(npy, {
      dtype: 'float32',
      shape: [4, DIM],
      data: new Float32Array(4 * DIM).map((_, i) => Math.sin(i)),
    });
    writeNpy(lens, { dtype: 'int32', shape: [2], data: new Int32Array([2, 2]) });
    fs.writeFileSync(ids, 'x\n   \n');
    const r = cli('corpus', 'append', dir, '--docs', npy, '--doc-lengths', lens, '--ids', ids);
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /for ids\[1\] but received " {3}"/);
    assert.deepEqual(listing(dir), before);
    assert.equal(CorpusFile.open(dir).info.documents, 4);
  });

  test('corpus build from files refuses duplicate ids with a clear error', () => {
    const npy = path.join(tmp, `dup-${serial}.npy`);
    const lens = path.join(tmp, `dup-${serial}-lens.npy`);
    const ids = path.join(tmp, `dup-${serial++}.txt`);
    writeNpy(npy, { dtype: 'float32', shape: [6, 4], data: new Float32Array(24).map((_, i) => Math.sin(i)) });
    writeNpy(lens, { dtype: 'int32', shape: [3], data: new Int32Array([2, 2, 2]) });
    fs.writeFileSync(ids, 'x\ny\nx\n');
    const out = fresh();
    const r = cli('corpus', 'build', '--docs', npy, '--doc-lengths', lens, '--ids', ids, '--out', out);
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /"x" at ids\[2\] repeats ids\[0\]/);
    assert.equal(fs.existsSync(path.join(out, 'MANIFEST')), false);
  });
});

describe('the duplicate-id error counts exactly', () => {
  test('every duplicate of the whole ids file, however the build groups its adds; occurrences and distinct ids apart', () => {
    const npy = path.join(tmp, `count-${serial}.npy`);
    const lens = path.join(tmp, `count-${serial}-lens.npy`);
    const ids = path.join(tmp, `count-${serial++}.txt`);
    writeNpy(npy, {
      dtype: 'float32',
      shape: [16, DIM],
      data: new Float32Array(16 * DIM).map((_, i) => Math.sin(i)),
    });
    writeNpy(lens, { dtype: 'int32', shape: [8], data: new Int32Array(8).fill(2) });
    fs.writeFileSync(ids, 'a\nb\na\nc\nd\nb\ne\na\n');
    const want =
      'Expected unique document ids for ids but received 3 duplicates of 2 ids: "a" at ids[2] repeats ids[0] of this batch; "b" at ids[5] repeats ids[1] of this batch; "a" at ids[7] repeats ids[0] of this batch';
    // 32 bytes a group: one add() per document, where the count was 1 and the position ids[0]
    for (const groupBytes of [undefined, 32]) {
      const out = fresh();
      assert.throws(
        () => buildCorpusFromFilesSync({ docs: npy, docLengths: lens, ids, out, groupBytes }),
        (e: Error) => e.message === want,
        String(groupBytes),
      );
      assert.equal(fs.existsSync(path.join(out, 'MANIFEST')), false);
    }
    // appending: ids the corpus holds count with the repeats, and past three the rest are counted
    const dir = fresh();
    build(dir, 4, runSeed + 40, 'float16', 1);
    fs.writeFileSync(ids, 'd1\nx\nd1\nx\nd2\nx\ny\nd3\n');
    assert.throws(
      () =>
        buildCorpusFromFilesSync({
          docs: npy,
          docLengths: lens,
          ids,
          out: dir,
          append: true,
          groupBytes: 32,
        }),
      (e: Error) =>
        e.message ===
        'Expected unique document ids for ids but received 6 duplicates of 4 ids: "d1" at ids[0] already in the corpus (document 1); "d1" at ids[2] already in the corpus (document 1); "x" at ids[3] repeats ids[1] of this batch; and 3 more',
    );
    assert.equal(CorpusFile.open(dir).info.documents, 4);
  });
});

describe('get by id', () => {
  test('returns the documents in request order, bit for bit; unknown ids are an error listing them', () => {
    const dir = fresh();
    const { docs } = build(dir, 20, runSeed + 3);
    const c = openCorpus(dir);
    const want = [13, 0, 19, 4, 13];
    const got = c.get(want.map((i) => `d${i}`));
    sameBits(got, c.readDocuments(want));
    // against the input, decoded from float16: same lengths
    assert.deepEqual(
      Array.from(got.lengths),
      want.map((i) => docs.lengths[i]),
    );
    assert.throws(
      () => c.get(['d1', 'nope', 'd2', 'zz']),
      (e: Error) => e.name === 'InvalidArgumentError' && /2 unknown or deleted: "nope", "zz"/.test(e.message),
    );
  });
});

describe('delete', () => {
  for (const dtype of ['float16', 'int8'] as const)
    test(`searching after a delete equals searching a corpus that never had the documents (${dtype})`, async () => {
      const dir = fresh();
      const n = 120;
      build(dir, n, runSeed + 4, dtype);
      const rand = rng(runSeed + 5);
      const gone = new Set<number>();
      while (gone.size < 40) gone.add(Math.floor(rand() * n));
      const first = [...gone].slice(0, 25).map((i) => `d${i}`);
      const second = [...gone].slice(25).map((i) => `d${i}`);
      const r1 = deleteDocuments(dir, first);
      assert.equal(r1.info.deleted, 25);
      const r2 = deleteDocuments(dir, second);
      assert.equal(r2.info.deleted, 40);
      assert.equal(r2.info.live, n - 40);
      // one tombstone file only: the superseded one was removed
      assert.equal(fs.readdirSync(dir).filter((x) => x.startsWith('del-')).length, 1);
      const live = Array.from({ length: n }, (_, i) => i)
        .filter((i) => !gone.has(i))
        .map((i) => `d${i}`);
      const ref = openCorpus(reference(dir, live));
      const c = openCorpus(dir);
      c.verify();
      const queries = randomRagged([3, 5, 1, 4], DIM, 'float32', rng(runSeed + 6));
      for (const topK of [1, 7, 70, 100, 200])
        for (const blockBytes of [64, 1000, 1 << 20]) {
          const got = await c.search(queries, { topK, blockBytes, backend: 'cpu' });
          const want = await ref.search(queries, { topK, blockBytes, backend: 'cpu' });
          assert.deepEqual(idsAndScores(got), idsAndScores(want), `topK ${topK} blockBytes ${blockBytes}`);
        }
      assert.throws(() => c.get([first[3]]), /1 unknown or deleted/);
      // an append after a delete keeps the tombstones
      const w = CorpusWriter.append(dir);
      w.add(randomRagged([3], DIM, 'float32', rng(runSeed + 7)), ['late']);
      const info = w.commit();
      assert.equal(info.deleted, 40);
      assert.equal(openCorpus(dir).get(['late']).count, 1);
      assert.throws(() => openCorpus(dir).get([second[0]]), /unknown or deleted/);
    });

  test('unknown or already deleted ids: an error, and nothing is written', () => {
    const dir = fresh();
    build(dir, 10, runSeed + 8);
    deleteDocuments(dir, ['d1']);
    const before = listing(dir);
    const manifest = fs.readFileSync(path.join(dir, 'MANIFEST'), 'utf8');
    assert.throws(() => deleteDocuments(dir, ['d2', 'missing']), /1 unknown or deleted: "missing"/);
    assert.throws(() => deleteDocuments(dir, ['d1']), /unknown or deleted: "d1"/);
    assert.deepEqual(listing(dir), before);
    assert.equal(fs.readFileSync(path.join(dir, 'MANIFEST'), 'utf8'), manifest);
  });

  test('a MANIFEST with tombstones is version 2 (older builds refuse it); one without stays version 1', () => {
    const dir = fresh();
    build(dir, 6, runSeed + 9, 'float16', 1);
    const v = () => JSON.parse(fs.readFileSync(path.join(dir, 'MANIFEST'), 'utf8').split('\n')[0]).version;
    assert.equal(v(), 1);
    deleteDocuments(dir, ['d0']);
    assert.equal(v(), 2);
    // a damaged tombstone file is a clear error at open
    const del = fs.readdirSync(dir).find((x) => x.startsWith('del-'))!;
    const bytes = fs.readFileSync(path.join(dir, del));
    bytes[24] ^= 1;
    fs.writeFileSync(path.join(dir, del), bytes);
    assert.throws(() => CorpusFile.open(dir), /tombstone file is corrupted/);
  });

  test('a corpus without ids deletes by index', async () => {
    const dir = fresh();
    const w = CorpusWriter.create(dir, { dim: DIM });
    w.add(randomRagged([2, 3, 4, 1, 2], DIM, 'float32', rng(runSeed + 10)));
    w.commit();
    deleteDocuments(dir, ['1', '3']);
    const c = openCorpus(dir);
    assert.deepEqual([c.info.live, c.info.deleted], [3, 2]);
    const hits = await c.search(randomRagged([2], DIM, 'float32', rng(runSeed + 11)), {
      topK: 10,
      backend: 'cpu',
    });
    assert.deepEqual(hits[0].map((h) => h.index).sort(), [0, 2, 4]);
    assert.throws(() => deleteDocuments(dir, ['5']), /unknown or deleted: "5"/);
  });
});

describe('recover keeps deletions', () => {
  test('a lost MANIFEST is rebuilt with the newest tombstones; a segment left out never brings deleted documents back', () => {
    const dir = fresh();
    build(dir, 15, runSeed + 22, 'float16', 3);
    deleteDocuments(dir, ['d1']);
    deleteDocuments(dir, ['d12', 'd4']);
    fs.rmSync(path.join(dir, 'MANIFEST'));
    const r = recoverCorpus(dir);
    assert.deepEqual(r.skipped, []);
    assert.deepEqual([r.info.deleted, r.info.live], [3, 12]);
    const c = openCorpus(dir);
    assert.throws(() => c.get(['d4']), /unknown or deleted/);
    // the next writer works on it
    deleteDocuments(dir, ['d0']);
    assert.equal(openCorpus(dir).info.deleted, 4);
    // segment 2's header unreadable: where its documents end is unknown, so d12 cannot be placed;
    // recovery is refused rather than bringing it back
    fs.rmSync(path.join(dir, 'MANIFEST'));
    const seg = path.join(dir, 'seg-000002.msxs');
    const bytes = fs.readFileSync(seg);
    bytes[0] ^= 0xff;
    fs.writeFileSync(seg, bytes);
    assert.throws(
      () => recoverCorpus(dir),
      /del-\d+\.msxd: deleted document 12 cannot be placed: seg-000002\.msxs has an unreadable header.*recovery refused.*move del-\d+\.msxd out of/,
    );
    assert.ok(!fs.existsSync(path.join(dir, 'MANIFEST')), 'nothing was published');
    // its tokens damaged instead (header intact): it is left out, moved aside, and the tombstones
    // are placed past its 5 documents
    bytes[0] ^= 0xff;
    bytes[4096 + 1] ^= 0xff;
    fs.writeFileSync(seg, bytes);
    const r2 = recoverCorpus(dir);
    assert.equal(r2.skipped.length, 1, JSON.stringify(r2.skipped));
    assert.match(r2.skipped[0].movedTo ?? '', /seg-000002\.msxs\.left-out-\d{6}$/);
    assert.ok(fs.existsSync(r2.skipped[0].movedTo!) && !fs.existsSync(seg), 'kept, moved aside');
    assert.deepEqual([r2.info.documents, r2.info.deleted, r2.info.live], [10, 4, 6]);
    const c2 = openCorpus(dir);
    for (const id of ['d0', 'd1', 'd4', 'd12']) assert.throws(() => c2.get([id]), /unknown or deleted/, id);
    assert.equal(c2.get(['d13', 'd2']).count, 2);
    c2.close();
    // deletions after the recovery, then the MANIFEST lost again: every one still holds (the
    // moved-aside segment never counts for tombstones written after it was left out)
    deleteDocuments(dir, ['d11']);
    fs.rmSync(path.join(dir, 'MANIFEST'));
    const r3 = recoverCorpus(dir);
    assert.deepEqual(r3.skipped, []);
    assert.deepEqual([r3.info.documents, r3.info.deleted], [10, 5]);
    const c3 = openCorpus(dir);
    for (const id of ['d0', 'd1', 'd4', 'd11', 'd12'])
      assert.throws(() => c3.get([id]), /unknown or deleted/, id);
    assert.equal(c3.get(['d13', 'd10', 'd3']).count, 3);
    c3.close();
    // compact removes the segment recover left out (as before it was moved aside)
    CorpusWriter.compact(dir);
    assert.ok(!fs.existsSync(r2.skipped[0].movedTo!));
    assert.deepEqual([openCorpus(dir).info.documents, openCorpus(dir).info.deleted], [5, 0]);
  });

  test('a segment the MANIFEST names but the directory lost: reported, and the tombstones placed past its documents', () => {
    const dir = fresh();
    build(dir, 15, runSeed + 24, 'float16', 3);
    // d7 lies in the segment that vanishes, d12 in the one after it
    deleteDocuments(dir, ['d7', 'd12']);
    fs.rmSync(path.join(dir, 'seg-000002.msxs'));
    // and an intact segment file the MANIFEST does not name (as an unpublished append leaves):
    // the MANIFEST says it is not part of the corpus, so it is not adopted
    fs.copyFileSync(path.join(dir, 'seg-000001.msxs'), path.join(dir, 'seg-000009.msxs'));
    assert.throws(() => openCorpus(dir), /seg-000002\.msxs: a segment named by the MANIFEST is missing/);
    const r = recoverCorpus(dir);
    assert.equal(r.skipped.length, 2, JSON.stringify(r.skipped));
    assert.match(r.skipped[0].file, /seg-000002\.msxs$/);
    assert.match(r.skipped[0].reason, /named by the MANIFEST \(5 documents\) but missing/);
    assert.match(r.skipped[1].reason, /seg-000009\.msxs: not named by the MANIFEST/);
    assert.ok(fs.existsSync(path.join(dir, 'seg-000009.msxs')), 'left where it is');
    assert.deepEqual([r.info.documents, r.info.deleted, r.info.live], [10, 1, 9]);
    assert.ok(r.info.generation > 9, `generation ${r.info.generation} past every file`);
    const c = openCorpus(dir);
    assert.throws(() => c.get(['d12']), /unknown or deleted/);
    // every other document of the two segments left is live, with its own tokens
    const live = ['d0', 'd1', 'd2', 'd3', 'd4', 'd10', 'd11', 'd13', 'd14'];
    assert.equal(c.get(live).count, live.length);
    c.close();
    // a MANIFEST damaged beyond its checksum names nothing: every intact segment file counts
    deleteDocuments(dir, ['d0']);
    fs.rmSync(path.join(dir, 'seg-000009.msxs'), { force: true });
    fs.writeFileSync(path.join(dir, 'MANIFEST'), 'garbage');
    const r2 = recoverCorpus(dir);
    assert.deepEqual(r2.skipped, []);
    assert.deepEqual([r2.info.documents, r2.info.deleted], [10, 2]);
  });

  test('a crash between moving a segment aside and writing the moved tombstones is recovered the same way', () => {
    const dir = fresh();
    build(dir, 15, runSeed + 23, 'float16', 3);
    deleteDocuments(dir, ['d2', 'd8', 'd13']);
    const [del] = fs.readdirSync(dir).filter((n) => /^del-/.test(n));
    fs.rmSync(path.join(dir, 'MANIFEST'));
    // the state such a crash leaves: segment 2 moved aside at the next generation, the original
    // tombstones only
    fs.renameSync(path.join(dir, 'seg-000002.msxs'), path.join(dir, 'seg-000002.msxs.left-out-000005'));
    const r = recoverCorpus(dir);
    assert.deepEqual([r.info.documents, r.info.deleted], [10, 2]);
    const c = openCorpus(dir);
    for (const id of ['d2', 'd13']) assert.throws(() => c.get([id]), /unknown or deleted/, id);
    assert.equal(c.get(['d12', 'd14', 'd1']).count, 3);
    c.close();
    // the original tombstones, superseded, are not named: the recovery wrote its own
    assert.notEqual(r.info.generation, 4);
    assert.ok(fs.existsSync(path.join(dir, del)), 'the original tombstone file is kept');
  });
});

describe('search restricted to ids', () => {
  test('equals searching a corpus of just those documents (and ignores the rest)', async () => {
    const dir = fresh();
    const n = 90;
    build(dir, n, runSeed + 12, 'int8');
    deleteDocuments(dir, ['d5', 'd6']);
    const rand = rng(runSeed + 13);
    const pick = new Set<string>();
    while (pick.size < 30) {
      const i = Math.floor(rand() * n);
      if (i !== 5 && i !== 6) pick.add(`d${i}`);
    }
    const chosen = [...pick];
    const sorted = [...chosen].sort((a, b) => Number(a.slice(1)) - Number(b.slice(1)));
    const ref = openCorpus(reference(dir, sorted));
    const c = openCorpus(dir);
    const queries = randomRagged([4, 2, 6], DIM, 'float32', rng(runSeed + 14));
    for (const topK of [1, 5, 30, 100])
      for (const blockBytes of [100, 1 << 20]) {
        const got = await c.search(queries, { topK, blockBytes, ids: chosen, backend: 'cpu' });
        const want = await ref.search(queries, { topK, blockBytes, backend: 'cpu' });
        assert.deepEqual(idsAndScores(got), idsAndScores(want), `topK ${topK} blockBytes ${blockBytes}`);
      }
    await assert.rejects(
      c.search(queries, { ids: ['d1', 'd5'], backend: 'cpu' }),
      /unknown or deleted: "d5"/,
    );
    // progress counts the chosen documents and ends at their total
    let last = { documents: -1, totalDocuments: -2, bytes: -1, totalBytes: -2 };
    await c.search(queries, {
      ids: chosen,
      blockBytes: 100,
      backend: 'cpu',
      onProgress: (p) => {
        last = p;
      },
    });
    assert.equal(last.totalDocuments, chosen.length);
    assert.equal(last.documents, last.totalDocuments);
    assert.equal(last.bytes, last.totalBytes);
  });
});

describe('compact', () => {
  test('rewrites the live documents: same search results and documents, no tombstones, one segment', async () => {
    const dir = fresh();
    const n = 60;
    build(dir, n, runSeed + 15);
    const gone = ['d0', 'd7', 'd33', 'd59'];
    deleteDocuments(dir, gone);
    const c0 = openCorpus(dir);
    const queries = randomRagged([3, 4], DIM, 'float32', rng(runSeed + 16));
    const before = await c0.search(queries, { topK: 20, backend: 'cpu' });
    const live = Array.from({ length: n }, (_, i) => `d${i}`).filter((x) => !gone.includes(x));
    const docsBefore = c0.get(live);
    const info = CorpusWriter.compact(dir);
    assert.deepEqual([info.documents, info.deleted, info.live, info.segments], [n - 4, 0, n - 4, 1]);
    assert.deepEqual(
      listing(dir).filter((x) => x !== 'MANIFEST'),
      ['seg-000005.msxs'],
    );
    const c = openCorpus(dir);
    c.verify();
    assert.deepEqual(
      idsAndScores(await c.search(queries, { topK: 20, backend: 'cpu' })),
      idsAndScores(before),
    );
    sameBits(c.get(live), docsBefore);
    assert.equal(JSON.parse(fs.readFileSync(path.join(dir, 'MANIFEST'), 'utf8').split('\n')[0]).version, 1);
  });
});

describe('edge cases', () => {
  test('every document deleted, then compacted: searches return nothing; an empty ids list scores nothing', async () => {
    const dir = fresh();
    build(dir, 5, runSeed + 23, 'float16', 2);
    const q = randomRagged([2, 3], DIM, 'float32', rng(runSeed + 24));
    assert.deepEqual(
      (await openCorpus(dir).search(q, { ids: [], backend: 'cpu' })).map((r) => r.length),
      [0, 0],
    );
    deleteDocuments(dir, ['d0', 'd1', 'd2', 'd3', 'd4']);
    assert.deepEqual(
      (await openCorpus(dir).search(q, { topK: 3, backend: 'cpu' })).map((r) => r.length),
      [0, 0],
    );
    const info = CorpusWriter.compact(dir);
    assert.deepEqual([info.documents, info.live, info.deleted], [0, 0, 0]);
    const c = openCorpus(dir);
    c.verify();
    assert.deepEqual(
      (await c.search(q, { topK: 3, backend: 'cpu' })).map((r) => r.length),
      [0, 0],
    );
    // and it grows again
    const w = CorpusWriter.append(dir);
    w.add(randomRagged([2], DIM, 'float32', rng(1)), ['d0']);
    w.commit();
    assert.equal((await openCorpus(dir).search(q, { topK: 3, backend: 'cpu' }))[0][0].id, 'd0');
  });
});

describe('crash safety of delete and compact', () => {
  /** Live ids of a corpus, after checking it opens and verifies. */
  function liveIds(dir: string): string[] {
    const c = CorpusFile.open(dir);
    c.verify();
    const out: string[] = [];
    for (let i = 0; i < c.info.documents; i++) if (!c.isDeleted(i)) out.push(c.id(i));
    return out;
  }

  function everyStep(name: string, prepare: (dir: string) => void, act: (dir: string) => void) {
    test(`a failure at every write step of ${name} leaves the old or the new corpus, verifiable`, async () => {
      const proto = fresh();
      prepare(proto);
      const oldIds = liveIds(proto);
      let newIds: string[] = [];
      await failEveryStep({
        proto,
        fresh,
        act,
        probed: (probe) => {
          newIds = liveIds(probe);
        },
        check: (dir, { index: at, step, published }) => {
          const ids = liveIds(dir);
          assert.deepEqual(ids, published ? newIds : oldIds, `failure at step ${at} (${step})`);
          // the next writer cleans up and works
          const w = CorpusWriter.append(dir);
          w.add(randomRagged([2], DIM, 'float32', rng(at)), [`after-${at}`]);
          w.commit();
          assert.deepEqual(liveIds(dir), [...ids, `after-${at}`]);
          const stray = fs.readdirSync(dir).filter((x) => x.endsWith('.tmp'));
          assert.deepEqual(stray, [], `temporaries after step ${at}`);
          if (published) {
            // a compact after a crash past its publish removes what the crash left
            CorpusWriter.compact(dir);
            assert.equal(fs.readdirSync(dir).filter((x) => /^(seg|del)-/.test(x)).length, 1);
          }
        },
      });
    });
  }

  everyStep(
    'a delete',
    (dir) => {
      build(dir, 12, runSeed + 17);
      deleteDocuments(dir, ['d2']);
    },
    (dir) => {
      deleteDocuments(dir, ['d3', 'd9']);
    },
  );
  everyStep(
    'a compact',
    (dir) => {
      build(dir, 12, runSeed + 18, 'int8');
      deleteDocuments(dir, ['d2', 'd11']);
    },
    (dir) => {
      CorpusWriter.compact(dir);
    },
  );
});

describe('killed writers', () => {
  // A real crash: the process exits inside a write step, with no cleanup of any kind.
  const corpusModule = fileURLToPath(new URL('../src/io/corpus/index.js', import.meta.url));
  const script = path.join(tmp, 'crash.mjs');
  fs.writeFileSync(
    script,
    `import { CorpusWriter, deleteDocuments, setCorpusFaultHook } from ${JSON.stringify(corpusModule)};
const [dir, what, at] = process.argv.slice(2);
let n = 0;
setCorpusFaultHook(() => { if (n++ === Number(at)) process.exit(9); });
if (what === 'delete') deleteDocuments(dir, ['d3', 'd9']);
else CorpusWriter.compact(dir);
process.exit(0);
`,
  );

  for (const what of ['delete', 'compact'] as const)
    test(`a ${what} killed at every write step leaves a verifiable corpus the next writer cleans`, () => {
      const proto = fresh();
      build(proto, 12, runSeed + 20, 'int8');
      deleteDocuments(proto, ['d2']);
      const live = (dir: string) => {
        const c = CorpusFile.open(dir);
        c.verify();
        const out: string[] = [];
        for (let i = 0; i < c.info.documents; i++) if (!c.isDeleted(i)) out.push(c.id(i));
        return out;
      };
      const oldIds = live(proto);
      const newIds = what === 'delete' ? oldIds.filter((x) => x !== 'd3' && x !== 'd9') : oldIds;
      let completed = false;
      for (let at = 0; !completed && at < 40; at++) {
        const dir = fresh();
        fs.cpSync(proto, dir, { recursive: true });
        const r = spawnSync(process.execPath, [script, dir, what, String(at)], {
          encoding: 'utf8',
          timeout: 30_000,
        });
        assert.ok(r.status === 9 || r.status === 0, r.stderr);
        completed = r.status === 0;
        const ids = live(dir);
        assert.ok(
          JSON.stringify(ids) === JSON.stringify(oldIds) || JSON.stringify(ids) === JSON.stringify(newIds),
          `killed at step ${at}: ${ids.join(',')}`,
        );
        // the dead writer's lock is taken over; its temporaries are removed
        const w = CorpusWriter.append(dir);
        w.add(randomRagged([2], DIM, 'float32', rng(at)), ['next']);
        w.commit();
        assert.deepEqual(
          fs.readdirSync(dir).filter((x) => x.endsWith('.tmp')),
          [],
          `step ${at}`,
        );
        assert.deepEqual(live(dir), [...ids, 'next']);
      }
      assert.ok(completed, 'the writer never completed');
    });
});

describe('CLI: corpus delete, get, compact, info', () => {
  test('delete --ids, get --ids --out, search --ids, info shows live and deleted, compact', async () => {
    const dir = fresh();
    build(dir, 10, runSeed + 19);
    const idsFile = path.join(tmp, `ids-${serial++}.txt`);
    fs.writeFileSync(idsFile, 'd1\nd4\n');
    let r = cli('corpus', 'delete', dir, '--ids', idsFile, '--json');
    assert.equal(r.status, 0, r.stderr);
    assert.equal(JSON.parse(r.stdout).deleted, 2);
    r = cli('corpus', 'info', dir, '--json');
    assert.equal(r.status, 0, r.stderr);
    const info = JSON.parse(r.stdout);
    assert.deepEqual([info.live, info.deleted], [8, 2]);
    const out = path.join(tmp, `got-${serial}.npy`);
    const offs = path.join(tmp, `got-${serial++}-offsets.npy`);
    fs.writeFileSync(idsFile, 'd9\nd0\n');
    r = cli('corpus', 'get', dir, '--ids', idsFile, '--out', out, '--out-offsets', offs);
    assert.equal(r.status, 0, r.stderr);
    const c = openCorpus(dir);
    const want = c.get(['d9', 'd0']);
    const got = readNpy(out);
    assert.deepEqual(got.shape, [want.lengths[0] + want.lengths[1], DIM]);
    assert.deepEqual(Array.from(readNpy(offs).data as ArrayLike<number | bigint>).map(Number), [
      0,
      want.lengths[0],
      want.lengths[0] + want.lengths[1],
    ]);
    // search --corpus --ids: only those documents, as the library answers
    const qfile = path.join(tmp, `q-${serial++}.npy`);
    const q = randomRagged([3], DIM, 'float32', rng(runSeed + 21));
    writeNpy(qfile, { dtype: 'float32', shape: [3, DIM], data: q.data as Float32Array });
    fs.writeFileSync(idsFile, 'd9\nd0\nd5\n');
    r = cli(
      'search',
      '--queries',
      qfile,
      '--corpus',
      dir,
      '--ids',
      idsFile,
      '--top-k',
      '2',
      '--backend',
      'cpu',
    );
    assert.equal(r.status, 0, r.stderr);
    const lib = await c.search(q, { topK: 2, ids: ['d9', 'd0', 'd5'], backend: 'cpu' });
    assert.deepEqual(
      JSON.parse(r.stdout).results.map((h: { id: string }) => h.id),
      lib[0].map((h) => h.id),
    );
    fs.writeFileSync(idsFile, 'd1\n');
    r = cli('corpus', 'delete', dir, '--ids', idsFile);
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /unknown or deleted: "d1"/);
    r = cli('corpus', 'compact', dir, '--json');
    assert.equal(r.status, 0, r.stderr);
    assert.deepEqual([JSON.parse(r.stdout).documents, JSON.parse(r.stdout).deleted], [8, 0]);
  });
});
