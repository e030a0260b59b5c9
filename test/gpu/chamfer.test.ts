// The Chamfer kernels on CUDA against the CPU engine: bitwise the same argmin and distances as the
// CPU's FMA kernel sets (AVX-512 / AVX2: the same fmaf sequence on the same centred rows), gradients
// of the CSR backward bitwise the CPU's, the atomic backward within fp32 rounding of them, repeat runs
// bitwise identical; ragged batches with empty and single-point clouds, every d in 1..8, duplicates,
// a 1e4 offset, a large pair, and the pruned search's hard cases (lattice ties, surfaces, distant
// clouds, NaN and infinite coordinates). Without a GPU every test skips with the reason.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { chamferIsas, chamferTrain, nearest } from '../../src/ops/chamfer.js';
import { raggedBatch, type TokenBatch } from '../../src/tensor.js';
import { rng, runSeed } from '../helpers.js';
import { bitsEqual, skip } from './helpers.js';

function clouds(sizes: number[], d: number, rand: () => number, offset = 0): TokenBatch {
  const offsets = [0];
  for (const s of sizes) offsets.push(offsets[offsets.length - 1] + s);
  const data = new Float32Array(offsets[offsets.length - 1] * d);
  for (let i = 0; i < data.length; i++) data[i] = rand() * 2 - 1 + offset;
  return raggedBatch(data, offsets, { dim: d });
}

// The CPU kernel set whose arithmetic the GPU mirrors (portable rounds the multiply-add twice).
const fmaIsa = skip ? undefined : chamferIsas().find((i) => i !== 'portable');

async function compare(P: TokenBatch, Q: TokenBatch, context: string) {
  const g = Float64Array.from({ length: P.count }, (_, b) => 0.5 + (b % 3));
  const cpu = await chamferTrain(P, Q, { backend: 'cpu', isa: fmaIsa });
  const gpu = await chamferTrain(P, Q, { backend: 'cuda' });
  assert.equal(gpu.isa, 'cuda');
  if (fmaIsa) {
    assert.deepEqual(gpu.pToQ.index, cpu.pToQ.index, `${context}: argmin P->Q (seed ${runSeed})`);
    assert.deepEqual(gpu.qToP?.index, cpu.qToP?.index, `${context}: argmin Q->P`);
    assert.ok(bitsEqual(gpu.pToQ.distance, cpu.pToQ.distance), `${context}: distances P->Q`);
    assert.ok(bitsEqual(gpu.qToP?.distance ?? new Float32Array(), cpu.qToP?.distance ?? new Float32Array()));
    const gc = await cpu.backward(g);
    const gg = await gpu.backward(g);
    assert.ok(bitsEqual(gg.dP, gc.dP), `${context}: dP (CSR) bitwise`);
    assert.ok(bitsEqual(gg.dQ, gc.dQ), `${context}: dQ (CSR) bitwise`);
    const atomic = await chamferTrain(P, Q, { backend: 'cuda', gradientPath: 'atomic' });
    const ga = await atomic.backward(g);
    const bounds = atomicBounds(P, Q, cpu.pToQ.index, cpu.qToP?.index, g);
    assertAtomicClose(ga.dP, gc.dP, bounds.dP, `${context}: dP atomic`);
    assertAtomicClose(ga.dQ, gc.dQ, bounds.dQ, `${context}: dQ atomic`);
  }
  return gpu;
}

// Float atomics add each gradient's terms in fp32 in any order: each term 2 w (p - q) carries up to
// two roundings of its own (the difference, the product) and the recursive sum of k terms (k - 1)
// more, so the error is at most (k + 1) u sum|terms| (u = 2^-24), against the CSR path's exactly
// rounded double sum.
// Per element: the count and absolute sum of its terms (mean reduction, the default), from the argmins.
function atomicBounds(
  P: TokenBatch,
  Q: TokenBatch,
  pq: Int32Array,
  qp: Int32Array | undefined,
  g: Float64Array,
) {
  const d = P.dim;
  const terms = { dP: new Float64Array(P.data.length), dQ: new Float64Array(Q.data.length) };
  const count = { dP: new Float64Array(P.data.length), dQ: new Float64Array(Q.data.length) };
  const add = (src: TokenBatch, dst: TokenBatch, index: Int32Array, dSrc: 'dP' | 'dQ', dDst: 'dP' | 'dQ') => {
    const s = src.data as Float32Array;
    const t = dst.data as Float32Array;
    for (let b = 0; b < src.count; b++) {
      const w = Math.abs(g[b]) / src.lengths[b];
      for (let i = 0; i < src.lengths[b]; i++) {
        const a = index[src.starts[b] + i];
        if (a < 0) continue;
        const si = (src.starts[b] + i) * d;
        const ti = (dst.starts[b] + a) * d;
        for (let k = 0; k < d; k++) {
          const c = 2 * w * Math.abs(s[si + k] - t[ti + k]);
          terms[dSrc][si + k] += c;
          count[dSrc][si + k]++;
          terms[dDst][ti + k] += c;
          count[dDst][ti + k]++;
        }
      }
    }
  };
  add(P, Q, pq, 'dP', 'dQ');
  if (qp) add(Q, P, qp, 'dQ', 'dP');
  const bound = (x: 'dP' | 'dQ') => terms[x].map((t, i) => (count[x][i] + 1) * 2 ** -24 * t * 1.01);
  return { dP: bound('dP'), dQ: bound('dQ') };
}

function assertAtomicClose(got: Float32Array, want: Float32Array, bound: Float64Array, context: string) {
  for (let i = 0; i < want.length; i++) {
    const err = Math.abs(got[i] - want[i]);
    // the CSR result itself is one fp32 rounding away from the exact sum
    if (!(err <= bound[i] + Math.abs(want[i]) * 2 ** -24))
      assert.fail(
        `${context}: element ${i}: ${got[i]} vs ${want[i]}, error ${err} > ${bound[i]} (seed ${runSeed})`,
      );
  }
}

describe(`CUDA Chamfer vs the CPU engine (seed ${runSeed})`, { skip }, () => {
  test('every d in 1..8, ragged batches with empty and single-point clouds', async () => {
    const rand = rng(runSeed ^ 0x91);
    for (let d = 1; d <= 8; d++) {
      const P = clouds([300, 0, 1, 700, 5, 0], d, rand);
      const Q = clouds([200, 4, 0, 1300, 1, 0], d, rand);
      await compare(P, Q, `d=${d}`);
    }
  });

  test('duplicates, a 1e4 offset, a training batch and a large pair', async () => {
    const rand = rng(runSeed ^ 0x92);
    const base = clouds([50], 3, rand).data as Float32Array;
    const dup = new Float32Array(200 * 3);
    for (let i = 0; i < 200; i++) dup.set(base.subarray((i % 50) * 3, (i % 50) * 3 + 3), i * 3);
    const n = await nearest(raggedBatch(base, [0, 50], { dim: 3 }), raggedBatch(dup, [0, 200], { dim: 3 }), {
      backend: 'cuda',
    });
    assert.deepEqual(
      [...n.index],
      Array.from({ length: 50 }, (_, i) => i),
    );
    await compare(clouds([2000, 1500], 3, rand, 1e4), clouds([1800, 2500], 3, rand, 1e4), 'offset');
    await compare(
      clouds(new Array(32).fill(2048), 3, rand),
      clouds(new Array(32).fill(2048), 3, rand),
      'batch',
    );
    await compare(clouds([60000], 3, rand), clouds([50000], 3, rand), 'large');
  });

  test('the pruned search: lattice ties across chunks, surfaces, distant clouds, NaN and infinite points', async () => {
    const rand = rng(runSeed ^ 0x94);
    const build = (sizes: number[], d: number, point: (out: Float32Array, at: number) => void) => {
      const offsets = [0];
      for (const n of sizes) offsets.push(offsets[offsets.length - 1] + n);
      const data = new Float32Array(offsets[offsets.length - 1] * d);
      for (let i = 0; i < data.length / d; i++) point(data, i * d);
      return raggedBatch(data, offsets, { dim: d, checkFinite: false });
    };
    // integer and half-integer coordinates: many exact ties, between points of different chunks
    const grid = (step: number) => (o: Float32Array, at: number) => {
      for (let k = 0; k < 3; k++) o[at + k] = Math.floor((rand() * 24) / step) * step;
    };
    await compare(build([30000, 700], 3, grid(0.5)), build([25000, 900], 3, grid(1)), 'lattice');
    const sphere = (shift: number) => (o: Float32Array, at: number) => {
      let s = 0;
      for (let k = 0; k < 3; k++) {
        o[at + k] = rand() * 2 - 1;
        s += o[at + k] ** 2;
      }
      for (let k = 0; k < 3; k++) o[at + k] = o[at + k] / Math.sqrt(s || 1) + (k === 0 ? shift : 0);
    };
    await compare(build([40000], 3, sphere(0)), build([30000], 3, sphere(0)), 'sphere');
    await compare(build([5000, 3000], 3, sphere(0)), build([4000, 2000], 3, sphere(3)), 'apart');
    // NaN and infinite coordinates: a NaN key never wins; an infinite point turns the pruning off
    const odd = (bad: number) => (o: Float32Array, at: number) => {
      for (let k = 0; k < 3; k++) o[at + k] = rand() * 2 - 1;
      if (rand() < 0.01) o[at + Math.floor(rand() * 3)] = bad;
    };
    const P = build([6000, 2000], 3, odd(Number.NaN));
    const Q = build([5000, 2500], 3, odd(Number.NaN));
    const Qinf = build([5000, 2500], 3, odd(Number.POSITIVE_INFINITY));
    for (const [q, name] of [
      [Q, 'NaN'],
      [Qinf, 'infinite'],
    ] as const) {
      const cpu = await nearest(P, q, { backend: 'cpu', isa: fmaIsa });
      for (const prune of [true, false]) {
        const gpu = await nearest(P, q, { backend: 'cuda', prune });
        if (fmaIsa) assert.deepEqual(gpu.index, cpu.index, `${name} points, prune ${prune}: argmin`);
        if (fmaIsa)
          assert.ok(bitsEqual(gpu.distance, cpu.distance), `${name} points, prune ${prune}: distances`);
      }
    }
    // the option's own check
    await assert.rejects(nearest(P, Q, { backend: 'cuda', prune: 'yes' as unknown as boolean }), /prune/);
  });

  test('repeat runs are bitwise identical', async () => {
    const rand = rng(runSeed ^ 0x93);
    const P = clouds([5000, 3000], 3, rand);
    const Q = clouds([4000, 6000], 3, rand);
    const g = new Float64Array([1, -2]);
    const a = await chamferTrain(P, Q, { backend: 'cuda' });
    const b = await chamferTrain(P, Q, { backend: 'cuda' });
    assert.deepEqual(a.pToQ.index, b.pToQ.index);
    const ga = await a.backward(g);
    const gb = await b.backward(g);
    assert.ok(bitsEqual(ga.dP, gb.dP) && bitsEqual(ga.dQ, gb.dQ));
  });
});
