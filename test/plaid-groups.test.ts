// The two-level centroid assignment (native/cpu/residual.h, ResidualGroups) against the exact one
// and against float64 (the chosen id is the best member of the probed groups), encodes split into
// parts at unaligned stream offsets against one encode, an index built from parts against one built
// from the concatenated batch, build progress, the streamed generator's ranges, and argument errors.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { InvalidArgumentError } from '../src/errors.js';
import { buildGroups } from '../src/plaid/kmeans.js';
import { residualAddon } from '../src/plaid/native.js';
import { type BuildProgress, buildIndex, PlaidIndex } from '../src/plaid/plaid.js';
import {
  streamedDocuments,
  streamedQueries,
  streamedSynthetic,
  syntheticCorpus,
} from '../src/plaid/synthetic.js';
import { raggedBatch, type TokenBatch, tokenMatrix } from '../src/tensor.js';
import { rng, runSeed } from './helpers.js';

const addon = residualAddon();
const isas = addon.isas();

function dot(a: Float32Array, i: number, b: Float32Array, j: number, d: number): number {
  let s = 0;
  for (let k = 0; k < d; k++) s += a[i * d + k] * b[j * d + k];
  return s;
}
// L2 rule as a score: x . c - |c|^2 / 2, in float64
function l2score(x: Float32Array, i: number, c: Float32Array, j: number, d: number): number {
  return dot(x, i, c, j, d) - dot(c, j, c, j, d) / 2;
}

describe('two-level assignment', () => {
  test("every kernel set's assignment is portable's, bitwise, for every row count a tile leaves over", async () => {
    const rand = rng(runSeed + 10);
    // rows 1 .. 17 and past a 256-row chunk cover every remainder of the tiles (NR up to 6 rows)
    const ns = [...Array.from({ length: 17 }, (_, i) => i + 1), 263, 1030];
    for (const n of ns) {
      const [d, k] = [
        [5, 3],
        [24, 100],
        [128, 301],
        [33, 77],
      ][n % 4];
      const x = Float32Array.from({ length: n * d }, () => rand() * 2 - 1);
      const c = Float32Array.from({ length: k * d }, () => rand() * 2 - 1);
      const want = await addon.assign(x, c, d, true, { isa: 'portable' });
      for (const isa of isas) {
        const got = await addon.assign(x, c, d, true, { isa });
        assert.deepEqual(got.ids, want.ids, `${isa}: n ${n} d ${d} k ${k}`);
        assert.deepEqual(got.scores, want.scores, `${isa}: n ${n} d ${d} k ${k}`);
      }
    }
  });

  for (const isa of isas) {
    test(`${isa}: probe = groups is the exact assignment, bitwise`, async () => {
      const rand = rng(runSeed + 11);
      for (const [n, d, k, g] of [
        [1000, 24, 100, 10],
        [37, 7, 5, 5],
        [4200, 33, 300, 17],
      ]) {
        const x = Float32Array.from({ length: n * d }, () => rand() * 2 - 1);
        const c = Float32Array.from({ length: k * d }, () => rand() * 2 - 1);
        const groups = await buildGroups(c, d, g, g, { seed: 3, isa });
        const exact = await addon.assign(x, c, d, true, { isa });
        const grouped = await addon.assign(x, c, d, true, { isa, groups });
        assert.deepEqual(grouped.ids, exact.ids, `n ${n} d ${d} k ${k} g ${g}`);
        assert.deepEqual(grouped.scores, exact.scores);
      }
    });

    test(`${isa}: the id is the best member of the probe best groups (float64)`, async () => {
      const rand = rng(runSeed + 12);
      const [n, d, k, g, probe] = [600, 16, 120, 12, 3];
      const x = Float32Array.from({ length: n * d }, () => rand() * 2 - 1);
      const c = Float32Array.from({ length: k * d }, () => rand() * 2 - 1);
      const groups = await buildGroups(c, d, g, probe, { seed: 5, isa });
      const gn = groups.coarse.length / d;
      const ids = (await addon.assign(x, c, d, true, { isa, groups })).ids;
      const eps = 1e-4;
      let differ = 0;
      const exact = (await addon.assign(x, c, d, true, { isa })).ids;
      for (let i = 0; i < n; i++) {
        const gs = Array.from({ length: gn }, (_, j) => j)
          .filter((j) => groups.offsets[j + 1] > groups.offsets[j])
          .map((j) => ({ j, s: l2score(x, i, groups.coarse, j, d) }))
          .sort((a, b) => b.s - a.s);
        const cut = gs[Math.min(probe, gs.length) - 1].s;
        // groups certainly probed (clear of the cut) and possibly probed (near-ties at the cut)
        const sure = gs.filter((e) => e.s > cut + eps).map((e) => e.j);
        const maybe = gs.filter((e) => e.s >= cut - eps).map((e) => e.j);
        const members = (js: number[]) =>
          js.flatMap((j) => Array.from(groups.members.subarray(groups.offsets[j], groups.offsets[j + 1])));
        const pool = members(maybe);
        assert.ok(pool.includes(ids[i]), `row ${i}: ${ids[i]} outside the probed groups`);
        const mine = l2score(x, i, c, ids[i], d);
        for (const m of members(sure))
          assert.ok(mine >= l2score(x, i, c, m, d) - eps, `row ${i}: member ${m} beats ${ids[i]}`);
        if (ids[i] !== exact[i]) differ++;
      }
      assert.ok(differ < n, 'some rows agree with the exact assignment');
    });
  }

  test('group arrays are checked', async () => {
    const c = Float32Array.from({ length: 40 }, (_, i) => Math.sin(i));
    const x = c.slice(0, 8);
    const groups = await buildGroups(c, 4, 3, 2, { seed: 1 });
    await assert.rejects(
      async () => addon.assign(x, c, 4, true, { groups: { ...groups, probe: 4 } }),
      /probe/,
    );
    await assert.rejects(
      async () =>
        addon.assign(x, c, 4, true, {
          groups: { ...groups, members: Int32Array.of(0, 1, 99, 3, 4, 5, 6, 7, 8, 9) },
        }),
      /groups.members\[2\]/,
    );
    await assert.rejects(
      async () => addon.assign(x, c, 4, true, { groups: { ...groups, offsets: Int32Array.of(0, 5, 3, 10) } }),
      /groups.offsets/,
    );
    await assert.rejects(async () => addon.assign(x, c, 4, false, { groups }), /l2/);
  });
});

function concat(parts: TokenBatch[], d: number): TokenBatch {
  const chunks: Float32Array[] = [];
  const offsets = [0];
  for (const p of parts)
    for (let b = 0; b < p.count; b++) {
      const s = p.starts[b] * d;
      chunks.push(p.data.subarray(s, s + p.lengths[b] * d) as Float32Array);
      offsets.push(offsets[offsets.length - 1] + p.lengths[b]);
    }
  const data = new Float32Array(offsets[offsets.length - 1] * d);
  let at = 0;
  for (const ch of chunks) {
    data.set(ch, at);
    at += ch.length;
  }
  return raggedBatch(data, Float64Array.from(offsets), { dim: d });
}

describe('parts', () => {
  const d = 24;
  const c = syntheticCorpus({ docs: 90, length: [0, 23], dim: d, topics: 8, seed: 4 });
  const whole = raggedBatch(c.data, c.offsets, { dim: d });
  const part = (b0: number, b1: number) =>
    raggedBatch(
      c.data.slice(c.offsets[b0] * d, c.offsets[b1] * d),
      Float64Array.from(c.offsets.slice(b0, b1 + 1), (o) => o - c.offsets[b0]),
      { dim: d },
    );
  const parts = [part(0, 7), part(7, 8), part(8, 41), part(41, 41), part(41, 90)];

  test('an index over parts equals the index over their concatenation', async () => {
    for (const assignment of ['exact', 'grouped'] as const) {
      const o = { centroids: 32, sample: 400, assignment, groups: 6, probe: 2 };
      const events: BuildProgress[] = [];
      const a = await buildIndex(parts, { ...o, onProgress: (p) => events.push(p) });
      const b = await buildIndex(concat(parts, d), o);
      assert.deepEqual(b.native, a.native);
      assert.deepEqual(b.native, (await buildIndex(whole, o)).native);
      assert.equal(a.buildStats.assignment, assignment);
      // the groups travel with parts() (later encodes must use them)
      assert.deepEqual(PlaidIndex.fromParts(a.parts()).assignGroups, a.assignGroups);
      assert.equal(a.assignGroups === undefined, assignment === 'exact');
      const enc = events.filter((e) => e.stage === 'encode');
      assert.equal(enc[enc.length - 1].done, c.offsets[90]);
      for (let i = 1; i < events.length; i++) assert.ok(events[i].ms >= events[i - 1].ms);
      assert.equal(events.filter((e) => e.stage === 'kmeans').length, 8);
      const q = tokenMatrix(c.data.slice(5 * d, 13 * d), 8, d);
      const ra = await a.search(q, { k: 5, candidates: 40 });
      const rb = await b.search(q, { k: 5, candidates: 40 });
      assert.deepEqual(ra.hits, rb.hits);
      assert.equal(ra.stats.scores, 'exact');
    }
  });

  test('encode at unaligned stream offsets equals one encode', async () => {
    const o = { centroids: 16, sample: 300, assignment: 'grouped' as const, groups: 4, probe: 2 };
    const ix = await buildIndex(whole, o);
    const { cutoffs, tables, bits } = ix.buckets;
    const one = await addon.encode(whole, ix.native.centroids, cutoffs, tables, bits, {
      groups: ix.assignGroups,
    });
    const cids = new Int32Array(one.cids.length);
    const codes = new Uint8Array(one.codes.length);
    let first = 0;
    let sq = 0;
    for (const p of parts) {
      const r = await addon.encode(p, ix.native.centroids, cutoffs, tables, bits, {
        first,
        cids,
        codes,
        groups: ix.assignGroups,
      });
      sq += r.sqError[0];
      for (let b = 0; b < p.count; b++) first += p.lengths[b];
    }
    assert.deepEqual(cids, one.cids);
    assert.deepEqual(codes, one.codes);
    assert.ok(Math.abs(sq - one.sqError[0]) <= 1e-9 * one.sqError[0]);
    assert.deepEqual(one.cids, ix.native.cids);
    await assert.rejects(
      async () =>
        addon.encode(parts[2], ix.native.centroids, cutoffs, tables, bits, { first: 5000, cids, codes }),
      /cids.length/,
    );
  });

  test('argument errors name the argument', async () => {
    await assert.rejects(buildIndex([], {}), InvalidArgumentError);
    await assert.rejects(
      buildIndex([parts[0], raggedBatch(new Float32Array(8), [0, 1], { dim: 8 })]),
      /docs\[1\].dim/,
    );
    await assert.rejects(
      buildIndex(whole, { centroids: 16, assignment: 'fast' as 'exact' }),
      /options.assignment/,
    );
    await assert.rejects(buildIndex(whole, { centroids: 16, groups: 4, probe: 5 }), /options.probe/);
    await assert.rejects(buildIndex(whole, { centroids: 16, groups: 0 }), /options.groups/);
    await assert.rejects(buildIndex(whole, { onProgress: 3 as unknown as () => void }), /options.onProgress/);
  });
});

test('the streamed generator: any range of documents alone equals that slice, queries regenerate', () => {
  const s = streamedSynthetic({ docs: 50, length: [3, 9], dim: 10, topics: 5, seed: 9 });
  const all = streamedDocuments(s, 0, 50);
  const part = streamedDocuments(s, 17, 31);
  let before = 0;
  for (let b = 0; b < 17; b++) before += all.lengths[b];
  assert.deepEqual(part.lengths, all.lengths.subarray(17, 31));
  assert.deepEqual(part.data, all.data.subarray(before * 10, before * 10 + part.data.length));
  for (let t = 0; t < all.data.length / 10; t++) {
    let sq = 0;
    for (let k = 0; k < 10; k++) sq += all.data[t * 10 + k] ** 2;
    assert.ok(Math.abs(sq - 1) < 1e-5);
  }
  const q = streamedQueries(s, 4, 6, 2);
  assert.deepEqual(q.data, streamedQueries(s, 4, 6, 2).data);
  assert.equal(q.data.length, 4 * 6 * 10);
});
