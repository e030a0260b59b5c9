// Search of a corpus through its index (src/io/corpus/index-reader.ts): for each query, every indexed
// token segment runs PLAID's stages (query x centroids, inverted-list candidates, centroid
// interaction, decompress-and-MaxSim on the residuals; src/plaid); the best `rescore` residual-scored
// live documents of all segments, together with every live document of the unindexed segments
// (appended since the last `corpus index`), are re-scored exactly by the corpus's own scan kernel, so
// the returned scores are exact MaxSim of the stored tokens and only the candidate set is approximate.
import { InvalidArgumentError } from '../errors.js';
import type { CorpusFile } from '../io/corpus/index.js';
import { describeValue as describe } from '../io/corpus/manifest.js';
import { cudaSearchBatch } from '../plaid/cuda-search.js';
import { defaultSearch, type IndexSearchResult } from '../plaid/plaid.js';
import type { Hit, TokenBatch } from '../tensor.js';
import { mergeHits } from './corpus-search.js';

export interface CorpusIndexOptions {
  /** Centroids probed per query token (1..K; default by k, see docs/index.md). */
  nprobe?: number;
  /** Documents kept by centroid interaction per segment and scored on the residuals. */
  candidates?: number;
  /** Residual-scored documents re-scored exactly (at least k). */
  rescore?: number;
  /** Centroid pruning threshold of the interaction stage (default: none). */
  threshold?: number;
}

export interface IndexStage {
  name: 'centroids' | 'candidates' | 'interaction' | 'residual' | 'rescore';
  /** Documents the stage produced (summed over queries and segments; centroids: centroids probed). */
  candidates: number;
  ms: number;
}

export interface IndexSearchStats {
  /** 'exact': returned scores are exact MaxSim of the stored tokens (re-scored). */
  scores: 'exact';
  nprobe: number;
  candidates: number;
  rescore: number;
  indexedSegments: number;
  /** Live documents of unindexed segments, scanned exactly for each query. */
  scannedDocuments: number;
  stages: IndexStage[];
  isa: string;
}

const KEYS = new Set(['nprobe', 'candidates', 'rescore', 'threshold']);
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
): { nprobe: number; candidates: number; rescore: number; threshold: number } {
  if (value !== undefined && (value === null || typeof value !== 'object' || Array.isArray(value)))
    throw new InvalidArgumentError(
      'index',
      'false or an object { nprobe, candidates, rescore, threshold }',
      describe(value),
    );
  const o = (value ?? {}) as Record<string, unknown>;
  for (const key of Object.keys(o))
    if (!KEYS.has(key))
      throw new InvalidArgumentError(
        `index.${key}`,
        'one of nprobe, candidates, rescore, threshold',
        'an unknown option',
      );
  const def = defaultSearch(Math.max(1, k));
  const threshold = o.threshold ?? Number.NEGATIVE_INFINITY;
  if (typeof threshold !== 'number' || Number.isNaN(threshold) || threshold === Number.POSITIVE_INFINITY)
    throw new InvalidArgumentError(
      'index.threshold',
      'a number (or -Infinity: no pruning)',
      describe(threshold),
    );
  return {
    nprobe: whole(
      'index.nprobe',
      o.nprobe ?? Math.min(def.nprobe, centroids),
      1,
      centroids,
      " (the index's centroids)",
    ),
    candidates: whole('index.candidates', o.candidates ?? def.candidates, 1, MAX),
    rescore: whole(
      'index.rescore',
      o.rescore ?? Math.max(def.rescore, k),
      Math.max(1, k),
      MAX,
      ' (at least k)',
    ),
    threshold,
  };
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

/**
 * The k best live documents for each query through the index. `floats`: the queries as float
 * tokens (the index stages); `scan`: the queries in the corpus dtype; `exact(q, subset)` scores one
 * query against a sorted list of documents with the corpus's scan and returns the best `k`.
 */
export async function searchThroughIndex(
  file: CorpusFile,
  floats: TokenBatch,
  scan: TokenBatch,
  k: number,
  settings: ReturnType<typeof indexSettings>,
  threads: number | undefined,
  exact: (q: TokenBatch, subset: number[], k: number) => Promise<Hit[]>,
  signal?: AbortSignal,
  gpu: false | { device?: number } = false,
): Promise<{ hits: Hit[][]; stats: IndexSearchStats }> {
  const index = file.index!;
  const ms = { centroids: 0, candidates: 0, interaction: 0, residual: 0, rescore: 0 };
  const count = { centroids: 0, candidates: 0, interaction: 0, residual: 0, rescore: 0 };
  let isa = '';
  // live documents of unindexed segments: scanned exactly for every query
  const unindexed: number[] = [];
  const deletedIn = new Int32Array(file.segments.length);
  file.segments.forEach((s, si) => {
    for (let i = s.firstDocument; i < s.firstDocument + s.header.documents; i++) {
      if (file.isDeleted(i)) deletedIn[si]++;
      else if (index.segmentSlots[si] < 0) unindexed.push(i);
    }
  });
  // backend 'cuda': each indexed segment's stages run on the GPU for all queries at once (the same
  // candidates and residual scores as the CPU stages, src/plaid/cuda-search.ts)
  const onGpu: (IndexSearchResult[] | undefined)[] = [];
  if (gpu && k > 0)
    for (let si = 0; si < file.segments.length; si++) {
      const plaid = index.segment(si);
      if (!plaid || plaid.count === 0) continue;
      const want = Math.min(settings.rescore + deletedIn[si], plaid.count);
      signal?.throwIfAborted();
      onGpu[si] = (
        await cudaSearchBatch(plaid, floats, {
          k: want,
          nprobe: settings.nprobe,
          candidates: Math.max(settings.candidates, want),
          rescore: want,
          threshold: settings.threshold,
          device: gpu.device,
        })
      ).results;
    }
  const hits: Hit[][] = [];
  for (let qi = 0; qi < floats.count; qi++) {
    signal?.throwIfAborted();
    const s0 = floats.starts[qi] * floats.dim;
    const query = {
      kind: 'matrix' as const,
      dtype: floats.dtype,
      data: floats.data.subarray(s0, s0 + floats.lengths[qi] * floats.dim),
      length: floats.lengths[qi],
      dim: floats.dim,
    };
    let residual: Hit[] = [];
    if (k > 0 && floats.lengths[qi] > 0)
      for (let si = 0; si < file.segments.length; si++) {
        const plaid = index.segment(si);
        if (!plaid || plaid.count === 0) continue;
        // deleted documents are dropped after the stages: ask for that many more
        const want = Math.min(settings.rescore + deletedIn[si], plaid.count);
        const r =
          onGpu[si]?.[qi] ??
          (await plaid.search(query as never, {
            k: want,
            nprobe: settings.nprobe,
            candidates: Math.max(settings.candidates, want),
            rescore: want,
            threshold: settings.threshold,
            threads,
          }));
        const st = r.stats;
        isa = st.isa;
        count.centroids += st.probed;
        count.candidates += st.generated;
        count.interaction += Math.min(st.generated, Math.max(settings.candidates, want));
        count.residual += st.scored;
        for (const key of ['centroids', 'candidates', 'interaction', 'residual'] as const)
          ms[key] += st.ms[key];
        const first = file.segments[si].firstDocument;
        const live = r.hits
          .map((h) => ({ index: first + h.index, score: h.score }))
          .filter((h) => !file.isDeleted(h.index));
        residual = mergeHits(residual, live, settings.rescore);
      }
    const t0 = performance.now();
    const subset = [...residual.map((h) => h.index), ...unindexed].sort((a, b) => a - b);
    count.rescore += subset.length;
    hits.push(subset.length > 0 && k > 0 ? await exact(oneQuery(scan, qi), subset, k) : []);
    ms.rescore += performance.now() - t0;
  }
  const stages = (['centroids', 'candidates', 'interaction', 'residual', 'rescore'] as const).map((name) => ({
    name,
    candidates: count[name],
    ms: ms[name],
  }));
  return {
    hits,
    stats: {
      scores: 'exact',
      nprobe: settings.nprobe,
      candidates: settings.candidates,
      rescore: settings.rescore,
      indexedSegments: index.manifest.segments.length,
      scannedDocuments: unindexed.length,
      stages,
      isa,
    },
  };
}
