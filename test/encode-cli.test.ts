// `maxsim encode` and the optional dependencies: the files it writes equal the API's batches and
// feed `maxsim score`; errors are one line; importing maxsim or maxsim/encode loads no onnxruntime.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { loadColbert } from '../src/encode/colbert.js';
import { readNpy } from '../src/io/npy.js';
import { readSafetensors } from '../src/io/safetensors.js';
import { packageRoot } from '../src/native.js';
import { TINY, tinySkip } from './tiny-model.js';

const CLI = path.join(packageRoot, 'dist', 'src', 'cli', 'main.js');
const skip = tinySkip;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-encode-cli-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

function maxsim(...args: string[]) {
  return spawnSync(process.execPath, [CLI, '--quiet', ...args], { encoding: 'utf8', timeout: 120_000 });
}

const QUERIES = ['what is late interaction?', 'Eiffel Tower', ''];
const DOCS = [
  { id: 'a', text: 'The Eiffel Tower is in Paris, France.' },
  { id: 'b', body: 'x', text: 'Late interaction scores every query token against every document token!' },
  { id: 'c', text: '' },
];

describe('maxsim encode', { skip }, () => {
  const qFile = path.join(tmp, 'q.txt');
  const dFile = path.join(tmp, 'd.jsonl');
  fs.writeFileSync(qFile, `${QUERIES.join('\n')}\n`);
  fs.writeFileSync(dFile, `${DOCS.map((d) => JSON.stringify(d)).join('\n')}\n`);

  test('queries to [N, 32, d] .npy, documents to packed tokens + offsets, equal to the API', async () => {
    const encoder = await loadColbert(TINY);
    const q = maxsim(
      'encode',
      '--model',
      TINY,
      '--queries',
      qFile,
      '--out',
      path.join(tmp, 'q.npy'),
      '--json',
    );
    assert.equal(q.status, 0, q.stderr);
    assert.equal(JSON.parse(q.stdout).texts, 3);
    const qa = readNpy(path.join(tmp, 'q.npy'));
    assert.deepEqual(qa.shape, [3, 32, 16]);
    const qApi = await encoder.encodeQueries(QUERIES);
    assert.deepEqual(qa.data, qApi.data);

    const d = maxsim(
      'encode',
      '--model',
      TINY,
      '--documents',
      dFile,
      '--out',
      path.join(tmp, 'd.safetensors'),
    );
    assert.equal(d.status, 0, d.stderr);
    assert.match(d.stdout, /^encoded 3 documents \(\d+ tokens, d = 16, float32\)/);
    const file = readSafetensors(path.join(tmp, 'd.safetensors')).tensors;
    const dApi = await encoder.encodeDocuments(DOCS.map((x) => x.text));
    assert.deepEqual(file.get('embeddings')!.data, dApi.data);
    const offsets = Array.from(file.get('offsets')!.data as BigInt64Array, Number);
    assert.deepEqual(
      offsets.slice(1),
      Array.from(dApi.lengths).map((_, i, l) => l.slice(0, i + 1).reduce((a, b) => a + b)),
    );
    await encoder.close();

    const npy = maxsim(
      'encode',
      '--model',
      TINY,
      '--documents',
      dFile,
      '--out',
      path.join(tmp, 'd.npy'),
      '--dtype',
      'float16',
    );
    assert.equal(npy.status, 0, npy.stderr);
    assert.equal(readNpy(path.join(tmp, 'd.npy')).dtype, 'float16');
    const score = maxsim(
      'score',
      '--queries',
      path.join(tmp, 'q.npy'),
      '--docs',
      path.join(tmp, 'd.npy'),
      '--doc-offsets',
      path.join(tmp, 'd.offsets.npy'),
      '--json',
    );
    assert.equal(score.status, 0, score.stderr);
  });

  test('a JSONL text field other than text; bad inputs give one line and exit code 1', () => {
    const other = maxsim(
      'encode',
      '--model',
      TINY,
      '--documents',
      dFile,
      '--text-field',
      'body',
      '--out',
      path.join(tmp, 'x.npy'),
    );
    assert.equal(other.status, 1);
    assert.match(other.stderr, /^maxsim: .*d\.jsonl: line 1 has no string field "body"\n$/);
    const cases: [string[], RegExp][] = [
      [['--model', path.join(tmp, 'none'), '--queries', qFile], /never downloads a model unless allowRemote/],
      [['--model', TINY], /exactly one of them for --queries \/ --documents but received neither/],
      [
        ['--model', TINY, '--queries', path.join(tmp, 'missing.txt')],
        /for --queries but received .*missing\.txt/,
      ],
      [['--model', TINY, '--queries', qFile, '--no-truncate', '--documents', dFile], /received both/],
    ];
    fs.writeFileSync(path.join(tmp, 'empty.txt'), '');
    cases.push([['--model', TINY, '--documents', path.join(tmp, 'empty.txt')], /at least one text/]);
    for (const [args, pattern] of cases) {
      const r = maxsim('encode', ...args, '--out', path.join(tmp, 'o.npy'));
      assert.equal(r.status, 1, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, pattern);
      assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    }
  });
});

describe('maxsim corpus build --texts and search --query-text', { skip }, () => {
  test('text -> corpus -> search equals embeddings -> corpus -> search; the model is found from the corpus', () => {
    const texts = path.join(tmp, 'docs.jsonl');
    fs.writeFileSync(texts, `${DOCS.map((d) => JSON.stringify(d)).join('\n')}\n`);
    const byText = path.join(tmp, 'text.msx');
    const built = maxsim(
      'corpus',
      'build',
      '--texts',
      texts,
      '--model',
      TINY,
      '--out',
      byText,
      '--dtype',
      'fp32',
      '--json',
    );
    assert.equal(built.status, 0, built.stderr);
    assert.equal(JSON.parse(built.stdout).documents, 3);
    // the same documents through encode -> .npy -> corpus build --docs
    const enc = maxsim('encode', '--model', TINY, '--documents', texts, '--out', path.join(tmp, 'e.npy'));
    assert.equal(enc.status, 0, enc.stderr);
    const ids = path.join(tmp, 'ids.txt');
    fs.writeFileSync(ids, 'a\nb\nc\n');
    const byEmb = path.join(tmp, 'emb.msx');
    const b2 = maxsim(
      'corpus',
      'build',
      '--docs',
      path.join(tmp, 'e.npy'),
      '--doc-offsets',
      path.join(tmp, 'e.offsets.npy'),
      '--ids',
      ids,
      '--out',
      byEmb,
      '--dtype',
      'fp32',
    );
    assert.equal(b2.status, 0, b2.stderr);
    const q = maxsim(
      'encode',
      '--model',
      TINY,
      '--queries',
      path.join(tmp, 'q.txt'),
      '--out',
      path.join(tmp, 'qq.npy'),
    );
    assert.equal(q.status, 0, q.stderr);
    const viaText = maxsim(
      'search',
      '--corpus',
      byText,
      ...QUERIES.flatMap((t) => ['--query-text', t]),
      '--backend',
      'cpu',
    );
    assert.equal(viaText.status, 0, viaText.stderr);
    const viaEmb = maxsim(
      'search',
      '--corpus',
      byEmb,
      '--queries',
      path.join(tmp, 'qq.npy'),
      '--backend',
      'cpu',
    );
    assert.equal(viaEmb.status, 0, viaEmb.stderr);
    assert.equal(viaText.stdout, viaEmb.stdout);
    assert.equal(viaText.stdout.trim().split('\n').length, 3);
    // a corpus built from embeddings records no model
    const none = maxsim('search', '--corpus', byEmb, '--query-text', 'x');
    assert.equal(none.status, 1);
    assert.match(none.stderr, /the corpus records none/);
    const noModel = maxsim('corpus', 'build', '--texts', texts, '--out', path.join(tmp, 'n.msx'));
    assert.match(noModel.stderr, /for --model/);
  });
});

test('importing maxsim and maxsim/encode loads no onnxruntime; loadColbert does', { skip }, () => {
  const script = `
    import { createRequire } from 'node:module';
    const require = createRequire(import.meta.url);
    const loaded = () => Object.keys(require.cache).some((k) => k.includes('onnxruntime'));
    await import('maxsim');
    const { loadColbert } = await import('maxsim/encode');
    const before = loaded();
    const e = await loadColbert(${JSON.stringify(TINY)});
    await e.close();
    console.log(JSON.stringify({ before, after: loaded() }));`;
  const dir = fs.mkdtempSync(path.join(tmp, 'probe-'));
  fs.writeFileSync(path.join(dir, 'probe.mjs'), script);
  fs.mkdirSync(path.join(dir, 'node_modules'));
  fs.symlinkSync(packageRoot, path.join(dir, 'node_modules', 'maxsim'));
  const r = spawnSync(process.execPath, [path.join(dir, 'probe.mjs')], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), { before: false, after: true });
});
