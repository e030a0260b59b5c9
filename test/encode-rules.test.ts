// ColBERT's pre- and post-processing without the ONNX encoder: settings resolution, the query and
// document token layouts PyLate builds, the skiplist, the projection, and parity of token ids and
// masks with the `tokenizers` package on 1,000 varied strings (expected-tokens.json.gz, made by
// scripts/make-tiny-colbert.py with the real answerai-colbert-small-v1 tokenizer).
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, test } from 'node:test';
import { gunzipSync } from 'node:zlib';
import { findDense, projectRows } from '../src/encode/dense.js';
import { loadTokenizerClass } from '../src/encode/runtime.js';
import {
  type ColbertSettings,
  DEFAULT_SETTINGS,
  PUNCTUATION,
  resolveSettings,
} from '../src/encode/settings.js';
import { ColbertTokenizer, pythonStrip } from '../src/encode/tokenize.js';
import { FormatError, InvalidArgumentError } from '../src/errors.js';
import { writeSafetensors } from '../src/io/safetensors.js';
import { packageRoot } from '../src/native.js';
import { rng, runSeed } from './helpers.js';

const TINY = path.join(packageRoot, 'test', 'fixtures', 'tiny-colbert');
const DENSE = path.join(packageRoot, 'test', 'fixtures', 'answerai-dense');

const Tokenizer = await loadTokenizerClass().catch(() => undefined);
// In CI the optional packages are installed: a missing one fails there instead of skipping.
const noTokenizer =
  Tokenizer === undefined && !process.env.CI ? '@huggingface/tokenizers is not installed' : false;

function tokenizer(overrides: Partial<ColbertSettings> = {}): ColbertTokenizer {
  return ColbertTokenizer.fromDir(TINY, resolveSettings(TINY, overrides).settings, Tokenizer!);
}

function tmpModel(files: Record<string, string>): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-encode-'));
  for (const [name, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
    fs.writeFileSync(path.join(dir, name), text);
  }
  return dir;
}

describe('ColBERT settings', () => {
  test('read from config_sentence_transformers.json and sentence_bert_config.json', () => {
    const { settings, source } = resolveSettings(TINY);
    assert.equal(source, 'config_sentence_transformers.json');
    assert.deepEqual(
      { ...settings, skiplistWords: settings.skiplistWords.join('') },
      {
        queryPrefix: '[unused0]',
        documentPrefix: '[unused1]',
        queryLength: 32,
        documentLength: 300,
        doQueryExpansion: true,
        attendToExpansionTokens: false,
        skiplistWords: PUNCTUATION.join(''),
        doLowerCase: false,
      },
    );
  });

  test('without a config: the documented defaults; Stanford artifact.metadata; overrides win', () => {
    const bare = tmpModel({});
    assert.deepEqual(resolveSettings(bare).settings, DEFAULT_SETTINGS);
    assert.match(resolveSettings(bare).source, /defaults/);
    const stanford = tmpModel({
      'artifact.metadata': JSON.stringify({ query_maxlen: 24, doc_maxlen: 220, attend_to_mask_tokens: true }),
    });
    const s = resolveSettings(stanford, { documentLength: 100 }).settings;
    assert.equal(s.queryLength, 24);
    assert.equal(s.documentLength, 100);
    assert.equal(s.attendToExpansionTokens, true);
    assert.equal(s.queryPrefix, '[unused0]');
    // no query expansion: nothing attends to expansion tokens
    assert.equal(
      resolveSettings(stanford, { doQueryExpansion: false }).settings.attendToExpansionTokens,
      false,
    );
  });

  test('bad values are named', () => {
    assert.throws(() => resolveSettings(TINY, { queryLength: 0 }), InvalidArgumentError);
    assert.throws(
      () => resolveSettings(TINY, { skiplistWords: 'abc' as unknown as string[] }),
      /skiplistWords/,
    );
    const bad = tmpModel({ 'config_sentence_transformers.json': '{"query_length": "32"}' });
    assert.throws(
      () => resolveSettings(bad),
      (e: Error) => e instanceof FormatError && /query_length/.test(e.message),
    );
    const broken = tmpModel({ 'config_sentence_transformers.json': '{"query_length": ' });
    assert.throws(() => resolveSettings(broken), /not a JSON object/);
  });
});

describe('ColBERT tokenization', { skip: noTokenizer }, () => {
  test('queries: [CLS] [unused0] text [SEP] then [MASK] up to query_length, attention 0 on the expansion', () => {
    const t = tokenizer();
    const q = t.query('Hello world');
    assert.equal(q.ids.length, 32);
    assert.deepEqual(Array.from(q.ids.slice(0, 5)), [101, 1, 7592, 2088, 102]);
    assert.ok(q.ids.slice(5).every((id) => id === 103));
    assert.deepEqual(Array.from(q.mask), [...Array(5).fill(1), ...Array(27).fill(0)]);
    assert.equal(q.dropped, 0);
    assert.equal(t.keptPositions(q, true).length, 32, 'queries keep every position, the expansion included');
    const attend = tokenizer({ attendToExpansionTokens: true }).query('Hello world');
    assert.ok(attend.mask.every((m) => m === 1));
    const noExpansion = tokenizer({ doQueryExpansion: false });
    const short = noExpansion.query('Hello world');
    assert.deepEqual(Array.from(short.ids), [101, 1, 7592, 2088, 102]);
    assert.deepEqual(Array.from(noExpansion.keptPositions(short, true)), [0, 1, 2, 3, 4]);
  });

  test('truncation to length - 1 with the specials, then the prefix', () => {
    const t = tokenizer();
    const q = t.query('word '.repeat(100));
    assert.equal(q.ids.length, 32);
    assert.equal(q.ids[31], 102);
    assert.equal(q.dropped, 100 - 29);
    const d = t.document('word '.repeat(400));
    assert.equal(d.ids.length, 300);
    assert.deepEqual([d.ids[0], d.ids[1], d.ids[2], d.ids[299]], [101, 2, 2773, 102]);
    assert.equal(d.dropped, 400 - 297);
    assert.ok(d.mask.every((m) => m === 1));
    const exact = t.document('word '.repeat(297));
    assert.equal(exact.ids.length, 300);
    assert.equal(exact.dropped, 0);
  });

  test('documents: the skiplist is removed after encoding, the specials and prefix stay', () => {
    const t = tokenizer();
    const d = t.document('a, b! (c)');
    // [CLS] [unused1] a , b ! ( c ) [SEP]
    assert.deepEqual(Array.from(d.ids), [101, 2, 1037, 1010, 1038, 999, 1006, 1039, 1007, 102]);
    assert.deepEqual(Array.from(t.keptPositions(d, false)), [0, 1, 2, 4, 7, 9]);
    // a word outside the vocabulary maps to [UNK] (transformers' convert_tokens_to_ids)
    const unk = tokenizer({ skiplistWords: ['notawordxyz'] });
    assert.deepEqual([...unk.skipIds], [100]);
    const e = unk.document('😀 x');
    assert.deepEqual(Array.from(unk.keptPositions(e, false)), [0, 1, 3, 4]);
  });

  test('an empty prefix inserts nothing; lengths too short for the specials are refused', () => {
    const t = tokenizer({ queryPrefix: '', documentPrefix: '' });
    assert.deepEqual(Array.from(t.document('hi').ids), [101, 7632, 102]);
    assert.equal(t.query('hi').ids.length, 32);
    assert.throws(() => tokenizer({ queryLength: 3 }), /queryLength/);
    assert.throws(() => tokenizer({ queryPrefix: '[NOPE]' }), /query prefix "\[NOPE\]" is not a token/);
  });

  test("Python's str.strip, not JavaScript's trim", () => {
    assert.equal(pythonStrip('\x1c\x85 a b \u3000\n'), 'a b');
    assert.equal(pythonStrip('\ufeffa'), '\ufeffa');
    assert.equal(pythonStrip(''), '');
  });

  const tokensFile = path.join(TINY, 'expected-tokens.json.gz');
  test('token ids and masks equal the tokenizers package with ColBERT pre-processing on 1,000 strings', {
    skip: fs.existsSync(tokensFile)
      ? false
      : 'expected-tokens.json.gz not made yet (scripts/make-tiny-colbert.py)',
  }, () => {
    const expected = JSON.parse(gunzipSync(fs.readFileSync(tokensFile)).toString('utf8')) as {
      strings: string[];
      query_ids: number[][];
      query_mask: number[][];
      document_ids: number[][];
    };
    assert.equal(expected.strings.length, 1000);
    const t = tokenizer();
    const bad: string[] = [];
    expected.strings.forEach((s, i) => {
      const q = t.query(s);
      const d = t.document(s);
      if (
        JSON.stringify(Array.from(q.ids)) !== JSON.stringify(expected.query_ids[i]) ||
        JSON.stringify(Array.from(q.mask)) !== JSON.stringify(expected.query_mask[i]) ||
        JSON.stringify(Array.from(d.ids)) !== JSON.stringify(expected.document_ids[i])
      )
        bad.push(
          `#${i} ${JSON.stringify(s.slice(0, 60))}: doc ${JSON.stringify(Array.from(d.ids).slice(0, 12))} vs ${JSON.stringify(expected.document_ids[i].slice(0, 12))}`,
        );
    });
    assert.equal(bad.length, 0, `${bad.length} strings differ:\n${bad.slice(0, 10).join('\n')}`);
    // the set covers what it claims: empty, long (truncated) documents and queries
    assert.ok(expected.strings.includes(''));
    assert.ok(expected.document_ids.some((ids) => ids.length === 300));
    assert.ok(expected.query_mask.some((m) => m.every((v) => v === 1)));
  });
});

describe('projection layers', () => {
  const denseDir = () => {
    const dir = tmpModel({ '1_Dense/config.json': fs.readFileSync(path.join(DENSE, 'config.json'), 'utf8') });
    fs.copyFileSync(path.join(DENSE, 'model.safetensors'), path.join(dir, '1_Dense', 'model.safetensors'));
    return dir;
  };

  test('the real answerai 384 -> 96 projection and the L2 norm equal a float64 reference', () => {
    const layers = findDense(denseDir());
    assert.equal(layers.length, 1);
    assert.deepEqual([layers[0].inFeatures, layers[0].outFeatures, layers[0].bias], [384, 96, undefined]);
    const rand = rng(runSeed);
    const rows = 17;
    const hidden = Float32Array.from({ length: rows * 384 }, () => (rand() * 2 - 1) * 3);
    hidden.fill(0, 5 * 384, 6 * 384); // a zero row stays zero (norm clamped at 1e-12)
    const out = new Float32Array(rows * 96);
    projectRows(
      layers,
      hidden,
      0,
      384,
      Int32Array.from({ length: rows }, (_, i) => i),
      out,
      0,
      true,
    );
    const w = layers[0].weight;
    for (let r = 0; r < rows; r++) {
      const y = Array.from({ length: 96 }, (_, o) => {
        let acc = 0;
        for (let k = 0; k < 384; k++) acc += w[o * 384 + k] * hidden[r * 384 + k];
        return acc;
      });
      const norm = Math.max(Math.hypot(...y), 1e-12);
      for (let o = 0; o < 96; o++)
        assert.ok(Math.abs(out[r * 96 + o] - y[o] / norm) <= 2e-6, `seed ${runSeed} row ${r} col ${o}`);
    }
    assert.ok(out.subarray(5 * 96, 6 * 96).every((v) => v === 0));
  });

  const denseExpected = path.join(TINY, 'expected-dense.json');
  test('the real projection equals PyTorch (expected-dense.json)', {
    skip: fs.existsSync(denseExpected) ? false : 'expected-dense.json not made yet',
  }, () => {
    const e = JSON.parse(fs.readFileSync(denseExpected, 'utf8')) as {
      hidden: number[];
      tokens: number;
      expected: number[];
    };
    const layers = findDense(denseDir());
    const out = new Float32Array(e.tokens * 96);
    projectRows(
      layers,
      Float32Array.from(e.hidden),
      0,
      384,
      Int32Array.from({ length: e.tokens }, (_, i) => i),
      out,
      0,
      true,
    );
    let worst = 0;
    out.forEach((v, i) => {
      worst = Math.max(worst, Math.abs(v - e.expected[i]));
    });
    assert.ok(worst < 1e-6, `max |diff| ${worst}`);
  });

  test('modules.json order, biases, a missing file and an unsupported activation', () => {
    const dir = tmpModel({
      'modules.json': JSON.stringify([
        { idx: 0, name: '0', path: '', type: 'sentence_transformers.models.Transformer' },
        { idx: 2, name: '2', path: '2_Dense', type: 'pylate.models.Dense.Dense' },
        { idx: 1, name: '1', path: '1_Dense', type: 'sentence_transformers.models.Dense' },
      ]),
      '1_Dense/config.json': '{"activation_function": "torch.nn.modules.linear.Identity"}',
      '2_Dense/config.json': '{}',
    });
    const weight = (o: number, i: number) => ({
      dtype: 'float32' as const,
      shape: [o, i],
      data: Float32Array.from({ length: o * i }, (_, k) => (k % 7) - 3),
    });
    writeSafetensors(path.join(dir, '1_Dense', 'model.safetensors'), {
      'linear.weight': weight(3, 4),
      'linear.bias': { dtype: 'float32', shape: [3], data: Float32Array.from([1, 2, 3]) },
    });
    writeSafetensors(path.join(dir, '2_Dense', 'model.safetensors'), { 'linear.weight': weight(2, 3) });
    const layers = findDense(dir);
    assert.deepEqual(
      layers.map((l) => [l.inFeatures, l.outFeatures]),
      [
        [4, 3],
        [3, 2],
      ],
    );
    const out = new Float32Array(2);
    projectRows(layers, Float32Array.from([1, 0, 2, -1]), 0, 4, Int32Array.from([0]), out, 0, false);
    // layer 1: W1 = [[-3,-2,-1,0],[1,2,3,-3],[-2,-1,0,1]] x + [1,2,3] = [-4, 12, 0]; layer 2: W2 = [[-3,-2,-1],[0,1,2]]
    assert.deepEqual(Array.from(out), [12 - 24, 12]);
    fs.rmSync(path.join(dir, '2_Dense', 'model.safetensors'));
    assert.throws(() => findDense(dir), /2_Dense: a Dense module without model.safetensors/);
    fs.writeFileSync(
      path.join(dir, '1_Dense', 'config.json'),
      '{"activation_function": "torch.nn.modules.activation.Tanh"}',
    );
    fs.rmSync(path.join(dir, 'modules.json'));
    assert.throws(() => findDense(dir), /activation "torch.nn.modules.activation.Tanh" is not supported/);
    assert.deepEqual(findDense(tmpModel({})), []);
  });
});
