// How the CUDA two-stage job splits its exact stage into groups of queries (src/backends/cuda-two-stage-
// plan.ts): the group that minimises launches plus wasted pairs, within [1, rows], one launch where the
// host selects, and the override of maxsim/internal. No GPU needed (the GPU suite checks the grouped
// jobs' hits: test/gpu/two-stage.test.ts).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { exactGroupFor, setExactGroup } from '../src/backends/cuda-two-stage-plan.js';
import { InvalidArgumentError } from '../src/errors.js';

const serverPass = {
  rows: 112,
  keep: 40,
  queryLength: 32,
  docLength: 128,
  dim: 128,
  select: 'device' as const,
};

describe('exactGroupFor', () => {
  test("a server's int8 pass rescoring 4 x 10 candidates goes in groups of 8 queries", () => {
    assert.equal(exactGroupFor(serverPass), 8);
  });

  test('the group shrinks as each pair costs more, and is one query for ColPali pages', () => {
    assert.ok(exactGroupFor({ ...serverPass, keep: 400 }) < 8);
    assert.ok(exactGroupFor({ ...serverPass, docLength: 32, queryLength: 8 }) > 8);
    assert.equal(exactGroupFor({ ...serverPass, queryLength: 1024, docLength: 1024 }), 1);
  });

  test('always within [1, rows]; rows where the host selects (one launch over the union)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 100_000 }),
        fc.integer({ min: 0, max: 4096 }),
        fc.integer({ min: 0, max: 2048 }),
        fc.integer({ min: 0, max: 4096 }),
        fc.integer({ min: 1, max: 1024 }),
        (rows, keep, queryLength, docLength, dim) => {
          const p = { rows, keep, queryLength, docLength, dim, select: 'device' as const };
          const g = exactGroupFor(p);
          assert.ok(
            Number.isSafeInteger(g) && g >= 1 && g <= Math.max(1, rows),
            `${JSON.stringify(p)}: ${g}`,
          );
          assert.equal(exactGroupFor({ ...p, select: 'host' }), Math.max(1, rows));
        },
      ),
    );
  });

  test('setExactGroup forces the group (capped at rows), for the host plan too; bad values name the argument', () => {
    try {
      setExactGroup(3);
      assert.equal(exactGroupFor(serverPass), 3);
      assert.equal(exactGroupFor({ ...serverPass, select: 'host' }), 3);
      assert.equal(exactGroupFor({ ...serverPass, rows: 2 }), 2);
    } finally {
      setExactGroup('auto');
    }
    assert.equal(exactGroupFor(serverPass), 8);
    for (const bad of [0, -1, 1.5, Number.NaN, '3' as unknown as number])
      assert.throws(
        () => setExactGroup(bad),
        (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'queries',
      );
  });
});
