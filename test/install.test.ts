// `npm pack` of a checkout (what a git dependency installs): no install script (npm runs `prepare`,
// which builds the addon, only in the checkout), and scripts/build-native.mjs, run as the opt-in
// source build with every compiler switched off, takes the addon the tarball carries and falls back
// to a source build, with a one-line reason, when the native sources differ.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { packageRoot } from '../src/native.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-install-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

// No compiler, no make: an install that tried to build would fail.
const noCompiler = { ...process.env, CXX: 'false', CC: 'false', MAKE: 'false', MAXSIM_BUILD_FROM_SOURCE: '' };

function installScript(dir: string) {
  return spawnSync(process.execPath, ['scripts/build-native.mjs'], {
    cwd: dir,
    encoding: 'utf8',
    env: noCompiler,
    timeout: 120_000,
  });
}

describe('install from the packed tarball', () => {
  const stamped = fs.existsSync(path.join(packageRoot, 'build', 'BUILT_FROM.json'));
  test('has no install script; the opt-in build takes the prebuilt addon, rebuilds when sources differ', {
    skip: stamped
      ? false
      : 'build/BUILT_FROM.json is missing: the addon was not built by scripts/build-native.mjs',
  }, () => {
    const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
    const pack = spawnSync(npm, ['pack', '--ignore-scripts', '--json', '--pack-destination', tmp], {
      cwd: packageRoot,
      encoding: 'utf8',
      timeout: 120_000,
    });
    assert.equal(pack.status, 0, pack.stderr);
    const [info] = JSON.parse(pack.stdout) as [{ filename: string; files: { path: string }[] }];
    const shipped = new Set(info.files.map((f) => f.path));
    const manifest = JSON.parse(fs.readFileSync(path.join(packageRoot, 'package.json'), 'utf8'));
    for (const hook of ['preinstall', 'install', 'postinstall'])
      assert.equal(manifest.scripts[hook], undefined, `no ${hook} script`);
    // binding.gyp at the root would make npm add `node-gyp rebuild` as the install script
    assert.equal(manifest.gypfile, false);
    for (const f of [
      'LICENSE',
      'build/Release/maxsim_native.node',
      'build/BUILT_FROM.json',
      'dist/src/index.js',
    ])
      assert.ok(shipped.has(f), `the tarball ships ${f}`);

    const unpacked = path.join(tmp, 'unpacked');
    fs.mkdirSync(unpacked);
    const untar = spawnSync('tar', ['-xzf', path.join(tmp, info.filename), '-C', unpacked], {
      encoding: 'utf8',
    });
    assert.equal(untar.status, 0, untar.stderr);
    const pkg = path.join(unpacked, 'package');

    const t0 = performance.now();
    const fast = installScript(pkg);
    const seconds = (performance.now() - t0) / 1000;
    assert.equal(fast.status, 0, `${fast.stdout}\n${fast.stderr}`);
    assert.match(fast.stdout, /using the prebuilt addon for \S+ \(no compiler needed\)/);
    assert.ok(seconds < 15, `the install script took ${seconds.toFixed(1)} s`);

    // The unpacked addon loads in this Node.
    const addon = (process as unknown as { dlopen: (m: { exports: unknown }, f: string) => void }).dlopen;
    const mod = { exports: {} as { abiVersion?: number } };
    addon(mod, path.join(pkg, 'build', 'Release', 'maxsim_native.node'));
    assert.equal(mod.exports.abiVersion, 1);

    // Edited native sources: the prebuilt addon no longer matches, so the script says why and builds
    // (which fails here, with the compiler switched off, and says so).
    fs.appendFileSync(path.join(pkg, 'native', 'cpu', 'engine.h'), '\n// edited\n');
    const rebuilt = installScript(pkg);
    assert.match(rebuilt.stdout, /building the native addon from source: the native sources differ/);
    assert.notEqual(rebuilt.status, 0, 'a build with no compiler cannot succeed');
  });

  test('a library install (scripts off) pulls no server stack, scores, and names what `serve` needs', {
    timeout: 300_000,
  }, () => {
    const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
    const pack = spawnSync(npm, ['pack', '--ignore-scripts', '--json', '--pack-destination', tmp], {
      cwd: packageRoot,
      encoding: 'utf8',
      timeout: 120_000,
    });
    assert.equal(pack.status, 0, pack.stderr);
    const [info] = JSON.parse(pack.stdout) as [{ filename: string }];
    const project = path.join(tmp, 'project');
    fs.mkdirSync(project, { recursive: true });
    fs.writeFileSync(path.join(project, 'package.json'), '{"name":"p","version":"1.0.0","type":"module"}');
    const t0 = performance.now();
    const inst = spawnSync(
      npm,
      [
        'install',
        '--ignore-scripts',
        '--no-audit',
        '--no-fund',
        '--prefer-offline',
        path.join(tmp, info.filename),
      ],
      { cwd: project, encoding: 'utf8', timeout: 240_000, env: noCompiler },
    );
    const seconds = (performance.now() - t0) / 1000;
    assert.equal(inst.status, 0, `${inst.stdout}\n${inst.stderr}`);
    const modules = path.join(project, 'node_modules');
    for (const p of ['fastify', '@fastify/swagger', 'prom-client', 'typebox'])
      assert.ok(!fs.existsSync(path.join(modules, p)), `${p} is not installed with the library`);
    const packages = fs.readdirSync(modules).filter((n) => !n.startsWith('.'));
    const du = (p: string): number =>
      fs.statSync(p).isDirectory()
        ? fs.readdirSync(p).reduce((t, n) => t + du(path.join(p, n)), 0)
        : fs.statSync(p).size;
    const mb = (du(modules) / 2 ** 20).toFixed(1);
    console.log(
      `# library install: ${seconds.toFixed(1)} s, ${mb} MiB unpacked, ${packages.length} top-level packages (${packages.join(', ')})`,
    );
    const script = `
      const m = await import('maxsim');
      const q = m.tokenMatrix(new Float32Array([1, 0, 0, 1]), 2, 2);
      const d = m.raggedBatch(new Float32Array([1, 0, 0.5, 0.5]), [0, 1, 2], { dim: 2 });
      const { maxsimSync } = await import('maxsim/sync');
      const s = Array.from(maxsimSync(q, d));
      let serve = '';
      try { await m.createServer({ corpus: '/nonexistent' }); } catch (e) { serve = e.message; }
      console.log(JSON.stringify({ s, serve }));`;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
      cwd: project,
      encoding: 'utf8',
    });
    assert.equal(r.status, 0, r.stderr);
    const out = JSON.parse(r.stdout) as { s: number[]; serve: string };
    assert.deepEqual(out.s, [1, 1]);
    assert.match(
      out.serve,
      /needs \S+ and the rest of the server stack.*npm install fastify@\S+ @fastify\/swagger@/,
    );
  });
});
