// The host side of the GPU index path, without a GPU: the batch plan (rows per query, probe list
// size, queries per pass within the memory budget, the limits it refuses) and the codec backend
// option. The GPU stages themselves are tested in test/gpu/plaid-cuda.test.ts.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { InvalidArgumentError } from '../src/errors.js';
import { codecFor } from '../src/plaid/cuda-codec.js';
import { plaidCudaReason } from '../src/plaid/cuda-native.js';
import { bytesPerQuery, CUDA_MAX_NPROBE, cudaSearchPlan, type PlanInput } from '../src/plaid/cuda-plan.js';
import { cudaSearchBatch } from '../src/plaid/cuda-search.js';
import { buildIndex } from '../src/plaid/plaid.js';
import { raggedBatch } from '../src/tensor.js';
import { rng, runSeed } from './helpers.js';

const base: PlanInput = {
  centroids: 65536,
  dim: 128,
  docs: 1_000_000,
  queries: 1000,
  maxLength: 32,
  nprobe: 8,
  candidates: 1024,
  rescore: 128,
  threshold: Number.NEGATIVE_INFINITY,
  exact: true,
  precision: 'float16',
};

describe('GPU index plan (host)', () => {
  test('rows per query: the longest query rounded up to 32, at least 32', () => {
    const rand = rng(runSeed);
    for (let i = 0; i < 50; i++) {
      const maxLength = 1 + Math.floor(rand() * 256);
      const p = cudaSearchPlan({ ...base, maxLength });
      assert.equal(p.lq % 32, 0);
      assert.ok(p.lq >= maxLength && p.lq < maxLength + 32 && p.lq >= 32, `lq ${p.lq} for ${maxLength}`);
    }
    assert.equal(cudaSearchPlan({ ...base, maxLength: 0 }).lq, 32);
  });

  test('probe lists: the smallest of 4, 8, 16, 32 that holds nprobe', () => {
    for (let n = 1; n <= CUDA_MAX_NPROBE; n++) {
      const np = cudaSearchPlan({ ...base, nprobe: n }).np;
      assert.ok(np >= n && [4, 8, 16, 32].includes(np) && (np === 4 || np / 2 < n), `np ${np} for ${n}`);
    }
  });

  test('queries per pass fit the budget; at least 1, at most the queries and 65535', () => {
    for (const precision of ['float16', 'float32'] as const) {
      // 1,000 queries take several passes, two in flight: each gets half the budget
      const p = cudaSearchPlan({ ...base, precision, budget: 2 ** 30 });
      const per = bytesPerQuery(base.centroids, p.lq, p.np, base.docs, p.candidates, p.rescore, precision);
      // float16: a pass also holds the float16 centroids
      const fixed = precision === 'float16' ? base.centroids * base.dim * 2 : 0;
      const fits = (n: number) => n * 2 * per + 2 * fixed <= 2 ** 30;
      assert.ok(fits(p.batch) && !fits(p.batch + 1), `batch ${p.batch}`);
      // a call that fits one pass takes the whole budget
      const most = Math.floor((2 ** 30 - fixed) / per);
      const one = cudaSearchPlan({ ...base, precision, queries: most, budget: 2 ** 30 });
      assert.equal(one.batch, most);
    }
    assert.ok(
      bytesPerQuery(65536, 32, 8, 1e6, 1024, 128, 'float16') < bytesPerQuery(65536, 32, 8, 1e6, 1024, 128),
    );
    assert.equal(cudaSearchPlan({ ...base, budget: 1 }).batch, 1);
    assert.equal(cudaSearchPlan({ ...base, queries: 3, budget: 2 ** 40 }).batch, 3);
    assert.equal(
      cudaSearchPlan({ ...base, queries: 1e6, centroids: 8, docs: 10, budget: 2 ** 50 }).batch,
      65535,
    );
  });

  test('rescore is at most candidates; candidates at least 1', () => {
    assert.equal(cudaSearchPlan({ ...base, candidates: 50, rescore: 200 }).rescore, 50);
    assert.equal(cudaSearchPlan({ ...base, candidates: 0 }).candidates, 1);
  });

  test('refused: nprobe over 32 or K, K over 2^19, queries over 256 tokens, shared memory over the limit', () => {
    const refuse = (p: Partial<PlanInput>, re: RegExp) =>
      assert.throws(
        () => cudaSearchPlan({ ...base, ...p }),
        (e: unknown) => e instanceof InvalidArgumentError && re.test(String(e)),
      );
    refuse({ nprobe: 33 }, /options.nprobe/);
    refuse({ nprobe: 5, centroids: 4 }, /options.nprobe/);
    refuse({ maxLength: 257 }, /at most 256 tokens/);
    refuse({ centroids: 32 * 8 * 2048 + 1 }, /at most 524288 centroids on the GPU.*524289 centroids/);
    assert.equal(cudaSearchPlan({ ...base, centroids: 32 * 8 * 2048 }).lq, 32);
    refuse({ dim: 1024, maxLength: 64, precision: 'float32' }, /shared memory/);
    // float16 products need the exact re-score and a dim the tensor-core fragments tile
    refuse({ exact: false }, /options.precision.*no source tokens/);
    refuse({ dim: 96 + 8 }, /options.precision.*dim 104/);
    refuse({ dim: 144 }, /options.precision/);
    assert.equal(cudaSearchPlan({ ...base, exact: false, precision: 'float32' }).precision, 'float32');
    // an index with no tokens whose caller re-scores exactly (a corpus's segment): float16 applies
    const segment = cudaSearchPlan({ ...base, exact: false, rescored: true });
    assert.equal(segment.precision, 'float16');
    assert.equal(segment.exact, true, 'the engine re-scores on the device only where it holds tokens');
    assert.equal(cudaSearchPlan({ ...base, dim: 48 }).precision, 'float16');
  });

  test("an explicit 'float16' with centroids outside float16's range is refused before the device, naming the magnitude", async () => {
    // (queries outside it are refused by the engine a pass at a time: test/gpu/plaid-cuda.test.ts)
    const rand = rng(runSeed);
    const dim = 16;
    const data = Float32Array.from({ length: 60 * dim }, () => rand() - 0.5);
    const queries = raggedBatch(data.slice(0, 5 * dim), [0, 5], { dim });
    for (const f of [1e5, 1e-4]) {
      const index = await buildIndex(
        raggedBatch(
          data.map((x) => x * f),
          [0, 20, 41, 60],
          { dim },
        ),
        { centroids: 4, seed: 1 },
      );
      await assert.rejects(
        cudaSearchBatch(index, queries, { k: 2, precision: 'float16' }),
        (e: unknown) =>
          e instanceof InvalidArgumentError &&
          /options\.precision/.test(String(e)) &&
          /centroids of largest magnitude/.test(String(e)),
        `centroids scaled by ${f}`,
      );
    }
  });

  test("codec backend: 'cpu' and unset run on the CPU, a bad name is refused, 'auto' falls back", async () => {
    assert.equal(codecFor(undefined), undefined);
    assert.equal(codecFor('cpu'), undefined);
    assert.throws(() => codecFor('gpu'), /options.backend/);
    assert.throws(() => codecFor('cuda', 2048), /docs.dim/);
    if (plaidCudaReason() !== undefined) {
      assert.equal(codecFor('auto'), undefined);
      assert.throws(() => codecFor('cuda'), /GPU index path is unavailable/);
      // a build with backend 'auto' here is the CPU build, said so in its stats
      const data = Float32Array.from({ length: 40 * 8 }, (_, i) => Math.sin(i * 0.7));
      const ix = await buildIndex(raggedBatch(data, [0, 10, 25, 40], { dim: 8 }), {
        centroids: 4,
        backend: 'auto',
      });
      assert.equal(ix.buildStats.backend, 'cpu');
    }
  });
});
