// Reading a fast-plaid / PyLate PLAID index (src/plaid/fastplaid.ts) from the shared fixture
// ../shared/fixtures/fastplaid-paris20 (20 passages, 4-bit, 256 centroids, GTE-ModernColBERT; skipped
// when absent): the decoded vectors equal the fixture's decoded_embeddings bit for bit, and search
// ranks equal a float64 brute-force MaxSim over those vectors (queries drawn from passages' tokens
// with noise); damaged files are a FormatError naming the file.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { FormatError } from '../src/errors.js';
import { readNpy } from '../src/io/npy.js';
import { openFastPlaid } from '../src/plaid/fastplaid.js';
import { decodeDocuments } from '../src/plaid/merge.js';
import { rng, runSeed } from './helpers.js';

const FIXTURE = path.resolve(
  fileURLToPath(new URL('.', import.meta.url)),
  '../../../shared/fixtures/fastplaid-paris20',
);
const CANDIDATES = [FIXTURE, '/work/shared/fixtures/fastplaid-paris20'];
const root = CANDIDATES.find((p) => fs.existsSync(path.join(p, 'index', 'metadata.json')));
const skip = root ? false : `the fast-plaid fixture is absent (${CANDIDATES.join(', ')})`;

describe('fast-plaid index, read-only', { skip }, () => {
  test('decode = decoded_embeddings; search ranks = brute-force MaxSim of the decoded vectors', async () => {
    const ix = openFastPlaid(path.join(root!, 'index'));
    assert.equal(ix.count, 20);
    assert.equal(ix.bits, 4);
    assert.equal(ix.centroids, 256);
    const d = ix.dim;
    const want = readNpy(path.join(root!, 'decoded_embeddings.f32.npy'));
    const all = decodeDocuments(
      ix,
      Array.from({ length: 20 }, (_, i) => i),
    );
    assert.deepEqual(want.shape, [all.data.length / d, d]);
    assert.deepEqual(all.data, want.data);
    const rand = rng(runSeed ^ 0xfa57);
    for (let trial = 0; trial < 6; trial++) {
      // a query of 6 tokens of some passages, with noise
      const q = new Float32Array(6 * d);
      for (let i = 0; i < 6; i++) {
        const b = Math.floor(rand() * 20);
        const t = all.starts[b] + Math.floor(rand() * all.lengths[b]);
        for (let k = 0; k < d; k++) q[i * d + k] = all.data[t * d + k] + (rand() - 0.5) * 0.05;
      }
      const brute = Array.from({ length: 20 }, (_, b) => {
        let s = 0;
        for (let i = 0; i < 6; i++) {
          let best = Number.NEGATIVE_INFINITY;
          for (let j = 0; j < all.lengths[b]; j++) {
            let dot = 0;
            for (let k = 0; k < d; k++) dot += q[i * d + k] * all.data[(all.starts[b] + j) * d + k];
            best = Math.max(best, dot);
          }
          s += best;
        }
        return { index: b, score: s };
      }).sort((a, b) => b.score - a.score || a.index - b.index);
      const r = await ix.search(
        { kind: 'matrix', dtype: 'float32', data: q, length: 6, dim: d },
        { k: 10, nprobe: 256, candidates: 20 },
      );
      assert.equal(r.stats.scores, 'residual');
      r.hits.forEach((h, i) => {
        assert.ok(
          Math.abs(h.score - brute[i].score) <= 1e-4 * Math.max(1, Math.abs(brute[i].score)),
          `rank ${i}`,
        );
        // ties aside, the same documents in the same order
        if (i + 1 < brute.length && brute[i].score - brute[i + 1].score > 1e-4)
          assert.equal(h.index, brute[i].index);
      });
    }
  });

  test('damaged files: a FormatError naming the file', () => {
    const copy = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-fastplaid-'));
    try {
      fs.cpSync(path.join(root!, 'index'), copy, { recursive: true });
      for (const f of fs.readdirSync(copy)) fs.chmodSync(path.join(copy, f), 0o644);
      fs.writeFileSync(path.join(copy, 'doclens.0.json'), JSON.stringify(Array(20).fill(27)));
      assert.throws(
        () => openFastPlaid(copy),
        (e: unknown) => e instanceof FormatError && /doclens\.0\.json/.test(e.message),
      );
      fs.cpSync(path.join(root!, 'index', 'doclens.0.json'), path.join(copy, 'doclens.0.json'));
      fs.truncateSync(path.join(copy, '0.residuals.npy'), 1000);
      assert.throws(
        () => openFastPlaid(copy),
        (e: unknown) => e instanceof FormatError && /residuals/.test(e.message),
      );
      fs.cpSync(path.join(root!, 'index', '0.residuals.npy'), path.join(copy, '0.residuals.npy'));
      // cutoffs out of order: the first and last swapped in the data after the npy header
      const cutFile = path.join(copy, 'bucket_cutoffs.npy');
      const npyBytes = fs.readFileSync(cutFile);
      const dataAt = 10 + npyBytes.readUInt16LE(8);
      const count = Number(/'shape': \((\d+),?\)/.exec(npyBytes.toString('latin1', 10, dataAt))?.[1]);
      const item = (npyBytes.length - dataAt) / count;
      const first = Buffer.from(npyBytes.subarray(dataAt, dataAt + item));
      npyBytes.copy(npyBytes, dataAt, npyBytes.length - item);
      first.copy(npyBytes, npyBytes.length - item);
      fs.writeFileSync(cutFile, npyBytes);
      assert.throws(
        () => openFastPlaid(copy),
        (e: unknown) =>
          e instanceof FormatError && /bucket_cutoffs/.test(e.message) && /ascend/.test(e.message),
      );
      fs.cpSync(path.join(root!, 'index', 'bucket_cutoffs.npy'), cutFile);
      fs.writeFileSync(path.join(copy, 'metadata.json'), '{"nbits": 3, "num_chunks": 1}');
      assert.throws(
        () => openFastPlaid(copy),
        (e: unknown) => e instanceof FormatError && /nbits/.test(e.message),
      );
    } finally {
      fs.rmSync(copy, { recursive: true, force: true });
    }
  });
});
