#!/usr/bin/env node
// Builds the WebAssembly engine (native/wasm: the CPU kernels for wasm32 + SIMD128) into
// native/wasm/maxsim.wasm with clang's wasm32 target and wasm-ld (Debian: apt-get install clang lld).
// The .wasm is committed, so installs and browsers never need the toolchain; `--check` rebuilds into
// a temporary file and fails when the committed copy differs (test/wasm.test.ts runs it where clang
// exists), `--print-size` reports raw and gzipped bytes.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const dir = join(root, 'native', 'wasm');
export const wasmFile = join(dir, 'maxsim.wasm');
const units = ['arena', 'float', 'int8'];

function tool(names) {
  for (const n of names) {
    const r = spawnSync(n, ['--version'], { encoding: 'utf8' });
    if (r.status === 0) return n;
  }
  return undefined;
}

/** Builds into `out`; returns undefined or the reason it could not. */
export function buildWasm(out) {
  const clang = tool([process.env.WASM_CC, 'clang', 'clang-19', 'clang-16', 'clang-14'].filter(Boolean));
  const ld = tool([process.env.WASM_LD, 'wasm-ld', 'wasm-ld-19', 'wasm-ld-16', 'wasm-ld-14'].filter(Boolean));
  if (!clang || !ld) return 'clang and wasm-ld were not found (Debian: apt-get install clang lld)';
  const tmp = mkdtempSync(join(tmpdir(), 'maxsim-wasm-'));
  try {
    const objects = [];
    for (const u of units) {
      const obj = join(tmp, `${u}.o`);
      const args = [
        '--target=wasm32',
        '-msimd128',
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
        `native/wasm/${u}.cc`,
        '-o',
        obj,
      ];
      const r = spawnSync(clang, args, { cwd: root, stdio: 'inherit' });
      if (r.status !== 0) return `${clang} failed on native/wasm/${u}.cc`;
      objects.push(obj);
    }
    // 1 MiB of stack: the kernels' tiles live in locals; no threads, no imports.
    const r = spawnSync(
      ld,
      ['--no-entry', '--strip-all', '-z', 'stack-size=1048576', ...objects, '-o', out],
      {
        stdio: 'inherit',
      },
    );
    if (r.status !== 0) return `${ld} failed`;
    return undefined;
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const mode = process.argv[2];
  if (mode === '--print-size') {
    const bytes = readFileSync(wasmFile);
    console.log(`${bytes.length} bytes, ${gzipSync(bytes, { level: 9 }).length} gzipped`);
    process.exit(0);
  }
  const target =
    mode === '--check' ? join(mkdtempSync(join(tmpdir(), 'maxsim-wasm-check-')), 'maxsim.wasm') : wasmFile;
  const why = buildWasm(target);
  if (why) {
    console.error(`maxsim: the wasm engine was not built: ${why}`);
    process.exit(mode === '--check' ? 3 : 1);
  }
  if (mode === '--check') {
    const same = Buffer.compare(readFileSync(target), readFileSync(wasmFile)) === 0;
    rmSync(dirname(target), { recursive: true, force: true });
    if (!same) {
      console.error(
        'maxsim: native/wasm/maxsim.wasm is stale: run `node scripts/build-wasm.mjs` and commit it',
      );
      process.exit(1);
    }
    console.log('maxsim: native/wasm/maxsim.wasm matches its sources');
  } else {
    const bytes = readFileSync(wasmFile);
    console.log(
      `maxsim: built native/wasm/maxsim.wasm (${bytes.length} bytes, ${gzipSync(bytes).length} gzipped)`,
    );
  }
}
