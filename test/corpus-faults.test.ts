// Fault suite of the corpus store (CPU): concurrent writers (processes and library), crafted
// MANIFESTs, output directories, lost MANIFESTs, overflowing conversions, corrupted chunks during
// search and hostile file headers. Every test asserts no crash, no hang, clean errors, and a corpus
// that verifies with every acknowledged append present.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { crc32 } from 'node:zlib';
import { f16BitsToFloat, floatToBf16Bits } from '../src/floats.js';
import {
  CorpusFile,
  CorpusLockedError,
  CorpusWriter,
  checksum,
  recoverCorpus,
} from '../src/io/corpus/index.js';
import { buildCorpusFromFilesSync } from '../src/io/corpus-build.js';
import { writeNpy } from '../src/io/npy.js';
import { loadNative, nativeUnavailableReason } from '../src/native.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { raggedBatch } from '../src/tensor.js';
import { randomRagged, rng } from './helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-corpus-faults-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));
let serial = 0;
const fresh = () => path.join(tmp, `c${serial++}.msx`);
const corpusModule = fileURLToPath(new URL('../src/io/corpus/index.js', import.meta.url));
const tensorModule = fileURLToPath(new URL('../src/tensor.js', import.meta.url));
const CLI = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
const cli = (...args: string[]) =>
  spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 60_000 });
/** The CLI with a stated metadata budget of 1 GB, whatever this machine's memory. */
const cliBudget = (...args: string[]) =>
  spawnSync(process.execPath, [CLI, ...args], {
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...process.env, MAXSIM_METADATA_BUDGET: String(1e9) },
  });

/** A small packed .npy with lengths: `docs` documents of 3 tokens, dim 4. */
function inputFiles(docs = 5): { npy: string; lens: string } {
  const npy = path.join(tmp, `in-${serial}.npy`);
  const lens = path.join(tmp, `in-${serial++}-lens.npy`);
  writeNpy(npy, {
    dtype: 'float32',
    shape: [docs * 3, 4],
    data: new Float32Array(docs * 12).map((_, i) => Math.sin(i)),
  });
  writeNpy(lens, { dtype: 'int32', shape: [docs], data: new Int32Array(docs).fill(3) });
  return { npy, lens };
}

function listing(dir: string): string[] {
  return fs.readdirSync(dir).sort();
}

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

  test('maxsim corpus append processes at once with --wait: all land', async () => {
    const { npy, lens } = inputFiles(3);
    const dir = fresh();
    assert.equal(cli('corpus', 'build', '--docs', npy, '--doc-lengths', lens, '--out', dir).status, 0);
    const runs = Array.from(
      { length: 4 },
      () =>
        new Promise<number | null>((resolve) => {
          const child = spawn(
            process.execPath,
            [CLI, 'corpus', 'append', '--docs', npy, '--doc-lengths', lens, '--out', dir, '--wait', '30'],
            { stdio: 'ignore' },
          );
          child.on('exit', resolve);
        }),
    );
    assert.deepEqual(await Promise.all(runs), [0, 0, 0, 0]);
    const c = CorpusFile.open(dir);
    c.verify();
    assert.equal(c.info.documents, 15);
    assert.equal(c.info.segments, 5);
    // an old lock record of a crashed contender is cleaned by the next writer
    const stray = path.join(dir, `LOCK.${'d'.repeat(32)}.tmp`);
    fs.writeFileSync(stray, '{}');
    fs.utimesSync(stray, new Date(Date.now() - 120_000), new Date(Date.now() - 120_000));
    CorpusWriter.append(dir).abort();
    assert.equal(fs.existsSync(stray), false);
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

  test('a lock whose owner cannot be proven gone names its file and owner; corpus unlock clears it, never a running writer', {
    skip: fs.existsSync('/proc/1/stat') ? false : 'needs /proc',
  }, () => {
    const dir = fresh();
    CorpusWriter.create(dir, { dim: 4 }).commit();
    const lock = path.join(dir, 'LOCK');
    const unlock = (...args: string[]) => cli('corpus', 'unlock', dir, ...args);
    // pid 1 lives (init, not a maxsim writer); garbage; an empty record: locked, with the way out
    for (const [text, shown] of [
      ['{"pid":1}', /names pid 1, which is running but may not be a maxsim writer/],
      ['not json{', /holds "not json\{", not a lock record this version reads/],
      ['', /holds nothing \(empty\), not a lock record/],
    ] as const) {
      fs.writeFileSync(lock, text);
      assert.throws(
        () => CorpusWriter.append(dir),
        (e: Error) =>
          e instanceof CorpusLockedError &&
          shown.test(e.message) &&
          e.message.includes(`\`maxsim corpus unlock ${dir}\` removes ${lock}`),
        text,
      );
      const r = unlock();
      assert.equal(r.status, 0, r.stderr);
      assert.equal(r.stdout, `removed ${lock} (it held ${text})\n`);
      CorpusWriter.append(dir).abort();
    }
    assert.equal(unlock().stdout, `${dir} is not locked\n`);
    // a record without a start time whose pid is a process started after the lock was written: the
    // pid was reused, so the lock is stale and taken over
    const child = spawn('sleep', ['30'], { stdio: 'ignore' });
    try {
      fs.writeFileSync(lock, JSON.stringify({ pid: child.pid }));
      assert.throws(() => CorpusWriter.append(dir), /names pid \d+, which is running/);
      const hourAgo = new Date(Date.now() - 3_600_000);
      fs.utimesSync(lock, hourAgo, hourAgo);
      CorpusWriter.append(dir).abort();
      assert.equal(fs.existsSync(lock), false);
    } finally {
      child.kill();
    }
    // a running writer (this process): unlock refuses it; --force removes it and the writer then
    // publishes nothing
    const w = CorpusWriter.append(dir);
    w.add(randomRagged([2], 4, 'float32', rng(5)));
    const refused = unlock();
    assert.equal(refused.status, 1);
    assert.match(
      refused.stderr,
      new RegExp(`LOCK is held by a running writer \\(pid ${process.pid}, started `),
    );
    assert.ok(fs.existsSync(lock));
    const forced = unlock('--force', '--json');
    assert.equal(forced.status, 0, forced.stderr);
    assert.equal(JSON.parse(forced.stdout).removed, true);
    assert.throws(() => w.commit(), /no longer holds the corpus lock/);
    // another host: nothing can be checked from here, so only --force removes it
    fs.writeFileSync(lock, JSON.stringify({ pid: 1, hostname: `not-${os.hostname()}` }));
    assert.throws(() => CorpusWriter.append(dir), /cannot be checked from this host.*unlock .* --force/);
    assert.equal(unlock().status, 1);
    assert.equal(unlock('--force').status, 0);
    assert.equal(CorpusFile.open(dir).info.documents, 0);
  });

  test('a read-only corpus directory: a clear error, not a raw EACCES', {
    skip: process.getuid?.() === 0 ? 'root writes anywhere' : false,
  }, () => {
    const dir = fresh();
    CorpusWriter.create(dir, { dim: 4 }).commit();
    fs.chmodSync(dir, 0o555);
    try {
      assert.throws(
        () => CorpusWriter.append(dir),
        /cannot create the writer's lock \(EACCES: the corpus directory is not writable\)/,
      );
    } finally {
      fs.chmodSync(dir, 0o755);
    }
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

/** Writes a MANIFEST body with its checksum line computed as the store does, so only validation can refuse it. */
function writeManifest(dir: string, body: string) {
  fs.writeFileSync(
    path.join(dir, 'MANIFEST'),
    `${body}\ncrc32 ${crc32(body).toString(16).padStart(8, '0')}\n`,
  );
}

function manifestOf(dir: string): Record<string, unknown> & { segments: Record<string, unknown>[] } {
  return JSON.parse(fs.readFileSync(path.join(dir, 'MANIFEST'), 'utf8').split('\n')[0]);
}

describe('the MANIFEST is data, never a path', () => {
  function corpus(): string {
    const dir = fresh();
    const w = CorpusWriter.create(dir, { dim: 4 });
    w.add(randomRagged([3, 2], 4, 'float32', rng(9)));
    w.commit();
    const w2 = CorpusWriter.append(dir);
    w2.add(randomRagged([1], 4, 'float32', rng(10)));
    w2.commit();
    return dir;
  }

  test('crafted MANIFESTs with a valid checksum are refused naming the field, the rule and the value', () => {
    const outside = path.join(tmp, 'evil');
    const cases: [string, (m: ReturnType<typeof manifestOf>) => unknown, RegExp][] = [
      [
        'generation as a path',
        (m) => ({ ...m, generation: '/../../evil/pwn' }),
        /field generation must be an integer in \[0, \d+\] but is "\/\.\.\/\.\.\/evil\/pwn"/,
      ],
      ['generation fractional', (m) => ({ ...m, generation: 2.5 }), /field generation must be an integer/],
      [
        'a file path',
        (m) => ({ ...m, segments: [{ ...m.segments[0], file: '../../../../etc/passwd' }, m.segments[1]] }),
        /segments\[0\]\.file must be a segment file name seg-NNNNNN\.msxs \(never a path\) but is "\.\.\/\.\.\/\.\.\/\.\.\/etc\/passwd"/,
      ],
      [
        'an absolute path',
        (m) => ({ ...m, segments: [{ ...m.segments[0], file: '/etc/passwd' }, m.segments[1]] }),
        /segments\[0\]\.file must be a segment file name/,
      ],
      [
        'a non-canonical name',
        (m) => ({ ...m, segments: [{ ...m.segments[0], file: 'seg-0000001.msxs' }, m.segments[1]] }),
        /segments\[0\]\.file must be a canonical segment name/,
      ],
      [
        'a segment past the generation',
        (m) => ({ ...m, generation: 1 }),
        /segments\[1\]\.file must be a canonical segment name numbered 1\.\.1/,
      ],
      [
        'a segment listed twice',
        (m) => ({ ...m, segments: [m.segments[0], m.segments[0], m.segments[1]], documents: 7, tokens: 11 }),
        /segments\[1\]\.file must be a segment listed once \(duplicate\)/,
      ],
      [
        'documents -1',
        (m) => ({ ...m, documents: -1 }),
        /field documents must be an integer in \[0, 2147483647\] but is -1/,
      ],
      [
        'segment documents -1',
        (m) => ({ ...m, segments: [{ ...m.segments[0], documents: -1 }, m.segments[1]] }),
        /segments\[0\]\.documents must be an integer/,
      ],
      [
        'documents 2^62',
        (m) => ({ ...m, documents: 2 ** 62 }),
        /field documents must be an integer in \[0, 2147483647\] but is 4\.612e\+18 \(beyond 2\^53\)/,
      ],
      [
        'totals that do not add up',
        (m) => ({ ...m, documents: 99 }),
        /field documents must be the sum over its segments \(3\) but is 99/,
      ],
      [
        'segments: [null]',
        (m) => ({ ...m, segments: [null] }),
        /segments\[0\] must be an object but is null/,
      ],
      [
        'segments not a list',
        (m) => ({ ...m, segments: 'seg-000001.msxs' }),
        /field segments must be an array/,
      ],
      ['dim 0', (m) => ({ ...m, dim: 0 }), /field dim must be an integer in \[1, 65536\] but is 0/],
      ['dtype', (m) => ({ ...m, dtype: 'float64' }), /field dtype must be one of/],
      ['a number as the top level', () => 42, /field \(top level\) must be an object but is 42/],
      [
        'deeply nested',
        // a string body: JSON.stringify itself cannot nest this deep
        (m) =>
          JSON.stringify({ ...m, segments: 'X' }).replace(
            '"X"',
            `${'['.repeat(100000)}${']'.repeat(100000)}`,
          ),
        /segments\[0\] must be an object but is an array of 1/,
      ],
      [
        'a huge byte count',
        (m) => ({ ...m, segments: [{ ...m.segments[0], bytes: 2 ** 53 }, m.segments[1]] }),
        /segments\[0\]\.bytes must be an integer/,
      ],
      [
        'too few bytes for its documents',
        (m) => ({ ...m, segments: [{ ...m.segments[0], bytes: 100 }, m.segments[1]] }),
        /segments\[0\]\.bytes must be at least the header and offsets/,
      ],
    ];
    for (const [what, craft, pattern] of cases) {
      const dir = corpus();
      const body = craft(manifestOf(dir));
      writeManifest(dir, typeof body === 'string' ? body : JSON.stringify(body));
      assert.throws(() => CorpusFile.open(dir), pattern, `${what} (open)`);
      assert.throws(() => CorpusWriter.append(dir), pattern, `${what} (append)`);
      assert.equal(fs.existsSync(outside), false, `${what}: nothing written outside the corpus`);
      assert.equal(fs.existsSync(path.join(dir, 'LOCK')), false, `${what}: no lock left`);
    }
  });

  test('a segment that is a symbolic link out of the corpus directory is refused', () => {
    const dir = corpus();
    const elsewhere = path.join(tmp, `moved-${serial++}.msxs`);
    fs.renameSync(path.join(dir, 'seg-000001.msxs'), elsewhere);
    fs.symlinkSync(elsewhere, path.join(dir, 'seg-000001.msxs'));
    assert.throws(() => CorpusFile.open(dir), /resolves to .*outside the corpus directory; refused/);
    fs.rmSync(path.join(dir, 'seg-000001.msxs'));
    fs.mkdirSync(path.join(dir, 'seg-000001.msxs'));
    assert.throws(
      () => CorpusFile.open(dir),
      /seg-000001\.msxs: a segment named by the MANIFEST is not a regular file/,
    );
  });

  test('a MANIFEST that is a directory, or far too large, is a FormatError', () => {
    const dir = corpus();
    fs.rmSync(path.join(dir, 'MANIFEST'));
    fs.mkdirSync(path.join(dir, 'MANIFEST'));
    assert.throws(() => CorpusFile.open(dir), /MANIFEST: the MANIFEST is a directory/);
    fs.rmdirSync(path.join(dir, 'MANIFEST'));
    const fd = fs.openSync(path.join(dir, 'MANIFEST'), 'w');
    fs.ftruncateSync(fd, 300 * 1024 * 1024); // sparse: no disk used
    fs.closeSync(fd);
    assert.throws(() => CorpusFile.open(dir), /MANIFEST has 314572800 bytes \(at most 268435456 are read\)/);
  });
});

describe('corpus build --out: only new or empty directories; recover a lost MANIFEST', () => {
  test('an existing non-empty directory, a symlink, a file and / are refused and left untouched', () => {
    const { npy, lens } = inputFiles();
    const full = path.join(tmp, `full-${serial++}`);
    fs.mkdirSync(full);
    fs.writeFileSync(path.join(full, 'precious.txt'), 'keep me');
    fs.writeFileSync(
      path.join(full, 'MANIFEST.tmp'),
      'not ours to delete? it is named like ours, but the dir has other files',
    );
    const target = path.join(tmp, `target-${serial++}`);
    fs.mkdirSync(target);
    const link = path.join(tmp, `link-${serial++}`);
    fs.symlinkSync(target, link);
    const file = path.join(tmp, `file-${serial++}`);
    fs.writeFileSync(file, 'x');
    const cases: [string, RegExp][] = [
      [full, /not empty: \d entries such as "precious\.txt"/],
      [link, /a symbolic link/],
      [file, /an existing file/],
      ['/', /the file-system root/],
    ];
    for (const [out, pattern] of cases) {
      const before = fs.existsSync(out) && fs.statSync(out).isDirectory() && out !== '/' ? listing(out) : [];
      assert.throws(() => buildCorpusFromFilesSync({ docs: npy, docLengths: lens, out }), pattern, out);
      const r = cli('corpus', 'build', '--docs', npy, '--doc-lengths', lens, '--out', out);
      assert.equal(r.status, 1, r.stderr);
      assert.match(r.stderr, pattern);
      assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
      if (out !== '/' && fs.statSync(out).isDirectory())
        assert.deepEqual(listing(out), before, `${out} untouched`);
    }
    assert.deepEqual(listing(target), []);
    assert.equal(fs.readFileSync(path.join(full, 'precious.txt'), 'utf8'), 'keep me');
    // an empty existing directory is fine, and is kept (not removed) when the build fails
    const empty = path.join(tmp, `empty-${serial++}`);
    fs.mkdirSync(empty);
    assert.throws(
      () => buildCorpusFromFilesSync({ docs: npy, docLengths: lens, out: empty, ids: file }),
      /--ids/,
    );
    assert.deepEqual(listing(empty), []);
    buildCorpusFromFilesSync({ docs: npy, docLengths: lens, out: empty });
    assert.equal(CorpusFile.open(empty).info.documents, 5);
  });

  test('an interrupted first build (only our temporaries and a dead LOCK) can be built again', () => {
    const { npy, lens } = inputFiles();
    const out = path.join(tmp, `interrupted-${serial++}`);
    fs.mkdirSync(out);
    fs.writeFileSync(path.join(out, 'LOCK'), '999999999');
    fs.writeFileSync(path.join(out, `seg-000001.msxs.${'c'.repeat(32)}.tmp`), 'partial');
    fs.writeFileSync(path.join(out, 'MANIFEST.tmp'), 'partial');
    buildCorpusFromFilesSync({ docs: npy, docLengths: lens, out });
    assert.deepEqual(listing(out), ['MANIFEST', 'seg-000001.msxs']);
  });

  test('recover rebuilds a lost MANIFEST from intact segments, deleting nothing', () => {
    const { npy, lens } = inputFiles(4);
    const dir = fresh();
    const w = CorpusWriter.create(dir, { dim: 4, ids: true });
    w.add(randomRagged([2, 3], 4, 'float32', rng(21)), ['a', 'b']);
    w.commit();
    for (const [i, id] of ['c', 'd', 'e'].entries()) {
      const a = CorpusWriter.append(dir);
      a.add(randomRagged([i + 1], 4, 'float32', rng(22 + i)), [id]);
      a.commit();
    }
    const before = CorpusFile.open(dir);
    const docs = before.readDocuments([0, 1, 2, 3, 4]);
    fs.rmSync(path.join(dir, 'MANIFEST'));
    assert.throws(
      () => CorpusFile.open(dir),
      /no MANIFEST but 4 segment file\(s\) \(`maxsim corpus recover .*` rebuilds the MANIFEST/,
    );
    // build --out refuses it and points at recover; nothing is deleted
    assert.throws(
      () => buildCorpusFromFilesSync({ docs: npy, docLengths: lens, out: dir }),
      /corpus recover/,
    );
    assert.equal(listing(dir).length, 4);
    const r = cli('corpus', 'recover', dir, '--json');
    assert.equal(r.status, 0, r.stderr);
    assert.equal(JSON.parse(r.stdout).documents, 5);
    const after = CorpusFile.open(dir);
    after.verify();
    assert.deepEqual(
      [0, 1, 2, 3, 4].map((i) => after.id(i)),
      ['a', 'b', 'c', 'd', 'e'],
    );
    assert.deepEqual(after.readDocuments([0, 1, 2, 3, 4]).data, docs.data);
    assert.equal(after.info.generation, 4);
    // a healthy corpus: nothing to recover
    assert.throws(() => recoverCorpus(dir), /its MANIFEST opens; nothing to recover/);
    // appends continue after recovery
    const a = CorpusWriter.append(dir);
    a.add(randomRagged([1], 4, 'float32', rng(30)), ['f']);
    a.commit();
    assert.equal(CorpusFile.open(dir).info.documents, 6);
  });

  test('recover skips a damaged segment (kept on disk, moved aside), keeps a damaged MANIFEST aside', () => {
    const dir = fresh();
    CorpusWriter.create(dir, { dim: 4 }).commit(); // an empty first segment
    for (let i = 0; i < 3; i++) {
      const a = CorpusWriter.append(dir);
      a.add(randomRagged([2], 4, 'float32', rng(40 + i)));
      a.commit();
    }
    // damage the tokens of segment 3, and the MANIFEST
    const seg3 = path.join(dir, 'seg-000003.msxs');
    const fd = fs.openSync(seg3, 'r+');
    fs.writeSync(fd, Buffer.from([0xff, 0xee]), 0, 2, 4096 + 3);
    fs.closeSync(fd);
    fs.appendFileSync(path.join(dir, 'MANIFEST'), 'garbage');
    const r = recoverCorpus(dir);
    assert.equal(r.skipped.length, 1);
    assert.match(r.skipped[0].reason, /seg-000003\.msxs: token data is corrupted/);
    assert.match(r.damagedManifest ?? '', /MANIFEST\.damaged-/);
    assert.ok(fs.existsSync(r.damagedManifest!));
    // kept, moved aside at the recovered generation (past every file present)
    assert.equal(r.skipped[0].movedTo, `${seg3}.left-out-000005`);
    assert.ok(fs.existsSync(r.skipped[0].movedTo!) && !fs.existsSync(seg3), 'the damaged segment is kept');
    const c = CorpusFile.open(dir);
    c.verify();
    assert.equal(c.info.documents, 2, 'one document each from segments 2 and 4');
    assert.equal(c.info.generation, 5);
    // a directory without segments
    const none = path.join(tmp, `none-${serial++}`);
    fs.mkdirSync(none);
    assert.throws(() => recoverCorpus(none), /no segment files/);
  });
});

describe('no silent float16 / bfloat16 overflow', () => {
  test('finite values beyond the corpus range are refused (count, first position) or clamped on request', () => {
    const data = new Float32Array(4 * 3 * 4).map((_, i) => Math.cos(i));
    data[(3 + 2) * 4 + 3] = 70000; // document 1 (tokens 3..5), token 2, component 3
    data[9 * 4] = -1e6;
    data[2] = 65519; // rounds to 65504: no overflow
    const batch = raggedBatch(data, [0, 3, 6, 9, 12], { dim: 4 });
    const dir = fresh();
    const w = CorpusWriter.create(dir, { dim: 4 });
    assert.throws(
      () => w.add(batch),
      /float16 range.* for batch\.data but received 2 values beyond it \(the first, 70000, in document 1 at token 2, component 3\)/,
    );
    w.add(raggedBatch(data.subarray(0, 12), [0, 3], { dim: 4 })); // the writer is still usable
    w.commit();
    assert.equal(CorpusFile.open(dir).info.documents, 1);
    // clamped: +-65504, counted
    const dir2 = fresh();
    const w2 = CorpusWriter.create(dir2, { dim: 4, clamp: true });
    w2.add(batch);
    assert.equal(w2.clamped, 2);
    w2.commit();
    const back = CorpusFile.open(dir2).readDocuments([1, 3]);
    assert.equal(f16BitsToFloat(back.data[2 * 4 + 3]), 65504);
    assert.equal(f16BitsToFloat(back.data[3 * 4]), -65504);
    assert.equal(f16BitsToFloat(CorpusFile.open(dir2).readDocuments([0]).data[2]), 65504);
    // bfloat16: from float32 near its top, and bfloat16 input into a float16 corpus
    const big = new Float32Array(8).fill(1);
    big[5] = 3.4e38;
    const w3 = CorpusWriter.create(fresh(), { dim: 4, dtype: 'bfloat16' });
    assert.throws(
      () => w3.add(raggedBatch(big, [0, 2], { dim: 4 })),
      /1 value beyond it \(the first, 3\.4e\+38, in document 0 at token 1, component 1\)/,
    );
    w3.abort();
    const bf = new Uint16Array(8).fill(floatToBf16Bits(1));
    bf[6] = floatToBf16Bits(1e5);
    const w4 = CorpusWriter.create(fresh(), { dim: 4 });
    assert.throws(
      () => w4.add(raggedBatch(bf, [0, 2], { dim: 4, dtype: 'bfloat16' })),
      /float16 range.*1 value beyond it/,
    );
    w4.abort();
  });

  test('CLI: corpus build refuses, or with --clamp stores and reports', () => {
    const npy = path.join(tmp, `overflow-${serial++}.npy`);
    const lens = path.join(tmp, `overflow-${serial++}-lens.npy`);
    const data = new Float32Array(6 * 4).fill(0.5);
    data[13] = 1e5;
    writeNpy(npy, { dtype: 'float32', shape: [6, 4], data });
    writeNpy(lens, { dtype: 'int32', shape: [2], data: new Int32Array([3, 3]) });
    const out = fresh();
    let r = cli('corpus', 'build', '--docs', npy, '--doc-lengths', lens, '--out', out);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /1 value beyond it \(the first, 100000, in document 1 at token 0, component 1\)/);
    assert.equal(fs.existsSync(out), false, 'nothing left behind');
    r = cli('corpus', 'build', '--docs', npy, '--doc-lengths', lens, '--out', out, '--clamp', '--json');
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stderr, /clamped 1 value beyond the float16 range/);
    assert.equal(JSON.parse(r.stdout).clamped, '1');
  });
});

describe('search checks the CRC of what it reads', () => {
  function flipByte(file: string, at: number) {
    const fd = fs.openSync(file, 'r+');
    const b = Buffer.alloc(1);
    fs.readSync(fd, b, 0, 1, at);
    b[0] ^= 0x10;
    fs.writeSync(fd, b, 0, 1, at);
    fs.closeSync(fd);
  }

  test('a flipped token byte or int8 scale makes search fail naming the segment', async () => {
    for (const dtype of ['float16', 'int8'] as const) {
      const dir = fresh();
      const w = CorpusWriter.create(dir, { dim: 8, dtype });
      w.add(randomRagged([5, 7, 3], 8, 'float32', rng(50)));
      w.commit();
      const a = CorpusWriter.append(dir);
      a.add(randomRagged([4, 6], 8, 'float32', rng(51)));
      a.commit();
      const q = randomRagged([3], 8, 'float32', rng(52));
      const clean = await openCorpus(dir).search(q, { topK: 3, backend: 'cpu' });
      const seg2 = path.join(dir, 'seg-000002.msxs');
      const header = CorpusFile.open(dir).segments[1].header;
      flipByte(seg2, dtype === 'int8' ? header.scalesSection.offset + 5 : 4096 + 17);
      const c = openCorpus(dir);
      const pattern =
        dtype === 'int8'
          ? /seg-000002\.msxs: the int8 scales are corrupted/
          : /seg-000002\.msxs: token data is corrupted in bytes \[0, 160\) of the tokens section/;
      for (const blockBytes of [undefined, 64]) {
        await assert.rejects(c.search(q, { topK: 3, backend: 'cpu', blockBytes }), pattern, dtype);
      }
      // without the check the scan runs (on the damaged data)
      const unchecked = await c.searchWithStats(q, { topK: 3, backend: 'cpu', verify: false });
      assert.equal(unchecked.stats.verifiedBytes, 0);
      // the CLI: a clean error, no stack trace
      const qf = path.join(tmp, `crc-q-${serial++}.npy`);
      writeNpy(qf, { dtype: 'float32', shape: [1, 3, 8], data: q.data as Float32Array });
      const r = cli('search', '--queries', qf, '--corpus', dir, '--backend', 'cpu');
      assert.equal(r.status, 1, r.stdout);
      assert.match(r.stderr, pattern);
      assert.doesNotMatch(r.stderr, /\n\s+at /);
      const r2 = cli('search', '--queries', qf, '--corpus', dir, '--backend', 'cpu', '--no-verify-corpus');
      assert.equal(r2.status, 0, r2.stderr);
      // repaired: the search checks again and passes, equal to before
      flipByte(seg2, dtype === 'int8' ? header.scalesSection.offset + 5 : 4096 + 17);
      const again = await openCorpus(dir).searchWithStats(q, { topK: 3, backend: 'cpu' });
      assert.deepEqual(again.hits, clean);
      assert.ok((again.stats.verifiedBytes ?? 0) > 0);
    }
  });

  test('the native CRC-32 equals zlib on every length, alignment and initial value', () => {
    const native = nativeUnavailableReason()
      ? undefined
      : (loadNative() as unknown as { file: { crc32?: (b: Uint8Array, c: number) => number } }).file.crc32;
    const rand = rng(80);
    const bytes = new Uint8Array(70000).map(() => Math.floor(rand() * 256));
    for (let t = 0; t < 400; t++) {
      const at = Math.floor(rand() * 64);
      const n = t < 200 ? t : Math.floor(rand() * (bytes.length - at));
      const part = bytes.subarray(at, at + n);
      assert.equal(checksum(part), crc32(part), `length ${n} at ${at}`);
      if (native) {
        const init = Math.floor(rand() * 2 ** 32);
        assert.equal(native(part, init), crc32(part, init), `length ${n} at ${at} from ${init}`);
      }
    }
  });

  test('each chunk is checked once per process; a later search checks nothing', async () => {
    const dir = fresh();
    const w = CorpusWriter.create(dir, { dim: 8 });
    w.add(randomRagged([5, 7, 3, 9], 8, 'float32', rng(60)));
    w.commit();
    const q = randomRagged([2], 8, 'float32', rng(61));
    const c = openCorpus(dir);
    const first = await c.searchWithStats(q, { backend: 'cpu', blockBytes: 100 });
    assert.equal(first.stats.verifiedBytes, 24 * 8 * 2);
    const second = await c.searchWithStats(q, { backend: 'cpu', blockBytes: 100 });
    assert.equal(second.stats.verifiedBytes, 0);
    const reopened = await openCorpus(dir).searchWithStats(q, { backend: 'cpu' });
    assert.equal(reopened.stats.verifiedBytes, 0, 'the same unchanged file, reopened');
  });
});

describe('bounded resources: sizes from headers are checked before allocating', () => {
  /** A .npy whose header claims `shape` with no data (empty documents). */
  function emptyNpy(shape: number[]): string {
    const file = path.join(tmp, `shape-${serial++}.npy`);
    let header = `{'descr': '<f4', 'fortran_order': False, 'shape': (${shape.join(', ')}), }`;
    header += `${' '.repeat(63 - ((10 + header.length) % 64))}\n`;
    const pre = Buffer.from([0x93, ...Buffer.from('NUMPY'), 1, 0, header.length & 0xff, header.length >> 8]);
    fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(header, 'latin1')]));
    return file;
  }

  test('a 128-byte .npy of shape (2000000000, 0, 16) is refused at once by score and corpus build', () => {
    const big = emptyNpy([2000000000, 0, 16]);
    assert.equal(fs.statSync(big).size, 128);
    const q = path.join(tmp, `q-${serial++}.npy`);
    writeNpy(q, { dtype: 'float32', shape: [1, 2, 16], data: new Float32Array(32).fill(0.25) });
    for (const args of [
      ['score', '--queries', q, '--docs', big],
      ['corpus', 'build', '--docs', big, '--out', fresh()],
    ]) {
      const t0 = Date.now();
      const r = cliBudget(...args);
      assert.equal(r.status, 1, `${args[0]}: ${r.stderr}`);
      assert.match(
        r.stderr,
        /documents whose metadata \(\d+ bytes each\) fits the budget of 1\.00 GB \(MAXSIM_METADATA_BUDGET\).*but received 2000000000 documents, which need \d+\.\d GB/,
      );
      assert.ok(Date.now() - t0 < 20_000, `${args[0]} answered in ${Date.now() - t0} ms`);
    }
    // more documents than an int32 indexes: refused whatever the budget
    const r = cli('corpus', 'build', '--docs', emptyNpy([3000000000, 0, 16]), '--out', fresh());
    assert.equal(r.status, 1);
    assert.match(r.stderr, /at most 2147483647 documents \(2\^31 - 1\).*but received 3000000000 documents/);
  });

  test('library: buildCorpusFromFilesSync refuses (300000000, 0, 16) under a stated budget', () => {
    const saved = process.env.MAXSIM_METADATA_BUDGET;
    process.env.MAXSIM_METADATA_BUDGET = String(1e9);
    try {
      assert.throws(
        () => buildCorpusFromFilesSync({ docs: emptyNpy([300000000, 0, 16]), out: fresh() }),
        /300000000 documents, which need 6\.00 GB/,
      );
    } finally {
      if (saved === undefined) delete process.env.MAXSIM_METADATA_BUDGET;
      else process.env.MAXSIM_METADATA_BUDGET = saved;
    }
    // within the budget, many empty documents build (typed metadata, bounded groups)
    const dir = fresh();
    const info = buildCorpusFromFilesSync({ docs: emptyNpy([200000, 0, 16]), out: dir });
    assert.equal(info.documents, 200000);
    assert.equal(CorpusFile.open(dir).lengths.length, 200000);
  });

  test('a segment header claiming more than its file holds is refused before allocating', () => {
    const dir = fresh();
    const w = CorpusWriter.create(dir, { dim: 4 });
    w.add(randomRagged([2, 3], 4, 'float32', rng(70)));
    w.commit();
    const seg = path.join(dir, 'seg-000001.msxs');
    const bytes = fs.readFileSync(seg);
    // documents = 2^40 with a recomputed header CRC
    bytes.writeBigUInt64LE(2n ** 40n, 24);
    bytes.writeUInt32LE(crc32(bytes.subarray(0, 124)), 124);
    fs.writeFileSync(seg, bytes);
    assert.throws(
      () => recoverCorpus(dir, { verify: true }),
      /its MANIFEST opens|none of its 1 segment files is intact.*offsets section size/,
    );
    fs.rmSync(path.join(dir, 'MANIFEST'));
    assert.throws(
      () => recoverCorpus(dir),
      /none of its 1 segment files is intact: .*inconsistent segment header: offsets section size/,
    );
  });
});
