// CorpusFile: an opened corpus (read-only): segments, lengths, ids, tombstones, blocks for streaming
// scans, and verification.

import * as fs from 'node:fs';
import { FormatError, InvalidArgumentError } from '../../errors.js';
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
import { type CorpusInfo, describeManifest, describeValue, openSegment, readManifest } from './manifest.js';
import { readDeletions } from './tombstones.js';

/** One opened segment: its header, its document offsets, and where it sits in the corpus. */
export interface CorpusSegment {
  readonly file: string;
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

/** An opened corpus (read-only). Reading never changes the files; a later append is seen on reopen. */
export class CorpusFile {
  readonly info: CorpusInfo;
  readonly segments: readonly CorpusSegment[];
  /** Token count of every document, [documents]. */
  readonly lengths: Int32Array;
  private idList: string[] | undefined;
  /** 1 for each deleted document, [documents]; undefined when none is. */
  readonly deletedMask: Uint8Array | undefined;
  private idIndex: Map<string, number> | undefined;

  private constructor(
    info: CorpusInfo,
    segments: CorpusSegment[],
    lengths: Int32Array,
    ids: string[] | undefined,
    deleted: Uint8Array | undefined,
  ) {
    this.info = info;
    this.segments = segments;
    this.lengths = lengths;
    this.idList = ids;
    this.deletedMask = deleted;
  }

  /** Opens a corpus: checks the manifest, every segment header, the offsets and ids (not the tokens: see verify()). */
  static open(dir: string): CorpusFile {
    if (typeof dir !== 'string' || dir === '')
      throw new InvalidArgumentError('path', 'a corpus directory path', String(dir));
    // A writer that published meanwhile may have removed files the MANIFEST we read named (a
    // superseded tombstone file, segments replaced by compaction): read the new MANIFEST and retry.
    for (let attempt = 0; ; attempt++) {
      const before = readManifest(dir).generation;
      try {
        return CorpusFile.openOnce(dir);
      } catch (e) {
        if (!(e instanceof FormatError) || attempt >= 4) throw e;
        let after: number;
        try {
          after = readManifest(dir).generation;
        } catch {
          throw e;
        }
        if (after === before) throw e;
      }
    }
  }

  private static openOnce(dir: string): CorpusFile {
    const m = readManifest(dir);
    const segments: CorpusSegment[] = [];
    // filled once every segment's offsets are read and checked against its file
    let lengths = new Int32Array(0);
    let ids: string[] | undefined = m.ids ? [] : undefined;
    let firstDocument = 0;
    let tokens = 0;
    for (const s of m.segments) {
      const { file, fd } = openSegment(dir, s.file);
      try {
        const st = fs.fstatSync(fd);
        const size = st.size;
        if (size !== s.bytes)
          throw new FormatError(
            file,
            `the segment has ${size} bytes but the MANIFEST says ${s.bytes} (truncated or replaced)`,
          );
        const { header, headerCrc, offsets, ids: segIds, sums } = readSegmentMeta(file, fd, size, m.ids);
        if (headerCrc !== s.headerCrc)
          throw new FormatError(file, 'the segment header does not match the MANIFEST (replaced segment?)');
        if (
          header.dtype !== m.dtype ||
          header.dim !== m.dim ||
          header.documents !== s.documents ||
          header.tokens !== s.tokens
        )
          throw new FormatError(
            file,
            'the segment header disagrees with the MANIFEST (dtype, dim or counts)',
          );
        if (ids) {
          if (ids.length === 0) ids = segIds!;
          else for (const id of segIds!) ids.push(id);
        }
        segments.push({
          file,
          header,
          firstDocument,
          offsets,
          checksums: sums,
          verified: verifiedSet(st, headerCrc),
        });
      } finally {
        fs.closeSync(fd);
      }
      firstDocument += s.documents;
      tokens += s.tokens;
    }
    if (firstDocument !== m.documents || tokens !== m.tokens)
      throw new FormatError(dir, 'the MANIFEST totals do not match its segments');
    lengths = new Int32Array(m.documents);
    for (const s of segments)
      for (let i = 0; i < s.header.documents; i++)
        lengths[s.firstDocument + i] = s.offsets[i + 1] - s.offsets[i];
    const deleted = m.deletions ? readDeletions(dir, m.deletions, m.documents) : undefined;
    return new CorpusFile(describeManifest(dir, m), segments, lengths, ids, deleted);
  }

  /** The id of document `index` (its index as a string when the corpus has no ids). */
  id(index: number): string {
    return this.idList ? this.idList[index] : String(index);
  }

  /** Whether document `index` was deleted (it is skipped by search and get()). */
  isDeleted(index: number): boolean {
    return this.deletedMask !== undefined && this.deletedMask[index] === 1;
  }

  /** The index of the live document with this id (an index as a decimal string without ids), or undefined. */
  indexOf(id: string): number | undefined {
    let index: number | undefined;
    if (this.idList) {
      if (!this.idIndex) {
        this.idIndex = new Map();
        for (let i = 0; i < this.idList.length; i++)
          if (!this.isDeleted(i)) this.idIndex.set(this.idList[i], i);
      }
      index = this.idIndex.get(id);
    } else if (/^(0|[1-9]\d*)$/.test(id) && Number(id) < this.info.documents) index = Number(id);
    return index === undefined || this.isDeleted(index) ? undefined : index;
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
    if (missing.length > 0)
      throw new InvalidArgumentError(
        argument,
        this.idList
          ? 'ids of live documents of the corpus'
          : `document indices in [0, ${this.info.documents}) not deleted (the corpus has no ids)`,
        `${missing.length} unknown or deleted: ${missing
          .slice(0, 5)
          .map((x) => JSON.stringify(x))
          .join(', ')}${missing.length > 5 ? ', ...' : ''}`,
      );
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
      const fd = fs.openSync(s.file, 'r');
      let sums: Uint32Array;
      try {
        sums = new Uint32Array(readSection(fd, s.file, s.header.checksumsSection, 'checksums').buffer);
      } finally {
        fs.closeSync(fd);
      }
      verifySegmentData(s.file, s.header, sums, (n) => {
        bytes += n;
        onProgress?.({ bytes, totalBytes });
      });
      // every chunk of this segment checked: searches in this process need not check them again
      for (let c = 0; c < s.checksums.length - 3; c++) s.verified.add(c);
      s.verified.add(-1);
    }
  }

  /**
   * Checks the CRC of every checksum chunk that the block's token rows lie in (and, for int8, the
   * scales section), each at most once per process (see CorpusSegment.verified); throws FormatError
   * naming the segment and the damaged range. `read(file, offset, length)` supplies the bytes
   * (default: read from the file). Returns the bytes checked by this call (0 when all were checked).
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
      ((file: string, offset: number, length: number) => {
        const fd = fs.openSync(file, 'r');
        try {
          const bytes = new Uint8Array(length);
          readExactly(fd, file, bytes, offset, 'the tokens');
          return bytes;
        } finally {
          fs.closeSync(fd);
        }
      });
    let checked = 0;
    for (let c = Math.floor(from / h.chunkBytes); c * h.chunkBytes < to; c++) {
      if (s.verified.has(c)) continue;
      const start = c * h.chunkBytes;
      const n = Math.min(h.chunkBytes, h.tokensSection.bytes - start);
      if (checksum(reader(s.file, h.tokensSection.offset + start, n)) !== s.checksums[c])
        throw new FormatError(
          s.file,
          `token data is corrupted in bytes [${start}, ${start + n}) of the tokens section (checksum mismatch); \`maxsim corpus info\` checks the whole corpus`,
        );
      s.verified.add(c);
      checked += n;
    }
    if (h.scalesSection.bytes > 0 && !s.verified.has(-1)) {
      const bytes = reader(s.file, h.scalesSection.offset, h.scalesSection.bytes);
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

  /** The byte ranges of a block in its segment file: token rows and (int8) scales. */
  blockRanges(block: CorpusBlock): { file: string; tokens: Section; scales?: Section } {
    const s = this.segments[block.segment];
    const rowBytes = this.info.dim * dtypeSize(this.info.dtype);
    const tokens = {
      offset: s.header.tokensSection.offset + block.firstToken * rowBytes,
      bytes: block.tokens * rowBytes,
    };
    if (this.info.dtype !== 'int8') return { file: s.file, tokens };
    return {
      file: s.file,
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
    const fds = new Map<number, number>();
    try {
      let at = 0;
      for (let i = 0; i < indices.length; i++) {
        const si = this.segmentOf(indices[i]);
        const s = this.segments[si];
        if (!fds.has(si)) fds.set(si, fs.openSync(s.file, 'r'));
        const fd = fds.get(si)!;
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
    } finally {
      for (const fd of fds.values()) fs.closeSync(fd);
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

/** Opens the corpus at `dir` (see CorpusFile.open). */
export function openCorpusFile(dir: string): CorpusFile {
  return CorpusFile.open(dir);
}
