// CorpusFile: an opened corpus (read-only): segments, lengths, ids, tombstones, blocks for streaming
// scans, and verification.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { FormatError, InvalidArgumentError, MaxsimError } from '../../errors.js';
import { dtypeSize, type TokenBatch } from '../../tensor.js';
import { bytesOf, readExactly } from './files.js';
import {
  checksum,
  readSection,
  readSegmentMeta,
  type Section,
  type SegmentHeader,
  storedTokenBytes,
  typedView,
  verifySegmentData,
} from './format.js';
import { IdIndex, PinnedFile, type SegmentHandle, segmentKey } from './handles.js';
import {
  type CorpusInfo,
  describeManifest,
  describeValue,
  type Manifest,
  type ManifestSegment,
  manifestStamp,
  openSegment,
  readManifest,
} from './manifest.js';
import { type ManifestDeletions, readDeletions } from './tombstones.js';

/** One opened segment: its header, its document offsets, and where it sits in the corpus. */
export interface CorpusSegment {
  /** The segment's path in the corpus directory (for messages: a writer may have removed it since). */
  readonly file: string;
  /** A path that opens this segment as long as its snapshot is open (Linux: /proc/self/fd/N). */
  readonly path: string;
  readonly header: SegmentHeader;
  /** Global index of the segment's first document. */
  readonly firstDocument: number;
  /** Token offsets of its documents relative to the segment, [documents + 1]. */
  readonly offsets: Float64Array;
  /** The checksums section: CRC-32 per chunk of tokens, then scales, offsets, ids. */
  readonly checksums: Uint32Array;
  /** Chunks of tokens (index) and the scales (-1) whose CRC was checked in this process. */
  readonly verified: Set<number>;
}

// Segment files are immutable once published: a chunk checked once in this process stays checked
// for the same file (same device, inode, size, times and header). Keyed by that identity.
export const verifiedChunks = new Map<string, Set<number>>();

/** Bench / test hook: forget which chunks were checked (later opens check them again). */
export function forgetVerifiedChunks(): void {
  verifiedChunks.clear();
}

export function verifiedSet(st: fs.Stats, headerCrc: number): Set<number> {
  const key = `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}:${headerCrc}`;
  let set = verifiedChunks.get(key);
  if (!set) {
    set = new Set();
    verifiedChunks.set(key, set);
  }
  return set;
}

/** A run of consecutive documents of one segment: the unit a streaming search reads and scores. */
export interface CorpusBlock {
  segment: number;
  /** Global index of the first document. */
  firstDocument: number;
  documents: number;
  /** First token, relative to the segment. */
  firstToken: number;
  tokens: number;
  maxLength: number;
}

export interface VerifyProgress {
  bytes: number;
  totalBytes: number;
}

/**
 * A snapshot of a corpus: one MANIFEST generation and every file it names, held open (see
 * handles.ts), so reads keep working after a writer removes those files. Reading never changes the
 * files. `refresh()` returns the snapshot of a newer generation when one was published (by anyone),
 * reusing what this one read; `close()` lets go of the files once no one uses them.
 */
export class CorpusFile {
  readonly info: CorpusInfo;
  readonly segments: readonly CorpusSegment[];
  /** Token count of every document, [documents]. */
  readonly lengths: Int32Array;
  /** 1 for each deleted document, [documents]; undefined when none is. */
  readonly deletedMask: Uint8Array | undefined;
  private idIndex: IdIndex | undefined;
  private refs = 1;
  private readonly keys: string[];

  private constructor(
    readonly dir: string,
    info: CorpusInfo,
    private readonly handles: SegmentHandle[],
    private readonly tombstones: PinnedFile | undefined,
    deleted: Uint8Array | undefined,
    /** The MANIFEST's stamp when it was last checked (see manifestStamp). */
    private stampSeen: string,
    previous: CorpusFile | undefined,
  ) {
    this.info = info;
    this.deletedMask = deleted;
    this.keys = handles.map((h) => h.key);
    const segments: CorpusSegment[] = [];
    let first = 0;
    for (const h of handles) {
      segments.push({
        file: h.pinned.file,
        path: h.pinned.path,
        header: h.header,
        firstDocument: first,
        offsets: h.offsets,
        checksums: h.checksums,
        verified: h.verified,
      });
      first += h.header.documents;
    }
    this.segments = segments;
    this.lengths = new Int32Array(info.documents);
    for (const s of segments)
      for (let i = 0; i < s.header.documents; i++)
        this.lengths[s.firstDocument + i] = s.offsets[i + 1] - s.offsets[i];
    // the older snapshot's id index serves this one when this one only adds segments
    if (previous?.idIndex?.covers(this.keys)) this.idIndex = previous.idIndex;
  }

  /** Opens a corpus: checks the manifest, every segment header, the offsets and ids (not the tokens: see verify()). */
  static open(dir: string): CorpusFile {
    if (typeof dir !== 'string' || dir === '')
      throw new InvalidArgumentError('path', 'a corpus directory path', String(dir));
    return CorpusFile.openReusing(dir, undefined);
  }

  // A writer that published meanwhile may have removed files the MANIFEST we read named (a
  // superseded tombstone file, segments replaced by compaction): read the new MANIFEST and retry.
  private static openReusing(dir: string, previous: CorpusFile | undefined): CorpusFile {
    for (let attempt = 0; ; attempt++) {
      const stamp = manifestStamp(dir);
      const before = readManifest(dir);
      try {
        return CorpusFile.openOnce(dir, before, stamp, previous);
      } catch (e) {
        if (!(e instanceof FormatError) || attempt >= 4) throw e;
        let after: number;
        try {
          after = readManifest(dir).generation;
        } catch {
          throw e;
        }
        if (after === before.generation) throw e;
      }
    }
  }

  private static openOnce(
    dir: string,
    m: Manifest,
    stamp: string,
    previous: CorpusFile | undefined,
  ): CorpusFile {
    // handles of the previous snapshot, by identity: reused only while generations move forward
    const reuse = new Map<string, SegmentHandle>();
    if (previous && m.generation > previous.info.generation)
      for (const h of previous.handles) reuse.set(h.key, h);
    const handles: SegmentHandle[] = [];
    let tombstones: PinnedFile | undefined;
    try {
      let documents = 0;
      let tokens = 0;
      for (const s of m.segments) {
        const key = segmentKey(s.file, s.bytes, s.headerCrc);
        const kept = reuse.get(key);
        if (kept) kept.pinned.retain();
        handles.push(kept ?? openSegmentHandle(dir, m, s, key));
        documents += s.documents;
        tokens += s.tokens;
      }
      if (documents !== m.documents || tokens !== m.tokens)
        throw new FormatError(dir, 'the MANIFEST totals do not match its segments');
      let deleted: Uint8Array | undefined;
      if (m.deletions) {
        const opened = openTombstones(dir, m.deletions, m.documents);
        tombstones = opened.pinned;
        deleted = opened.mask;
      }
      return new CorpusFile(dir, describeManifest(dir, m), handles, tombstones, deleted, stamp, previous);
    } catch (e) {
      for (const h of handles) h.pinned.release();
      tombstones?.release();
      throw e;
    }
  }

  /** The MANIFEST generation this snapshot reads. */
  get generation(): number {
    return this.info.generation;
  }

  /**
   * This snapshot when the corpus directory still publishes it (a stat and a 16-byte read of the
   * MANIFEST), else a new snapshot of the newer generation, which reuses the files both name. This
   * snapshot stays open and valid either way (close it when done).
   */
  refresh(): CorpusFile {
    const now = manifestStamp(this.dir);
    if (now === this.stampSeen) return this;
    const next = CorpusFile.openReusing(this.dir, this);
    if (next.generation === this.generation) {
      // rewritten with the same generation (recover, a copy): keep this one
      this.stampSeen = next.stampSeen;
      next.close();
      return this;
    }
    return next;
  }

  /** The MANIFEST's stamp when this snapshot last checked it: unchanged means no newer generation. */
  get stamp(): string {
    return this.stampSeen;
  }

  /** Counts one more user of this snapshot; each retain() wants one close(). */
  retain(): this {
    if (this.refs <= 0) throw new MaxsimError(`${this.dir}: this corpus snapshot was closed`);
    this.refs++;
    return this;
  }

  /** Lets go of the snapshot: its files are closed once no snapshot names them. */
  close(): void {
    if (this.refs <= 0) return;
    if (--this.refs > 0) return;
    for (const h of this.handles) h.pinned.release();
    this.tombstones?.release();
  }

  /** The id of document `index` (its index as a string when the corpus has no ids). */
  id(index: number): string {
    if (!this.info.hasIds) return String(index);
    const g = this.segmentOf(index);
    return this.handles[g].ids![index - this.segments[g].firstDocument];
  }

  /** Whether document `index` was deleted (it is skipped by search and get()). */
  isDeleted(index: number): boolean {
    return this.deletedMask !== undefined && this.deletedMask[index] === 1;
  }

  /** The id index of this snapshot: shared with older snapshots where it can be, extended here. */
  private ids(): IdIndex {
    let index = this.idIndex;
    if (!index?.covers(this.keys)) index = new IdIndex();
    for (let g = index.keys.length; g < this.handles.length; g++) {
      const h = this.handles[g];
      index.add(h.key, h.ids!, 0, h.ids!.length);
    }
    this.idIndex = index;
    return index;
  }

  /**
   * Builds the id index of this snapshot a slice at a time, yielding to the event loop in between
   * (a server does this before it switches to a snapshot that a compaction made). Lookups later are
   * instant.
   */
  async indexIds(slice = 50_000): Promise<void> {
    if (!this.info.hasIds) return;
    if (this.idIndex?.covers(this.keys)) {
      this.ids(); // the shared index wants only this snapshot's newer segments
      return;
    }
    // a new index of its own (never seen half-built by anyone), filled a slice at a time
    const index = new IdIndex();
    for (const h of this.handles)
      for (
        let from = 0;
        !index.add(h.key, h.ids!, from, Math.min(from + slice, h.ids!.length));
        from += slice
      )
        await new Promise((r) => setImmediate(r));
    this.idIndex = index;
  }

  /** The index of the live document with this id (an index as a decimal string without ids), or undefined. */
  indexOf(id: string): number | undefined {
    if (this.info.hasIds) return this.ids().find(id, this.info.documents, this.deletedMask);
    if (!/^(0|[1-9]\d*)$/.test(id) || Number(id) >= this.info.documents) return undefined;
    const index = Number(id);
    return this.isDeleted(index) ? undefined : index;
  }

  /** Ids of `ids` that are not live documents of this snapshot (unknown or deleted), in order. */
  absentIds(ids: readonly string[]): string[] {
    return ids.filter((id) => this.indexOf(id) === undefined);
  }

  /** The indices of live documents by id, in order; unknown or deleted ids: an error listing a few. */
  indicesOf(ids: readonly string[], argument = 'ids'): number[] {
    if (!Array.isArray(ids) || ids.some((x) => typeof x !== 'string'))
      throw new InvalidArgumentError(argument, 'an array of document id strings', describeValue(ids));
    const out: number[] = [];
    const missing: string[] = [];
    for (const id of ids) {
      const i = this.indexOf(id);
      if (i === undefined) missing.push(id);
      else out.push(i);
    }
    if (missing.length > 0) throw new MissingIdsError(argument, missing, this.info);
    return out;
  }

  /** The documents' tokens by id (live documents only), as a packed ragged batch in request order. */
  getDocuments(ids: readonly string[]): TokenBatch {
    return this.readDocuments(this.indicesOf(ids));
  }

  /** Re-reads every byte and checks every checksum; throws FormatError naming the damage. */
  verify(onProgress?: (p: VerifyProgress) => void): void {
    const totalBytes = this.segments.reduce(
      (a, s) => a + s.header.tokensSection.bytes + s.header.scalesSection.bytes,
      0,
    );
    let bytes = 0;
    for (const s of this.segments) {
      const fd = this.handles[this.segments.indexOf(s)].pinned.fd;
      const sums = new Uint32Array(readSection(fd, s.file, s.header.checksumsSection, 'checksums').buffer);
      verifySegmentData(
        s.file,
        s.header,
        sums,
        (n) => {
          bytes += n;
          onProgress?.({ bytes, totalBytes });
        },
        fd,
      );
      // every chunk of this segment checked: searches in this process need not check them again
      for (let c = 0; c < s.checksums.length - 3; c++) s.verified.add(c);
      s.verified.add(-1);
    }
  }

  /**
   * Checks the CRC of every checksum chunk that the block's token rows lie in (and, for int8, the
   * scales section), each at most once per process (see CorpusSegment.verified); throws FormatError
   * naming the segment and the damaged range. `read(path, offset, length)` supplies the bytes of the
   * segment's readable path (CorpusSegment.path; default: read from the file). Returns the bytes checked by this call (0 when all were checked).
   */
  verifyBlock(
    block: CorpusBlock,
    read?: (file: string, offset: number, length: number) => Uint8Array,
  ): number {
    const s = this.segments[block.segment];
    const h = s.header;
    const rowBytes = h.dim * dtypeSize(h.dtype);
    const from = block.firstToken * rowBytes;
    const to = (block.firstToken + block.tokens) * rowBytes;
    const reader =
      read ??
      ((_path: string, offset: number, length: number) => {
        const bytes = new Uint8Array(length);
        readExactly(this.handles[block.segment].pinned.fd, s.file, bytes, offset, 'the tokens');
        return bytes;
      });
    let checked = 0;
    for (let c = Math.floor(from / h.chunkBytes); c * h.chunkBytes < to; c++) {
      if (s.verified.has(c)) continue;
      const start = c * h.chunkBytes;
      const n = Math.min(h.chunkBytes, h.tokensSection.bytes - start);
      if (checksum(reader(s.path, h.tokensSection.offset + start, n)) !== s.checksums[c])
        throw new FormatError(
          s.file,
          `token data is corrupted in bytes [${start}, ${start + n}) of the tokens section (checksum mismatch); \`maxsim corpus info\` checks the whole corpus`,
        );
      s.verified.add(c);
      checked += n;
    }
    if (h.scalesSection.bytes > 0 && !s.verified.has(-1)) {
      const bytes = reader(s.path, h.scalesSection.offset, h.scalesSection.bytes);
      if (checksum(bytes) !== s.checksums[s.checksums.length - 3])
        throw new FormatError(s.file, 'the int8 scales are corrupted (checksum mismatch)');
      s.verified.add(-1);
      checked += bytes.length;
    }
    return checked;
  }

  /**
   * Splits the corpus into blocks of consecutive documents of at most `maxBytes` token bytes and
   * `maxDocuments` documents (a single larger document gets a block of its own). Blocks never span
   * segments.
   */
  planBlocks(maxBytes: number, maxDocuments = Number.MAX_SAFE_INTEGER): CorpusBlock[] {
    if (!(maxBytes >= 1))
      throw new InvalidArgumentError('maxBytes', 'a positive number of bytes', String(maxBytes));
    const rowBytes = storedTokenBytes(this.info.dtype, this.info.dim);
    const blocks: CorpusBlock[] = [];
    this.segments.forEach((s, si) => {
      const n = s.header.documents;
      let a = 0;
      while (a < n) {
        let b = a;
        let maxLength = 0;
        while (
          b < n &&
          (b === a || ((s.offsets[b + 1] - s.offsets[a]) * rowBytes <= maxBytes && b - a < maxDocuments))
        ) {
          maxLength = Math.max(maxLength, s.offsets[b + 1] - s.offsets[b]);
          b++;
        }
        blocks.push({
          segment: si,
          firstDocument: s.firstDocument + a,
          documents: b - a,
          firstToken: s.offsets[a],
          tokens: s.offsets[b] - s.offsets[a],
          maxLength,
        });
        a = b;
      }
    });
    return blocks;
  }

  /** The byte ranges of a block in its segment file (`file`: its readable path): token rows and (int8) scales. */
  blockRanges(block: CorpusBlock): { file: string; tokens: Section; scales?: Section } {
    const s = this.segments[block.segment];
    const rowBytes = this.info.dim * dtypeSize(this.info.dtype);
    const tokens = {
      offset: s.header.tokensSection.offset + block.firstToken * rowBytes,
      bytes: block.tokens * rowBytes,
    };
    if (this.info.dtype !== 'int8') return { file: s.path, tokens };
    return {
      file: s.path,
      tokens,
      scales: { offset: s.header.scalesSection.offset + block.firstToken * 4, bytes: block.tokens * 4 },
    };
  }

  /** Starts (relative to the block) and lengths of the documents of a block. */
  blockSpans(block: CorpusBlock): { starts: Float64Array; lengths: Int32Array } {
    const s = this.segments[block.segment];
    const local = block.firstDocument - s.firstDocument;
    const starts = new Float64Array(block.documents);
    for (let i = 0; i < block.documents; i++) starts[i] = s.offsets[local + i] - block.firstToken;
    return {
      starts,
      lengths: this.lengths.slice(block.firstDocument, block.firstDocument + block.documents),
    };
  }

  /** Reads documents by global index into a packed ragged batch (a copy; for rescoring and tests). */
  readDocuments(indices: ArrayLike<number>): TokenBatch {
    const dim = this.info.dim;
    const elem = dtypeSize(this.info.dtype);
    const lengths = new Int32Array(indices.length);
    let total = 0;
    for (let i = 0; i < indices.length; i++) {
      const x = indices[i];
      if (!Number.isInteger(x) || x < 0 || x >= this.info.documents)
        throw new InvalidArgumentError(
          `indices[${i}]`,
          `a document index in [0, ${this.info.documents})`,
          String(x),
        );
      lengths[i] = this.lengths[x];
      total += lengths[i];
    }
    const bytes = new Uint8Array(total * dim * elem);
    const scales = this.info.dtype === 'int8' ? new Float32Array(total) : undefined;
    const starts = new Float64Array(indices.length);
    {
      let at = 0;
      for (let i = 0; i < indices.length; i++) {
        const si = this.segmentOf(indices[i]);
        const s = this.segments[si];
        const fd = this.handles[si].pinned.fd;
        const first = s.offsets[indices[i] - s.firstDocument];
        starts[i] = at;
        const n = lengths[i] * dim * elem;
        readExactly(
          fd,
          s.file,
          bytes.subarray(at * dim * elem, at * dim * elem + n),
          s.header.tokensSection.offset + first * dim * elem,
          'a document',
        );
        if (scales)
          readExactly(
            fd,
            s.file,
            bytesOf(scales.subarray(at, at + lengths[i])),
            s.header.scalesSection.offset + first * 4,
            'scales',
          );
        at += lengths[i];
      }
    }
    let maxLength = 0;
    for (const l of lengths) maxLength = Math.max(maxLength, l);
    return {
      kind: 'batch',
      layout: 'ragged',
      dtype: this.info.dtype,
      data: typedView(this.info.dtype, bytes.buffer, 0, total * dim),
      dim,
      count: indices.length,
      maxLength,
      starts,
      lengths,
      scales,
    };
  }

  /** The segment holding global document `index`. */
  segmentOf(index: number): number {
    let lo = 0;
    let hi = this.segments.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.segments[mid].firstDocument <= index) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }
}

/** Opens segment `s` of MANIFEST `m` and reads everything but its tokens (a handle for snapshots). */
function openSegmentHandle(dir: string, m: Manifest, s: ManifestSegment, key: string): SegmentHandle {
  const { file, fd } = openSegment(dir, s.file);
  const pinned = new PinnedFile(file, fd);
  try {
    const st = fs.fstatSync(fd);
    if (st.size !== s.bytes)
      throw new FormatError(
        file,
        `the segment has ${st.size} bytes but the MANIFEST says ${s.bytes} (truncated or replaced)`,
      );
    const { header, headerCrc, offsets, ids, sums } = readSegmentMeta(file, fd, st.size, m.ids);
    if (headerCrc !== s.headerCrc)
      throw new FormatError(file, 'the segment header does not match the MANIFEST (replaced segment?)');
    if (
      header.dtype !== m.dtype ||
      header.dim !== m.dim ||
      header.documents !== s.documents ||
      header.tokens !== s.tokens
    )
      throw new FormatError(file, 'the segment header disagrees with the MANIFEST (dtype, dim or counts)');
    return { key, pinned, header, offsets, checksums: sums, verified: verifiedSet(st, headerCrc), ids };
  } catch (e) {
    pinned.release();
    throw e;
  }
}

/** Opens the tombstone file the MANIFEST names (held open like the segments) and reads its mask. */
function openTombstones(
  dir: string,
  d: ManifestDeletions,
  documents: number,
): { pinned: PinnedFile; mask: Uint8Array } {
  const file = path.join(dir, d.file);
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
  } catch (e) {
    throw new FormatError(
      file,
      `cannot read the tombstone file the MANIFEST names (${(e as NodeJS.ErrnoException).code ?? e})`,
    );
  }
  const pinned = new PinnedFile(file, fd);
  try {
    return { pinned, mask: readDeletions(dir, d, documents, fd) };
  } catch (e) {
    pinned.release();
    throw e;
  }
}

/** Ids asked for that are not live documents (unknown or deleted): `missing` lists them all. */
export class MissingIdsError extends InvalidArgumentError {
  constructor(
    argument: string,
    readonly missing: string[],
    info: CorpusInfo,
  ) {
    super(
      argument,
      info.hasIds
        ? 'ids of live documents of the corpus'
        : `document indices in [0, ${info.documents}) not deleted (the corpus has no ids)`,
      `${missing.length} unknown or deleted: ${missing
        .slice(0, 5)
        .map((x) => JSON.stringify(x))
        .join(', ')}${missing.length > 5 ? ', ...' : ''}`,
    );
  }
}

/** Opens the corpus at `dir` (see CorpusFile.open). */
export function openCorpusFile(dir: string): CorpusFile {
  return CorpusFile.open(dir);
}
