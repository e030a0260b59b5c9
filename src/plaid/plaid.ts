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
// are exact and only the candidate set is approximate. searchAll runs a batch's native stages
// together (src/plaid/batch.ts) with the same results per query.
import { constants as bufferConstants } from 'node:buffer';
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
import { cpuSearchPlan, nativeSearchBatch, splitQueries } from './batch.js';
import { type Buckets, fitBuckets } from './codec.js';
import { defaultCentroids, defaultSearch, INTERACTIONS, type IndexInteraction } from './defaults.js';
import { buildLists } from './lists.js';

export { buildLists, defaultCentroids, defaultSearch, INTERACTIONS, type IndexInteraction };

import { type CodecBackend, codecFor } from './cuda-codec.js';
import type { StagePrecision } from './cuda-plan.js';
import { cudaSearchBatch } from './cuda-search.js';
import {
  type AssignGroups,
  buildGroups,
  defaultGroupCount,
  GROUPED_FROM,
  kmeans,
  sampleIndices,
  seededRandom,
} from './kmeans.js';
import {
  int8Residual,
  type KernelOptions,
  type NativeIndex,
  type NativeSearchStats,
  residualAddon,
} from './native.js';
import { fromPartsChecked, type PlaidParts, toParts } from './parts.js';

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
  /**
   * Centroid assignment of the k-means sample and of every token: 'grouped' (two-level: the nearest
   * of the centroids in the `probe` best of `groups` coarse groups; the default from GROUPED_FROM
   * centroids up) or 'exact' (every centroid).
   */
  assignment?: 'exact' | 'grouped';
  /** Coarse groups of the two-level assignment (default defaultGroupCount(K)). */
  groups?: number;
  /** Groups searched per token (default 4). */
  probe?: number;
  /** Progress of a long build: called after each k-means iteration and each encoded slice. */
  onProgress?: (p: BuildProgress) => void;
  /** Where the assignment and the encode run: 'cpu' (default), 'cuda', or 'auto' (a GPU when usable); the index is bitwise the same. */
  backend?: CodecBackend;
}

export interface BuildProgress {
  stage: 'kmeans' | 'encode' | 'lists';
  /** Iterations (kmeans) or tokens (encode) done, of total. */
  done: number;
  total: number;
  /** Milliseconds since the build started. */
  ms: number;
}

export interface BuildStats {
  tokens: number;
  sample: number;
  centroids: number;
  bits: 2 | 4;
  assignment: 'exact' | 'grouped';
  /** Coarse groups and groups probed per token (0 for the exact assignment). */
  groups: number;
  probe: number;
  /** Bytes per token of the codes plus a 4-byte centroid id (the resident form). */
  bytesPerToken: number;
  /** Mean over tokens of |x - decoded|^2, and over the sample of |x|^2 (their ratio: the relative error). */
  meanSquaredError: number;
  meanSquaredNorm: number;
  msKmeans: number;
  msEncode: number;
  msLists: number;
  /** Where the assignment and the encode ran. */
  backend?: 'cpu' | 'cuda';
}

export interface IndexSearchOptions extends KernelOptions {
  /** Hits to return. */
  k: number;
  /** Centroids probed per query token (default: defaultSearch(k).nprobe). */
  nprobe?: number;
  /** Documents kept by centroid interaction and scored on the residuals (default: defaultSearch). */
  candidates?: number;
  /** Centroid pruning ('bags'): centroids whose best query-token score is below it are left out of the bags. */
  threshold?: number;
  /**
   * The residual stage's token pruning (PLAID's centroid pruning, moved to the residual stage): a
   * document token is decoded only when its centroid scores at least best_i - prune |best_i| for
   * some query token i (best_i: i's best centroid score in the index); the other tokens count their
   * centroid score alone. Default 0.25 (defaultSearch); Infinity decodes every token.
   */
  prune?: number;
  /**
   * How reached documents are scored before the residual stage: 'lists' (default: per query token
   * the best of its probed centroids the document holds, its nprobe-th best centroid score when none;
   * costs the probed lists' length) or 'bags' (PLAID's centroid interaction over each document's
   * whole bag of centroids; costs the reached documents' bags) or 'hybrid' (the lists' best
   * 4 x candidates re-scored on their whole bags).
   */
  interaction?: IndexInteraction;
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

/** The largest typed array this runtime makes (4 GiB on Node 20). */
const MAX_ARRAY_BYTES = bufferConstants.MAX_LENGTH;

function checkBits(v: unknown): 2 | 4 {
  if (v === undefined) return 2;
  if (v !== 2 && v !== 4) throw new InvalidArgumentError('options.bits', '2 or 4', String(v));
  return v;
}

// The rows of stream tokens `at` (ascending stream indices over the parts in order) as float32.
function gatherRows(parts: readonly TokenBatch[], at: Float64Array): Float32Array {
  const d = parts[0].dim;
  const out = new Float32Array(at.length * d);
  let p = 0;
  let doc = 0;
  let first = 0;
  for (let i = 0; i < at.length; i++) {
    for (;;) {
      if (doc === parts[p].count) {
        p++;
        doc = 0;
      } else if (at[i] >= first + parts[p].lengths[doc]) first += parts[p].lengths[doc++];
      else break;
    }
    const docs = parts[p];
    const t = docs.starts[doc] + (at[i] - first);
    const row = docs.data.subarray(t * d, t * d + d) as Float32Array | Uint16Array;
    out.set(decodeToFloat32(row, docs.dtype, d), i * d);
  }
  return out;
}

// Documents [b0, b1) of a batch as a batch over the same data.
function docRange(docs: TokenBatch, b0: number, b1: number): TokenBatch {
  let maxLength = 0;
  for (let b = b0; b < b1; b++) maxLength = Math.max(maxLength, docs.lengths[b]);
  return {
    kind: 'batch',
    layout: 'ragged',
    dtype: docs.dtype,
    data: docs.data,
    dim: docs.dim,
    count: b1 - b0,
    maxLength,
    starts: docs.starts.subarray(b0, b1),
    lengths: docs.lengths.subarray(b0, b1),
  };
}

function checkParts(docs: TokenBatch | readonly TokenBatch[]): readonly TokenBatch[] {
  const parts = Array.isArray(docs) ? (docs as readonly TokenBatch[]) : [docs as TokenBatch];
  if (parts.length === 0)
    throw new InvalidArgumentError('docs', 'a TokenBatch or a non-empty array of them', '[]');
  parts.forEach((p, i) => {
    const name = parts.length > 1 ? `docs[${i}]` : 'docs';
    if (!isTokenBatch(p)) throw new InvalidArgumentError(name, 'a TokenBatch', typeof p);
    if (p.dtype === 'int8')
      throw new InvalidArgumentError(`${name}.dtype`, "'float32', 'float16' or 'bfloat16'", "'int8'");
    if (p.dim !== parts[0].dim)
      throw new InvalidArgumentError(`${name}.dim`, `${parts[0].dim} (the first part's)`, String(p.dim));
  });
  return parts;
}

export class PlaidIndex {
  readonly count: number;
  readonly dim: number;
  readonly bits: 2 | 4;
  readonly centroids: number;
  readonly buildStats: BuildStats;
  /** @internal */ readonly native: NativeIndex;
  /** @internal */ readonly buckets: Buckets;
  /** @internal the two-level assignment's groups (undefined: exact); later encodes must use them. */
  readonly assignGroups: AssignGroups | undefined;
  readonly #docs: readonly TokenBatch[] | undefined;
  // first document of each part of #docs, and the end
  readonly #partFirst: Float64Array;

  /** @internal use buildIndex */
  constructor(
    native: NativeIndex,
    buckets: Buckets,
    docs: TokenBatch | readonly TokenBatch[] | undefined,
    stats: BuildStats,
    groups?: AssignGroups,
  ) {
    residualAddon().checkIndex(native);
    this.native = native;
    this.buckets = buckets;
    this.assignGroups = groups;
    this.#docs = docs === undefined ? undefined : Array.isArray(docs) ? docs : [docs as TokenBatch];
    this.#partFirst = new Float64Array((this.#docs?.length ?? 0) + 1);
    this.#docs?.forEach((p, i) => {
      this.#partFirst[i + 1] = this.#partFirst[i] + p.count;
    });
    if (this.#docs && this.#partFirst[this.#docs.length] !== native.docs)
      throw new InvalidArgumentError(
        'docs',
        `${native.docs} documents (the index's)`,
        String(this.#partFirst.at(-1)),
      );
    this.count = native.docs;
    this.dim = native.d;
    this.bits = native.bits;
    this.centroids = native.k;
    this.buildStats = stats;
  }

  /** @internal the source documents' parts in index order (the GPU path uploads them), or undefined. */
  sourceTokens(): readonly TokenBatch[] | undefined {
    return this.#docs;
  }

  /** The index as a JSON-able header and named typed arrays (views, not copies): what a store writes. */
  parts(): PlaidParts {
    return toParts(this.native, this.buckets, this.buildStats, this.assignGroups);
  }

  /**
   * The index of parts() (read back from a store: every field is checked); `tokens`, the source
   * documents, enable the exact re-scoring.
   */
  static fromParts(parts: PlaidParts, tokens?: TokenBatch, source?: string): PlaidIndex {
    const { native, buckets, stats, groups } = fromPartsChecked(parts, source);
    if (tokens !== undefined) {
      if (!isTokenBatch(tokens)) throw new InvalidArgumentError('tokens', 'a TokenBatch', typeof tokens);
      if (tokens.count !== native.docs || tokens.dim !== native.d)
        throw new InvalidArgumentError(
          'tokens',
          `${native.docs} documents of dim ${native.d} (the index's)`,
          `${tokens.count} of dim ${tokens.dim}`,
        );
      for (let i = 0; i < tokens.count; i++)
        if (tokens.lengths[i] !== native.docOffsets[i + 1] - native.docOffsets[i])
          throw new InvalidArgumentError(
            `tokens.lengths[${i}]`,
            `${native.docOffsets[i + 1] - native.docOffsets[i]} (the index's document length)`,
            String(tokens.lengths[i]),
          );
    }
    return new PlaidIndex(native, buckets, tokens, stats, groups);
  }

  /** The k best documents for one query (float32, float16 or bfloat16 tokens). */
  async search(query: TokenMatrix, options: IndexSearchOptions): Promise<IndexSearchResult> {
    if (!isTokenMatrix(query))
      throw new InvalidArgumentError('query', 'a TokenMatrix (searchAll takes a batch)', typeof query);
    options = optionsObject(
      options,
      'k, nprobe, candidates, threshold, prune, interaction, rescore, threads, isa',
    );
    if (query.dtype === 'int8') throw new InvalidArgumentError('query.dtype', 'a float dtype', "'int8'");
    if (query.dim !== this.dim)
      throw new InvalidArgumentError('query.dim', `${this.dim} (the index's dim)`, String(query.dim));
    const { k, rescore, native } = cpuSearchPlan(options, this.count, this.centroids);
    const q = decodeToFloat32(query.data, query.dtype, query.dim).subarray(0, query.length * query.dim);
    const r = await residualAddon().search(this.native, q, native);
    return this.#finish(query, k, rescore, r, options.threads);
  }

  /**
   * search for every query of a batch, in order, each result equal to search's for it. On the CPU the
   * batch shares the native stages (one pass over the centroids for all queries, the later stages one
   * query per thread); backend 'cuda' runs the batch's stages on the GPU.
   */
  async searchAll(
    queries: TokenBatch,
    options: IndexSearchOptions & { backend?: 'cpu' | 'cuda'; device?: number; precision?: StagePrecision },
  ): Promise<IndexSearchResult[]> {
    if (options?.backend === 'cuda') {
      // the CUDA stages implement PLAID's bag interaction only
      const { backend: _, interaction, ...rest } = options;
      if (interaction !== undefined && interaction !== 'bags')
        throw new InvalidArgumentError(
          'options.interaction',
          "'bags' on the cuda backend (its stages implement the bag interaction)",
          String(interaction),
        );
      return (await cudaSearchBatch(this, queries, rest)).results;
    }
    // the CPU stages of the whole batch at once (src/plaid/batch.ts), then each query's exact stage
    const { matrices, rows, lengths } = splitQueries(queries, this.dim);
    options = optionsObject(
      options,
      'k, nprobe, candidates, threshold, prune, interaction, rescore, threads, isa',
    );
    const { k, rescore, native } = cpuSearchPlan(options, this.count, this.centroids);
    const hits = await nativeSearchBatch(this.native, rows, lengths, native);
    const out: IndexSearchResult[] = [];
    for (let i = 0; i < hits.length; i++)
      out.push(await this.#finish(matrices[i], k, rescore, hits[i], options.threads));
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
    if (!this.#docs) return { hits: this.#residualHits(query, k, rescore, r, threads), stats };
    const t0 = performance.now();
    const ids = r.ids.subarray(0, Math.min(rescore, r.ids.length));
    const exact = await this.#exact(query, ids, threads);
    const order = Array.from(ids.keys()).sort((a, b) =>
      better(exact[a], ids[a], exact[b], ids[b]) ? -1 : 1,
    );
    const hits = order.slice(0, k).map((i) => ({ index: ids[i], score: exact[i] }));
    stats.rescored = ids.length;
    stats.ms.rescore = performance.now() - t0;
    return { hits, stats };
  }

  // Without source tokens the residual scores are final: where the stage scored in int8, the best
  // max(rescore, 4 k, 64) are re-scored by the fp32 kernel, so returned scores are the decoded MaxSim.
  #residualHits(
    query: TokenMatrix,
    k: number,
    rescore: number,
    r: { ids: Int32Array; scores: Float32Array; stats: NativeSearchStats },
    threads: number | undefined,
  ): Hit[] {
    let { ids, scores } = r;
    const int8 = int8Residual[r.stats.isa];
    if (int8 && this.bits === 2) {
      ids = ids.subarray(0, Math.min(ids.length, Math.max(rescore, 4 * k, 64)));
      const q = decodeToFloat32(query.data, query.dtype, query.dim).subarray(0, query.length * query.dim);
      scores = residualAddon().scoreDocs(this.native, q, ids, { threads, isa: int8.fp32 });
      const order = Array.from(ids.keys()).sort((a, b) =>
        better(scores[a], ids[a], scores[b], ids[b]) ? -1 : 1,
      );
      ids = Int32Array.from(order, (i) => ids[i]);
      scores = Float32Array.from(order, (i) => scores[i]);
    }
    const hits: Hit[] = [];
    for (let i = 0; i < Math.min(k, ids.length); i++) hits.push({ index: ids[i], score: scores[i] });
    return hits;
  }

  // Exact MaxSim of the listed documents, part by part.
  async #exact(query: TokenMatrix, ids: Int32Array, threads: number | undefined): Promise<Float32Array> {
    const parts = this.#docs as readonly TokenBatch[];
    const out = new Float32Array(ids.length);
    const q = matrixAsBatch(query);
    for (let p = 0; p < parts.length; p++) {
      const at: number[] = [];
      const local: number[] = [];
      ids.forEach((id, i) => {
        if (id >= this.#partFirst[p] && id < this.#partFirst[p + 1]) {
          at.push(i);
          local.push(id - this.#partFirst[p]);
        }
      });
      if (at.length === 0) continue;
      checkCompatible(query, parts[p], 'query', 'docs');
      const s = await cpuMaxsim(q, selectItems(parts[p], local), { threads });
      at.forEach((i, j) => {
        out[i] = s[j];
      });
    }
    return out;
  }
}

/**
 * Builds an index over the documents (float32, float16 or bfloat16): one batch, or parts (e.g. memory-
 * mapped shards) indexed as one stream of documents in order.
 */
export async function buildIndex(
  docs: TokenBatch | readonly TokenBatch[],
  options: BuildIndexOptions = {},
): Promise<PlaidIndex> {
  options = optionsObject(
    options,
    'bits, centroids, sample, iterations, seed, keepTokens, assignment, groups, probe, onProgress, backend, threads, isa',
  );
  const parts = checkParts(docs);
  const bits = checkBits(options.bits);
  let tokens = 0;
  for (const p of parts) tokens += totalTokens(p);
  if (tokens < 1) throw new InvalidArgumentError('docs', 'at least one token', '0 tokens');
  // one index keeps its codes in one typed array: refuse before any work what it cannot hold
  const codeBytes = Math.ceil(tokens / 16) * parts[0].dim * 2 * bits;
  if (codeBytes > MAX_ARRAY_BYTES)
    throw new InvalidArgumentError(
      'docs',
      `at most ${MAX_ARRAY_BYTES} bytes of codes in one index (this runtime's largest typed array; index a corpus, whose segments are indexes of their own)`,
      `${tokens} tokens x d ${parts[0].dim} at ${bits} bits: ${codeBytes} bytes`,
    );
  const k = expectInteger('options.centroids', options.centroids ?? defaultCentroids(tokens), 1, tokens);
  const sample = expectInteger(
    'options.sample',
    options.sample ?? Math.min(tokens, Math.max(k, Math.min(64 * k, 1 << 20))),
    k,
    tokens,
  );
  const iterations = expectInteger('options.iterations', options.iterations ?? 8, 0, 1000);
  const seed = expectInteger('options.seed', options.seed ?? 1, 0, 2 ** 32 - 1);
  const assignment = options.assignment ?? (k >= GROUPED_FROM ? 'grouped' : 'exact');
  if (assignment !== 'exact' && assignment !== 'grouped')
    throw new InvalidArgumentError('options.assignment', "'exact' or 'grouped'", String(assignment));
  const groupCount = expectInteger('options.groups', options.groups ?? defaultGroupCount(k), 1, k);
  const probe = expectInteger('options.probe', options.probe ?? Math.min(4, groupCount), 1, groupCount);
  const onProgress = options.onProgress;
  if (onProgress !== undefined && typeof onProgress !== 'function')
    throw new InvalidArgumentError('options.onProgress', 'a function', typeof onProgress);
  const kern = { threads: options.threads, isa: options.isa };
  const d = parts[0].dim;
  const gpu = codecFor(options.backend, d);
  const t0 = performance.now();
  const progress = (stage: BuildProgress['stage'], done: number, total: number) =>
    onProgress?.({ stage, done, total, ms: performance.now() - t0 });
  const at = sampleIndices(tokens, sample, seededRandom(seed ^ 0x9e3779b9));
  const x = gatherRows(parts, at);
  const grouped = assignment === 'grouped' ? { groups: groupCount, probe } : undefined;
  const km = await kmeans(x, d, k, {
    seed,
    iterations,
    grouped,
    onIteration: (i, n) => progress('kmeans', i, n),
    assign: gpu?.assign,
    ...kern,
  });
  let norm = 0;
  for (let i = 0; i < x.length; i++) norm += x[i] * x[i];
  // residuals of the sample against the centroids they were assigned to
  for (let i = 0; i < sample; i++) {
    const c = km.assignment[i] * d;
    for (let j = 0; j < d; j++) x[i * d + j] -= km.centroids[c + j];
  }
  const buckets = fitBuckets(x, d, bits);
  const groups = grouped
    ? await buildGroups(km.centroids, d, groupCount, probe, { ...kern, seed })
    : undefined;
  const t1 = performance.now();
  const onSlice = (done: number) => progress('encode', done, tokens);
  const enc = gpu
    ? await gpu.encodeParts(parts, tokens, km.centroids, buckets, groups, onSlice)
    : await encodeParts(parts, tokens, km.centroids, buckets, groups, kern, onSlice);
  const t2 = performance.now();
  const lengths = new Int32Array(parts.reduce((n, p) => n + p.count, 0));
  let b = 0;
  for (const p of parts) {
    lengths.set(p.lengths.subarray(0, p.count), b);
    b += p.count;
  }
  const lists = buildLists(lengths, enc.cids, k);
  const t3 = performance.now();
  progress('lists', 1, 1);
  const stats: BuildStats = {
    tokens,
    sample,
    centroids: k,
    bits,
    assignment,
    groups: groups ? groups.coarse.length / d : 0,
    probe: groups ? groups.probe : 0,
    bytesPerToken: (enc.codes.length + 4 * enc.cids.length) / tokens,
    meanSquaredError: enc.sqError / tokens,
    meanSquaredNorm: norm / sample,
    msKmeans: t1 - t0,
    msEncode: t2 - t1,
    msLists: t3 - t2,
    backend: gpu ? 'cuda' : 'cpu',
  };
  const native: NativeIndex = {
    k,
    d,
    docs: lengths.length,
    bits,
    centroids: km.centroids,
    tables: buckets.tables,
    cids: enc.cids,
    codes: enc.codes,
    ...lists,
  };
  return new PlaidIndex(native, buckets, options.keepTokens === false ? undefined : parts, stats, groups);
}

/** Tokens per encode call: progress between calls, and each call's rows stay small. */
const ENCODE_SLICE = 1 << 20;

// Every part's tokens encoded into one stream, a slice of documents per native call.
async function encodeParts(
  parts: readonly TokenBatch[],
  tokens: number,
  centroids: Float32Array,
  buckets: Buckets,
  groups: AssignGroups | undefined,
  kern: KernelOptions,
  onSlice: (done: number) => void,
): Promise<{ cids: Int32Array; codes: Uint8Array; sqError: number }> {
  const padded = Math.ceil(tokens / 16) * 16;
  const cids = new Int32Array(padded);
  const codes = new Uint8Array((padded / 16) * buckets.d * 2 * buckets.bits);
  let first = 0;
  let sqError = 0;
  for (const p of parts) {
    for (let b0 = 0; b0 < p.count; ) {
      let b1 = b0;
      let n = 0;
      while (b1 < p.count && (b1 === b0 || n + p.lengths[b1] <= ENCODE_SLICE)) n += p.lengths[b1++];
      const r = await residualAddon().encode(
        docRange(p, b0, b1),
        centroids,
        buckets.cutoffs,
        buckets.tables,
        buckets.bits,
        {
          ...kern,
          first,
          cids,
          codes,
          groups,
        },
      );
      sqError += r.sqError[0];
      first += n;
      b0 = b1;
      onSlice(first);
    }
  }
  return { cids, codes, sqError };
}
