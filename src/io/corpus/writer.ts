// CorpusWriter: builds a new corpus or appends a segment, and compacts; publishes through the MANIFEST.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { checkSignal } from '../../abort.js';
import { InvalidArgumentError, MaxsimError } from '../../errors.js';
import { decodeToFloat32, encodeFloatsClamped } from '../../floats.js';
import { quantize } from '../../ops/quantize.js';
import { type DType, type FloatDType, isTokenBatch, type TokenBatch, type TokenData } from '../../tensor.js';
import { MAX_DOCUMENTS } from '../budget.js';
import { type DeleteOptions, type DeleteResult, deleteDocuments } from './delete.js';
import { checkNewDirectory, prepareNewDirectory, removeEmptyDirectory } from './directory.js';
import { bytesOf, removeFile, step, syncDir } from './files.js';
import {
  CODE_DTYPES,
  DELETIONS_NAME,
  FORMAT,
  MANIFEST,
  SEGMENT_NAME,
  segmentName,
  storedTokenBytes,
  VERSION,
} from './format.js';
import { compactTokenless } from './index-drop.js';
import { INDEX_NAME } from './index-segments.js';
import { CorpusLock, type LockOptions } from './lock.js';
import {
  type CorpusInfo,
  describeManifest,
  indexFilesOf,
  type Manifest,
  publishManifest,
  readManifest,
  removeLeftovers,
} from './manifest.js';
import { CorpusFile } from './reader.js';
import { LEFT_OUT_NAME } from './recovery-tombstones.js';
import { SegmentWriter } from './segment-writer.js';
import { checkIds, refuseOverflow } from './writer-checks.js';

export interface WriterOptions extends LockOptions {
  /**
   * Finite values beyond the range of a float16 / bfloat16 corpus (|x| >= 65520 for float16) are
   * refused by default (they would become +-Infinity); with clamp they are stored as the largest
   * finite value of their sign, and `clamped` counts them.
   */
  clamp?: boolean;
  /**
   * Cancels the write: once aborted, the next add() / addEncoded() / commit() aborts the writer
   * (temporaries removed, lock released, a created directory removed; nothing published) and throws
   * the signal's reason, an AbortError. An already-aborted signal throws before the lock is taken.
   */
  signal?: AbortSignal;
}

export interface CorpusCreateOptions extends WriterOptions {
  /** Storage dtype of the corpus (default 'float16'); 'int8' stores per-token scaled int8. */
  dtype?: DType;
  dim: number;
  /** Whether documents carry string ids (then every add() must give them). Default false. */
  ids?: boolean;
}

/** The bytes of a token block in the corpus dtype (raw rows), for writers that already hold them. */
export interface EncodedDocuments {
  /** Packed rows [tokens, dim] in the corpus dtype. */
  data: TokenData;
  /** Tokens per document. */
  lengths: Int32Array;
  /** int8 corpora: one scale per token row. */
  scales?: Float32Array;
}

/**
 * Writes a new segment into a corpus and publishes it on commit(). Create one with
 * CorpusWriter.create (a new corpus) or CorpusWriter.append (an existing one); add documents; commit.
 * Nothing is visible to readers before commit(); abort() (or a crash) discards the segment.
 */
export class CorpusWriter {
  private readonly segment: SegmentWriter;
  private readonly segFile: string;
  private done = false;
  private clampedValues = 0;
  private readonly clamp: boolean;
  private readonly signal: AbortSignal | undefined;
  // Ids corpora: the corpus appended to (its live ids, looked up through its index), and the ids this
  // writer added so far.
  private existing: CorpusFile | undefined;
  private readonly taken = new Map<string, string>();
  // compact: files the published MANIFEST no longer names, removed after it is durable
  private retire: string[] = [];

  private constructor(
    readonly dir: string,
    private readonly manifest: Manifest,
    private readonly lock: CorpusLock,
    /** A new corpus (create), and whether create made its directory (removed again on abort). */
    private readonly created: { madeDir: boolean } | undefined,
    options: WriterOptions,
  ) {
    this.clamp = options.clamp === true;
    this.signal = options.signal;
    this.segFile = segmentName(manifest.generation + 1);
    // Temporary names carry the lock token: no two writers ever share one.
    this.segment = new SegmentWriter(
      path.join(dir, `${this.segFile}.${lock.token}.tmp`),
      path.join(dir, `${this.segFile}.${lock.token}.scales.tmp`),
      manifest.dtype,
      manifest.dim,
      manifest.ids,
    );
  }

  get dtype(): DType {
    return this.manifest.dtype;
  }
  get dim(): number {
    return this.manifest.dim;
  }
  /** Values clamped to the corpus dtype's range so far (only with the clamp option). */
  get clamped(): number {
    return this.clampedValues;
  }
  /** Documents added to this segment so far. */
  get documents(): number {
    return this.segment.documents;
  }

  /**
   * Starts a new corpus at `dir`, which must not exist or be an empty directory (a directory holding
   * only the temporaries of an interrupted build is accepted and those are removed). Symbolic links,
   * the root and directories with other files are refused: nothing the writer did not create is deleted.
   */
  static create(dir: string, options: CorpusCreateOptions): CorpusWriter {
    checkSignal(options.signal)?.throwIfAborted();
    const dtype = options.dtype ?? 'float16';
    if (!CODE_DTYPES.includes(dtype))
      throw new InvalidArgumentError(
        'dtype',
        "'float16', 'bfloat16', 'float32' or 'int8'",
        JSON.stringify(dtype),
      );
    if (!Number.isInteger(options.dim) || options.dim < 1 || options.dim > 65536)
      throw new InvalidArgumentError('dim', 'an integer in [1, 65536]', String(options.dim));
    const made = prepareNewDirectory(dir);
    let lock: CorpusLock | undefined;
    try {
      lock = CorpusLock.acquire(dir, options);
      checkNewDirectory(dir, true); // again under the lock: another build may have published meanwhile
      const manifest: Manifest = {
        format: FORMAT,
        version: VERSION,
        dtype,
        dim: options.dim,
        ids: options.ids === true,
        generation: 0,
        documents: 0,
        tokens: 0,
        maxLength: 0,
        segments: [],
      };
      return new CorpusWriter(dir, manifest, lock, { madeDir: made }, options);
    } catch (e) {
      lock?.release();
      if (made) removeEmptyDirectory(dir);
      throw e;
    }
  }

  /**
   * Opens an existing corpus to add documents as a new segment. The writer holds the corpus lock
   * until commit() or abort(); another writer meanwhile fails with CorpusLockedError ("corpus is
   * locked by pid N"), or first waits up to `waitMs` milliseconds for it.
   */
  static append(dir: string, options: WriterOptions = {}): CorpusWriter {
    checkSignal(options.signal)?.throwIfAborted();
    readManifest(dir); // a clear error before locking when it is not a corpus
    const lock = CorpusLock.acquire(dir, options);
    try {
      const manifest = readManifest(dir); // re-read under the lock
      removeLeftovers(dir, manifest);
      const w = new CorpusWriter(dir, manifest, lock, undefined, options);
      if (manifest.ids) {
        try {
          w.existing = CorpusFile.open(dir);
        } catch (e) {
          w.abort();
          throw e;
        }
      }
      return w;
    } catch (e) {
      lock.release();
      throw e;
    }
  }

  /** Deletes documents by id under the writer lock (see deleteDocuments). */
  static delete(dir: string, ids: readonly string[], options: DeleteOptions = {}): DeleteResult {
    return deleteDocuments(dir, ids, options);
  }

  /**
   * Rewrites the live documents of a corpus into one fresh segment and publishes a MANIFEST without
   * tombstones (under the writer lock). The old segments and tombstone file are removed only after
   * the new MANIFEST is durable; a crash at any step leaves either the old corpus or the new one,
   * both verifiable (a crash after the publish may leave old files behind: the next compact removes
   * them). Documents keep their order and ids, but global indices change (the deleted ones close up).
   */
  static compact(
    dir: string,
    options: LockOptions & { onProgress?: (done: number, total: number) => void } = {},
  ): CorpusInfo {
    // a corpus that keeps only its index: its documents are merged from the index (index-drop.ts)
    if (readManifest(dir).index?.dropped) return compactTokenless(dir, options);
    const lock = CorpusLock.acquire(dir, options);
    let w: CorpusWriter | undefined;
    let old: CorpusFile | undefined;
    try {
      const m = readManifest(dir);
      removeLeftovers(dir, m);
      old = CorpusFile.open(dir);
      const from = old;
      const base: Manifest = {
        ...m,
        documents: 0,
        tokens: 0,
        maxLength: 0,
        segments: [],
        deletions: undefined,
        // the codec stays; the new segment is unindexed until `corpus index` encodes it
        index: m.index ? { ...m.index, segments: [] } : undefined,
      };
      w = new CorpusWriter(dir, base, lock, undefined, {});
      const named = new Set([...m.segments.map((x) => x.file), m.deletions?.file, ...indexFilesOf(m)]);
      // everything the new MANIFEST will not name: the old files, orphans of an earlier compact and
      // segments that recover left out
      w.retire = fs
        .readdirSync(dir)
        .filter(
          (n) =>
            (SEGMENT_NAME.test(n) || DELETIONS_NAME.test(n) || INDEX_NAME.test(n) || LEFT_OUT_NAME.test(n)) &&
            n !== m.index?.file &&
            (named.has(n) || Number(/\d+/.exec(n)![0]) <= m.generation),
        )
        .sort();
      const live: number[] = [];
      for (let i = 0; i < from.info.documents; i++) if (!from.isDeleted(i)) live.push(i);
      const rowBytes = storedTokenBytes(m.dtype, m.dim);
      for (let a = 0; a < live.length; ) {
        // copy in runs of about 32 MiB: memory stays flat whatever the corpus size
        let b = a;
        let bytes = 0;
        while (b < live.length && (b === a || bytes + from.lengths[live[b]] * rowBytes <= 32 << 20))
          bytes += from.lengths[live[b++]] * rowBytes;
        const run = live.slice(a, b);
        const docs = from.readDocuments(run);
        w.addEncoded(
          { data: docs.data, lengths: docs.lengths, scales: docs.scales },
          m.ids ? run.map((i) => from.id(i)) : undefined,
        );
        a = b;
        options.onProgress?.(a, live.length);
      }
      return w.commit();
    } catch (e) {
      if (w) w.abort();
      else lock.release();
      throw e;
    } finally {
      old?.close();
    }
  }

  /**
   * @internal Checks the ids of every document a caller will add (in add() order) before the first
   * add(): a refusal then counts every duplicate and names positions in this whole list, not in one
   * add()'s group (buildCorpusFromFiles adds in groups). Records nothing.
   */
  checkIdsAhead(ids: readonly string[]): void {
    checkIds(this.manifest.ids, ids, ids.length, this.existing, new Map(this.taken));
  }

  /** Adds the documents of a batch (converted to the corpus dtype), with their ids when the corpus has ids. */
  add(batch: TokenBatch, ids?: readonly string[]): void {
    this.checkOpen();
    if (!isTokenBatch(batch)) throw new InvalidArgumentError('batch', 'a TokenBatch', typeof batch);
    if (batch.dim !== this.dim)
      throw new InvalidArgumentError(
        'batch.dim',
        `${this.dim} (the dimension of the corpus)`,
        String(batch.dim),
      );
    checkIds(this.manifest.ids, ids, batch.count, this.existing, this.taken);
    let data: TokenData = batch.data;
    let scales = batch.scales;
    let source = batch;
    if (this.dtype === 'int8') {
      if (batch.dtype !== 'int8') {
        source = quantize(batch, 'int8');
        data = source.data;
        scales = source.scales;
      }
    } else if (batch.dtype === 'int8') {
      throw new InvalidArgumentError(
        'batch.dtype',
        `'float32', 'float16' or 'bfloat16' (the corpus stores ${this.dtype})`,
        "'int8'",
      );
    }
    const rowElems = this.dim;
    const converts = this.dtype !== 'int8' && source.dtype !== this.dtype;
    if (converts && !this.clamp) refuseOverflow(source, this.dtype, this.dim);
    this.writing(() => {
      for (let i = 0; i < source.count; i++) {
        const len = source.lengths[i];
        const start = source.starts[i] * rowElems;
        let rows: TokenData = data.subarray(start, start + len * rowElems);
        if (converts) {
          const encoded = encodeFloatsClamped(
            decodeToFloat32(rows, source.dtype as FloatDType, rowElems),
            this.dtype as FloatDType,
          );
          rows = encoded.data;
          this.clampedValues += encoded.clamped;
        }
        this.segment.writeTokens(bytesOf(rows));
        if (this.dtype === 'int8')
          this.segment.writeScales(scales!.subarray(source.starts[i], source.starts[i] + len));
        this.endDocument(len, ids?.[i]);
      }
    });
  }

  /** Adds documents already encoded in the corpus dtype (no conversion; for large builds and benchmarks). */
  addEncoded(docs: EncodedDocuments, ids?: readonly string[]): void {
    this.checkOpen();
    checkIds(this.manifest.ids, ids, docs.lengths.length, this.existing, this.taken);
    const want = this.dtype === 'float32' ? Float32Array : this.dtype === 'int8' ? Int8Array : Uint16Array;
    if (!(docs.data instanceof want))
      throw new InvalidArgumentError(
        'docs.data',
        `a ${want.name} (the corpus stores ${this.dtype})`,
        docs.data.constructor.name,
      );
    let total = 0;
    for (const len of docs.lengths) {
      if (!Number.isInteger(len) || len < 0)
        throw new InvalidArgumentError('docs.lengths', 'non-negative lengths', String(len));
      total += len;
    }
    if (docs.data.length !== total * this.dim)
      throw new InvalidArgumentError(
        'docs.data',
        `${total * this.dim} elements (sum of lengths x dim)`,
        String(docs.data.length),
      );
    if (this.dtype === 'int8' && docs.scales?.length !== total)
      throw new InvalidArgumentError(
        'docs.scales',
        `a Float32Array of ${total} scales`,
        String(docs.scales?.length),
      );
    this.writing(() => {
      this.segment.writeTokens(bytesOf(docs.data));
      if (this.dtype === 'int8') this.segment.writeScales(docs.scales!);
      docs.lengths.forEach((len, i) => {
        this.endDocument(len, ids?.[i]);
      });
    });
  }

  // A failed write leaves the segment in an unknown state: the writer aborts (the corpus is unchanged).
  private writing(work: () => void) {
    try {
      work();
    } catch (e) {
      this.abort();
      throw e;
    }
  }

  /** Writes the segment's tail and header, syncs, and publishes the new manifest. */
  commit(): CorpusInfo {
    this.checkOpen();
    try {
      const written = this.segment.finish();
      const segPath = path.join(this.dir, this.segFile);
      this.checkStillCurrent();
      if (fs.existsSync(segPath))
        throw new MaxsimError(`${segPath} exists already; refusing to replace it (nothing was published)`);
      step('rename-segment');
      fs.renameSync(this.segment.tmpFile, segPath);
      syncDir(this.dir);

      const m = this.manifest;
      const next: Manifest = {
        ...m,
        generation: m.generation + 1,
        documents: m.documents + this.segment.documents,
        tokens: m.tokens + this.segment.tokens,
        maxLength: Math.max(m.maxLength, this.segment.maxLength),
        segments: [
          ...m.segments,
          {
            file: this.segFile,
            documents: this.segment.documents,
            tokens: this.segment.tokens,
            bytes: written.bytes,
            headerCrc: written.headerCrc,
          },
        ],
      };
      publishManifest(this.dir, this.lock.token, next, () => this.checkStillCurrent());
      this.done = true;
      try {
        // published and durable: now the files it no longer names may go (a failure here leaves
        // them behind for the next compact; the corpus is already the new one)
        if (this.retire.length > 0) {
          for (const name of this.retire) removeFile(this.dir, name);
          syncDir(this.dir);
        }
      } finally {
        this.cleanup(false);
      }
      return describeManifest(this.dir, next);
    } catch (e) {
      this.abort();
      throw e;
    }
  }

  /** Discards the segment being written; the corpus stays as it was. */
  abort(): void {
    if (this.done) return;
    this.done = true;
    this.cleanup(true);
  }

  private cleanup(removeSegment: boolean): void {
    this.segment.close(removeSegment);
    this.existing?.close();
    this.existing = undefined;
    this.lock.release();
    // A first build that never published leaves the directory it made: remove it when empty.
    if (removeSegment && this.created?.madeDir) removeEmptyDirectory(this.dir);
  }

  // Before each publishing step: the lock is still ours and no one published since we opened.
  private checkStillCurrent() {
    this.lock.check();
    if (this.created) {
      if (fs.existsSync(path.join(this.dir, MANIFEST)))
        throw new MaxsimError(
          `${this.dir}: another writer created this corpus meanwhile; nothing was published`,
        );
      return;
    }
    const now = readManifest(this.dir);
    if (now.generation !== this.manifest.generation)
      throw new MaxsimError(
        `${this.dir}: the corpus changed while this writer was open (generation ${this.manifest.generation} -> ${now.generation}); nothing was published`,
      );
  }

  private checkOpen() {
    if (this.done) throw new MaxsimError('this corpus writer was committed or aborted; open a new one');
    if (this.signal?.aborted) {
      this.abort();
      throw this.signal.reason;
    }
  }

  private endDocument(length: number, id: string | undefined) {
    const count = this.manifest.documents + this.segment.documents;
    if (count >= MAX_DOCUMENTS)
      throw new InvalidArgumentError(
        'documents',
        `at most ${MAX_DOCUMENTS} documents in a corpus`,
        `document ${count + 1}`,
      );
    this.segment.endDocument(length, id);
  }
}
