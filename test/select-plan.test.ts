// The device-vs-host selection plan of the CUDA top-K and two-stage jobs (src/backends/cuda-select-plan.ts),
// decided in TypeScript from the limits the addon reports (cuda.selectKernelInfo, one definition in
// native/cuda/device_select.h): the same choice for every shape as the native rule it replaces
// (DeviceSelectTakes, ported below as the oracle), and the same shapes as the engine refuses a
// 'device' choice for (cuda.internal.selectLimitBreach, the check the jobs run). No GPU needed.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { nativeCuda } from '../src/backends/cuda.js';
import { selectPlacement, setSelectPlacement } from '../src/backends/cuda-select-placement.js';
import {
  HOST_SELECT_MAX_SCORES,
  planSelect,
  type SelectKernelInfo,
  type SelectWhere,
  smallSelection,
} from '../src/backends/cuda-select-plan.js';
import { InvalidArgumentError } from '../src/errors.js';
import { nativeUnavailableReason } from '../src/native.js';

const skip = nativeUnavailableReason() ?? false;

// DeviceSelectTakes as it stood in native/cuda/device_select.cc before the plan moved here, condition
// for condition (the oracle: its constants are the ones the native side had then).
function deviceSelectTakes(
  rows: number,
  cols: number,
  keep: number,
  placementHost: boolean,
  hasKernel: boolean,
) {
  const kDeviceSelectMaxKeep = 256;
  const kReadBackBytes = 32 * 2 ** 20;
  if (placementHost) return false;
  if (rows <= 0 || keep <= 0 || keep > kDeviceSelectMaxKeep || keep > cols) return false;
  const chunk = keep <= 64 ? 2048 : 8192;
  if (rows * Math.floor((cols + chunk - 1) / chunk) > 2147483647) return false;
  if (rows * keep * 8 + rows * 4 > kReadBackBytes) return false;
  return hasKernel;
}

const asWhere = (takes: boolean): SelectWhere => (takes ? 'device' : 'host');

// Shapes at and around every limit: keep 0 / 1 / each entry's edge / past the largest, keep = cols
// and one more, rows 0 / 1, the first level's grid and the read-back of the kept entries exactly at
// their limits and one row past.
function edgeShapes(limits: SelectKernelInfo): Array<{ rows: number; cols: number; keep: number }> {
  const shapes: Array<{ rows: number; cols: number; keep: number }> = [];
  const keeps = [0, 1, 2];
  for (const e of limits.entries) keeps.push(e.maxKeep - 1, e.maxKeep, e.maxKeep + 1);
  for (const keep of keeps) {
    for (const rows of [0, 1, 2, 1000]) {
      for (const cols of [keep - 1, keep, keep + 1, 2047, 2048, 2049, 8192, 8193, 300_000]) {
        if (cols >= 0) shapes.push({ rows, cols, keep });
      }
    }
    if (keep <= 0) continue;
    const perRow = keep * 8 + 4;
    const rowsAtReadBack = Math.floor(limits.readBackBytes / perRow);
    for (const rows of [rowsAtReadBack - 1, rowsAtReadBack, rowsAtReadBack + 1])
      shapes.push({ rows, cols: keep, keep });
    const chunk = (limits.entries.find((e) => keep <= e.maxKeep) ?? limits.entries[limits.entries.length - 1])
      .chunk;
    // the first level's grid: rows x chunks per row at maxBlocks and one chunk past, with as many rows
    // as the read-back takes (and a third of them), columns within the jobs' int32 counts
    for (const rows of [rowsAtReadBack, Math.floor(rowsAtReadBack / 3)]) {
      const chunksAt = Math.floor(limits.maxBlocks / rows);
      for (const chunks of [chunksAt, chunksAt + 1]) {
        for (const cols of [chunks * chunk, (chunks - 1) * chunk + 1]) {
          if (cols >= keep && cols <= 2147483647) shapes.push({ rows, cols, keep });
        }
      }
    }
  }
  return shapes;
}

describe('selection plan (cuda-select-plan.ts)', () => {
  test('the addon reports the limits DeviceSelectTakes went by, from one native definition', { skip }, () => {
    const limits = nativeCuda().selectKernelInfo;
    assert.deepStrictEqual(
      { ...limits, entries: limits.entries.map((e) => ({ ...e })) },
      {
        readBackBytes: 32 * 2 ** 20,
        maxBlocks: 2147483647,
        entries: [
          { maxKeep: 64, chunk: 2048, kernel: 'maxsim_select_finish_scores_r64' },
          { maxKeep: 256, chunk: 8192, kernel: 'maxsim_select_finish_scores_r256' },
        ],
      },
    );
  });

  test('the same choice as DeviceSelectTakes at and around every limit, and as the engine accepts', {
    skip,
  }, () => {
    const cuda = nativeCuda();
    const limits = cuda.selectKernelInfo;
    const loaded = new Set(limits.entries.map((e) => e.kernel));
    let device = 0;
    const shapes = edgeShapes(limits);
    for (const s of shapes) {
      const context = `${s.rows} rows x ${s.cols} cols, keep ${s.keep}`;
      const want = asWhere(deviceSelectTakes(s.rows, s.cols, s.keep, false, true));
      assert.equal(planSelect(s, limits, loaded, 'auto'), want, context);
      // an empty list (a driver that cannot enumerate the kernels) is taken as every kernel loaded
      assert.equal(planSelect(s, limits, new Set(), 'auto'), want, `${context} (no kernel list)`);
      assert.equal(planSelect(s, limits, loaded, 'host'), 'host', `${context} (placement host)`);
      // the engine refuses a 'device' choice exactly where the plan does not make it
      const breach = cuda.internal.selectLimitBreach(s.rows, s.cols, s.keep);
      assert.equal(breach === '', want === 'device', `${context}: engine says '${breach}'`);
      if (want === 'device') device++;
    }
    // the sweep reaches both sides of every limit
    assert.ok(device > 20 && device < shapes.length - 20, `${device} of ${shapes.length} on the device`);
  });

  test('the kernel a keep needs must be loaded, where the device lists its kernels', { skip }, () => {
    const limits = nativeCuda().selectKernelInfo;
    const [r64, r256] = limits.entries.map((e) => e.kernel);
    const onlyR64 = new Set(['maxsim_simt_f32', r64]);
    assert.equal(planSelect({ rows: 4, cols: 5000, keep: 64 }, limits, onlyR64, 'auto'), 'device');
    assert.equal(planSelect({ rows: 4, cols: 5000, keep: 65 }, limits, onlyR64, 'auto'), 'host');
    assert.equal(planSelect({ rows: 4, cols: 5000, keep: 65 }, limits, new Set([r256]), 'auto'), 'device');
    assert.equal(planSelect({ rows: 4, cols: 5000, keep: 10 }, limits, new Set([r256]), 'auto'), 'host');
  });

  test('random shapes: plan, DeviceSelectTakes and the engine agree', { skip }, () => {
    const cuda = nativeCuda();
    const limits = cuda.selectKernelInfo;
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 200_000 }),
        fc.integer({ min: 0, max: 2_000_000 }),
        fc.integer({ min: 0, max: 400 }),
        (rows, cols, keep) => {
          const want = asWhere(deviceSelectTakes(rows, cols, keep, false, true));
          assert.equal(planSelect({ rows, cols, keep }, limits, new Set(), 'auto'), want);
          assert.equal(cuda.internal.selectLimitBreach(rows, cols, keep) === '', want === 'device');
        },
      ),
      { numRuns: 2000 },
    );
  });

  test("the engine's refusal says why, with the shape", { skip }, () => {
    const breach = nativeCuda().internal.selectLimitBreach;
    assert.match(
      breach(2, 300, 257),
      /2 rows of 300 columns, keep 257: keep is past the device selection's 256/,
    );
    assert.match(breach(1, 5, 6), /keep must be in 1 \.\. columns/);
    assert.match(breach(70_000, 100, 64), /read-back \(33554432 bytes\)/);
    assert.match(breach(2_000_000, 2048 * 1100, 1), /grid/);
    assert.equal(breach(2, 300, 256), '');
    assert.throws(() => breach(-1, 3, 1), /rows/);
    assert.throws(() => breach(1, 3, 1.5), /keep/);
  });

  test('small selections (the whole matrix within 16 KB) are for the host heaps', () => {
    assert.equal(HOST_SELECT_MAX_SCORES * 4, 16 * 1024);
    assert.equal(smallSelection({ rows: 1, cols: 1000, keep: 10 }), true);
    assert.equal(smallSelection({ rows: 4, cols: 1024, keep: 10 }), true);
    assert.equal(smallSelection({ rows: 4, cols: 1025, keep: 10 }), false);
    assert.equal(smallSelection({ rows: 1, cols: 100_000, keep: 10 }), false);
  });

  test("setSelectPlacement('host') makes the plan choose the host for every selection", () => {
    const limits: SelectKernelInfo = {
      readBackBytes: 32 * 2 ** 20,
      maxBlocks: 2147483647,
      entries: [{ maxKeep: 256, chunk: 8192, kernel: 'k' }],
    };
    const shape = { rows: 4, cols: 1000, keep: 10 };
    assert.equal(selectPlacement(), 'auto');
    assert.equal(planSelect(shape, limits), 'device');
    setSelectPlacement('host');
    try {
      assert.equal(selectPlacement(), 'host');
      assert.equal(planSelect(shape, limits), 'host');
    } finally {
      setSelectPlacement('auto');
    }
    assert.equal(planSelect(shape, limits), 'device');
    assert.throws(
      () => setSelectPlacement('device' as 'auto'),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'placement',
    );
    assert.equal(selectPlacement(), 'auto');
  });
});
