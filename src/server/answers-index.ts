// The index in the server's answers: /v1/info's `index`, and the `stats` of a /v1/search answer
// (which path ran, on which generation, the index stages).
import type { CorpusInfo } from '../io/corpus/index.js';
import type { PassStats } from './index-path.js';

/** /v1/info's index: the corpus's index and the path default searches take, or null. */
export function indexInfo(info: CorpusInfo, searchPath: { path: 'index' | 'scan'; reason?: string }) {
  const ix = info.index;
  if (!ix) return null;
  return {
    bits: ix.bits,
    centroids: ix.centroids,
    sample: ix.sample,
    bytes: ix.bytes,
    bytes_per_token: ix.bytesPerToken,
    indexed_segments: ix.indexedSegments,
    unindexed_segments: ix.unindexedSegments,
    drift: ix.drift,
    rebuild_advised: ix.rebuildAdvised,
    tokens: ix.tokens,
    search_path: searchPath.path,
    ...(searchPath.reason ? { reason: searchPath.reason } : {}),
  };
}

/** A search answer's JSON (`{"results":[...]}`, see searchJson) with its `stats` added. */
export function withStats(json: string, stats: PassStats | undefined): string {
  if (!stats) return json;
  return `${json.slice(0, -1)},"stats":${JSON.stringify(stats)}}`;
}
