// `npm run pack:all` (scripts/pack-all.mjs): the library package without addon, fatbins or install
// script, plus the linux-x64-gnu addon package, installed into a fresh project with scripts
// disabled: the addon comes from @maxsim/linux-x64-gnu and scores as the reference does; install
// time and unpacked size are printed. The arm64 kernels run under qemu-aarch64 where Debian's
// cross compiler and qemu-user-static exist (the NEON kernel set against its float64 reference).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { nativeUnavailableReason, packageRoot } from '../src/native.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-pack-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));
const has = (cmd: string) => spawnSync(cmd, ['--version']).status === 0;
const du = (p: string): number =>
  fs.statSync(p).isDirectory()
    ? fs.readdirSync(p).reduce((t, n) => t + du(path.join(p, n)), 0)
    : fs.statSync(p).size;

describe('platform packages', () => {
  test('library + linux-x64-gnu install with scripts off, load the addon from its package, score', {
    skip:
      nativeUnavailableReason() ??
      (process.platform === 'linux' && process.arch === 'x64' ? false : 'linux-x64 only'),
    timeout: 300_000,
  }, () => {
    const pack = spawnSync(process.execPath, ['scripts/pack-all.mjs', 'maxsim', 'linux-x64-gnu'], {
      cwd: packageRoot,
      encoding: 'utf8',
    });
    assert.equal(pack.status, 0, pack.stderr);
    const version = JSON.parse(fs.readFileSync(path.join(packageRoot, 'package.json'), 'utf8')).version;
    const main = path.join(packageRoot, 'packs', `maxsim-${version}.tgz`);
    const plat = path.join(packageRoot, 'packs', `maxsim-linux-x64-gnu-${version}.tgz`);
    const listed = spawnSync('tar', ['-tzf', main], { encoding: 'utf8' }).stdout.split('\n');
    assert.ok(!listed.some((f) => f.startsWith('package/build/')), 'no addon or fatbins in the library');
    assert.ok(listed.includes('package/native/wasm/maxsim.wasm'));
    assert.ok(listed.includes('package/native/wasm/maxsim-relaxed.wasm'));
    // no source maps and no TypeScript sources (size), and no .js names a map that is not there
    assert.ok(!listed.some((f) => f.endsWith('.js.map') || /^package\/src\//.test(f)), 'no maps, no src/');
    assert.ok(listed.includes('package/dist/src/index.js'));
    const index = spawnSync('tar', ['-xzOf', main, 'package/dist/src/index.js'], { encoding: 'utf8' }).stdout;
    assert.ok(index.length > 0 && !index.includes('sourceMappingURL'), 'dist/src/index.js names no map');
    const manifest = JSON.parse(
      spawnSync('tar', ['-xzOf', main, 'package/package.json'], { encoding: 'utf8' }).stdout,
    );
    assert.equal(manifest.scripts.install, undefined);
    assert.equal(manifest.gypfile, false);
    assert.equal(manifest.optionalDependencies['@maxsim/linux-x64-gnu'], version);
    const project = path.join(tmp, 'project');
    fs.mkdirSync(project);
    fs.writeFileSync(path.join(project, 'package.json'), '{"name":"p","version":"1.0.0","type":"module"}');
    const t0 = performance.now();
    const inst = spawnSync(
      'npm',
      ['install', '--ignore-scripts', '--no-audit', '--no-fund', '--prefer-offline', main, plat],
      {
        cwd: project,
        encoding: 'utf8',
        timeout: 240_000,
        env: { ...process.env, CXX: 'false', CC: 'false' },
      },
    );
    const seconds = (performance.now() - t0) / 1000;
    assert.equal(inst.status, 0, `${inst.stdout}\n${inst.stderr}`);
    const mib = du(path.join(project, 'node_modules')) / 2 ** 20;
    console.log(
      `# library + linux-x64-gnu: installed in ${seconds.toFixed(1)} s, ${mib.toFixed(1)} MiB unpacked`,
    );
    assert.ok(mib <= 6, `CPU-only install ${mib.toFixed(1)} MiB`);
    const script = `
      const m = await import('maxsim');
      const q = m.tokenMatrix(new Float32Array([1, 2, 0, 1]), 2, 2);
      const d = m.raggedBatch(new Float32Array([1, 0, 0.5, 0.5, -1, 3]), [0, 2, 3], { dim: 2 });
      const info = m.info();
      const { maxsimSync } = await import('maxsim/sync');
      console.log(JSON.stringify({ s: Array.from(maxsimSync(q, d, { backend: 'cpu' })), cpu: info.backends.cpu }));`;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
      cwd: project,
      encoding: 'utf8',
    });
    assert.equal(r.status, 0, r.stderr);
    const out = JSON.parse(r.stdout) as { s: number[]; cpu: boolean };
    assert.equal(out.cpu, true);
    // q = [[1,2],[0,1]]; doc0 = [[1,0],[0.5,0.5]]: max 1.5 + max 0.5 = 2; doc1 = [[-1,3]]: 5 + 3 = 8
    assert.deepEqual(out.s, [2, 8]);
    const loaded = spawnSync(
      process.execPath,
      ['-e', "console.log(require.resolve('@maxsim/linux-x64-gnu/maxsim_native.node'))"],
      { cwd: project, encoding: 'utf8' },
    );
    assert.equal(loaded.status, 0, loaded.stderr);
    assert.ok(
      !fs.existsSync(path.join(project, 'node_modules', 'maxsim', 'build')),
      'no source build was made',
    );
  });

  test('the NEON kernel set runs under qemu-aarch64 and matches its float64 reference', {
    skip:
      has('aarch64-linux-gnu-g++') && has('qemu-aarch64-static')
        ? false
        : 'needs g++-aarch64-linux-gnu and qemu-user-static',
    timeout: 300_000,
  }, () => {
    const exe = path.join(tmp, 'engine_check');
    const cpu = path.join(packageRoot, 'native', 'cpu');
    const srcs = [
      'test/engine_check.cc',
      'engine.cc',
      'cpu_features.cc',
      'thread_pool.cc',
      'kernels_neon.cc',
      'kernels_portable.cc',
      'kernels_x86_absent.cc',
    ];
    const cc = spawnSync(
      'aarch64-linux-gnu-g++',
      ['-std=c++17', '-O2', '-static', '-pthread', ...srcs.map((s) => path.join(cpu, s)), '-o', exe],
      {
        encoding: 'utf8',
      },
    );
    assert.equal(cc.status, 0, cc.stderr);
    const r = spawnSync('qemu-aarch64-static', [exe], { encoding: 'utf8', timeout: 240_000 });
    assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /neon: checked/);
    assert.match(r.stdout, /\d+ checks, 0 failures/);
  });
});
