// CUDA int8 x int8 MaxSim (native/cuda/kernels/maxsim_int8.cu), fp8 e4m3 x e4m3 (maxsim_fp8.cu) and
// the device quantizers, on fresh random inputs (seed printed). Every variant, forced by name, against
// the float64 reference computed on the DEQUANTIZED values. int8: the integer products are exact, so
// the only error is the fp32 rounding of (acc * sd) * sq and of the sum, inside scoreErrorBounds with
// no extra factor. fp8: products exact, the tensor core's accumulation bounded by fp8Bounds. Token
// magnitudes vary over three decades so that a misplaced or missing scale cannot pass. Without a GPU
// every test skips with the reason.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { decodeBatch64, referenceMaxsim } from '../../src/backends/reference.js';
import { e4m3ToFloat, type Fp8Tokens, referenceMaxsimFp8 } from '../../src/backends/reference-fp8.js';
import { encodeFloats } from '../../src/floats.js';
import { cpuMaxsimInt8, quantize } from '../../src/ops/quantize.js';
import { denseBatch, type FloatDType, raggedBatch, type TokenBatch } from '../../src/tensor.js';
import { assertScoresClose, rng, runSeed, scoreErrorBounds } from '../helpers.js';
import { bitsEqual, checkScores, gpu, signRunInputs, skip, variantsFor } from './helpers.js';

const fastDims = [16, 32, 48, 64, 96, 128, 256];
const fallbackDims = [8, 100];
const queryLengths = [1, 32, 300, 1024];
// Lengths that cross every int8 tile size (16, 32, 64, 128 tokens), plus empty documents.
const docLengths = [0, 1, 7, 64, 129, 300, 33, 0, 16, 128];

/** Float tokens of random direction and a random norm in [0.01, 10]; every 13th token is all zeros. */
function scaledFloats(tokens: number, d: number, rand: () => number): Float32Array {
  const a = new Float32Array(tokens * d);
  for (let t = 0; t < tokens; t++) {
    if (t % 13 === 12) continue;
    const m = 10 ** (rand() * 3 - 2);
    for (let k = 0; k < d; k++) a[t * d + k] = (rand() * 2 - 1) * m;
  }
  return a;
}

function floatRagged(lengths: number[], d: number, dtype: FloatDType, rand: () => number): TokenBatch {
  const offsets = [0];
  for (const l of lengths) offsets.push(offsets[offsets.length - 1] + l);
  const total = offsets[offsets.length - 1];
  return raggedBatch(encodeFloats(scaledFloats(total, d, rand), dtype), offsets, { dim: d, dtype });
}

function floatDense(lengths: number[], d: number, dtype: FloatDType, rand: () => number): TokenBatch {
  const cap = Math.max(...lengths);
  return denseBatch(encodeFloats(scaledFloats(lengths.length * cap, d, rand), dtype), {
    count: lengths.length,
    length: cap,
    dim: d,
    dtype,
    lengths,
  });
}

function int8Ragged(lengths: number[], d: number, rand: () => number): TokenBatch {
  return quantize(floatRagged(lengths, d, 'float32', rand), 'int8');
}

function queriesFor(lq: number, d: number, rand: () => number): TokenBatch {
  // a full-length query, an empty one (scores 0) and a shorter one
  return int8Ragged([lq, 0, Math.max(1, Math.ceil(lq / 3))], d, rand);
}

function docsFor(layout: 'dense' | 'ragged', d: number, rand: () => number): TokenBatch {
  return quantize(
    layout === 'ragged'
      ? floatRagged(docLengths, d, 'float32', rand)
      : floatDense(docLengths, d, 'float32', rand),
    'int8',
  );
}

function bytesEqual(a: ArrayBufferView, b: ArrayBufferView): boolean {
  if (a.byteLength !== b.byteLength) return false;
  const x = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  const y = new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
  return true;
}

/** The real tokens of a batch packed in item order (what the device holds), with their scales. */
function packed(batch: TokenBatch): { data: Int8Array; scales: Float32Array; lengths: Int32Array } {
  const d = batch.dim;
  let total = 0;
  for (let i = 0; i < batch.count; i++) total += batch.lengths[i];
  const data = new Int8Array(total * d);
  const scales = new Float32Array(total);
  let o = 0;
  for (let i = 0; i < batch.count; i++) {
    const s = batch.starts[i];
    const l = batch.lengths[i];
    data.set((batch.data as Int8Array).subarray(s * d, (s + l) * d), o * d);
    scales.set((batch.scales as Float32Array).subarray(s, s + l), o);
    o += l;
  }
  return { data, scales, lengths: Int32Array.from(batch.lengths.subarray(0, batch.count)) };
}

describe(`CUDA int8 MaxSim vs float64 reference on dequantized values (seed ${runSeed})`, { skip }, () => {
  for (const d of [...fastDims, ...fallbackDims]) {
    test(`int8 d=${d}: every variant, dense and ragged, Lq in {${queryLengths.join(', ')}}`, async () => {
      const dev = await gpu();
      const variants = variantsFor(dev, 'int8', d);
      assert.ok(variants.length > 0, `no variant runs int8 d=${d}: the SIMT fallback must`);
      if (fastDims.includes(d))
        assert.ok(
          variants.some((v) => v.family === 'mma'),
          `d=${d} must have a tensor-core variant`,
        );
      else
        assert.deepEqual(
          variants.map((v) => v.name),
          ['maxsim_int8_simt'],
        );
      const rand = rng(runSeed ^ (d * 7919 + 3));
      for (const layout of ['dense', 'ragged'] as const) {
        const docs = docsFor(layout, d, rand);
        const corpus = await dev.upload(docs);
        try {
          assert.equal(corpus.dtype, 'int8');
          for (const lq of queryLengths) {
            const queries = queriesFor(lq, d, rand);
            const ref = referenceMaxsim(queries, docs);
            for (const v of variants) {
              const got = (await corpus.score(queries, { variant: v.name })).data;
              checkScores(got, queries, docs, 1, `${v.name} ${layout} d=${d} Lq=${lq}`, ref);
            }
            // the dispatcher's choice, and the CPU int8 engine on the same inputs
            const auto = (await corpus.score(queries)).data;
            checkScores(auto, queries, docs, 1, `auto ${layout} d=${d} Lq=${lq}`, ref);
            const cpu = await cpuMaxsimInt8(queries, docs);
            const bounds = scoreErrorBounds(queries, docs).map((b) => 2 * b);
            assertScoresClose(
              auto,
              Float64Array.from(cpu),
              bounds,
              `CUDA vs CPU int8 ${layout} d=${d} Lq=${lq}`,
            );
          }
        } finally {
          corpus.dispose();
        }
      }
    });
  }

  test('int8: rows whose best match is negative, zero or positive, tile by tile, every variant', async () => {
    const dev = await gpu();
    for (const d of [128, 96]) {
      const f = signRunInputs(d, 'float32', rng(runSeed + 37 + d));
      const queries = quantize(f.queries, 'int8');
      const docs = quantize(f.docs, 'int8');
      const ref = referenceMaxsim(queries, docs);
      assert.ok(ref[docs.count] < 0, `the inputs must hold negative scores, got ${ref[docs.count]}`);
      const corpus = await dev.upload(docs);
      try {
        for (const v of variantsFor(dev, 'int8', d)) {
          const got = (await corpus.score(queries, { variant: v.name })).data;
          checkScores(got, queries, docs, 1, `${v.name} sign runs d=${d}`, ref);
        }
      } finally {
        corpus.dispose();
      }
    }
  });

  test('int8: many documents (grids loop over them) and many queries (several passes)', async () => {
    const dev = await gpu();
    const d = 128;
    const rand = rng(runSeed + 17);
    const lengths = Array.from({ length: 4001 }, (_, i) => (i % 97 === 5 ? 0 : 1 + Math.floor(rand() * 10)));
    const docs = int8Ragged(lengths, d, rand);
    const corpus = await dev.upload(docs);
    try {
      const few = int8Ragged([32, 5, 31], d, rand);
      const many = int8Ragged(
        Array.from({ length: 40 }, () => 1 + Math.floor(rand() * 16)),
        d,
        rand,
      );
      for (const queries of [few, many]) {
        const ref = referenceMaxsim(queries, docs);
        for (const v of variantsFor(dev, 'int8', d)) {
          const got = (await corpus.score(queries, { variant: v.name })).data;
          checkScores(got, queries, docs, 1, `${v.name} B=${docs.count} Nq=${queries.count}`, ref);
        }
      }
    } finally {
      corpus.dispose();
    }
  });

  test('int8: bitwise identical results on repeat, every variant', async () => {
    const dev = await gpu();
    const d = 64;
    const rand = rng(runSeed + 29);
    const docs = int8Ragged(
      Array.from({ length: 500 }, () => Math.floor(rand() * 200)),
      d,
      rand,
    );
    const queries = int8Ragged([32, 300, 7, 1], d, rand);
    const corpus = await dev.upload(docs);
    try {
      for (const v of variantsFor(dev, 'int8', d)) {
        const a = (await corpus.score(queries, { variant: v.name })).data;
        const b = (await corpus.score(queries, { variant: v.name })).data;
        assert.ok(bitsEqual(a, b), `${v.name}: two runs differ`);
      }
    } finally {
      corpus.dispose();
    }
  });

  for (const dtype of ['float32', 'float16', 'bfloat16'] as const) {
    test(`${dtype} corpus.quantize('int8') on the GPU == host quantize(), byte for byte`, async () => {
      const dev = await gpu();
      const rand = rng(runSeed + 31 + dtype.length);
      for (const d of [8, 100, 128]) {
        for (const layout of ['dense', 'ragged'] as const) {
          const floats =
            layout === 'ragged'
              ? floatRagged(docLengths, d, dtype, rand)
              : floatDense(docLengths, d, dtype, rand);
          const host = quantize(floats, 'int8');
          const fcorpus = await dev.upload(floats);
          const qcorpus = await fcorpus.quantize('int8');
          try {
            assert.equal(qcorpus.dtype, 'int8');
            assert.equal(qcorpus.count, floats.count);
            assert.equal(qcorpus.tokens, fcorpus.tokens);
            assert.equal(qcorpus.maxLength, fcorpus.maxLength);
            const back = await qcorpus.download();
            const want = packed(host);
            assert.deepEqual(
              Array.from(back.lengths),
              Array.from(want.lengths),
              `${dtype} d=${d} ${layout}: lengths`,
            );
            assert.ok(bytesEqual(back.data, want.data), `${dtype} d=${d} ${layout}: int8 values differ`);
            assert.ok(
              bytesEqual(back.scales as Float32Array, want.scales),
              `${dtype} d=${d} ${layout}: scales differ`,
            );
            // and the scores of the two corpora are bitwise equal
            const queries = int8Ragged([9, 33], d, rand);
            const viaHost = await dev.upload(host);
            try {
              const a = (await qcorpus.score(queries)).data;
              const b = (await viaHost.score(queries)).data;
              assert.ok(
                bitsEqual(a, b),
                `${dtype} d=${d} ${layout}: device- and host-quantized scores differ`,
              );
            } finally {
              viaHost.dispose();
            }
            // the float corpus is untouched and still scores float queries
            assert.equal(fcorpus.dtype, dtype);
          } finally {
            qcorpus.dispose();
            fcorpus.dispose();
          }
        }
      }
    });
  }

  test('quantize rejects a corpus with an infinite value, naming the token', async () => {
    const dev = await gpu();
    const data = new Float32Array(5 * 16).fill(0.5);
    data[3 * 16 + 7] = Number.POSITIVE_INFINITY;
    const corpus = await dev.upload(raggedBatch(data, [0, 2, 5], { dim: 16, checkFinite: false }));
    try {
      await assert.rejects(corpus.quantize('int8'), /non-finite value at token 3/);
    } finally {
      corpus.dispose();
    }
  });

  test('float queries holding an infinite value against an int8 or fp8 corpus: score, topK and twoStage reject naming the token (checked at the end of the job), and the next calls are right', async () => {
    const dev = await gpu();
    const rand = rng(runSeed + 38);
    const d = 32;
    const fcorpus = await dev.upload(floatRagged([5, 0, 12, 40, 9], d, 'float16', rand));
    const i8 = await fcorpus.quantize('int8');
    const f8 = await fcorpus.quantize('fp8');
    try {
      const good = floatRagged([3, 6], d, 'float32', rand);
      const bad = { ...good, data: Float32Array.from(good.data as Float32Array) };
      bad.data[7 * d + 2] = Number.POSITIVE_INFINITY; // item 1, its token 4: token 7 of the packed queries
      const rescore = { rescore: { docs: fcorpus, candidates: 4 } };
      for (const corpus of [i8, f8]) {
        const want = [
          await corpus.score(good),
          await corpus.topK(good, 3),
          await corpus.topK(good, 3, rescore),
        ];
        await assert.rejects(corpus.score(bad), /non-finite value at token 7/);
        await assert.rejects(corpus.topK(bad, 3), /non-finite value at token 7/);
        await assert.rejects(corpus.topK(bad, 3, rescore), /non-finite value at token 7/);
        assert.deepStrictEqual(
          [await corpus.score(good), await corpus.topK(good, 3), await corpus.topK(good, 3, rescore)],
          want,
        );
      }
    } finally {
      f8.dispose();
      i8.dispose();
      fcorpus.dispose();
    }
  });

  test('float queries meet an int8 corpus quantized on the host; int8 queries need an int8 corpus', async () => {
    const dev = await gpu();
    const rand = rng(runSeed + 37);
    const d = 64;
    const floatsDocs = floatRagged([5, 0, 12, 40], d, 'float32', rand);
    const fcorpus = await dev.upload(floatsDocs);
    const corpus = await fcorpus.quantize('int8');
    try {
      const fq = floatRagged([9, 3], d, 'float32', rand);
      const qq = quantize(fq, 'int8');
      const a = (await corpus.score(fq)).data;
      const b = (await corpus.score(qq)).data;
      assert.ok(bitsEqual(a, b), 'float queries are quantized exactly as quantize() does');
      assert.equal(a[1], Number.NEGATIVE_INFINITY);
      const hits = await corpus.topK(qq, 3);
      assert.equal(hits[0].length, 3);
      assert.ok(hits[0][0].score >= hits[0][1].score && hits[0][1].score >= hits[0][2].score);
      await assert.rejects(
        fcorpus.score(qq),
        (e: Error) => /queries\.dtype/.test(e.message) && /int8/.test(e.message),
      );
      await assert.rejects(corpus.quantize('int8'), /corpus\.dtype/);
      await assert.rejects(
        corpus.score(qq, { variant: 'maxsim_mma_g1_f16' }),
        /maxsim_mma_g1_f16 cannot: it reads float16 tokens, not int8/,
      );
    } finally {
      corpus.dispose();
      fcorpus.dispose();
    }
  });

  test('int8 alloc + append: scales are appended with their tokens', async () => {
    const dev = await gpu();
    const rand = rng(runSeed + 43);
    const d = 32;
    const parts = [int8Ragged([3, 0, 20], d, rand), int8Ragged([7, 50], d, rand)];
    const corpus = await dev.alloc({ dtype: 'int8', dim: d, tokens: 80, items: 5 });
    try {
      for (const p of parts) await corpus.append(p);
      assert.equal(corpus.count, 5);
      const queries = int8Ragged([32, 4], d, rand);
      const got = (await corpus.score(queries)).data;
      for (let i = 0; i < 2; i++) {
        const ref = referenceMaxsim(queries, parts[i]);
        const off = i === 0 ? 0 : 3;
        const cols = 5;
        const mine = new Float32Array(queries.count * parts[i].count);
        for (let q = 0; q < queries.count; q++)
          for (let b = 0; b < parts[i].count; b++) mine[q * parts[i].count + b] = got[q * cols + off + b];
        checkScores(mine, queries, parts[i], 1, `append part ${i}`, ref);
      }
    } finally {
      corpus.dispose();
    }
  });
});

// ---- fp8 e4m3 (maxsim_fp8.cu): GPU-only element type, quantized on the device ----

/** The fp8 codes the GPU makes for a float batch: upload, quantize('fp8'), download. */
async function fp8Of(dev: Awaited<ReturnType<typeof gpu>>, batch: TokenBatch): Promise<Fp8Tokens> {
  const c = await dev.upload(batch);
  try {
    // per token, as a scoring job quantizes its queries (quantize('fp8') defaults to document scales)
    const q = await c.quantize('fp8', { scales: 'token' });
    try {
      const t = await q.download();
      assert.ok('kind' in t && t.kind === 'fp8');
      return t as Fp8Tokens;
    } finally {
      q.dispose();
    }
  } finally {
    c.dispose();
  }
}

/**
 * Error bound of fp8 scores: products of e4m3 values are exact, the tensor core's sum over d may keep
 * as few as ~14 mantissa bits on Hopper (so d * 2^-13 per dot), then fp32 for the scales, the max and
 * the sum over query tokens: (d * 2^-13 + (Lq + 3) * 2^-24) * sum_i |q_i| max_j |d_j|.
 */
function fp8Bounds(q: Fp8Tokens, d: Fp8Tokens): Float64Array {
  const dim = d.dim;
  const norm = (t: Fp8Tokens, tok: number) => {
    let s = 0;
    for (let k = 0; k < dim; k++) s += (e4m3ToFloat(t.data[tok * dim + k]) * t.scales[tok]) ** 2;
    return Math.sqrt(s);
  };
  const out = new Float64Array(q.count * d.count);
  for (let qi = 0; qi < q.count; qi++) {
    let qn = 0;
    for (let i = 0; i < q.lengths[qi]; i++) qn += norm(q, q.starts[qi] + i);
    for (let b = 0; b < d.count; b++) {
      let dn = 0;
      for (let j = 0; j < d.lengths[b]; j++) dn = Math.max(dn, norm(d, d.starts[b] + j));
      out[qi * d.count + b] = (dim * 2 ** -13 + (q.lengths[qi] + 3) * 2 ** -24) * qn * dn;
    }
  }
  return out;
}

describe(`CUDA fp8 e4m3 MaxSim vs float64 reference on dequantized values (seed ${runSeed})`, {
  skip,
}, () => {
  for (const d of [...fastDims, ...fallbackDims]) {
    test(`fp8 d=${d}: every variant, dense and ragged, Lq in {1, 32, 300}`, async () => {
      const dev = await gpu();
      const variants = variantsFor(dev, 'fp8', d);
      assert.ok(variants.length > 0, `no variant runs fp8 d=${d}: the SIMT fallback must`);
      const rand = rng(runSeed ^ (d * 104729 + 5));
      for (const layout of ['dense', 'ragged'] as const) {
        const floats =
          layout === 'ragged'
            ? floatRagged(docLengths, d, 'float32', rand)
            : floatDense(docLengths, d, 'float32', rand);
        const fcorpus = await dev.upload(floats);
        const corpus = await fcorpus.quantize('fp8', { scales: 'token' });
        fcorpus.dispose();
        try {
          assert.equal(corpus.dtype, 'fp8');
          const docs8 = (await corpus.download()) as Fp8Tokens;
          for (const lq of [1, 32, 300]) {
            const queries = floatRagged([lq, 0, Math.max(1, Math.ceil(lq / 3))], d, 'float32', rand);
            const q8 = await fp8Of(dev, queries);
            const ref = referenceMaxsimFp8(q8, docs8);
            const bounds = fp8Bounds(q8, docs8);
            for (const v of variants) {
              const got = (await corpus.score(queries, { variant: v.name })).data;
              for (let i = 0; i < got.length; i++)
                assert.ok(!Number.isNaN(got[i]), `${v.name}: score ${i} is NaN (never written)`);
              assertScoresClose(got, ref, bounds, `${v.name} ${layout} d=${d} Lq=${lq}`);
            }
          }
        } finally {
          corpus.dispose();
        }
      }
    });
  }

  test('fp8: rows whose best match is negative, zero or positive, tile by tile, every variant', async () => {
    const dev = await gpu();
    for (const d of [128, 96]) {
      const f = signRunInputs(d, 'float32', rng(runSeed + 41 + d));
      const fcorpus = await dev.upload(f.docs);
      const corpus = await fcorpus.quantize('fp8', { scales: 'token' });
      fcorpus.dispose();
      try {
        const docs8 = (await corpus.download()) as Fp8Tokens;
        const q8 = await fp8Of(dev, f.queries);
        const ref = referenceMaxsimFp8(q8, docs8);
        assert.ok(ref[docs8.count] < 0, `the inputs must hold negative scores, got ${ref[docs8.count]}`);
        const bounds = fp8Bounds(q8, docs8);
        for (const v of variantsFor(dev, 'fp8', d)) {
          const got = (await corpus.score(f.queries, { variant: v.name })).data;
          for (let i = 0; i < got.length; i++)
            assert.ok(!Number.isNaN(got[i]), `${v.name}: score ${i} is NaN (never written)`);
          assertScoresClose(got, ref, bounds, `${v.name} sign runs d=${d}`);
        }
      } finally {
        corpus.dispose();
      }
    }
  });

  test('fp8 quantize: within half an e4m3 step of every value, zero tokens stay zero', async () => {
    const dev = await gpu();
    const rand = rng(runSeed + 53);
    for (const dtype of ['float32', 'float16', 'bfloat16'] as const) {
      const floats = floatRagged([3, 0, 40, 13], 64, dtype, rand);
      const q8 = await fp8Of(dev, floats);
      const x = decodeBatch64(floats);
      assert.equal(q8.data.length, x.length);
      for (let t = 0; t < q8.scales.length; t++) {
        let m = 0;
        for (let k = 0; k < 64; k++) m = Math.max(m, Math.abs(x[t * 64 + k]));
        const s = q8.scales[t];
        if (m === 0) {
          assert.equal(s, 0, `${dtype} token ${t}: zero token, scale 0`);
          for (let k = 0; k < 64; k++) assert.equal(q8.data[t * 64 + k], 0);
          continue;
        }
        assert.equal(s, Math.fround(m / 448), `${dtype} token ${t}: scale = max|x| / 448`);
        for (let k = 0; k < 64; k++) {
          const v = x[t * 64 + k];
          const back = e4m3ToFloat(q8.data[t * 64 + k]) * s;
          // 3 mantissa bits: relative half step 2^-4; subnormal step 2^-9 (half: 2^-10) times the scale;
          // plus the fp32 rounding of v / s and of s
          const tol = Math.max(Math.abs(v) * 2 ** -4, s * 2 ** -10) * (1 + 2 ** -20) + m * 2 ** -22;
          assert.ok(Math.abs(back - v) <= tol, `${dtype} token ${t} k=${k}: ${v} -> ${back}`);
        }
      }
    }
  });

  test('fp8: bitwise identical results on repeat, every variant; refusals name the argument', async () => {
    const dev = await gpu();
    const d = 64;
    const rand = rng(runSeed + 59);
    const floats = floatRagged(
      Array.from({ length: 300 }, () => Math.floor(rand() * 200)),
      d,
      'float32',
      rand,
    );
    const fcorpus = await dev.upload(floats);
    const corpus = await fcorpus.quantize('fp8', { scales: 'token' });
    try {
      const queries = floatRagged([32, 300, 7, 1], d, 'float16', rand);
      for (const v of variantsFor(dev, 'fp8', d)) {
        const a = (await corpus.score(queries, { variant: v.name })).data;
        const b = (await corpus.score(queries, { variant: v.name })).data;
        assert.ok(bitsEqual(a, b), `${v.name}: two runs differ`);
      }
      const hits = await corpus.topK(queries, 5);
      assert.equal(hits.length, 4);
      const qq = quantize(queries, 'int8');
      await assert.rejects(
        corpus.score(qq),
        (e: Error) => /queries\.dtype/.test(e.message) && /fp8/.test(e.message),
      );
      await assert.rejects(corpus.quantize('int8'), /corpus\.dtype/);
      await assert.rejects(corpus.append(qq), /fp8/);
    } finally {
      corpus.dispose();
      fcorpus.dispose();
    }
  });
});

// ---- document scales: one scale per document ({ scales: 'document' }), the quantizers and the
// document-scale twins of the TMA wgmma kernels (DSCALE in maxsim_wgmma.cuh) ----

/** Whether every item's tokens share one scale. */
function oneScalePerItem(t: { scales: Float32Array; starts: ArrayLike<number>; lengths: ArrayLike<number> }) {
  for (let b = 0; b < t.lengths.length; b++)
    for (let j = 1; j < t.lengths[b]; j++)
      if (t.scales[t.starts[b] + j] !== t.scales[t.starts[b]]) return false;
  return true;
}

// Lengths on and off both tile widths (64, 128), a single token, empty documents, one long document.
const dsLengths = [0, 1, 7, 63, 64, 65, 127, 128, 129, 300, 1024, 0, 513];

describe(`CUDA document scales: quantizers and document-scale kernels (seed ${runSeed})`, { skip }, () => {
  test("int8: corpus.quantize('int8', { scales: 'document' }) == the host's, byte for byte; the flag", async () => {
    const dev = await gpu();
    const rand = rng(runSeed + 61);
    for (const dtype of ['float32', 'float16', 'bfloat16'] as const) {
      for (const d of [100, 128]) {
        for (const layout of ['dense', 'ragged'] as const) {
          const floats =
            layout === 'ragged'
              ? floatRagged(docLengths, d, dtype, rand)
              : floatDense(docLengths, d, dtype, rand);
          const host = quantize(floats, 'int8', { scales: 'document' });
          const fcorpus = await dev.upload(floats);
          const qcorpus = await fcorpus.quantize('int8', { scales: 'document' });
          const perToken = await fcorpus.quantize('int8');
          const what = `${dtype} d=${d} ${layout}`;
          try {
            assert.equal(qcorpus.documentScales, true, `${what}: flagged`);
            assert.equal(perToken.documentScales, false, `${what}: per-token corpus not flagged`);
            assert.equal(fcorpus.documentScales, false);
            const back = (await qcorpus.download()) as TokenBatch;
            const want = packed(host);
            assert.ok(bytesEqual(back.data, want.data), `${what}: int8 values differ`);
            assert.ok(bytesEqual(back.scales as Float32Array, want.scales), `${what}: scales differ`);
            assert.ok(
              oneScalePerItem({ ...back, scales: back.scales as Float32Array }),
              `${what}: one scale`,
            );
            const viaHost = await dev.upload(host);
            try {
              assert.equal(viaHost.documentScales, true, `${what}: a host batch with document scales`);
            } finally {
              viaHost.dispose();
            }
          } finally {
            qcorpus.dispose();
            perToken.dispose();
            fcorpus.dispose();
          }
        }
      }
    }
  });

  test("fp8: quantize('fp8', { scales: 'document' }) takes each document's largest token scale", async () => {
    const dev = await gpu();
    const rand = rng(runSeed + 67);
    const d = 64;
    const floats = floatRagged([3, 0, 40, 13, 1, 129], d, 'float32', rand);
    const fcorpus = await dev.upload(floats);
    const qcorpus = await fcorpus.quantize('fp8', { scales: 'document' });
    const byDefault = await fcorpus.quantize('fp8');
    try {
      assert.equal(qcorpus.documentScales, true);
      assert.equal(byDefault.documentScales, true, "fp8's default is one scale per document");
      assert.deepEqual(await byDefault.download(), await qcorpus.download());
      byDefault.dispose();
      const ds = (await qcorpus.download()) as Fp8Tokens;
      const pt = await fp8Of(dev, floats);
      const x = decodeBatch64(floats);
      for (let b = 0; b < ds.count; b++) {
        const s0 = ds.starts[b];
        let sd = 0;
        for (let j = 0; j < ds.lengths[b]; j++) sd = Math.max(sd, pt.scales[s0 + j]);
        for (let j = 0; j < ds.lengths[b]; j++) {
          const t = s0 + j;
          assert.equal(ds.scales[t], sd, `document ${b} token ${j}: the document's scale`);
          let m = 0;
          for (let k = 0; k < d; k++) m = Math.max(m, Math.abs(x[t * d + k]));
          for (let k = 0; k < d; k++) {
            const v = x[t * d + k];
            if (pt.scales[t] === sd)
              assert.equal(ds.data[t * d + k], pt.data[t * d + k], `document ${b} token ${j}: same codes`);
            const back = e4m3ToFloat(ds.data[t * d + k]) * sd;
            const tol = Math.max(Math.abs(v) * 2 ** -4, sd * 2 ** -10) * (1 + 2 ** -20) + m * 2 ** -22;
            assert.ok(Math.abs(back - v) <= tol, `document ${b} token ${j} k=${k}: ${v} -> ${back}`);
          }
        }
      }
    } finally {
      qcorpus.dispose();
      fcorpus.dispose();
    }
  });

  test('document scales over a document of 200,000 tokens: int8 == the host, fp8 one scale each', async () => {
    // the requantization runs one warp per token, so one long document does not serialize on a warp
    const dev = await gpu();
    const rand = rng(runSeed + 79);
    const floats = floatRagged([5, 200_000, 0, 17], 32, 'float32', rand);
    const host = quantize(floats, 'int8', { scales: 'document' });
    const f = await dev.upload(floats);
    const i8 = await f.quantize('int8', { scales: 'document' });
    const e8 = await f.quantize('fp8', { scales: 'document' });
    try {
      const back = (await i8.download()) as TokenBatch;
      const want = packed(host);
      assert.ok(bytesEqual(back.data, want.data), 'int8 values');
      assert.ok(bytesEqual(back.scales as Float32Array, want.scales), 'int8 scales');
      const codes = (await e8.download()) as Fp8Tokens;
      assert.ok(oneScalePerItem(codes), 'fp8: one scale per document');
      const pt = await fp8Of(dev, floats);
      for (let b = 0; b < codes.count; b++) {
        let sd = 0;
        for (let j = 0; j < codes.lengths[b]; j++) sd = Math.max(sd, pt.scales[codes.starts[b] + j]);
        if (codes.lengths[b] > 0) assert.equal(codes.scales[codes.starts[b]], sd, `fp8 document ${b}`);
      }
    } finally {
      i8.dispose();
      e8.dispose();
      f.dispose();
    }
  });

  /** int8 and fp8 corpora of `floats` with document scales, their dequantized reference and bounds. */
  async function dsCorpora(dev: Awaited<ReturnType<typeof gpu>>, floats: TokenBatch, queries: TokenBatch) {
    const docs = quantize(floats, 'int8', { scales: 'document' });
    const q = quantize(queries, 'int8');
    const int8 = await dev.upload(docs);
    const fcorpus = await dev.upload(floats);
    const fp8 = await fcorpus.quantize('fp8', { scales: 'document' });
    fcorpus.dispose();
    const docs8 = (await fp8.download()) as Fp8Tokens;
    const q8 = await fp8Of(dev, queries);
    return [
      {
        dtype: 'int8',
        corpus: int8,
        queries: q,
        ref: referenceMaxsim(q, docs),
        bounds: scoreErrorBounds(q, docs),
      },
      {
        dtype: 'fp8',
        corpus: fp8,
        queries,
        ref: referenceMaxsimFp8(q8, docs8),
        bounds: fp8Bounds(q8, docs8),
      },
    ] as const;
  }

  /** Every document-scale variant: the per-token twin's scores bit for bit, and the reference. */
  async function checkDsVariants(
    dev: Awaited<ReturnType<typeof gpu>>,
    floats: TokenBatch,
    queries: TokenBatch,
    what: string,
  ) {
    const d = floats.dim;
    for (const c of await dsCorpora(dev, floats, queries)) {
      try {
        assert.equal(c.corpus.documentScales, true);
        // the twins are sm_90a TMA kernels: compute capability 9.0 with a driver that encodes tensor maps
        const cc = dev.info.computeCapability;
        const here = cc[0] === 9 && cc[1] === 0 && dev.info.tensorMaps === true;
        const ds = variantsFor(dev, c.dtype, d, true).filter((v) => v.requires.documentScales);
        assert.equal(ds.length, here ? 2 : 0, `${c.dtype}: the document-scale twins that run here`);
        for (const v of ds) {
          const got = (await c.corpus.score(c.queries, { variant: v.name })).data;
          for (let i = 0; i < got.length; i++)
            assert.ok(!Number.isNaN(got[i]), `${v.name}: score ${i} is NaN (never written)`);
          assertScoresClose(got, c.ref, c.bounds, `${v.name} ${what} d=${d}`);
          const twin = v.name.replace('_tma_ds_', '_tma_');
          const want = (await c.corpus.score(c.queries, { variant: twin })).data;
          assert.ok(bitsEqual(got, want), `${v.name} ${what} d=${d}: differs from ${twin}`);
        }
        // the dispatcher takes a document-scale twin for such a corpus
        if (here) assert.match(dev.plan(c.queries, c.corpus).variant.name, /_tma_ds_/, `${c.dtype} ${what}`);
      } finally {
        c.corpus.dispose();
      }
    }
  }

  for (const d of [128, 96, 64]) {
    test(`int8 / fp8 d=${d}: document-scale variants == their per-token twins, bit for bit, and the reference`, async () => {
      const dev = await gpu();
      const rand = rng(runSeed ^ (d * 6151 + 11));
      const floats = floatRagged(dsLengths, d, 'float32', rand);
      const queries = floatRagged([300, 1, 1024, 0, 17], d, 'float32', rand);
      await checkDsVariants(dev, floats, queries, 'ragged');
    });
  }

  test('document-scale variants over many documents per CTA: queries inside one pass and spanning passes', async () => {
    const dev = await gpu();
    const rand = rng(runSeed + 79);
    const d = 128;
    // ~2-3 documents per CTA, lengths around the 64-token tile, empties between (maxsim_wgmma.cuh:
    // the consumers combine their documents' sums in batches)
    const pick = [0, 1, 17, 63, 64, 65, 127, 128, 129, 191, 192, 250, 0];
    const floats = floatRagged(
      Array.from({ length: 301 }, () => pick[Math.floor(rand() * pick.length)]),
      d,
      'float32',
      rand,
    );
    const inner = floatRagged(
      Array.from({ length: 21 }, (_, i) => (i % 5 === 0 ? 32 : 1 + Math.floor(rand() * 32))),
      d,
      'float32',
      rand,
    );
    await checkDsVariants(dev, floats, inner, 'many documents, queries inside one pass');
    await checkDsVariants(
      dev,
      floats,
      floatRagged([300, 5, 0, 140], d, 'float32', rand),
      'many documents, spanning',
    );
  });

  test('document-scale variants: rows whose best match is negative, zero or positive', async () => {
    const dev = await gpu();
    for (const d of [128, 96]) {
      const f = signRunInputs(d, 'float32', rng(runSeed + 71 + d));
      await checkDsVariants(dev, f.docs, f.queries, 'sign runs');
    }
  });

  test('the flag through alloc + append and select; refusals name the argument', async () => {
    const dev = await gpu();
    const rand = rng(runSeed + 73);
    const d = 64;
    const dsBatch = () =>
      quantize(floatRagged([5, 130, 0, 64], d, 'float32', rand), 'int8', { scales: 'document' });
    const corpus = await dev.alloc({ dtype: 'int8', dim: d, tokens: 800, items: 12 });
    try {
      assert.equal(corpus.documentScales, true, 'an empty int8 corpus');
      await corpus.append(dsBatch());
      assert.equal(corpus.documentScales, true, 'after a batch with document scales');
      const view = await corpus.select([3, 1, 1]);
      try {
        assert.equal(view.documentScales, true, 'a view keeps the flag');
        const queries = int8Ragged([300, 9], d, rand);
        const all = (await corpus.score(queries)).data;
        const sub = (await view.score(queries)).data;
        for (let q = 0; q < 2; q++)
          for (const [i, b] of [3, 1, 1].entries())
            assert.equal(sub[q * 3 + i], all[q * corpus.count + b], `view column ${i}`);
      } finally {
        view.dispose();
      }
      await corpus.append(int8Ragged([40, 3], d, rand));
      assert.equal(corpus.documentScales, false, 'after a batch with per-token scales');
      const queries = int8Ragged([300], d, rand);
      assert.doesNotMatch(dev.plan(queries, corpus).variant.name, /_ds_/);
      await assert.rejects(
        corpus.score(queries, { variant: 'maxsim_int8_wgmma_tma_ds_w2m2n64' }),
        /maxsim_int8_wgmma_tma_ds_w2m2n64 cannot: it needs one scale per document/,
      );
      const f = await dev.upload(floatRagged([3, 4], d, 'float32', rand));
      try {
        await assert.rejects(
          f.quantize('int8', { scales: 'tokens' as 'token' }),
          (e: Error) => /options\.scales/.test(e.message) && /'token' or 'document'/.test(e.message),
        );
      } finally {
        f.dispose();
      }
    } finally {
      corpus.dispose();
    }
  });
});
