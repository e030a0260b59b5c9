// Nearest neighbours and Chamfer distance on the CPU against the float64 brute force: indices under
// the tie rule, distances, per-pair terms, gradients (analytic subgradient and finite differences),
// ragged batches with empty and single-point clouds, duplicates, far-from-origin clouds,
// determinism over runs and thread counts, every kernel set this CPU runs, and argument errors.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  referenceChamfer,
  referenceChamferBackward,
  referenceNearest,
} from '../src/backends/reference-chamfer.js';
import { InvalidArgumentError } from '../src/errors.js';
import { type ChamferReduction, chamfer, chamferIsas, chamferTrain, nearest } from '../src/ops/chamfer.js';
import { denseBatch, raggedBatch, type TokenBatch, tokenMatrix } from '../src/tensor.js';
import { assertGradClose, rng, runSeed } from './helpers.js';

const isas = chamferIsas();

/** B clouds of the given sizes, coordinates uniform in [-1, 1) * spread + offset, packed from 0. */
function clouds(sizes: number[], d: number, rand: () => number, spread = 1, offset = 0): TokenBatch {
  const offsets = [0];
  for (const s of sizes) offsets.push(offsets[offsets.length - 1] + s);
  const data = new Float32Array(offsets[offsets.length - 1] * d);
  for (let i = 0; i < data.length; i++) data[i] = (rand() * 2 - 1) * spread + offset;
  return raggedBatch(data, offsets, { dim: d });
}

function sizes(B: number, rand: () => number, max: number): number[] {
  return Array.from({ length: B }, () => 1 + Math.floor(rand() * max));
}

/** float64 squared distance between P's point i and Q's point j of pair b. */
function dist64(P: TokenBatch, Q: TokenBatch, b: number, i: number, j: number): number {
  let s = 0;
  for (let k = 0; k < P.dim; k++) {
    const t = P.data[(P.starts[b] + i) * P.dim + k] - Q.data[(Q.starts[b] + j) * Q.dim + k];
    s += t * t;
  }
  return s;
}

/**
 * The issue's accuracy rule: the index equals float64's wherever the float64 gap between best and
 * second best exceeds 1e-6 (|p|^2 + |q|^2) (`strictGap` tightens it with an absolute gap), and the
 * distance is the chosen neighbour's to 1e-6 relative.
 */
function assertNearest(
  P: TokenBatch,
  Q: TokenBatch,
  got: { index: Int32Array; distance: Float32Array },
  context: string,
  strictGap?: number,
) {
  const ref = referenceNearest(P, Q);
  assert.equal(got.index.length, ref.index.length, `${context}: length`);
  let o = 0;
  let checked = 0;
  for (let b = 0; b < P.count; b++) {
    for (let i = 0; i < P.lengths[b]; i++, o++) {
      const where = `${context}: pair ${b}, point ${i} (seed ${runSeed})`;
      if (ref.index[o] < 0) {
        assert.equal(got.index[o], -1, where);
        assert.equal(got.distance[o], Number.POSITIVE_INFINITY, where);
        continue;
      }
      const j = got.index[o];
      assert.ok(j >= 0 && j < Q.lengths[b], `${where}: index ${j} out of range`);
      const dj = dist64(P, Q, b, i, j);
      const tieBand = 1e-6 * ref.scale[o];
      const decisive = ref.gap[o] > tieBand || (strictGap !== undefined && ref.gap[o] > strictGap);
      if (decisive) {
        assert.equal(j, ref.index[o], `${where}: index (gap ${ref.gap[o]}, band ${tieBand})`);
        checked++;
      } else {
        assert.ok(
          dj - ref.distance[o] <= Math.max(tieBand, strictGap ?? 0),
          `${where}: near-tie pick too far`,
        );
      }
      const tol = 1e-6 * dj + 1e-30;
      assert.ok(Math.abs(got.distance[o] - dj) <= tol, `${where}: distance ${got.distance[o]} vs ${dj}`);
    }
  }
  return checked;
}

describe(`chamfer: nearest neighbours (kernel sets: ${isas.join(', ')})`, () => {
  test('a hand-checked pair', async () => {
    const P = tokenMatrix(new Float32Array([0, 0, 0]), 1, 3);
    const Q = tokenMatrix(new Float32Array([1, 0, 0, 0, 2, 0]), 2, 3);
    const n = await nearest(P, Q);
    assert.deepEqual([...n.index], [0]);
    assert.deepEqual([...n.distance], [1]);
    const c = await chamfer(P, Q);
    assert.deepEqual([...c.forward], [1]);
    assert.deepEqual([...c.reverse], [2.5]);
    assert.deepEqual([...c.distances], [3.5]);
    const s = await chamfer(P, Q, { reduction: 'sum' });
    assert.deepEqual([...s.distances], [6]);
  });

  for (const isa of isas) {
    test(`${isa}: every d in 1..8 against the float64 brute force, ragged batches`, async () => {
      const rand = rng(runSeed ^ 0x51);
      for (let d = 1; d <= 8; d++) {
        const B = 1 + Math.floor(rand() * 4);
        const P = clouds(sizes(B, rand, 150), d, rand);
        const Q = clouds(sizes(B, rand, 150), d, rand);
        const r = await chamfer(P, Q, { isa });
        assertNearest(P, Q, r.pToQ, `${isa} d=${d} P->Q`);
        assertNearest(Q, P, r.qToP ?? assert.fail('qToP'), `${isa} d=${d} Q->P`);
      }
    });
  }

  test('a large pair crosses many tiles and work items', async () => {
    const rand = rng(runSeed ^ 0x52);
    const P = clouds([3001], 3, rand);
    const Q = clouds([2500], 3, rand);
    const n = await nearest(P, Q);
    const checked = assertNearest(P, Q, n, 'large');
    assert.ok(checked > 2900, `decisive checks ${checked}`);
  });

  test('duplicate points: exact ties go to the lowest index', async () => {
    const rand = rng(runSeed ^ 0x53);
    for (const isa of isas) {
      for (const d of [1, 3, 8]) {
        // Q holds 40 points at least 0.02 apart (so only exact copies tie), each repeated at
        // scattered positions; P holds the 40 points.
        const base = new Float32Array(40 * d);
        for (let t = 0; t < 40; ) {
          const c = Float32Array.from({ length: d }, () => rand() * 2 - 1);
          let ok = true;
          for (let u = 0; u < t && ok; u++) {
            let s = 0;
            for (let k = 0; k < d; k++) s += (c[k] - base[u * d + k]) ** 2;
            ok = s > 0.02 ** 2;
          }
          if (ok) base.set(c, d * t++);
        }
        const order: number[] = [];
        for (let r = 0; r < 4; r++) for (let t = 0; t < 40; t++) order.push(t);
        for (let i = order.length - 1; i > 0; i--) {
          const j = Math.floor(rand() * (i + 1));
          [order[i], order[j]] = [order[j], order[i]];
        }
        const q = new Float32Array(order.length * d);
        for (let i = 0; i < order.length; i++) q.set(base.subarray(order[i] * d, (order[i] + 1) * d), i * d);
        const Q = raggedBatch(q, [0, order.length], { dim: d });
        const P = raggedBatch(base, [0, 40], { dim: d });
        const n = await nearest(P, Q, { isa });
        for (let t = 0; t < 40; t++) {
          assert.equal(n.index[t], order.indexOf(t), `${isa} d=${d} point ${t}`);
          assert.equal(n.distance[t], 0);
        }
        // A cloud of one repeated point: always index 0.
        const same = raggedBatch(new Float32Array(10 * d).fill(0.25), [0, 10], { dim: d });
        const s = await nearest(P, same, { isa });
        assert.ok(s.index.every((v) => v === 0));
      }
    }
  });

  test('clouds 1e4 from the origin: the search does not cancel', async () => {
    const rand = rng(runSeed ^ 0x54);
    for (const isa of isas) {
      const P = clouds([400, 250], 3, rand, 1, 1e4);
      const Q = clouds([300, 350], 3, rand, 1, 1e4);
      const r = await chamfer(P, Q, { isa });
      // The issue's band is 1e-6 * 6e8 here, which would accept anything; demand float64's index
      // wherever the gap exceeds 1e-4 at the clouds' own scale (fp32 spacing there is ~1e-3).
      const checked = assertNearest(P, Q, r.pToQ, `${isa} offset P->Q`, 1e-4);
      assertNearest(Q, P, r.qToP ?? assert.fail('qToP'), `${isa} offset Q->P`, 1e-4);
      assert.ok(checked > 500, `decisive checks ${checked}`);
    }
  });

  test('ragged batches with empty and single-point clouds', async () => {
    const rand = rng(runSeed ^ 0x55);
    const P = clouds([0, 1, 3, 0, 5, 1], 3, rand);
    const Q = clouds([2, 1, 0, 0, 4, 1], 3, rand);
    const r = await chamfer(P, Q);
    assertNearest(P, Q, r.pToQ, 'empty P->Q');
    assertNearest(Q, P, r.qToP ?? assert.fail('qToP'), 'empty Q->P');
    const ref = referenceChamfer(P, Q);
    // pair 0: P empty (forward 0), Q nonempty against an empty P (reverse +Infinity)
    assert.equal(r.forward[0], 0);
    assert.equal(r.reverse[0], Number.POSITIVE_INFINITY);
    assert.equal(r.forward[2], Number.POSITIVE_INFINITY);
    assert.equal(r.reverse[2], 0);
    assert.equal(r.distances[3], 0);
    for (let b = 0; b < 6; b++) {
      if (Number.isFinite(ref.distances[b])) {
        assert.ok(
          Math.abs(r.distances[b] - ref.distances[b]) <= 1e-6 * ref.distances[b] + 1e-30,
          `pair ${b}`,
        );
      } else {
        assert.equal(r.distances[b], ref.distances[b]);
      }
    }
    // Gradients stay finite: points facing an empty cloud get none.
    const t = await chamferTrain(P, Q);
    const g = await t.backward(new Float64Array(6).fill(1));
    assert.ok(g.dP.every(Number.isFinite) && g.dQ.every(Number.isFinite));
    assert.ok(
      g.dP.subarray(3, 12).every((v) => v === 0),
      'P cloud 2 faces an empty Q',
    );
    // No clouds at all.
    const none = raggedBatch(new Float32Array(0), [0], { dim: 3 });
    const e = await chamfer(none, none);
    assert.equal(e.distances.length, 0);
  });

  test('dense batches with padding read only real points', async () => {
    const rand = rng(runSeed ^ 0x56);
    const data = new Float32Array(3 * 20 * 2).map(() => rand() * 2 - 1);
    const P = denseBatch(data, { count: 3, length: 20, dim: 2, lengths: [20, 5, 0] });
    const Q = clouds([7, 20, 3], 2, rand);
    const r = await chamfer(P, Q, { reduction: 'sum' });
    const ref = referenceChamfer(P, Q, { reduction: 'sum' });
    assertNearest(P, Q, r.pToQ, 'dense P->Q');
    for (let b = 0; b < 3; b++) {
      if (Number.isFinite(ref.distances[b])) {
        assert.ok(Math.abs(r.distances[b] - ref.distances[b]) <= 1e-6 * ref.distances[b] + 1e-30);
      }
    }
  });
});

describe('chamfer: per-pair terms and reductions', () => {
  for (const reduction of ['mean', 'sum'] as ChamferReduction[]) {
    for (const bidirectional of [true, false]) {
      test(`${reduction}, bidirectional ${bidirectional}`, async () => {
        const rand = rng(runSeed ^ 0x61);
        const P = clouds(sizes(5, rand, 300), 3, rand);
        const Q = clouds(sizes(5, rand, 300), 3, rand);
        const r = await chamfer(P, Q, { reduction, bidirectional });
        const ref = referenceChamfer(P, Q, { reduction, bidirectional });
        for (let b = 0; b < 5; b++) {
          for (const [got, want] of [
            [r.distances[b], ref.distances[b]],
            [r.forward[b], ref.forward[b]],
            [r.reverse[b], ref.reverse[b]],
          ]) {
            assert.ok(
              Math.abs(got - want) <= 1e-6 * want + 1e-30,
              `pair ${b}: ${got} vs ${want} (seed ${runSeed})`,
            );
          }
        }
        assert.equal(r.qToP === undefined, !bidirectional);
      });
    }
  }
});

describe('chamfer: gradients', () => {
  /** Per-point weights the op uses for a per-pair gradient g. */
  function weights(src: TokenBatch, g: Float64Array, reduction: ChamferReduction): Float64Array {
    const w: number[] = [];
    for (let b = 0; b < src.count; b++) {
      for (let i = 0; i < src.lengths[b]; i++) w.push(reduction === 'mean' ? g[b] / src.lengths[b] : g[b]);
    }
    return Float64Array.from(w);
  }

  for (const reduction of ['mean', 'sum'] as ChamferReduction[]) {
    for (const bidirectional of [true, false]) {
      test(`analytic subgradient, ${reduction}, bidirectional ${bidirectional}`, async () => {
        const rand = rng(runSeed ^ 0x71);
        for (const d of [1, 3, 5, 8]) {
          const P = clouds([...sizes(4, rand, 200), 1, 0], d, rand);
          const Q = clouds([...sizes(4, rand, 200), 0, 1], d, rand);
          const t = await chamferTrain(P, Q, { reduction, bidirectional });
          const g = Float64Array.from({ length: 6 }, () => rand() * 2 - 1);
          const grads = await t.backward(g);
          const ref = referenceChamferBackward(
            P,
            Q,
            t.pToQ.index,
            weights(P, g, reduction),
            t.qToP?.index,
            t.qToP ? weights(Q, g, reduction) : undefined,
          );
          assertGradClose(grads.dP, ref.dP, `dP d=${d}`);
          assertGradClose(grads.dQ, ref.dQ, `dQ d=${d}`);
        }
      });
    }
  }

  test("per-point gradients with reduction 'none'", async () => {
    const rand = rng(runSeed ^ 0x72);
    const P = clouds([50, 80], 3, rand);
    const Q = clouds([60, 0], 3, rand);
    const t = await chamferTrain(P, Q, { reduction: 'none' });
    const g = Float64Array.from({ length: 130 + 60 }, () => rand() * 2 - 1);
    const grads = await t.backward(g);
    const ref = referenceChamferBackward(
      P,
      Q,
      t.pToQ.index,
      g.subarray(0, 130),
      t.qToP?.index,
      g.subarray(130),
    );
    assertGradClose(grads.dP, ref.dP, 'dP none');
    assertGradClose(grads.dQ, ref.dQ, 'dQ none');
  });

  test('finite differences of the float64 loss', async () => {
    const rand = rng(runSeed ^ 0x73);
    const P = clouds([30, 17], 3, rand);
    const Q = clouds([25, 40], 3, rand);
    const g = Float64Array.from([0.7, -1.3]);
    const t = await chamferTrain(P, Q);
    const grads = await t.backward(g);
    // the loss, and whether both of its nearest maps are the op's (the gradient's) at these values
    const same = (a: Int32Array, b: Int32Array | undefined) =>
      b !== undefined && a.every((x, i) => x === b[i]);
    const loss = (p: Float64Array, q: Float64Array) => {
      const r = referenceChamfer(P, Q, {}, { p, q });
      const maps = same(r.pToQ.index, t.pToQ.index) && same(r.qToP!.index, t.qToP?.index);
      return { value: g[0] * r.distances[0] + g[1] * r.distances[1], maps };
    };
    const p64 = Float64Array.from(P.data);
    const q64 = Float64Array.from(Q.data);
    const h = 1e-6;
    for (const [side, values, grad] of [
      ['P', p64, grads.dP],
      ['Q', q64, grads.dQ],
    ] as const) {
      let checked = 0;
      for (let trial = 0; trial < 40; trial++) {
        const e = Math.floor(rand() * values.length);
        const keep = values[e];
        values[e] = keep + h;
        const up = loss(p64, q64);
        values[e] = keep - h;
        const down = loss(p64, q64);
        values[e] = keep;
        // The loss is piecewise quadratic: central differences are exact where neither step moves a
        // nearest neighbour away from the op's (an argmin switch within h, or a near-tie that float32
        // and float64 break differently, leaves the piece the gradient was taken on).
        if (!up.maps || !down.maps) continue;
        checked++;
        const fd = (up.value - down.value) / (2 * h);
        assert.ok(
          Math.abs(fd - grad[e]) <= 1e-5 * Math.max(1, Math.abs(fd)),
          `${side}[${e}]: fd ${fd} vs ${grad[e]} (seed ${runSeed})`,
        );
      }
      assert.ok(
        checked >= 20,
        `${side}: ${checked} of 40 trials away from argmin switches (seed ${runSeed})`,
      );
    }
  });
});

describe('chamfer: determinism', () => {
  test('repeat runs and thread counts give identical bits', async () => {
    const rand = rng(runSeed ^ 0x81);
    const P = clouds(sizes(6, rand, 2000), 3, rand);
    const Q = clouds(sizes(6, rand, 2000), 3, rand);
    const g = Float64Array.from({ length: 6 }, () => rand());
    const runs = [];
    for (const threads of [1, 2, 3, 0, 0]) {
      const t = await chamferTrain(P, Q, { threads });
      runs.push({ t, grads: await t.backward(g) });
    }
    for (const r of runs.slice(1)) {
      assert.deepEqual(r.t.pToQ.index, runs[0].t.pToQ.index);
      assert.deepEqual(r.t.pToQ.distance, runs[0].t.pToQ.distance);
      assert.deepEqual(r.t.qToP?.index, runs[0].t.qToP?.index);
      assert.deepEqual(r.t.distances, runs[0].t.distances);
      assert.deepEqual(r.grads.dP, runs[0].grads.dP);
      assert.deepEqual(r.grads.dQ, runs[0].grads.dQ);
    }
  });

  test('the FMA kernel sets agree bitwise; every set reports the same distances', async () => {
    const rand = rng(runSeed ^ 0x82);
    const P = clouds(sizes(3, rand, 500), 3, rand);
    const Q = clouds(sizes(3, rand, 500), 3, rand);
    const results = await Promise.all(isas.map((isa) => nearest(P, Q, { isa })));
    const fma = isas.map((isa, i) => [isa, results[i]] as const).filter(([isa]) => isa !== 'portable');
    for (const [, r] of fma.slice(1)) assert.deepEqual(r.index, fma[0][1].index);
    for (const r of results) {
      for (let i = 0; i < r.index.length; i++) {
        if (r.index[i] === results[0].index[i]) assert.equal(r.distance[i], results[0].distance[i]);
      }
    }
  });
});

describe('chamfer: argument errors', () => {
  const P = raggedBatch(new Float32Array(6), [0, 2], { dim: 3 });
  test('bad clouds, options and gradients are refused with the argument named', async () => {
    const half = raggedBatch(new Uint16Array(6), [0, 2], { dim: 3, dtype: 'float16' });
    await assert.rejects(
      chamfer(half, P),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'P.dtype',
    );
    const nine = raggedBatch(new Float32Array(18), [0, 2], { dim: 9 });
    await assert.rejects(
      chamfer(nine, nine),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'P.dim',
    );
    const two = raggedBatch(new Float32Array(4), [0, 2], { dim: 2 });
    await assert.rejects(
      chamfer(P, two),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'Q.dim',
    );
    const pairOfClouds = raggedBatch(new Float32Array(6), [0, 1, 2], { dim: 3 });
    await assert.rejects(
      chamfer(P, pairOfClouds),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'Q.count',
    );
    await assert.rejects(
      chamfer({} as TokenBatch, P),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'P',
    );
    await assert.rejects(
      chamfer(P, P, { reduction: 'max' as ChamferReduction }),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'reduction',
    );
    await assert.rejects(
      nearest(P, P, { threads: -1 }),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'threads',
    );
    const t = await chamferTrain(P, P);
    await assert.rejects(
      t.backward(new Float64Array(2)),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'grad',
    );
    await assert.rejects(
      t.backward([Number.NaN]),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'grad[0]',
    );
  });
});
