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
