// One immutable view of a server's corpus: the Corpus at one MANIFEST generation, its segments on the
// GPU (resident mode) or mapped (CPU), and a use count so its files close only after its last
// request. Scoring documents by index on a snapshot, on the CPU or on the device, lives here too.

import type { BackendName } from '../backends/select.js';
import type { Corpus } from '../ops/corpus-search.js';
import { maxsim } from '../ops/maxsim.js';
import { quantize } from '../ops/quantize.js';
import { selectItems, type TokenBatch } from '../tensor.js';
import { fitsOneMapping, groupBySegment, mappedSegment, scatter } from './resident-cpu.js';
import { type DeviceSegment, disposeSegment } from './resident-gpu.js';
import { MISSING_SHOWN, NotFoundError } from './resident-writes.js';

export interface Snapshot {
  corpus: Corpus;
  /** CPU: each segment's documents as a batch over its mapped token rows, made on first use. */
  mapped: Map<number, TokenBatch>;
  segments: DeviceSegment[];
  /** CPU with an 8-bit dtype: the int8 copy of every non-empty segment, by segmentKey. */
  eight?: Map<string, TokenBatch>;
  users: number;
  retired: boolean;
  /** Device segments the next snapshot no longer uses: released with this one. */
  drop?: DeviceSegment[];
}

export function snapshotOf(corpus: Corpus, segments: DeviceSegment[]): Snapshot {
  return { corpus, segments, mapped: new Map(), users: 0, retired: false };
}

/** Closes a retired snapshot: its mappings and pin, and the device segments only it used. */
export function closeSnapshot(s: Snapshot): void {
  s.corpus.close();
  for (const seg of s.drop ?? []) disposeSegment(seg);
  s.drop = undefined;
}

/** Global indices of ids in snapshot `s`; unknown or deleted ones: a NotFoundError listing a few. */
export function resolveOn(s: Snapshot, ids: readonly string[], field: string): number[] {
  const missing: string[] = [];
  let total = 0;
  const out = ids.map((id) => {
    const index = s.corpus.file.indexOf(id);
    if (index === undefined) {
      total++;
      if (missing.length < MISSING_SHOWN) missing.push(id);
      return -1;
    }
    return index;
  });
  if (total > 0) throw new NotFoundError(field, missing, total);
  return out;
}

/**
 * Scores of documents by index on a snapshot without device segments: the candidates as views of
 * the mapped segments (no read on this thread: the kernel's workers fault the pages in), scored
 * segment by segment. [queries.count * indices.length], query-major.
 */
export async function scoreMapped(
  s: Snapshot,
  queries: TokenBatch,
  indices: readonly number[],
  options: { backend: BackendName; threads?: number; device?: number; signal?: AbortSignal },
): Promise<Float32Array> {
  const n = indices.length;
  const q = s.corpus.info.dtype === 'int8' && queries.dtype !== 'int8' ? quantize(queries, 'int8') : queries;
  const out = new Float32Array(queries.count * n);
  for (const [g, { at, local }] of groupBySegment(s, indices)) {
    // (a segment without tokens: its documents decoded from the index by readDocuments)
    const docs =
      fitsOneMapping(s, g) && !s.corpus.file.segments[g].header.tokensDropped
        ? selectItems(mappedSegment(s, g), local)
        : // a segment larger than one ArrayBuffer cannot be mapped whole: read the candidates
          s.corpus.readDocuments(local.map((l) => s.corpus.file.segments[g].firstDocument + l));
    // (decoded documents are float32 whatever the corpus dtype)
    const m = await maxsim(docs.dtype === 'int8' ? q : queries, docs, options);
    scatter(out, n, m.data, at, queries.count);
  }
  return out;
}

/** The same on the GPU: a view of the candidates of each device segment, scored where they are (no upload). */
export async function scoreOnDevice(
  s: Snapshot,
  queries: TokenBatch,
  indices: readonly number[],
): Promise<Float32Array> {
  const n = indices.length;
  const out = new Float32Array(queries.count * n);
  const bySegment = new Map(s.segments.map((seg) => [s.corpus.file.segmentOf(seg.firstDocument), seg]));
  for (const [g, { at, local }] of groupBySegment(s, indices)) {
    const view = await bySegment.get(g)!.docs.select(local);
    try {
      const m = await view.score(queries);
      scatter(out, n, m.data, at, queries.count);
    } finally {
      view.dispose();
    }
  }
  return out;
}
