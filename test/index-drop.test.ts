// `maxsim corpus index --drop-tokens` (src/io/corpus/index-drop.ts, src/plaid/merge.ts): a corpus
// that keeps only its index. Its search returns MaxSim of the decoded residuals (checked against a
// float64 brute force over the decoded vectors, which also ranks the same with the widest settings),
// said so in the stats; get / ids searches decode; a full scan and a rebuild are refused naming the
// option; appends are scanned exactly until encoded, then dropped too; deletes and compact keep the
// answers; info and the CLI show it; a failure at every write step of a drop and of its compaction
// leaves the old corpus or the new one, never a broken one.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import { describe, test } from 'node:test';
import { InvalidArgumentError } from '../src/errors.js';
import { CorpusFile, CorpusWriter, deleteDocuments, setCorpusFaultHook } from '../src/io/corpus/index.js';
import { indexCorpus } from '../src/io/corpus/index-build.js';
import { writeNpy } from '../src/io/npy.js';
import { indexSettings } from '../src/ops/corpus-index-search.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { decodeDocuments } from '../src/plaid/merge.js';
import type { TokenBatch } from '../src/tensor.js';
import { build, cli, D, docsOf, fresh, queriesOf, seed } from './plaid-corpus-helpers.js';

/** float64 MaxSim of query qi of `q` against document b of `docs` (float32 rows). */
function maxsim64(q: TokenBatch, qi: number, docs: TokenBatch, b: number): number {
  let total = 0;
  for (let i = 0; i < q.lengths[qi]; i++) {
    let best = Number.NEGATIVE_INFINITY;
    for (let j = 0; j < docs.lengths[b]; j++) {
      let s = 0;
      for (let k = 0; k < D; k++)
        s += q.data[(q.starts[qi] + i) * D + k] * docs.data[(docs.starts[b] + j) * D + k];
      best = Math.max(best, s);
    }
    total += best;
  }
  return total;
}

/** Every document of a corpus decoded from its (single-codec) index, by global index. */
function decodedAll(dir: string): TokenBatch {
  const f = CorpusFile.open(dir);
  try {
    const all = Array.from({ length: f.info.documents }, (_, i) => i);
    return f.readDocuments(all);
  } finally {
    f.close();
  }
}

const close = (a: number, b: number) => Math.abs(a - b) <= 1e-4 * Math.max(1, Math.abs(b));

describe('corpus index --drop-tokens', () => {
  test('search on decoded residuals (= float64 brute force), stats, get, refusals, size', async () => {
    const dir = fresh();
    build(dir, 150, 3);
    await indexCorpus(dir, { centroids: 32 });
    const kept = CorpusFile.open(dir);
    // the vectors the index decodes to, before the drop (the drop copies codes, never re-encodes)
    const before = kept.segments.map((_, si) => {
      const p = kept.index!.segment(si)!;
      return decodeDocuments(
        p,
        Array.from({ length: p.count }, (_, i) => i),
      );
    });
    const bytesBefore = kept.info.bytes + kept.info.index!.bytes;
    kept.close();
    const r = await indexCorpus(dir, { dropTokens: true });
    assert.equal(r.info.index!.tokens, 'dropped');
    assert.equal(r.info.segments, 1);
    assert.equal(r.info.documents, 450);
    const f = CorpusFile.open(dir);
    assert.equal(f.segments[0].header.tokensDropped, true);
    assert.equal(f.segments[0].header.tokensSection.bytes, 0);
    const bytesAfter = f.info.bytes + f.info.index!.bytes;
    assert.ok(bytesAfter < bytesBefore, `${bytesAfter} < ${bytesBefore}`);
    f.verify(); // checksums of a token-less segment
    f.close();
    assert.match(fs.readFileSync(`${dir}/MANIFEST`, 'utf8'), /"version":4\b/);

    // decoded documents: bit for bit what the index decoded to before the drop
    const decoded = decodedAll(dir);
    let at = 0;
    for (const part of before)
      for (let b = 0; b < part.count; b++, at++) {
        const got = decoded.data.subarray(
          decoded.starts[at] * D,
          (decoded.starts[at] + decoded.lengths[at]) * D,
        );
        const want = part.data.subarray(part.starts[b] * D, (part.starts[b] + part.lengths[b]) * D);
        assert.deepEqual(got, want, `document ${at}`);
      }

    const c = openCorpus(dir);
    const q = queriesOf(6, seed + 21);
    const wide = { nprobe: 32, candidates: 450 };
    const res = await c.searchWithStats(q, { topK: 10, index: wide });
    assert.equal(res.stats.path, 'index');
    assert.equal(res.stats.scores, 'residual');
    assert.equal(res.stats.index!.scores, 'residual');
    res.hits.forEach((row, qi) => {
      assert.equal(row.length, 10);
      for (const h of row)
        assert.ok(close(h.score, maxsim64(q, qi, decoded, h.index)), `score of ${h.index}`);
      // the widest settings rank as the brute force over every decoded document (ties aside)
      const brute = Array.from({ length: decoded.count }, (_, b) => maxsim64(q, qi, decoded, b)).sort(
        (a, b) => b - a,
      );
      assert.ok(close(row[9].score, brute[9]), `10th score ${row[9].score} vs ${brute[9]}`);
    });
    // no token pruning by default here (a pruned token's score would be its centroid's alone; with
    // prune 0 the 10th score above came back lower than the brute force's), unless asked for
    assert.equal(indexSettings(undefined, 10, 32, 450, true).prune, Number.POSITIVE_INFINITY);
    assert.equal(indexSettings({ prune: 0 }, 10, 32, 450, true).prune, 0);
    assert.equal(indexSettings(undefined, 10, 32, 450).prune, 0.25);
    // default settings: still residual scores of the returned documents
    const def = await c.searchWithStats(q, { topK: 5 });
    def.hits.forEach((row, qi) => {
      for (const h of row) assert.ok(close(h.score, maxsim64(q, qi, decoded, h.index)));
    });
    // ids: decoded and scored
    const ids = ['s0d3', 's1d7', 's2d9'];
    const byIds = await c.searchWithStats(q, { topK: 3, ids, backend: 'cpu' });
    assert.equal(byIds.stats.scores, 'residual');
    byIds.hits.forEach((row, qi) => {
      for (const h of row) assert.ok(close(h.score, maxsim64(q, qi, decoded, h.index)));
    });
    assert.equal(c.get(['s1d7']).dtype, 'float32');
    await assert.rejects(
      c.search(q, { topK: 3, index: false }),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'index',
    );
    // its residual scores are final, so the ranking-only float16 stages are refused on any backend
    await assert.rejects(
      c.search(q, { topK: 3, index: { precision: 'float16' } }),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'index.precision',
    );
    await assert.rejects(
      indexCorpus(dir, { rebuild: true }),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'rebuild',
    );
    c.close();
  });

  test('an int8 corpus: dropped, searched on residuals, its documents decoded', async () => {
    const dir = fresh();
    build(dir, 80, 2, 'int8');
    await indexCorpus(dir, { centroids: 16, dropTokens: true });
    const decoded = decodedAll(dir);
    assert.equal(decoded.dtype, 'float32');
    const c = openCorpus(dir);
    const q = queriesOf(3, seed + 41);
    const r = await c.searchWithStats(q, { topK: 5, index: { nprobe: 16, candidates: 160 } });
    assert.equal(r.stats.scores, 'residual');
    r.hits.forEach((row, qi) => {
      for (const h of row) assert.ok(close(h.score, maxsim64(q, qi, decoded, h.index)));
    });
    c.close();
  });

  test('append (scanned, then encoded and dropped), delete, compact', async () => {
    const dir = fresh();
    build(dir, 100, 2);
    await indexCorpus(dir, { centroids: 32, dropTokens: true });
    const w = CorpusWriter.append(dir);
    w.add(
      docsOf(40, 300),
      Array.from({ length: 40 }, (_, i) => `a${i}`),
    );
    w.commit();
    const c = openCorpus(dir);
    // queries that are appended documents find themselves among the first hits: exactly scored in
    // the scanned segment, they compete with residual scores of dropped documents, which can pass a
    // document's self score (decoded tokens are not unit vectors), so rank 1 is not guaranteed
    const self = docsOf(2, 300);
    const finds = (hits: { id: string }[][]) => {
      hits.forEach((row, i) => {
        assert.ok(
          row.some((h) => h.id === `a${i}`),
          `a${i} among ${row.map((h) => h.id).join(', ')} (seed ${seed})`,
        );
      });
    };
    let r = await c.searchWithStats(self, { topK: 3 });
    assert.equal(r.stats.index!.scannedDocuments, 40);
    finds(r.hits);
    const e = await indexCorpus(dir);
    assert.equal(e.encoded, 1);
    assert.equal(e.info.segments, 2);
    assert.equal(e.info.index!.unindexedSegments, 0);
    // every document (240) a candidate: the residual ranking alone decides (the default candidates may miss)
    r = await c.searchWithStats(self, { topK: 3, index: { nprobe: 32, candidates: 240, rescore: 240 } });
    assert.equal(r.stats.index!.scannedDocuments, 0);
    // the appended documents now decoded too: the ranking is the float64 brute force over every
    // decoded document (ties aside)
    const decoded = decodedAll(dir);
    r.hits.forEach((row, qi) => {
      const brute = Array.from({ length: decoded.count }, (_, b) => maxsim64(self, qi, decoded, b)).sort(
        (a, b) => b - a,
      );
      row.forEach((h, j) => {
        assert.ok(close(h.score, maxsim64(self, qi, decoded, h.index)), `score of ${h.id} (seed ${seed})`);
        assert.ok(
          close(h.score, brute[j]),
          `hit ${j} of query ${qi}: ${h.score} vs ${brute[j]} (seed ${seed})`,
        );
      });
    });
    const q = queriesOf(5, seed + 5);
    deleteDocuments(dir, ['s0d1', 's1d2', 'a3']);
    const beforeCompact = await c.search(q, { topK: 8, index: { nprobe: 32, candidates: 240 } });
    const info = CorpusWriter.compact(dir);
    assert.equal(info.segments, 1);
    assert.equal(info.deleted, 0);
    assert.equal(info.documents, 237);
    assert.equal(info.index!.tokens, 'dropped');
    const after = await c.search(q, { topK: 8, index: { nprobe: 32, candidates: 240 } });
    assert.deepEqual(
      after.map((row) => row.map((h) => [h.id, h.score])),
      beforeCompact.map((row) => row.map((h) => [h.id, h.score])),
    );
    assert.ok(fs.readdirSync(dir).filter((n) => n.startsWith('seg-')).length === 1);
    c.close();
  });

  test('CLI: corpus index --drop-tokens, info, --backend', async () => {
    const dir = fresh();
    build(dir, 60, 1);
    const r = cli('corpus', 'index', dir, '--centroids', '16', '--drop-tokens', '--json');
    assert.equal(r.status, 0, r.stderr);
    assert.equal(JSON.parse(r.stdout).index.tokens, 'dropped');
    const text = cli('corpus', 'info', dir);
    assert.equal(text.status, 0, text.stderr);
    assert.match(text.stdout, /dropped: only the index is stored/);
    const q = queriesOf(1, seed);
    writeNpy(`${dir}.q.npy`, { dtype: 'float32', shape: [q.lengths[0], D], data: q.data as Float32Array });
    const s = cli('search', '--corpus', dir, '--queries', `${dir}.q.npy`, '--top-k', '3');
    assert.equal(s.status, 0, s.stderr);
    assert.match(s.stderr, /decoded residuals/);
    const exact = cli('search', '--corpus', dir, '--queries', `${dir}.q.npy`, '--exact');
    assert.equal(exact.status, 1);
    assert.match(exact.stderr, /no tokens to scan for --exact but received --exact/);
    const cuda = cli('corpus', 'index', dir, '--backend', 'cuda');
    assert.notEqual(cuda.status, 0);
    assert.match(cuda.stderr, /backend/);
    const cpu = cli('corpus', 'index', dir, '--backend', 'cpu');
    assert.equal(cpu.status, 0, cpu.stderr);
    const bad = cli('corpus', 'index', dir, '--backend', 'tpu');
    assert.notEqual(bad.status, 0);
    await assert.rejects(
      indexCorpus(dir, { backend: 'tpu' as never }),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'backend',
    );
  });

  test('a failure at every write step of a drop and of its compaction', async () => {
    for (const [prepare, act] of [
      [
        async (d: string) => {
          build(d, 40, 2);
          await indexCorpus(d, { centroids: 8 });
        },
        (d: string) => indexCorpus(d, { dropTokens: true }),
      ],
      [
        async (d: string) => {
          build(d, 40, 2);
          await indexCorpus(d, { centroids: 8, dropTokens: true });
          deleteDocuments(d, ['s0d1']);
        },
        async (d: string) => CorpusWriter.compact(d),
      ],
      [
        async (d: string) => {
          build(d, 40, 1);
          await indexCorpus(d, { centroids: 8, dropTokens: true });
          const w = CorpusWriter.append(d);
          w.add(
            docsOf(20, 600),
            Array.from({ length: 20 }, (_, i) => `a${i}`),
          );
          w.commit();
        },
        (d: string) => indexCorpus(d),
      ],
    ] as const) {
      const proto = fresh();
      await prepare(proto);
      const steps: string[] = [];
      const probe = fresh();
      fs.cpSync(proto, probe, { recursive: true });
      setCorpusFaultHook((s) => steps.push(s));
      try {
        await act(probe);
      } finally {
        setCorpusFaultHook(undefined);
      }
      const publish = steps.indexOf('publish-manifest');
      assert.ok(publish > 2, steps.join(', '));
      const g0 = CorpusFile.open(proto).info.generation;
      const q = queriesOf(2, seed + 1);
      const want = await openCorpus(probe).search(q, { topK: 5, index: { nprobe: 8, candidates: 80 } });
      for (let at = 0; at < steps.length; at++) {
        const dir = fresh();
        fs.cpSync(proto, dir, { recursive: true });
        let seen = 0;
        setCorpusFaultHook((s) => {
          if (seen++ === at) throw new Error(`injected failure at ${s}`);
        });
        try {
          await assert.rejects(async () => {
            await act(dir);
          }, /injected failure/);
        } finally {
          setCorpusFaultHook(undefined);
        }
        const f = CorpusFile.open(dir);
        assert.equal(f.info.generation, at <= publish ? g0 : g0 + 1, `failure at step ${at} (${steps[at]})`);
        f.close();
        const c = openCorpus(dir);
        const got = await c.search(q, { topK: 5, index: { nprobe: 8, candidates: 80 } });
        if (at > publish)
          assert.deepEqual(
            got.map((row) => row.map((h) => h.id)),
            want.map((row) => row.map((h) => h.id)),
          );
        c.close();
        // the next writer leaves no temporaries or unnamed files
        const w = CorpusWriter.append(dir);
        w.add(docsOf(1, 900), [`after-${at}`]);
        w.commit();
        assert.deepEqual(
          fs.readdirSync(dir).filter((x) => x.endsWith('.tmp')),
          [],
          `temporaries after step ${at}`,
        );
      }
    }
  });

  test('drift on a dropped corpus: shown, never advising the --rebuild it refuses', async () => {
    const dir = fresh();
    build(dir, 100, 1);
    await indexCorpus(dir, { centroids: 16, dropTokens: true });
    const w = CorpusWriter.append(dir);
    w.add(
      docsOf(60, 600, 3),
      Array.from({ length: 60 }, (_, i) => `far${i}`),
    );
    w.commit();
    const far = await indexCorpus(dir);
    assert.ok(far.drift > 0.05, `drift ${far.drift}`);
    assert.equal(far.rebuildAdvised, false);
    assert.equal(far.info.index!.rebuildAdvised, false);
    await assert.rejects(
      indexCorpus(dir, { rebuild: true }),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'rebuild',
    );
    const info = cli('corpus', 'info', dir);
    assert.equal(info.status, 0, info.stderr);
    assert.doesNotMatch(info.stdout, /--rebuild/);
    assert.match(info.stdout, /the tokens were dropped/);
  });
});
