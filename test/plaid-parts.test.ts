// PlaidIndex.parts() / fromParts(): the serialization seam a store writes generically. A round trip

// searches the same, the parts are views of the index's own arrays, and damaged parts are errors that
// name the field.
import assert from 'node:assert/strict';
import { constants as bufferConstants } from 'node:buffer';
import { test } from 'node:test';
import { FormatError, InvalidArgumentError } from '../src/errors.js';
import { partTypeOf } from '../src/plaid/parts.js';
import { buildIndex, PlaidIndex } from '../src/plaid/plaid.js';
import { syntheticCorpus, syntheticQueries } from '../src/plaid/synthetic.js';
import { raggedBatch, tokenMatrix } from '../src/tensor.js';
import { runSeed } from './helpers.js';

const seed = runSeed % 100000;

async function fixture() {
  const c = syntheticCorpus({ docs: 120, length: [1, 20], dim: 16, topics: 8, seed });
  const docs = raggedBatch(c.data, c.offsets, { dim: 16 });
  const index = await buildIndex(docs, { centroids: 32, bits: 4, seed });
  return { c, docs, index };
}

test('parts round trip: fromParts(parts()) answers every query the same, with and without tokens', async () => {
  const { c, docs, index } = await fixture();
  const parts = index.parts();
  assert.equal(parts.header.docs, 120);
  assert.equal(parts.header.k, 32);
  // JSON-able header, typed arrays of known element types
  assert.deepEqual(JSON.parse(JSON.stringify(parts.header)), parts.header);
  for (const a of Object.values(parts.arrays)) partTypeOf(a);
  // a copy through plain buffers, as a store would read it back
  const copy = {
    header: JSON.parse(JSON.stringify(parts.header)),
    arrays: Object.fromEntries(Object.entries(parts.arrays).map(([k, a]) => [k, a.slice()])),
  };
  const exact = PlaidIndex.fromParts(copy, docs);
  const residual = PlaidIndex.fromParts(copy);
  const residualOriginal = await buildIndex(docs, { centroids: 32, bits: 4, seed, keepTokens: false });
  const qs = syntheticQueries(c, 5, 6, 16, seed + 1);
  for (let i = 0; i < 5; i++) {
    const q = tokenMatrix(qs.data.subarray(i * 96, (i + 1) * 96), 6, 16);
    const opts = { k: 5, nprobe: 4, candidates: 40 };
    assert.deepEqual((await exact.search(q, opts)).hits, (await index.search(q, opts)).hits);
    const r = await residual.search(q, opts);
    assert.equal(r.stats.scores, 'residual');
    assert.deepEqual(r.hits, (await residualOriginal.search(q, opts)).hits);
  }
});

test('fromParts refuses damaged parts, naming the field', async () => {
  const { docs, index } = await fixture();
  const parts = index.parts();
  const withHeader = (h: object) => ({ header: { ...parts.header, ...h }, arrays: parts.arrays }) as never;
  assert.throws(() => PlaidIndex.fromParts(withHeader({ format: 'x' })), FormatError);
  assert.throws(() => PlaidIndex.fromParts(withHeader({ version: 2 })), /version/);
  assert.throws(() => PlaidIndex.fromParts(withHeader({ bits: 3 })), /bits/);
  assert.throws(() => PlaidIndex.fromParts(withHeader({ k: -1 })), /field k/);
  const { cids: _, ...noCids } = parts.arrays;
  assert.throws(() => PlaidIndex.fromParts({ header: parts.header, arrays: noCids }), /cids is missing/);
  const badCids = { ...parts.arrays, cids: new Float32Array(parts.arrays.cids.length) };
  assert.throws(() => PlaidIndex.fromParts({ header: parts.header, arrays: badCids }), /cids/);
  const shortCentroids = { ...parts.arrays, centroids: parts.arrays.centroids.subarray(1) };
  assert.throws(() => PlaidIndex.fromParts({ header: parts.header, arrays: shortCentroids }), /centroids/);
  // an out-of-range centroid id: the native check refuses it instead of reading out of bounds
  const wildCids = { ...parts.arrays, cids: (parts.arrays.cids as Int32Array).slice() };
  wildCids.cids[0] = 1 << 20;
  assert.throws(() => PlaidIndex.fromParts({ header: parts.header, arrays: wildCids }), /cids/);
  // cutoffs out of order or not finite: the encoders' count of cutoffs below would not be the bucket
  for (const v of [Number.NaN, -1e30]) {
    const cut = { ...parts.arrays, cutoffs: (parts.arrays.cutoffs as Float32Array).slice() };
    cut.cutoffs[1] = v;
    assert.throws(
      () => PlaidIndex.fromParts({ header: parts.header, arrays: cut }),
      /cutoffs must ascend.*element 1/,
    );
  }
  const fewer = raggedBatch(docs.data.subarray(0, 32), [0, 1, 2], { dim: 16 });
  assert.throws(() => PlaidIndex.fromParts(parts, fewer), InvalidArgumentError);
});

// Node 22 makes typed arrays of up to 2^53 - 1 bytes: there the same build would run (for minutes).
const bigArrays = bufferConstants.MAX_LENGTH > 2 ** 32;
test('an index whose codes outgrow one typed array is refused up front, naming docs (no RangeError)', {
  skip: bigArrays && `this Node's typed arrays reach ${bufferConstants.MAX_LENGTH} bytes`,
}, async () => {
  // 129 references to one 65,536-token part: 8.4M tokens x d 1024 at 4 bits = 4.3 GB of codes
  const d = 1024;
  const n = 65536;
  const part = raggedBatch(new Uint16Array(n * d), [0, n], { dim: d, dtype: 'float16' });
  const t = performance.now();
  await assert.rejects(
    buildIndex(Array(129).fill(part), { bits: 4 }),
    (e: unknown) =>
      e instanceof InvalidArgumentError &&
      /docs/.test(String(e)) &&
      /bytes of codes in one index/.test(String(e)),
  );
  assert.ok(performance.now() - t < 5000, 'refused before any work');
});
