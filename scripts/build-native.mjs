#!/usr/bin/env node
// Builds the native addon (node-gyp) and, where nvcc exists, the CUDA kernels into one fatbin.
// Run by `npm ci` (the install script). Nothing is downloaded: node-gyp builds against the local
// Node headers, and a missing nvcc only means the CUDA engine is absent (the reason is recorded).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit', ...opts });
  if (r.error) throw r.error;
  return r.status ?? 1;
}

function findNodeGyp() {
  if (process.env.npm_config_node_gyp && existsSync(process.env.npm_config_node_gyp))
    return process.env.npm_config_node_gyp;
  // npm ships node-gyp inside itself; find it next to the running node.
  const candidates = [
    join(
      dirname(process.execPath),
      '..',
      'lib',
      'node_modules',
      'npm',
      'node_modules',
      'node-gyp',
      'bin',
      'node-gyp.js',
    ),
    join(root, 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'),
  ];
  return candidates.find((c) => existsSync(c));
}

function buildAddon() {
  const gyp = findNodeGyp();
  if (!gyp) {
    console.error(
      'maxsim: node-gyp was not found (it ships with npm); install npm >= 9 and run `npm rebuild maxsim`.',
    );
    process.exit(1);
  }
  // Build against the headers of the running Node (never download them).
  const prefix = process.env.npm_config_nodedir || resolve(dirname(process.execPath), '..');
  const nodedir = existsSync(join(prefix, 'include', 'node', 'node_api.h')) ? [`--nodedir=${prefix}`] : [];
  // configure + build rather than rebuild: rebuild deletes build/, and with it build/kernels.
  let status = run(process.execPath, [gyp, 'configure', ...nodedir]);
  if (status === 0) status = run(process.execPath, [gyp, 'build', '--jobs', 'max', ...nodedir]);
  if (status !== 0) {
    console.error(
      'maxsim: building the native addon failed (see the compiler output above). It needs a C++17 compiler, make and python3.',
    );
    process.exit(status);
  }
}

function findNvcc() {
  const fromEnv = process.env.NVCC;
  if (fromEnv && existsSync(fromEnv)) return fromEnv;
  const probe = spawnSync('nvcc', ['--version'], { encoding: 'utf8' });
  if (probe.status === 0) return 'nvcc';
  for (const p of ['/usr/local/cuda/bin/nvcc', '/opt/cuda/bin/nvcc']) if (existsSync(p)) return p;
  return undefined;
}

// Cubins for sm_80 (mma.sync) and sm_90a (wgmma/TMA), plus compute_90a PTX so newer GPUs can JIT.
const GENCODE = [
  '-gencode=arch=compute_80,code=sm_80',
  '-gencode=arch=compute_90a,code=sm_90a',
  '-gencode=arch=compute_90a,code=compute_90a',
];

function buildKernels() {
  const outDir = join(root, 'build', 'kernels');
  rmSync(outDir, { recursive: true, force: true });
  mkdirSync(outDir, { recursive: true });
  const kernelDir = join(root, 'native', 'cuda', 'kernels');
  const sources = existsSync(kernelDir)
    ? readdirSync(kernelDir)
        .filter((f) => f.endsWith('.cu'))
        .sort()
    : [];
  const unavailable = (reason) => {
    writeFileSync(join(outDir, 'UNAVAILABLE.txt'), `${reason}\n`);
    console.log(`maxsim: CUDA kernels not built: ${reason}`);
  };
  if (process.env.MAXSIM_SKIP_CUDA === '1') return unavailable('MAXSIM_SKIP_CUDA=1 was set at build time');
  if (sources.length === 0) return unavailable('no CUDA kernel sources in native/cuda/kernels');
  const nvcc = findNvcc();
  if (!nvcc)
    return unavailable(
      'nvcc was not found at build time (install the CUDA toolkit and run `npm rebuild maxsim`)',
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
  console.log(`maxsim: built ${sources.length} CUDA kernel fatbin(s) into build/kernels`);
}

const only = process.argv[2];
if (only !== 'kernels') buildAddon();
if (only !== 'addon') buildKernels();
