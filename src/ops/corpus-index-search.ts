// Search of a corpus through its index (src/io/corpus/index-reader.ts): for each query, every indexed
// token segment runs PLAID's stages (query x centroids, inverted-list candidates, centroid
// interaction, decompress-and-MaxSim on the residuals; src/plaid); the best `rescore` residual-scored
// live documents of all segments, together with every live document of the unindexed segments
// (appended since the last `corpus index`), are re-scored exactly by the corpus's own scan kernel, so
// the returned scores are exact MaxSim of the stored tokens and only the candidate set is approximate.
// On the GPU the indexed segments' tokens go to the device with their index (float corpora), so the
// stages' final lists come back re-scored exactly there and only unindexed documents are scanned.
import { withCancelFlag } from '../abort.js';
import { resolveBackend } from '../backends/select.js';
import { InvalidArgumentError } from '../errors.js';
import type { CorpusFile } from '../io/corpus/index.js';
import { segmentBatch } from '../io/corpus/index-build.js';
import { describeValue as describe } from '../io/corpus/manifest.js';
import { plaidCudaReason } from '../plaid/cuda-native.js';
import { CUDA_MAX_NPROBE, CUDA_MAX_QUERY, type StagePrecision } from '../plaid/cuda-plan.js';
import { cudaSearchBatch, type DeviceIndexSource } from '../plaid/cuda-search.js';
import { defaultSearch, INTERACTIONS, type IndexInteraction, type PlaidIndex } from '../plaid/plaid.js';
import type { Hit, TokenBatch, TokenMatrix } from '../tensor.js';
import { mergeHits } from './corpus-hits.js';
import { fillShortRows } from './corpus-index-fill.js';
import { snapshotQueries } from './corpus-queries.js';

export interface CorpusIndexOptions {
  /** Centroids probed per query token (1..K; default by k, see docs/index.md). */
  nprobe?: number;
  /** Documents kept by centroid interaction per segment and scored on the residuals. */
  candidates?: number;
  /** Residual-scored documents re-scored exactly (at least k). */
  rescore?: number;
  /** Centroid pruning threshold of the interaction stage (default: none). */
  threshold?: number;
  /**
   * The CPU residual stage's token pruning (PlaidIndex.search): tokens whose centroid scores below
   * every query token's best centroid score less this fraction of it count that centroid score
   * alone (default 0.25; Infinity decodes every token). The GPU stages decode every token. A corpus
   * that dropped its tokens defaults to Infinity: its residual scores are the returned ones, and a
   * pruned token's would be its centroid's alone, not the MaxSim of the decoded vectors.
   */
  prune?: number;
  /**
   * How reached documents are scored before the residual stage (PlaidIndex.search): the GPU stages
   * implement 'bags', the default there; the CPU default is 'lists'. 'auto' runs 'lists' and 'hybrid'
   * on the CPU; backend 'cuda' with either is an error.
   */
  interaction?: 'lists' | 'bags' | 'hybrid';
  /**
   * The arithmetic of the GPU stages' products (query x centroids, residual scoring): 'float16'
   * (tensor cores; the default where the corpus keeps its tokens, which re-score the final list
   * exactly) or 'float32' (the CPU stages' arithmetic, bitwise; the only one where the corpus keeps
   * only its index, since its residual scores are final). The CPU stages always run 'float32'.
   */
  precision?: StagePrecision;
}

export interface IndexStage {
  name: 'centroids' | 'candidates' | 'interaction' | 'residual' | 'rescore';
  /** Documents the stage produced (summed over queries and segments; centroids: centroids probed). */
  candidates: number;
  ms: number;
}

export interface IndexSearchStats {
  /**
   * 'exact': returned scores are exact MaxSim of the stored tokens (re-scored); 'residual': the
   * corpus keeps only its index (`corpus index --drop-tokens`), so scores are MaxSim of the decoded
   * residuals (exact for documents of unindexed segments, appended since the last `corpus index`).
   */
  scores: 'exact' | 'residual';
  nprobe: number;
  candidates: number;
  rescore: number;
  indexedSegments: number;
  /** Live documents of unindexed segments, scanned exactly for each query. */
  scannedDocuments: number;
  /**
   * Documents added, over all queries, where the stages reached fewer than min(k, live documents):
   * scored exactly (or on the residuals where the corpus keeps only its index); 0 when none was short.
   */
  filled: number;
  /** The interaction the stages ran ('bags' on the GPU). */
  interaction: 'lists' | 'bags' | 'hybrid';
  /** The arithmetic the stages' products ran in ('float32' on the CPU). */
  precision: StagePrecision;
  stages: IndexStage[];
  isa: string;
}

const KEYS = new Set(['nprobe', 'candidates', 'rescore', 'threshold', 'prune', 'interaction', 'precision']);
const MAX = 1 << 24;

function whole(name: string, v: unknown, min: number, max: number, why = ''): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max)
    throw new InvalidArgumentError(name, `an integer in [${min}, ${max}]${why}`, describe(v));
  return v;
}

/** The index settings of one search: checked strictly, defaults from k (see defaultSearch). */
export function indexSettings(
  value: unknown,
  k: number,
  centroids: number,
  /** The corpus's documents: the defaults grow with it (defaultSearch). */
  docs?: number,
  /** The residual scores are the returned ones (tokens dropped): no pruning by default. */
  residualOnly = false,
): {
  nprobe: number;
  candidates: number;
  rescore: number;
  threshold: number;
  prune: number;
  interaction: IndexInteraction | undefined;
  precision: StagePrecision | undefined;
} {
  if (value !== undefined && (value === null || typeof value !== 'object' || Array.isArray(value)))
    throw new InvalidArgumentError(
      'index',
      'false or an object { nprobe, candidates, rescore, threshold, prune, interaction, precision }',
      describe(value),
    );
  const o = (value ?? {}) as Record<string, unknown>;
  for (const key of Object.keys(o))
    if (!KEYS.has(key))
      throw new InvalidArgumentError(
        `index.${key}`,
        'one of nprobe, candidates, rescore, threshold, prune, interaction, precision',
        'an unknown option',
      );
  const def = defaultSearch(Math.max(1, k), docs);
  const interaction = o.interaction as IndexInteraction | undefined;
  if (interaction !== undefined && !INTERACTIONS.includes(interaction))
    throw new InvalidArgumentError('index.interaction', "'lists', 'bags' or 'hybrid'", describe(interaction));
  const precision = o.precision as StagePrecision | undefined;
  if (precision !== undefined && precision !== 'float16' && precision !== 'float32')
    throw new InvalidArgumentError('index.precision', "'float16' or 'float32'", describe(precision));
  const threshold = o.threshold ?? Number.NEGATIVE_INFINITY;
  if (typeof threshold !== 'number' || Number.isNaN(threshold) || threshold === Number.POSITIVE_INFINITY)
    throw new InvalidArgumentError(
      'index.threshold',
      'a number (or -Infinity: no pruning)',
      describe(threshold),
    );
  const prune = o.prune ?? (residualOnly ? Number.POSITIVE_INFINITY : def.prune);
  if (typeof prune !== 'number' || !(prune >= 0))
    throw new InvalidArgumentError('index.prune', 'a number >= 0 (Infinity: no pruning)', describe(prune));
  return {
    nprobe: whole(
      'index.nprobe',
      o.nprobe ?? Math.min(def.nprobe, centroids),
      1,
      centroids,
      " (the index's centroids)",
    ),
    candidates: whole('index.candidates', o.candidates ?? Math.min(def.candidates, MAX), 1, MAX),
    rescore: whole(
      'index.rescore',
      o.rescore ?? Math.min(Math.max(def.rescore, k), Math.max(MAX, k)),
      Math.max(1, k),
      MAX,
      ' (at least k)',
    ),
    threshold,
    prune,
    interaction,
    precision,
  };
}

/** One query of a batch as a matrix (a view of the same rows). */
function queryRows(q: TokenBatch, i: number): TokenMatrix {
  const s0 = q.starts[i] * q.dim;
  return {
    kind: 'matrix',
    dtype: q.dtype,
    data: q.data.subarray(s0, s0 + q.lengths[i] * q.dim),
    length: q.lengths[i],
    dim: q.dim,
  } as TokenMatrix;
}

/** One query of a batch as a batch of one (a view of the same rows). */
function oneQuery(q: TokenBatch, i: number): TokenBatch {
  return {
    ...q,
    count: 1,
    starts: Float64Array.of(q.starts[i]),
    lengths: Int32Array.of(q.lengths[i]),
    maxLength: q.lengths[i],
  };
}

type Settings = ReturnType<typeof indexSettings>;

/**
 * The GPU stages of one indexed segment for a whole batch (src/plaid/cuda-search.ts): `search`
 * returns what PlaidIndex.search returns, one result per query, residual scores included; `usable`
 * says whether a search of these settings and queries runs there ('auto' keeps the CPU stages where
 * the GPU path refuses: nprobe over 32, queries over 256 tokens, or no CUDA plaid engine). A test or
 * another engine may replace them; search undefined: every backend runs the CPU stages.
 */
export const gpuStages: {
  search?: (
    plaid: PlaidIndex,
    queries: TokenBatch,
    options: {
      k: number;
      nprobe: number;
      candidates: number;
      rescore: number;
      threshold: number;
      device?: number;
      precision?: StagePrecision;
      /** The corpus re-scores the returned documents exactly (it keeps its tokens). */
      rescored: boolean;
      /** The segment's tokens, for the exact re-score on the device (stats.exact says whether it ran). */
      tokens?: () => TokenBatch;
    },
  ) => Promise<{ hits: Hit[]; stats: SegmentStats }[]>;
  usable?: (settings: Settings, queries: TokenBatch, explicit: boolean) => boolean;
} = {
  search: async (plaid, queries, options) => {
    let source: DeviceIndexSource = plaid;
    if (options.tokens && !tokensRefused.has(plaid)) source = withTokens(plaid, options.tokens);
    let r: Awaited<ReturnType<typeof cudaSearchBatch>>;
    try {
      r = await cudaSearchBatch(source, queries, options);
    } catch (e) {
      // the tokens do not fit beside the index: the index alone, re-scored on the host as before
      if (source === plaid || (e as { code?: string }).code !== 'CUDA_ERROR_OUT_OF_MEMORY') throw e;
      tokensRefused.add(plaid);
      r = await cudaSearchBatch(plaid, queries, options);
    }
    const exact = source !== plaid && !tokensRefused.has(plaid);
    return r.results.map((x) => ({
      hits: x.hits,
      stats: { ...x.stats, precision: r.precision, exact, rescored: x.stats.rescored },
    }));
  },
  usable: (settings, queries, explicit) =>
    explicit ||
    ((settings.interaction ?? 'bags') === 'bags' &&
      plaidCudaReason() === undefined &&
      settings.nprobe <= CUDA_MAX_NPROBE &&
      queries.lengths.subarray(0, queries.count).every((l) => l <= CUDA_MAX_QUERY)),
};

type SegmentStats = {
  probed: number;
  generated: number;
  scored: number;
  ms: Tally;
  isa: string;
  /** The GPU stages' arithmetic (absent: the CPU's, 'float32'). */
  precision?: StagePrecision;
  /** The hits' scores are exact MaxSim (re-scored on the device on the segment's tokens). */
  exact?: boolean;
  /** Documents re-scored on the device, per query. */
  rescored?: number;
};

// A segment's index with its tokens, for the device upload (one per index, so one device copy), and
// the indexes whose tokens did not fit on the device.
const tokenSources = new WeakMap<PlaidIndex, DeviceIndexSource>();
const tokensRefused = new WeakSet<PlaidIndex>();
function withTokens(plaid: PlaidIndex, tokens: () => TokenBatch): DeviceIndexSource {
  let s = tokenSources.get(plaid);
  if (!s) {
    let t: TokenBatch | undefined;
    const { native, count, dim, centroids } = plaid;
    const sourceTokens = () => {
      t ??= tokens();
      return [t];
    };
    s = { native, count, dim, centroids, sourceTokens };
    tokenSources.set(plaid, s);
  }
  return s;
}
const STAGES = ['centroids', 'candidates', 'interaction', 'residual', 'rescore'] as const;
type Tally = Record<(typeof STAGES)[number], number>;

/**
 * The stages of one indexed segment for every query of a batch: each query's `want` best by residual
 * score (indices local to the segment), and the stats. The batch seam: batched stages (one centroid
 * GEMM and one walk of the lists for all queries) replace this loop where src/plaid has them.
 */
export async function searchSegmentBatch(
  plaid: PlaidIndex,
  queries: readonly TokenMatrix[],
  want: number,
  settings: Settings,
  threads: number | undefined,
  signal: AbortSignal | undefined,
  /** The batch as one TokenBatch and the device: the GPU stages take it whole. */
  gpu?: { queries: TokenBatch; device?: number; rescored: boolean; tokens?: () => TokenBatch },
): Promise<{ hits: Hit[][]; stats: SegmentStats[] }> {
  if (gpu && gpuStages.search) {
    signal?.throwIfAborted();
    const r = await gpuStages.search(plaid, gpu.queries, {
      device: gpu.device,
      k: want,
      nprobe: settings.nprobe,
      candidates: Math.max(settings.candidates, want),
      rescore: want,
      threshold: settings.threshold,
      precision: settings.precision,
      rescored: gpu.rescored,
      tokens: gpu.tokens,
    });
    return { hits: r.map((x) => x.hits), stats: r.map((x) => x.stats) };
  }
  const hits: Hit[][] = [];
  const stats = [];
  for (const query of queries) {
    signal?.throwIfAborted();
    if (query.length === 0) {
      hits.push([]);
      continue;
    }
    const r = await plaid.search(query, {
      k: want,
      nprobe: settings.nprobe,
      candidates: Math.max(settings.candidates, want),
      rescore: want,
      threshold: settings.threshold,
      prune: settings.prune,
      interaction: settings.interaction,
      threads,
    });
    hits.push(r.hits);
    stats.push({ ...r.stats, ms: { ...r.stats.ms } });
  }
  return { hits, stats };
}

/**
 * The k best live documents for each query through the index. `floats`: the queries as float
 * tokens (the index stages); `scan`: the queries in the corpus dtype; `exact(q, subset)` scores one
 * query against a sorted list of documents with the corpus's scan and returns the best `k`. Where
 * the corpus keeps only its index, the residual scores are final (only unindexed segments, whose
 * tokens are still stored, are scanned).
 */
export async function searchThroughIndex(
  file: CorpusFile,
  floats: TokenBatch,
  scan: TokenBatch,
  k: number,
  settings: Settings,
  threads: number | undefined,
  exact: (q: TokenBatch, subset: number[], k: number) => Promise<Hit[]>,
  signal?: AbortSignal,
  /** Run the index stages on the GPU (gpuStages), on this device. */
  gpu: false | { device?: number } = false,
): Promise<{ hits: Hit[][]; stats: IndexSearchStats }> {
  const index = file.index!;
  const residualOnly = file.tokensDropped;
  const ms: Tally = { centroids: 0, candidates: 0, interaction: 0, residual: 0, rescore: 0 };
  const count: Tally = { centroids: 0, candidates: 0, interaction: 0, residual: 0, rescore: 0 };
  let isa = '';
  let precision: StagePrecision = 'float32';
  // live documents of unindexed segments: scanned exactly for every query
  const unindexed: number[] = [];
  const deletedIn = new Int32Array(file.segments.length);
  file.segments.forEach((s, si) => {
    for (let i = s.firstDocument; i < s.firstDocument + s.header.documents; i++) {
      if (file.isDeleted(i)) deletedIn[si]++;
      else if (index.segmentSlots[si] < 0) unindexed.push(i);
    }
  });
  const keep = residualOnly ? k : settings.rescore;
  // every indexed segment's lists came back exactly re-scored on the device
  let deviceExact = gpu !== false && !residualOnly;
  // float tokens only: an int8 segment would go up dequantized, 4x its bytes
  const deviceTokens = deviceExact && file.info.dtype !== 'int8';
  const queries = Array.from({ length: floats.count }, (_, i) => queryRows(floats, i));
  const residual: Hit[][] = queries.map(() => []);
  for (let si = 0; si < file.segments.length && k > 0; si++) {
    const plaid = index.segment(si);
    if (!plaid || plaid.count === 0) continue;
    // deleted documents are dropped after the stages: ask for that many more
    const want = Math.min(keep + deletedIn[si], plaid.count);
    const r = await searchSegmentBatch(
      plaid,
      queries,
      want,
      settings,
      threads,
      signal,
      gpu
        ? {
            queries: floats,
            device: gpu.device,
            rescored: !residualOnly,
            tokens: deviceTokens ? () => segmentBatch(file, si) : undefined,
          }
        : undefined,
    );
    for (const st of r.stats) {
      isa = st.isa;
      precision = st.precision ?? 'float32';
      deviceExact &&= st.exact === true;
      if (st.exact) {
        count.rescore += st.rescored ?? 0;
        ms.rescore += st.ms.rescore;
      }
      count.centroids += st.probed;
      count.candidates += st.generated;
      count.interaction += Math.min(st.generated, Math.max(settings.candidates, want));
      count.residual += st.scored;
      for (const key of ['centroids', 'candidates', 'interaction', 'residual'] as const)
        ms[key] += st.ms[key];
    }
    const first = file.segments[si].firstDocument;
    r.hits.forEach((row, qi) => {
      const live = row
        .map((h) => ({ index: first + h.index, score: h.score }))
        .filter((h) => !file.isDeleted(h.index));
      residual[qi] = mergeHits(residual[qi], live, keep);
    });
  }
  const hits: Hit[][] = [];
  for (let qi = 0; qi < floats.count; qi++) {
    signal?.throwIfAborted();
    const t0 = performance.now();
    // index only, or re-scored on the device: the lists' scores stand, the unindexed documents are
    // scanned and merged in
    const final = residualOnly || deviceExact;
    const subset = (final ? unindexed : [...residual[qi].map((h) => h.index), ...unindexed]).sort(
      (a, b) => a - b,
    );
    count.rescore += subset.length;
    const scanned = subset.length > 0 && k > 0 ? await exact(oneQuery(scan, qi), subset, k) : [];
    hits.push(final ? mergeHits(residual[qi].slice(0, k), scanned, k) : scanned);
    ms.rescore += performance.now() - t0;
  }
  const t0 = performance.now();
  const filled = await fillShortRows(
    file,
    hits,
    queries,
    k,
    residualOnly ? undefined : (qi, subset, n) => exact(oneQuery(scan, qi), subset, n),
    signal,
  );
  ms.rescore += performance.now() - t0;
  const stages = STAGES.map((name) => ({ name, candidates: count[name], ms: ms[name] }));
  return {
    hits,
    stats: {
      scores: residualOnly ? 'residual' : 'exact',
      nprobe: settings.nprobe,
      candidates: settings.candidates,
      rescore: residualOnly ? 0 : settings.rescore,
      indexedSegments: index.manifest.segments.length,
      scannedDocuments: unindexed.length,
      filled,
      interaction: gpu
        ? 'bags'
        : (settings.interaction ?? defaultSearch(Math.max(1, k), file.info.documents).interaction),
      stages,
      isa,
      precision,
    },
  };
}

/** The exact scan of some documents for one query, as the corpus's search runs it (CPU). */
export type SubsetScan = (
  q: TokenBatch,
  k: number,
  cancel: Int32Array | undefined,
  subset: number[],
) => Promise<{ hits: Hit[][]; stats: { bytes: number } }>;

/**
 * A corpus search through its index (CPU): checks the queries and settings, runs the stages and
 * names the hits. `q`: the queries in the corpus dtype (for the exact scan of `scanSubset`).
 */
export async function searchIndexed(
  file: CorpusFile,
  queries: TokenBatch,
  q: TokenBatch,
  k: number,
  options: { index?: unknown; threads?: number; backend?: string; device?: number },
  signal: AbortSignal | undefined,
  scanSubset: SubsetScan,
) {
  const started = performance.now();
  const floats = snapshotQueries(queries);
  if (floats.dtype === 'int8')
    throw new InvalidArgumentError(
      'queries.dtype',
      'float queries for a search through the index (or index: false)',
      "'int8'",
    );
  // no more hits than live documents: a k past them asks the stages for nothing more
  k = Math.min(k, file.info.live);
  const settings = indexSettings(
    options.index,
    k,
    file.index!.manifest.centroids,
    file.info.documents,
    file.tokensDropped,
  );
  if (settings.precision === 'float16' && file.tokensDropped)
    throw new InvalidArgumentError(
      'index.precision',
      "'float32' for a corpus that keeps only its index (its residual scores are final)",
      "'float16'",
    );
  if (settings.precision === 'float16' && options.backend === 'cpu')
    throw new InvalidArgumentError(
      'index.precision',
      "'float32' on the cpu backend (float16 is the GPU stages' arithmetic)",
      "'float16'",
    );
  if (options.backend === 'cuda' && gpuStages.search && (settings.interaction ?? 'bags') !== 'bags')
    throw new InvalidArgumentError(
      'index.interaction',
      "'bags' on the cuda backend (its stages implement the bag interaction; backend 'auto' runs the others on the CPU)",
      `'${settings.interaction}'`,
    );
  // backend 'cuda' (or 'auto' with a GPU) and GPU stages in the build: the stages there, the exact
  // re-score as on the CPU
  const backend = options.backend ?? 'auto';
  const gpu =
    gpuStages.search !== undefined &&
    (backend === 'cuda' || backend === 'auto') &&
    resolveBackend(backend as 'cuda' | 'auto') === 'cuda' &&
    (gpuStages.usable?.(settings, floats, backend === 'cuda') ?? true);
  let bytes = 0;
  const r = await withCancelFlag(signal, (cancel) =>
    searchThroughIndex(
      file,
      floats,
      q,
      k,
      settings,
      options.threads,
      async (one, subset, n) => {
        const exact = await scanSubset(one, n, cancel, subset);
        bytes += exact.stats.bytes;
        return exact.hits[0];
      },
      signal,
      gpu && { device: options.device },
    ),
  );
  const seconds = (performance.now() - started) / 1000;
  return {
    hits: r.hits.map((row) => row.map((h) => ({ index: h.index, score: h.score, id: file.id(h.index) }))),
    stats: {
      backend: gpu ? ('cuda' as const) : ('cpu' as const),
      path: 'index' as const,
      scores: r.stats.scores,
      generation: file.info.generation,
      blocks: 0,
      bytes,
      documents: r.stats.stages[4].candidates,
      seconds,
      firstBlockSeconds: seconds,
      index: r.stats,
    },
  };
}
