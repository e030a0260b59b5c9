// A structured synthetic corpus whose tokens cluster like ColBERT tokens, for tests and benchmarks.
//
// `topics` centres are random unit vectors in R^d, drawn with Zipf-like popularity (topic t has weight
// 1 / (t + 10)), so inverted lists are uneven as in real corpora. A document takes 1 to 3 topics and,
// for each, its own facet: the topic centre plus a document-specific offset of norm `facet`. Each
// token picks one of its document's facets and adds isotropic Gaussian noise of norm `noise`; every
// token is then normalized to unit length (ColBERT's embeddings are). A query is built from a target
// document: each token is one of the target's facets plus fresh noise, so the target and the
// documents sharing its facets' topics score highest, with realistic near-ties among the rest.
import { seededRandom } from './kmeans.js';

export interface SyntheticOptions {
  docs: number;
  /** Tokens per document: a fixed length or [min, max] (uniform). */
  length: number | [number, number];
  dim: number;
  topics: number;
  seed: number;
  /** Norm of the per-document facet offset (default 0.35) and of the token noise (default 0.45). */
  facet?: number;
  noise?: number;
}

export interface SyntheticCorpus {
  data: Float32Array;
  offsets: Float64Array;
  /** Per document: its facets ([facets][d]) in facetData, from facetStart[b] for facetCount[b]. */
  facetData: Float32Array;
  facetStart: Int32Array;
  facetCount: Int32Array;
}

function gaussian(rand: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
}

function addNoise(
  out: Float32Array,
  at: number,
  base: Float32Array,
  from: number,
  d: number,
  norm: number,
  rand: () => number,
) {
  const s = norm / Math.sqrt(d);
  let sq = 0;
  for (let k = 0; k < d; k++) {
    const v = base[from + k] + s * gaussian(rand);
    out[at + k] = v;
    sq += v * v;
  }
  const inv = 1 / Math.sqrt(sq);
  for (let k = 0; k < d; k++) out[at + k] *= inv;
}

export function syntheticCorpus(o: SyntheticOptions): SyntheticCorpus {
  const rand = seededRandom(o.seed);
  const d = o.dim;
  const facet = o.facet ?? 0.35;
  const noise = o.noise ?? 0.45;
  const centres = new Float32Array(o.topics * d);
  const zero = new Float32Array(d);
  for (let t = 0; t < o.topics; t++) addNoise(centres, t * d, zero, 0, d, 1, rand);
  // cumulative Zipf-like weights for drawing topics
  const cum = new Float64Array(o.topics);
  let acc = 0;
  for (let t = 0; t < o.topics; t++) cum[t] = acc += 1 / (t + 10);
  const drawTopic = () => {
    const u = rand() * acc;
    let lo = 0;
    let hi = o.topics - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cum[mid] < u) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  const [lmin, lmax] = typeof o.length === 'number' ? [o.length, o.length] : o.length;
  const lengths = new Int32Array(o.docs);
  const offsets = new Float64Array(o.docs + 1);
  const facetCount = new Int32Array(o.docs);
  const facetStart = new Int32Array(o.docs);
  let facets = 0;
  for (let b = 0; b < o.docs; b++) {
    lengths[b] = lmin + Math.floor(rand() * (lmax - lmin + 1));
    offsets[b + 1] = offsets[b] + lengths[b];
    facetCount[b] = 1 + Math.floor(rand() * 3);
    facetStart[b] = facets;
    facets += facetCount[b];
  }
  const facetData = new Float32Array(facets * d);
  const tmp = new Float32Array(d);
  for (let f = 0; f < facets; f++) {
    const t = drawTopic();
    // centre + offset of norm `facet` (not normalized: the tokens are)
    addNoise(tmp, 0, zero, 0, d, 1, rand);
    for (let k = 0; k < d; k++) facetData[f * d + k] = centres[t * d + k] + facet * tmp[k];
  }
  const data = new Float32Array(offsets[o.docs] * d);
  for (let b = 0; b < o.docs; b++) {
    for (let j = 0; j < lengths[b]; j++) {
      const f = facetStart[b] + Math.floor(rand() * facetCount[b]);
      addNoise(data, (offsets[b] + j) * d, facetData, f * d, d, noise, rand);
    }
  }
  return { data, offsets, facetData, facetStart, facetCount };
}

/** `count` queries of `length` tokens, each from a target document's facets (targets drawn by seed). */
export function syntheticQueries(
  c: SyntheticCorpus,
  count: number,
  length: number,
  dim: number,
  seed: number,
  noise = 0.45,
): { data: Float32Array; targets: Int32Array } {
  const rand = seededRandom(seed);
  const docs = c.facetCount.length;
  const data = new Float32Array(count * length * dim);
  const targets = new Int32Array(count);
  for (let q = 0; q < count; q++) {
    const b = Math.floor(rand() * docs);
    targets[q] = b;
    for (let j = 0; j < length; j++) {
      const f = c.facetStart[b] + Math.floor(rand() * c.facetCount[b]);
      addNoise(data, (q * length + j) * dim, c.facetData, f * dim, dim, noise, rand);
    }
  }
  return { data, targets };
}

// --- the streamed form, for corpora too large to hold in memory -----------------------------------
//
// The same model (Zipf-weighted topic centres, 1-3 facets per document, Gaussian token noise, unit-
// norm tokens), but every document comes from its own seeded stream, so any range of documents is
// generated alone (in any order, e.g. shard by shard to disk) and a query regenerates its target's
// facets. Normal deviates come from a 65,536-entry table of sorted Box-Muller samples indexed by 16
// random bits (two deviates per 32-bit draw): ~10x cheaper than a Box-Muller pair per value, which is
// what makes 64M tokens a minute's work rather than an hour's.

export interface StreamedSynthetic {
  docs: number;
  length: number | [number, number];
  dim: number;
  seed: number;
  facet: number;
  noise: number;
  centres: Float32Array;
  cum: Float64Array;
  normals: Float32Array;
}

export function streamedSynthetic(o: SyntheticOptions): StreamedSynthetic {
  const rand = seededRandom(o.seed);
  const d = o.dim;
  const normals = new Float32Array(1 << 16);
  for (let i = 0; i < normals.length; i++) normals[i] = gaussian(rand);
  normals.sort();
  const centres = new Float32Array(o.topics * d);
  const zero = new Float32Array(d);
  for (let t = 0; t < o.topics; t++) addNoise(centres, t * d, zero, 0, d, 1, rand);
  const cum = new Float64Array(o.topics);
  let acc = 0;
  for (let t = 0; t < o.topics; t++) cum[t] = acc += 1 / (t + 10);
  return {
    docs: o.docs,
    length: o.length,
    dim: d,
    seed: o.seed,
    facet: o.facet ?? 0.35,
    noise: o.noise ?? 0.45,
    centres,
    cum,
    normals,
  };
}

// Document b's generator, its token count and its facets ([count][d]).
function streamedDoc(
  s: StreamedSynthetic,
  b: number,
): { rand: () => number; length: number; facets: Float32Array } {
  const rand = seededRandom(Math.imul(s.seed ^ 0x5bd1e995, 0x9e3779b1) ^ Math.imul(b + 1, 0x85ebca6b));
  const [lmin, lmax] = typeof s.length === 'number' ? [s.length, s.length] : s.length;
  const length = lmin + Math.floor(rand() * (lmax - lmin + 1));
  const count = 1 + Math.floor(rand() * 3);
  const d = s.dim;
  const facets = new Float32Array(count * d);
  const total = s.cum[s.cum.length - 1];
  for (let f = 0; f < count; f++) {
    const u = rand() * total;
    let lo = 0;
    let hi = s.cum.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (s.cum[mid] < u) lo = mid + 1;
      else hi = mid;
    }
    tableNoise(facets, f * d, s.centres, lo * d, d, s.facet, s.normals, rand, false);
  }
  return { rand, length, facets };
}

// out[at..] = base[from..] + norm / sqrt(d) * N(0, I) (unit length when normalize).
function tableNoise(
  out: Float32Array,
  at: number,
  base: Float32Array,
  from: number,
  d: number,
  norm: number,
  normals: Float32Array,
  rand: () => number,
  normalize: boolean,
) {
  const s = norm / Math.sqrt(d);
  let sq = 0;
  for (let k = 0; k < d; k += 2) {
    const u = (rand() * 4294967296) >>> 0;
    const v0 = base[from + k] + s * normals[u & 0xffff];
    out[at + k] = v0;
    sq += v0 * v0;
    if (k + 1 < d) {
      const v1 = base[from + k + 1] + s * normals[u >>> 16];
      out[at + k + 1] = v1;
      sq += v1 * v1;
    }
  }
  if (!normalize) return;
  const inv = 1 / Math.sqrt(sq);
  for (let k = 0; k < d; k++) out[at + k] *= inv;
}

/** Documents [b0, b1): their tokens back to back ([tokens][d]) and lengths. */
export function streamedDocuments(
  s: StreamedSynthetic,
  b0: number,
  b1: number,
): { data: Float32Array; lengths: Int32Array } {
  const docs = [];
  let tokens = 0;
  for (let b = b0; b < b1; b++) {
    const doc = streamedDoc(s, b);
    docs.push(doc);
    tokens += doc.length;
  }
  const d = s.dim;
  const data = new Float32Array(tokens * d);
  const lengths = new Int32Array(b1 - b0);
  let at = 0;
  docs.forEach((doc, i) => {
    lengths[i] = doc.length;
    const nf = doc.facets.length / d;
    for (let j = 0; j < doc.length; j++, at++) {
      const f = Math.floor(doc.rand() * nf);
      tableNoise(data, at * d, doc.facets, f * d, d, s.noise, s.normals, doc.rand, true);
    }
  });
  return { data, lengths };
}

/** `count` queries of `length` tokens, each from a target document's facets (targets drawn by seed). */
export function streamedQueries(
  s: StreamedSynthetic,
  count: number,
  length: number,
  seed: number,
): { data: Float32Array; targets: Int32Array } {
  const rand = seededRandom(seed);
  const d = s.dim;
  const data = new Float32Array(count * length * d);
  const targets = new Int32Array(count);
  for (let q = 0; q < count; q++) {
    const b = Math.floor(rand() * s.docs);
    targets[q] = b;
    const { facets } = streamedDoc(s, b);
    const nf = facets.length / d;
    for (let j = 0; j < length; j++) {
      const f = Math.floor(rand() * nf);
      tableNoise(data, (q * length + j) * d, facets, f * d, d, s.noise, s.normals, rand, true);
    }
  }
  return { data, targets };
}
