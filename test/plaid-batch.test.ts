// The batched CPU stages (native/cpu/residual_batch.cc, src/plaid/batch.ts): searchAll and the
// native searchBatch against one search per query, bitwise (ids, scores and counts), on random
// ragged batches (query lengths 0-100, batch sizes 0 to 33), every interaction, 2 and 4 bits, with
// and without source tokens, every kernel set this CPU runs, one thread and all, one pass and many;
// and the errors of hostile batches.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { encodeFloats } from '../src/floats.js';
import { residualAddon } from '../src/plaid/native.js';
import { buildIndex, INTERACTIONS, type PlaidIndex } from '../src/plaid/plaid.js';
import { syntheticCorpus, syntheticQueries } from '../src/plaid/synthetic.js';
import { raggedBatch, type TokenBatch, tokenMatrix } from '../src/tensor.js';
import { rng, runSeed } from './helpers.js';

const addon = residualAddon();
const isas = addon.isas();
const d = 32;
const corpus = syntheticCorpus({ docs: 400, length: [2, 40], dim: d, topics: 16, seed: 7 });
const docs = raggedBatch(corpus.data, corpus.offsets, { dim: d });
const pool = syntheticQueries(corpus, 40, 100, d, 9);

/** count queries of random lengths (1-64, with 33 and 64 always, and one of 100 from 7 up). */
function queryBatch(rand: () => number, count: number, checkFinite = true): TokenBatch {
  const lengths = Array.from({ length: count }, () => 1 + Math.floor(rand() * 64));
  if (count >= 2) lengths[1] = 33;
  if (count >= 7) [lengths[3], lengths[5]] = [64, 100];
  const data = new Float32Array(lengths.reduce((n, l) => n + l, 0) * d);
  const offsets = [0];
  for (const l of lengths) {
    const from = Math.floor(rand() * 40) * 100 * d;
    data.set(pool.data.subarray(from, from + l * d), offsets.at(-1)! * d);
    offsets.push(offsets.at(-1)! + l);
  }
  return raggedBatch(data, offsets, { dim: d, checkFinite });
}

function queryOf(b: TokenBatch, i: number) {
  const s = b.starts[i] * d;
  return tokenMatrix(b.data.subarray(s, s + b.lengths[i] * d), b.lengths[i], d, {
    dtype: b.dtype,
    checkFinite: false,
  });
}

const bits32 = (f: Float32Array) => new Int32Array(f.buffer, f.byteOffset, f.length);

const indexes = new Map<string, PlaidIndex>();
async function index(bits: 2 | 4, tokens: boolean): Promise<PlaidIndex> {
  const key = `${bits} ${tokens}`;
  let ix = indexes.get(key);
  if (!ix) {
    ix = await buildIndex(docs, { bits, centroids: 48, seed: 3, keepTokens: tokens });
    indexes.set(key, ix);
  }
  return ix;
}

describe('batched CPU search stages', () => {
  test(`the probe found while the centroid scores are computed = the probe over all of them (K 700, ties; seed ${runSeed})`, async () => {
    // one search finds each token's nprobe best centroids per chunk of 256 scores on the worker that
    // computes it (nprobe <= 64); the batch path probes the whole score table afterwards
    const rand = rng(runSeed + 11);
    const big = syntheticCorpus({ docs: 300, length: [8, 30], dim: d, topics: 40, seed: runSeed % 97 });
    const ix = await buildIndex(raggedBatch(big.data, big.offsets, { dim: d }), {
      centroids: 700,
      iterations: 2,
      seed: 5,
    });
    const q = syntheticQueries(big, 3, 40, d, runSeed % 89);
    const lengths = Int32Array.of(40, 17, 40);
    const rows = Float32Array.from(q.data.subarray(0, 97 * d));
    rows.fill(0, 3 * d, 4 * d); // a zero token: every centroid ties at 0, the lower ids win
    rows.copyWithin(5 * d, 6 * d, 7 * d); // two equal tokens
    for (const nprobe of [1, 1 + Math.floor(rand() * 63), 64, 65, 700]) {
      for (const threads of [1, 0]) {
        const o = { nprobe, candidates: 80, interaction: 'lists' as const, threads };
        const all = await addon.searchBatch(ix.native, rows, lengths, { ...o, passBytes: 1 });
        for (let i = 0, at = 0; i < 3; at += lengths[i++] * d) {
          const one = await addon.search(ix.native, rows.subarray(at, at + lengths[i] * d), o);
          const what = `nprobe ${nprobe} threads ${threads} query ${i}`;
          assert.deepEqual(one.ids, all.ids.subarray(all.offsets[i], all.offsets[i + 1]), what);
          assert.deepEqual(
            bits32(one.scores),
            bits32(all.scores.subarray(all.offsets[i], all.offsets[i + 1])),
            what,
          );
          assert.equal(one.stats.probed, all.stats[i].probed, `${what}: probed`);
        }
      }
    }
    // trusted input past float32's range (scores of +-inf and NaN): an answer, not a crash
    const huge = rows.map((x) => x * 3e38);
    for (const nprobe of [1, 64]) {
      const r = await addon.search(ix.native, huge.subarray(0, 40 * d), { nprobe, candidates: 80 });
      assert.ok(
        r.ids.length <= 80 && r.ids.every((x) => x >= 0 && x < ix.count),
        `huge queries, nprobe ${nprobe}`,
      );
    }
  });

  test(`native searchBatch = search per query, bitwise (seed ${runSeed})`, async () => {
    const rand = rng(runSeed);
    for (const bits of [2, 4] as const) {
      const ix = await index(bits, false);
      for (const isa of isas) {
        for (const interaction of INTERACTIONS) {
          // an empty query among them; passBytes: 1 runs every query in a pass of its own
          const b = queryBatch(rand, 9);
          const lengths = Int32Array.from(b.lengths);
          lengths[4] = 0;
          const rows = new Float32Array(lengths.reduce((n, l) => n + l, 0) * d);
          for (let i = 0, at = 0; i < 9; at += lengths[i++] * d)
            rows.set(b.data.subarray(b.starts[i] * d, (b.starts[i] + lengths[i]) * d), at);
          const o = {
            nprobe: 1 + Math.floor(rand() * 6),
            candidates: 20 + Math.floor(rand() * 60),
            interaction,
            isa,
          };
          const threshold = interaction === 'lists' ? undefined : 0.2;
          const extras = [{}, { threads: 1 }, { passBytes: 1 }, { passBytes: 48 * 64 * 4 * 3 }];
          for (const extra of isa === 'portable' ? extras.slice(2, 3) : extras) {
            const all = await addon.searchBatch(ix.native, rows, lengths, { ...o, threshold, ...extra });
            assert.equal(all.offsets.length, 10);
            for (let i = 0, at = 0; i < 9; at += lengths[i++] * d) {
              const q = rows.subarray(at, at + lengths[i] * d);
              const one = await addon.search(ix.native, q, { ...o, threshold });
              const what = `${bits}-bit ${isa} ${interaction} ${JSON.stringify(extra)} query ${i} (length ${lengths[i]})`;
              const ids = all.ids.subarray(all.offsets[i], all.offsets[i + 1]);
              const scores = all.scores.subarray(all.offsets[i], all.offsets[i + 1]);
              assert.deepEqual(ids, one.ids, what);
              assert.deepEqual(bits32(scores), bits32(one.scores), what);
              for (const key of ['probed', 'generated', 'keptCentroids', 'scored', 'isa'] as const)
                assert.equal(all.stats[i][key], one.stats[key], `${what}: ${key}`);
              if (lengths[i] > 0) assert.ok(one.ids.length > 0, what);
            }
          }
        }
      }
    }
  });

  test(`searchAll = search per query: batch sizes 0-33, tokens or not, 2 and 4 bits, every ISA (seed ${runSeed})`, async () => {
    const rand = rng(runSeed + 1);
    for (const bits of [2, 4] as const)
      for (const tokens of [true, false]) {
        const ix = await index(bits, tokens);
        for (const isa of isas)
          for (const interaction of INTERACTIONS)
            for (const count of [0, 1, 2, 7, 33]) {
              // the portable kernels are slow: they see the smaller batches
              if (isa === 'portable' && count > 2) continue;
              const b = queryBatch(rand, count);
              const o = {
                k: 5,
                nprobe: 1 + Math.floor(rand() * 4),
                candidates: 40,
                rescore: 10,
                interaction,
                isa,
              };
              const all = await ix.searchAll(b, o);
              assert.equal(all.length, count);
              for (let i = 0; i < count; i++) {
                const one = await ix.search(queryOf(b, i), o);
                const what = `${bits}-bit tokens ${tokens} ${isa} ${interaction} batch ${count} query ${i}`;
                assert.deepEqual(all[i].hits, one.hits, what);
                const { ms: _a, ...sa } = all[i].stats;
                const { ms: _b, ...so } = one.stats;
                assert.deepEqual(sa, so, what);
                assert.deepEqual(Object.keys(all[i].stats.ms), Object.keys(one.stats.ms));
              }
            }
      }
  });

  test('float16 queries and a NaN query give what search gives', async () => {
    const ix = await index(2, true);
    const rand = rng(runSeed + 2);
    const b = queryBatch(rand, 7);
    const half = raggedBatch(
      encodeFloats(b.data as Float32Array, 'float16'),
      [0, ...b.lengths.map((_, i) => b.starts[i] + b.lengths[i])],
      {
        dim: d,
        dtype: 'float16',
      },
    );
    const all = await ix.searchAll(half, { k: 4 });
    for (let i = 0; i < 7; i++)
      assert.deepEqual(all[i].hits, (await ix.search(queryOf(half, i), { k: 4 })).hits);
    // NaN in one query: the same outcome as search, query by query
    const nan = queryBatch(rand, 7, false);
    (nan.data as Float32Array)[nan.starts[2] * d + 5] = Number.NaN;
    const outcome = async <T>(p: Promise<T>) =>
      p.then(
        (v) => ({ v }),
        (e: Error) => ({ e: e.message }),
      );
    const got = await outcome(ix.searchAll(nan, { k: 4 }));
    const want = await outcome(
      (async () => {
        const out = [];
        for (let i = 0; i < 7; i++) out.push(await ix.search(queryOf(nan, i), { k: 4 }));
        return out;
      })(),
    );
    if ('e' in want) assert.deepEqual(got, want);
    else {
      assert.ok('v' in got, JSON.stringify(got));
      for (let i = 0; i < 7; i++) assert.deepEqual(got.v[i].hits, want.v[i].hits, `query ${i}`);
    }
  });

  test('hostile batches: errors name the argument, expected and received', async () => {
    const ix = await index(2, false);
    const good = queryBatch(rng(5), 3);
    await assert.rejects(
      ix.searchAll(raggedBatch(new Float32Array(8), [0, 1], { dim: 8 }), { k: 3 }),
      /Expected 32 .*queries\.dim but received 8/,
    );
    await assert.rejects(
      ix.searchAll(tokenMatrix(new Float32Array(d), 1, d) as never, { k: 3 }),
      /a TokenBatch for queries but received/,
    );
    await assert.rejects(ix.searchAll(good, { k: 0 }), /options\.k/);
    await assert.rejects(ix.searchAll(good, { k: 3, interaction: 'walk' as never }), /options\.interaction/);
    await assert.rejects(
      ix.searchAll(raggedBatch(new Float32Array(0), [0], { dim: d }), { k: 0 }),
      /options\.k/,
    );
    assert.deepEqual(await ix.searchAll(raggedBatch(new Float32Array(0), [0], { dim: d }), { k: 3 }), []);
    // the binding checks synchronously, before any work
    const o = { nprobe: 2, candidates: 10 };
    const rows = new Float32Array(5 * d);
    const call =
      (r: Float32Array, l: unknown, opts: object, native = ix.native) =>
      () =>
        addon.searchBatch(native, r, l as Int32Array, opts as typeof o);
    assert.throws(call(rows, Int32Array.of(2, 2), o), /Expected 128 .*for queries\.length but received 160/);
    assert.throws(call(rows, Int32Array.of(6, -1), o), /a length >= 0 for lengths\[1\] but received -1/);
    assert.throws(call(rows, [5], o), /Int32Array for lengths but received/);
    assert.throws(
      call(new Float64Array(5 * d) as never, Int32Array.of(5), o),
      /Float32Array for queries but received/,
    );
    assert.throws(call(rows, Int32Array.of(5), { ...o, nprobe: 0 }), /\[1, 48\] for nprobe but received 0/);
    assert.throws(call(rows, Int32Array.of(5), { ...o, passBytes: 0 }), /for passBytes but received 0/);
    assert.throws(call(rows, Int32Array.of(5), { ...o, interaction: 'walk' }), /options\.interaction/);
    // a query too long for K (k x lqp must stay below 2^31): 65,536 centroids take at most 32,752 tokens
    const k = 1 << 16;
    const wide = {
      ...ix.native,
      k,
      centroids: new Float32Array(k * d),
      ivfOffsets: new Float64Array(k + 1),
      ivf: new Int32Array(0),
    };
    const long = new Float32Array((1 + 32753) * d);
    assert.throws(
      call(long, Int32Array.of(1, 32753), o, wide),
      /at most 32752 tokens .*for lengths\[1\] but received 32753/,
    );
    assert.deepEqual(
      (await addon.searchBatch(ix.native, new Float32Array(0), new Int32Array(0), o)).stats,
      [],
    );
  });
});
