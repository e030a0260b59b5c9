// Cancellation (src/abort.ts): an AbortSignal on corpus search, corpus build / append, training and
// the scoring jobs. An aborted operation rejects with an AbortError, publishes nothing, and leaves the
// process (thread pool, corpus, lock) fit for the next call. Abort points are drawn from the seed and
// tied to progress (block / group n), so each run is reproducible; timer-driven aborts check that a
// native job in flight stops early.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { referenceMaxsim } from '../src/backends/reference.js';
import { InvalidArgumentError } from '../src/errors.js';
import { CorpusWriter } from '../src/io/corpus/index.js';
import { buildCorpusFromFiles, buildCorpusFromFilesSync } from '../src/io/corpus-build.js';
import { writeNpy } from '../src/io/npy.js';
import { type CorpusHit, openCorpus } from '../src/ops/corpus-search.js';
import { maxsim, maxsimSync, topK } from '../src/ops/maxsim.js';
import { quantize } from '../src/ops/quantize.js';
import { contrastiveStep, maxsimTrain } from '../src/ops/train.js';
import { twoStageTopK } from '../src/ops/two-stage.js';
import { type TokenBatch, tokenMatrix } from '../src/tensor.js';
import { randomDense, randomFloats, randomRagged, rng, runSeed } from './helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-abort-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));
let serial = 0;
const fresh = () => path.join(tmp, `c${serial++}.msx`);

const isAbort = (e: unknown) => {
  assert.equal((e as Error).name, 'AbortError', `expected an AbortError, got ${String(e)}`);
  return true;
};

function lengthsOf(rand: () => number, n: number, max: number): number[] {
  return Array.from({ length: n }, (_, i) => (i % 11 === 5 ? 0 : 1 + Math.floor(rand() * max)));
}

/** A corpus written in `parts` segments; returns its directory. */
function writeCorpus(dir: string, parts: TokenBatch[], dtype: 'float16' | 'int8' = 'float16'): string {
  for (const [i, docs] of parts.entries()) {
    const w =
      i === 0 ? CorpusWriter.create(dir, { dim: docs.dim, dtype, ids: false }) : CorpusWriter.append(dir);
    w.add(dtype === 'int8' ? quantize(docs, 'int8') : docs);
    w.commit();
  }
  return dir;
}

const listing = (dir: string) => fs.readdirSync(dir).sort();
const plain = (hits: CorpusHit[][]) => hits.map((r) => r.map((h) => [h.index, h.score]));

describe('corpus search', () => {
  const rand = rng(runSeed + 1);
  const dim = 32;
  let dir: string;
  let queries: TokenBatch;
  let expected: CorpusHit[][];
  before(async () => {
    dir = writeCorpus(fresh(), [
      randomRagged(lengthsOf(rand, 1500, 40), dim, 'float32', rand),
      randomRagged(lengthsOf(rand, 1500, 40), dim, 'float32', rand),
    ]);
    queries = randomRagged([32, 7, 20, 1, 32, 16], dim, 'float32', rand);
    expected = await openCorpus(dir).search(queries, { topK: 7, backend: 'cpu' });
  });

  test('aborted at a random block (seeded): AbortError at once, later searches as before', async () => {
    const corpus = openCorpus(dir);
    const r = rng(runSeed + 2);
    for (let trial = 0; trial < 6; trial++) {
      const controller = new AbortController();
      const at = Math.floor(r() * 20); // of ~60 blocks of 16 KiB
      let blocksAfterAbort = 0;
      let seen = 0;
      await assert.rejects(
        corpus.search(queries, {
          topK: 7,
          backend: 'cpu',
          blockBytes: 16 * 1024,
          signal: controller.signal,
          onProgress: () => {
            if (controller.signal.aborted) blocksAfterAbort++;
            if (seen++ === at) controller.abort();
          },
        }),
        isAbort,
      );
      assert.equal(blocksAfterAbort, 0, `trial ${trial}: a block was scored after the abort at block ${at}`);
      const again = await corpus.search(queries, { topK: 7, backend: 'cpu', blockBytes: 16 * 1024 });
      assert.deepEqual(plain(again), plain(expected));
    }
  });

  test('aborted by a timer while a block is scored: rejects within milliseconds', async () => {
    const corpus = openCorpus(dir);
    // one block, enough queries that its native job runs far longer than the abort takes to land
    const many = randomRagged(
      Array.from({ length: 400 }, () => 32),
      dim,
      'float32',
      rand,
    );
    const controller = new AbortController();
    const started = performance.now();
    const search = corpus.search(many, { topK: 3, backend: 'cpu', signal: controller.signal });
    let abortedAt = 0;
    setTimeout(() => {
      abortedAt = performance.now();
      controller.abort();
    }, 30);
    await assert.rejects(search, isAbort);
    const latency = performance.now() - abortedAt;
    console.log(
      `# corpus search aborted 30 ms in: rejected ${latency.toFixed(1)} ms after the abort (${(performance.now() - started).toFixed(0)} ms in all)`,
    );
    assert.ok(latency < 500, `rejected ${latency} ms after the abort`);
    assert.deepEqual(plain(await corpus.search(queries, { topK: 7, backend: 'cpu' })), plain(expected));
  });

  test('int8 corpus: aborted at a block, then searches as before', async () => {
    const r8 = rng(runSeed + 3);
    const d8 = writeCorpus(fresh(), [randomRagged(lengthsOf(r8, 800, 30), dim, 'float32', r8)], 'int8');
    const corpus = openCorpus(d8);
    const want = await corpus.search(queries, { topK: 5, backend: 'cpu' });
    const controller = new AbortController();
    let n = 0;
    await assert.rejects(
      corpus.search(queries, {
        topK: 5,
        backend: 'cpu',
        blockBytes: 4096,
        signal: controller.signal,
        onProgress: () => {
          if (n++ === 2) controller.abort();
        },
      }),
      isAbort,
    );
    assert.deepEqual(plain(await corpus.search(queries, { topK: 5, backend: 'cpu' })), plain(want));
  });
});

describe('corpus build / append', () => {
  const dim = 16;
  const rand = rng(runSeed + 10);

  function inputFiles(count: number, tag: string) {
    const lengths = lengthsOf(rand, count, 9);
    const docs = randomRagged(lengths, dim, 'float32', rand);
    const npy = path.join(tmp, `${tag}-docs.npy`);
    const off = path.join(tmp, `${tag}-off.npy`);
    const offsets = [0];
    for (const l of lengths) offsets.push(offsets[offsets.length - 1] + l);
    writeNpy(npy, { dtype: 'float32', shape: [offsets[count], dim], data: docs.data as Float32Array });
    writeNpy(off, { dtype: 'int64', shape: [offsets.length], data: BigInt64Array.from(offsets.map(BigInt)) });
    return { docs: npy, docOffsets: off };
  }

  test('append aborted at a random group (seeded): the previous corpus verifies and searches as before, no temporaries', async () => {
    const base = writeCorpus(fresh(), [randomRagged(lengthsOf(rand, 300, 9), dim, 'float32', rand)]);
    const input = inputFiles(2000, 'append');
    const queries = randomRagged([9, 4, 1], dim, 'float32', rand);
    const before = await openCorpus(base).search(queries, { topK: 5, backend: 'cpu' });
    const files = listing(base);
    const infoBefore = openCorpus(base).info;
    const r = rng(runSeed + 11);
    for (let trial = 0; trial < 6; trial++) {
      const controller = new AbortController();
      const at = 1 + Math.floor(r() * 8); // of ~150 groups of 4 KiB
      let groups = 0;
      const options = {
        ...input,
        out: base,
        append: true,
        groupBytes: 4096,
        signal: controller.signal,
        onProgress: () => {
          if (++groups === at) controller.abort();
        },
      };
      // the synchronous build sees aborts from its callbacks; the async one from anywhere
      if (trial % 2 === 0) assert.throws(() => buildCorpusFromFilesSync(options), isAbort);
      else await assert.rejects(buildCorpusFromFiles(options), isAbort);
      assert.deepEqual(listing(base), files, `trial ${trial}: files left behind`);
      const corpus = openCorpus(base);
      corpus.verify();
      assert.equal(corpus.info.documents, infoBefore.documents);
      assert.deepEqual(plain(await corpus.search(queries, { topK: 5, backend: 'cpu' })), plain(before));
    }
    // and the corpus takes the same append afterwards (the lock was released)
    const grown = buildCorpusFromFilesSync({ ...input, out: base, append: true, groupBytes: 4096 });
    assert.equal(grown.documents, infoBefore.documents + 2000);
    openCorpus(base).verify();
  });

  test('CorpusWriter with a signal: add / commit after the abort abort the writer; nothing is published', () => {
    const base = writeCorpus(fresh(), [randomRagged(lengthsOf(rand, 50, 9), dim, 'float32', rand)]);
    const files = listing(base);
    for (const at of ['add', 'commit'] as const) {
      const controller = new AbortController();
      const w = CorpusWriter.append(base, { signal: controller.signal });
      w.add(randomRagged([3, 4], dim, 'float32', rand));
      assert.notDeepEqual(listing(base), files); // its temporary segment and the lock
      controller.abort();
      if (at === 'add') assert.throws(() => w.add(randomRagged([2], dim, 'float32', rand)), isAbort);
      else assert.throws(() => w.commit(), isAbort);
      assert.deepEqual(listing(base), files);
      assert.equal(openCorpus(base).info.documents, 50);
    }
    const out = fresh();
    const c = new AbortController();
    const w = CorpusWriter.create(out, { dim, signal: c.signal });
    w.add(randomRagged([3], dim, 'float32', rand));
    c.abort();
    assert.throws(() => w.commit(), isAbort);
    assert.equal(fs.existsSync(out), false);
    assert.throws(() => CorpusWriter.append(base, { signal: AbortSignal.abort() }), isAbort);
    assert.throws(
      () => CorpusWriter.create(fresh(), { dim, signal: 'x' as unknown as AbortSignal }),
      /signal/,
    );
    // the lock was released every time
    const last = CorpusWriter.append(base);
    last.add(randomRagged([1], dim, 'float32', rand));
    assert.equal(last.commit().documents, 51);
  });

  test('build aborted by a timer (async): no directory is left, the same build then succeeds', async () => {
    const input = inputFiles(20000, 'build');
    const out = fresh();
    const controller = new AbortController();
    let groups = 0;
    const build = buildCorpusFromFiles({
      ...input,
      out,
      groupBytes: 8192,
      signal: controller.signal,
      onProgress: () => {
        // the abort comes from a timer, between groups, as a SIGINT handler's would
        if (++groups === 3) setTimeout(() => controller.abort(), 0);
      },
    });
    await assert.rejects(build, isAbort);
    assert.ok(groups >= 3 && groups < 20, `${groups} groups written`);
    assert.equal(fs.existsSync(out), false, 'the aborted build left its directory');
    const built = await buildCorpusFromFiles({ ...input, out, groupBytes: 8192 });
    assert.equal(built.documents, 20000);
    openCorpus(out).verify();
  });
});

describe('scoring jobs', () => {
  test('a large CPU maxsim aborted mid-job rejects within milliseconds; the pool is fine afterwards', async () => {
    const rand = rng(runSeed + 20);
    const dim = 128;
    // 48 queries x 32 tokens against 4000 documents x 64 tokens: ~100 GFLOP, seconds on 2 cores
    const queries = randomDense(48, 32, dim, 'float16', rand);
    const docs = randomDense(4000, 64, dim, 'float16', rand);
    const timings: string[] = [];
    for (const delay of [20, 150]) {
      const controller = new AbortController();
      const started = performance.now();
      const job = maxsim(queries, docs, { backend: 'cpu', signal: controller.signal });
      let abortedAt = 0;
      setTimeout(() => {
        abortedAt = performance.now();
        controller.abort();
      }, delay);
      await assert.rejects(job, isAbort);
      const latency = performance.now() - abortedAt;
      timings.push(
        `aborted at ${delay} ms: rejected ${latency.toFixed(1)} ms later (${(performance.now() - started).toFixed(0)} ms in all)`,
      );
      assert.ok(latency < 500, `rejected ${latency} ms after the abort`);
    }
    // the job itself, unaborted, on a tenth of the documents (for scale)
    const tenth: TokenBatch = {
      ...docs,
      count: 400,
      data: docs.data.subarray(0, 400 * 64 * dim),
    } as TokenBatch;
    const t0 = performance.now();
    await maxsim(
      queries,
      {
        ...tenth,
        starts: docs.starts.subarray(0, 400),
        lengths: docs.lengths.subarray(0, 400),
      } as TokenBatch,
      { backend: 'cpu' },
    );
    timings.push(`the full job would take ~${((performance.now() - t0) * 10).toFixed(0)} ms`);
    console.log(`# maxsim 48x32 vs 4000x64, d=128, fp16: ${timings.join('; ')}`);
    // the pool still scores right
    const small = randomRagged([5, 1, 9, 3], dim, 'float32', rand);
    const q = randomRagged([4, 2], dim, 'float32', rand);
    const got = await maxsim(q, small, { backend: 'cpu', signal: new AbortController().signal });
    const want = referenceMaxsim(q, small);
    for (let i = 0; i < want.length; i++) assert.ok(Math.abs(got.data[i] - want[i]) < 1e-3);
  });

  test('int8 maxsim aborted mid-job rejects; topK / twoStageTopK carry the signal', async () => {
    const rand = rng(runSeed + 21);
    const dim = 64;
    const docs = quantize(randomDense(3000, 64, dim, 'float32', rand), 'int8');
    const queries = quantize(randomDense(64, 32, dim, 'float32', rand), 'int8');
    const controller = new AbortController();
    const job = maxsim(queries, docs, { backend: 'cpu', signal: controller.signal });
    setTimeout(() => controller.abort(), 10);
    await assert.rejects(job, isAbort);
    const c2 = new AbortController();
    const q1 = tokenMatrix(randomFloats(32 * dim, rand), 32, dim);
    const fdocs = randomDense(3000, 64, dim, 'float32', rand);
    const p = topK(q1, fdocs, 5, { backend: 'cpu', signal: c2.signal });
    c2.abort();
    await assert.rejects(p, isAbort);
    const fq = randomDense(4, 8, dim, 'float32', rand);
    const c3 = new AbortController();
    const p3 = topK(fq, fdocs, 5, { backend: 'cpu', signal: c3.signal });
    c3.abort();
    await assert.rejects(p3, isAbort);
    const c4 = new AbortController();
    const fdocs8 = quantize(fdocs, 'int8');
    const p4 = twoStageTopK(fq, fdocs, fdocs8, 5, {
      backend: 'cpu',
      prefilter: 'always',
      signal: c4.signal,
    });
    c4.abort(); // the int8 scan is in flight
    await assert.rejects(p4, isAbort);
    // an unaborted signal changes nothing
    const live = new AbortController().signal;
    const hits = await topK(fq, fdocs, 5, { backend: 'cpu', signal: live });
    assert.deepEqual(hits, await topK(fq, fdocs, 5, { backend: 'cpu' }));
    assert.deepEqual(
      await twoStageTopK(fq, fdocs, fdocs8, 5, { backend: 'cpu', prefilter: 'always', signal: live }),
      await twoStageTopK(fq, fdocs, fdocs8, 5, { backend: 'cpu', prefilter: 'always' }),
    );
  });
});

describe('training', () => {
  const rand = rng(runSeed + 30);
  const dim = 16;
  const queries = randomRagged([6, 3, 8, 5], dim, 'float32', rand);
  const docs = randomRagged([10, 4, 12, 7], dim, 'float32', rand);

  test('contrastiveStep aborted during its forward pass rejects; the next step equals an unaborted one', async () => {
    const want = await contrastiveStep(queries, docs, { backend: 'cpu' });
    const controller = new AbortController();
    const step = contrastiveStep(queries, docs, { backend: 'cpu', signal: controller.signal });
    controller.abort(); // the forward native call is in flight: its result is dropped, no backward runs
    await assert.rejects(step, isAbort);
    const got = await contrastiveStep(queries, docs, {
      backend: 'cpu',
      signal: new AbortController().signal,
    });
    assert.equal(got.loss, want.loss);
    assert.deepEqual(Array.from(got.dQ), Array.from(want.dQ));
    assert.deepEqual(Array.from(got.dD), Array.from(want.dD));
  });

  test('a long training forward pass: the abort rejects at once, the pass ends in the background', async () => {
    const r = rng(runSeed + 31);
    const q = randomDense(64, 32, 128, 'float32', r);
    const d = randomDense(300, 64, 128, 'float32', r);
    const controller = new AbortController();
    const step = contrastiveStep(q, d, {
      backend: 'cpu',
      labels: new Int32Array(64),
      signal: controller.signal,
    });
    await new Promise((resolve) => setTimeout(resolve, 20));
    const t0 = performance.now();
    controller.abort();
    await assert.rejects(step, isAbort);
    const latency = performance.now() - t0;
    console.log(
      `# contrastiveStep 64x32 vs 300x64, d=128: rejected ${latency.toFixed(1)} ms after the abort`,
    );
    assert.ok(latency < 50, `rejected ${latency} ms after the abort`);
    // a step right behind it is right (the pool finishes the dropped pass first)
    const want = await contrastiveStep(queries, docs, { backend: 'cpu' });
    assert.ok(Number.isFinite(want.loss));
  });

  test('maxsimTrain: an abort after the forward pass cancels its backward', async () => {
    const controller = new AbortController();
    const forward = await maxsimTrain(queries, docs, { backend: 'cpu', signal: controller.signal });
    controller.abort();
    await assert.rejects(forward.backward(new Float32Array(forward.scores.length).fill(1)), isAbort);
  });
});

describe('already aborted signals and bad signals', () => {
  const rand = rng(runSeed + 40);
  const dim = 8;
  const docs = randomRagged([3, 5, 2], dim, 'float32', rand);
  const queries = randomRagged([2, 4], dim, 'float32', rand);
  const q1 = tokenMatrix(randomFloats(3 * dim, rand), 3, dim);
  const aborted = AbortSignal.abort();

  test('every operation rejects before any work, with the AbortError (or the reason given)', async () => {
    const dir = writeCorpus(fresh(), [docs]);
    const files = listing(dir);
    const corpus = openCorpus(dir);
    await assert.rejects(corpus.search(queries, { backend: 'cpu', signal: aborted }), isAbort);
    await assert.rejects(maxsim(q1, docs, { backend: 'cpu', signal: aborted }), isAbort);
    await assert.rejects(maxsim(queries, docs, { backend: 'cpu', signal: aborted }), isAbort);
    assert.throws(() => maxsimSync(queries, docs, { backend: 'cpu', signal: aborted }), isAbort);
    await assert.rejects(topK(q1, docs, 2, { backend: 'cpu', signal: aborted }), isAbort);
    await assert.rejects(topK(queries, docs, 2, { backend: 'cpu', signal: aborted }), isAbort);
    await assert.rejects(maxsimTrain(queries, docs, { backend: 'cpu', signal: aborted }), isAbort);
    await assert.rejects(contrastiveStep(queries, docs, { backend: 'cpu', signal: aborted }), isAbort);
    const npy = path.join(tmp, 'aborted-docs.npy');
    writeNpy(npy, { dtype: 'float32', shape: [10, dim], data: docs.data as Float32Array });
    const off = path.join(tmp, 'aborted-off.npy');
    writeNpy(off, { dtype: 'int64', shape: [4], data: BigInt64Array.from([0n, 3n, 8n, 10n]) });
    const out = fresh();
    const build = { docs: npy, docOffsets: off, out, signal: aborted };
    assert.throws(() => buildCorpusFromFilesSync(build), isAbort);
    await assert.rejects(buildCorpusFromFiles(build), isAbort);
    assert.throws(() => buildCorpusFromFilesSync({ ...build, out: dir, append: true }), isAbort);
    assert.equal(fs.existsSync(out), false);
    assert.deepEqual(listing(dir), files);
    // a reason of the caller's comes back as it is, like fetch()
    const reason = new Error('stop now');
    await assert.rejects(
      maxsim(queries, docs, { backend: 'cpu', signal: AbortSignal.abort(reason) }),
      (e) => e === reason,
    );
  });

  test('a signal that is not an AbortSignal is an InvalidArgumentError naming it', async () => {
    const corpus = openCorpus(writeCorpus(fresh(), [docs]));
    for (const bad of [null, {}, 'abort', new AbortController()] as unknown[]) {
      const signal = bad as AbortSignal;
      await assert.rejects(corpus.search(queries, { backend: 'cpu', signal }), InvalidArgumentError);
      await assert.rejects(maxsim(queries, docs, { backend: 'cpu', signal }), /signal/);
      await assert.rejects(maxsimTrain(queries, docs, { backend: 'cpu', signal }), /signal/);
      assert.throws(() => buildCorpusFromFilesSync({ docs: 'x.npy', out: fresh(), signal }), /signal/);
    }
  });
});

// SIGINT is sent once the command is past its first block or group (its first progress line, printed
// at every step with MAXSIM_PROGRESS_SECONDS=0): by then its handler is installed and work remains.
function runUntilSigint(args: string[]): Promise<{ code: number | null; stderr: string; stdout: string }> {
  const CLI = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, MAXSIM_PROGRESS_SECONDS: '0' },
    });
    let stderr = '';
    let stdout = '';
    let sent = false;
    const killer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.stderr.on('data', (b) => {
      stderr += b;
      if (!sent && stderr.includes('\n')) {
        sent = true;
        child.kill('SIGINT');
      }
    });
    child.stdout.on('data', (b) => {
      stdout += b;
    });
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(killer);
      resolve({ code, stderr, stdout });
    });
  });
}

describe('CLI: SIGINT', { skip: process.platform === 'win32' && 'POSIX signals' }, () => {
  const dim = 8;
  const rand = rng(runSeed + 50);
  // many tiny documents: 65,536 per group, so an append runs several groups
  const count = 200_000;
  const lengths = Array.from({ length: count }, () => 2);
  let base: string;
  let files: string[];
  let npy: string;
  let off: string;

  // progress lines aside, what the command said
  const errorLines = (stderr: string) => stderr.split('\n').filter((l) => l.startsWith('maxsim:'));

  before(() => {
    base = writeCorpus(fresh(), [randomRagged(lengthsOf(rand, 500, 6), dim, 'float32', rand)]);
    files = listing(base);
    const docs = randomRagged(lengths, dim, 'float32', rand);
    npy = path.join(tmp, 'sigint-docs.npy');
    off = path.join(tmp, 'sigint-lengths.npy');
    writeNpy(npy, { dtype: 'float32', shape: [2 * count, dim], data: docs.data as Float32Array });
    writeNpy(off, { dtype: 'int32', shape: [count], data: Int32Array.from(lengths) });
  });

  test('corpus append: exit 130 with one line, the corpus as it was', async () => {
    const r = await runUntilSigint(['corpus', 'append', '--docs', npy, '--doc-lengths', off, '--out', base]);
    assert.equal(r.code, 130, r.stderr);
    assert.deepEqual(errorLines(r.stderr), ['maxsim: interrupted (SIGINT)']);
    assert.deepEqual(listing(base), files);
    openCorpus(base).verify();
    assert.equal(openCorpus(base).info.documents, 500);
  });

  test('search --corpus: exit 130 with one line, nothing on stdout', async () => {
    // a search of seconds: 2,000 queries of 32 tokens against the 500-document corpus plus the big one
    // two segments, so two blocks: a small one (its progress line triggers the SIGINT), then a long one
    const big = fresh();
    writeCorpus(big, [
      randomRagged(lengthsOf(rand, 500, 6), dim, 'float32', rand),
      randomRagged(lengths, dim, 'float32', rand),
    ]);
    const q = path.join(tmp, 'sigint-queries.npy');
    writeNpy(q, { dtype: 'float32', shape: [2000, 32, dim], data: randomFloats(2000 * 32 * dim, rand) });
    const r = await runUntilSigint(['search', '--corpus', big, '--queries', q, '--backend', 'cpu']);
    assert.equal(r.code, 130, r.stderr);
    assert.deepEqual(errorLines(r.stderr), ['maxsim: interrupted (SIGINT)']);
    assert.ok(!r.stderr.includes('100%'), r.stderr);
    assert.equal(r.stdout, '');
  });
});
