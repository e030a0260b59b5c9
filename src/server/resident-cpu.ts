// The CPU side of a server's corpus: segments as batches over their mapped files, and candidates
// grouped by segment for scoring.

import { constants as bufferConstants } from 'node:buffer';
import { MaxsimError } from '../errors.js';
import { typedView } from '../io/corpus/index.js';
import { loadNative } from '../native.js';
import type { Corpus } from '../ops/corpus-search.js';
import type { TokenBatch } from '../tensor.js';
import { cpuTwoStage, type SegmentRun, segmentKey } from './segment-search.js';

/** What these helpers need of a server snapshot. */
interface Snapshot {
  corpus: Corpus;
  /** Each segment's documents as a batch over its mapped token rows, made on first use. */
  mapped: Map<number, TokenBatch>;
  /** With an 8-bit dtype: the int8 copy of every non-empty segment, by segmentKey. */
  eight?: Map<string, TokenBatch>;
}

/** Candidate positions grouped by segment: segment -> (positions in the request, indices in the segment). */
export function groupBySegment(
  s: Snapshot,
  indices: readonly number[],
): Map<number, { at: number[]; local: number[] }> {
  const groups = new Map<number, { at: number[]; local: number[] }>();
  indices.forEach((ix, i) => {
    const g = s.corpus.file.segmentOf(ix);
    let group = groups.get(g);
    if (!group) {
      group = { at: [], local: [] };
      groups.set(g, group);
    }
    group.at.push(i);
    group.local.push(ix - s.corpus.file.segments[g].firstDocument);
  });
  return groups;
}

/** Copies the columns of a [rows, at.length] score block to positions `at` of [rows, n]. */
export function scatter(out: Float32Array, n: number, block: Float32Array, at: number[], rows: number) {
  for (let r = 0; r < rows; r++)
    for (let j = 0; j < at.length; j++) out[r * n + at[j]] = block[r * at.length + j];
}

interface FileAddon {
  mapFile(path: string, offset: number, length: number): ArrayBuffer;
}

/**
 * The largest section mapped as one ArrayBuffer: this Node's limit (Node 20: 4 GiB; mapFile refuses
 * more). @internal tests lower it to take the read path on small corpora.
 */
export const mapLimit = { bytes: bufferConstants.MAX_LENGTH };

/** Whether segment `g`'s token section (and scales) can be mapped as one buffer each. */
export function fitsOneMapping(s: Snapshot, g: number): boolean {
  const h = s.corpus.file.segments[g].header;
  return (
    h.tokensSection.bytes <= mapLimit.bytes && (h.dtype !== 'int8' || h.scalesSection.bytes <= mapLimit.bytes)
  );
}

/** Segment `g` of the snapshot as a ragged batch over its mapped token rows (and int8 scales). */
export function mappedSegment(s: Snapshot, g: number): TokenBatch {
  const cached = s.mapped.get(g);
  if (cached) return cached;
  const seg = s.corpus.file.segments[g];
  const { dtype, dim, documents, tokens, tokensSection, scalesSection } = seg.header;
  const map = (loadNative() as unknown as { file: FileAddon }).file.mapFile;
  const data = typedView(dtype, map(seg.path, tokensSection.offset, tokensSection.bytes), 0, tokens * dim);
  const scales =
    dtype === 'int8'
      ? new Float32Array(map(seg.path, scalesSection.offset, scalesSection.bytes), 0, tokens)
      : undefined;
  const starts = seg.offsets.subarray(0, documents);
  const lengths = new Int32Array(documents);
  let maxLength = 0;
  for (let i = 0; i < documents; i++) {
    lengths[i] = seg.offsets[i + 1] - seg.offsets[i];
    if (lengths[i] > maxLength) maxLength = lengths[i];
  }
  const batch: TokenBatch = {
    kind: 'batch',
    layout: 'ragged',
    dtype,
    data,
    dim,
    count: documents,
    maxLength,
    starts,
    lengths,
    scales,
  };
  s.mapped.set(g, batch);
  return batch;
}

/** 8-bit passes: each segment by the two-stage job over its int8 copy and its mapped float rows. */
export function hostRuns(
  s: Snapshot,
  queries: TokenBatch,
  options: { threads?: number; signal?: AbortSignal },
): SegmentRun[] {
  const file = s.corpus.file;
  const runs: SegmentRun[] = [];
  for (let g = 0; g < file.segments.length; g++) {
    const seg = file.segments[g];
    const copy = s.eight?.get(segmentKey(seg));
    if (copy === undefined) continue; // no documents
    if (!fitsOneMapping(s, g))
      throw new MaxsimError(
        `segment ${g} is larger than one mapping (${mapLimit.bytes} bytes): 8-bit passes need every segment mapped whole (compact into smaller segments, or serve without dtype)`,
      );
    runs.push({
      firstDocument: seg.firstDocument,
      documents: seg.header.documents,
      run: (kk) => cpuTwoStage(queries, mappedSegment(s, g), copy, kk, options),
    });
  }
  return runs;
}
