// The residual stage's token pruning (ResidualPrunePlan in native/cpu/residual_search.cc) in every
// kernel set this CPU runs, 2- and 4-bit: with a random plan, scores against float64 where the
// tokens of centroids left out count q . centroid alone; a plan keeping every centroid equal to no
// plan bit for bit; the plan itself against its float64 rule; and the option through search.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { int8Residual, residualAddon } from '../src/plaid/native.js';
import { buildIndex } from '../src/plaid/plaid.js';
import { denseBatch, tokenMatrix } from '../src/tensor.js';
import { rng, runSeed } from './helpers.js';
import { randomIndex, referenceResidual } from './plaid-kernel-helpers.js';

const addon = residualAddon();
const U = 2 ** -24;

describe('residual token pruning', () => {
  for (const isa of addon.isas()) {
    for (const bits of [2, 4] as const) {
      test(`${isa} ${bits}-bit: a random plan's scores vs float64 (seed ${runSeed})`, () => {
        const rand = rng(runSeed + 71 + bits);
        const wmax = bits === 2 ? (int8Residual[isa]?.weightMax ?? 0) : 0;
        for (const d of [7, 32, 128]) {
          const lengths = [1, 15, 16, 17, 3, 33, 64, 2, 48, 1, 200, 130, 0];
          const k = 1 + Math.floor(rand() * 40);
          const ix = randomIndex(rand, lengths, d, k, bits);
          const docs = Int32Array.from(lengths.keys());
          for (const lq of [1, 5, 16, 33]) {
            const q = Float32Array.from({ length: lq * d }, () => rand() * 2 - 1);
            const full = addon.scoreDocs(ix, q, docs, { isa });
            assert.deepEqual(addon.scoreDocs(ix, q, docs, { isa, keep: new Uint8Array(k).fill(1) }), full);
            for (const share of [0, 0.3, 0.8]) {
              const keep = Uint8Array.from({ length: k }, () => (rand() < share ? 1 : 0));
              const got = addon.scoreDocs(ix, q, docs, { isa, keep });
              for (const b of docs) {
                const ctx = `d ${d} lq ${lq} share ${share} doc ${b} (length ${lengths[b]})`;
                const ref = referenceResidual(ix, q, lq, b, wmax, keep);
                if (lengths[b] === 0) assert.equal(got[b], Number.NEGATIVE_INFINITY, ctx);
                else
                  assert.ok(
                    Math.abs(got[b] - ref.score) <= ref.bound,
                    `${ctx}: ${got[b]} vs ${ref.score} (bound ${ref.bound})`,
                  );
              }
            }
          }
        }
      });
    }
  }

  test(`the plan keeps the centroids within prune |best| of some query token's best (seed ${runSeed})`, () => {
    const rand = rng(runSeed + 74);
    let kept = 0;
    let total = 0;
    for (const d of [5, 64]) {
      const k = 20 + Math.floor(rand() * 200);
      const ix = randomIndex(rand, [10, 30], d, k, 2);
      for (const lq of [1, 7, 32]) {
        const q = Float32Array.from({ length: lq * d }, () => rand() * 2 - 1);
        // float64 scores, and each token's best with its rounding slack
        const qc = (c: number, i: number) => {
          let s = 0;
          let m = 0;
          for (let j = 0; j < d; j++) {
            s += q[i * d + j] * ix.centroids[c * d + j];
            m += Math.abs(q[i * d + j] * ix.centroids[c * d + j]);
          }
          return { s, e: (d + 2) * U * m };
        };
        for (const prune of [0, 0.1, 0.25, 1]) {
          for (const nprobe of [1, 3, k]) {
            const plan = addon.prunePlan(ix, q, { nprobe, prune });
            assert.equal(plan.length, k);
            const best = Array.from({ length: lq }, (_, i) => {
              let b = Number.NEGATIVE_INFINITY;
              for (let c = 0; c < k; c++) b = Math.max(b, qc(c, i).s);
              return b;
            });
            for (let c = 0; c < k; c++) {
              let sure = false;
              let near = false;
              for (let i = 0; i < lq; i++) {
                const { s, e } = qc(c, i);
                const margin = s - (best[i] - prune * Math.abs(best[i]));
                const slack = 4 * e + 4 * U * (1 + prune) * Math.abs(best[i]) + 1e-12;
                if (margin >= slack) sure = true;
                else if (margin > -slack) near = true;
              }
              const ctx = `d ${d} lq ${lq} prune ${prune} nprobe ${nprobe} centroid ${c}`;
              if (sure) assert.equal(plan[c], 1, ctx);
              else if (!near) assert.equal(plan[c], 0, ctx);
              kept += plan[c];
              total++;
            }
          }
        }
      }
    }
    // both outcomes occur, or the test checks nothing
    assert.ok(kept > total / 20 && kept < total - total / 20, `${kept} of ${total} kept`);
  });

  test('options.prune is checked, and search returns exact scores under it', async () => {
    const rand = rng(runSeed + 75);
    const ix = randomIndex(rand, [3, 20], 16, 4, 2);
    const q = Float32Array.from({ length: 2 * 16 }, () => rand() * 2 - 1);
    for (const bad of [-1, Number.NaN, '0.1', null])
      assert.throws(() => addon.prunePlan(ix, q, { nprobe: 2, prune: bad as never }), /options\.prune/);
    assert.throws(
      () => addon.scoreDocs(ix, q, Int32Array.of(0), { keep: new Uint8Array(3) }),
      /options\.keep/,
    );
    const dim = 16;
    const data = Float32Array.from({ length: 40 * 8 * dim }, () => rand() * 2 - 1);
    const index = await buildIndex(denseBatch(data, { count: 40, length: 8, dim }), {
      bits: 2,
      centroids: 8,
    });
    const query = tokenMatrix(q, 2, dim);
    for (const bad of [-0.5, Number.NaN, '1'])
      await assert.rejects(index.search(query, { k: 3, prune: bad as never }), /options\.prune/);
    // every prune returns exact MaxSim for what it returns (the final list is re-scored)
    const all = await index.search(query, { k: 5, prune: Number.POSITIVE_INFINITY });
    for (const prune of [0, 0.25, 1e30]) {
      const r = await index.search(query, { k: 5, prune });
      assert.equal(r.stats.scores, 'exact');
      for (const h of r.hits) {
        const same = all.hits.find((x) => x.index === h.index);
        if (same) assert.equal(h.score, same.score);
      }
    }
  });
});
