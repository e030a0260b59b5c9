// The tiny random-weight ColBERT (test/fixtures/tiny-colbert, made by scripts/make-tiny-colbert.py)
// end to end through onnxruntime-node: embeddings against PyTorch's (expected.json), batching,
// dtypes, progress, abort, bad inputs, allowRemote over a local server, text -> corpus -> search.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { type ColbertEncoder, loadColbert } from '../src/encode/colbert.js';
import { loadOrt, loadTokenizerClass } from '../src/encode/runtime.js';
import { FormatError, InvalidArgumentError } from '../src/errors.js';
import { floatToF16Bits } from '../src/floats.js';
import { CorpusWriter } from '../src/io/corpus/index.js';
import { packageRoot } from '../src/native.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { raggedBatch, type TokenBatch } from '../src/tensor.js';

const TINY = path.join(packageRoot, 'test', 'fixtures', 'tiny-colbert');
const deps = await Promise.all([loadOrt(), loadTokenizerClass()]).then(
  () => true,
  () => false,
);
const hasModel = fs.existsSync(path.join(TINY, 'model.onnx'));
const skip = !hasModel
  ? 'test/fixtures/tiny-colbert/model.onnx not made yet (scripts/make-tiny-colbert.py)'
  : !deps && !process.env.CI
    ? 'onnxruntime-node / @huggingface/tokenizers are not installed'
    : false;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-encode-model-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

/** A copy of the fixture without some of its files. */
function modelWithout(...names: string[]): string {
  const dir = fs.mkdtempSync(path.join(tmp, 'model-'));
  fs.cpSync(TINY, dir, { recursive: true });
  for (const n of names) fs.rmSync(path.join(dir, n), { recursive: true, force: true });
  return dir;
}

function item(batch: TokenBatch, b: number): Float32Array {
  const s = batch.starts[b] * batch.dim;
  return (batch.data as Float32Array).subarray(s, s + batch.lengths[b] * batch.dim);
}

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length);
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
  return worst;
}

const DOCS = [
  'The Eiffel Tower is a wrought-iron lattice tower in Paris, France.',
  'Late interaction scores every query token against every document token.',
  'The Louvre is the most visited museum in the world!',
  '',
  'word '.repeat(400),
  'Rivers: the Seine (Paris), the Thames (London), the Danube.',
];

describe('the tiny ColBERT model', { skip }, () => {
  let encoder: ColbertEncoder;
  test('loads with its settings, dimension and projection', async () => {
    encoder = await loadColbert(TINY);
    assert.equal(encoder.dim, 16);
    assert.equal(encoder.info.settingsFrom, 'config_sentence_transformers.json');
    assert.equal(encoder.info.hidden, 32);
    assert.match(encoder.info.projection[0], /1_Dense.model\.safetensors \[16, 32\]/);
  });

  const expectedFile = path.join(TINY, 'expected.json');
  test('token ids, masks, kept positions and embeddings equal PyTorch (expected.json)', {
    skip: fs.existsSync(expectedFile) ? false : 'expected.json not made yet',
  }, async () => {
    type Item = {
      text: string;
      ids: number[];
      attention_mask: number[];
      kept: number[];
      embeddings: number[];
    };
    const e = JSON.parse(fs.readFileSync(expectedFile, 'utf8')) as { queries: Item[]; documents: Item[] };
    for (const [kind, items] of [
      ['queries', e.queries],
      ['documents', e.documents],
    ] as const) {
      const isQuery = kind === 'queries';
      const texts = items.map((i) => i.text);
      const batch = isQuery ? await encoder.encodeQueries(texts) : await encoder.encodeDocuments(texts);
      items.forEach((want, b) => {
        const t = isQuery ? encoder.tokenizer.query(want.text) : encoder.tokenizer.document(want.text);
        assert.deepEqual(Array.from(t.ids), want.ids, `${kind}[${b}] ids`);
        assert.deepEqual(Array.from(t.mask), want.attention_mask, `${kind}[${b}] mask`);
        assert.deepEqual(
          Array.from(encoder.tokenizer.keptPositions(t, isQuery)),
          want.kept,
          `${kind}[${b}] kept`,
        );
        // fp32 through two runtimes: a few ulps of unit vectors
        const d = maxDiff(item(batch, b), want.embeddings);
        assert.ok(d < 1e-5, `${kind}[${b}] max |diff| ${d}`);
      });
    }
  });

  test('every kept token is a unit vector; results do not depend on the batch', async () => {
    const together = await encoder.encodeDocuments(DOCS);
    assert.deepEqual(
      Array.from(together.lengths),
      DOCS.map((d) => encoder.tokenizer.keptPositions(encoder.tokenizer.document(d), false).length),
    );
    assert.equal(together.lengths[3], 3, 'an empty document keeps [CLS], the prefix and [SEP]');
    assert.equal(together.lengths[4], 300);
    for (let t = 0; t < together.lengths.reduce((a, b) => a + b, 0); t++) {
      const row = (together.data as Float32Array).subarray(t * 16, t * 16 + 16);
      assert.ok(Math.abs(Math.hypot(...row) - 1) < 1e-6);
    }
    for (let b = 0; b < DOCS.length; b++) {
      const alone = await encoder.encodeDocuments([DOCS[b]]);
      assert.ok(maxDiff(item(alone, 0), item(together, b)) < 1e-5, `document ${b}`);
    }
    const small = await loadColbert(TINY, { batchSize: 2 });
    const batched = await small.encodeDocuments(DOCS);
    assert.ok(maxDiff(batched.data as Float32Array, together.data as Float32Array) < 1e-5);
    await small.close();
    const q = await encoder.encodeQueries(['what is late interaction?', '']);
    assert.deepEqual(Array.from(q.lengths), [32, 32]);
  });

  test('float16 output is the float32 output rounded', async () => {
    const f16 = await loadColbert(TINY, { dtype: 'float16' });
    const a = await f16.encodeDocuments(DOCS.slice(0, 3));
    const b = await encoder.encodeDocuments(DOCS.slice(0, 3));
    assert.equal(a.dtype, 'float16');
    const bits = a.data as Uint16Array;
    (b.data as Float32Array).forEach((v, i) => {
      assert.ok(Math.abs(bits[i] - floatToF16Bits(v)) <= 1, `element ${i}`);
    });
    await f16.close();
  });

  test('progress after each batch, AbortSignal before and between batches', async () => {
    const small = await loadColbert(TINY, { batchSize: 2 });
    const seen: number[] = [];
    await small.encodeDocuments(DOCS.slice(0, 5), { onProgress: (done, total) => seen.push(done, total) });
    assert.deepEqual(seen, [2, 5, 4, 5, 5, 5]);
    await assert.rejects(small.encodeDocuments(DOCS, { signal: AbortSignal.abort() }), {
      name: 'AbortError',
    });
    const controller = new AbortController();
    let calls = 0;
    await assert.rejects(
      small.encodeDocuments(DOCS, {
        signal: controller.signal,
        onProgress: () => {
          calls++;
          controller.abort();
        },
      }),
      { name: 'AbortError' },
    );
    assert.equal(calls, 1);
    await small.close();
  });

  test('bad inputs: one-line errors naming the argument', async () => {
    await assert.rejects(
      encoder.encodeDocuments('text' as unknown as string[]),
      /Expected an array of strings for texts/,
    );
    await assert.rejects(
      encoder.encodeDocuments(['a', 3 as unknown as string]),
      /for texts\[1\] but received number/,
    );
    await assert.rejects(
      encoder.encodeDocuments(['short', 'word '.repeat(400)], { truncate: false }),
      /Expected at most 300 tokens \(the document length\) for texts\[1\] but received 403 tokens/,
    );
    await assert.rejects(
      encoder.encodeQueries(['word '.repeat(40)], { truncate: false }),
      /at most 32 tokens/,
    );
    const empty = await encoder.encodeDocuments([]);
    assert.equal(empty.count, 0);
    await assert.rejects(loadColbert(path.join(tmp, 'nope')), (e: Error) => {
      assert.ok(e instanceof InvalidArgumentError);
      assert.match(e.message, /never downloads a model unless allowRemote: true/);
      return true;
    });
    await assert.rejects(loadColbert(TINY, { dtype: 'int8' as 'float16' }), /for dtype/);
    await assert.rejects(loadColbert(TINY, { batchSize: 0 }), /for batchSize/);
    await assert.rejects(
      loadColbert(modelWithout('model.onnx')),
      /no ONNX encoder \(looked for model.onnx, onnx.model.onnx\)/,
    );
    await assert.rejects(loadColbert(modelWithout('tokenizer.json')), /no tokenizer.json/);
    await assert.rejects(loadColbert(modelWithout('1_Dense', 'modules.json')), (e: Error) => {
      assert.ok(e instanceof FormatError);
      assert.match(e.message, /no projection \(expected 1_Dense\/model.safetensors/);
      assert.ok(!e.message.includes('\n'));
      return true;
    });
    // without a projection, on purpose: the encoder's hidden states, normalized
    const raw = await loadColbert(modelWithout('1_Dense', 'modules.json'), { projection: false });
    const r = await raw.encodeDocuments(['hello']);
    assert.equal(r.dim, 32);
    await raw.close();
    const broken = modelWithout('model.onnx');
    fs.writeFileSync(path.join(broken, 'model.onnx'), 'not an onnx file');
    await assert.rejects(loadColbert(broken), /onnxruntime could not load it/);
    const closed = await loadColbert(TINY);
    await closed.close();
    await assert.rejects(closed.encodeQueries(['x']), /one closed by close\(\)/);
  });

  test('allowRemote fetches a model id from HF_ENDPOINT once, into the cache', async () => {
    const requests: string[] = [];
    const server = http.createServer((req, res) => {
      requests.push(req.url ?? '');
      const m = /^\/org\/tiny\/resolve\/main\/(.+)$/.exec(req.url ?? '');
      const file = m ? path.join(TINY, decodeURIComponent(m[1])) : '';
      if (!m || !fs.existsSync(file) || !fs.statSync(file).isFile()) {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(200).end(fs.readFileSync(file));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const saved = process.env.HF_ENDPOINT;
    process.env.HF_ENDPOINT = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      await assert.rejects(loadColbert('org/tiny'), /allowRemote/);
      assert.equal(requests.length, 0, 'nothing is fetched without allowRemote');
      const cacheDir = path.join(tmp, 'cache');
      const remote = await loadColbert('org/tiny', { allowRemote: true, cacheDir });
      const a = await remote.encodeDocuments(DOCS.slice(0, 2));
      const b = await encoder.encodeDocuments(DOCS.slice(0, 2));
      assert.deepEqual(a.data, b.data);
      await remote.close();
      const count = requests.length;
      (await loadColbert('org/tiny', { allowRemote: true, cacheDir })).close();
      assert.equal(requests.length, count, 'the second load reads the cache');
      await assert.rejects(loadColbert('org/../x', { allowRemote: true, cacheDir }), /Hugging Face id/);
    } finally {
      if (saved === undefined) delete process.env.HF_ENDPOINT;
      else process.env.HF_ENDPOINT = saved;
      server.close();
    }
  });

  test('text -> corpus -> search equals embeddings -> corpus -> search', async () => {
    const ids = DOCS.map((_, i) => `doc-${i}`);
    const docs = await encoder.encodeDocuments(DOCS);
    const queries = await encoder.encodeQueries(['Eiffel Tower Paris', 'museum', 'rivers of Europe']);
    // the same embeddings, as a user who encoded elsewhere would hand them over
    const offsets = new Float64Array(docs.count + 1);
    docs.lengths.forEach((l, i) => {
      offsets[i + 1] = offsets[i] + l;
    });
    const copy = raggedBatch(Float32Array.from(docs.data as Float32Array), offsets, { dim: 16 });
    const results = [];
    for (const [name, batch] of [
      ['text', docs],
      ['embeddings', copy],
    ] as const) {
      const dir = path.join(tmp, `corpus-${name}`);
      const w = CorpusWriter.create(dir, { dim: 16, dtype: 'float32', ids: true });
      w.add(batch, ids);
      w.commit();
      const corpus = openCorpus(dir);
      results.push(await corpus.search(queries, { topK: 3, backend: 'cpu' }));
      corpus.close();
    }
    assert.deepEqual(results[0], results[1]);
    assert.equal(results[0].length, 3);
    assert.ok(results[0].every((hits) => hits.length === 3 && hits[0].score > 0));
  });

  after(() => encoder?.close());
});
