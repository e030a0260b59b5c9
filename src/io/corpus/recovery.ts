// Recovery: a lost or damaged MANIFEST rebuilt from the intact segment files (and the index files
// that still describe them: recovery-index.ts).

import * as fs from 'node:fs';
import * as path from 'node:path';
import { FormatError, InvalidArgumentError } from '../../errors.js';
import { MAX_DOCUMENTS } from '../budget.js';
import { readExactly, syncDir, writeAll, writeDurably } from './files.js';
import {
  DELETIONS_NAME,
  decodeHeader,
  FORMAT,
  HEADER_BYTES,
  MANIFEST,
  readSegmentMeta,
  SEGMENT_NAME,
  type SegmentHeader,
  type SegmentMeta,
  segmentName,
  VERSION,
  verifySegmentData,
} from './format.js';
import { CorpusLock, type LockOptions } from './lock.js';
import {
  type CorpusInfo,
  describeManifest,
  encodeManifest,
  type Manifest,
  type ManifestSegment,
  openSegment,
  readManifest,
} from './manifest.js';
import { CorpusFile } from './reader.js';
import { adoptIndex } from './recovery-index.js';
import { headerDocuments, leftOutName, leftOutSegments, placeTombstones } from './recovery-tombstones.js';
import { deletionsName, encodeDeletions, type ManifestDeletions } from './tombstones.js';

// ---- recovery ----

export interface RecoverOptions extends LockOptions {
  /** Re-read every token and check its checksum before adopting a segment (default true). */
  verify?: boolean;
  onProgress?: (segment: number, segments: number) => void;
}

export interface RecoverResult {
  info: CorpusInfo;
  /**
   * Files left out, with the reason; a segment left out is kept, moved aside to `movedTo`
   * (`<segment>.left-out-<generation>`) so that later tombstones never count its documents.
   */
  skipped: { file: string; reason: string; movedTo?: string }[];
  /** Where a damaged MANIFEST was moved (kept, never deleted). */
  damagedManifest?: string;
}

/**
 * Rebuilds a lost or damaged MANIFEST from the intact segment files of a corpus directory. Segments
 * are adopted in their numeric order when their header, offsets, ids (and with `verify`, tokens)
 * check out and they agree with the first intact one on dtype, dim and ids; the others are reported
 * and left where they are. The index comes back with them where its files still describe them: the
 * newest intact codec and, per adopted segment, the index file encoded against it for exactly that
 * segment (a segment that kept no tokens and lost its index is left out and reported). Deletions
 * survive: the newest tombstone file applies, its indices placed past the segments left out, and a
 * recovery that cannot place them is refused (recovery-tombstones.ts). A segment that a damaged
 * MANIFEST (its checksum intact) names but the directory lacks is reported in `skipped`, and the
 * tombstones are placed past its documents (they were counted in the MANIFEST's order); a segment
 * file such a MANIFEST does not name is reported and not adopted. Nothing is
 * deleted: a damaged MANIFEST is renamed to MANIFEST.damaged-<time>, a segment left out to
 * <segment>.left-out-<generation>.
 * A corpus whose MANIFEST opens is refused (there is nothing to recover).
 */
export function recoverCorpus(dir: string, options: RecoverOptions = {}): RecoverResult {
  if (typeof dir !== 'string' || dir === '')
    throw new InvalidArgumentError('dir', 'a corpus directory path', String(dir));
  let st: fs.Stats;
  try {
    st = fs.statSync(dir);
  } catch {
    throw new FormatError(dir, 'no such directory');
  }
  if (!st.isDirectory()) throw new FormatError(dir, 'not a directory (a corpus is a directory)');
  const lock = CorpusLock.acquire(dir, options);
  try {
    const manifestFile = path.join(dir, MANIFEST);
    const damagedManifest = damagedManifestName(dir, manifestFile);
    const numbered = numberedFiles(dir, SEGMENT_NAME, segmentName);
    // a damaged MANIFEST whose checksum holds still says which segments make the corpus: those
    // it names and the directory lost, and those it does not name (an unpublished write's, or
    // segments a compaction replaced) are left out; without one, every segment file counts
    const named = damagedManifest ? namedSegments(dir) : undefined;
    const vanished = named ? vanishedSegments(dir, named, numbered) : [];
    const namedFiles = new Set(named?.map((s) => s.file));
    const ours = named ? numbered.filter((x) => namedFiles.has(x.name)) : numbered;
    const adopted = adoptSegments(dir, ours, options);
    const { skipped, first } = adopted;
    for (const v of vanished)
      skipped.push({
        file: path.join(dir, v.file),
        reason: `${path.join(dir, v.file)}: named by the MANIFEST (${v.documents} documents) but missing: its documents are lost`,
      });
    for (const x of numbered)
      if (named && !namedFiles.has(x.name))
        skipped.push({
          file: path.join(dir, x.name),
          reason: `${path.join(dir, x.name)}: not named by the MANIFEST (a write that never published, or a segment compaction replaced): left where it is, not adopted`,
        });
    // the index files that still describe the adopted segments (a token-less segment without one is
    // left out: its documents have no vectors)
    const ix = adoptIndex(dir, adopted.segments, adopted.headers, options.verify ?? true, skipped);
    const segments = ix.segments;
    const maxLength = segments.reduce((a, s) => Math.max(a, adopted.maxLengths.get(s.file) ?? 0), 0);
    const documents = segments.reduce((a, s) => a + s.documents, 0);
    if (documents > MAX_DOCUMENTS)
      throw new FormatError(dir, `the segments hold ${documents} documents (at most ${MAX_DOCUMENTS})`);
    // The newest tombstone file always applies, its indices placed past the segments left out now
    // and those that earlier recoveries left out after it was written: a deleted document never
    // comes back (placeTombstones refuses when it cannot tell where one lies).
    const kept = new Set(segments.map((s) => s.file));
    const leftOut = ours.filter((x) => !kept.has(x.name));
    const earlier = leftOutSegments(dir);
    const newest = numberedFiles(dir, DELETIONS_NAME, deletionsName).pop();
    const plan = newest
      ? placeTombstones(dir, newest.name, [
          ...ours.map(({ name, n }) => ({
            n,
            file: name,
            documents: adopted.counts.get(name),
            kept: kept.has(name),
          })),
          ...vanished.map((v) => ({ ...v, kept: false })),
          ...earlier.filter((e) => e.since > newest.n),
        ])
      : { indices: [], placed: [] };
    // past every segment, tombstone and index file present, adopted or not (the next writer never
    // reuses or removes one), and past it when this recovery leaves a segment out or moves indices
    const base = Math.max(
      numbered[numbered.length - 1].n,
      newest?.n ?? 0,
      ix.generation,
      ...earlier.map((e) => e.since),
    );
    const moved =
      plan.placed.some((x, i) => x !== plan.indices[i]) || plan.placed.length !== plan.indices.length;
    const generation = leftOut.length > 0 || vanished.length > 0 || moved ? base + 1 : base;
    const { deletions, write } = deletionsOf(dir, newest, plan, generation);
    const m: Manifest = {
      format: FORMAT,
      version: VERSION,
      dtype: first.dtype,
      dim: first.dim,
      ids: first.hasIds,
      generation,
      documents,
      tokens: segments.reduce((a, s) => a + s.tokens, 0),
      maxLength,
      segments,
      deletions,
      ...(ix.index ? { index: ix.index } : {}),
    };
    lock.check();
    if (damagedManifest) fs.renameSync(manifestFile, damagedManifest);
    // segments left out first, then the moved tombstones: a crash between leaves files that the
    // next recovery places the same way (the left-out generation says which tombstones count them)
    for (const { name } of leftOut) {
      const aside = leftOutName(name, generation);
      fs.renameSync(path.join(dir, name), path.join(dir, aside));
      for (const s of skipped) if (s.file === path.join(dir, name)) s.movedTo = path.join(dir, aside);
    }
    syncDir(dir);
    if (write && deletions)
      writeDurably(dir, deletions.file, lock.token, 'deletions', (fd) => writeAll(fd, write, 0));
    const tmp = path.join(dir, `${MANIFEST}.${lock.token}.tmp`);
    const fd = fs.openSync(tmp, 'wx');
    try {
      writeAll(fd, Buffer.from(encodeManifest(m), 'utf8'), 0);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, manifestFile);
    syncDir(dir);
    return { info: describeManifest(dir, m), skipped, damagedManifest };
  } finally {
    lock.release();
  }
}

// Where a damaged MANIFEST goes (undefined: there is none); a MANIFEST that opens is refused.
function damagedManifestName(dir: string, manifestFile: string): string | undefined {
  if (!fs.existsSync(manifestFile)) return undefined;
  let healthy = true;
  try {
    CorpusFile.open(dir);
  } catch (e) {
    if (!(e instanceof FormatError)) throw e;
    healthy = false;
  }
  if (healthy)
    throw new InvalidArgumentError(
      'dir',
      'a corpus whose MANIFEST is lost or damaged',
      `${dir} (its MANIFEST opens; nothing to recover)`,
    );
  return `${manifestFile}.damaged-${new Date().toISOString().replace(/[:.]/g, '-')}`;
}

// The segments of a damaged MANIFEST whose checksum still holds (undefined: it does not read).
function namedSegments(dir: string): readonly ManifestSegment[] | undefined {
  try {
    return readManifest(dir).segments;
  } catch (e) {
    if (e instanceof FormatError) return undefined;
    throw e;
  }
}

// The segments a damaged MANIFEST names but the directory lacks: their documents are gone
// (reported), and the tombstones' indices are placed past them.
function vanishedSegments(
  dir: string,
  named: readonly ManifestSegment[],
  present: readonly { name: string }[],
): { n: number; file: string; documents: number }[] {
  // (a segment an earlier recovery moved aside is counted as such, not twice)
  const aside = new Set(leftOutSegments(dir).map((x) => x.n));
  const have = new Set(present.map((x) => x.name));
  return named
    .filter((s) => !have.has(s.file))
    .map((s) => ({ n: Number(SEGMENT_NAME.exec(s.file)?.[1]), file: s.file, documents: s.documents }))
    .filter((s) => Number.isSafeInteger(s.n) && !aside.has(s.n));
}

// The files of `dir` named `nameOf(n)` for a number n that `pattern` captures, by increasing n.
function numberedFiles(
  dir: string,
  pattern: RegExp,
  nameOf: (n: number) => string,
): { name: string; n: number }[] {
  return fs
    .readdirSync(dir)
    .map((name) => ({ name, m: pattern.exec(name) }))
    .filter((x) => x.m !== null && x.name === nameOf(Number(x.m[1])))
    .map((x) => ({ name: x.name, n: Number(x.m![1]) }))
    .sort((a, b) => a.n - b.n);
}

// The segments that check out, in order, and the others with the reason (a FormatError's message).
function adoptSegments(
  dir: string,
  numbered: readonly { name: string }[],
  options: RecoverOptions,
): {
  segments: ManifestSegment[];
  /** Each adopted segment's header, in the same order. */
  headers: SegmentHeader[];
  skipped: RecoverResult['skipped'];
  first: SegmentHeader;
  /** Each adopted segment's longest document, by file name. */
  maxLengths: Map<string, number>;
  /** The document count of every segment whose header checksum holds, adopted or not, by file name. */
  counts: Map<string, number>;
} {
  const skipped: RecoverResult['skipped'] = [];
  const segments: ManifestSegment[] = [];
  const headers: SegmentHeader[] = [];
  const maxLengths = new Map<string, number>();
  const counts = new Map<string, number>();
  let first: SegmentHeader | undefined;
  numbered.forEach(({ name }, k) => {
    options.onProgress?.(k, numbered.length);
    const file = path.join(dir, name);
    try {
      const { fd } = openSegment(dir, name);
      let meta: SegmentMeta;
      let size: number;
      try {
        size = fs.fstatSync(fd).size;
        const raw = new Uint8Array(HEADER_BYTES);
        readExactly(fd, file, raw, 0, 'the header');
        const documents = headerDocuments(raw);
        if (documents !== undefined) counts.set(name, documents);
        const hasIds = decodeHeader(file, raw, size).hasIds;
        meta = readSegmentMeta(file, fd, size, hasIds);
      } finally {
        fs.closeSync(fd);
      }
      const h = meta.header;
      if (first && (h.dtype !== first.dtype || h.dim !== first.dim || h.hasIds !== first.hasIds))
        throw new FormatError(
          file,
          `holds ${h.dtype} dim ${h.dim}${h.hasIds ? ' with ids' : ''}, unlike the first intact segment (${first.dtype} dim ${first.dim}${first.hasIds ? ' with ids' : ''})`,
        );
      if (options.verify ?? true) verifySegmentData(file, h, meta.sums);
      first ??= h;
      let maxLength = 0;
      for (let i = 0; i < h.documents; i++)
        maxLength = Math.max(maxLength, meta.offsets[i + 1] - meta.offsets[i]);
      maxLengths.set(name, maxLength);
      headers.push(h);
      segments.push({
        file: name,
        documents: h.documents,
        tokens: h.tokens,
        bytes: size,
        headerCrc: meta.headerCrc,
      });
    } catch (e) {
      if (!(e instanceof FormatError)) throw e;
      skipped.push({ file, reason: e.message });
    }
  });
  if (!first)
    throw new FormatError(
      dir,
      numbered.length === 0
        ? 'no segment files (seg-NNNNNN.msxs) to recover a corpus from'
        : `none of its ${numbered.length} segment files is intact: ${skipped.map((s) => s.reason).join('; ')}`,
    );
  return { segments, headers, skipped, first, maxLengths, counts };
}

// The deletions of the recovered MANIFEST: the newest tombstone file itself when its indices hold
// as they are, else a new one of this recovery's generation (written by the caller).
function deletionsOf(
  dir: string,
  newest: { name: string } | undefined,
  plan: { indices: number[]; placed: number[] },
  generation: number,
): { deletions?: ManifestDeletions; write?: Uint8Array } {
  if (!newest || plan.placed.length === 0) return {};
  const { indices, placed } = plan;
  if (placed.length === indices.length && placed.every((x, i) => x === indices[i])) {
    const bytes = fs.readFileSync(path.join(dir, newest.name));
    return { deletions: { file: newest.name, count: placed.length, bytes: bytes.length, crc: crcOf(bytes) } };
  }
  const bytes = encodeDeletions(placed);
  return {
    deletions: {
      file: deletionsName(generation),
      count: placed.length,
      bytes: bytes.length,
      crc: crcOf(bytes),
    },
    write: bytes,
  };
}

function crcOf(bytes: Uint8Array): number {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(bytes.length - 4, true);
}
