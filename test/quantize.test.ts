// Per-token int8 quantization (quantize / dequantize / roundTripError) and int8 x int8 MaxSim on the
// CPU: every int8 kernel set (AMX-INT8 for d % 64 == 0, AVX-512 VNNI, AVX-VNNI, AVX2, portable; the
// sets this CPU lacks are skipped by name) against the float64 reference computed on the dequantized
// values, each bitwise against the portable kernel, and int8 against fp32 scores of the same data.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { referenceMaxsim } from '../src/backends/reference.js';
import { cudaUnavailableReason } from '../src/backends/select.js';
import { BackendUnavailableError, InvalidArgumentError } from '../src/errors.js';
import { decodeToFloat32 } from '../src/floats.js';
import { maxsim, maxsimSync } from '../src/ops/maxsim.js';
import {
  cpuInt8IsaFor,
  cpuInt8Isas,
  cpuMaxsimInt8Sync,
  dequantize,
  hasDocumentScales,
  INT8_ISAS,
  type Int8Isa,
  quantize,
  roundHalfEven,
  roundTripError,
} from '../src/ops/quantize.js';
import {
  batchItem,
  denseBatch,
  matrixAsBatch,
  type TokenBatch,
  type TokenMatrix,
  tokenMatrix,
} from '../src/tensor.js';
import {
  assertScoresClose,
  randomDense,
  randomMatrix,
  randomRagged,
  rng,
  runSeed,
  scoreErrorBounds,
} from './helpers.js';

const int8Isas = cpuInt8Isas();
const hasAmx = int8Isas.includes('amx');

/** Every token of x (real or not) as [start, length] spans of real tokens. */
function realTokens(x: TokenBatch | TokenMatrix): number[] {
  if (x.kind === 'matrix') return Array.from({ length: x.length }, (_, i) => i);
  const out: number[] = [];
  for (let b = 0; b < x.count; b++) for (let t = 0; t < x.lengths[b]; t++) out.push(x.starts[b] + t);
  return out;
}

/** Checks scale, range and the half-step bound of every real token; returns max |x - dq|. */
function checkQuantized(orig: TokenBatch | TokenMatrix, q: TokenBatch | TokenMatrix, context: string) {
  assert.equal(q.dtype, 'int8', context);
  assert.ok(q.data instanceof Int8Array, `${context}: Int8Array data`);
  assert.ok(q.scales instanceof Float32Array, `${context}: Float32Array scales`);
  assert.equal(q.kind, orig.kind, `${context}: kind`);
  assert.equal(q.dim, orig.dim, `${context}: dim`);
  if (orig.kind === 'batch' && q.kind === 'batch') {
    assert.equal(q.layout, orig.layout, `${context}: layout`);
    assert.equal(q.count, orig.count, `${context}: count`);
    assert.equal(q.maxLength, orig.maxLength, `${context}: maxLength`);
    assert.deepEqual(Array.from(q.starts), Array.from(orig.starts), `${context}: starts`);
    assert.deepEqual(Array.from(q.lengths), Array.from(orig.lengths), `${context}: lengths`);
  }
  const d = orig.dim;
  const x = decodeToFloat32(orig.data, orig.dtype, d);
  const scales = q.scales as Float32Array;
  const dq = dequantize(q);
  assert.equal(dq.dtype, 'float32');
  assert.equal(dq.kind, q.kind);
  let maxErr = 0;
  for (const t of realTokens(orig)) {
    let m = 0;
    for (let k = 0; k < d; k++) m = Math.max(m, Math.abs(x[t * d + k]));
    const s = scales[t];
    assert.equal(s, Math.fround(m / 127), `${context}: token ${t} scale`);
    let top = 0;
    for (let k = 0; k < d; k++) {
      const v: number = q.data[t * d + k];
      assert.ok(v >= -127 && v <= 127, `${context}: token ${t} value ${v} out of [-127, 127]`);
      top = Math.max(top, Math.abs(v));
      const err = Math.abs(x[t * d + k] - v * s); // exact in double
      maxErr = Math.max(maxErr, err);
      assert.ok(
        err <= (s / 2) * (1 + 2 ** -20),
        `${context}: token ${t} component ${k}: |x - dq| = ${err} > scale / 2 = ${s / 2} (seed ${runSeed})`,
      );
      assert.equal(dq.data[t * d + k], Math.fround(v * s), `${context}: dequantized value`);
    }
    assert.equal(top, m === 0 ? 0 : 127, `${context}: token ${t} must use the full range`);
  }
  return maxErr;
}

describe(`int8 quantization (seed ${runSeed})`, () => {
  test('ragged, dense with padding and matrix inputs keep their layout and stay within scale / 2', () => {
    const rand = rng(runSeed + 101);
    for (const dtype of ['float32', 'float16', 'bfloat16'] as const) {
      const ragged = randomRagged([3, 0, 17, 1], 24, dtype, rand);
      checkQuantized(ragged, quantize(ragged, 'int8'), `ragged ${dtype}`);
      const dense = randomDense(4, 9, 24, dtype, rand, [9, 0, 3, 7]);
      const qd = quantize(dense, 'int8');
      checkQuantized(dense, qd, `dense ${dtype}`);
      const m = randomMatrix(5, 24, dtype, rand);
      checkQuantized(m, quantize(m, 'int8'), `matrix ${dtype}`);
    }
  });

  test('dense padding tokens get scale 0 and zero values', () => {
    const rand = rng(runSeed + 102);
    const dense = randomDense(3, 6, 8, 'float32', rand, [6, 2, 0]);
    const q = quantize(dense, 'int8');
    assert.equal(q.scales?.length, 3 * 6, 'one scale per token slot');
    assert.equal(q.data.length, 3 * 6 * 8);
    for (let b = 0; b < 3; b++) {
      for (let t = dense.lengths[b]; t < 6; t++) {
        const tok = b * 6 + t;
        assert.equal(q.scales?.[tok], 0, `padding token ${tok} scale`);
        for (let k = 0; k < 8; k++) assert.equal(q.data[tok * 8 + k], 0);
      }
      for (let t = 0; t < dense.lengths[b]; t++) assert.ok((q.scales?.[b * 6 + t] ?? 0) > 0);
    }
  });

  test('zero tokens: scale 0, values 0; rounding is half to even; the extremes map to +-127', () => {
    const m = tokenMatrix(new Float32Array([0, 0, 0, 0, 0, 0, 127, 2.5, -2.5, 1.5, 0.5, -127]), 2, 6);
    const q = quantize(m, 'int8');
    assert.deepEqual(Array.from(q.scales ?? []), [0, 1]);
    assert.deepEqual(Array.from(q.data), [0, 0, 0, 0, 0, 0, 127, 2, -2, 2, 0, -127]);
    const n = quantize(tokenMatrix(new Float32Array([-254, 7, -7, 5]), 1, 4), 'int8');
    assert.deepEqual(Array.from(n.data), [-127, 4, -4, 2]); // 3.5 -> 4, -3.5 -> -4, 2.5 -> 2
    assert.equal(n.scales?.[0], 2);
    const dq = dequantize(n);
    assert.deepEqual(Array.from(dq.data), [-254, 8, -8, 4]);
  });

  test('every value is x / scale rounded half to even and clamped, on random and half-step inputs', () => {
    const rand = rng(runSeed + 114);
    const d = 96;
    const x = new Float32Array(300 * d);
    for (let t = 0; t < 300; t++) {
      // odd tokens: half steps of a power-of-two scale (exact ties); even tokens: random values
      const half = t % 2 === 1;
      for (let k = 0; k < d; k++)
        x[t * d + k] = half ? (Math.floor(rand() * 254) - 127 + 0.5) / 4 : (rand() * 2 - 1) * 10 ** (t % 5);
      if (half) x[t * d] = 127 / 4; // the largest |x|: scale 1/4, so x / scale is the half step itself
    }
    const q = quantize(tokenMatrix(x, 300, d), 'int8');
    for (let t = 0; t < 300; t++) {
      const s = q.scales?.[t] ?? 0;
      for (let k = 0; k < d; k++) {
        const want = Math.min(127, Math.max(-127, roundHalfEven(x[t * d + k] / s)));
        assert.equal(q.data[t * d + k], want + 0, `token ${t}, value ${k}`); // + 0: an Int8Array holds no -0
      }
    }
  });

  test('roundTripError reports the largest absolute and per-token relative error', () => {
    const rand = rng(runSeed + 103);
    const docs = randomRagged([4, 0, 30], 64, 'float32', rand);
    const q = quantize(docs, 'int8');
    const e = roundTripError(docs, q);
    const maxScale = Math.max(...Array.from(q.scales ?? []));
    assert.ok(e.maxAbs > 0 && e.maxAbs <= (maxScale / 2) * (1 + 2 ** -20), `maxAbs ${e.maxAbs}`);
    assert.ok(e.maxRel > 0 && e.maxRel <= (1 / 254) * (1 + 2 ** -20), `maxRel ${e.maxRel}`);
    assert.equal(e.maxAbs, checkQuantized(docs, q, 'roundTripError'));
    const zeros = tokenMatrix(new Float32Array(8), 2, 4);
    assert.deepEqual(roundTripError(zeros, quantize(zeros, 'int8')), { maxAbs: 0, maxRel: 0 });
  });

  test('bad inputs are refused with named errors', () => {
    const m = tokenMatrix(new Float32Array(4), 1, 4);
    const q = quantize(m, 'int8');
    assert.throws(
      () => quantize(m, 'int4' as 'int8'),
      (e) => e instanceof InvalidArgumentError && /mode/.test(e.message),
    );
    assert.throws(
      () => quantize(q, 'int8'),
      (e) => e instanceof InvalidArgumentError && /batch\.dtype/.test(e.message),
    );
    assert.throws(() => quantize({} as TokenMatrix, 'int8'), InvalidArgumentError);
    assert.throws(
      () => dequantize(m),
      (e) => e instanceof InvalidArgumentError && /'int8'/.test(e.message),
    );
    assert.throws(() => roundTripError(m, m), InvalidArgumentError);
    assert.throws(
      () => roundTripError(m, quantize(tokenMatrix(new Float32Array(8), 1, 8), 'int8')),
      InvalidArgumentError,
    );
  });
});

describe(`int8 quantization with document scales (seed ${runSeed})`, () => {
  /** Every item's tokens carry the item's scale, fround(max |x| over the item / 127), within scale / 2. */
  function checkDocumentScales(orig: TokenBatch | TokenMatrix, q: TokenBatch | TokenMatrix, context: string) {
    const d = orig.dim;
    const x = decodeToFloat32(orig.data, orig.dtype, d);
    const items = orig.kind === 'matrix' ? { starts: [0], lengths: [orig.length] } : orig;
    const scales = q.scales as Float32Array;
    for (let b = 0; b < items.lengths.length; b++) {
      const s0 = items.starts[b];
      let m = 0;
      for (let k = s0 * d; k < (s0 + items.lengths[b]) * d; k++) m = Math.max(m, Math.abs(x[k]));
      const sd = Math.fround(m / 127);
      let top = 0;
      for (let t = s0; t < s0 + items.lengths[b]; t++) {
        assert.equal(scales[t], sd, `${context}: item ${b} token ${t} scale`);
        for (let k = t * d; k < (t + 1) * d; k++) {
          const v: number = q.data[k];
          top = Math.max(top, Math.abs(v));
          if (sd === 0) assert.equal(v, 0);
          else
            assert.ok(
              Math.abs(x[k] - v * sd) <= (sd / 2) * (1 + 2 ** -20),
              `${context}: item ${b} value ${k}`,
            );
        }
      }
      if (items.lengths[b] > 0)
        assert.equal(top, m === 0 ? 0 : 127, `${context}: item ${b} uses the full range`);
    }
  }

  test('ragged, dense and matrix inputs: one scale per item, the full range, within scale / 2', () => {
    const rand = rng(runSeed + 111);
    for (const dtype of ['float32', 'float16', 'bfloat16'] as const) {
      // tokens of very different norms, so that per-token and per-document scales differ
      const ragged = randomRagged([3, 0, 17, 1], 24, dtype, rand);
      const qr = quantize(ragged, 'int8', { scales: 'document' });
      checkDocumentScales(ragged, qr, `ragged ${dtype}`);
      assert.equal(hasDocumentScales(qr), true);
      const dense = randomDense(4, 9, 24, dtype, rand, [9, 0, 3, 7]);
      const qd = quantize(dense, 'int8', { scales: 'document' });
      checkDocumentScales(dense, qd, `dense ${dtype}`);
      // padding slots stay zeros at scale 0
      for (let t = 3; t < 9; t++) assert.equal(qd.scales?.[2 * 9 + t], 0);
      const m = randomMatrix(5, 24, dtype, rand);
      checkDocumentScales(m, quantize(m, 'int8', { scales: 'document' }), `matrix ${dtype}`);
      // per token: hasDocumentScales is false once an item's tokens differ
      assert.equal(hasDocumentScales(quantize(ragged, 'int8', { scales: 'token' })), false);
    }
  });

  test('per-document values are the per-token rule applied with the document scale', () => {
    // token 0: max 127 (scale 1); token 1: max 2.5 (its own scale 2.5 / 127); as one document both take 1
    const m = tokenMatrix(new Float32Array([127, -3.5, 0, 2.5, -1.5, 0.5]), 2, 3);
    const q = quantize(m, 'int8', { scales: 'document' });
    assert.deepEqual(Array.from(q.scales ?? []), [1, 1]);
    assert.deepEqual(Array.from(q.data), [127, -4, 0, 2, -2, 0]); // half to even
    const zeros = quantize(tokenMatrix(new Float32Array(6), 2, 3), 'int8', { scales: 'document' });
    assert.deepEqual(Array.from(zeros.scales ?? []), [0, 0]);
  });

  test('the CPU int8 engine scores document-scaled batches like the reference', () => {
    const rand = rng(runSeed + 113);
    const docs = quantize(randomRagged([40, 1, 0, 130], 64, 'float32', rand), 'int8', { scales: 'document' });
    const queries = quantize(randomRagged([32, 5], 64, 'float32', rand), 'int8');
    checkInt8(queries, docs, cpuMaxsimInt8Sync(queries, docs), 'document scales');
  });

  test('bad options and items that share tokens are refused with named errors', () => {
    const m = tokenMatrix(new Float32Array(8), 2, 4);
    assert.throws(
      () => quantize(m, 'int8', { scales: 'item' as 'document' }),
      (e) =>
        e instanceof InvalidArgumentError && /options\.scales/.test(e.message) && /"item"/.test(e.message),
    );
    const overlapping: TokenBatch = {
      ...randomRagged([4, 4], 8, 'float32', rng(runSeed + 117)),
      starts: Float64Array.from([0, 2]),
    };
    assert.throws(
      () => quantize(overlapping, 'int8', { scales: 'document' }),
      (e) => e instanceof InvalidArgumentError && /items 0 and 1 overlapping/.test(e.message),
    );
    // per token, overlapping items are fine (every token has its own scale)
    assert.doesNotThrow(() => quantize(overlapping, 'int8'));
  });
});

function q8(x: TokenBatch): TokenBatch {
  return quantize(x, 'int8');
}

function checkInt8(queries: TokenBatch, docs: TokenBatch, got: Float32Array, context: string) {
  // The reference decodes int8 with its scales (decodeBatch64): the exact scores of the dequantized
  // values. The engine's only error is fp32 rounding.
  assertScoresClose(got, referenceMaxsim(queries, docs), scoreErrorBounds(queries, docs), context);
}

/** Why an int8 kernel set cannot be tested here (the CPU lacks it), or false. */
function lacks(isa: Int8Isa): string | false {
  return int8Isas.includes(isa)
    ? false
    : `${isa}: this CPU (or build) lacks it (usable: ${int8Isas.join(', ')})`;
}

describe(`int8 x int8 MaxSim on the CPU (seed ${runSeed}; kernels ${int8Isas.join(', ')})`, () => {
  // every kernel set, usable here or not (skipped by name), at tiny and awkward d; AMX only takes d % 64 == 0
  for (const d of [1, 3, 17, 31, 33, 64, 100, 128, 129]) {
    for (const isa of INT8_ISAS.filter((name) => name !== 'amx' || d % 64 === 0)) {
      test(`${isa} d=${d}: Lq 1 / 17 / 33 / 0, ragged and dense documents with empty ones, all pairs`, {
        skip: lacks(isa),
      }, async () => {
        const rand = rng(runSeed + 200 + d);
        const queries = q8(randomDense(4, 33, d, 'float32', rand, [1, 17, 33, 0]));
        const raggedQ = q8(randomRagged([33, 1, 17], d, 'float32', rand));
        const lengths = Array.from({ length: 21 }, (_, i) => (i % 6 === 2 ? 0 : 1 + Math.floor(rand() * 70)));
        const ragged = q8(randomRagged(lengths, d, 'float32', rand));
        const dense = q8(randomDense(9, 40, d, 'float32', rand, [40, 0, 1, 15, 16, 17, 31, 32, 33]));
        for (const [docsName, docs] of [
          ['ragged', ragged],
          ['dense', dense],
        ] as const) {
          for (const [qName, q] of [
            ['dense queries', queries],
            ['ragged queries', raggedQ],
          ] as const) {
            const ctx = `${isa} d=${d} ${qName} x ${docsName} docs`;
            checkInt8(q, docs, maxsimSync(q, docs, { isa }).data, `${ctx} (sync)`);
            checkInt8(q, docs, (await maxsim(q, docs, { isa, backend: 'cpu' })).data, `${ctx} (async)`);
            checkInt8(q, docs, maxsimSync(q, docs, { isa, threads: 1 }).data, `${ctx} (1 thread)`);
          }
          const one = batchItem(queries, 2);
          checkInt8(matrixAsBatch(one), docs, maxsimSync(one, docs, { isa }), `${isa} d=${d} one query`);
          checkInt8(
            matrixAsBatch(one),
            docs,
            await maxsim(one, docs, { isa }),
            `${isa} d=${d} one query async`,
          );
        }
      });
    }
  }

  // The kernel sets perform the same fp32 operations (engine_int8.h), so they agree bitwise; the
  // full int8 range (-128 too, which quantize() never makes) checks the exact int32 dot of each.
  for (const isa of INT8_ISAS.filter((name) => name !== 'portable')) {
    test(`${isa} agrees bitwise with portable: d 1..129, documents of 0 and 1 tokens, full int8 range`, {
      skip: lacks(isa),
    }, () => {
      const rand = rng(runSeed + 300);
      const dims = isa === 'amx' ? [64, 128, 192] : [1, 2, 3, 4, 5, 17, 31, 33, 64, 100, 128, 129];
      for (const d of dims) {
        const queries = q8(randomRagged([1, 16, 17, 32, 33, 0, 8, 9], d, 'float32', rand));
        const docs = q8(randomRagged([1, 0, 1, 15, 16, 31, 32, 33, 64, 100, 0, 13, 200], d, 'float32', rand));
        for (const x of [queries, docs])
          for (let i = 0; i < x.data.length; i++) if (rand() < 0.05) x.data[i] = rand() < 0.5 ? -128 : 127;
        const got = cpuMaxsimInt8Sync(queries, docs, { isa });
        const portable = cpuMaxsimInt8Sync(queries, docs, { isa: 'portable' });
        assert.deepEqual(Array.from(got), Array.from(portable), `${isa} d=${d}`);
        checkInt8(queries, docs, got, `${isa} d=${d} vs reference`);
        const threaded = cpuMaxsimInt8Sync(queries, docs, { isa, threads: 1 });
        assert.deepEqual(Array.from(threaded), Array.from(got), `${isa} d=${d}: 1 thread`);
      }
    });
  }

  test('auto runs the fastest usable set for the dimension (AMX only where d % 64 == 0)', () => {
    for (const d of [64, 100, 128]) {
      const want = cpuInt8IsaFor(d);
      assert.ok(int8Isas.includes(want));
      assert.ok(want !== 'amx' || d % 64 === 0, `d=${d}: ${want}`);
      const rand = rng(runSeed + 310 + d);
      const queries = q8(randomRagged([5, 32], d, 'float32', rand));
      const docs = q8(randomRagged([3, 0, 40], d, 'float32', rand));
      assert.deepEqual(
        Array.from(maxsimSync(queries, docs).data),
        Array.from(cpuMaxsimInt8Sync(queries, docs, { isa: want })),
        `d=${d}: auto is ${want}`,
      );
    }
    assert.equal(int8Isas.at(-1), 'portable');
  });

  test('int8 scores track fp32 scores of the same data (rank correlation)', () => {
    const rand = rng(runSeed + 400);
    const d = 128;
    const lengths = Array.from({ length: 200 }, () => 1 + Math.floor(rand() * 60));
    const docs = randomRagged(lengths, d, 'float32', rand);
    const query = randomMatrix(32, d, 'float32', rand);
    const f32 = maxsimSync(query, docs);
    const i8 = maxsimSync(quantize(query, 'int8'), quantize(docs, 'int8'));
    const rank = (a: Float32Array) => {
      const idx = Array.from(a.keys()).sort((x, y) => a[x] - a[y]);
      const r = new Float64Array(a.length);
      idx.forEach((v, i) => {
        r[v] = i;
      });
      return r;
    };
    const ra = rank(f32);
    const rb = rank(i8);
    const n = f32.length;
    let s = 0;
    for (let i = 0; i < n; i++) s += (ra[i] - rb[i]) ** 2;
    const spearman = 1 - (6 * s) / (n * (n * n - 1));
    assert.ok(spearman > 0.98, `Spearman ${spearman}`);
    // Each score sums Lq dot products whose quantization errors are independent and ~1/254 of the
    // components: the differences stay far below the spread of scores across documents.
    const spread = Math.max(...f32) - Math.min(...f32);
    let worst = 0;
    for (let i = 0; i < n; i++) worst = Math.max(worst, Math.abs(i8[i] - f32[i]));
    assert.ok(worst <= 0.05 * spread, `largest |int8 - fp32| ${worst} vs score spread ${spread}`);
  });

  test('empty batches give empty scores', () => {
    const rand = rng(runSeed + 500);
    const docs = q8(randomRagged([3], 64, 'float32', rand));
    const none = q8(randomRagged([], 64, 'float32', rand));
    assert.equal(maxsimSync(none, docs).data.length, 0);
    assert.equal(maxsimSync(docs, none).data.length, 0);
  });

  test('mixed dtypes, CUDA and non-int8 kernel sets are refused with named errors', async () => {
    const rand = rng(runSeed + 600);
    const f32Docs = randomRagged([2, 3], 64, 'float32', rand);
    const i8Docs = q8(f32Docs);
    const f32Q = randomMatrix(3, 64, 'float32', rand);
    const i8Q = quantize(f32Q, 'int8');
    const named = (re: RegExp) => (e: unknown) => e instanceof InvalidArgumentError && re.test(e.message);
    assert.throws(() => maxsimSync(i8Q, f32Docs), named(/query\.dtype.*'int8'/));
    assert.throws(() => maxsimSync(f32Q, i8Docs), named(/docs\.dtype.*'int8'/));
    await assert.rejects(maxsim(i8Q, f32Docs), named(/query\.dtype/));
    assert.throws(
      () => maxsimSync(matrixAsBatch(f32Q), i8Docs),
      named(/int8 scoring needs int8 queries and int8 documents/),
    );
    // int8 on CUDA: asynchronous only (like floats); without a GPU it says why CUDA is unavailable
    assert.throws(() => maxsimSync(i8Q, i8Docs, { backend: 'cuda' }), named(/synchronous/));
    if (cudaUnavailableReason())
      await assert.rejects(
        maxsim(i8Q, i8Docs, { backend: 'cuda' }),
        (e) => e instanceof BackendUnavailableError,
      );
    // a float-only kernel set name is refused for int8 inputs
    assert.throws(() => maxsimSync(i8Q, i8Docs, { isa: 'avx512' }), named(/isa/));
    // The binding re-checks: float inputs to the int8 entry are a TypeError, not a crash.
    assert.throws(() => cpuMaxsimInt8Sync(matrixAsBatch(f32Q), i8Docs), /Expected int8 tokens for queries/);
    if (hasAmx) {
      const q100 = quantize(randomMatrix(2, 100, 'float32', rand), 'int8');
      const d100 = q8(randomRagged([2], 100, 'float32', rand));
      assert.throws(() => maxsimSync(q100, d100, { isa: 'amx' }), /divisible by 64/);
    }
    // Float scoring is unchanged.
    assert.equal(maxsimSync(f32Q, f32Docs).length, 2);
    assert.equal(maxsimSync(f32Q, denseBatch(new Float32Array(64), { count: 1, length: 1, dim: 64 }))[0], 0);
  });
});
