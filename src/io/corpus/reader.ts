// CorpusFile: an opened corpus (read-only): segments, lengths, ids, tombstones, blocks for streaming
// scans, and verification.

import { FormatError, InvalidArgumentError, MaxsimError } from '../../errors.js';
import { dtypeSize, type TokenBatch } from '../../tensor.js';
import { readDecoded } from './decoded.js';
import { bytesOf, readExactly } from './files.js';
import {
  checksum,
  readSection,
  type Section,
  type SegmentHeader,
  storedTokenBytes,
  typedView,
  verifySegmentData,
} from './format.js';
import {
  IdIndex,
  openSegmentHandle,
  openTombstones,
  type PinnedFile,
  type SegmentHandle,
  segmentKey,
} from './handles.js';
import { CorpusIndex } from './index-reader.js';
import {
  type CorpusInfo,
  describeManifest,
  describeValue,
  type Manifest,
  manifestStamp,
  readManifest,
} from './manifest.js';
import { MissingIdsError } from './writer-checks.js';

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
    /** @internal The index the MANIFEST names (see index-reader.ts; the index search reads it), or undefined. */
    readonly index: CorpusIndex | undefined,
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
    this.lengths = lengthsOf(segments, info.documents, previous);
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
    let index: CorpusIndex | undefined;
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
      if (m.index) index = CorpusIndex.open(dir, m, previous?.index);
      const lost = handles.find((h, si) => h.header.tokensDropped && !((index?.segmentSlots[si] ?? -1) >= 0));
      if (lost) throw new FormatError(lost.pinned.file, 'a token-less segment the index does not list');
      const info = describeManifest(dir, m);
      return new CorpusFile(dir, info, handles, tombstones, deleted, stamp, previous, index);
    } catch (e) {
      for (const h of handles) h.pinned.release();
      tombstones?.release();
      index?.release();
      throw e;
    }
  }

  /** Whether the corpus keeps only its index (`corpus index --drop-tokens`; see index-drop.ts). */
  get tokensDropped(): boolean {
    return this.index?.manifest.dropped === true;
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
    this.index?.release();
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
    const at = this.findIds(ids);
    return ids.filter((_, i) => at[i] === undefined);
  }

  /**
   * The live index of each id (undefined where there is none). A few ids in a large corpus whose id
   * index is not built are found in one pass over its ids instead of building the index (what a
   * writer checking one batch needs, once).
   */
  findIds(ids: readonly string[]): (number | undefined)[] {
    if (!this.info.hasIds || this.idIndex?.covers(this.keys) || ids.length * 64 > this.info.documents)
      return ids.map((id) => this.indexOf(id));
    const found = new Map<string, number | undefined>();
    for (const id of ids) found.set(id, undefined);
    this.handles.forEach((h, g) => {
      const first = this.segments[g].firstDocument;
      const list = h.ids!;
      // later segments last: an id deleted and added again is found where it lives now
      for (let i = 0; i < list.length; i++)
        if (found.has(list[i]) && !this.isDeleted(first + i)) found.set(list[i], first + i);
    });
    return ids.map((id) => found.get(id));
  }

  /** The indices of live documents by id, in order; unknown or deleted ids: an error listing a few. */
  indicesOf(ids: readonly string[], argument = 'ids'): number[] {
    if (!Array.isArray(ids) || ids.some((x) => typeof x !== 'string'))
      throw new InvalidArgumentError(argument, 'an array of document id strings', describeValue(ids));
    const out: number[] = [];
    const missing: string[] = [];
    this.findIds(ids).forEach((i, k) => {
      if (i === undefined) missing.push(ids[k]);
      else out.push(i);
    });
    if (missing.length > 0) throw new MissingIdsError(argument, missing, this.info);
    return out;
  }

  /** The documents' tokens by id (live documents only), as a packed ragged batch in request order. */
  getDocuments(ids: readonly string[]): TokenBatch {
    return this.readDocuments(this.indicesOf(ids));
  }

  /**
   * Re-reads every byte and checks every checksum, of the token segments and then of the index files
   * the MANIFEST names; throws FormatError naming the damaged file.
   */
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
    this.index?.verify();
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
   * segments. With `firstBytes`, the first blocks grow from that size, doubling, up to `maxBytes`,
   * so the first block is ready (and the first results known) soon.
   */
  planBlocks(maxBytes: number, maxDocuments = Number.MAX_SAFE_INTEGER, firstBytes = maxBytes): CorpusBlock[] {
    if (!(maxBytes >= 1))
      throw new InvalidArgumentError('maxBytes', 'a positive number of bytes', String(maxBytes));
    if (!(firstBytes >= 1))
      throw new InvalidArgumentError('firstBytes', 'a positive number of bytes', String(firstBytes));
    let limit = Math.min(maxBytes, firstBytes);
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
          (b === a || ((s.offsets[b + 1] - s.offsets[a]) * rowBytes <= limit && b - a < maxDocuments))
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
        limit = Math.min(maxBytes, limit * 2);
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

  /** Reads documents by index into a packed ragged batch (a copy); tokensDropped: float32, decoded.ts. */
  readDocuments(indices: ArrayLike<number>): TokenBatch {
    return this.tokensDropped ? readDecoded(this, indices) : this.readStored(indices);
  }

  /** @internal Reads documents from their stored tokens (in the corpus dtype). */
  readStored(indices: ArrayLike<number>): TokenBatch {
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

/**
 * The token count of every document. A snapshot that only adds segments to the previous one's
 * writes its new lengths after the previous ones in the same buffer (allocated with room to grow; a
 * snapshot never reads past its own count), so an append does not copy, or allocate, a million.
 */
function lengthsOf(
  segments: CorpusSegment[],
  documents: number,
  previous: CorpusFile | undefined,
): Int32Array {
  const old = previous?.lengths;
  let kept = 0;
  if (old && previous) {
    const p = previous.segments;
    while (kept < p.length && kept < segments.length && p[kept].file === segments[kept].file) kept++;
  }
  const from = kept > 0 ? segments[kept - 1].firstDocument + segments[kept - 1].header.documents : 0;
  let out: Int32Array;
  if (old && from === old.length && from > 0 && old.byteOffset + documents * 4 <= old.buffer.byteLength)
    out = new Int32Array(old.buffer, old.byteOffset, documents);
  else {
    out = new Int32Array(new ArrayBuffer(Math.ceil(documents * 1.25 + 1024) * 4), 0, documents);
    if (old && from > 0) out.set(old.subarray(0, from));
  }
  // segments past the shared prefix; in a buffer another snapshot also views, only past its end
  for (const s of segments.slice(kept))
    for (let i = 0; i < s.header.documents; i++) out[s.firstDocument + i] = s.offsets[i + 1] - s.offsets[i];
  return out;
}

/** Opens the corpus at `dir` (see CorpusFile.open). */
export function openCorpusFile(dir: string): CorpusFile {
  return CorpusFile.open(dir);
}
