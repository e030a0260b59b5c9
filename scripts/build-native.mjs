#!/usr/bin/env node
import { spawnSync } from 'node:child_process';
// Builds the native addon (node-gyp) and, where nvcc exists, the CUDA kernels into one fatbin.
// Run by `prepare` in a checkout (`npm ci` / `npm install` there) and by hand as the opt-in source
// build of an installed package (`node node_modules/maxsim/scripts/build-native.mjs`); an installed
// package runs no install script: its addon comes from @maxsim/<platform> (scripts/pack-all.mjs).
// Nothing is downloaded: node-gyp builds against the local Node headers, and a missing nvcc only
// means the CUDA engine is absent (the reason is recorded). An addon already built from exactly these
// sources for this platform is kept (no compiler needed); see prebuiltReady().
import { createHash } from 'node:crypto';
import {
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { findNodeGyp } from './node-gyp.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const addonFile = join(root, 'build', 'Release', 'maxsim_native.node');
// Written after a successful build: which platform and which sources the binaries in build/ are from.
const stampFile = join(root, 'build', 'BUILT_FROM.json');

/** glibc or musl: an addon linked against one does not load on the other. */
function libc() {
  if (process.platform !== 'linux') return '';
  const header = process.report?.getReport?.().header;
  return header?.glibcVersionRuntime ? 'glibc' : 'musl';
}

function platformTag() {
  return [process.platform, process.arch, libc()].filter(Boolean).join('-');
}

function listFiles(dir) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .sort()
    .flatMap((name) => {
      const p = join(dir, name);
      return statSync(p).isDirectory() ? listFiles(p) : [p];
    });
}

/** One hash over these files' paths and bytes. */
function hashFiles(files, extra = '') {
  const h = createHash('sha256');
  h.update(extra);
  for (const f of files) {
    h.update(relative(root, f));
    h.update('\0');
    h.update(readFileSync(f));
  }
  return h.digest('hex');
}

// The gyp file: a checkout's root binding.gyp. Packages keep it off their root (npm treats a root
// binding.gyp as an install script, `node-gyp rebuild`, once the package sits in a lockfile, which
// does not record `gypfile: false`): the release library ships it as native/binding.gyp
// (scripts/pack-all.mjs), a tarball packed from a checkout as build/binding.gyp (written below).
// Its paths are relative to the package root, where a build puts it for node-gyp and then removes it.
const rootGyp = join(root, 'binding.gyp');
const shippedGyps = [join(root, 'native', 'binding.gyp'), join(root, 'build', 'binding.gyp')];

function gypFile() {
  return [rootGyp, ...shippedGyps].find((f) => existsSync(f));
}

/**
 * One hash over everything that goes into build/: the native sources, the gyp file and this script
 * (native/wasm is not in the addon: scripts/build-wasm.mjs builds it into its own file).
 */
function sourceHash() {
  const wasmDir = join(root, 'native', 'wasm');
  const gyp = gypFile();
  // the gyp file's bytes under one name wherever it is, so a package and its checkout agree
  const h = hashFiles(
    [
      ...listFiles(join(root, 'native')).filter((f) => !f.startsWith(wasmDir) && !shippedGyps.includes(f)),
      fileURLToPath(import.meta.url),
    ],
    gyp ? createHash('sha256').update(readFileSync(gyp)).digest('hex') : 'no gyp file',
  );
  return h;
}

/**
 * Undefined when build/ holds an addon made from these sources for this platform that loads in this
 * Node (N-API, so any Node >= 20 takes it); otherwise the one-line reason a build is needed.
 */
function prebuiltReady() {
  if (process.env.MAXSIM_BUILD_FROM_SOURCE === '1' || process.env.npm_config_build_from_source === 'true')
    return 'a build from source was asked for';
  if (!existsSync(addonFile) || !existsSync(stampFile)) return 'no prebuilt addon in this package';
  let stamp;
  try {
    stamp = JSON.parse(readFileSync(stampFile, 'utf8'));
  } catch {
    return `${relative(root, stampFile)} is unreadable`;
  }
  if (stamp.platform !== platformTag())
    return `the prebuilt addon is for ${stamp.platform}, this machine is ${platformTag()}`;
  if (stamp.sources !== sourceHash())
    return 'the native sources differ from those the prebuilt addon was built from';
  try {
    const addon = createRequire(import.meta.url)(addonFile);
    if (addon.abiVersion !== 1) return 'the prebuilt addon is from another version';
  } catch (e) {
    return `the prebuilt addon does not load here (${String(e?.message ?? e).split('\n')[0]})`;
  }
  return undefined;
}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit', ...opts });
  if (r.error) throw r.error;
  return r.status ?? 1;
}

/** Puts the gyp file at the root for node-gyp; returns how to undo that (nothing in a checkout). */
function placeGypFile() {
  if (existsSync(rootGyp)) return () => {};
  const shipped = gypFile();
  if (!shipped) {
    console.error(
      'maxsim: this package has no binding.gyp, so it cannot build from source; build in a checkout.',
    );
    process.exit(1);
  }
  cpSync(shipped, rootGyp);
  return () => rmSync(rootGyp, { force: true });
}

function buildAddon() {
  const gyp = findNodeGyp(root);
  if (!gyp) {
    console.error(
      'maxsim: node-gyp was not found (it ships with npm); install npm >= 9 and run `node scripts/build-native.mjs` again.',
    );
    process.exit(1);
  }
  // Build against the headers of the running Node (never download them).
  const prefix = process.env.npm_config_nodedir || resolve(dirname(process.execPath), '..');
  const nodedir = existsSync(join(prefix, 'include', 'node', 'node_api.h')) ? [`--nodedir=${prefix}`] : [];
  const unplace = placeGypFile();
  // configure + build rather than rebuild: rebuild deletes build/, and with it build/kernels.
  let status = run(process.execPath, [gyp, 'configure', ...nodedir]);
  if (status === 0) status = run(process.execPath, [gyp, 'build', '--jobs', 'max', ...nodedir]);
  const gypText = readFileSync(rootGyp);
  unplace();
  if (status !== 0) {
    console.error(
      'maxsim: building the native addon failed (see the compiler output above). It needs a C++17 compiler, make and python3.',
    );
    process.exit(status);
  }
  // the gyp file travels in build/ with the addon (package.json files), off the package root
  writeFileSync(join(root, 'build', 'binding.gyp'), gypText);
}

function findNvcc() {
  const fromEnv = process.env.NVCC;
  if (fromEnv && existsSync(fromEnv)) return fromEnv;
  const probe = spawnSync('nvcc', ['--version'], { encoding: 'utf8' });
  if (probe.status === 0) return 'nvcc';
  for (const p of ['/usr/local/cuda/bin/nvcc', '/opt/cuda/bin/nvcc']) if (existsSync(p)) return p;
  return undefined;
}

// variants.json (the scoring kernels' launch contracts, read by src/backends/cuda-dispatch.ts) is the
// output of native/cuda/kernels/variants_gen.cc, which expands the rows of maxsim_registry.h that the
// kernel sources instantiate. The generated table is committed (the dispatcher reads it from the
// package, built with or without nvcc, prebuilt or not); every build regenerates it and stops if the
// committed copy differs, and `node scripts/build-native.mjs variants` rewrites that copy
// (`variants --print` prints the generated table instead).
const variantsFile = join(root, 'native', 'cuda', 'kernels', 'variants.json');

function generateVariants() {
  const kernelDir = join(root, 'native', 'cuda', 'kernels');
  const outDir = join(root, 'build');
  mkdirSync(outDir, { recursive: true });
  const exe = join(outDir, 'variants_gen');
  const cxx = process.env.CXX || 'c++';
  const status = run(cxx, [
    '-std=c++17',
    '-O1',
    '-I',
    kernelDir,
    join(kernelDir, 'variants_gen.cc'),
    '-o',
    exe,
  ]);
  if (status !== 0) {
    console.error(
      'maxsim: building native/cuda/kernels/variants_gen.cc failed (see the compiler output above).',
    );
    process.exit(status);
  }
  const r = spawnSync(exe, [], { encoding: 'utf8' });
  if (r.error) throw r.error;
  if (r.status !== 0) {
    console.error(`maxsim: variants_gen failed: ${r.stderr.trim()}`);
    process.exit(r.status ?? 1);
  }
  return r.stdout;
}

// The constants both languages state (native/common/constants.json -> maxsim_constants.h and
// src/backends/constants.ts, both committed): a source tree whose generated copies are stale stops
// here (an installed package has no generator and nothing to regenerate).
function checkConstants() {
  const gen = join(root, 'scripts', 'gen-constants.mjs');
  if (!existsSync(gen)) return;
  const r = spawnSync(process.execPath, [gen, '--check'], { stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
}

function checkVariants() {
  const generated = generateVariants();
  const committed = existsSync(variantsFile) ? readFileSync(variantsFile, 'utf8') : '';
  if (generated !== committed) {
    console.error(
      `maxsim: ${relative(root, variantsFile)} is not what native/cuda/kernels/maxsim_registry.h makes; ` +
        'run `node scripts/build-native.mjs variants` and commit the result.',
    );
    process.exit(1);
  }
  console.log(`maxsim: ${relative(root, variantsFile)} matches maxsim_registry.h`);
}

// Cubins for sm_80 (mma.sync) and sm_90a (wgmma/TMA), plus compute_90a PTX so newer GPUs can JIT.
const GENCODE = [
  '-gencode=arch=compute_80,code=sm_80',
  '-gencode=arch=compute_90a,code=sm_90a',
  '-gencode=arch=compute_90a,code=compute_90a',
];

function buildKernels() {
  const outDir = join(root, 'build', 'kernels');
  const kernelDir = join(root, 'native', 'cuda', 'kernels');
  const sources = existsSync(kernelDir)
    ? readdirSync(kernelDir)
        .filter((f) => f.endsWith('.cu'))
        .sort()
    : [];
  // nvcc takes minutes: fatbins built from exactly these kernel sources and flags are kept.
  const kernelsStamp = join(outDir, 'SOURCES.sha256');
  // the kernels include the generated constants header (native/common/constants.json)
  const constantsHeader = join(root, 'native', 'common', 'maxsim_constants.h');
  const kernelsHash = hashFiles([...listFiles(kernelDir), constantsHeader], JSON.stringify(GENCODE));
  const fatbins = sources.map((src) => join(outDir, src.replace(/\.cu$/, '.fatbin')));
  if (
    process.env.MAXSIM_SKIP_CUDA !== '1' &&
    sources.length > 0 &&
    existsSync(kernelsStamp) &&
    readFileSync(kernelsStamp, 'utf8').trim() === kernelsHash &&
    fatbins.every((f) => existsSync(f))
  ) {
    console.log(`maxsim: the ${sources.length} CUDA kernel fatbin(s) in build/kernels are up to date`);
    return;
  }
  rmSync(outDir, { recursive: true, force: true });
  mkdirSync(outDir, { recursive: true });
  const unavailable = (reason) => {
    writeFileSync(join(outDir, 'UNAVAILABLE.txt'), `${reason}\n`);
    console.log(`maxsim: CUDA kernels not built: ${reason}`);
  };
  if (process.env.MAXSIM_SKIP_CUDA === '1') return unavailable('MAXSIM_SKIP_CUDA=1 was set at build time');
  if (sources.length === 0) return unavailable('no CUDA kernel sources in native/cuda/kernels');
  const nvcc = findNvcc();
  if (!nvcc)
    return unavailable(
      'nvcc was not found at build time (install the CUDA toolkit and run `node scripts/build-native.mjs kernels`)',
    );
  // One fatbin per kernel family; the runtime loads every *.fatbin in build/kernels.
  for (const src of sources) {
    const name = src.replace(/\.cu$/, '');
    const args = [
      '-fatbin',
      ...GENCODE,
      '-O3',
      '-std=c++17',
      '-lineinfo',
      '-Xptxas',
      '-warn-spills',
      '-I',
      kernelDir,
      join(kernelDir, src),
      '-o',
      join(outDir, `${name}.fatbin`),
    ];
    const status = run(nvcc, args);
    if (status !== 0) {
      console.error(`maxsim: nvcc failed on ${src}.`);
      process.exit(status);
    }
  }
  writeFileSync(kernelsStamp, `${kernelsHash}\n`);
  console.log(`maxsim: built ${sources.length} CUDA kernel fatbin(s) into build/kernels`);
}

// The CUDA engine without Node (native/cuda/engine.h) and its check program: every object of the
// engine compiled and linked into build/check/engine_check (the driver is opened at run time, so no
// CUDA library is needed to build it). Run it on a GPU host after the kernels are built:
//   node scripts/build-native.mjs cuda-check && build/check/engine_check [seed]
function buildCudaCheck() {
  const cuda = join(root, 'native', 'cuda');
  const engine = [
    'driver',
    'device',
    'allocator',
    'modules',
    'staging',
    'worker',
    'runtime',
    'device_select',
    'engine_sets',
    'engine_score',
    'engine_topk',
    'query_convert',
  ]
    .map((f) => join(cuda, `${f}.cc`))
    .concat(join(root, 'native', 'cpu', 'cpu_features.cc'));
  const outDir = join(root, 'build', 'check');
  mkdirSync(outDir, { recursive: true });
  const out = join(outDir, 'engine_check');
  const cxx = process.env.CXX || 'c++';
  const args = ['-std=c++17', '-O2', '-Wall', '-pthread', join(cuda, 'test', 'engine_check.cc'), ...engine];
  const status = run(cxx, [...args, '-ldl', '-o', out]);
  if (status !== 0) {
    console.error('maxsim: building the CUDA engine check failed (see the compiler output above).');
    process.exit(status);
  }
  console.log(
    `maxsim: built ${relative(root, out)} (run it on a GPU host; it reads the fatbins of build/kernels)`,
  );
}

const only = process.argv[2];
if (only === 'variants') {
  const generated = generateVariants();
  if (process.argv[3] === '--print') process.stdout.write(generated);
  else writeFileSync(variantsFile, generated);
  process.exit(0);
}
if (only === 'cuda-check') {
  buildCudaCheck();
  process.exit(0);
}
if (only === undefined) {
  const why = prebuiltReady();
  if (why === undefined) {
    console.log(`maxsim: using the prebuilt addon for ${platformTag()} (no compiler needed)`);
    process.exit(0);
  }
  console.log(`maxsim: building the native addon from source: ${why}`);
}
checkConstants();
// the stamp names the sources the build started from: a file edited during the build stays stale
const builtFrom = sourceHash();
if (only !== 'kernels') buildAddon();
if (only !== 'addon') {
  checkVariants();
  buildKernels();
}
if (only === undefined)
  writeFileSync(stampFile, `${JSON.stringify({ platform: platformTag(), sources: builtFrom }, null, 2)}\n`);
