// The corpus command line's contracts (src/cli/corpus.ts): usage errors of `corpus <sub>` exit 2 with
// one `maxsim:` line, outputs are never written inside a corpus directory, every command but build
// takes DIR first (append too; --out stays as its alias), and `delete --ignore-missing` makes a
// retried delete succeed.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { refuseInsideCorpus } from '../src/cli/corpus.js';
import { CorpusFile } from '../src/io/corpus/index.js';
import { writeNpy } from '../src/io/npy.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-corpus-cli-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));
const CLI = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
const cli = (...args: string[]) =>
  spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 60_000, cwd: tmp });

const DIM = 4;
const docs = path.join(tmp, 'd.npy');
const offsets = path.join(tmp, 'o.npy');
const ids = path.join(tmp, 'ids.txt');
writeNpy(docs, {
  dtype: 'float32',
  shape: [12, DIM],
  data: Float32Array.from({ length: 48 }, (_, i) => (i % 7) / 7),
});
writeNpy(offsets, { dtype: 'int64', shape: [7], data: BigInt64Array.from([0n, 2n, 4n, 6n, 8n, 10n, 12n]) });
fs.writeFileSync(ids, 'a\nb\nc\nd\ne\nf\n');
let serial = 0;
function corpus(): string {
  const dir = path.join(tmp, `c${serial++}.msx`);
  const r = cli('corpus', 'build', '--out', dir, '--docs', docs, '--doc-offsets', offsets, '--ids', ids);
  assert.equal(r.status, 0, r.stderr);
  return dir;
}
const list = (...names: string[]) => {
  const f = path.join(tmp, `list${serial++}.txt`);
  fs.writeFileSync(f, `${names.join('\n')}\n`);
  return f;
};

describe('corpus command line', () => {
  test('usage errors under corpus <sub> exit 2 with one maxsim: line', () => {
    const dir = corpus();
    for (const args of [
      ['corpus', 'info'],
      ['corpus', 'info', dir, 'extra'],
      ['corpus', 'delete', dir],
      ['corpus', 'get', dir, '--ids', ids, '--bogus'],
      ['corpus', 'compact', dir, '--wait'],
    ]) {
      const r = cli(...args);
      assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, /^maxsim: [^\n]+\n$/, args.join(' '));
    }
  });

  test('get refuses --out and --out-offsets inside a corpus; the segment stays intact', () => {
    const dir = corpus();
    const seg = path.join(dir, 'seg-000001.msxs');
    const before = fs.readFileSync(seg);
    const outside = path.join(tmp, 'out.npy');
    const ok = path.join(tmp, 'off.npy');
    for (const [out, off, flag] of [
      [seg, ok, '--out'],
      [path.join(dir, 'new.npy'), ok, '--out'],
      [outside, path.join(dir, 'MANIFEST'), '--out-offsets'],
      [dir, ok, '--out'],
    ]) {
      const r = cli('corpus', 'get', dir, '--ids', list('a'), '--out', out, '--out-offsets', off);
      assert.equal(r.status, 1, r.stderr);
      assert.match(
        r.stderr,
        new RegExp(`^maxsim: Expected a path outside every corpus directory for ${flag}`),
      );
    }
    assert.deepEqual(fs.readFileSync(seg), before);
    assert.equal(fs.existsSync(path.join(dir, 'new.npy')), false);
    CorpusFile.open(dir).verify();
    // through a symbolic link to the corpus as well
    const link = path.join(tmp, `link${serial++}`);
    fs.symlinkSync(dir, link);
    assert.throws(() => refuseInsideCorpus(path.join(link, 'x.npy'), '--out'), /inside the corpus/);
    refuseInsideCorpus(outside, '--out');
    const r = cli('corpus', 'get', dir, '--ids', list('b'), '--out', outside, '--out-offsets', ok);
    assert.equal(r.status, 0, r.stderr);
  });

  test('score, quantize and encode refuse --out inside a corpus before any work; the corpus stays intact', () => {
    const dir = corpus();
    const names = fs.readdirSync(dir).sort();
    const bytes = names.map((n) => fs.readFileSync(path.join(dir, n)));
    const queries = path.join(tmp, 'q.npy');
    writeNpy(queries, {
      dtype: 'float32',
      shape: [2, DIM],
      data: Float32Array.from({ length: 8 }, (_, i) => i / 8),
    });
    const inputs = ['--docs', docs, '--doc-offsets', offsets];
    for (const [args, out] of [
      [['score', '--queries', queries, ...inputs], path.join(dir, 'MANIFEST')],
      [['score', '--queries', queries, ...inputs], path.join(dir, 'scores.npy')],
      [['quantize', ...inputs], path.join(dir, 'seg-000001.msxs')],
      [['quantize', ...inputs], path.join(dir, 'sub', 'd8.safetensors')],
      [['encode', '--model', path.join(tmp, 'no-model'), '--queries', ids], path.join(dir, 'q.npy')],
    ] as const) {
      const r = cli(...args, '--out', out);
      assert.equal(r.status, 1, `${args[0]} ${out}: ${r.stdout}${r.stderr}`);
      assert.equal(
        r.stderr,
        `maxsim: Expected a path outside every corpus directory for --out but received ${out} (inside the corpus ${dir}; nothing was written)\n`,
      );
    }
    assert.deepEqual(fs.readdirSync(dir).sort(), names);
    for (const [i, n] of names.entries()) assert.deepEqual(fs.readFileSync(path.join(dir, n)), bytes[i], n);
    CorpusFile.open(dir).verify();
    // outside a corpus they write as before
    const ok = cli('score', '--queries', queries, ...inputs, '--out', path.join(tmp, 'scores.npy'));
    assert.equal(ok.status, 0, ok.stderr);
  });

  test('append --dtype must be the corpus dtype: another is refused naming both, nothing is written', () => {
    const dir = path.join(tmp, `c${serial++}.msx`);
    assert.equal(cli('corpus', 'build', '--out', dir, '--docs', docs, '--doc-offsets', offsets).status, 0);
    const before = fs.readdirSync(dir).sort();
    for (const given of ['int8', 'fp32', 'bf16']) {
      const r = cli('corpus', 'append', dir, '--docs', docs, '--doc-offsets', offsets, '--dtype', given);
      assert.equal(r.status, 1, r.stderr);
      const stored = { int8: 'int8', fp32: 'float32', bf16: 'bfloat16' }[given];
      assert.equal(
        r.stderr,
        `maxsim: Expected the corpus's dtype, float16 (an append stores tokens as the corpus does) for --dtype but received ${stored}\n`,
      );
    }
    assert.deepEqual(fs.readdirSync(dir).sort(), before);
    // its own dtype, in any spelling, or none: appended
    for (const given of [['--dtype', 'float16'], ['--dtype', 'fp16'], []]) {
      const r = cli('corpus', 'append', dir, '--docs', docs, '--doc-offsets', offsets, ...given, '--json');
      assert.equal(r.status, 0, r.stderr);
    }
    assert.equal(CorpusFile.open(dir).info.documents, 24);
  });

  test('build takes the dtype spellings the other commands take (float16 = fp16, bfloat16 = bf16)', () => {
    for (const [spelling, stored] of [
      ['float16', 'float16'],
      ['fp16', 'float16'],
      ['bfloat16', 'bfloat16'],
      ['float32', 'float32'],
    ]) {
      const dir = path.join(tmp, `dtype-${spelling}.msx`);
      const r = cli(
        'corpus',
        'build',
        '--out',
        dir,
        '--docs',
        docs,
        '--doc-offsets',
        offsets,
        '--dtype',
        spelling,
      );
      assert.equal(r.status, 0, r.stderr);
      const file = CorpusFile.open(dir);
      assert.equal(file.info.dtype, stored, spelling);
      file.close();
    }
    const bad = cli('corpus', 'build', '--out', path.join(tmp, 'x.msx'), '--docs', docs, '--dtype', 'half');
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /^maxsim: .*--dtype/);
  });

  test('build refuses a new corpus inside another', () => {
    const dir = corpus();
    const r = cli(
      'corpus',
      'build',
      '--out',
      path.join(dir, 'inner.msx'),
      '--docs',
      docs,
      '--doc-offsets',
      offsets,
    );
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /outside every corpus directory for --out/);
    assert.equal(fs.existsSync(path.join(dir, 'inner.msx')), false);
  });

  test('append takes DIR like the other commands (--out is its alias)', () => {
    const dir = corpus();
    const more = path.join(tmp, 'more.txt');
    fs.writeFileSync(more, 'g\nh\ni\nj\nk\nl\n');
    let r = cli('corpus', 'append', dir, '--docs', docs, '--doc-offsets', offsets, '--ids', more, '--json');
    assert.equal(r.status, 0, r.stderr);
    assert.equal(JSON.parse(r.stdout).documents, 12);
    fs.writeFileSync(more, 'm\nn\no\np\nq\nr\n');
    r = cli(
      'corpus',
      'append',
      '--out',
      dir,
      '--docs',
      docs,
      '--doc-offsets',
      offsets,
      '--ids',
      more,
      '--json',
    );
    assert.equal(r.status, 0, r.stderr);
    assert.equal(JSON.parse(r.stdout).documents, 18);
    r = cli(
      'corpus',
      'append',
      dir,
      '--out',
      path.join(tmp, 'other.msx'),
      '--docs',
      docs,
      '--doc-offsets',
      offsets,
    );
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /^maxsim: Expected one corpus directory/);
    r = cli('corpus', 'append', '--docs', docs, '--doc-offsets', offsets);
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /^maxsim: .*DIR/);
  });

  test('delete --ignore-missing: a retried delete succeeds and says what was absent', () => {
    const dir = corpus();
    let r = cli('corpus', 'delete', dir, '--ids', list('b', 'c'), '--json');
    assert.equal(r.status, 0, r.stderr);
    r = cli('corpus', 'delete', dir, '--ids', list('b', 'd'));
    assert.equal(r.status, 1, 'a missing id fails the delete without --ignore-missing');
    assert.equal(CorpusFile.open(dir).info.deleted, 2, 'and deletes nothing');
    r = cli('corpus', 'delete', dir, '--ids', list('b', 'd', 'zz'), '--ignore-missing', '--json');
    assert.equal(r.status, 0, r.stderr);
    const out = JSON.parse(r.stdout);
    assert.deepEqual([out['deleted now'], out.absent, out.deleted], ['1', ['b', 'zz'], 3]);
    r = cli('corpus', 'delete', dir, '--ids', list('b'), '--ignore-missing');
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stderr, /skipped 1 id that is not live/);
  });
});
