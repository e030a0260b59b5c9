// Shared test helpers: seeded random inputs (a fresh seed per run, printed on failure) and
// tolerance checks against the float64 reference.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import { decodeBatch64 } from '../src/backends/reference.js';
import { encodeFloats } from '../src/floats.js';
import { CorpusWriter, setCorpusFaultHook } from '../src/io/corpus/index.js';
import {
  denseBatch,
  type FloatDType,
  raggedBatch,
  type TokenBatch,
  type TokenMatrix,
  tokenMatrix,
} from '../src/tensor.js';

/** Seed for this run: MAXSIM_TEST_SEED to reproduce, otherwise fresh. */
export const runSeed = Number(process.env.MAXSIM_TEST_SEED ?? Math.floor(Math.random() * 2 ** 31));

/** Small fast PRNG (mulberry32). */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Uniform values in [-1, 1). */
export function randomFloats(n: number, rand: () => number): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = rand() * 2 - 1;
  return a;
}

export function randomMatrix(
  length: number,
  dim: number,
  dtype: FloatDType,
  rand: () => number,
): TokenMatrix {
  return tokenMatrix(encodeFloats(randomFloats(length * dim, rand), dtype), length, dim, { dtype });
}

export function randomDense(
  count: number,
  length: number,
  dim: number,
  dtype: FloatDType,
  rand: () => number,
  lengths?: number[],
): TokenBatch {
  return denseBatch(encodeFloats(randomFloats(count * length * dim, rand), dtype), {
    count,
    length,
    dim,
    dtype,
    lengths,
  });
}

export function randomRagged(
  lengths: number[],
  dim: number,
  dtype: FloatDType,
  rand: () => number,
): TokenBatch {
  const offsets = [0];
  for (const l of lengths) offsets.push(offsets[offsets.length - 1] + l);
  const total = offsets[offsets.length - 1];
  return raggedBatch(encodeFloats(randomFloats(total * dim, rand), dtype), offsets, { dim, dtype });
}

/**
 * A rigorous first-order bound on the fp32 error of each score, for any engine that accumulates in
 * fp32: each dot product of d terms is within (d + 1) u |q_i| max_j |d_j| of the exact value, the max
 * moves by no more, and summing Lq maxima in fp32 adds at most (Lq + 1) u sum_i |q_i| max_j |d_j|
 * (Cauchy-Schwarz). So the bound is (d + Lq + 3) u sum_i |q_i| max_j |d_j|, u = 2^-24. Anything
 * outside it is a wrong result, not rounding.
 */
export function scoreErrorBounds(queries: TokenBatch, docs: TokenBatch): Float64Array {
  const u = 2 ** -24;
  const d = docs.dim;
  const qv = decodeBatch64(queries);
  const dv = decodeBatch64(docs);
  const norm = (v: Float64Array, t: number) => {
    let s = 0;
    for (let k = 0; k < d; k++) s += v[t * d + k] * v[t * d + k];
    return Math.sqrt(s);
  };
  const qNorms = new Float64Array(queries.count);
  for (let q = 0; q < queries.count; q++) {
    for (let i = 0; i < queries.lengths[q]; i++) qNorms[q] += norm(qv, queries.starts[q] + i);
  }
  const out = new Float64Array(queries.count * docs.count);
  for (let b = 0; b < docs.count; b++) {
    let maxNorm = 0;
    for (let j = 0; j < docs.lengths[b]; j++) maxNorm = Math.max(maxNorm, norm(dv, docs.starts[b] + j));
    for (let q = 0; q < queries.count; q++) {
      out[q * docs.count + b] = (d + queries.lengths[q] + 3) * u * qNorms[q] * maxNorm;
    }
  }
  return out;
}

/** Asserts |got - ref| <= bound + |ref| * 2^-23 elementwise; -Infinity must match exactly. */
export function assertScoresClose(
  got: Float32Array,
  ref: Float64Array,
  bounds: Float64Array,
  context: string,
) {
  assert.equal(got.length, ref.length, `${context}: length`);
  for (let i = 0; i < ref.length; i++) {
    if (ref[i] === Number.NEGATIVE_INFINITY) {
      assert.equal(
        got[i],
        Number.NEGATIVE_INFINITY,
        `${context}: item ${i} must be -Infinity (empty document)`,
      );
      continue;
    }
    const err = Math.abs(got[i] - ref[i]);
    const tol = bounds[i] + Math.abs(ref[i]) * 2 ** -23;
    if (!(err <= tol)) {
      assert.fail(
        `${context}: item ${i}: got ${got[i]}, reference ${ref[i]}, error ${err} > bound ${tol} (seed ${runSeed})`,
      );
    }
  }
}

/** scoreErrorBounds for the scored pairs: all pairs, or query i with document i. */
export function pairBounds(queries: TokenBatch, docs: TokenBatch, pairs: 'all' | 'diagonal'): Float64Array {
  const all = scoreErrorBounds(queries, docs);
  if (pairs === 'all') return all;
  return Float64Array.from({ length: queries.count }, (_, i) => all[i * docs.count + i]);
}

/** Gradients agree with the float64 reference up to the one fp32 rounding of each accumulated sum. */
export function assertGradClose(got: Float32Array, ref: ArrayLike<number>, context: string) {
  assert.equal(got.length, ref.length, `${context}: length`);
  let dot = 0;
  let gotNorm = 0;
  let refNorm = 0;
  let refMax = 0;
  for (let i = 0; i < ref.length; i++) {
    dot += got[i] * ref[i];
    gotNorm += got[i] * got[i];
    refNorm += ref[i] * ref[i];
    refMax = Math.max(refMax, Math.abs(ref[i]));
  }
  if (refNorm > 0) {
    const cosine = dot / Math.sqrt(gotNorm * refNorm);
    assert.ok(cosine >= 0.99999, `${context}: cosine ${cosine} (seed ${runSeed})`);
  } else {
    assert.equal(gotNorm, 0, `${context}: expected zero gradients`);
  }
  for (let i = 0; i < ref.length; i++) {
    const tol = Math.abs(ref[i]) * 2 ** -23 + refMax * 2 ** -40;
    const err = Math.abs(got[i] - ref[i]);
    if (!(err <= tol)) {
      assert.fail(
        `${context}: element ${i}: got ${got[i]}, reference ${ref[i]}, error ${err} > ${tol} (seed ${runSeed})`,
      );
    }
  }
}

// Rows with many ties, -Infinity, +-0 and (with `nan`) NaN.
export function awkwardRow(rand: () => number, n: number, nan: boolean): Float32Array {
  const row = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const u = rand();
    row[i] =
      u < 0.05
        ? Number.NEGATIVE_INFINITY
        : u < 0.08
          ? -0
          : nan && u < 0.11
            ? Number.NaN
            : u < 0.5
              ? Math.floor(rand() * 8)
              : rand() * 10 - 5;
  }
  return row;
}

/** Equal element by element as bits (Object.is: NaN equals NaN, -0 differs from 0). */
export function assertBitwise(got: Float32Array, want: Float32Array, context: string): void {
  assert.equal(got.length, want.length, `${context}: length`);
  for (let i = 0; i < got.length; i++) {
    if (!Object.is(got[i], want[i]))
      assert.fail(`${context}: item ${i}: ${got[i]} vs ${want[i]} (seed ${runSeed})`);
  }
}

/**
 * `n` item lengths for a kernel's awkward shapes: half picked from `pick` (empties, ones and the
 * kernel's lane and tile remainders), half uniform in [0, max).
 */
export function awkwardLengths(
  rand: () => number,
  n: number,
  max: number,
  pick: readonly number[],
): number[] {
  return Array.from({ length: n }, () =>
    rand() < 0.5 ? pick[Math.floor(rand() * pick.length)] : Math.floor(rand() * max),
  );
}

/**
 * A float16 corpus with ids at `dir`, one segment per entry of `segments` (its document count, each
 * document 1..maxLength random tokens): segment s's ids are `${tag}${s}-${i}`.
 */
export function writeSegments(
  dir: string,
  segments: readonly number[],
  options: { dim: number; maxLength: number; rand: () => number; tag?: string },
): void {
  const { dim, maxLength, rand } = options;
  segments.forEach((count, s) => {
    const docs = randomRagged(
      Array.from({ length: count }, () => 1 + Math.floor(rand() * maxLength)),
      dim,
      'float32',
      rand,
    );
    const w =
      s === 0 ? CorpusWriter.create(dir, { dim, dtype: 'float16', ids: true }) : CorpusWriter.append(dir);
    w.add(
      docs,
      Array.from({ length: docs.count }, (_, i) => `${options.tag ?? 's'}${s}-${i}`),
    );
    w.commit();
  });
}

/** Where a step of failEveryStep failed: its index, its name, and whether the MANIFEST was published. */
export interface FailedStep {
  index: number;
  step: string;
  published: boolean;
}

/**
 * Crash safety at every corpus write step (setCorpusFaultHook): `act` runs once on a copy of `proto`
 * to record its steps (`probed` sees that copy), the MANIFEST's publish must be past step 2, then for
 * each step `act` runs on a fresh copy with that step failing (it must fail with the injected error)
 * and `check` looks at what it left.
 */
export async function failEveryStep(options: {
  proto: string;
  fresh: () => string;
  act: (dir: string) => unknown;
  probed?: (dir: string) => void;
  check: (dir: string, at: FailedStep) => unknown;
}): Promise<void> {
  const { proto, fresh, act } = options;
  const probe = fresh();
  fs.cpSync(proto, probe, { recursive: true });
  const steps: string[] = [];
  setCorpusFaultHook((s) => steps.push(s));
  try {
    await act(probe);
  } finally {
    setCorpusFaultHook(undefined);
  }
  options.probed?.(probe);
  const publish = steps.indexOf('publish-manifest');
  assert.ok(publish > 2, steps.join(', '));
  for (let index = 0; index < steps.length; index++) {
    const dir = fresh();
    fs.cpSync(proto, dir, { recursive: true });
    let seen = 0;
    setCorpusFaultHook((s) => {
      if (seen++ === index) throw new Error(`injected failure at ${s}`);
    });
    try {
      await assert.rejects(async () => act(dir), /injected failure/);
    } finally {
      setCorpusFaultHook(undefined);
    }
    await options.check(dir, { index, step: steps[index], published: index > publish });
  }
}
