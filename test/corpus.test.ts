// The corpus store (src/io/corpus/) and out-of-core search (src/ops/corpus-search.ts) on the CPU:
// round trips, streamed == in-memory results at every block size, crash safety at every write step
// (injected failures and killed processes), and damaged files rejected with clear errors.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { BLOCK_FIELDS, buildStreamPlan } from '../src/backends/cuda-stream-plan.js';
import { InvalidArgumentError } from '../src/errors.js';
import { decodeToFloat32, encodeFloats } from '../src/floats.js';
import { openArraySource } from '../src/io/array-source.js';
import { CorpusFile, CorpusWriter, setCorpusFaultHook } from '../src/io/corpus/index.js';
import { buildCorpusFromFilesSync } from '../src/io/corpus-build.js';
import { loadArray } from '../src/io/load.js';
import { writeNpy } from '../src/io/npy.js';
import { writeSafetensors } from '../src/io/safetensors.js';
import { blockTopK, mergeHits, openCorpus } from '../src/ops/corpus-search.js';
import { topK } from '../src/ops/maxsim.js';
import { quantize } from '../src/ops/quantize.js';
import { type FloatDType, raggedBatch, type TokenBatch } from '../src/tensor.js';
import { randomRagged, rng, runSeed } from './helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-corpus-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));
let serial = 0;
const fresh = () => path.join(tmp, `c${serial++}.msx`);

function randomLengths(rand: () => number, count: number, max: number, emptyEvery = 7): number[] {
  return Array.from({ length: count }, (_, i) => (i % emptyEvery === 3 ? 0 : 1 + Math.floor(rand() * max)));
}

/** Concatenates batches (same dtype / dim) into one packed ragged batch. */
function concatBatches(batches: TokenBatch[]): TokenBatch {
  const dim = batches[0].dim;
  const parts: Float32Array[] = [];
  const offsets = [0];
  for (const b of batches) {
    for (let i = 0; i < b.count; i++) {
      const s = b.starts[i] * dim;
      parts.push(decodeToFloat32(b.data.subarray(s, s + b.lengths[i] * dim), b.dtype, dim));
      offsets.push(offsets[offsets.length - 1] + b.lengths[i]);
    }
  }
  const all = new Float32Array(offsets[offsets.length - 1] * dim);
  let at = 0;
  for (const p of parts) {
    all.set(p, at);
    at += p.length;
  }
  return raggedBatch(all, offsets, { dim });
}

function sameBatchBits(a: TokenBatch, b: TokenBatch, context: string) {
  assert.equal(a.count, b.count, `${context}: count`);
  for (let i = 0; i < a.count; i++) {
    assert.equal(a.lengths[i], b.lengths[i], `${context}: length of ${i}`);
    const n = a.lengths[i] * a.dim;
    const x = a.data.subarray(a.starts[i] * a.dim, a.starts[i] * a.dim + n);
    const y = b.data.subarray(b.starts[i] * b.dim, b.starts[i] * b.dim + n);
    assert.deepEqual(Array.from(x), Array.from(y), `${context}: tokens of document ${i}`);
    if (a.scales) {
      const sa = a.scales.subarray(a.starts[i], a.starts[i] + a.lengths[i]);
      const sb = b.scales!.subarray(b.starts[i], b.starts[i] + b.lengths[i]);
      assert.deepEqual(Array.from(sa), Array.from(sb), `${context}: scales of document ${i}`);
    }
  }
}

describe('corpus store: round trips', () => {
  for (const dtype of ['float32', 'float16', 'bfloat16'] as FloatDType[]) {
    test(`build + append + reopen keeps every token (${dtype}, ragged, empty documents, ids)`, () => {
      const rand = rng(runSeed + 11);
      const dir = fresh();
      const dim = 12;
      const a = randomRagged(randomLengths(rand, 9, 6), dim, dtype, rand);
      const b = randomRagged(randomLengths(rand, 5, 9), dim, dtype, rand);
      const w = CorpusWriter.create(dir, { dim, dtype, ids: true });
      w.add(
        a,
        Array.from({ length: a.count }, (_, i) => `a-${i} é`),
      );
      const info1 = w.commit();
      assert.equal(info1.documents, a.count);
      const w2 = CorpusWriter.append(dir);
      w2.add(
        b,
        Array.from({ length: b.count }, (_, i) => `b-${i}`),
      );
      const info = w2.commit();
      assert.equal(info.documents, a.count + b.count);
      assert.equal(info.segments, 2);
      const c = CorpusFile.open(dir);
      c.verify();
      assert.equal(c.id(0), 'a-0 é');
      assert.equal(c.id(a.count + 2), 'b-2');
      const all = c.readDocuments(Array.from({ length: info.documents }, (_, i) => i));
      sameBatchBits(all, concatBatchesAs([a, b], dtype), 'read back');
      assert.deepEqual(fs.readdirSync(dir).sort(), ['MANIFEST', 'seg-000001.msxs', 'seg-000002.msxs']);
    });
  }

  test('float32 input stored as float16 is rounded once, like encodeFloats', () => {
    const rand = rng(runSeed + 12);
    const dir = fresh();
    const docs = randomRagged([3, 1, 4], 8, 'float32', rand);
    const w = CorpusWriter.create(dir, { dim: 8 });
    w.add(docs);
    w.commit();
    const back = CorpusFile.open(dir).readDocuments([0, 1, 2]);
    assert.equal(back.dtype, 'float16');
    assert.deepEqual(Array.from(back.data), Array.from(encodeFloats(docs.data as Float32Array, 'float16')));
  });

  test('int8 corpora store the same bytes and scales as quantize()', () => {
    const rand = rng(runSeed + 13);
    const dir = fresh();
    const docs = randomRagged(randomLengths(rand, 8, 7), 16, 'float32', rand);
    const w = CorpusWriter.create(dir, { dim: 16, dtype: 'int8' });
    w.add(docs);
    w.commit();
    const c = CorpusFile.open(dir);
    c.verify();
    const back = c.readDocuments(Array.from({ length: docs.count }, (_, i) => i));
    sameBatchBits(back, quantize(docs, 'int8'), 'int8 read back');
  });

  test('an empty corpus (no documents) opens and searches to empty results', async () => {
    const dir = fresh();
    CorpusWriter.create(dir, { dim: 4 }).commit();
    const c = openCorpus(dir);
    assert.equal(c.info.documents, 0);
    const q = randomRagged([2], 4, 'float32', rng(1));
    assert.deepEqual(await c.search(q, { topK: 3, backend: 'cpu' }), [[]]);
  });

  test('bad arguments name the argument', () => {
    const dir = fresh();
    assert.throws(() => CorpusWriter.create(dir, { dim: 0 }), /dim/);
    const w = CorpusWriter.create(dir, { dim: 4, ids: true });
    assert.throws(() => w.add(randomRagged([1], 4, 'float32', rng(2))), /ids/);
    assert.throws(() => w.add(randomRagged([1], 5, 'float32', rng(2)), ['x']), /batch\.dim/);
    assert.throws(() => w.add(randomRagged([1], 4, 'float32', rng(2)), ['a\nb']), /newlines/);
    w.abort();
    assert.equal(fs.existsSync(dir), false, 'an aborted first build leaves nothing');
    assert.throws(() => openCorpus(dir), /no such corpus/);
    // a second writer while one is open
    const w1 = CorpusWriter.create(dir, { dim: 4 });
    w1.commit();
    const w2 = CorpusWriter.append(dir);
    assert.throws(
      () => CorpusWriter.append(dir),
      /corpus is locked by pid \d+ \(another writer of this process/,
    );
    w2.abort();
    CorpusWriter.append(dir).abort();
  });
});

function concatBatchesAs(batches: TokenBatch[], dtype: FloatDType): TokenBatch {
  const f = concatBatches(batches);
  return { ...f, dtype, data: encodeFloats(f.data as Float32Array, dtype) };
}

describe('corpus search (CPU) equals in-memory search', () => {
  test('every block size, from one document per block to one block', async () => {
    const rand = rng(runSeed + 21);
    const dir = fresh();
    const dim = 24;
    const parts = [0, 1, 2].map(() => randomRagged(randomLengths(rand, 17, 20), dim, 'float16', rand));
    for (const [i, p] of parts.entries()) {
      const w = i === 0 ? CorpusWriter.create(dir, { dim }) : CorpusWriter.append(dir);
      w.add(p);
      w.commit();
    }
    const c = openCorpus(dir);
    const all = concatBatchesAs(parts, 'float16');
    const queries = randomRagged([5, 1, 9], dim, 'float32', rand);
    const want = await topK(queries, all, 7, { backend: 'cpu' });
    const rowBytes = dim * 2;
    // 1 byte: one document per block; exact document boundaries; a block per segment; everything.
    for (const blockBytes of [1, rowBytes * 20, rowBytes * 33, rowBytes * 1000, 1 << 30]) {
      const got = await c.search(queries, { topK: 7, backend: 'cpu', blockBytes });
      assert.deepEqual(
        got.map((r) => r.map((h) => [h.index, h.score])),
        want.map((r) => r.map((h) => [h.index, h.score])),
        `blockBytes ${blockBytes}`,
      );
    }
    // topK beyond the corpus size returns every document
    const everything = await c.search(queries, { topK: 1000, backend: 'cpu', blockBytes: rowBytes * 10 });
    assert.equal(everything[0].length, all.count);
    const progress: number[] = [];
    await c.search(queries, {
      topK: 2,
      backend: 'cpu',
      blockBytes: rowBytes * 40,
      onProgress: (p) => progress.push(p.documents),
    });
    assert.ok(progress.length > 1 && progress[progress.length - 1] === all.count, `progress ${progress}`);
    // a misspelt option is an error naming it, not a search with the defaults
    for (const [bad, name] of [
      [{ topk: 3 }, 'options.topk'],
      [{ topK: 3, nprobe: 4 }, 'options.nprobe'],
      [{ topK: -1 }, 'topK'],
      [null, 'options'],
    ] as const)
      await assert.rejects(
        c.search(queries, bad as object),
        (e: unknown) => e instanceof InvalidArgumentError && e.argument === name,
        name,
      );
  });

  test('int8 corpus search equals in-memory int8 search with quantized queries', async () => {
    const rand = rng(runSeed + 22);
    const dir = fresh();
    const docs = randomRagged(randomLengths(rand, 40, 12), 64, 'float32', rand);
    const w = CorpusWriter.create(dir, { dim: 64, dtype: 'int8' });
    w.add(docs);
    w.commit();
    const queries = randomRagged([4, 7], 64, 'float32', rand);
    const want = await topK(quantize(queries, 'int8'), quantize(docs, 'int8'), 5, { backend: 'cpu' });
    const got = await openCorpus(dir).search(queries, { topK: 5, backend: 'cpu', blockBytes: 700 });
    assert.deepEqual(
      got.map((r) => r.map((h) => [h.index, h.score])),
      want.map((r) => r.map((h) => [h.index, h.score])),
    );
  });

  test('blockTopK and mergeHits keep the best k with ties to the lower index', () => {
    const scores = new Float32Array([1, 3, 3, 2, 3, 0]);
    const [row] = blockTopK(scores, 1, 6, 3, 10);
    assert.deepEqual(row, [
      { index: 11, score: 3 },
      { index: 12, score: 3 },
      { index: 14, score: 3 },
    ]);
    const merged = mergeHits([{ index: 1, score: 3 }], row, 2);
    assert.deepEqual(merged, [
      { index: 1, score: 3 },
      { index: 11, score: 3 },
    ]);
  });

  test('queries of another dimension are refused', async () => {
    const dir = fresh();
    const w = CorpusWriter.create(dir, { dim: 8 });
    w.add(randomRagged([2], 8, 'float32', rng(3)));
    w.commit();
    await assert.rejects(
      openCorpus(dir).search(randomRagged([2], 9, 'float32', rng(4)), { backend: 'cpu' }),
      /queries\.dim/,
    );
  });
});

describe('CUDA stream plan (built on the CPU)', () => {
  test('planBlocks: the first blocks grow from firstBytes, doubling, up to maxBytes; every document once', () => {
    const rand = rng(runSeed + 72);
    const dir = fresh();
    for (let i = 0; i < 2; i++) {
      const w = i === 0 ? CorpusWriter.create(dir, { dim: 4, dtype: 'float32' }) : CorpusWriter.append(dir);
      w.add(randomRagged(randomLengths(rand, 300, 9), 4, 'float32', rand));
      w.commit();
    }
    const file = CorpusFile.open(dir);
    const row = 16;
    for (const [maxBytes, firstBytes] of [
      [row * 400, row * 10],
      [row * 64, row * 64],
      [row * 3, row * 50],
      [row * 500, 1],
    ]) {
      const blocks = file.planBlocks(maxBytes, Number.MAX_SAFE_INTEGER, firstBytes);
      let limit = Math.min(maxBytes, firstBytes);
      let next = 0;
      for (const b of blocks) {
        assert.equal(b.firstDocument, next, 'consecutive documents');
        // over the limit only as a single long document
        assert.ok(
          b.tokens * row <= limit || b.documents === 1,
          `${maxBytes}/${firstBytes}: ${b.tokens * row} > ${limit}`,
        );
        next += b.documents;
        limit = Math.min(maxBytes, limit * 2);
      }
      assert.equal(next, file.info.documents);
    }
    assert.throws(() => file.planBlocks(64, 10, 0), /firstBytes/);
    assert.throws(() => file.planBlocks(64, 10, Number.NaN), /firstBytes/);
  });

  test('8 numbers per block: file, offsets, counts, spans, int8 scales', () => {
    const rand = rng(runSeed + 71);
    const dir = fresh();
    for (let i = 0; i < 2; i++) {
      const w = i === 0 ? CorpusWriter.create(dir, { dim: 16, dtype: 'int8' }) : CorpusWriter.append(dir);
      w.add(randomRagged(randomLengths(rand, 9, 6), 16, 'float32', rand));
      w.commit();
    }
    const file = CorpusFile.open(dir);
    const blocks = file.planBlocks(20 * 5 * 3);
    const plan = buildStreamPlan(file, blocks);
    assert.equal(plan.blockFields.length, blocks.length * BLOCK_FIELDS);
    let spans = 0;
    blocks.forEach((b, i) => {
      const f = Array.from(plan.blockFields.subarray(i * BLOCK_FIELDS, (i + 1) * BLOCK_FIELDS));
      const seg = file.segments[b.segment].header;
      assert.deepEqual(f, [
        b.segment,
        seg.tokensSection.offset + b.firstToken * 16,
        b.tokens,
        b.firstDocument,
        b.documents,
        b.maxLength,
        spans,
        seg.scalesSection.offset + b.firstToken * 4,
      ]);
      for (let j = 0; j < b.documents; j++) {
        assert.equal(plan.lengths[spans + j], file.lengths[b.firstDocument + j]);
        assert.ok(plan.starts[spans + j] + plan.lengths[spans + j] <= b.tokens);
      }
      spans += b.documents;
    });
    assert.equal(spans, file.info.documents);
    assert.equal(plan.capacityTokens, Math.max(...blocks.map((b) => b.tokens)));
  });
});

describe('corpus store: crash safety', () => {
  function snapshot(dir: string) {
    const c = CorpusFile.open(dir);
    c.verify();
    return c.readDocuments(Array.from({ length: c.info.documents }, (_, i) => i));
  }

  for (const dtype of ['float16', 'int8'] as const) {
    test(`a failure at every write step of an append leaves the old corpus (${dtype})`, () => {
      const rand = rng(runSeed + 31);
      const dir = fresh();
      const base = randomRagged(randomLengths(rand, 6, 5), 8, 'float32', rand);
      const extra = randomRagged(randomLengths(rand, 4, 5), 8, 'float32', rand);
      const w = CorpusWriter.create(dir, { dim: 8, dtype });
      w.add(base);
      w.commit();
      const before = snapshot(dir);
      // Count the steps of a successful append (on a copy).
      const steps: string[] = [];
      const copy = fresh();
      fs.cpSync(dir, copy, { recursive: true });
      setCorpusFaultHook((s) => steps.push(s));
      try {
        const w2 = CorpusWriter.append(copy);
        w2.add(extra);
        w2.commit();
      } finally {
        setCorpusFaultHook(undefined);
      }
      const publish = steps.indexOf('publish-manifest');
      assert.ok(publish > 5, `steps: ${steps.join(', ')}`);
      for (let at = 0; at < steps.length; at++) {
        let seen = 0;
        setCorpusFaultHook((s) => {
          if (seen++ === at) throw new Error(`injected failure at ${s}`);
        });
        try {
          const w3 = CorpusWriter.append(dir);
          w3.add(extra);
          w3.commit();
          assert.fail('the injected failure should have thrown');
        } catch (e) {
          assert.match((e as Error).message, /injected failure/);
        } finally {
          setCorpusFaultHook(undefined);
        }
        const now = CorpusFile.open(dir);
        now.verify();
        // Until the manifest is renamed the old corpus is what readers see; after it, the new one.
        const expected = at <= publish ? before.count : before.count + extra.count;
        assert.equal(now.info.documents, expected, `failure at step ${at} (${steps[at]})`);
        if (at <= publish) sameBatchBits(snapshot(dir), before, `after a failure at ${steps[at]}`);
        else {
          // published: restore the base corpus for the next round
          fs.rmSync(dir, { recursive: true });
          fs.cpSync(copy, dir, { recursive: true });
          const m = CorpusFile.open(dir);
          assert.equal(m.info.documents, before.count + extra.count);
          // rebuild the base state
          fs.rmSync(dir, { recursive: true });
          const wb = CorpusWriter.create(dir, { dim: 8, dtype });
          wb.add(base);
          wb.commit();
        }
      }
      // leftovers of the failed attempts are removed by the next writer
      const w4 = CorpusWriter.append(dir);
      w4.add(extra);
      w4.commit();
      assert.deepEqual(fs.readdirSync(dir).sort(), ['MANIFEST', 'seg-000001.msxs', 'seg-000002.msxs']);
    });
  }

  test('killing a writer process at random moments never damages the corpus', async () => {
    const dir = fresh();
    const script = path.join(tmp, 'append-forever.mjs');
    const corpusModule = fileURLToPath(new URL('../src/io/corpus/index.js', import.meta.url));
    const tensorModule = fileURLToPath(new URL('../src/tensor.js', import.meta.url));
    fs.writeFileSync(
      script,
      `import { CorpusWriter } from ${JSON.stringify(corpusModule)};
import { raggedBatch } from ${JSON.stringify(tensorModule)};
const dir = process.argv[2];
const data = new Float32Array(2000 * 32).map((_, i) => Math.sin(i));
const offsets = Array.from({ length: 101 }, (_, i) => i * 20);
for (;;) {
  const w = CorpusWriter.append(dir);
  for (let r = 0; r < 20; r++) w.add(raggedBatch(data, offsets, { dim: 32 }));
  w.commit();
}
`,
    );
    const w = CorpusWriter.create(dir, { dim: 32 });
    w.add(randomRagged([5, 6], 32, 'float32', rng(5)));
    w.commit();
    const rand = rng(runSeed + 41);
    for (let round = 0; round < 4; round++) {
      const child = spawn(process.execPath, [script, dir], { stdio: 'ignore' });
      await new Promise((r) => setTimeout(r, 150 + rand() * 600));
      child.kill('SIGKILL');
      await new Promise((r) => child.on('exit', r));
      const c = CorpusFile.open(dir);
      c.verify();
      assert.equal(
        (c.info.documents - 2) % 2000,
        0,
        `round ${round}: whole segments only (${c.info.documents})`,
      );
    }
    // a dead writer's lock is taken over
    fs.writeFileSync(path.join(dir, 'LOCK'), '999999999');
    const w2 = CorpusWriter.append(dir);
    w2.add(randomRagged([1], 32, 'float32', rng(6)));
    w2.commit();
  });
});

describe('corpus store: damaged files are rejected with clear errors', () => {
  function build(): { dir: string; seg: string } {
    const dir = fresh();
    const w = CorpusWriter.create(dir, { dim: 16, ids: true });
    const docs = randomRagged([30, 10, 25], 16, 'float32', rng(7));
    w.add(docs, ['x', 'y', 'z']);
    w.commit();
    return { dir, seg: path.join(dir, 'seg-000001.msxs') };
  }
  function flip(file: string, at: number) {
    const fd = fs.openSync(file, 'r+');
    const b = Buffer.alloc(1);
    fs.readSync(fd, b, 0, 1, at);
    b[0] ^= 0x5a;
    fs.writeSync(fd, b, 0, 1, at);
    fs.closeSync(fd);
  }

  test('a flipped token byte: opens, and verify() names the damaged range', () => {
    const { dir } = build();
    flip(path.join(dir, 'seg-000001.msxs'), 4096 + 100);
    const c = CorpusFile.open(dir);
    assert.throws(() => c.verify(), /token data is corrupted in bytes \[0, /);
  });
  test('a truncated segment', () => {
    const { dir, seg } = build();
    fs.truncateSync(seg, fs.statSync(seg).size - 10);
    assert.throws(() => CorpusFile.open(dir), /truncated or replaced/);
  });
  test('a damaged header, offsets, ids or manifest', () => {
    for (const [what, pattern] of [
      [20, /header is corrupted/],
      ['offsets', /offsets are corrupted/],
      ['ids', /ids are corrupted/],
    ] as const) {
      const { dir, seg } = build();
      const c = CorpusFile.open(dir);
      const h = c.segments[0].header;
      const at =
        typeof what === 'number'
          ? what
          : what === 'offsets'
            ? h.offsetsSection.offset + 9
            : h.idsSection.offset + 30;
      flip(seg, at);
      assert.throws(() => CorpusFile.open(dir), pattern, String(what));
    }
    const { dir } = build();
    const m = path.join(dir, 'MANIFEST');
    fs.writeFileSync(m, fs.readFileSync(m, 'utf8').replace('"dim":16', '"dim":17'));
    assert.throws(() => CorpusFile.open(dir), /MANIFEST is corrupted/);
    fs.rmSync(m);
    assert.throws(() => CorpusFile.open(dir), /no MANIFEST/);
  });
  test('a missing segment, a file instead of a directory', () => {
    const { dir, seg } = build();
    fs.rmSync(seg);
    assert.throws(() => CorpusFile.open(dir), /missing/);
    const file = path.join(tmp, 'plain-file');
    fs.writeFileSync(file, 'x');
    assert.throws(() => CorpusFile.open(file), /a directory/);
  });
});

describe('corpus build from files (streamed)', () => {
  test('packed .npy + offsets, dense .safetensors + lengths, ids; equals the in-memory batch', async () => {
    const rand = rng(runSeed + 51);
    const dim = 8;
    const lengths = randomLengths(rand, 23, 9);
    const docs = randomRagged(lengths, dim, 'float32', rand);
    const npy = path.join(tmp, 'docs.npy');
    const off = path.join(tmp, 'off.npy');
    writeNpy(npy, {
      dtype: 'float32',
      shape: [docs.data.length / dim, dim],
      data: docs.data as Float32Array,
    });
    const offsets = [0];
    for (const l of lengths) offsets.push(offsets[offsets.length - 1] + l);
    writeNpy(off, { dtype: 'int64', shape: [offsets.length], data: BigInt64Array.from(offsets.map(BigInt)) });
    const ids = path.join(tmp, 'ids.txt');
    fs.writeFileSync(ids, `${lengths.map((_, i) => `doc-${i}`).join('\n')}\n`);
    const dir = fresh();
    const seen: number[] = [];
    // groupBytes small: many groups, documents never split
    const info = buildCorpusFromFilesSync({
      docs: npy,
      docOffsets: off,
      ids,
      out: dir,
      dtype: 'float32',
      groupBytes: 200,
      onProgress: (d) => seen.push(d),
    });
    assert.equal(info.documents, lengths.length);
    assert.ok(seen.length > 3);
    const c = openCorpus(dir);
    assert.equal(c.id(22), 'doc-22');
    sameBatchBits(c.readDocuments(lengths.map((_, i) => i)), docs, 'npy build');

    // dense [B, L, d] with real lengths, appended
    const L = 9;
    const dense = new Float32Array(lengths.length * L * dim).map(() => rand() - 0.5);
    const st = path.join(tmp, 'dense.safetensors');
    writeSafetensors(st, {
      tokens: { dtype: 'float32', shape: [lengths.length, L, dim], data: dense },
      lengths: { dtype: 'int32', shape: [lengths.length], data: Int32Array.from(lengths) },
    });
    // ids are unique across the corpus: the appended documents get their own
    const ids2 = path.join(tmp, 'ids2.txt');
    fs.writeFileSync(ids2, `${lengths.map((_, i) => `dense-${i}`).join('\n')}\n`);
    buildCorpusFromFilesSync({
      docs: `${st}:tokens`,
      docLengths: `${st}:lengths`,
      ids: ids2,
      out: dir,
      append: true,
      groupBytes: 300,
    });
    const c2 = openCorpus(dir);
    assert.equal(c2.info.documents, 2 * lengths.length);
    const second = c2.readDocuments(lengths.map((_, i) => lengths.length + i));
    for (let i = 0; i < lengths.length; i++) {
      const want = dense.subarray(i * L * dim, i * L * dim + lengths[i] * dim);
      const got = second.data.subarray(second.starts[i] * dim, (second.starts[i] + lengths[i]) * dim);
      assert.deepEqual(Array.from(got), Array.from(want), `dense document ${i}`);
    }
  });

  test('int8 tokens with their scales build an int8 corpus holding exactly those bytes', () => {
    const rand = rng(runSeed + 52);
    const lengths = randomLengths(rand, 15, 7);
    const q8 = quantize(randomRagged(lengths, 16, 'float32', rand), 'int8');
    const d8 = path.join(tmp, 'd8.npy');
    const s8 = path.join(tmp, 's8.npy');
    const l8 = path.join(tmp, 'l8.npy');
    writeNpy(d8, { dtype: 'int8', shape: [q8.data.length / 16, 16], data: q8.data as Int8Array });
    writeNpy(s8, { dtype: 'float32', shape: [q8.scales!.length], data: q8.scales! });
    writeNpy(l8, { dtype: 'int32', shape: [lengths.length], data: Int32Array.from(lengths) });
    const dir = fresh();
    const info = buildCorpusFromFilesSync({
      docs: d8,
      docLengths: l8,
      docScales: s8,
      out: dir,
      groupBytes: 64,
    });
    assert.equal(info.dtype, 'int8');
    sameBatchBits(openCorpus(dir).readDocuments(lengths.map((_, i) => i)), q8, 'int8 build');
    assert.throws(() => buildCorpusFromFilesSync({ docs: d8, docLengths: l8, out: fresh() }), /--doc-scales/);
  });

  test('openArraySource reads the same elements as loadArray', () => {
    const st = path.join(tmp, 'two.safetensors');
    const a = new Float32Array(60).map((_, i) => i * 0.5);
    writeSafetensors(st, {
      a: { dtype: 'float32', shape: [6, 10], data: a },
      b: { dtype: 'int64', shape: [3], data: BigInt64Array.from([1n, 2n, 3n]) },
    });
    const src = openArraySource(`${st}:a`);
    try {
      assert.deepEqual(src.shape, [6, 10]);
      assert.deepEqual(Array.from(src.read(13, 7) as Float32Array), Array.from(a.subarray(13, 20)));
      assert.throws(() => src.read(55, 6), /range/);
    } finally {
      src.close();
    }
    assert.deepEqual(Array.from(loadArray(`${st}:a`).data as Float32Array), Array.from(a));
    assert.throws(() => openArraySource(st), /tensor name/);
  });
});

describe('CLI: maxsim corpus / search --corpus', () => {
  const CLI = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
  const run = (...args: string[]) =>
    spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 120_000 });

  test('build, append, info (verifying), search: ids and the in-memory results', async () => {
    const rand = rng(runSeed + 61);
    const dim = 16;
    const lengths = randomLengths(rand, 30, 12);
    const docs = randomRagged(lengths, dim, 'float32', rand);
    const npy = path.join(tmp, 'cli-docs.npy');
    const lens = path.join(tmp, 'cli-lens.npy');
    writeNpy(npy, {
      dtype: 'float32',
      shape: [docs.data.length / dim, dim],
      data: docs.data as Float32Array,
    });
    writeNpy(lens, { dtype: 'int32', shape: [lengths.length], data: Int32Array.from(lengths) });
    const q = randomRagged([4, 4], dim, 'float32', rand);
    const qf = path.join(tmp, 'cli-q.npy');
    writeNpy(qf, { dtype: 'float32', shape: [2, 4, dim], data: q.data as Float32Array });
    const dir = fresh();
    let r = run('corpus', 'build', '--docs', npy, '--doc-lengths', lens, '--out', dir, '--dtype', 'fp32');
    assert.equal(r.status, 0, r.stderr);
    r = run('corpus', 'append', '--docs', npy, '--doc-lengths', lens, '--out', dir, '--json');
    assert.equal(r.status, 0, r.stderr);
    assert.equal(JSON.parse(r.stdout).documents, 60);
    r = run('corpus', 'info', dir);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /checksums\s+ok/);
    r = run('search', '--queries', qf, '--corpus', dir, '--top-k', '3', '--backend', 'cpu');
    assert.equal(r.status, 0, r.stderr);
    const lines = r.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const both = concatBatches([docs, docs]);
    const want = await topK(q, both, 3, { backend: 'cpu' });
    assert.deepEqual(
      lines.map((l) => l.results.map((h: { index: number; id: string }) => [h.index, h.id])),
      want.map((row) => row.map((h) => [h.index, String(h.index)])),
    );
    // errors: a second build over it; --docs and --corpus together; a damaged corpus
    r = run('corpus', 'build', '--docs', npy, '--doc-lengths', lens, '--out', dir);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /use append/);
    r = run('search', '--queries', qf, '--corpus', dir, '--pin', '--backend', 'cpu');
    assert.equal(r.status, 1);
    assert.match(r.stderr, /--pin/);
    r = run('search', '--queries', qf, '--corpus', dir, '--docs', npy);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /--corpus/);
    // a corpus scores as stored: on a float32 one --dtype int8 / fp8 would be ignored, so they are
    // refused; an int8 one takes --dtype int8 (what it holds) and refuses fp8
    for (const dtype of ['int8', 'fp8']) {
      r = run('search', '--queries', qf, '--corpus', dir, '--dtype', dtype, '--backend', 'cpu');
      assert.equal(r.status, 1, dtype);
      assert.match(r.stderr, new RegExp(`float32 here.*for --dtype but received --dtype ${dtype}`), dtype);
    }
    const dir8 = fresh();
    r = run('corpus', 'build', '--docs', npy, '--doc-lengths', lens, '--out', dir8, '--dtype', 'int8');
    assert.equal(r.status, 0, r.stderr);
    const asStored = run('search', '--queries', qf, '--corpus', dir8, '--backend', 'cpu');
    assert.equal(asStored.status, 0, asStored.stderr);
    r = run('search', '--queries', qf, '--corpus', dir8, '--dtype', 'int8', '--backend', 'cpu');
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout, asStored.stdout);
    r = run('search', '--queries', qf, '--corpus', dir8, '--dtype', 'fp8', '--backend', 'cpu');
    assert.equal(r.status, 1);
    assert.match(r.stderr, /or int8: .*int8 here.*for --dtype but received --dtype fp8/);
    fs.truncateSync(path.join(dir, 'seg-000002.msxs'), 5000);
    r = run('corpus', 'info', dir);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /truncated/);
  });
});
