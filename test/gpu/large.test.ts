// More than 2^31 elements on the GPU: fp16 documents of B x Ld x d > 2^31 elements (4.3 GB), built
// on the device in chunks (alloc + append) from a pool of random tokens, scored with the dispatcher's
// variant, and a sample of documents (including the last ones, past element 2^31) checked against the
// float64 reference. Without a GPU the test skips with the reason.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { referenceMaxsim } from '../../src/backends/reference.js';
import { encodeFloats } from '../../src/floats.js';
import type { TokenBatch } from '../../src/tensor.js';
import { randomFloats, randomRagged, rng, runSeed } from '../helpers.js';
import { checkScores, gpu, skip } from './helpers.js';

const d = 128;
const ld = 256;
// 65700 documents, 65 of them empty: 16,802,560 tokens x 128 = 2,150,727,680 elements > 2^31
const B = 65_700;
const chunk = 4_100;
const poolTokens = 1 << 17;

function ragged(data: Uint16Array, starts: number[], lengths: number[]): TokenBatch {
  return {
    kind: 'batch',
    layout: 'ragged',
    dtype: 'float16',
    data,
    dim: d,
    count: starts.length,
    maxLength: Math.max(0, ...lengths),
    starts: Float64Array.from(starts),
    lengths: Int32Array.from(lengths),
  };
}

describe(`CUDA MaxSim past 2^31 elements (seed ${runSeed})`, { skip }, () => {
  test(`B=${B} Ld=${ld} d=${d} fp16: sampled documents match the reference`, async () => {
    const dev = await gpu();
    const free = (await dev.memory()).free;
    const need = B * ld * d * 2;
    if (free < need * 1.2) {
      assert.fail(`needs ${need} free bytes on the GPU, ${free} are free`);
    }
    const rand = rng(runSeed + 101);
    const pool = encodeFloats(randomFloats(poolTokens * d, rand), 'float16') as Uint16Array;
    // Document b is the window of `ld` pool tokens at startOf[b]; every 1000th document is empty.
    const startOf = Array.from({ length: B }, () => Math.floor(rand() * (poolTokens - ld)));
    const lengthOf = (b: number) => (b % 1000 === 999 ? 0 : ld);
    const corpus = await dev.alloc({ dtype: 'float16', dim: d, tokens: B * ld, items: B });
    try {
      for (let b0 = 0; b0 < B; b0 += chunk) {
        const idx = Array.from({ length: Math.min(chunk, B - b0) }, (_, i) => b0 + i);
        await corpus.append(
          ragged(
            pool,
            idx.map((b) => startOf[b]),
            idx.map(lengthOf),
          ),
        );
      }
      assert.equal(corpus.count, B);
      assert.ok(corpus.tokens * d > 2 ** 31, `corpus holds ${corpus.tokens * d} elements`);

      const queries = randomRagged([32, 5], d, 'float16', rand);
      const scores = (await corpus.score(queries)).data;
      assert.equal(scores.length, 2 * B);

      // The last 40 documents (element offsets past 2^31), the first 8, 40 random ones, and empty ones.
      const sample = new Set<number>([
        ...Array.from({ length: 40 }, (_, i) => B - 1 - i),
        ...Array.from({ length: 8 }, (_, i) => i),
        999,
        64_999,
      ]);
      while (sample.size < 90) sample.add(Math.floor(rand() * B));
      const picked = [...sample].sort((a, b) => a - b);
      const docs = ragged(
        pool,
        picked.map((b) => startOf[b]),
        picked.map(lengthOf),
      );
      const got = new Float32Array(2 * picked.length);
      picked.forEach((b, i) => {
        got[i] = scores[b];
        got[picked.length + i] = scores[B + b];
      });
      checkScores(got, queries, docs, 4, `sampled documents of ${B}`, referenceMaxsim(queries, docs));
    } finally {
      corpus.dispose();
    }
  });
});
