// MaxSim training on CUDA against the CPU engine and the float64 reference: identical argmax (away
// from near-ties), scores within the fp32 bound (times the tensor-core factor of helpers.ts when the
// forward runs on tensor cores), gradients within fp32 rounding; the CSR and the atomic dD paths
// agree; the CSR path is bitwise identical on repeat; ragged, dense, empty documents, fp32 / fp16 /
// bf16 / mixed dtypes, and a high-contention case where every query token picks one of a few dominant
// document tokens. Both forward kernels (trainKernel 'mma' and 'simt') are forced on the shapes where
// the tensor-core one applies, including exact ties (duplicated document tokens: the lowest index must
// win). The backward's internal knobs change no value: document / query blocks of the CSR are bitwise
// equal to one block, int16 argmax storage to int32 (and documents past 32767 tokens use int32), a
// forward grid smaller than the pairs to the full one; dDPath 'auto' picks the atomic scatter or the
// CSR by contention; profiling reports every phase. Without a GPU every test skips with the reason.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { cudaStatus } from '../../src/backends/cuda.js';
import { decodeBatch64 } from '../../src/backends/reference.js';
import { referenceBackward, referenceMaxsimTrain } from '../../src/backends/reference-train.js';
import { InvalidArgumentError } from '../../src/errors.js';
import { decodeToFloat32, encodeFloats } from '../../src/floats.js';
import {
  contrastiveStep,
  type MaxsimTrainResult,
  maxsimTrain,
  maxsimTrainTuned,
  type TrainCudaTuning,
  type TrainDDPath,
  type TrainKernel,
  type TrainPairs,
} from '../../src/ops/train.js';
import { type FloatDType, raggedBatch, type TokenBatch } from '../../src/tensor.js';
import {
  assertGradClose,
  assertScoresClose,
  pairBounds,
  randomDense,
  randomFloats,
  randomRagged,
  rng,
  runSeed,
  scoreErrorBounds,
} from '../helpers.js';
import { bitsEqual, skip } from './helpers.js';

const device = Number(process.env.MAXSIM_TEST_DEVICE ?? 0);
/** The tensor-core forwards of this device: the wgmma one exists on compute capability 9.x only. */
const tensorKernels = (): ('mma' | 'wgmma')[] =>
  cudaStatus().devices?.[device]?.computeCapability[0] === 9 ? ['mma', 'wgmma'] : ['mma'];
const dtypes: FloatDType[] = ['float32', 'float16', 'bfloat16'];

function gpuTrain(
  q: TokenBatch,
  d: TokenBatch,
  pairs: TrainPairs,
  dDPath: TrainDDPath = 'csr',
  trainKernel: TrainKernel = 'auto',
) {
  return maxsimTrain(q, d, { pairs, backend: 'cuda', device, dDPath, trainKernel });
}

/** Whether the forward runs on tensor cores (the binding's MmaForwardApplies; the test GPUs are sm_80+). */
function usesMma(q: TokenBatch, d: TokenBatch, kernel: TrainKernel): boolean {
  const half = d.dtype === 'float16' || d.dtype === 'bfloat16';
  return kernel !== 'simt' && half && q.dtype === d.dtype && d.dim % 8 === 0 && d.dim >= 8 && d.dim <= 128;
}

/**
 * Score tolerance factors: vs the float64 reference, the fp32 bound times boundFactor of helpers.ts
 * for a tensor-core forward (4: truncating fp32 accumulation, reordered partial sums); vs the CPU
 * engine, the sum of both sides' bounds (the CUDA-core forward is normally bitwise equal to the CPU,
 * for which the historical factor 2 is kept).
 */
function scoreFactors(q: TokenBatch, d: TokenBatch, kernel: TrainKernel): { ref: number; cpu: number } {
  return usesMma(q, d, kernel) ? { ref: 4, cpu: 5 } : { ref: 1, cpu: 2 };
}

/** Every element outside the batch's real tokens is zero. */
function assertZeroOutside(grad: Float32Array, batch: TokenBatch, context: string) {
  const real = new Uint8Array(grad.length / batch.dim);
  for (let i = 0; i < batch.count; i++) real.fill(1, batch.starts[i], batch.starts[i] + batch.lengths[i]);
  for (let e = 0; e < grad.length; e++) {
    if (!real[Math.floor(e / batch.dim)]) assert.equal(grad[e], 0, `${context}: padding element ${e}`);
  }
}

/** Query token and document token indices of pair p (all: p = i * B + b; diagonal: p = i). */
function pairAt(p: number, docs: TokenBatch, pairs: TrainPairs): [number, number] {
  return pairs === 'all' ? [Math.floor(p / docs.count), p % docs.count] : [p, p];
}

/**
 * GPU argmax equals the CPU's wherever the reference margin exceeds `tie`; at a near-tie the GPU's
 * pick must still be a maximum up to `tie`. Returns how many entries were compared exactly.
 */
function checkArgmax(
  gpu: MaxsimTrainResult,
  cpu: MaxsimTrainResult,
  queries: TokenBatch,
  docs: TokenBatch,
  pairs: TrainPairs,
  context: string,
): number {
  const ref = referenceMaxsimTrain(queries, docs, pairs);
  assert.equal(gpu.argmaxStride, ref.stride, `${context}: stride`);
  assert.equal(gpu.argmax.length, cpu.argmax.length, `${context}: argmax length`);
  const qv = decodeBatch64(queries);
  const dv = decodeBatch64(docs);
  const d = docs.dim;
  const dotOf = (i: number, s: number, b: number, t: number) => {
    let acc = 0;
    const qo = (queries.starts[i] + s) * d;
    const dOff = (docs.starts[b] + t) * d;
    for (let k = 0; k < d; k++) acc += qv[qo + k] * dv[dOff + k];
    return acc;
  };
  let exact = 0;
  const stride = ref.stride;
  for (let e = 0; e < ref.argmax.length; e++) {
    const p = Math.floor(e / stride);
    const s = e % stride;
    const [i, b] = pairAt(p, docs, pairs);
    if (s >= queries.lengths[i] || docs.lengths[b] === 0) {
      assert.equal(gpu.argmax[e], -1, `${context}: slot ${e} must be -1`);
      continue;
    }
    const tie = 1e-4 * Math.max(1, Math.abs(dotOf(i, s, b, ref.argmax[e])));
    if (ref.margin[e] > tie) {
      assert.equal(gpu.argmax[e], cpu.argmax[e], `${context}: argmax ${e} vs CPU (seed ${runSeed})`);
      assert.equal(gpu.argmax[e], ref.argmax[e], `${context}: argmax ${e} vs reference (seed ${runSeed})`);
      exact++;
    } else {
      const t = gpu.argmax[e];
      assert.ok(t >= 0 && t < docs.lengths[b], `${context}: argmax ${e} = ${t} out of range`);
      const best = dotOf(i, s, b, ref.argmax[e]);
      // fp32 may order a near-tie either way; its pick is still a maximum up to rounding
      assert.ok(best - dotOf(i, s, b, t) <= 10 * tie, `${context}: argmax ${e} = ${t} is no near-maximum`);
    }
  }
  return exact;
}

/** Per-element bound for an fp32 atomic sum: (n + 1) u sum |terms|, n = sources of the row. */
function atomicBounds(
  queries: TokenBatch,
  docs: TokenBatch,
  argmax: Int32Array,
  stride: number,
  g: Float64Array,
  pairs: TrainPairs,
): Float64Array {
  const abs = (a: Float64Array) => a.map(Math.abs);
  const absSum = referenceBackward(queries, docs, argmax, stride, abs(g), pairs, {
    queries: abs(decodeBatch64(queries)),
    docs: abs(decodeBatch64(docs)),
  }).dD;
  const sources = new Float64Array(docs.data.length / docs.dim);
  for (let e = 0; e < argmax.length; e++) {
    const p = Math.floor(e / stride);
    const [i, b] = pairAt(p, docs, pairs);
    if (e % stride < queries.lengths[i] && argmax[e] >= 0 && g[p] !== 0)
      sources[docs.starts[b] + argmax[e]]++;
  }
  return absSum.map((v, idx) => (sources[Math.floor(idx / docs.dim)] + 2) * 2 ** -24 * v);
}

/** An atomic-path dD against the float64 reference, within atomicBounds (fp32 sums in any order). */
function assertAtomicClose(
  got: Float32Array,
  expected: ArrayLike<number>,
  bounds: Float64Array,
  context: string,
) {
  for (let e = 0; e < got.length; e++) {
    const err = Math.abs(got[e] - expected[e]);
    if (!(err <= bounds[e] + Math.abs(expected[e]) * 2 ** -23)) {
      assert.fail(
        `${context}: element ${e}: ${got[e]} vs ${expected[e]} (bound ${bounds[e]}, seed ${runSeed})`,
      );
    }
  }
}

async function compareWithCpu(
  queries: TokenBatch,
  docs: TokenBatch,
  pairs: TrainPairs,
  context: string,
  kernel: TrainKernel = 'auto',
) {
  const rand = rng(runSeed + 100);
  const factors = scoreFactors(queries, docs, kernel);
  const gpu = await gpuTrain(queries, docs, pairs, 'csr', kernel);
  const cpu = await maxsimTrain(queries, docs, { pairs, backend: 'cpu' });
  assert.equal(gpu.rows, cpu.rows);
  assert.equal(gpu.cols, cpu.cols);
  assert.equal(gpu.pairs, pairs);
  for (let p = 0; p < gpu.scores.length; p++) {
    assert.ok(!Number.isNaN(gpu.scores[p]), `${context}: score ${p} is NaN (never written)`);
  }
  const ref = referenceMaxsimTrain(queries, docs, pairs);
  const bounds = pairBounds(queries, docs, pairs);
  assertScoresClose(
    gpu.scores,
    ref.scores,
    bounds.map((b) => factors.ref * b),
    `${context} scores vs reference`,
  );
  assertScoresClose(
    gpu.scores,
    Float64Array.from(cpu.scores),
    bounds.map((b) => factors.cpu * b),
    `${context} scores vs CPU`,
  );
  const exact = checkArgmax(gpu, cpu, queries, docs, pairs, context);
  let live = 0;
  for (let p = 0; p < gpu.scores.length; p++) {
    const [i, b] = pairAt(p, docs, pairs);
    if (docs.lengths[b] > 0) live += queries.lengths[i];
  }
  assert.ok(exact >= live / 2, `${context}: only ${exact} of ${live} argmax entries compared exactly`);

  const g = Float64Array.from(randomFloats(gpu.scores.length, rand));
  const grads = await gpu.backward(g);
  assertZeroOutside(grads.dQ, queries, `${context} dQ`);
  assertZeroOutside(grads.dD, docs, `${context} dD`);
  // Against the float64 reference through the GPU's own argmax.
  const expected = referenceBackward(queries, docs, gpu.argmax, gpu.argmaxStride, g, pairs);
  assertGradClose(grads.dQ, expected.dQ, `${context} dQ vs reference`);
  assertGradClose(grads.dD, expected.dD, `${context} dD vs reference`);
  // Against the CPU engine fed the same argmax (the saved argmax is caller-visible).
  cpu.argmax.set(gpu.argmax);
  const cpuGrads = await cpu.backward(g);
  assertGradClose(grads.dQ, cpuGrads.dQ, `${context} dQ vs CPU`);
  assertGradClose(grads.dD, cpuGrads.dD, `${context} dD vs CPU`);

  // Repeat: forward and CSR backward are bitwise identical.
  const again = await gpuTrain(queries, docs, pairs, 'csr', kernel);
  assert.ok(bitsEqual(again.scores, gpu.scores), `${context}: scores differ on repeat`);
  assert.deepEqual(again.argmax, gpu.argmax, `${context}: argmax differs on repeat`);
  const grads2 = await again.backward(g);
  assert.ok(bitsEqual(grads2.dQ, grads.dQ), `${context}: dQ differs on repeat`);
  assert.ok(bitsEqual(grads2.dD, grads.dD), `${context}: dD differs on repeat (CSR must be deterministic)`);

  // The atomic dD path: same forward, same dQ, dD equal up to fp32 summation order.
  const atomic = await gpuTrain(queries, docs, pairs, 'atomic', kernel);
  assert.deepEqual(atomic.argmax, gpu.argmax, `${context}: argmax differs for the atomic run`);
  const gradsA = await atomic.backward(g);
  assert.ok(bitsEqual(gradsA.dQ, grads.dQ), `${context}: dQ differs between the dD paths`);
  assertZeroOutside(gradsA.dD, docs, `${context} atomic dD`);
  const aBounds = atomicBounds(queries, docs, gpu.argmax, gpu.argmaxStride, g, pairs);
  for (let e = 0; e < gradsA.dD.length; e++) {
    const err = Math.abs(gradsA.dD[e] - expected.dD[e]);
    if (!(err <= aBounds[e] + Math.abs(expected.dD[e]) * 2 ** -23)) {
      assert.fail(
        `${context}: atomic dD element ${e}: ${gradsA.dD[e]} vs reference ${expected.dD[e]} (bound ${aBounds[e]}, seed ${runSeed})`,
      );
    }
  }
  let dot = 0;
  let na = 0;
  let nc = 0;
  for (let e = 0; e < gradsA.dD.length; e++) {
    dot += gradsA.dD[e] * grads.dD[e];
    na += gradsA.dD[e] ** 2;
    nc += grads.dD[e] ** 2;
  }
  if (nc > 0) assert.ok(dot / Math.sqrt(na * nc) >= 0.99999, `${context}: atomic vs CSR dD cosine`);
  return { gpu, cpu, grads };
}

/**
 * Documents whose tokens 3 and 17 are large copies of one direction (plus noise): every query token,
 * which leans the same way, picks one of the two, so two rows per document collect nearly all sources.
 */
function contention(rand: () => number, nq: number, lq: number, nd: number, ld: number, d: number) {
  const qData = new Float32Array(nq * lq * d);
  for (let e = 0; e < qData.length; e++) qData[e] = 1 + 0.6 * (rand() - 0.5);
  const dData = randomFloats(nd * ld * d, rand);
  for (let b = 0; b < nd; b++) {
    for (const t of [3, 17]) {
      const o = (b * ld + t) * d;
      for (let k = 0; k < d; k++) dData[o + k] = 8 + 0.5 * (rand() - 0.5);
    }
  }
  const qOffsets = Array.from({ length: nq + 1 }, (_, i) => i * lq);
  const dOffsets = Array.from({ length: nd + 1 }, (_, b) => b * ld);
  return {
    queries: raggedBatch(qData, qOffsets, { dim: d }),
    docs: raggedBatch(dData, dOffsets, { dim: d }),
  };
}

/**
 * dD as the CSR path defines it, in float64 exactly as the GPU does it: each row's sources in
 * ascending (query, query token) order (pairs with g = 0 skipped), cut into chunks of `chunk` from
 * the first source; each chunk summed from +0 (w * x, then +); the chunk sums added in chunk order;
 * one rounding to fp32. With chunk >= every row's sources this is the plain sequential sum.
 */
function chunkedDD(
  queries: TokenBatch,
  docs: TokenBatch,
  argmax: Int32Array,
  stride: number,
  g: Float64Array,
  pairs: TrainPairs,
  chunk: number,
): Float32Array {
  const d = docs.dim;
  const qv = decodeBatch64(queries);
  const out = new Float32Array(docs.data.length);
  for (let j = 0; j < docs.count; j++) {
    const ld = docs.lengths[j];
    if (ld <= 0) continue;
    const lists: number[][] = Array.from({ length: ld }, () => []);
    const [iBegin, iEnd] = pairs === 'all' ? [0, queries.count] : [j, j + 1];
    for (let i = iBegin; i < iEnd; i++) {
      const p = pairs === 'all' ? i * docs.count + j : i;
      if (g[p] === 0) continue;
      for (let s = 0; s < queries.lengths[i]; s++) {
        const t = argmax[p * stride + s];
        if (t >= 0 && t < ld) lists[t].push(g[p], (queries.starts[i] + s) * d);
      }
    }
    for (let t = 0; t < ld; t++) {
      const src = lists[t];
      const n = src.length / 2;
      if (n === 0) continue;
      const total = new Float64Array(d);
      for (let c0 = 0; c0 < n; c0 += chunk) {
        const part = new Float64Array(d);
        for (let e = c0; e < Math.min(n, c0 + chunk); e++) {
          const w = src[2 * e];
          const o = src[2 * e + 1];
          for (let k = 0; k < d; k++) part[k] += w * qv[o + k];
        }
        for (let k = 0; k < d; k++) total[k] = c0 === 0 ? part[k] : total[k] + part[k];
      }
      const row = (docs.starts[j] + t) * d;
      for (let k = 0; k < d; k++) out[row + k] = total[k];
    }
  }
  return out;
}

describe(`CUDA MaxSim training vs the CPU engine (seed ${runSeed})`, { skip }, () => {
  for (const dtype of dtypes) {
    test(`${dtype}: ragged queries and documents (with empty ones), all pairs and diagonal`, async () => {
      const rand = rng(runSeed + 1);
      const d = 48;
      const queries = randomRagged([5, 17, 1, 32, 9, 0], d, dtype, rand);
      const docs = randomRagged([30, 3, 70, 1, 0, 45], d, dtype, rand);
      await compareWithCpu(queries, docs, 'all', `${dtype} ragged all`);
      await compareWithCpu(queries, docs, 'diagonal', `${dtype} ragged diagonal`);
    });

    test(`${dtype}: dense padded batches, empty documents and queries`, async () => {
      const rand = rng(runSeed + 2);
      const d = 33;
      const queries = randomDense(4, 12, d, dtype, rand, [12, 3, 0, 7]);
      const docs = randomDense(6, 80, d, dtype, rand, [80, 0, 1, 65, 0, 20]);
      const { gpu } = await compareWithCpu(queries, docs, 'all', `${dtype} dense all`);
      for (const b of [1, 4]) {
        for (let i = 0; i < 4; i++) {
          assert.equal(gpu.scores[i * 6 + b], Number.NEGATIVE_INFINITY, `empty document ${b}`);
          const slots = gpu.argmax.subarray((i * 6 + b) * 12, (i * 6 + b + 1) * 12);
          assert.ok(
            slots.every((t) => t === -1),
            `empty document ${b}: argmax must be -1`,
          );
        }
      }
    });
  }

  test('mixed dtypes: float32 queries, bfloat16 and float16 documents', async () => {
    const rand = rng(runSeed + 3);
    const queries = randomRagged([7, 20, 3], 40, 'float32', rand);
    for (const dtype of ['bfloat16', 'float16'] as const) {
      const docs = randomRagged([25, 0, 60, 9], 40, dtype, rand);
      await compareWithCpu(queries, docs, 'all', `float32 x ${dtype}`);
    }
  });

  test('long documents and wide tokens (d = 1, 300), more document tokens than a warp', async () => {
    const rand = rng(runSeed + 4);
    for (const d of [1, 300]) {
      const queries = randomRagged([40, 8, 33], d, 'float32', rand);
      const docs = randomRagged([300, 129, 0, 64], d, 'float32', rand);
      await compareWithCpu(queries, docs, 'all', `long d=${d}`);
    }
  });

  test('high contention: every query token picks one of two dominant tokens per document', async () => {
    const rand = rng(runSeed + 5);
    for (const dtype of dtypes) {
      const c = contention(rand, 48, 40, 6, 50, 64);
      const queries = {
        ...c.queries,
        dtype,
        data: encodeFloats(c.queries.data as Float32Array, dtype),
      } as TokenBatch;
      const docs = { ...c.docs, dtype, data: encodeFloats(c.docs.data as Float32Array, dtype) } as TokenBatch;
      const { gpu } = await compareWithCpu(queries, docs, 'all', `contention ${dtype}`);
      let dominant = 0;
      let valid = 0;
      for (const t of gpu.argmax) {
        if (t < 0) continue;
        valid++;
        if (t === 3 || t === 17) dominant++;
      }
      assert.equal(dominant, valid, `contention ${dtype}: every argmax should be token 3 or 17`);
    }
  });

  test('contrastiveStep on CUDA matches the CPU', async () => {
    const rand = rng(runSeed + 6);
    const queries = randomRagged([12, 5, 30, 8], 64, 'bfloat16', rand);
    const docs = randomRagged([40, 0, 17, 90, 33], 64, 'bfloat16', rand);
    const labels = new Int32Array([0, 2, 3, 4]);
    const gpu = await contrastiveStep(queries, docs, { labels, backend: 'cuda', device, temperature: 0.2 });
    const cpu = await contrastiveStep(queries, docs, { labels, backend: 'cpu', temperature: 0.2 });
    // bf16, d = 64: the forward runs on tensor cores ('auto'), so scores differ from the CPU's within
    // the bound; the mean cross-entropy moves by at most 2 max |score error| / temperature.
    const factors = scoreFactors(queries, docs, 'auto');
    const bounds = scoreErrorBounds(queries, docs).map((b) => factors.cpu * b);
    let scoreSlack = 0;
    for (let p = 0; p < bounds.length; p++) {
      if (Number.isFinite(cpu.scores[p]))
        scoreSlack = Math.max(scoreSlack, bounds[p] + Math.abs(cpu.scores[p]) * 2 ** -23);
    }
    const lossTol = 1e-5 * Math.max(1, Math.abs(cpu.loss)) + (factors.ref > 1 ? (2 * scoreSlack) / 0.2 : 0);
    assert.ok(
      Math.abs(gpu.loss - cpu.loss) <= lossTol,
      `loss ${gpu.loss} vs ${cpu.loss} (tolerance ${lossTol})`,
    );
    assertScoresClose(gpu.scores, Float64Array.from(cpu.scores), bounds, 'contrastive scores');
    if (factors.ref > 1) {
      // The tensor-core forward's scores differ from the CPU's (within `bounds`), and the loss
      // gradient dScores = (softmax(s / T) - target) / Nq moves with them by at most 2 max|ds| / T per
      // entry; each gradient element sums B such entries times a token value (at most max|x|).
      const maxAbs = (x: TokenBatch) =>
        decodeToFloat32(x.data, x.dtype, x.dim).reduce((m, v) => Math.max(m, Math.abs(v)), 0);
      const slack = (B: number, x: TokenBatch) => (B * 2 * scoreSlack * maxAbs(x)) / 0.2;
      const close = (got: Float32Array, ref: Float32Array, extra: number, what: string) => {
        for (let i = 0; i < ref.length; i++) {
          const tol = Math.abs(ref[i]) * 2 ** -22 + extra;
          assert.ok(
            Math.abs(got[i] - ref[i]) <= tol,
            `${what}[${i}]: ${got[i]} vs ${ref[i]} (tolerance ${tol})`,
          );
        }
      };
      close(gpu.dQ, cpu.dQ, slack(docs.count, docs), 'contrastive dQ');
      close(gpu.dD, cpu.dD, slack(queries.count, queries), 'contrastive dD');
    } else {
      assertGradClose(gpu.dQ, cpu.dQ, 'contrastive dQ');
      assertGradClose(gpu.dD, cpu.dD, 'contrastive dD');
    }
  });

  for (const dtype of ['float16', 'bfloat16'] as const) {
    test(`${dtype}: forced tensor-core and CUDA-core forwards, ragged edges (Lq, Ld off the tiles, d = 8, 40, 128)`, async () => {
      const rand = rng(runSeed + 8);
      for (const d of [8, 40, 128]) {
        // query lengths around 16 / 32 and past 4 slices (a second pass); document lengths around
        // the 64-token tile; empty items of both kinds
        const queries = randomRagged([1, 15, 16, 17, 31, 0, 33, 130, 200], d, dtype, rand);
        const docs = randomRagged([1, 63, 64, 0, 65, 130, 7, 200], d, dtype, rand);
        for (const kernel of [...tensorKernels(), 'simt'] as const) {
          const ctx = `${dtype} d=${d} ${kernel}`;
          await compareWithCpu(queries, docs, 'all', `${ctx} all`, kernel);
          if (kernel === 'wgmma') continue; // all pairs only
          const diag = randomRagged([3, 0, 40, 129], d, dtype, rand);
          const diagDocs = randomRagged([70, 5, 0, 64], d, dtype, rand);
          await compareWithCpu(diag, diagDocs, 'diagonal', `${ctx} diagonal`, kernel);
        }
        // the two kernels agree wherever the CPU's margin is clear (checked above against the CPU)
        const m = await gpuTrain(queries, docs, 'all', 'csr', 'mma');
        const c = await gpuTrain(queries, docs, 'all', 'csr', 'simt');
        assert.equal(m.argmax.length, c.argmax.length);
        for (let e = 0; e < m.argmax.length; e++) {
          assert.equal(m.argmax[e] === -1, c.argmax[e] === -1, `${dtype} d=${d}: slot ${e} -1 pattern`);
        }
      }
    });

    test(`${dtype}: exact ties (duplicated document tokens) go to the lowest index on both kernels`, async () => {
      const rand = rng(runSeed + 9);
      const d = 64;
      const queries = randomRagged([37, 5, 100], d, dtype, rand);
      // document b repeats its first `period` tokens: equal inputs give bitwise equal dot products, so
      // the maximum is attained at t, t + period, ... and the lowest index (< period) must win,
      // within a lane, across the quad's lanes, across n8 blocks and across 64-token tiles.
      const periods = [1, 2, 5, 8, 65, 3];
      const lengths = [150, 40, 129, 64, 140, 0];
      const dLen = lengths.reduce((x, y) => x + y, 0);
      const base = randomRagged([dLen], d, 'float32', rand).data as Float32Array;
      const data = new Float32Array(dLen * d);
      const offsets = [0];
      for (let b = 0; b < lengths.length; b++) {
        const o = offsets[b];
        for (let t = 0; t < lengths[b]; t++) {
          const src = o + (t % periods[b]);
          data.set(base.subarray(src * d, src * d + d), (o + t) * d);
        }
        offsets.push(o + lengths[b]);
      }
      const f32 = raggedBatch(data, offsets, { dim: d });
      const docs = { ...f32, dtype, data: encodeFloats(f32.data as Float32Array, dtype) } as TokenBatch;
      const cpu = await maxsimTrain(queries, docs, { pairs: 'all', backend: 'cpu' });
      for (const kernel of [...tensorKernels(), 'simt'] as const) {
        const gpu = await gpuTrain(queries, docs, 'all', 'csr', kernel);
        const stride = gpu.argmaxStride;
        for (let e = 0; e < gpu.argmax.length; e++) {
          const p = Math.floor(e / stride);
          const [i, b] = pairAt(p, docs, 'all');
          const s = e % stride;
          if (s >= queries.lengths[i] || docs.lengths[b] === 0) {
            assert.equal(gpu.argmax[e], -1, `${dtype} ${kernel}: slot ${e} must be -1`);
            continue;
          }
          const t = gpu.argmax[e];
          assert.ok(
            t >= 0 && t < Math.min(periods[b], docs.lengths[b]),
            `${dtype} ${kernel}: slot ${e}: ${t} is not the lowest tied index (period ${periods[b]})`,
          );
          if (periods[b] === 1) assert.equal(t, 0);
          if (kernel === 'simt') assert.equal(t, cpu.argmax[e], `${dtype} simt: slot ${e} vs CPU`);
        }
        // (compareWithCpu would find no clear margin here: every slot is an exact tie)
        const factor = scoreFactors(queries, docs, kernel).ref;
        assertScoresClose(
          gpu.scores,
          referenceMaxsimTrain(queries, docs, 'all').scores,
          scoreErrorBounds(queries, docs).map((x) => factor * x),
          `${dtype} ties ${kernel} scores`,
        );
      }
    });
  }

  test('the wgmma forward (sm_90) equals the mma.sync forward bit for bit: scores, argmax, gradients', async (t) => {
    if (cudaStatus().devices?.[device]?.computeCapability[0] !== 9) {
      t.skip('the wgmma forward runs on compute capability 9.x only');
      return;
    }
    const rand = rng(runSeed + 12);
    const range = (n: number, f: (i: number) => number) => Array.from({ length: n }, (_, i) => f(i));
    const cases: [string, number[], number[], number][] = [
      // slabs spanning several queries, partial tiles, empty items of both kinds
      ['ragged', [1, 15, 16, 17, 31, 0, 33, 130, 200, 257], [1, 127, 128, 0, 129, 300, 7, 1030], 128],
      ['d = 40', [40, 0, 77], [64, 200, 0, 3], 40],
      ['d = 8', [3, 19], [5, 130], 8],
      // a query's slots take 1 MB: two launches of 64 queries, best[] reused
      ['query chunks', range(80, (i) => 1000 + (i % 25)), range(256, (i) => 100 + ((i * 37) % 300)), 128],
      // few slabs and many documents: documents dealt into groups
      ['document groups', [32, 20], range(3000, (i) => 1 + ((i * 13) % 150)), 64],
    ];
    for (const dtype of ['float16', 'bfloat16'] as const) {
      for (const [name, ql, dl, d] of cases) {
        const ctx = `${dtype} ${name}`;
        const queries = randomRagged(ql, d, dtype, rand);
        const docs = randomRagged(dl, d, dtype, rand);
        const w = await gpuTrain(queries, docs, 'all', 'csr', 'wgmma');
        const m = await gpuTrain(queries, docs, 'all', 'csr', 'mma');
        assert.ok(bitsEqual(w.scores, m.scores), `${ctx}: scores`);
        assert.equal(w.argmaxStride, m.argmaxStride);
        assert.deepEqual(w.argmax, m.argmax, `${ctx}: argmax`);
        // the cp.async twin of the (default) TMA producer
        const c = await maxsimTrainTuned(queries, docs, {
          pairs: 'all',
          backend: 'cuda',
          device,
          trainKernel: 'wgmma',
          cudaTuning: { forwardTma: false },
        });
        assert.ok(bitsEqual(c.scores, m.scores), `${ctx}: cp.async scores`);
        assert.deepEqual(c.argmax, m.argmax, `${ctx}: cp.async argmax`);
        c.dispose();
        const g = Float64Array.from(randomFloats(w.scores.length, rand));
        const gw = await w.backward(g);
        const gm = await m.backward(g);
        assert.ok(bitsEqual(gw.dQ, gm.dQ), `${ctx}: dQ`);
        assert.ok(bitsEqual(gw.dD, gm.dD), `${ctx}: dD`);
      }
    }
    // where it does not apply, a forced wgmma is refused naming the option
    const q16 = randomRagged([2, 3], 16, 'float16', rand);
    await assert.rejects(
      maxsimTrain(q16, q16, { pairs: 'diagonal', backend: 'cuda', device, trainKernel: 'wgmma' }),
      (e: unknown) =>
        e instanceof InvalidArgumentError && e.argument === 'trainKernel' && /pairs 'all'/.test(e.message),
    );
  });

  test('trainKernel: bad values and a forced tensor-core forward where it does not apply are refused', async () => {
    const rand = rng(runSeed + 10);
    const q32 = randomRagged([2, 3], 16, 'float32', rand);
    const d32 = randomRagged([2, 3, 4], 16, 'float32', rand);
    await assert.rejects(
      maxsimTrain(q32, d32, { backend: 'cuda', device, trainKernel: 'tensor' as TrainKernel }),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'trainKernel',
    );
    await assert.rejects(
      maxsimTrain(q32, d32, { backend: 'cuda', device, trainKernel: 'mma' }),
      /trainKernel 'mma'/,
    );
    const q16 = randomRagged([2, 3], 12, 'float16', rand);
    const d16 = randomRagged([2, 3, 4], 12, 'float16', rand);
    await assert.rejects(
      maxsimTrain(q16, d16, { backend: 'cuda', device, trainKernel: 'mma' }),
      /trainKernel 'mma'/,
    );
    const qb = randomRagged([2, 3], 16, 'bfloat16', rand);
    const df = randomRagged([2, 3, 4], 16, 'float16', rand);
    await assert.rejects(
      maxsimTrain(qb, df, { backend: 'cuda', device, trainKernel: 'mma' }),
      /trainKernel 'mma'/,
    );
    // 'auto' and 'simt' run everywhere
    await compareWithCpu(q16, d16, 'all', 'float16 d=12 auto');
    await compareWithCpu(qb, df, 'all', 'bf16 x f16 auto');
  });

  test('more documents than a warp: dQ walks them 32 at a time (vs the CPU and float64)', async () => {
    const rand = rng(runSeed + 11);
    const lengths = Array.from({ length: 70 }, (_, b) => (b % 9 === 4 ? 0 : 1 + ((b * 37) % 50)));
    const queries = randomRagged([9, 0, 33, 4, 70], 40, 'bfloat16', rand);
    const docs = randomRagged(lengths, 40, 'bfloat16', rand);
    await compareWithCpu(queries, docs, 'all', 'many documents');
    await compareWithCpu(
      queries,
      randomRagged([5, 64, 0, 31, 2], 40, 'bfloat16', rand),
      'diagonal',
      'diag 5',
    );
  });

  test('blocked dD (document blocks x query blocks) is bitwise equal to the unblocked CSR', async () => {
    const rand = rng(runSeed + 12);
    const tunings: TrainCudaTuning[] = [
      {},
      { docBlock: 1 },
      { docBlock: 3 },
      { docBlock: 4, queryBlock: 3 },
      { queryBlock: 2 },
      { docBlock: 2, queryBlock: 1 },
      // the warp-per-unit count and placement against the block-wide one (the default)
      { csrBlockWalk: false },
      { csrBlockWalk: false, docBlock: 3, queryBlock: 2 },
    ];
    const check = async (queries: TokenBatch, docs: TokenBatch, pairs: TrainPairs, context: string) => {
      // one document block and one query block: the CSR of the first version
      const whole = { docBlock: docs.count, queryBlock: queries.count };
      const base = await maxsimTrainTuned(queries, docs, {
        pairs,
        backend: 'cuda',
        device,
        cudaTuning: whole,
      });
      const g = Float64Array.from(randomFloats(base.scores.length, rand));
      g[0] = 0; // a pair without gradient is skipped by every walk
      const ref = await base.backward(g);
      assert.equal(ref.dDPath, 'csr');
      const expected = referenceBackward(queries, docs, base.argmax, base.argmaxStride, g, pairs);
      assertGradClose(ref.dQ, expected.dQ, `${context} dQ vs reference`);
      assertGradClose(ref.dD, expected.dD, `${context} dD vs reference`);
      for (const cudaTuning of tunings) {
        const t = await maxsimTrainTuned(queries, docs, { pairs, backend: 'cuda', device, cudaTuning });
        assert.deepEqual(t.argmax, base.argmax, `${context} ${JSON.stringify(cudaTuning)}: argmax`);
        const got = await t.backward(g);
        const tag = `${context} ${JSON.stringify(cudaTuning)}`;
        assert.ok(bitsEqual(got.dD, ref.dD), `${tag}: dD differs from the unblocked CSR (seed ${runSeed})`);
        assert.ok(bitsEqual(got.dQ, ref.dQ), `${tag}: dQ differs (seed ${runSeed})`);
      }
    };
    for (const dtype of ['float32', 'float16'] as const) {
      // 11 documents (not a multiple of 2, 3 or 4), empty ones at a block's start and end
      const queries = randomRagged([12, 0, 40, 7, 33, 1, 19], 24, dtype, rand);
      const docs = randomRagged([0, 30, 5, 64, 1, 0, 47, 20, 9, 33, 0], 24, dtype, rand);
      await check(queries, docs, 'all', `${dtype} ragged all`);
      await check(
        queries,
        randomRagged([3, 50, 0, 8, 1, 70, 26], 24, dtype, rand),
        'diagonal',
        `${dtype} diagonal`,
      );
    }
    // rows with hundreds of sources spread over several query blocks
    const c = contention(rand, 37, 40, 7, 50, 32);
    await check(c.queries, c.docs, 'all', 'contention');
    // documents at and past the block walk's limit (MAXSIM_TRAIN_WALK_MAX_LENGTH = 3072): the first
    // takes the warp walk, the last the block walk with the most shared memory (196,608 bytes)
    await check(
      randomRagged([9, 1, 30], 8, 'float16', rand),
      randomRagged([3073, 30, 0, 3072], 8, 'float16', rand),
      'all',
      'documents at the block walk limit',
    );
  });

  test('int16 and int32 argmax storage give identical results; long documents use int32', async () => {
    const rand = rng(runSeed + 13);
    const queries = randomRagged([20, 3, 0, 45], 16, 'float16', rand);
    const docs = randomRagged([100, 0, 7, 300], 16, 'float16', rand);
    const g = Float64Array.from(randomFloats(16, rand));
    const run = async (argmaxBits: 16 | 32, dDPath: TrainDDPath) => {
      const t = await maxsimTrainTuned(queries, docs, {
        backend: 'cuda',
        device,
        dDPath,
        cudaTuning: { argmaxBits },
      });
      return { t, grads: await t.backward(g) };
    };
    const a16 = await run(16, 'csr');
    const a32 = await run(32, 'csr');
    assert.deepEqual(a16.t.argmax, a32.t.argmax, 'argmax');
    assert.ok(bitsEqual(a16.t.scores, a32.t.scores), 'scores');
    assert.ok(bitsEqual(a16.grads.dQ, a32.grads.dQ), 'dQ');
    assert.ok(bitsEqual(a16.grads.dD, a32.grads.dD), 'dD');
    const atomic16 = await run(16, 'atomic');
    assert.equal(atomic16.grads.dDPath, 'atomic');
    assert.ok(bitsEqual(atomic16.grads.dQ, a32.grads.dQ), 'atomic int16 dQ');
    assertAtomicClose(
      atomic16.grads.dD,
      referenceBackward(queries, docs, a32.t.argmax, a32.t.argmaxStride, g, 'all').dD,
      atomicBounds(queries, docs, a32.t.argmax, a32.t.argmaxStride, g, 'all'),
      'atomic int16 dD',
    );

    // A document of 33,000 tokens whose last tokens win every max: indices past int16.
    const d = 8;
    const data = randomFloats(33005 * d, rand);
    for (let e = 32768 * d; e < 33000 * d; e++) data[e] *= 3;
    const longDocs = raggedBatch(data, [0, 33000, 33005], { dim: d });
    const q = randomRagged([6, 2], d, 'float32', rand);
    const { gpu } = await compareWithCpu(q, longDocs, 'all', 'document of 33000 tokens');
    assert.ok(
      gpu.argmax.some((t) => t >= 32768),
      'some argmax entries must be past 32767',
    );
    await assert.rejects(
      maxsimTrainTuned(q, longDocs, { backend: 'cuda', device, cudaTuning: { argmaxBits: 16 } }),
      (e: unknown) =>
        e instanceof InvalidArgumentError &&
        e.argument === 'cudaTuning.argmaxBits' &&
        /16 with a document of 33000/.test(e.message),
    );
  });

  test('a forward grid smaller than the pairs (CTAs stride over pairs, reusing their scratch) is bitwise equal', async () => {
    const rand = rng(runSeed + 15);
    for (const dtype of ['float16', 'float32'] as const) {
      // float16, d = 64: the tensor-core forward; float32: the CUDA-core one. Empty items of both kinds.
      const queries = randomRagged([40, 0, 7, 130, 33, 1], 64, dtype, rand);
      const docs = randomRagged([65, 3, 0, 128, 20, 1, 90, 0, 31], 64, dtype, rand);
      for (const pairs of ['all', 'diagonal'] as const) {
        const d = pairs === 'all' ? docs : randomRagged([5, 70, 0, 64, 2, 129], 64, dtype, rand);
        const base = await maxsimTrain(queries, d, { pairs, backend: 'cuda', device });
        for (const forwardGrid of [1, 2, 5]) {
          const t = await maxsimTrainTuned(queries, d, {
            pairs,
            backend: 'cuda',
            device,
            cudaTuning: { forwardGrid },
          });
          const tag = `${dtype} ${pairs} forwardGrid ${forwardGrid}`;
          assert.ok(bitsEqual(t.scores, base.scores), `${tag}: scores`);
          assert.deepEqual(t.argmax, base.argmax, `${tag}: argmax`);
        }
      }
    }
  });

  test('profiling reports every phase and changes no result', async () => {
    const rand = rng(runSeed + 16);
    const queries = randomRagged([30, 2, 64], 32, 'float16', rand);
    const docs = randomRagged([50, 0, 100, 7], 32, 'float16', rand);
    const g = Float64Array.from(randomFloats(12, rand));
    const plain = await maxsimTrain(queries, docs, { backend: 'cuda', device });
    const prof = await maxsimTrainTuned(queries, docs, {
      backend: 'cuda',
      device,
      cudaTuning: { profile: true },
    });
    assert.equal(plain.profileMs, undefined);
    assert.deepEqual(Object.keys(prof.profileMs ?? {}).sort(), [
      'download',
      'forwardKernel',
      'forwardWait',
      'upload',
    ]);
    assert.deepEqual(prof.argmax, plain.argmax);
    assert.ok(bitsEqual(prof.scores, plain.scores));
    const a = await plain.backward(g);
    const b = await prof.backward(g);
    assert.equal(a.profileMs, undefined);
    const phases = b.profileMs ?? {};
    assert.deepEqual(Object.keys(phases).sort(), [
      'dD',
      'dDBuild',
      'dDGather',
      'dQ',
      'download',
      'kernelsWait',
      'uploadArgmax',
      'uploadTokens',
    ]);
    for (const [name, ms] of Object.entries(phases))
      assert.ok(Number.isFinite(ms) && ms >= 0, `${name}: ${ms}`);
    // the CSR's parts (summed over its document blocks) lie within the whole dD
    assert.ok(phases.dDBuild + phases.dDGather <= phases.dD * 1.01 + 0.01, JSON.stringify(phases));
    assert.ok(bitsEqual(a.dQ, b.dQ) && bitsEqual(a.dD, b.dD), 'profiled gradients differ');
  });

  test("dDPath 'auto': atomic where rows collect few sources, the CSR under contention", async () => {
    const rand = rng(runSeed + 14);
    // one query of 2 tokens: at most 2 sources per document, so rows with sources >= half the sources
    const q = randomRagged([2], 32, 'float32', rand);
    const d = randomRagged([200, 150], 32, 'float32', rand);
    const f = await maxsimTrain(q, d, { backend: 'cuda', device, dDPath: 'auto' });
    const g = new Float64Array([0.7, -0.4]);
    const auto = await f.backward(g);
    assert.equal(auto.dDPath, 'atomic');
    const expected = referenceBackward(q, d, f.argmax, f.argmaxStride, g, 'all');
    assertGradClose(auto.dQ, expected.dQ, 'auto dQ');
    assertAtomicClose(
      auto.dD,
      expected.dD,
      atomicBounds(q, d, f.argmax, f.argmaxStride, g, 'all'),
      'auto dD',
    );
    // every query token on one of two rows per document: the CSR, bitwise equal to dDPath 'csr'
    const c = contention(rand, 48, 40, 6, 50, 64);
    const fc = await maxsimTrain(c.queries, c.docs, { backend: 'cuda', device, dDPath: 'auto' });
    const gc = Float64Array.from(randomFloats(fc.scores.length, rand));
    const autoC = await fc.backward(gc);
    assert.equal(autoC.dDPath, 'csr');
    const csr = await (await maxsimTrain(c.queries, c.docs, { backend: 'cuda', device })).backward(gc);
    assert.equal(csr.dDPath, 'csr');
    assert.ok(bitsEqual(autoC.dD, csr.dD), "'auto' (CSR) vs 'csr' dD");
    assert.ok(bitsEqual(autoC.dQ, csr.dQ), "'auto' (CSR) vs 'csr' dQ");
  });

  test('split dD rows (csrChunk) are bitwise equal to the chunked float64 sum, deterministic, blocking-free', async () => {
    const rand = rng(runSeed + 21);
    const c = contention(rand, 48, 40, 6, 50, 64); // ~960 sources on each hot row
    const half = (b: TokenBatch, dtype: FloatDType) =>
      ({ ...b, dtype, data: encodeFloats(b.data as Float32Array, dtype) }) as TokenBatch;
    const cases: [string, TokenBatch, TokenBatch, TrainPairs][] = [
      ['contention float32', c.queries, c.docs, 'all'],
      ['contention float16', half(c.queries, 'float16'), half(c.docs, 'float16'), 'all'],
      // d = 300: three column slices of the split passes; 3 documents of 5-9 tokens: rows of ~100 sources
      [
        'ragged bfloat16 d = 300',
        randomRagged([40, 0, 33, 57, 21], 300, 'bfloat16', rand),
        randomRagged([9, 5, 0, 7], 300, 'bfloat16', rand),
        'all',
      ],
      [
        'diagonal',
        randomDense(3, 200, 64, 'float32', rand),
        randomDense(3, 4, 64, 'float32', rand),
        'diagonal',
      ],
    ];
    for (const [name, queries, docs, pairs] of cases) {
      let g: Float64Array | undefined;
      let unsplit: Float32Array | undefined;
      for (const csrChunk of [2 ** 30, 32, 33, 100, 0]) {
        const cudaTuning: TrainCudaTuning = { csrChunk };
        const t = await maxsimTrainTuned(queries, docs, { pairs, backend: 'cuda', device, cudaTuning });
        g ??= Float64Array.from(randomFloats(t.scores.length, rand));
        const grads = await t.backward(g);
        assert.equal(grads.dDPath, 'csr');
        const tag = `${name} csrChunk ${csrChunk} (seed ${runSeed})`;
        const model = chunkedDD(queries, docs, t.argmax, t.argmaxStride, g, pairs, csrChunk || 512);
        for (let e = 0; e < model.length; e++) {
          if (!Object.is(grads.dD[e], model[e])) {
            assert.fail(`${tag}: dD element ${e}: ${grads.dD[e]} vs the chunked model ${model[e]}`);
          }
        }
        const again = await t.backward(g);
        assert.ok(bitsEqual(again.dD, grads.dD), `${tag}: dD differs on repeat`);
        // the blocking never moves a chunk boundary (chunks start at each row's first source)
        const blocked = await maxsimTrainTuned(queries, docs, {
          pairs,
          backend: 'cuda',
          device,
          cudaTuning: { csrChunk, docBlock: 1, queryBlock: 2 },
        });
        assert.deepEqual(blocked.argmax, t.argmax, `${tag}: blocked argmax`);
        assert.ok(bitsEqual((await blocked.backward(g)).dD, grads.dD), `${tag}: blocked dD`);
        // split or not, the same gradient up to fp32 rounding, and the float64 reference
        unsplit ??= grads.dD;
        assertGradClose(grads.dD, unsplit, `${tag}: vs unsplit`);
        const expected = referenceBackward(queries, docs, t.argmax, t.argmaxStride, g, pairs);
        assertGradClose(grads.dD, expected.dD, `${tag}: vs reference`);
        assertGradClose(grads.dQ, expected.dQ, `${tag}: dQ vs reference`);
      }
    }
    // the atomic path agrees with the split CSR (fp32 sums in any order)
    const t = await maxsimTrain(c.queries, c.docs, { backend: 'cuda', device, dDPath: 'atomic' });
    const g = Float64Array.from(randomFloats(t.scores.length, rand));
    const atomic = await t.backward(g);
    assert.equal(atomic.dDPath, 'atomic');
    const split = await (
      await maxsimTrainTuned(c.queries, c.docs, { backend: 'cuda', device, cudaTuning: { csrChunk: 32 } })
    ).backward(g);
    const expected = referenceBackward(c.queries, c.docs, t.argmax, t.argmaxStride, g, 'all');
    assertGradClose(split.dD, expected.dD, 'split csr vs reference');
    assertAtomicClose(
      atomic.dD,
      expected.dD,
      atomicBounds(c.queries, c.docs, t.argmax, t.argmaxStride, g, 'all'),
      'atomic vs reference',
    );
  });

  test('bad options are refused with errors that name the argument', async () => {
    const rand = rng(runSeed + 7);
    const queries = randomRagged([2, 3], 8, 'float32', rand);
    const docs = randomRagged([2, 3, 4], 8, 'float32', rand);
    await assert.rejects(
      maxsimTrain(queries, docs, { backend: 'cuda', dDPath: 'sorted' as TrainDDPath }),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'dDPath',
    );
    await assert.rejects(
      maxsimTrain(queries, docs, { backend: 'cuda', device: 1 << 20 }),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'device',
    );
    const t = await gpuTrain(queries, docs, 'all');
    t.argmax[0] = 99;
    await assert.rejects(
      async () => t.backward(new Float32Array(6)),
      /Expected argmax entries in \[-1, 2\) for pair 0/,
    );
  });
});
