// End-to-end tests of `maxsim chamfer` and `maxsim bench --op chamfer`: spawn the compiled CLI, check
// the JSON against the float64 reference, the table, and clean errors.
import assert from 'node:assert/strict';
import { type SpawnSyncReturns, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { referenceChamfer } from '../src/backends/reference-chamfer.js';
import { writeNpy } from '../src/io/npy.js';
import { raggedBatch } from '../src/tensor.js';
import { rng, runSeed } from './helpers.js';

const CLI = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-chamfer-cli-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

function cli(...args: string[]): SpawnSyncReturns<string> {
  return spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 120_000 });
}

function ok(r: SpawnSyncReturns<string>) {
  assert.equal(r.status, 0, `stdout: ${r.stdout}\nstderr: ${r.stderr}`);
}

function cleanError(r: SpawnSyncReturns<string>, code: number): string {
  assert.equal(r.status, code, `stdout: ${r.stdout}\nstderr: ${r.stderr}`);
  const lines = r.stderr.trimEnd().split('\n');
  assert.equal(lines.length, 1, r.stderr);
  assert.match(lines[0], /^maxsim: \S/);
  return lines[0];
}

const rand = rng(runSeed ^ 0xc11);
const sizesA = [40, 0, 1, 25];
const sizesB = [30, 0, 7, 1];
function packed(sizes: number[]) {
  const offsets = [0];
  for (const s of sizes) offsets.push(offsets[offsets.length - 1] + s);
  const data = new Float32Array(offsets[offsets.length - 1] * 3).map(() => rand() * 2 - 1);
  return { data, offsets };
}
const A = packed(sizesA);
const B = packed(sizesB);
const file = (n: string) => path.join(tmp, n);
writeNpy(file('a.npy'), { dtype: 'float32', shape: [A.data.length / 3, 3], data: A.data });
writeNpy(file('b.npy'), { dtype: 'float32', shape: [B.data.length / 3, 3], data: B.data });
writeNpy(file('ao.npy'), { dtype: 'int64', shape: [5], data: BigInt64Array.from(A.offsets.map(BigInt)) });
writeNpy(file('bo.npy'), { dtype: 'int32', shape: [5], data: Int32Array.from(B.offsets) });

describe('maxsim chamfer', () => {
  for (const reduction of ['mean', 'sum'] as const) {
    test(`--json, ragged pairs with offsets, --reduction ${reduction}, against the float64 reference`, () => {
      const r = cli(
        'chamfer',
        '--a',
        file('a.npy'),
        '--b',
        file('b.npy'),
        '--a-offsets',
        file('ao.npy'),
        '--b-offsets',
        file('bo.npy'),
        '--reduction',
        reduction,
        '--json',
      );
      ok(r);
      const got = JSON.parse(r.stdout) as { distances: (number | null)[] };
      const ref = referenceChamfer(
        raggedBatch(A.data, A.offsets, { dim: 3 }),
        raggedBatch(B.data, B.offsets, { dim: 3 }),
        { reduction },
      );
      assert.equal(got.distances.length, 4);
      for (let b = 0; b < 4; b++) {
        const want = ref.distances[b];
        const v = got.distances[b];
        assert.ok(
          v !== null && Math.abs(v - want) <= 1e-6 * want + 1e-30,
          `pair ${b}: ${v} vs ${want} (seed ${runSeed})`,
        );
      }
    });
  }

  test('one pair without offsets; a table without --json; empty clouds are 0', () => {
    const r = cli('chamfer', '--a', file('a.npy'), '--b', file('b.npy'), '--json');
    ok(r);
    const ref = referenceChamfer(
      raggedBatch(A.data, [0, A.data.length / 3], { dim: 3 }),
      raggedBatch(B.data, [0, B.data.length / 3], { dim: 3 }),
    );
    const got = JSON.parse(r.stdout).distances as number[];
    assert.equal(got.length, 1);
    assert.ok(Math.abs(got[0] - ref.distances[0]) <= 1e-6 * ref.distances[0]);
    const t = cli(
      'chamfer',
      '--a',
      file('a.npy'),
      '--b',
      file('b.npy'),
      '--a-offsets',
      file('ao.npy'),
      '--b-offsets',
      file('bo.npy'),
    );
    ok(t);
    assert.match(t.stdout, /^pair\s+points a\s+points b\s+distance/);
    assert.match(t.stdout.split('\n')[2], /^\s*1\s+0\s+0\s+0\.000000/);
  });

  test('a cloud facing an empty cloud is +Infinity (null in JSON)', () => {
    writeNpy(file('bo2.npy'), { dtype: 'int32', shape: [5], data: Int32Array.from([0, 30, 30, 37, 38]) });
    const ao = Int32Array.from([0, 40, 41, 41, 66]);
    writeNpy(file('ao2.npy'), { dtype: 'int32', shape: [5], data: ao });
    const r = cli(
      'chamfer',
      '--a',
      file('a.npy'),
      '--b',
      file('b.npy'),
      '--a-offsets',
      file('ao2.npy'),
      '--b-offsets',
      file('bo2.npy'),
      '--json',
    );
    ok(r);
    assert.equal(JSON.parse(r.stdout).distances[1], null);
  });

  test('bad inputs fail with one clean line', () => {
    writeNpy(file('a4.npy'), { dtype: 'float32', shape: [2, 9], data: new Float32Array(18) });
    assert.match(cleanError(cli('chamfer', '--a', file('a4.npy'), '--b', file('a4.npy')), 1), /P\.dim/);
    assert.match(
      cleanError(
        cli('chamfer', '--a', file('a.npy'), '--b', file('b.npy'), '--b-offsets', file('bo.npy')),
        1,
      ),
      /Q\.count/,
    );
    assert.match(cleanError(cli('chamfer', '--a', file('missing.npy'), '--b', file('b.npy')), 1), /missing/);
    cleanError(cli('chamfer', '--a', file('a.npy'), '--b', file('b.npy'), '--reduction', 'max'), 2);
    cleanError(cli('chamfer', '--a', file('a.npy')), 2);
  });
});

describe('maxsim bench --op chamfer', () => {
  test('--json reports forward, backward, GFLOP/s and the FMA peak share', () => {
    const r = cli(
      'bench',
      '--op',
      'chamfer',
      '--shape',
      '2,300,200,3',
      '--repeats',
      '1',
      '--warmup',
      '0',
      '--json',
      '--no-torch',
    );
    ok(r);
    const o = JSON.parse(r.stdout.trim().split('\n')[0]);
    assert.equal(o.shape, '2,300,200,3');
    assert.ok(o.forwardMs > 0 && o.backwardMs > 0 && o.gflops > 0);
    assert.ok(o.peakGflops === 0 || o.pctFmaPeak > 0);
  });
  test('shape and option errors', () => {
    cleanError(cli('bench', '--op', 'chamfer', '--shape', '2,300,200,9'), 2);
    assert.match(cleanError(cli('bench', '--op', 'chamfer', '--shape', '1,2,3,4,5'), 1), /--shape/);
    assert.match(cleanError(cli('bench', '--shape', '1,2,3,4'), 1), /--op chamfer/);
    assert.match(
      cleanError(cli('bench', '--op', 'chamfer', '--isa', 'z80', '--shape', '1,2,3,4'), 1),
      /--isa/,
    );
  });
});
