// The path of a server search pass: through the corpus's index or the full scan. A request chooses
// (`exact: true` or `index: false` force the scan, `index: {nprobe, ...}` tunes the index, `prefilter`
// is a scan of its own); the choice travels in the batcher's key, so only requests of the same path
// and settings share a pass. The index path asks the "index searcher" of the server's backend: the
// CPU's is the corpus's own search through the index (src/ops/corpus-index-search.ts); a backend
// without one (CUDA until the GPU index lands: registerIndexSearcher is its hook) scans, and the
// answer's stats say why.

import type { BackendName } from '../backends/select.js';
import { InvalidArgumentError } from '../errors.js';
import type { CorpusFile } from '../io/corpus/index.js';
import { type CorpusIndexOptions, gpuStages, type IndexStage } from '../ops/corpus-index-search.js';
import type { Corpus, ScanStats, SearchResult } from '../ops/corpus-search.js';
import type { TokenBatch } from '../tensor.js';
import type { PassDtype } from './segment-search.js';

/** What a request asks of the path of its search. */
export interface PassRoute {
  /** The int8 prefilter scan (GPU-resident or 8-bit servers). */
  prefilter?: 'int8';
  /** true: the full scan, even where the corpus has an index. */
  exact?: boolean;
  /** false: the full scan; an object: the index settings (see CorpusIndexOptions). */
  index?: false | CorpusIndexOptions;
}

/** What a pass answers about its search (the `stats` of /v1/search answers). */
export interface PassStats {
  path: 'index' | 'scan' | 'ids';
  /** 'exact': exact MaxSim of the stored tokens; 'residual': MaxSim of decoded residuals. */
  scores: 'exact' | 'residual';
  /** The corpus generation the pass ran on. */
  generation: number;
  /** Why a corpus with an index was scanned (exact: true, index: false, prefilter, no searcher). */
  reason?: string;
  /** Through the index: its settings and each stage's candidates and milliseconds (the whole pass). */
  index?: {
    /** Where the index stages ran (the exact re-score scans on the CPU). */
    backend: 'cpu' | 'cuda';
    nprobe: number;
    candidates: number;
    rescore: number;
    interaction: string;
    precision: string;
    indexed_segments: number;
    scanned_documents: number;
    stages: IndexStage[];
  };
}

/** The batcher key of a route: '' (the default path) and 'int8' as before, else its JSON. */
export function passKey(route: PassRoute): string {
  const { prefilter, exact, index } = route;
  if (exact !== true && index === undefined) return prefilter ?? '';
  return JSON.stringify({ prefilter, exact: exact === true || index === false, index: index || undefined });
}

/** The route of a batcher key (passKey's inverse). */
export function routeOf(key: string): PassRoute {
  if (key === '') return {};
  if (key === 'int8') return { prefilter: 'int8' };
  return JSON.parse(key) as PassRoute;
}

/** Whether a request's route forces the scan, and why (undefined: the index path where there is one). */
export function scanReason(route: PassRoute): string | undefined {
  if (route.exact === true) return 'exact: true';
  if (route.index === false) return 'index: false';
  if (route.prefilter !== undefined) return `prefilter: ${route.prefilter}`;
  return undefined;
}

/** Searches a snapshot through its index for one backend. */
export interface IndexSearcher {
  search(
    corpus: Corpus,
    queries: TokenBatch,
    k: number,
    index: CorpusIndexOptions | undefined,
    options: { threads?: number; signal?: AbortSignal; device?: number },
  ): Promise<SearchResult>;
}

const cpuSearcher: IndexSearcher = {
  search: (corpus, queries, k, index, o) =>
    corpus.searchWithStats(queries, {
      topK: k,
      backend: 'cpu',
      threads: o.threads,
      signal: o.signal,
      index: index ?? {},
    }),
};

// CUDA: the corpus's search through its index with the stages on the GPU where they run (backend
// 'auto': corpus-index-search.ts gpuStages.usable, else the CPU stages); the exact re-score scans the
// candidates on the CPU (stats.backend says where the stages ran)
const cudaSearcher: IndexSearcher = {
  search: (corpus, queries, k, index, o) =>
    corpus.searchWithStats(queries, {
      topK: k,
      backend: 'auto',
      device: o.device,
      threads: o.threads,
      signal: o.signal,
      index: index ?? {},
    }),
};

const searchers = new Map<BackendName, IndexSearcher>([['cpu', cpuSearcher]]);

/** The hook of a backend's index search (replaces the built-in one; undefined: the built-in). */
export function registerIndexSearcher(backend: BackendName, searcher: IndexSearcher | undefined): void {
  if (searcher) searchers.set(backend, searcher);
  else searchers.delete(backend);
}

/** The index searcher of a backend, or undefined: its passes scan. */
export function indexSearcherFor(backend: BackendName): IndexSearcher | undefined {
  return searchers.get(backend) ?? (backend === 'cuda' && gpuStages.search ? cudaSearcher : undefined);
}

/** A pass's stats from a search's (index path) or from the scan. */
export function passStats(
  generation: number,
  stats: ScanStats | undefined,
  reason?: string,
  scores: 'exact' | 'residual' = 'exact',
): PassStats {
  const ix = stats?.index;
  if (!stats || !ix) return { path: 'scan', scores, generation, ...(reason ? { reason } : {}) };
  return {
    path: 'index',
    scores: ix.scores,
    generation,
    index: {
      backend: stats.backend,
      nprobe: ix.nprobe,
      candidates: ix.candidates,
      rescore: ix.rescore,
      interaction: ix.interaction,
      precision: ix.precision,
      indexed_segments: ix.indexedSegments,
      scanned_documents: ix.scannedDocuments,
      stages: ix.stages.map((s) => ({ name: s.name, candidates: s.candidates, ms: round(s.ms) })),
    },
  };
}

function round(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}

/**
 * A corpus that keeps only its index is served on the CPU through its index: GPU passes and 8-bit
 * copies need the tokens (checked at start and on every swap: the server keeps its snapshot).
 */
export function checkTokensKept(file: CorpusFile, backend: BackendName, dtype: PassDtype | undefined) {
  if (!file.tokensDropped || (backend === 'cpu' && dtype === undefined)) return;
  throw new InvalidArgumentError(
    dtype ? 'dtype' : 'backend',
    dtype
      ? 'no 8-bit passes on a corpus that keeps only its index (no tokens to copy)'
      : "'cpu' for a corpus that keeps only its index (`corpus index --drop-tokens`: the GPU passes need the tokens)",
    dtype ? `'${dtype}'` : `'${backend}'`,
  );
}

/** The path a default search takes on `file` with `backend` (and why a corpus with an index scans). */
export function defaultPath(
  file: CorpusFile,
  backend: BackendName,
): { path: 'index' | 'scan'; reason?: string } {
  if (!file.index) return { path: 'scan' };
  if (indexSearcherFor(backend)) return { path: 'index' };
  return { path: 'scan', reason: `no index search on the ${backend} backend yet` };
}
