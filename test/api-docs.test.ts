// The generated API reference (`npm run docs:api`, TypeDoc over the TSDoc of the public entry points)
// builds without errors, and its pages name the package's main entries.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { packageRoot } from '../src/native.js';

test('TypeDoc builds the API reference from typedoc.json', () => {
  const out = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-api-'));
  try {
    const typedoc = path.join(packageRoot, 'node_modules', 'typedoc', 'bin', 'typedoc');
    const r = spawnSync(process.execPath, [typedoc, '--out', out, '--logLevel', 'Error'], {
      cwd: packageRoot,
      encoding: 'utf8',
      timeout: 180_000,
    });
    assert.equal(r.status, 0, `typedoc failed:\n${r.stdout}\n${r.stderr}`);
    const index = fs.readFileSync(path.join(out, 'index.html'), 'utf8');
    const pages = fs.readdirSync(out, { recursive: true }).map(String);
    for (const name of ['maxsim', 'openCorpus', 'CorpusWriter', 'createServer', 'contrastiveStep', 'chamfer'])
      assert.ok(
        index.includes(name) || pages.some((p) => p.includes(name)),
        `the reference has no page for ${name}`,
      );
  } finally {
    fs.rmSync(out, { recursive: true, force: true });
  }
});
