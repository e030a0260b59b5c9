// The centered 8-bit commands: `maxsim quantize --center` writes the mean, `--doc-mean` reads it back
// (scores with the shift added, closer to fp32 than plain int8 on an anisotropic corpus), and
// `maxsim fidelity --corpus DIR` measures a corpus directory with pseudo-queries or --queries FILE.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { anisotropicCorpus, pseudoQueries } from '../src/bench/corpora.js';
import { writeNpy } from '../src/io/npy.js';
import { readSafetensors } from '../src/io/safetensors.js';
import { runSeed } from './helpers.js';

const CLI = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-eight-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));
const file = (name: string) => path.join(tmp, name);

function cli(...args: string[]) {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 120_000 });
  return { ...r, ok: r.status === 0, text: `status ${r.status}\nstdout: ${r.stdout}\nstderr: ${r.stderr}` };
}

const docs = anisotropicCorpus({ docs: 40, seed: runSeed % 10_000 });
const { queries } = pseudoQueries(docs, { queries: 3, length: 8, noise: 0.1, seed: 1 });
writeNpy(file('docs.npy'), {
  dtype: 'float32',
  shape: [docs.data.length / docs.dim, docs.dim],
  data: docs.data,
});
const offsets = new BigInt64Array(docs.count + 1);
for (let b = 0; b < docs.count; b++) offsets[b + 1] = offsets[b] + BigInt(docs.lengths[b]);
writeNpy(file('offsets.npy'), { dtype: 'int64', shape: [docs.count + 1], data: offsets });
writeNpy(file('q.npy'), { dtype: 'float32', shape: [3, 8, docs.dim], data: queries.data });

function scores(...args: string[]): number[][] {
  const r = cli('score', '--queries', file('q.npy'), '--backend', 'cpu', '--json', ...args);
  assert.ok(r.ok, r.text);
  return JSON.parse(r.stdout).scores;
}

test('maxsim quantize --center writes the mean; --doc-mean scores closer to fp32 than plain int8', () => {
  for (const [out, extra] of [
    ['c.safetensors', ['--center']],
    ['p.safetensors', []],
  ] as const) {
    const r = cli(
      'quantize',
      '--docs',
      file('docs.npy'),
      '--doc-offsets',
      file('offsets.npy'),
      '--out',
      file(out),
      '--json',
      ...extra,
    );
    assert.ok(r.ok, r.text);
    assert.equal(JSON.parse(r.stdout).centered, extra.length > 0);
  }
  const c = readSafetensors(file('c.safetensors'));
  assert.deepEqual(c.tensors.get('mean')?.shape, [docs.dim]);
  assert.equal(readSafetensors(file('p.safetensors')).tensors.has('mean'), false);
  const exact = scores('--docs', file('docs.npy'), '--doc-offsets', file('offsets.npy'));
  const int8 = (name: string, ...extra: string[]) =>
    scores(
      '--dtype',
      'int8',
      '--docs',
      `${file(name)}:embeddings`,
      '--doc-scales',
      `${file(name)}:scales`,
      '--doc-offsets',
      `${file(name)}:offsets`,
      ...extra,
    );
  const worst = (got: number[][]) =>
    Math.max(...got.flatMap((row, q) => row.map((s, b) => Math.abs(s - exact[q][b]))));
  const centered = worst(int8('c.safetensors', '--doc-mean', `${file('c.safetensors')}:mean`));
  const plain = worst(int8('p.safetensors'));
  assert.ok(centered < plain, `centered error ${centered} < plain ${plain}`);
  assert.ok(centered < 0.02, `centered error ${centered}`);
  // without its mean a centered file scores the residuals: far off (a constant per query)
  assert.ok(worst(int8('c.safetensors')) > 1);
  const bad = cli(
    'score',
    '--queries',
    file('q.npy'),
    '--docs',
    file('docs.npy'),
    '--doc-offsets',
    file('offsets.npy'),
    '--doc-mean',
    `${file('c.safetensors')}:mean`,
  );
  assert.equal(bad.status, 1, bad.text);
  assert.match(bad.stderr, /--doc-mean/);
});

test('maxsim fidelity --corpus DIR: pseudo-queries or --queries FILE, plain and centered', () => {
  const dir = file('corpus');
  const built = cli(
    'corpus',
    'build',
    '--docs',
    file('docs.npy'),
    '--doc-offsets',
    file('offsets.npy'),
    '--out',
    dir,
    '--dtype',
    'fp32',
  );
  assert.ok(built.ok, built.text);
  for (const q of ['4', file('q.npy')]) {
    const r = cli(
      'fidelity',
      '--corpus',
      dir,
      '--queries',
      q,
      '--query-length',
      '8',
      '--json',
      '--time-limit',
      '0',
    );
    assert.ok(r.ok, r.text);
    const [report] = JSON.parse(r.stdout).reports;
    assert.equal(report.docs, docs.count);
    assert.equal(report.queries, q === '4' ? 4 : 3);
    assert.ok(report.centered.int8.spearmanMean > report.spearmanMean, r.stdout);
    assert.ok(report.anisotropy.meanCosine > 0.8);
  }
  const capped = cli(
    'fidelity',
    '--corpus',
    dir,
    '--docs',
    '10',
    '--queries',
    '2',
    '--json',
    '--time-limit',
    '0',
  );
  assert.ok(capped.ok, capped.text);
  assert.equal(JSON.parse(capped.stdout).reports[0].docs, 10);
  const noCorpus = cli('fidelity', '--queries', file('q.npy'));
  assert.equal(noCorpus.status, 1, noCorpus.text);
  assert.match(noCorpus.stderr, /--queries/);
});
