// token_set.h's pinning without V8's C++ API (MAXSIM_NO_V8: the musl packages, built with Zig's
// libc++, which cannot share V8's std::shared_ptr; docs/platforms.md). A small test addon
// (native/binding/test/pin_check.cc) is built here with that define by node-gyp, against this
// Node's headers: it must import no V8 symbol, and a job must read the values the arrays held at the
// call (a copy made when the set is parsed) whatever happens to them while it runs: transferred
// (detached), overwritten, collected; SharedArrayBuffer-backed and offset views pin the same way,
// and spans outside the buffer are refused. Skips where node-gyp or a C++ compiler is missing.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { packageRoot } from '../src/native.js';
import { raggedBatch } from '../src/tensor.js';
import { rng, runSeed } from './helpers.js';

const require = createRequire(import.meta.url);
const { findNodeGyp } = (await import(
  pathToFileURL(path.join(packageRoot, 'scripts', 'node-gyp.mjs')).href
)) as {
  findNodeGyp(root: string): string | undefined;
};
const nodeGyp = findNodeGyp(packageRoot);
const cxx = spawnSync(process.env.CXX ?? 'g++', ['--version']).status === 0;
const skip = !nodeGyp ? 'needs node-gyp (npm ships it)' : !cxx ? 'needs a C++ compiler' : false;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-pin-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

type PinCheck = { sum(batch: object, ms: number): Promise<number>; noV8: boolean };

function buildAddon(): { addon: PinCheck; file: string } {
  const gyp = {
    targets: [
      {
        target_name: 'pin_check',
        sources: ['native/binding/test/pin_check.cc'],
        'cflags!': ['-fno-exceptions'],
        'cflags_cc!': ['-fno-exceptions'],
        cflags_cc: ['-O1', '-std=c++17'],
        defines: [
          'MAXSIM_NO_V8',
          'NAPI_VERSION=8',
          'NODE_ADDON_API_CPP_EXCEPTIONS',
          'NODE_ADDON_API_DISABLE_DEPRECATED',
        ],
        include_dirs: [path.dirname(require.resolve('node-addon-api/napi.h'))],
      },
    ],
  };
  // the binding headers and what they include, copied (gyp wants sources below its directory)
  for (const d of ['binding', 'common'])
    fs.cpSync(path.join(packageRoot, 'native', d), path.join(tmp, 'native', d), { recursive: true });
  fs.writeFileSync(path.join(tmp, 'binding.gyp'), JSON.stringify(gyp));
  const nodedir = path.resolve(path.dirname(process.execPath), '..');
  const r = spawnSync(process.execPath, [nodeGyp as string, 'rebuild', `--nodedir=${nodedir}`], {
    cwd: tmp,
    encoding: 'utf8',
    timeout: 300_000,
  });
  assert.equal(r.status, 0, `${r.stdout.slice(-3000)}\n${r.stderr.slice(-3000)}`);
  const file = path.join(tmp, 'build', 'Release', 'pin_check.node');
  return { addon: require(file) as PinCheck, file };
}

const sumOf = (a: Float32Array) => a.reduce((s, x) => s + x, 0);

describe('pinning without V8 (MAXSIM_NO_V8)', { skip }, () => {
  const built = skip ? undefined : buildAddon();
  const addon = built?.addon as PinCheck;
  const rand = rng(runSeed + 21);
  const values = (n: number) => Float32Array.from({ length: n }, () => Math.round((rand() * 2 - 1) * 64) / 8);

  test('the addon imports no V8 C++ symbol and says it was built without V8', () => {
    assert.equal(addon.noV8, true);
    const nm = spawnSync('nm', ['-D', '--undefined-only', built!.file], { encoding: 'utf8' });
    if (nm.status === 0) assert.ok(!/\b_ZNK?2v8/.test(nm.stdout), nm.stdout.match(/\b_ZNK?2v8\w+/)?.[0]);
  });

  test('a job reads the values of the call: transferred, overwritten or dropped arrays do not change it', async () => {
    const dim = 3;
    for (const change of ['transfer', 'overwrite', 'drop'] as const) {
      let data: Float32Array | undefined = values(40 * dim);
      const expected = sumOf(data);
      const offsets = [0, 7, 7, 20, 40];
      const pending = addon.sum(raggedBatch(data, offsets, { dim }), 60);
      if (change === 'transfer') structuredClone(data.buffer, { transfer: [data.buffer as ArrayBuffer] });
      if (change === 'overwrite') data.fill(1e6);
      if (change === 'drop') data = undefined;
      (globalThis as { gc?: () => void }).gc?.();
      if (change === 'transfer') assert.equal(data?.length, 0, 'the buffer was detached');
      assert.equal(await pending, expected, change);
    }
  });

  test('SharedArrayBuffer-backed and offset views, and empty batches', async () => {
    const dim = 4;
    const shared = new Float32Array(new SharedArrayBuffer(30 * dim * 4));
    shared.set(values(30 * dim));
    const sharedSum = sumOf(shared);
    const p = addon.sum(raggedBatch(shared, [0, 10, 30], { dim }), 30);
    shared.fill(0);
    assert.equal(await p, sharedSum);
    const big = values(50 * dim);
    const view = big.subarray(10 * dim, 30 * dim);
    assert.equal(await addon.sum(raggedBatch(view, [0, 5, 20], { dim }), 0), sumOf(view));
    assert.equal(await addon.sum(raggedBatch(new Float32Array(0), [0], { dim }), 0), 0);
  });

  test('spans outside the buffer are refused before any job', () => {
    const dim = 2;
    const data = values(10 * dim);
    const bad = {
      kind: 'batch',
      dtype: 'float32',
      data,
      dim,
      count: 1,
      starts: Float64Array.of(8),
      lengths: Int32Array.of(5),
    };
    assert.throws(() => addon.sum(bad, 0), /to lie inside its buffer of 10 tokens/);
  });
});
