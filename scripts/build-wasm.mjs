#!/usr/bin/env node
// Builds the WebAssembly engine (native/wasm: the CPU kernels for wasm32 + SIMD128) into two modules
// with clang's wasm32 target and wasm-ld: native/wasm/maxsim.wasm (SIMD128) and maxsim-relaxed.wasm
// (SIMD128 + relaxed SIMD's fused multiply-add; loaded where WebAssembly.validate accepts it).
// Relaxed SIMD needs clang 16 or later (Debian bookworm: apt-get install clang-16 lld-16); the
// committed bytes are clang 16's, so `--check` (rebuild into a temporary directory, fail when a
// committed module differs; test/wasm.test.ts runs it) compares only with clang 16 and otherwise
// exits 3 like a missing toolchain. The .wasm files are committed, so installs and browsers never
// need the toolchain; `--print-size` reports raw and gzipped bytes.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const dir = join(root, 'native', 'wasm');
export const wasmFile = join(dir, 'maxsim.wasm');
export const relaxedFile = join(dir, 'maxsim-relaxed.wasm');
const modules = [
  { file: 'maxsim.wasm', flags: [] },
  { file: 'maxsim-relaxed.wasm', flags: ['-mrelaxed-simd', '-DMAXSIM_WASM_RELAXED'] },
];
const pinnedMajor = 16;

/** The first tool that runs, with the major version its --version names. */
function tool(names) {
  for (const n of names) {
    const r = spawnSync(n, ['--version'], { encoding: 'utf8' });
    if (r.status === 0) return { name: n, major: Number(/version (\d+)/.exec(r.stdout)?.[1] ?? 0) };
  }
  return undefined;
}

function compile(clang, unit, flags, obj) {
  const args = [
    '--target=wasm32',
    '-msimd128',
    ...flags,
    '-mbulk-memory',
    '-O3',
    '-std=c++17',
    '-nostdlib',
    '-fno-exceptions',
    '-fno-rtti',
    // relative paths only, so the bytes do not depend on where the checkout lives
    `-ffile-prefix-map=${root}/=`,
    '-isystem',
    'native/wasm/shim',
    '-Wall',
    '-Werror',
    '-Wno-unused-function',
    '-c',
    `native/wasm/${unit}.cc`,
    '-o',
    obj,
  ];
  return spawnSync(clang, args, { cwd: root, stdio: 'inherit' }).status === 0;
}

/** The compiler and linker, or the reason there are none usable. */
export function toolchain() {
  const v = pinnedMajor;
  const clang = tool(
    [process.env.WASM_CC, `clang-${v}`, 'clang-19', 'clang-18', 'clang-17', 'clang'].filter(Boolean),
  );
  const ld = tool(
    [process.env.WASM_LD, `wasm-ld-${v}`, 'wasm-ld-19', 'wasm-ld-18', 'wasm-ld-17', 'wasm-ld'].filter(
      Boolean,
    ),
  );
  if (!clang || !ld)
    return { why: `clang and wasm-ld were not found (Debian: apt-get install clang-${v} lld-${v})` };
  if (clang.major < v)
    return { why: `${clang.name} is clang ${clang.major}; relaxed SIMD needs clang ${v} or later` };
  return { clang: clang.name, ld: ld.name, pinned: clang.major === v };
}

/** Builds both modules into directory `outDir`; returns undefined or the reason it could not. */
export function buildWasm(outDir) {
  const tc = toolchain();
  if (tc.why) return tc.why;
  const tmp = mkdtempSync(join(tmpdir(), 'maxsim-wasm-'));
  try {
    // arena and int8 are the same in both modules (no relaxed instruction there), float differs
    const shared = [];
    for (const u of ['arena', 'int8']) {
      const obj = join(tmp, `${u}.o`);
      if (!compile(tc.clang, u, [], obj)) return `${tc.clang} failed on native/wasm/${u}.cc`;
      shared.push(obj);
    }
    for (const [i, m] of modules.entries()) {
      const obj = join(tmp, `float${i}.o`);
      if (!compile(tc.clang, 'float', m.flags, obj)) return `${tc.clang} failed on native/wasm/float.cc`;
      // 1 MiB of stack: the kernels' tiles live in locals; no threads, no imports.
      const args = ['--no-entry', '--strip-all', '-z', 'stack-size=1048576', shared[0], obj, shared[1]];
      const r = spawnSync(tc.ld, [...args, '-o', join(outDir, m.file)], { stdio: 'inherit' });
      if (r.status !== 0) return `${tc.ld} failed on ${m.file}`;
    }
    return undefined;
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

function sizes(file) {
  const bytes = readFileSync(file);
  return `${bytes.length} bytes, ${gzipSync(bytes, { level: 9 }).length} gzipped`;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const mode = process.argv[2];
  if (mode === '--print-size') {
    for (const m of modules) console.log(`${m.file}: ${sizes(join(dir, m.file))}`);
    process.exit(0);
  }
  if (mode === '--check') {
    const tc = toolchain();
    if (!tc.why && !tc.pinned) tc.why = `${tc.clang} is not clang ${pinnedMajor}, whose bytes are committed`;
    if (tc.why) {
      console.error(`maxsim: the wasm modules were not compared: ${tc.why}`);
      process.exit(3);
    }
  }
  const outDir = mode === '--check' ? mkdtempSync(join(tmpdir(), 'maxsim-wasm-check-')) : dir;
  const why = buildWasm(outDir);
  if (why) {
    console.error(`maxsim: the wasm engine was not built: ${why}`);
    process.exit(mode === '--check' ? 3 : 1);
  }
  if (mode === '--check') {
    const stale = modules.filter(
      (m) => Buffer.compare(readFileSync(join(outDir, m.file)), readFileSync(join(dir, m.file))) !== 0,
    );
    rmSync(outDir, { recursive: true, force: true });
    if (stale.length > 0) {
      console.error(
        `maxsim: ${stale.map((m) => `native/wasm/${m.file}`).join(', ')} stale: run \`node scripts/build-wasm.mjs\` and commit`,
      );
      process.exit(1);
    }
    console.log('maxsim: the committed wasm modules match their sources');
  } else {
    for (const m of modules) console.log(`maxsim: built native/wasm/${m.file} (${sizes(join(dir, m.file))})`);
  }
}
