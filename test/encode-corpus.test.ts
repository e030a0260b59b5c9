// buildCorpusFromTexts: texts -> corpus in chunks, the same corpus as encode + CorpusWriter, and the
// model recorded beside it (encoder.json).
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { loadColbert } from '../src/encode/colbert.js';
import { buildCorpusFromTexts, corpusEncoder } from '../src/encode/corpus-texts.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { TINY, tinySkip } from './tiny-model.js';

const skip = tinySkip;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-encode-corpus-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

const TEXTS = Array.from(
  { length: 23 },
  (_, i) => `document ${i}: ${'paris museum river tower '.repeat(1 + (i % 5))}`,
);

describe('buildCorpusFromTexts', { skip }, () => {
  test('chunks give the corpus of one encode, ids kept, the model recorded', async () => {
    const out = path.join(tmp, 'c1');
    const seen: number[] = [];
    const r = await buildCorpusFromTexts({
      out,
      model: TINY,
      texts: TEXTS,
      ids: TEXTS.map((_, i) => `d${i}`),
      dtype: 'float32',
      chunk: 5,
      onProgress: (done) => seen.push(done),
    });
    assert.equal(r.documents, 23);
    assert.equal(r.dim, 16);
    assert.equal(seen[seen.length - 1], 23);
    assert.ok(seen.every((v, i) => i === 0 || v >= seen[i - 1]));
    const rec = corpusEncoder(out)!;
    assert.equal(rec.model, path.resolve(TINY));
    assert.equal(rec.settings.documentLength, 300);
    const encoder = await loadColbert(TINY);
    const queries = await encoder.encodeQueries(['paris tower', 'river']);
    const all = await encoder.encodeDocuments(TEXTS);
    await encoder.close();
    const corpus = openCorpus(out);
    assert.equal(corpus.info.documents, 23);
    const hits = await corpus.search(queries, { topK: 4, backend: 'cpu' });
    const got = corpus.get(['d7', 'd22']);
    assert.deepEqual(Array.from(got.lengths), [all.lengths[7], all.lengths[22]]);
    corpus.close();
    assert.equal(hits[0].length, 4);
    assert.equal(corpusEncoder(tmp), undefined);
  });

  test('mismatched ids are refused before anything is written', async () => {
    const out = path.join(tmp, 'c2');
    await assert.rejects(
      buildCorpusFromTexts({ out, model: TINY, texts: ['a', 'b'], ids: ['x'] }),
      /Expected 2 ids/,
    );
    assert.equal(fs.existsSync(out), false);
  });
});
