// The point-cloud fitting example runs end to end, briefly: it prints one loss per step and the
// Chamfer loss falls.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

// dist/test/chamfer-example.test.js -> dist/examples/fit-point-cloud.js
const EXAMPLE = fileURLToPath(new URL('../examples/fit-point-cloud.js', import.meta.url));

test('examples/fit-point-cloud: 40 steps on 500 points lower the loss at least 5x', () => {
  const r = spawnSync(process.execPath, [EXAMPLE, '--steps', '40', '--points', '500', '--backend', 'cpu'], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  assert.equal(r.status, 0, r.stderr);
  const losses = [...r.stdout.matchAll(/^step +\d+ +chamfer ([\d.]+)/gm)].map((m) => Number(m[1]));
  assert.equal(losses.length, 40, r.stdout);
  assert.ok(losses[39] < losses[0] / 5, `loss ${losses[0]} -> ${losses[39]}`);
});
