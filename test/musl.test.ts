// The CPU engine built for musl with Zig's clang + libc++ (the toolchain of the @maxsim/linux-*-musl
// packages, scripts/pack-all.mjs): engine_check statically linked for x86_64-linux-musl runs here
// natively (every x86 kernel set this CPU admits, against its float64 reference) and for
// aarch64-linux-musl under qemu-aarch64-static (NEON). The linux-x64-musl addon is then packed by
// pack-all (which refuses an addon that imports V8's C++ API: Zig's libc++ cannot share V8's
// std::shared_ptr<v8::BackingStore> with Node's libstdc++; the musl build defines MAXSIM_NO_V8) and
// loaded by musl's own dynamic loader (Debian's musl-tools) in a small C host that stands in for
// Node's napi_* exports (no musl Node is on npm): every other symbol must resolve in musl libc and
// its static initializers run (a glibc addon fails there: libstdc++.so.6 not found). Needs zig
// (ZIG=path, .ci/zig's from npm as .ci/run installs it, or on PATH; its first build of musl and
// libc++ per target takes minutes on 2 cores: measured in docs/platforms.md). The MAXSIM_NO_V8
// pinning itself is tested on glibc by building with CXXFLAGS=-DMAXSIM_NO_V8 and running the suite
// (docs/platforms.md).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { packageRoot } from '../src/native.js';
import { version } from '../src/version.js';

// ZIG, else the one .ci/run installs from npm (.ci/zig), else zig on PATH
const ciZig = path.join(packageRoot, '.ci', 'zig', 'node_modules', '@ryoppippi', 'zig-linux-x64', 'zig');
const zig = [process.env.ZIG, ciZig, 'zig'].find((z) => z && spawnSync(z, ['version']).status === 0);
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
    // without -mavx512bf16, as scripts/pack-all.mjs builds the musl addons (clang 16 crashes on it)
    const flags = t.cflags_cc
      .filter((f) => f.startsWith('-m') && f !== '-mavx512bf16')
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

// Stands in for Node: defines every napi_* / node_api_* function the addon imports (each aborts if
// called) and exports them (-rdynamic), so musl's loader can bind the addon (musl binds every symbol
// at dlopen).
function hostSource(napi: string[]): string {
  const stubs = napi.map((n) => `void ${n}(void) { abort(); }`).join('\n');
  return `#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
${stubs}
int main(int argc, char** argv) {
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "dlopen: %s\\n", dlerror()); return 1; }
  void* reg = dlsym(h, "napi_register_module_v1");
  printf("loaded, napi_register_module_v1 %s\\n", reg ? "found" : "missing");
  return reg ? 0 : 2;
}
`;
}

const muslLoader = '/lib/ld-musl-x86_64.so.1';
const muslGcc = spawnSync('musl-gcc', ['--version']).status === 0;

describe('the @maxsim/linux-x64-musl package (Zig)', {
  skip: !zig
    ? 'needs zig (ZIG=path or on PATH)'
    : !muslGcc || !fs.existsSync(muslLoader)
      ? `needs musl-gcc and ${muslLoader} (apt-get install musl-tools)`
      : false,
}, () => {
  test('packs (no V8 C++ symbol), is linked against musl only, and loads in musl ld.so with napi stubs', {
    timeout: 2_400_000,
  }, () => {
    const packs = path.join(tmp, 'packs');
    const pack = spawnSync(process.execPath, ['scripts/pack-all.mjs', '--out', packs, 'linux-x64-musl'], {
      cwd: packageRoot,
      encoding: 'utf8',
      timeout: 2_300_000,
      env: { ...process.env, ZIG: zig },
    });
    assert.equal(pack.status, 0, `${pack.stdout.slice(-3000)}\n${pack.stderr.slice(-3000)}`);
    const tgz = path.join(packs, `maxsim-linux-x64-musl-${version}.tgz`);
    const unpacked = path.join(tmp, 'musl-pkg');
    fs.mkdirSync(unpacked);
    assert.equal(spawnSync('tar', ['-xzf', tgz, '-C', unpacked]).status, 0);
    const manifest = JSON.parse(fs.readFileSync(path.join(unpacked, 'package', 'package.json'), 'utf8'));
    assert.deepEqual([manifest.os, manifest.cpu, manifest.libc], [['linux'], ['x64'], ['musl']]);
    const addon = path.join(unpacked, 'package', 'maxsim_native.node');
    const needed = spawnSync('readelf', ['-d', addon], { encoding: 'utf8' }).stdout;
    const libs = [...needed.matchAll(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/g)].map((m) => m[1]);
    assert.ok(libs.length > 0 && libs.every((l) => l === 'libc.so'), `NEEDED: ${libs.join(', ')}`);
    const undef = spawnSync('nm', ['-D', '--undefined-only', addon], { encoding: 'utf8' }).stdout;
    const napi = [...undef.matchAll(/\b((?:napi|node_api)_\w+)/g)].map((m) => m[1]);
    assert.ok(napi.includes('napi_create_function'), 'the addon imports napi_* from its host');
    assert.ok(!/\b_ZNK?2v8/.test(undef), "no V8 C++ symbol (Node's ABI, not the addon's libc++)");
    assert.ok(
      !/\b_ZN\d*maxsim/.test(undef),
      `no maxsim symbol left undefined: ${undef.match(/\b_ZN\d*maxsim\w+/)}`,
    );
    assert.ok(!/GLIBC_/.test(undef), 'no glibc-versioned symbol');
    const src = path.join(tmp, 'host.c');
    fs.writeFileSync(src, hostSource([...new Set(napi)]));
    const host = path.join(tmp, 'host');
    const cc = spawnSync('musl-gcc', ['-O1', '-rdynamic', src, '-o', host], { encoding: 'utf8' });
    assert.equal(cc.status, 0, cc.stderr);
    const r = spawnSync(host, [addon], { encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /loaded, napi_register_module_v1 found/);
  });
});

const muslArm64 = '/usr/lib/aarch64-linux-musl';
const arm64Loader = '/lib/ld-musl-aarch64.so.1';
const armGcc = spawnSync('aarch64-linux-gnu-gcc', ['--version']).status === 0;

describe('the @maxsim/linux-arm64-musl package (Zig)', {
  skip: !zig
    ? 'needs zig (ZIG=path or on PATH)'
    : !qemu || !armGcc
      ? 'needs qemu-aarch64-static and aarch64-linux-gnu-gcc'
      : !fs.existsSync(arm64Loader) || !fs.existsSync(path.join(muslArm64, 'Scrt1.o'))
        ? `needs ${arm64Loader} and ${muslArm64} (dpkg --add-architecture arm64; apt-get install musl-dev:arm64)`
        : false,
}, () => {
  test('packs (no V8 C++ symbol, none undefined of its own), and loads in musl aarch64 ld.so under qemu', {
    timeout: 2_400_000,
  }, () => {
    const packs = path.join(tmp, 'packs-arm64');
    const pack = spawnSync(process.execPath, ['scripts/pack-all.mjs', '--out', packs, 'linux-arm64-musl'], {
      cwd: packageRoot,
      encoding: 'utf8',
      timeout: 2_300_000,
      env: { ...process.env, ZIG: zig },
    });
    assert.equal(pack.status, 0, `${pack.stdout.slice(-3000)}\n${pack.stderr.slice(-3000)}`);
    const unpacked = path.join(tmp, 'musl-arm64-pkg');
    fs.mkdirSync(unpacked);
    const tgz = path.join(packs, `maxsim-linux-arm64-musl-${version}.tgz`);
    assert.equal(spawnSync('tar', ['-xzf', tgz, '-C', unpacked]).status, 0);
    const addon = path.join(unpacked, 'package', 'maxsim_native.node');
    const undef = spawnSync('nm', ['-D', '--undefined-only', addon], { encoding: 'utf8' }).stdout;
    assert.ok(!/\b_ZNK?2v8/.test(undef), 'no V8 C++ symbol');
    assert.ok(
      !/\b_ZN\d*maxsim/.test(undef),
      `no maxsim symbol left undefined: ${undef.match(/\b_ZN\d*maxsim\w+/)}`,
    );
    const napi = [...new Set([...undef.matchAll(/\b((?:napi|node_api)_\w+)/g)].map((m) => m[1]))];
    // the host: Debian's aarch64 gcc against musl's arm64 crt and libc (musl-dev:arm64)
    const src = path.join(tmp, 'host-arm64.c');
    fs.writeFileSync(src, hostSource(napi));
    const host = path.join(tmp, 'host-arm64');
    const m = (f: string) => path.join(muslArm64, f);
    const cc = spawnSync(
      'aarch64-linux-gnu-gcc',
      [
        '-O1',
        '-nostdinc',
        '-isystem',
        '/usr/include/aarch64-linux-musl',
        '-nostdlib',
        '-fPIE',
        '-pie',
        m('Scrt1.o'),
        m('crti.o'),
        src,
        m('libc.so'),
        m('crtn.o'),
        `-Wl,-dynamic-linker,${arm64Loader}`,
        '-rdynamic',
        '-o',
        host,
      ],
      { encoding: 'utf8' },
    );
    assert.equal(cc.status, 0, cc.stderr);
    const r = spawnSync('qemu-aarch64-static', [host, addon], { encoding: 'utf8', timeout: 120_000 });
    assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /loaded, napi_register_module_v1 found/);
  });
});
