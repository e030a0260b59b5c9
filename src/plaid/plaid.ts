// A compressed PLAID-class index over a TokenBatch of documents, in memory.
//
// Build: seeded k-means on a sample of the tokens, per-dimension residual buckets fitted on that
// sample (codec.ts), every token encoded as its nearest centroid id plus a b-bit residual per
// dimension (native), documents as bags of distinct centroid ids, inverted lists centroid -> documents.
// Search (one query): query tokens x centroids; each query token's `nprobe` best centroids give the
// candidate documents through the inverted lists; centroid interaction (each document's bag scored as
// sum_i max_c q_i . centroid_c over the centroids that pass the pruning threshold) keeps the best
// `candidates`; the fused decompress-and-MaxSim kernel scores those; when the index holds the source
// tokens, the best `rescore` of them are re-scored by the exact MaxSim engine, so returned scores
// are exact and only the candidate set is approximate.
import { cpuMaxsim } from '../backends/cpu.js';
import { InvalidArgumentError } from '../errors.js';
import { decodeToFloat32 } from '../floats.js';
import { better } from '../ops/topk.js';
import {
  checkCompatible,
  expectInteger,
  type Hit,
  isTokenBatch,
  isTokenMatrix,
  matrixAsBatch,
  optionsObject,
  selectItems,
  type TokenBatch,
  type TokenMatrix,
  totalTokens,
} from '../tensor.js';
import { type Buckets, fitBuckets } from './codec.js';
import { kmeans, sampleIndices, seededRandom } from './kmeans.js';
import { type KernelOptions, type NativeIndex, type NativeSearchStats, residualAddon } from './native.js';

export interface BuildIndexOptions extends KernelOptions {
  /** Bits per residual dimension: 2 (default) or 4. */
  bits?: 2 | 4;
  /** Number of centroids K (default defaultCentroids(tokens)). */
  centroids?: number;
  /** Tokens sampled for k-means and the buckets (default min(tokens, 64 K)). */
  sample?: number;
  /** k-means iterations (default 8). */
  iterations?: number;
  /** Seed of the sample and the initial centroids (default 1). */
  seed?: number;
  /** Keep the source documents for the exact re-scoring (default true). */
  keepTokens?: boolean;
}

export interface BuildStats {
  tokens: number;
  sample: number;
  centroids: number;
  bits: 2 | 4;
  /** Bytes per token of the codes plus a 4-byte centroid id (the resident form). */
  bytesPerToken: number;
  /** Mean over tokens of |x - decoded|^2, and over the sample of |x|^2 (their ratio: the relative error). */
  meanSquaredError: number;
  meanSquaredNorm: number;
  msKmeans: number;
  msEncode: number;
  msLists: number;
}

export interface IndexSearchOptions extends KernelOptions {
  /** Hits to return. */
  k: number;
  /** Centroids probed per query token (default: defaultSearch(k).nprobe). */
  nprobe?: number;
  /** Documents kept by centroid interaction and scored on the residuals (default: defaultSearch). */
  candidates?: number;
  /** Centroid pruning: centroids whose best query-token score is below it are left out of the bags. */
  threshold?: number;
  /** Residual-scored documents re-scored exactly when tokens are kept (default: defaultSearch). */
  rescore?: number;
}

export interface IndexSearchStats {
  /** 'exact': scores are exact MaxSim of the source tokens; 'residual': MaxSim of the decoded tokens. */
  scores: 'exact' | 'residual';
  probed: number;
  generated: number;
  keptCentroids: number;
  scored: number;
  rescored: number;
  ms: { centroids: number; candidates: number; interaction: number; residual: number; rescore: number };
  isa: string;
}

export interface IndexSearchResult {
  hits: Hit[];
  stats: IndexSearchStats;
}

/** PLAID's K: 2^floor(log2(16 sqrt(tokens))), at least 1 and at most the token count. */
export function defaultCentroids(tokens: number): number {
  if (tokens < 1) return 1;
  return Math.max(1, Math.min(tokens, 2 ** Math.floor(Math.log2(16 * Math.sqrt(tokens)))));
}

/** The search defaults for k hits (bench/plaid.ts measured them; docs/index.md has the curve). */
export function defaultSearch(k: number): { nprobe: number; candidates: number; rescore: number } {
  // 100K documents x 64 tokens, K = 2048, 2-bit: k = 10 at (8, 1024, 256) gave recall@10 0.970,
  // k = 100 at (16, 2048, 512) recall@100 0.963 (bench/results/plaid-cpu.md)
  return { nprobe: k <= 10 ? 8 : 16, candidates: Math.max(1024, 20 * k), rescore: Math.max(256, 5 * k) };
}

function checkBits(v: unknown): 2 | 4 {
  if (v === undefined) return 2;
  if (v !== 2 && v !== 4) throw new InvalidArgumentError('options.bits', '2 or 4', String(v));
  return v;
}

// The rows of stream tokens `at` (ascending stream indices) as float32.
function gatherRows(docs: TokenBatch, at: Float64Array): Float32Array {
  const d = docs.dim;
  const out = new Float32Array(at.length * d);
  let doc = 0;
  let first = 0;
  for (let i = 0; i < at.length; i++) {
    while (at[i] >= first + docs.lengths[doc]) first += docs.lengths[doc++];
    const t = docs.starts[doc] + (at[i] - first);
    const row = docs.data.subarray(t * d, t * d + d) as Float32Array | Uint16Array;
    out.set(decodeToFloat32(row, docs.dtype, d), i * d);
  }
  return out;
}

export class PlaidIndex {
  readonly count: number;
  readonly dim: number;
  readonly bits: 2 | 4;
  readonly centroids: number;
  readonly buildStats: BuildStats;
  /** @internal */ readonly native: NativeIndex;
  /** @internal */ readonly buckets: Buckets;
  readonly #docs: TokenBatch | undefined;

  /** @internal use buildIndex */
  constructor(native: NativeIndex, buckets: Buckets, docs: TokenBatch | undefined, stats: BuildStats) {
    residualAddon().checkIndex(native);
    this.native = native;
    this.buckets = buckets;
    this.#docs = docs;
    this.count = native.docs;
    this.dim = native.d;
    this.bits = native.bits;
    this.centroids = native.k;
    this.buildStats = stats;
  }

  /** The k best documents for one query (float32, float16 or bfloat16 tokens). */
  async search(query: TokenMatrix, options: IndexSearchOptions): Promise<IndexSearchResult> {
    if (!isTokenMatrix(query))
      throw new InvalidArgumentError('query', 'a TokenMatrix (searchAll takes a batch)', typeof query);
    options = optionsObject(options, 'k, nprobe, candidates, threshold, rescore, threads, isa');
    if (query.dtype === 'int8') throw new InvalidArgumentError('query.dtype', 'a float dtype', "'int8'");
    if (query.dim !== this.dim)
      throw new InvalidArgumentError('query.dim', `${this.dim} (the index's dim)`, String(query.dim));
    const k = expectInteger('options.k', options.k, 1);
    const def = defaultSearch(k);
    const nprobe = expectInteger('options.nprobe', options.nprobe ?? def.nprobe, 1);
    const candidates = expectInteger('options.candidates', options.candidates ?? def.candidates, 1);
    const rescore = expectInteger('options.rescore', options.rescore ?? def.rescore, k);
    const threshold = options.threshold ?? Number.NEGATIVE_INFINITY;
    if (typeof threshold !== 'number' || Number.isNaN(threshold))
      throw new InvalidArgumentError('options.threshold', 'a number', String(threshold));
    const q = decodeToFloat32(query.data, query.dtype, query.dim).subarray(0, query.length * query.dim);
    const r = await residualAddon().search(this.native, q, {
      nprobe: Math.min(nprobe, this.centroids),
      candidates: Math.max(candidates, k),
      threshold,
      threads: options.threads,
      isa: options.isa,
    });
    return this.#finish(query, k, rescore, r, options.threads);
  }

  /** search for every query of a batch, in order. */
  async searchAll(queries: TokenBatch, options: IndexSearchOptions): Promise<IndexSearchResult[]> {
    if (!isTokenBatch(queries)) throw new InvalidArgumentError('queries', 'a TokenBatch', typeof queries);
    const out: IndexSearchResult[] = [];
    for (let i = 0; i < queries.count; i++) {
      const s = queries.starts[i] * queries.dim;
      const data = queries.data.subarray(s, s + queries.lengths[i] * queries.dim);
      out.push(
        await this.search(
          { kind: 'matrix', dtype: queries.dtype, data, length: queries.lengths[i], dim: queries.dim },
          options,
        ),
      );
    }
    return out;
  }

  async #finish(
    query: TokenMatrix,
    k: number,
    rescore: number,
    r: { ids: Int32Array; scores: Float32Array; stats: NativeSearchStats },
    threads: number | undefined,
  ): Promise<IndexSearchResult> {
    const st = r.stats;
    const stats: IndexSearchStats = {
      scores: this.#docs ? 'exact' : 'residual',
      probed: st.probed,
      generated: st.generated,
      keptCentroids: st.keptCentroids,
      scored: st.scored,
      rescored: 0,
      ms: {
        centroids: st.msCentroids,
        candidates: st.msCandidates,
        interaction: st.msInteraction,
        residual: st.msResidual,
        rescore: 0,
      },
      isa: st.isa,
    };
    if (!this.#docs) {
      const hits: Hit[] = [];
      for (let i = 0; i < Math.min(k, r.ids.length); i++) hits.push({ index: r.ids[i], score: r.scores[i] });
      return { hits, stats };
    }
    const t0 = performance.now();
    const ids = r.ids.subarray(0, Math.min(rescore, r.ids.length));
    const docs = this.#docs;
    checkCompatible(query, docs, 'query', 'docs');
    const exact = await cpuMaxsim(matrixAsBatch(query), selectItems(docs, ids), { threads });
    const order = Array.from(ids.keys()).sort((a, b) =>
      better(exact[a], ids[a], exact[b], ids[b]) ? -1 : 1,
    );
    const hits = order.slice(0, k).map((i) => ({ index: ids[i], score: exact[i] }));
    stats.rescored = ids.length;
    stats.ms.rescore = performance.now() - t0;
    return { hits, stats };
  }
}

/** Builds an index over the documents (float32, float16 or bfloat16). */
export async function buildIndex(docs: TokenBatch, options: BuildIndexOptions = {}): Promise<PlaidIndex> {
  if (!isTokenBatch(docs)) throw new InvalidArgumentError('docs', 'a TokenBatch', typeof docs);
  options = optionsObject(options, 'bits, centroids, sample, iterations, seed, keepTokens, threads, isa');
  if (docs.dtype === 'int8')
    throw new InvalidArgumentError('docs.dtype', "'float32', 'float16' or 'bfloat16'", "'int8'");
  const bits = checkBits(options.bits);
  const tokens = totalTokens(docs);
  if (tokens < 1) throw new InvalidArgumentError('docs', 'at least one token', '0 tokens');
  const k = expectInteger('options.centroids', options.centroids ?? defaultCentroids(tokens), 1, tokens);
  const sample = expectInteger('options.sample', options.sample ?? Math.min(tokens, 64 * k), k, tokens);
  const iterations = expectInteger('options.iterations', options.iterations ?? 8, 0, 1000);
  const seed = expectInteger('options.seed', options.seed ?? 1, 0, 2 ** 32 - 1);
  const kern = { threads: options.threads, isa: options.isa };
  const d = docs.dim;
  const t0 = performance.now();
  const at = sampleIndices(tokens, sample, seededRandom(seed ^ 0x9e3779b9));
  const x = gatherRows(docs, at);
  const km = await kmeans(x, d, k, { seed, iterations, ...kern });
  let norm = 0;
  for (let i = 0; i < x.length; i++) norm += x[i] * x[i];
  // residuals of the sample against the centroids they were assigned to
  for (let i = 0; i < sample; i++) {
    const c = km.assignment[i] * d;
    for (let j = 0; j < d; j++) x[i * d + j] -= km.centroids[c + j];
  }
  const buckets = fitBuckets(x, d, bits);
  const t1 = performance.now();
  const enc = await residualAddon().encode(docs, km.centroids, buckets.cutoffs, buckets.tables, bits, kern);
  const t2 = performance.now();
  const lists = buildLists(docs.lengths, enc.cids, k);
  const t3 = performance.now();
  const stats: BuildStats = {
    tokens,
    sample,
    centroids: k,
    bits,
    bytesPerToken: (enc.codes.length + 4 * enc.cids.length) / tokens,
    meanSquaredError: enc.sqError[0] / tokens,
    meanSquaredNorm: norm / sample,
    msKmeans: t1 - t0,
    msEncode: t2 - t1,
    msLists: t3 - t2,
  };
  const native: NativeIndex = {
    k,
    d,
    docs: docs.count,
    bits,
    centroids: km.centroids,
    tables: buckets.tables,
    cids: enc.cids,
    codes: enc.codes,
    ...lists,
  };
  return new PlaidIndex(native, buckets, options.keepTokens === false ? undefined : docs, stats);
}

/** Document offsets, bags (distinct centroids of each document, ascending) and inverted lists. */
export function buildLists(
  lengths: Int32Array,
  cids: Int32Array,
  k: number,
): Pick<NativeIndex, 'docOffsets' | 'bagOffsets' | 'bags' | 'ivfOffsets' | 'ivf'> {
  const n = lengths.length;
  const docOffsets = new Float64Array(n + 1);
  for (let b = 0; b < n; b++) docOffsets[b + 1] = docOffsets[b] + lengths[b];
  const seen = new Int32Array(k).fill(-1);
  const bagOffsets = new Float64Array(n + 1);
  let bags = new Int32Array(Math.max(16, Math.min(docOffsets[n], 1 << 20)));
  let m = 0;
  const counts = new Float64Array(k + 1);
  for (let b = 0; b < n; b++) {
    const from = m;
    for (let t = docOffsets[b]; t < docOffsets[b + 1]; t++) {
      const c = cids[t];
      if (seen[c] === b) continue;
      seen[c] = b;
      if (m === bags.length) {
        const grown = new Int32Array(bags.length * 2);
        grown.set(bags);
        bags = grown;
      }
      bags[m++] = c;
      counts[c + 1]++;
    }
    bags.subarray(from, m).sort();
    bagOffsets[b + 1] = m;
  }
  for (let c = 0; c < k; c++) counts[c + 1] += counts[c];
  const ivf = new Int32Array(m);
  const cursor = counts.slice(0, k);
  for (let b = 0; b < n; b++)
    for (let j = bagOffsets[b]; j < bagOffsets[b + 1]; j++) ivf[cursor[bags[j]]++] = b;
  return { docOffsets, bagOffsets, bags: bags.slice(0, m), ivfOffsets: counts, ivf };
}
