// The CUDA Chamfer plan (src/backends/cuda-chamfer-plan.ts) against the plans the C++ planner made
// before the plan moved to TypeScript: test/fixtures/plans/chamfer-plans.json is the output of
// PlanChamfer (native/cuda/chamfer_plan.h at main bc33815) compiled into a host program over a grid
// of cloud sizes (0 to 40,000 points, 0 to 7 pairs, dim 1..8, one and both directions). And the
// tables' invariants the engine checks (CheckChamferPlan), on random clouds. CPU-only.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { CHAMFER_CELL_BITS, CHAMFER_CHUNK, CHAMFER_GROUP, CHAMFER_UNIT } from '../src/backends/constants.js';
import { chamferCellBits, planChamfer } from '../src/backends/cuda-chamfer-plan.js';
import { packageRoot } from '../src/native.js';

interface OldPlan {
  dim: number;
  bidirectional: boolean;
  pOffsets: number[];
  qOffsets: number[];
  clouds: number[];
  units: number[];
}

const lengthsOf = (offsets: number[]) => offsets.slice(1).map((o, b) => o - offsets[b]);

test('the TypeScript plan is the one the C++ planner made, on every shape of the table', () => {
  const file = path.join(packageRoot, 'test', 'fixtures', 'plans', 'chamfer-plans.json');
  const table = JSON.parse(readFileSync(file, 'utf8')) as OldPlan[];
  assert.ok(table.length > 200, 'the table covers the grid');
  let units = 0;
  for (const [k, c] of table.entries()) {
    const plan = planChamfer(lengthsOf(c.pOffsets), lengthsOf(c.qOffsets), c.dim, c.bidirectional);
    assert.deepEqual(Array.from(plan.clouds), c.clouds, `case ${k}: clouds`);
    assert.deepEqual(Array.from(plan.units), c.units, `case ${k}: units`);
    units += c.units.length / 3;
  }
  assert.ok(units > 1000, 'the table has real work in it');
});

test('cell bits: about two points per cell, at most the bit budget over all axes', () => {
  for (let dim = 1; dim <= 8; dim++) {
    for (const n of [0, 1, 2, 3, 4, 5, 63, 64, 65, 1000, 2 ** 20, 2 ** 26]) {
      const bits = chamferCellBits(n, dim);
      assert.ok(bits * dim <= CHAMFER_CELL_BITS, `dim ${dim}, n ${n}`);
      if (bits > 0) assert.ok(2 * 2 ** (bits * dim) <= n, `dim ${dim}, n ${n}: no more cells than n / 2`);
      const finer = (bits + 1) * dim <= CHAMFER_CELL_BITS && 2 * 2 ** ((bits + 1) * dim) <= n;
      assert.equal(finer, false, `dim ${dim}, n ${n}: the finest grid that fits`);
    }
  }
});

test('random clouds: totals, box ranges and units cover every source once', () => {
  let seed = 12345;
  const rand = (m: number) => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % m;
  };
  for (let trial = 0; trial < 200; trial++) {
    const pairs = rand(6);
    const dim = 1 + rand(8);
    const both = rand(2) === 1;
    const big = rand(4) === 0 ? 5000 : 300;
    const p = Array.from({ length: pairs }, () => (rand(5) === 0 ? 0 : rand(big)));
    const q = Array.from({ length: pairs }, () => (rand(5) === 0 ? 0 : rand(big)));
    const { clouds, units } = planChamfer(p, q, dim, both);
    assert.equal(clouds.length, (2 * pairs + 1) * 4);
    const sizes = [...p, ...q];
    for (let c = 0; c < 2 * pairs; c++) {
      const n = sizes[c];
      const [cell, bits, chunk, group] = clouds.subarray(4 * c, 4 * c + 4);
      const next = clouds.subarray(4 * c + 4, 4 * c + 8);
      assert.equal(next[0] - cell, n > 0 ? 2 ** (bits * dim) : 0);
      assert.equal(next[2] - chunk, Math.ceil(n / CHAMFER_CHUNK));
      assert.equal(next[3] - group, Math.ceil(n / CHAMFER_GROUP));
    }
    const seen = new Set<string>();
    for (let u = 0; u < units.length; u += 3) {
      const [dir, b, i] = units.subarray(u, u + 3);
      assert.ok(dir === 0 || (both && dir === 1));
      assert.equal(i % CHAMFER_UNIT, 0);
      for (let s = i; s < Math.min(i + CHAMFER_UNIT, (dir === 0 ? p : q)[b]); s++)
        seen.add(`${dir},${b},${s}`);
    }
    let expected = 0;
    for (let b = 0; b < pairs; b++) {
      if (p[b] > 0 && q[b] > 0) expected += p[b] + (both ? q[b] : 0);
    }
    assert.equal(seen.size, expected, `trial ${trial}: every source of a non-empty pair, once`);
  }
});
