// A synthetic ColBERT-like corpus with known answers, for the demo, benchmarks and examples.
//
// Token embeddings are noisy copies of a shared vocabulary of random unit "prototype" vectors drawn with
// Zipf-distributed frequencies, so a few prototypes (like stop words) occur in nearly every document and
// most are rare. Each query is a set of noisy prototype copies; a few documents per query are planted as
// relevant by mixing fresh noisy copies of most of the query's prototypes into otherwise ordinary
// documents. The noise (cosine to the prototype about 0.64) is tuned so that planted documents rank in the
// top 10 but not always first: frequent prototypes also match unrelated documents, so ranking takes the
// whole MaxSim sum, not one lucky token.
//
// Generation is typed-array only (no per-token objects) so 10,000 documents take about a second.

import { InvalidArgumentError } from '../errors.js';
import { encodeFloats } from '../floats.js';
import { denseBatch, expectInteger, type FloatDType, raggedBatch, type TokenBatch } from '../tensor.js';
import { normalizeRows, normalSamples, Rng } from './random.js';

export interface DemoCorpusOptions {
  /** Number of documents (default 10,000). */
  docs?: number;
  /** Number of queries (default 8). */
  queries?: number;
  /** Tokens per query (default 32). */
  queryLength?: number;
  /** Document lengths are uniform in [minDocLength, maxDocLength] (default 32 .. 256). */
  minDocLength?: number;
  maxDocLength?: number;
  /** Embedding dimension (default 128). */
  dim?: number;
  /** Vocabulary size: number of prototype vectors (default 4096). */
  prototypes?: number;
  /** Planted relevant documents per query (default 3). */
  relevantPerQuery?: number;
  /** Norm of the noise added to each token before it is normalized again (default 1.2). */
  noise?: number;
  /** PRNG seed (default 42). */
  seed?: number;
  /** Storage of both batches (default float32). */
  dtype?: FloatDType;
}

export interface DemoCorpus {
  /** Ragged batch of documents. */
  docs: TokenBatch;
  /** Dense batch [queries, queryLength, dim]. */
  queries: TokenBatch;
  /** Per query: the planted relevant document indices, ascending. */
  relevant: number[][];
}

const ZIPF_EXPONENT = 1;
// Noise comes from windows of one shared pool of normal samples at random offsets: one PRNG call per
// token instead of `dim` normal draws. Windows at different offsets are effectively independent.
const NOISE_POOL = 1 << 18;
// A planted document covers a random fraction in this range of its query's tokens.
const MIN_COVERAGE = 0.5;
const MAX_COVERAGE = 0.9;

/** Cumulative Zipf probabilities over ranks 0 .. n-1. */
function zipfCdf(n: number): Float64Array {
  const cdf = new Float64Array(n);
  let total = 0;
  for (let r = 0; r < n; r++) {
    total += 1 / (r + 1) ** ZIPF_EXPONENT;
    cdf[r] = total;
  }
  for (let r = 0; r < n; r++) cdf[r] /= total;
  return cdf;
}

/** First rank whose cumulative probability exceeds u (binary search). */
function zipfRank(cdf: Float64Array, u: number): number {
  let lo = 0;
  let hi = cdf.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (cdf[mid] > u) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/** out[outRow] = normalize(src[srcRow] + the noise window at poolOffset). */
function noisyUnitCopy(
  src: Float32Array,
  srcRow: number,
  out: Float32Array,
  outRow: number,
  dim: number,
  pool: Float32Array,
  poolOffset: number,
) {
  const s = srcRow * dim;
  const o = outRow * dim;
  const p = poolOffset;
  // Unrolled by 4 with 4 partial sums: this loop is most of the generation time, and one running sum
  // would serialize every addition.
  const body = dim - (dim % 4);
  let s0 = 0;
  let s1 = 0;
  let s2 = 0;
  let s3 = 0;
  for (let k = 0; k < body; k += 4) {
    const v0 = src[s + k] + pool[p + k];
    const v1 = src[s + k + 1] + pool[p + k + 1];
    const v2 = src[s + k + 2] + pool[p + k + 2];
    const v3 = src[s + k + 3] + pool[p + k + 3];
    out[o + k] = v0;
    out[o + k + 1] = v1;
    out[o + k + 2] = v2;
    out[o + k + 3] = v3;
    s0 += v0 * v0;
    s1 += v1 * v1;
    s2 += v2 * v2;
    s3 += v3 * v3;
  }
  for (let k = body; k < dim; k++) {
    const v = src[s + k] + pool[p + k];
    out[o + k] = v;
    s0 += v * v;
  }
  const inv = 1 / Math.sqrt(s0 + s1 + s2 + s3);
  for (let k = 0; k < body; k += 4) {
    out[o + k] *= inv;
    out[o + k + 1] *= inv;
    out[o + k + 2] *= inv;
    out[o + k + 3] *= inv;
  }
  for (let k = body; k < dim; k++) out[o + k] *= inv;
}

function positiveInteger(name: string, value: number | undefined, fallback: number, min = 1): number {
  return expectInteger(name, value ?? fallback, min);
}

/** Generates the corpus; the same options always give the same bytes. */
export function demoCorpus(options: DemoCorpusOptions = {}): DemoCorpus {
  const docCount = positiveInteger('docs', options.docs, 10_000);
  const queryCount = positiveInteger('queries', options.queries, 8);
  const queryLength = positiveInteger('queryLength', options.queryLength, 32);
  const minDocLength = positiveInteger('minDocLength', options.minDocLength, 32);
  const maxDocLength = positiveInteger('maxDocLength', options.maxDocLength, 256);
  const dim = positiveInteger('dim', options.dim, 128);
  const prototypeCount = positiveInteger('prototypes', options.prototypes, 4096);
  const relevantPerQuery = positiveInteger('relevantPerQuery', options.relevantPerQuery, 3, 0);
  const seed = expectInteger('seed', options.seed ?? 42, 0, 2 ** 32 - 1);
  const noise = options.noise ?? 1.2;
  const dtype = options.dtype ?? 'float32';
  if (maxDocLength < minDocLength) {
    throw new InvalidArgumentError(
      'maxDocLength',
      `a value >= minDocLength (${minDocLength})`,
      String(maxDocLength),
    );
  }
  if (!(noise >= 0 && Number.isFinite(noise))) {
    throw new InvalidArgumentError('noise', 'a finite number >= 0', String(noise));
  }
  if (queryCount * relevantPerQuery > docCount) {
    throw new InvalidArgumentError(
      'docs',
      `at least ${queryCount * relevantPerQuery} documents (queries x relevantPerQuery, all distinct)`,
      String(docCount),
    );
  }
  if (dtype !== 'float32' && dtype !== 'float16' && dtype !== 'bfloat16') {
    throw new InvalidArgumentError('dtype', "'float32', 'float16' or 'bfloat16'", String(dtype));
  }

  const rng = new Rng(seed);
  const prototypes = normalizeRows(normalSamples(rng, prototypeCount * dim), dim);
  // Normal(0, noise^2 / dim) per component: the noise vector's norm is about `noise`.
  const pool = normalSamples(rng, NOISE_POOL + dim);
  const noiseScale = noise / Math.sqrt(dim);
  for (let i = 0; i < pool.length; i++) pool[i] *= noiseScale;
  const cdf = zipfCdf(prototypeCount);

  // Queries: half their tokens from the Zipf distribution (common terms), half uniform (topic terms).
  const queryValues = new Float32Array(queryCount * queryLength * dim);
  const queryPrototypes = new Int32Array(queryCount * queryLength);
  for (let t = 0; t < queryPrototypes.length; t++) {
    queryPrototypes[t] = rng.float() < 0.5 ? zipfRank(cdf, rng.float()) : rng.int(prototypeCount);
    noisyUnitCopy(prototypes, queryPrototypes[t], queryValues, t, dim, pool, rng.int(NOISE_POOL));
  }

  const offsets = new Float64Array(docCount + 1);
  for (let b = 0; b < docCount; b++) offsets[b + 1] = offsets[b] + rng.intBetween(minDocLength, maxDocLength);
  const docValues = new Float32Array(offsets[docCount] * dim);
  for (let t = 0; t < offsets[docCount]; t++) {
    noisyUnitCopy(prototypes, zipfRank(cdf, rng.float()), docValues, t, dim, pool, rng.int(NOISE_POOL));
  }

  // Plant: overwrite random positions of distinct random documents with copies of query tokens.
  const planted = rng.sample(docCount, queryCount * relevantPerQuery);
  const relevant: number[][] = [];
  for (let q = 0; q < queryCount; q++) {
    const docs = Array.from(planted.subarray(q * relevantPerQuery, (q + 1) * relevantPerQuery));
    for (const b of docs) {
      const length = offsets[b + 1] - offsets[b];
      const coverage = MIN_COVERAGE + (MAX_COVERAGE - MIN_COVERAGE) * rng.float();
      const copies = Math.min(length, Math.max(1, Math.round(coverage * queryLength)));
      const queryTokens = rng.sample(queryLength, copies);
      const positions = rng.sample(length, copies);
      for (let i = 0; i < copies; i++) {
        const proto = queryPrototypes[q * queryLength + queryTokens[i]];
        noisyUnitCopy(
          prototypes,
          proto,
          docValues,
          offsets[b] + positions[i],
          dim,
          pool,
          rng.int(NOISE_POOL),
        );
      }
    }
    relevant.push(docs.sort((x, y) => x - y));
  }

  const trusted = { dtype, checkFinite: false } as const;
  return {
    docs: raggedBatch(encodeFloats(docValues, dtype), offsets, { ...trusted, dim }),
    queries: denseBatch(encodeFloats(queryValues, dtype), {
      ...trusted,
      count: queryCount,
      length: queryLength,
      dim,
    }),
    relevant,
  };
}
