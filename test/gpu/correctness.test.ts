// Every CUDA kernel variant against the float64 reference, on fresh random inputs (seed printed):
// dense and ragged documents, zero-length documents and queries, d in {1, 8, 64, 96, 100, 128, 256,
// 1024}, Lq in {1, 32, 300, 1024}, many documents (persistent grids loop), many queries (several
// passes), and bitwise-identical results on repeat. Without a GPU every test skips with the reason.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { DeviceCorpus } from '../../src/backends/cuda.js';
import { referenceMaxsim } from '../../src/backends/reference.js';
import { quantize } from '../../src/ops/quantize.js';
import type { FloatDType, TokenBatch } from '../../src/tensor.js';
import { randomDense, randomRagged, rng, runSeed } from '../helpers.js';
import { bitsEqual, boundFactor, checkScores, gpu, signRunInputs, skip, variantsFor } from './helpers.js';

const dtypes: FloatDType[] = ['float32', 'float16', 'bfloat16'];
const dims = [1, 8, 64, 96, 100, 128, 256, 1024];
const queryLengths = [1, 32, 300, 1024];
// Lengths that cross every tile size in use (16, 32, 64, 128 tokens), plus empty documents.
const docLengths = [0, 1, 7, 64, 129, 300, 33, 0, 16];

function queriesFor(lq: number, d: number, dtype: FloatDType, rand: () => number): TokenBatch {
  // a full-length query, an empty one (scores 0) and a shorter one
  return randomRagged([lq, 0, Math.max(1, Math.ceil(lq / 3))], d, dtype, rand);
}

function docsFor(layout: 'dense' | 'ragged', d: number, dtype: FloatDType, rand: () => number): TokenBatch {
  if (layout === 'ragged') return randomRagged(docLengths, d, dtype, rand);
  const cap = Math.max(...docLengths);
  return randomDense(docLengths.length, cap, d, dtype, rand, docLengths);
}

async function scoreWith(corpus: DeviceCorpus, queries: TokenBatch, variant: string): Promise<Float32Array> {
  return (await corpus.score(queries, { variant })).data;
}

describe(`CUDA MaxSim vs float64 reference (seed ${runSeed})`, { skip }, () => {
  for (const dtype of dtypes) {
    for (const d of dims) {
      test(`${dtype} d=${d}: every variant, dense and ragged, Lq in {${queryLengths.join(', ')}}`, async () => {
        const dev = await gpu();
        const variants = variantsFor(dev, dtype, d);
        assert.ok(variants.length > 0, `no variant runs ${dtype} d=${d}: the SIMT fallback must`);
        const rand = rng(runSeed ^ (d * 7919 + dtypes.indexOf(dtype)));
        for (const layout of ['dense', 'ragged'] as const) {
          const docs = docsFor(layout, d, dtype, rand);
          const corpus = await dev.upload(docs);
          try {
            for (const lq of queryLengths) {
              const queries = queriesFor(lq, d, dtype, rand);
              const ref = referenceMaxsim(queries, docs);
              for (const v of variants) {
                const got = await scoreWith(corpus, queries, v.name);
                checkScores(got, queries, docs, boundFactor(v), `${v.name} ${layout} d=${d} Lq=${lq}`, ref);
              }
            }
          } finally {
            corpus.dispose();
          }
        }
      });
    }

    test(`${dtype}: many documents (grids loop over them) and many queries (several passes)`, async () => {
      const dev = await gpu();
      const d = 128;
      const rand = rng(runSeed + 17 + dtypes.indexOf(dtype));
      // more documents than the largest persistent grid has groups (132 SMs x 4 CTAs x 4 groups)
      const lengths = Array.from({ length: 4001 }, (_, i) =>
        i % 97 === 5 ? 0 : 1 + Math.floor(rand() * 10),
      );
      const docs = randomRagged(lengths, d, dtype, rand);
      const corpus = await dev.upload(docs);
      try {
        const few = randomRagged([32, 5, 31], d, dtype, rand);
        const many = randomRagged(
          Array.from({ length: 40 }, () => 1 + Math.floor(rand() * 16)),
          d,
          dtype,
          rand,
        );
        for (const queries of [few, many]) {
          const ref = referenceMaxsim(queries, docs);
          for (const v of variantsFor(dev, dtype, d)) {
            checkScores(
              await scoreWith(corpus, queries, v.name),
              queries,
              docs,
              boundFactor(v),
              `${v.name} B=${docs.count} Nq=${queries.count}`,
              ref,
            );
          }
          // and the dispatcher's own choice
          const auto = await corpus.score(queries);
          checkScores(auto.data, queries, docs, 4, `auto B=${docs.count} Nq=${queries.count}`, ref);
        }
      } finally {
        corpus.dispose();
      }
    });

    test(`${dtype}: wgmma variants with several documents per CTA, long ones among short ones`, async (t) => {
      const dev = await gpu();
      const d = 64;
      const wgmma = variantsFor(dev, dtype, d).filter((v) => v.family === 'wgmma');
      if (wgmma.length === 0) return t.skip('no wgmma variant runs on this GPU');
      const rand = rng(runSeed + 23 + dtypes.indexOf(dtype));
      // ~2-3 documents per CTA of a 132-SM grid. The ping-pong variants give alternate documents to
      // their two consumer warpgroups; documents longer than their 12-tile ring (> 768 tokens) make one
      // group pass over more tiles than the ring holds before its next document starts.
      const lengths = Array.from(
        { length: 300 },
        (_, i) =>
          [700 + Math.floor(rand() * 1300), 1 + Math.floor(rand() * 70), i % 8 === 2 ? 0 : 300, 129][i % 4],
      );
      const docs = randomRagged(lengths, d, dtype, rand);
      const corpus = await dev.upload(docs);
      try {
        // 22 slices of 16 query rows: several passes for every variant (3 for the 128-row ones)
        const queries = randomRagged([128, 7, 200], d, dtype, rand);
        const ref = referenceMaxsim(queries, docs);
        for (const v of wgmma)
          checkScores(
            await scoreWith(corpus, queries, v.name),
            queries,
            docs,
            boundFactor(v),
            `${v.name} long and short documents`,
            ref,
          );
      } finally {
        corpus.dispose();
      }
    });

    test(`${dtype}: wgmma documents ending in batches: many documents per CTA around the tile width, empty ones between, queries inside one pass and spanning passes`, async (t) => {
      const dev = await gpu();
      const d = 128;
      const wgmma = variantsFor(dev, dtype, d).filter((v) => v.family === 'wgmma');
      if (wgmma.length === 0) return t.skip('no wgmma variant runs on this GPU');
      const rand = rng(runSeed + 37 + dtypes.indexOf(dtype));
      // The wgmma consumers combine their documents' sums in batches (maxsim_wgmma.cuh): lengths
      // around the 64-token tile (1 or 2 tiles, partial or full), empties between, and a document
      // count that leaves CTAs with work units ending inside a batch.
      const pick = [0, 1, 17, 63, 64, 65, 127, 128, 129, 191, 192, 250, 0];
      const lengths = Array.from({ length: 301 }, () => pick[Math.floor(rand() * pick.length)]);
      const docs = randomRagged(lengths, d, dtype, rand);
      const corpus = await dev.upload(docs);
      try {
        // 21 queries of <= 32 tokens: several passes, every query inside one (pass-inner units);
        // then long queries whose slices span passes; then one query of one token
        const inner = randomRagged(
          Array.from({ length: 21 }, (_, i) => (i % 5 === 0 ? 32 : 1 + Math.floor(rand() * 32))),
          d,
          dtype,
          rand,
        );
        const spanning = randomRagged([300, 5, 0, 140], d, dtype, rand);
        const one = randomRagged([1], d, dtype, rand);
        for (const [name, queries] of [
          ['inner', inner],
          ['spanning', spanning],
          ['one', one],
        ] as const) {
          const ref = referenceMaxsim(queries, docs);
          for (const v of wgmma) {
            const a = await scoreWith(corpus, queries, v.name);
            checkScores(a, queries, docs, boundFactor(v), `${v.name} many documents, ${name} queries`, ref);
            assert.ok(
              bitsEqual(a, await scoreWith(corpus, queries, v.name)),
              `${v.name} ${name}: two runs differ`,
            );
          }
        }
      } finally {
        corpus.dispose();
      }
    });

    test(`${dtype}: bitwise identical results on repeat, every variant`, async () => {
      const dev = await gpu();
      const d = 64;
      const rand = rng(runSeed + 29 + dtypes.indexOf(dtype));
      const docs = randomRagged(
        Array.from({ length: 500 }, () => Math.floor(rand() * 200)),
        d,
        dtype,
        rand,
      );
      const queries = randomRagged([32, 300, 7, 1], d, dtype, rand);
      const corpus = await dev.upload(docs);
      try {
        for (const v of variantsFor(dev, dtype, d)) {
          const a = await scoreWith(corpus, queries, v.name);
          const b = await scoreWith(corpus, queries, v.name);
          assert.ok(bitsEqual(a, b), `${v.name}: two runs differ`);
        }
      } finally {
        corpus.dispose();
      }
    });

    test(`${dtype}: rows whose best match is negative, zero or positive, tile by tile, every variant`, async () => {
      const dev = await gpu();
      for (const d of [128, 96]) {
        const rand = rng(runSeed + 31 + d + dtypes.indexOf(dtype));
        const { queries, docs } = signRunInputs(d, dtype, rand);
        const ref = referenceMaxsim(queries, docs);
        // query 1 (positive tokens) against document 0 (negative tokens): every row's best match < 0
        assert.ok(ref[docs.count] < 0, `the inputs must hold negative scores, got ${ref[docs.count]}`);
        const corpus = await dev.upload(docs);
        try {
          for (const v of variantsFor(dev, dtype, d)) {
            const got = await scoreWith(corpus, queries, v.name);
            checkScores(got, queries, docs, boundFactor(v), `${v.name} sign runs d=${d}`, ref);
          }
        } finally {
          corpus.dispose();
        }
      }
    });
  }

  test('one query (TokenMatrix) gives [B] scores; fp32 queries meet an fp16 corpus', async () => {
    const dev = await gpu();
    const rand = rng(runSeed + 41);
    const docs = randomRagged([5, 0, 12, 40], 64, 'float16', rand);
    const corpus = await dev.upload(docs);
    try {
      const q32 = randomRagged([9], 64, 'float32', rand);
      const matrix = { kind: 'matrix' as const, dtype: q32.dtype, data: q32.data, length: 9, dim: 64 };
      const got = await corpus.score(matrix);
      assert.equal(got.length, 4);
      // the reference sees the queries as the GPU does: rounded to fp16
      const { encodeFloats } = await import('../../src/floats.js');
      const q16 = {
        ...q32,
        dtype: 'float16' as const,
        data: encodeFloats(q32.data as Float32Array, 'float16'),
      };
      checkScores(got, q16, docs, 4, 'fp32 query on fp16 corpus');
      assert.equal(got[1], Number.NEGATIVE_INFINITY);
    } finally {
      corpus.dispose();
    }
  });

  test('host queries are converted on the GPU (float32 for float16 / bfloat16 corpora, float for int8): the scores and hits of host-converted ones, bitwise', async () => {
    const dev = await gpu();
    const rand = rng(runSeed + 44);
    const { encodeFloats } = await import('../../src/floats.js');
    for (const dtype of ['float16', 'bfloat16'] as const) {
      const corpus = await dev.upload(randomRagged([5, 0, 12, 40, 300, 7], 64, dtype, rand));
      try {
        const q32 = randomRagged([9, 1, 32, 0, 5], 64, 'float32', rand);
        // rounding ties of both formats, a float16 subnormal, -0 and a large value (float16's largest
        // finite; past float16's range for bfloat16)
        (q32.data as Float32Array).set([
          1 + 2 ** -11,
          1 + 3 * 2 ** -11,
          1 + 2 ** -8,
          1 + 3 * 2 ** -8,
          1e-7,
          -0,
          dtype === 'float16' ? 65504 : 7e4,
        ]);
        const host = { ...q32, dtype, data: encodeFloats(q32.data as Float32Array, dtype) };
        if (dtype === 'float16') {
          // a value float16 would turn into Infinity is refused on either path, naming it
          const over = { ...q32, data: Float32Array.from(q32.data as Float32Array) };
          over.data[6] = 7e4;
          await assert.rejects(corpus.score(over), /float16 range.*70000/);
          await assert.rejects(corpus.topK(over, 3), /float16 range.*70000/);
          assert.throws(() => encodeFloats(over.data, dtype), /float16 range.*70000/);
        } else {
          // the job's worker refuses it before any copy; the error is encodeFloats', naming the value
          const over = { ...q32, data: Float32Array.from(q32.data as Float32Array) };
          over.data[64 * 9 + 5] = -3.4e38;
          await assert.rejects(corpus.score(over), /bfloat16 range.*at token 9, component 5/);
          await assert.rejects(corpus.topK(over, 3), /bfloat16 range.*at token 9, component 5/);
        }
        assert.deepStrictEqual(await corpus.score(q32), await corpus.score(host), `${dtype} score`);
        assert.deepStrictEqual(await corpus.topK(q32, 7), await corpus.topK(host, 7), `${dtype} topK`);
        // against the int8 copy, float queries of either dtype are quantized on the GPU: quantize()'s bytes
        const i8 = await corpus.quantize('int8');
        const finite = { ...q32, data: Float32Array.from(q32.data as Float32Array) };
        finite.data[6] = 0.75; // a moderate value, so the int8 scales stay those of the random tokens
        const finite16 = { ...finite, dtype, data: encodeFloats(finite.data, dtype) };
        try {
          // a batch past the worker's quantize (65,536 values: the GPU quantizes it) beside the small ones
          const big = randomRagged(
            Array.from({ length: 40 }, (_, i) => 20 + (i % 13)),
            64,
            'float32',
            rand,
          );
          for (const q of [finite, finite16, big]) {
            const hostInt8 = quantize(q, 'int8');
            const context = `${q.dtype} queries, int8 corpus`;
            assert.deepStrictEqual(await i8.score(q), await i8.score(hostInt8), `${context} score`);
            assert.deepStrictEqual(await i8.topK(q, 7), await i8.topK(hostInt8, 7), `${context} topK`);
          }
        } finally {
          i8.dispose();
        }
      } finally {
        corpus.dispose();
      }
    }
  });

  test('topK: descending, ties to the lower index, k larger than B', async () => {
    const dev = await gpu();
    const rand = rng(runSeed + 43);
    const base = randomRagged([10, 20, 0, 10], 32, 'float32', rand);
    // document 3 repeats document 0, so they tie
    const data = new Float32Array(base.data as Float32Array);
    data.set((base.data as Float32Array).subarray(0, 10 * 32), 30 * 32);
    const docs = { ...base, data };
    const corpus = await dev.upload(docs);
    try {
      const queries = randomRagged([8, 3], 32, 'float32', rand);
      const hits = await corpus.topK(queries, 10);
      const scores = (await corpus.score(queries)).data;
      for (let q = 0; q < 2; q++) {
        assert.equal(hits[q].length, 4);
        assert.deepEqual(
          hits[q].map((h) => h.score),
          Array.from(scores.subarray(q * 4, q * 4 + 4)).sort((a, b) => b - a),
        );
        const i0 = hits[q].findIndex((h) => h.index === 0);
        const i3 = hits[q].findIndex((h) => h.index === 3);
        assert.ok(i0 < i3, 'tie broken by the lower index');
        assert.equal(hits[q][3].index, 2, 'the empty document (-Infinity) ranks last');
      }
    } finally {
      corpus.dispose();
    }
  });

  test('small score matrices written by the kernel into pinned host memory: the bits of the device-memory path', async () => {
    const dev = await gpu();
    const rand = rng(runSeed + 45);
    const { encodeFloats } = await import('../../src/floats.js');
    const { setMappedScores } = await import('../../src/subpaths/internal.js');
    // 1,000 documents of 0..40 tokens (some empty), d = 128
    const lengths = Array.from({ length: 1000 }, (_, i) => (i * 7919) % 41);
    const f32 = randomRagged(lengths, 128, 'float32', rand);
    for (const dtype of ['float32', 'float16', 'bfloat16'] as const) {
      const docs =
        dtype === 'float32' ? f32 : { ...f32, dtype, data: encodeFloats(f32.data as Float32Array, dtype) };
      const corpus = await dev.upload(docs);
      const i8 = dtype === 'float16' ? await corpus.quantize('int8') : undefined;
      try {
        // one or two short queries take the pinned path; 80 query rows, or 5 x 1,000 scores, do not
        for (const ql of [[32], [1], [32, 5], [0, 3], [80], [32, 32, 32, 32, 32]]) {
          const q = randomRagged(ql, 128, 'float32', rand);
          for (const c of i8 ? [corpus, i8] : [corpus]) {
            const run = async () => [await c.score(q), await c.topK(q, 10), await c.topK(q, 1000)];
            const mapped = await run();
            setMappedScores(false);
            let device: unknown;
            try {
              device = await run();
            } finally {
              setMappedScores(true);
            }
            assert.deepStrictEqual(mapped, device, `${c.dtype} corpus, queries of ${ql.join(', ')} tokens`);
          }
        }
      } finally {
        i8?.dispose();
        corpus.dispose();
      }
    }
  });
});
