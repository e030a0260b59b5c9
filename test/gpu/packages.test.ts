// The release packages on a GPU host (scripts/pack-all.mjs): the library, @maxsim/linux-x64-gnu and
// @maxsim/cuda-kernels laid out as npm installs them (unpacked into node_modules: the GPU host has no
// registry). Without the kernels package `maxsim info` names it; with it the loader points the addon
// at its fatbins and the CUDA backend scores float16 inputs within the fp32 bound of the float64
// reference. Skipped where no GPU runs. The GPU host has no npm: pack the tarballs where npm is
// (`node scripts/pack-all.mjs --out DIR maxsim linux-x64-gnu cuda-kernels`) and set MAXSIM_PACKS=DIR;
// without either it skips with that reason.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { packageRoot } from '../../src/native.js';
import { version } from '../../src/version.js';
import { skip } from './helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-gpu-packages-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

const SCORE = `
import * as m from 'maxsim';
import { referenceMaxsim } from 'maxsim/reference';
let s = Number(process.argv[2]) >>> 0;
const rand = () => { s = (s + 0x6d2b79f5) >>> 0; let t = Math.imul(s ^ (s >>> 15), 1 | s);
  t ^= t + Math.imul(t ^ (t >>> 7), 61 | t); return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32 * 2 - 1; };
const d = 128, lq = 32, lens = [300, 1, 77, 0, 129, 64];
const offsets = [0];
for (const n of lens) offsets.push(offsets.at(-1) + n);
const qf = Float32Array.from({ length: lq * d }, rand), df = Float32Array.from({ length: offsets.at(-1) * d }, rand);
const q = m.tokenMatrix(m.encodeFloats(qf, 'float16'), lq, d, { dtype: 'float16' });
const docs = m.raggedBatch(m.encodeFloats(df, 'float16'), offsets, { dim: d, dtype: 'float16' });
const got = await m.maxsim(q, docs, { backend: 'cuda' });
const ref = referenceMaxsim(q, docs);
const qv = m.decodeToFloat32(q.data, 'float16', d), dv = m.decodeToFloat32(docs.data, 'float16', d);
let worst = 0;
for (let b = 0; b < docs.count; b++) {
  if (got[b] === ref[b]) continue;
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
  worst = Math.max(worst, Math.abs(got[b] - ref[b]) / (2 * (d + lq) * 2 ** -24 * sum));
}
console.log(JSON.stringify({ worst, scores: Array.from(got).slice(0, 3) }));
`;

const prebuilt = process.env.MAXSIM_PACKS;
const hasNpm = spawnSync('npm', ['--version']).status === 0;
const noPacks =
  prebuilt || hasNpm ? false : 'needs npm to pack, or MAXSIM_PACKS=a folder of pack-all tarballs';

describe('release packages on a GPU host', { skip: skip || noPacks }, () => {
  test('maxsim info names @maxsim/cuda-kernels until it is there; then CUDA scores from it', {
    timeout: 300_000,
  }, () => {
    const packs = prebuilt ? path.resolve(prebuilt) : path.join(tmp, 'packs');
    if (!prebuilt) {
      const pack = spawnSync(
        process.execPath,
        ['scripts/pack-all.mjs', '--out', packs, 'maxsim', 'linux-x64-gnu', 'cuda-kernels'],
        { cwd: packageRoot, encoding: 'utf8', timeout: 240_000 },
      );
      assert.equal(pack.status, 0, `${pack.stdout}\n${pack.stderr}`);
    }
    const modules = path.join(tmp, 'project', 'node_modules');
    const unpack = (file: string, into: string) => {
      fs.mkdirSync(into, { recursive: true });
      const r = spawnSync('tar', ['-xzf', path.join(packs, file), '-C', into, '--strip-components=1']);
      assert.equal(r.status, 0, String(r.stderr));
    };
    unpack(`maxsim-${version}.tgz`, path.join(modules, 'maxsim'));
    unpack(`maxsim-linux-x64-gnu-${version}.tgz`, path.join(modules, '@maxsim', 'linux-x64-gnu'));
    fs.symlinkSync(path.join(packageRoot, 'node_modules', 'commander'), path.join(modules, 'commander'));
    const env = { ...process.env };
    delete env.MAXSIM_KERNEL_DIR;
    const cli = path.join(modules, 'maxsim', 'dist', 'src', 'cli', 'main.js');
    const run = (args: string[]) =>
      spawnSync(process.execPath, args, {
        cwd: path.dirname(modules),
        encoding: 'utf8',
        env,
        timeout: 120_000,
      });

    const bare = run([cli, 'info']);
    assert.equal(bare.status, 0, bare.stderr);
    console.log(`# without @maxsim/cuda-kernels:\n${bare.stdout}`);
    assert.ok(
      bare.stdout.includes(`kernels missing: add them with \`npm install @maxsim/cuda-kernels@${version}\``),
      bare.stdout,
    );

    unpack(`maxsim-cuda-kernels-${version}.tgz`, path.join(modules, '@maxsim', 'cuda-kernels'));
    const full = run([cli, 'info']);
    assert.equal(full.status, 0, full.stderr);
    console.log(`# with @maxsim/cuda-kernels:\n${full.stdout}`);
    assert.ok(!full.stdout.includes('kernels missing'), full.stdout);
    assert.match(full.stdout, /kernels \S*@maxsim\/cuda-kernels\/kernels: \S*maxsim_\w+\.fatbin/);
    assert.match(full.stdout, /backends\s+cpu: yes, cuda: yes/);

    fs.writeFileSync(path.join(modules, '..', 'score.mjs'), SCORE);
    const seed = String(Math.floor(Math.random() * 2 ** 31));
    const scored = run(['score.mjs', seed]);
    assert.equal(scored.status, 0, `seed ${seed}\n${scored.stderr}`);
    const out = JSON.parse(scored.stdout) as { worst: number };
    console.log(
      `# CUDA from the kernels package, float16: worst error / bound ${out.worst.toExponential(2)}`,
    );
    assert.ok(out.worst <= 1, `seed ${seed}: error ${out.worst} times the fp32 bound`);
  });
});
