// The generated API reference (`npm run docs:api`, TypeDoc over the TSDoc of the public entry points)
// builds without errors or warnings (npm test runs this file): a type that a public signature names
// but no entry point exports ("... is referenced by ... but not included in the documentation") fails
// it, as does a broken link in a comment. Its pages name the package's main entries.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { packageRoot } from '../src/native.js';

test('TypeDoc builds the API reference from typedoc.json, without a warning', () => {
  const out = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-api-'));
  try {
    const typedoc = path.join(packageRoot, 'node_modules', 'typedoc', 'bin', 'typedoc');
    const args = [typedoc, '--out', out, '--logLevel', 'Warn', '--treatWarningsAsErrors'];
    const r = spawnSync(process.execPath, args, {
      cwd: packageRoot,
      encoding: 'utf8',
      timeout: 180_000,
    });
    assert.equal(r.status, 0, `typedoc failed (warnings count):\n${r.stdout}\n${r.stderr}`);
    assert.doesNotMatch(`${r.stdout}${r.stderr}`, /warning/i, 'typedoc warned');
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
