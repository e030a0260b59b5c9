// A server search segment by segment: each segment's best hits (deleted documents asked for extra,
// then dropped), merged into one top-k per query and named. Also the 8-bit passes of `maxsim serve
// --dtype int8|fp8`: the server keeps an 8-bit copy of every segment beside the float one, a search
// scans the copy, keeps PREFILTER_FACTOR x k candidates per query and rescores them exactly from the
// float segment (the two-stage job), so its hits are the exact search's whenever each true hit ranks
// among the candidates. On the CPU the copies are int8 in memory, quantized from the mapped segments
// when a snapshot first names them; on the GPU they sit beside the float segments (resident-gpu.ts).

import type { BackendName } from '../backends/select.js';
import { InvalidArgumentError } from '../errors.js';
import type { CorpusFile } from '../io/corpus/index.js';
import { type CorpusHit, mergeHits } from '../ops/corpus-search.js';
import { topK } from '../ops/maxsim.js';
import { quantize } from '../ops/quantize.js';
import { twoStageTopK } from '../ops/two-stage.js';
import type { Hit, TokenBatch } from '../tensor.js';

/** The 8-bit type of a server's search passes. */
export type PassDtype = 'int8' | 'fp8';

/** Candidates rescored exactly per hit wanted by an 8-bit pass (as `maxsim search --prefilter`). */
export const PREFILTER_FACTOR = 4;

/** Validates the server's `dtype` against where it runs; undefined: exact float passes. */
export function checkPassDtype(
  dtype: unknown,
  backend: BackendName,
  corpusDtype: string,
  pin: boolean,
): PassDtype | undefined {
  if (dtype === undefined) return undefined;
  if (dtype !== 'int8' && dtype !== 'fp8')
    throw new InvalidArgumentError(
      'dtype',
      "'int8' or 'fp8' (8-bit search passes; leave it out for exact float passes)",
      JSON.stringify(dtype) ?? String(dtype),
    );
  if (corpusDtype === 'int8')
    throw new InvalidArgumentError(
      'dtype',
      'a float16, bfloat16 or float32 corpus (the 8-bit copy is quantized from it; an int8 corpus scans in int8 already)',
      "an 'int8' corpus",
    );
  if (dtype === 'fp8' && backend === 'cpu')
    throw new InvalidArgumentError('dtype', "'int8' on the CPU backend (fp8 scans run on a GPU)", "'fp8'");
  if (pin)
    throw new InvalidArgumentError(
      'dtype',
      'no 8-bit passes with pin (they need the corpus resident on the GPU, beside its 8-bit copy)',
      `'${dtype}' with pin`,
    );
  return dtype;
}

/** One segment's part of a search: its documents from `firstDocument`, and how to get its `kk` best. */
export interface SegmentRun {
  firstDocument: number;
  documents: number;
  /** The kk best of the segment for every query, indices local to the segment. */
  run(kk: number): Promise<Hit[][]>;
}

/**
 * Merges the segments' hits into the top k of every query (ties to the lower index), deleted
 * documents dropped (each segment asked for as many more), named by id. `merge`: seconds spent on
 * this thread merging and naming.
 */
export async function searchSegments(
  file: CorpusFile,
  queries: number,
  k: number,
  segments: readonly SegmentRun[],
): Promise<{ hits: CorpusHit[][]; merge: number }> {
  const merged: Hit[][] = Array.from({ length: queries }, () => []);
  let merge = 0;
  const mask = file.deletedMask;
  for (const seg of segments) {
    let gone = 0;
    if (mask) for (let i = 0; i < seg.documents; i++) gone += mask[seg.firstDocument + i];
    const kk = Math.min(k + gone, seg.documents);
    if (kk === 0) continue;
    const hits = await seg.run(kk);
    const t0 = performance.now();
    // one loop per row, one object per hit kept (no intermediate arrays: ~0.5 us per hit before)
    const first = seg.firstDocument;
    for (let i = 0; i < queries; i++) {
      const row = hits[i];
      const mine: Hit[] = [];
      for (let j = 0; j < row.length && mine.length < k; j++) {
        const index = row[j].index + first;
        if (mask === undefined || mask[index] !== 1) mine.push({ index, score: row[j].score });
      }
      merged[i] = merged[i].length === 0 ? mine : mergeHits(merged[i], mine, k);
    }
    merge += performance.now() - t0;
  }
  const t0 = performance.now();
  const named: CorpusHit[][] = new Array(queries);
  for (let i = 0; i < queries; i++) {
    const row = merged[i];
    const out: CorpusHit[] = new Array(row.length);
    for (let j = 0; j < row.length; j++) {
      const h = row[j];
      out[j] = { index: h.index, score: h.score, id: file.id(h.index) };
    }
    named[i] = out;
  }
  return { hits: named, merge: (merge + performance.now() - t0) / 1000 };
}

/** The key of a segment across snapshots: segments are immutable (same file, same documents). */
export function segmentKey(seg: { file: string; firstDocument: number }): string {
  return `${seg.file}@${seg.firstDocument}`;
}

/**
 * CPU: the int8 copy of every non-empty segment of `file`, by segment number: those `before` holds
 * (by segmentKey) are kept, the others quantized from `floatOf(g)` (per-token scales, as quantize).
 */
export function hostCopies(
  file: CorpusFile,
  floatOf: (g: number) => TokenBatch,
  before: ReadonlyMap<string, TokenBatch> | undefined,
): Map<string, TokenBatch> {
  const out = new Map<string, TokenBatch>();
  for (let g = 0; g < file.segments.length; g++) {
    const seg = file.segments[g];
    if (seg.header.documents === 0) continue;
    const key = segmentKey(seg);
    out.set(key, before?.get(key) ?? quantize(floatOf(g), 'int8'));
  }
  return out;
}

/**
 * CPU: one segment's kk best by the two-stage job: the int8 scan of `copy`, PREFILTER_FACTOR x kk
 * candidates rescored exactly from `docs` (the float segment); exact scores throughout. Where the
 * candidates would be the whole segment, it is ranked exactly instead.
 */
export function cpuTwoStage(
  queries: TokenBatch,
  docs: TokenBatch,
  copy: TokenBatch,
  kk: number,
  options: { threads?: number; signal?: AbortSignal },
): Promise<Hit[][]> {
  const common = { backend: 'cpu' as const, threads: options.threads, signal: options.signal };
  if (PREFILTER_FACTOR * kk >= docs.count) return topK(queries, docs, kk, common);
  return twoStageTopK(queries, docs, copy, kk, {
    ...common,
    prefilter: 'always',
    candidateFactor: PREFILTER_FACTOR,
  });
}
