// Corpora for fidelity measurements: an anisotropic generator (tokens that share one strong direction,
// like real ColBERT embeddings) and pseudo-queries drawn from any corpus's documents.
//
// The generator: every token is a * u + b * t + c * v + e * n, normalized to unit length, where u is
// one common direction shared by the whole corpus, t the direction of the document's topic (one of
// `topics`), v the document's own direction and n fresh noise per token; each of u, t, v, n is a
// Normal(0, 1/dim) vector (norm ~1, nearly orthogonal to the others). With the defaults (a = 1,
// b = 0.1, c = 0.1, e = 0.28, d = 48, 500 documents of 32-128 tokens) the common direction holds ~90%
// of each token's energy: the mean cosine of two tokens is 0.90 and the mean unit token's norm 0.95,
// near mxbai-edge-colbert-v0-17m's 0.93 and 0.96 (issue 38), and per-token int8 ranks about as badly
// as it did there (Spearman 0.9976 vs 0.9967, top-20 overlap 0.946 vs 0.930; docs/eight-bit.md).
// With a = 0 the tokens are isotropic.

import { Rng } from '../demo/random.js';
import { InvalidArgumentError } from '../errors.js';
import { decodeToFloat32 } from '../floats.js';
import type { TokenBatch } from '../tensor.js';

export interface AnisotropicOptions {
  docs?: number;
  dim?: number;
  minDocLength?: number;
  maxDocLength?: number;
  topics?: number;
  /** Weights of the common direction, the topic, the document's direction and the token noise. */
  common?: number;
  topic?: number;
  document?: number;
  noise?: number;
  seed?: number;
}

export const anisotropicDefaults = {
  docs: 500,
  dim: 48,
  minDocLength: 32,
  maxDocLength: 128,
  topics: 20,
  common: 1,
  topic: 0.1,
  document: 0.1,
  noise: 0.28,
  seed: 42,
};

function gaussian(rng: Rng, dim: number): Float64Array {
  const v = new Float64Array(dim);
  const s = 1 / Math.sqrt(dim);
  for (let k = 0; k < dim; k++) v[k] = rng.normal() * s;
  return v;
}

function unitInto(out: Float32Array, o: number, v: Float64Array): void {
  let ss = 0;
  for (let k = 0; k < v.length; k++) ss += v[k] * v[k];
  const inv = ss > 0 ? 1 / Math.sqrt(ss) : 0;
  for (let k = 0; k < v.length; k++) out[o + k] = v[k] * inv;
}

function ragged(data: Float32Array, dim: number, lengths: number[]): TokenBatch {
  const starts = new Float64Array(lengths.length);
  for (let b = 1; b < lengths.length; b++) starts[b] = starts[b - 1] + lengths[b - 1];
  return {
    kind: 'batch',
    layout: 'ragged',
    dtype: 'float32',
    data,
    dim,
    count: lengths.length,
    maxLength: Math.max(0, ...lengths),
    starts,
    lengths: Int32Array.from(lengths),
  };
}

function weight(name: string, v: number | undefined, fallback: number): number {
  const w = v ?? fallback;
  if (!(Number.isFinite(w) && w >= 0))
    throw new InvalidArgumentError(name, 'a finite number >= 0', String(w));
  return w;
}

function count(name: string, v: number | undefined, fallback: number, min: number): number {
  const n = v ?? fallback;
  if (!Number.isInteger(n) || n < min)
    throw new InvalidArgumentError(name, `an integer >= ${min}`, String(n));
  return n;
}

/** The anisotropic corpus (unit-norm float32 tokens, ragged); the same options give the same bytes. */
export function anisotropicCorpus(options: AnisotropicOptions = {}): TokenBatch {
  const o = anisotropicDefaults;
  const docs = count('docs', options.docs, o.docs, 1);
  const dim = count('dim', options.dim, o.dim, 1);
  const minLen = count('minDocLength', options.minDocLength, o.minDocLength, 1);
  const maxLen = count('maxDocLength', options.maxDocLength, o.maxDocLength, minLen);
  const topics = count('topics', options.topics, o.topics, 1);
  const a = weight('common', options.common, o.common);
  const b = weight('topic', options.topic, o.topic);
  const c = weight('document', options.document, o.document);
  const e = weight('noise', options.noise, o.noise);
  const rng = new Rng(count('seed', options.seed, o.seed, 0));
  const u = gaussian(rng, dim);
  const topicDirs = Array.from({ length: topics }, () => gaussian(rng, dim));
  const lengths = Array.from({ length: docs }, () => rng.intBetween(minLen, maxLen));
  const data = new Float32Array(lengths.reduce((s, l) => s + l, 0) * dim);
  const v = new Float64Array(dim);
  let t = 0;
  for (let doc = 0; doc < docs; doc++) {
    const topic = topicDirs[rng.int(topics)];
    const own = gaussian(rng, dim);
    for (let j = 0; j < lengths[doc]; j++, t++) {
      const s = 1 / Math.sqrt(dim);
      for (let k = 0; k < dim; k++) v[k] = a * u[k] + b * topic[k] + c * own[k] + e * rng.normal() * s;
      unitInto(data, t * dim, v);
    }
  }
  return ragged(data, dim, lengths);
}

/**
 * Pseudo-queries drawn from a corpus: each takes `length` tokens (with replacement) of a random
 * non-empty document, each plus Normal(0, noise^2 / dim) noise per component (relative to the
 * token's norm) and renormalized to the token's norm. The source documents are returned too.
 */
export function pseudoQueries(
  docs: TokenBatch,
  options: { queries: number; length: number; noise: number; seed: number },
): { queries: TokenBatch; sources: number[] } {
  const { queries, length, noise, seed } = options;
  const nonEmpty = Array.from(docs.lengths.keys()).filter((b) => docs.lengths[b] > 0);
  if (nonEmpty.length === 0)
    throw new InvalidArgumentError('docs', 'a corpus with a non-empty document', 'only empty documents');
  const d = docs.dim;
  const values = decodeToFloat32(docs.data, docs.dtype, d, docs.scales);
  const rng = new Rng(seed);
  const data = new Float32Array(queries * length * d);
  const v = new Float64Array(d);
  const sources: number[] = [];
  for (let q = 0; q < queries; q++) {
    const b = nonEmpty[rng.int(nonEmpty.length)];
    sources.push(b);
    for (let i = 0; i < length; i++) {
      const src = (docs.starts[b] + rng.int(docs.lengths[b])) * d;
      let ss = 0;
      for (let k = 0; k < d; k++) ss += values[src + k] ** 2;
      const norm = Math.sqrt(ss);
      const s = (noise * norm) / Math.sqrt(d);
      for (let k = 0; k < d; k++) v[k] = values[src + k] + s * rng.normal();
      unitInto(data, (q * length + i) * d, v);
      for (let k = 0; k < d; k++) data[(q * length + i) * d + k] *= norm;
    }
  }
  return { queries: ragged(data, d, new Array(queries).fill(length)), sources };
}

/** Mean cosine of `pairs` random pairs of distinct tokens, and the norm of the mean unit token. */
export function anisotropy(
  docs: TokenBatch,
  pairs = 20_000,
  seed = 1,
): { meanCosine: number; meanNorm: number } {
  const d = docs.dim;
  const values = decodeToFloat32(docs.data, docs.dtype, d, docs.scales);
  const tokens: number[] = [];
  for (let b = 0; b < docs.count; b++)
    for (let j = 0; j < docs.lengths[b]; j++) tokens.push(docs.starts[b] + j);
  const unit = (t: number) => {
    let ss = 0;
    for (let k = 0; k < d; k++) ss += values[t * d + k] ** 2;
    return ss > 0 ? 1 / Math.sqrt(ss) : 0;
  };
  const mean = new Float64Array(d);
  for (const t of tokens) {
    const s = unit(t);
    for (let k = 0; k < d; k++) mean[k] += values[t * d + k] * s;
  }
  let mn = 0;
  for (let k = 0; k < d; k++) mn += (mean[k] / Math.max(1, tokens.length)) ** 2;
  const rng = new Rng(seed);
  let cos = 0;
  let n = 0;
  for (let p = 0; p < pairs && tokens.length > 1; p++) {
    const i = tokens[rng.int(tokens.length)];
    const j = tokens[rng.int(tokens.length)];
    if (i === j) continue;
    let dot = 0;
    for (let k = 0; k < d; k++) dot += values[i * d + k] * values[j * d + k];
    cos += dot * unit(i) * unit(j);
    n++;
  }
  return { meanCosine: n > 0 ? cos / n : Number.NaN, meanNorm: Math.sqrt(mn) };
}
