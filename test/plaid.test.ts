// The compressed index (src/plaid, native/cpu/residual*): the codec against float64 (nearest
// centroid, bucket rule, reconstruction error), the fused decompress-and-MaxSim kernel and centroid
// interaction against float64 on random, ragged, empty and block-crossing documents for every kernel
// set this CPU runs, the search stages against a brute-force TypeScript run of the same stages,
// recall and exact scores on a small structured corpus, determinism, and argument errors.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { InvalidArgumentError } from '../src/errors.js';
import { decodeToFloat32, encodeFloats } from '../src/floats.js';
import { maxsimSync } from '../src/ops/maxsim.js';
import { bucketOf, codeAt } from '../src/plaid/codec.js';
import { int8Residual, type NativeIndex, residualAddon } from '../src/plaid/native.js';
import { buildIndex, defaultCentroids } from '../src/plaid/plaid.js';
import { syntheticCorpus, syntheticQueries } from '../src/plaid/synthetic.js';
import { denseBatch, raggedBatch, tokenMatrix } from '../src/tensor.js';
import { rng, runSeed } from './helpers.js';
import { randomIndex, referenceResidual } from './plaid-kernel-helpers.js';

const addon = residualAddon();
const isas = addon.isas();
const U = 2 ** -24;

function corpus(docs: number, length: [number, number], dim: number, seed: number) {
  const c = syntheticCorpus({ docs, length, dim, topics: 24, seed });
  return { c, batch: raggedBatch(c.data, c.offsets, { dim }) };
}

function referenceCentroid(
  ix: NativeIndex,
  q: Float32Array,
  lq: number,
  doc: number,
  keep: Uint8Array | null,
): number {
  const d = ix.d;
  let s = 0;
  for (let i = 0; i < lq; i++) {
    let best = Number.NEGATIVE_INFINITY;
    for (let j = ix.bagOffsets[doc]; j < ix.bagOffsets[doc + 1]; j++) {
      const c = ix.bags[j];
      if (keep && !keep[c]) continue;
      let v = 0;
      for (let k = 0; k < d; k++) v += q[i * d + k] * ix.centroids[c * d + k];
      if (v > best) best = v;
    }
    s += best === Number.NEGATIVE_INFINITY ? 0 : best;
  }
  return s;
}

describe('plaid codec', () => {
  test(`round trip against float64: nearest centroid, bucket rule, error (seed ${runSeed})`, async () => {
    const d = 48;
    const { c, batch } = corpus(300, [1, 40], d, runSeed);
    for (const bits of [2, 4] as const) {
      const ix = await buildIndex(batch, { bits, centroids: 64, iterations: 4, seed: runSeed });
      const n = ix.native;
      const levels = 1 << bits;
      let sq = 0;
      const total = ix.buildStats.tokens;
      for (let t = 0; t < total; t++) {
        const x = c.data.subarray(t * d, t * d + d);
        // nearest centroid in float64, up to the fp32 rounding of the kernel's expanded form
        let best = Number.POSITIVE_INFINITY;
        const dist = (cc: number) => {
          let s = 0;
          for (let k = 0; k < d; k++) s += (x[k] - n.centroids[cc * d + k]) ** 2;
          return s;
        };
        for (let cc = 0; cc < n.k; cc++) best = Math.min(best, dist(cc));
        assert.ok(dist(n.cids[t]) <= best + 1e-5, `token ${t}: centroid ${n.cids[t]} is not the nearest`);
        for (let k = 0; k < d; k++) {
          const r = Math.fround(x[k] - n.centroids[n.cids[t] * d + k]);
          const code = codeAt(n.codes, bits, d, t, k);
          assert.equal(code, bucketOf(ix.buckets, k, r), `token ${t} dim ${k}`);
          const w = ix.buckets.weights[k * levels + code];
          if (code > 0 && code < levels - 1) {
            // interior bucket: the value and its weight both lie in (cut[code - 1], cut[code]]
            const lo = ix.buckets.cutoffs[k * (levels - 1) + code - 1];
            const hi = ix.buckets.cutoffs[k * (levels - 1) + code];
            assert.ok(Math.abs(r - w) <= hi - lo + 1e-7, `token ${t} dim ${k}: |r - w| > bucket width`);
          }
          sq += (x[k] - (n.centroids[n.cids[t] * d + k] + w)) ** 2;
        }
      }
      assert.ok(Math.abs(sq / total - ix.buildStats.meanSquaredError) <= 1e-6 * (sq / total), 'sqError');
      // 2 bits keep most of the signal, 4 bits more (tokens are unit vectors)
      assert.ok(
        ix.buildStats.meanSquaredError < (bits === 2 ? 0.05 : 0.01),
        `${bits}-bit error ${ix.buildStats.meanSquaredError}`,
      );
    }
  });

  test('builds are deterministic for a seed and change with it', async () => {
    const { batch } = corpus(200, [4, 20], 32, 7);
    const a = await buildIndex(batch, { centroids: 32, seed: 3 });
    const b = await buildIndex(batch, { centroids: 32, seed: 3, threads: 1 });
    const c = await buildIndex(batch, { centroids: 32, seed: 4 });
    assert.deepEqual(a.native.centroids, b.native.centroids);
    assert.deepEqual(a.native.codes, b.native.codes);
    assert.deepEqual(a.native.cids, b.native.cids);
    assert.notDeepEqual(a.native.centroids, c.native.centroids);
  });

  test('float16, bfloat16 and dense padded documents encode as their float32 values', async () => {
    const d = 24;
    const { c, batch } = corpus(60, [1, 20], d, runSeed + 5);
    const ix = await buildIndex(batch, { centroids: 16, iterations: 2, seed: 2 });
    const n = ix.native;
    for (const dtype of ['float16', 'bfloat16'] as const) {
      const bitsArr = encodeFloats(c.data, dtype) as Uint16Array;
      const half = raggedBatch(bitsArr, c.offsets, { dim: d, dtype });
      const asFloat = raggedBatch(decodeToFloat32(bitsArr, dtype, d), c.offsets, { dim: d });
      const a = await addon.encode(half, n.centroids, ix.buckets.cutoffs, n.tables, 2, {});
      const b = await addon.encode(asFloat, n.centroids, ix.buckets.cutoffs, n.tables, 2, {});
      assert.deepEqual(a.cids, b.cids, dtype);
      assert.deepEqual(a.codes, b.codes, dtype);
    }
    // the same documents in a dense batch with padding slots: the padding is never read
    const L = 20;
    const lengths = Array.from({ length: 60 }, (_, b) => c.offsets[b + 1] - c.offsets[b]);
    const dense = new Float32Array(60 * L * d).fill(Number.NaN);
    for (let b = 0; b < 60; b++)
      dense.set(c.data.subarray(c.offsets[b] * d, c.offsets[b + 1] * d), b * L * d);
    const db = denseBatch(dense, { count: 60, length: L, dim: d, lengths, checkFinite: false });
    const e = await addon.encode(db, n.centroids, ix.buckets.cutoffs, n.tables, 2, {});
    assert.deepEqual(e.cids, n.cids);
    assert.deepEqual(e.codes, n.codes);
  });

  test('every finite float16 and bfloat16 bit pattern encodes as its float32 value', async () => {
    const d = 16;
    const { batch } = corpus(40, [4, 20], d, runSeed + 6);
    const ix = await buildIndex(batch, { centroids: 8, iterations: 2, seed: 5 });
    const n = ix.native;
    for (const dtype of ['float16', 'bfloat16'] as const) {
      const expMask = dtype === 'float16' ? 0x7c00 : 0x7f80;
      const pats: number[] = [];
      for (let h = 0; h < 65536; h++) if ((h & expMask) !== expMask) pats.push(h);
      const bitsArr = Uint16Array.from(pats.slice(0, Math.floor(pats.length / d) * d));
      const tokens = bitsArr.length / d;
      const offsets = [0];
      for (let t = 0; t < tokens; ) {
        t = Math.min(tokens, t + 1 + (offsets.length % 37));
        offsets.push(t);
      }
      const half = raggedBatch(bitsArr, offsets, { dim: d, dtype });
      const asFloat = raggedBatch(decodeToFloat32(bitsArr, dtype, d), offsets, { dim: d });
      const a = await addon.encode(half, n.centroids, ix.buckets.cutoffs, n.tables, 2, { threads: 1 });
      const b = await addon.encode(asFloat, n.centroids, ix.buckets.cutoffs, n.tables, 2, { threads: 1 });
      assert.deepEqual(a.cids, b.cids, dtype);
      assert.deepEqual(a.codes, b.codes, dtype);
      assert.equal(a.sqError[0], b.sqError[0], dtype);
    }
  });

  test('defaultCentroids follows 2^floor(log2(16 sqrt(T)))', () => {
    assert.equal(defaultCentroids(1), 1);
    assert.equal(defaultCentroids(10_000), 1024);
    assert.equal(defaultCentroids(6_400_000), 32768);
  });
});

describe('plaid kernels', () => {
  for (const isa of isas) {
    for (const bits of [2, 4] as const) {
      test(`${isa} ${bits}-bit: decompress-MaxSim and centroid interaction vs float64 (seed ${runSeed})`, () => {
        const rand = rng(runSeed + bits);
        for (const d of [1, 7, 32, 100]) {
          const lengths = [0, 1, 15, 16, 17, 3, 0, 33, 64, 2, 48, 1, 200];
          const k = 1 + Math.floor(rand() * 40);
          const ix = randomIndex(rand, lengths, d, k, bits);
          addon.checkIndex(ix);
          const docs = Int32Array.from(lengths.keys());
          for (const lq of [0, 1, 5, 13, 16, 33]) {
            const q = Float32Array.from({ length: lq * d }, () => rand() * 2 - 1);
            const got = addon.scoreDocs(ix, q, docs, { isa });
            const keep = Uint8Array.from({ length: k }, () => (rand() < 0.6 ? 1 : 0));
            const ci = addon.centroidDocs(ix, q, docs, keep, { isa });
            const ciAll = addon.centroidDocs(ix, q, docs, null, { isa });
            // every set's centroid scores are the same fp32 FMA chain over d, whatever its tiling:
            // the interaction (max, then a float64 sum in token order) is then the same bits
            const u32 = (x: Float32Array) => Array.from(new Uint32Array(x.buffer, x.byteOffset, x.length));
            assert.deepEqual(
              u32(ciAll),
              u32(addon.centroidDocs(ix, q, docs, null, { isa: 'portable' })),
              `d ${d} lq ${lq} k ${k}: the centroid interaction of ${isa} = portable's, bitwise`,
            );
            for (const b of docs) {
              const ref = referenceResidual(
                ix,
                q,
                lq,
                b,
                bits === 2 ? (int8Residual[isa]?.weightMax ?? 0) : 0,
              );
              const ctx = `d ${d} lq ${lq} doc ${b} (length ${lengths[b]})`;
              if (lengths[b] === 0) assert.equal(got[b], Number.NEGATIVE_INFINITY, ctx);
              else if (lq === 0) assert.equal(got[b], 0, ctx);
              else
                assert.ok(
                  Math.abs(got[b] - ref.score) <= ref.bound,
                  `${ctx}: ${got[b]} vs ${ref.score} (bound ${ref.bound})`,
                );
              const tol = (x: number) => (d + lq + 4) * U * (Math.abs(x) + lq * d);
              const r1 = referenceCentroid(ix, q, lq, b, keep);
              const r2 = referenceCentroid(ix, q, lq, b, null);
              assert.ok(Math.abs(ci[b] - r1) <= tol(r1), `${ctx} centroid (pruned): ${ci[b]} vs ${r1}`);
              assert.ok(Math.abs(ciAll[b] - r2) <= tol(r2), `${ctx} centroid: ${ciAll[b]} vs ${r2}`);
            }
          }
        }
      });
    }
  }

  test('checkIndex refuses out-of-range ids and inconsistent sizes, naming the array', () => {
    const rand = rng(runSeed);
    const ix = randomIndex(rand, [3, 5], 8, 4, 2);
    assert.throws(
      () => addon.checkIndex({ ...ix, cids: Int32Array.from(ix.cids, (c, i) => (i === 2 ? 4 : c)) }),
      /index\.cids\[2\]/,
    );
    assert.throws(() => addon.checkIndex({ ...ix, codes: ix.codes.subarray(1) }), /index\.codes/);
    assert.throws(() => addon.checkIndex({ ...ix, bits: 3 as 2 }), /index\.bits/);
    assert.throws(() => addon.scoreDocs(ix, new Float32Array(8), Int32Array.of(2), {}), /docs\[0\]/);
    assert.throws(() => addon.scoreDocs(ix, new Float32Array(7), Int32Array.of(0), {}), /query\.length/);
  });
});

/** The search stages in TypeScript, float64: probe, lists, pruned centroid interaction, residual. */
function referenceSearch(
  ix: NativeIndex,
  q: Float32Array,
  lq: number,
  nprobe: number,
  candidates: number,
  threshold: number,
) {
  const { k, d } = ix;
  const qc = new Float64Array(lq * k);
  for (let i = 0; i < lq; i++)
    for (let c = 0; c < k; c++) {
      let s = 0;
      for (let j = 0; j < d; j++) s += q[i * d + j] * ix.centroids[c * d + j];
      qc[i * k + c] = s;
    }
  const probed = new Set<number>();
  const perToken: number[][] = [];
  for (let i = 0; i < lq; i++) {
    const order = Array.from({ length: k }, (_, c) => c).sort(
      (a, b) => qc[i * k + b] - qc[i * k + a] || a - b,
    );
    perToken.push(order.slice(0, nprobe));
    for (const c of order.slice(0, nprobe)) probed.add(c);
  }
  const keep = new Uint8Array(k);
  for (let c = 0; c < k; c++) {
    let m = Number.NEGATIVE_INFINITY;
    for (let i = 0; i < lq; i++) m = Math.max(m, qc[i * k + c]);
    keep[c] = m >= threshold ? 1 : 0;
  }
  const cand = new Set<number>();
  for (const c of probed) for (let j = ix.ivfOffsets[c]; j < ix.ivfOffsets[c + 1]; j++) cand.add(ix.ivf[j]);
  const ci = [...cand].map((b) => ({ b, s: referenceCentroid(ix, q, lq, b, keep) }));
  ci.sort((x, y) => y.s - x.s || x.b - y.b);
  // 'lists': per token the best probed centroid in the bag, else the token's nprobe-th best score
  const lists = [...cand].map((b) => {
    const bag = new Set(ix.bags.subarray(ix.bagOffsets[b], ix.bagOffsets[b + 1]));
    let s = 0;
    for (let i = 0; i < lq; i++) {
      const best = perToken[i].find((c) => bag.has(c));
      s += qc[i * k + (best ?? perToken[i][perToken[i].length - 1])];
    }
    return { b, s };
  });
  lists.sort((x, y) => y.s - x.s || x.b - y.b);
  // 'hybrid': the lists' best 4 x candidates, then their bag interaction
  const bagScore = new Map(ci.map((x) => [x.b, x.s]));
  const hybrid = lists
    .slice(0, 4 * candidates)
    .map((x) => ({ b: x.b, s: bagScore.get(x.b) ?? 0 }))
    .sort((x, y) => y.s - x.s || x.b - y.b);
  return {
    generated: cand.size,
    probed: probed.size,
    kept: ci.slice(0, candidates).map((x) => x.b),
    keptLists: lists.slice(0, candidates).map((x) => x.b),
    scores: new Map(ci.map((x) => [x.b, x.s])),
    listScores: new Map(lists.map((x) => [x.b, x.s])),
    keptHybrid: hybrid.slice(0, candidates).map((x) => x.b),
    listCut: lists[Math.min(lists.length, 4 * candidates) - 1]?.s ?? 0,
  };
}

describe('plaid search', () => {
  test(`stages equal a brute-force TypeScript run of the same stages (seed ${runSeed})`, async () => {
    const d = 32;
    const { c, batch } = corpus(400, [1, 30], d, runSeed);
    const ix = await buildIndex(batch, { centroids: 48, iterations: 3, seed: runSeed });
    const queries = syntheticQueries(c, 6, 9, d, runSeed + 1);
    for (const [nprobe, candidates, threshold] of [
      [1, 20, Number.NEGATIVE_INFINITY],
      [3, 50, 0.3],
      [48, 1000, Number.NEGATIVE_INFINITY],
    ]) {
      for (let qi = 0; qi < 6; qi++) {
        for (const interaction of ['bags', 'lists', 'hybrid'] as const) {
          const q = queries.data.subarray(qi * 9 * d, (qi + 1) * 9 * d);
          const got = await addon.search(ix.native, q, { nprobe, candidates, threshold, interaction });
          const ref = referenceSearch(ix.native, q, 9, nprobe, candidates, threshold);
          const ctx = `${interaction} nprobe ${nprobe} candidates ${candidates} threshold ${threshold} query ${qi}`;
          assert.equal(got.stats.probed, ref.probed, ctx);
          assert.equal(got.stats.generated, ref.generated, ctx);
          // the kept set: equal up to float32 near-ties at the cut (the reference sums in float64)
          const want =
            interaction === 'bags' ? ref.kept : interaction === 'lists' ? ref.keptLists : ref.keptHybrid;
          const sc = interaction === 'lists' ? ref.listScores : ref.scores;
          const cut = sc.get(want[want.length - 1]) ?? 0;
          const near = (x: number | undefined, c: number) =>
            x !== undefined && Math.abs(x - c) <= 1e-5 * (1 + Math.abs(c));
          // hybrid: also a near-tie at the lists' cut may enter or leave the bag stage
          const tie = (b: number) =>
            near(sc.get(b), cut) || (interaction === 'hybrid' && near(ref.listScores.get(b), ref.listCut));
          const g = new Set(got.ids);
          const w = new Set(want);
          assert.equal(got.ids.length, want.length, ctx);
          for (const b of want) assert.ok(g.has(b) || tie(b), `${ctx}: ${b} kept by the reference`);
          for (const b of got.ids) assert.ok(w.has(b) || tie(b), `${ctx}: ${b} not kept by the reference`);
          const res = addon.scoreDocs(ix.native, q, got.ids, {});
          assert.deepEqual(got.scores, res, `${ctx}: scores are the residual kernel's`);
          for (let i = 1; i < got.ids.length; i++)
            assert.ok(got.scores[i - 1] >= got.scores[i], `${ctx}: sorted`);
        }
      }
    }
  });

  test(`recall@10 on a structured corpus, exact scores (seed ${runSeed})`, async () => {
    const d = 64;
    const { c, batch } = corpus(2000, [8, 48], d, runSeed);
    const ix = await buildIndex(batch, { centroids: 256, seed: runSeed });
    const lq = 16;
    const queries = syntheticQueries(c, 20, lq, d, runSeed + 2);
    let found = 0;
    for (let qi = 0; qi < 20; qi++) {
      const q = tokenMatrix(queries.data.subarray(qi * lq * d, (qi + 1) * lq * d), lq, d);
      const exact = maxsimSync(q, batch);
      const top = Array.from(exact.keys())
        .sort((a, b) => exact[b] - exact[a] || a - b)
        .slice(0, 10);
      const r = await ix.search(q, { k: 10 });
      assert.equal(r.stats.scores, 'exact');
      for (const h of r.hits) {
        assert.equal(h.score, exact[h.index], `query ${qi}: returned scores are the exact MaxSim`);
        if (top.includes(h.index)) found++;
      }
    }
    assert.ok(found / 200 >= 0.95, `recall@10 ${found / 200}`);
  });

  test('without tokens the scores are the residual MaxSim and say so', async () => {
    const d = 16;
    const { c, batch } = corpus(100, [2, 12], d, 11);
    const ix = await buildIndex(batch, { centroids: 16, keepTokens: false });
    const q = syntheticQueries(c, 1, 4, d, 12);
    const r = await ix.search(tokenMatrix(q.data, 4, d), { k: 5 });
    assert.equal(r.stats.scores, 'residual');
    // final residual scores come from the fp32 kernel (the int8 one only ranks the candidates)
    const fp32 = { isa: int8Residual[isas[0]]?.fp32 ?? isas[0] };
    const res = addon.scoreDocs(ix.native, q.data, Int32Array.from(r.hits.map((h) => h.index)), fp32);
    assert.deepEqual(Float32Array.from(r.hits.map((h) => h.score)), res);
  });

  test('argument errors name the argument', async () => {
    const { batch } = corpus(20, [2, 6], 8, 3);
    await assert.rejects(
      buildIndex(batch, { bits: 3 as 2 }),
      (e) => e instanceof InvalidArgumentError && /options\.bits/.test(e.message),
    );
    await assert.rejects(buildIndex(batch, { centroids: 10_000 }), /options\.centroids/);
    await assert.rejects(
      buildIndex(raggedBatch(new Float32Array(0), [0, 0], { dim: 8 })),
      /at least one token/,
    );
    const ix = await buildIndex(batch, { centroids: 4 });
    await assert.rejects(ix.search(tokenMatrix(new Float32Array(9), 1, 9), { k: 3 }), /query\.dim/);
    await assert.rejects(ix.search(tokenMatrix(new Float32Array(8), 1, 8), { k: 0 }), /options\.k/);
    await assert.rejects(
      ix.search(tokenMatrix(new Float32Array(8), 1, 8), { k: 2, nprobe: 0 }),
      /options\.nprobe/,
    );
  });
});
