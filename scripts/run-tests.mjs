#!/usr/bin/env node
// Runs every compiled test file (dist/test/**/*.test.js) with node:test. GPU tests are included:
// they skip with the reason where no usable GPU is present. `--gpu` runs only test/gpu.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const testRoot = join(root, 'dist', 'test');
const onlyGpu = process.argv.includes('--gpu');

function collect(dir) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .sort()
    .flatMap((name) => {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) return collect(p);
      return name.endsWith('.test.js') ? [p] : [];
    });
}

const files = collect(onlyGpu ? join(testRoot, 'gpu') : testRoot);
if (files.length === 0) {
  console.error(`no compiled tests under ${testRoot}; run \`npm run build:ts\` first`);
  process.exit(1);
}
const r = spawnSync(process.execPath, ['--test', '--test-reporter=spec', ...files], { stdio: 'inherit' });
process.exit(r.status ?? 1);
