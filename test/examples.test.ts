// The examples run as a user would run them (they import 'maxsim', resolved through the package's
// exports), briefly, and say what they claim: planted documents found, the int8 two-stage search equal
// to the exact one, a corpus grown, searched, deleted from and compacted, the service answering.
// (fit-point-cloud: test/chamfer-example.test.ts; train-projection is type-checked, 17 s to run.)
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

function run(example: string, args: string[] = []): string {
  const file = fileURLToPath(new URL(`../examples/${example}.js`, import.meta.url));
  const r = spawnSync(process.execPath, [file, ...args], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(r.status, 0, `${example} failed:\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

describe('examples', () => {
  test('search: planted documents in the top 10, the int8 two-stage search gives the same hits', () => {
    const out = run('search', ['--docs', '600', '--backend', 'cpu']);
    const found = [...out.matchAll(/(\d)\/3 planted documents in the top 10/g)].map((m) => Number(m[1]));
    assert.equal(found.length, 4, out);
    assert.ok(found.reduce((a, b) => a + b, 0) >= 8, out);
    assert.match(out, /the same hits/);
  });

  test('corpus: two segments, searched, then one after a delete and a compaction', () => {
    const out = run('corpus');
    assert.match(out, /: 1000 documents in 2 segments/);
    assert.match(out, /after delete \+ compact: 999 documents in 1 segment/);
    const first = /query 0: (\S+)/.exec(out)?.[1];
    const after = /query 0 now finds (\S+) first/.exec(out)?.[1];
    assert.ok(first && after && first !== after, out);
  });

  test('server: search, rerank, append and delete over HTTP', () => {
    const out = run('server');
    assert.match(out, /^search: \[\[\{"id":"doc-/m);
    assert.match(out, /^rerank: \[\{"index":1,/m);
    assert.match(out, /^append: \{"added":1,/m);
    assert.match(out, /^delete: \{"deleted":1,/m);
  });
});
