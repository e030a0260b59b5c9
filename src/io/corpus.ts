// The corpus store: documents on disk, built once, grown by appends, searched without loading them.
//
// A corpus is a directory (by convention `name.msx`):
//   MANIFEST             the published state: format, dtype, dim, the list of segments (JSON + CRC line)
//   seg-000001.msxs ...  immutable segment files, one per build or append
//   LOCK                 held by a writer for its lifetime (owner record; see corpus-lock.ts)
// A segment file is self-describing and memory-mappable (all numbers little-endian):
//   [0, 4096)   header: magic "MSXSEG01", version, dtype, dim, flags, documents, tokens, the five
//               sections below as (byte offset, byte length), the checksum chunk size, a header CRC
//   tokens      packed [tokens, dim] rows in the corpus dtype, at byte 4096
//   scales      int8 only: float32 [tokens], one scale per token row
//   offsets     uint64 [documents + 1]: the first token of each document, relative to the segment
//   ids         optional: uint64 [documents + 1] byte offsets, then the UTF-8 ids back to back
//   checksums   uint32 CRC-32 per 64 MiB chunk of tokens, then one each for scales, offsets and ids
// Sections start on 4096-byte boundaries, so any typed view of a mapped section is aligned.
//
// Crash safety: a write never touches published bytes. A build or append writes a new segment under
// a temporary name, syncs it, renames it, syncs the directory, then writes MANIFEST.tmp, syncs it and
// renames it over MANIFEST (atomic on POSIX), and syncs the directory. A crash or a failed write at
// any step leaves the old MANIFEST, which names only complete, synced segments; leftovers are removed
// by the next writer.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { crc32 } from 'node:zlib';
import { checkSignal } from '../abort.js';
import { FormatError, InvalidArgumentError, MaxsimError } from '../errors.js';
import { loadNative, nativeUnavailableReason } from '../native.js';
import { quantize } from '../ops/quantize.js';
import {
  type DType,
  decodeToFloat32,
  dtypeSize,
  encodeFloatsClamped,
  type FloatDType,
  findOverflow,
  isTokenBatch,
  OVERFLOW_AT,
  type TokenBatch,
  type TokenData,
} from '../tensor.js';
import { MAX_DOCUMENTS } from './budget.js';
import { CorpusLock, LOCK_FILE, LOCK_TEMP_NAME, type LockOptions } from './corpus-lock.js';
import { describePath, errnoWords, statWords } from './text-file.js';

export type CorpusDType = DType;
export { CorpusLockedError, type LockOptions } from './corpus-lock.js';

const MANIFEST = 'MANIFEST';
const FORMAT = 'maxsim-corpus';
const VERSION = 1;
/** The MANIFEST's version when it names a tombstone file: older builds refuse it instead of misreading. */
const VERSION_DELETIONS = 2;
const DELETIONS_MAGIC = 'MSXDEL01';
const DELETIONS_NAME = /^del-(\d{6,})\.msxd$/;
const SEGMENT_MAGIC = 'MSXSEG01';
const HEADER_BYTES = 4096;
const ALIGN = 4096;
/** Token bytes per checksum chunk: verification can run chunk by chunk while streaming. */
export const CHECKSUM_CHUNK = 64 * 1024 * 1024;
const WRITE_BUFFER = 8 * 1024 * 1024;
const DTYPE_CODES: Record<DType, number> = { float32: 0, float16: 1, bfloat16: 2, int8: 3 };
const CODE_DTYPES: DType[] = ['float32', 'float16', 'bfloat16', 'int8'];
const SEGMENT_NAME = /^seg-(\d{6,})\.msxs$/;
// Temporaries of a writer: `<segment>.<token>.tmp`, `<segment>.<token>.scales.tmp`, `MANIFEST.<token>.tmp`
// (older versions: without the token).
const LEFTOVER_NAME =
  /^(seg-\d{6,}\.msxs(\.[0-9a-f]{32})?\.(tmp|scales\.tmp)|MANIFEST(\.[0-9a-f]{32})?\.tmp|del-\d{6,}\.msxd\.[0-9a-f]{32}\.tmp)$/;

// ---- fault injection (tests): every file-system step of a writer reports here first ----

let faultHook: ((step: string) => void) | undefined;

/** Test hook: `hook(step)` runs before each write / sync / rename of a writer and may throw. */
export function setCorpusFaultHook(hook: ((step: string) => void) | undefined): void {
  faultHook = hook;
}

function step(name: string): void {
  faultHook?.(name);
}

// ---- small helpers ----

/** Bytes a scan reads per stored token: the row, plus its float32 scale for int8. */
export function storedTokenBytes(dtype: DType, dim: number): number {
  return dim * dtypeSize(dtype) + (dtype === 'int8' ? 4 : 0);
}

function alignUp(n: number): number {
  return Math.ceil(n / ALIGN) * ALIGN;
}

function writeAll(fd: number, bytes: Uint8Array, position: number): void {
  let done = 0;
  while (done < bytes.length) done += fs.writeSync(fd, bytes, done, bytes.length - done, position + done);
}

function readExactly(fd: number, file: string, bytes: Uint8Array, position: number, what: string): void {
  let done = 0;
  while (done < bytes.length) {
    const n = fs.readSync(fd, bytes, done, bytes.length - done, position + done);
    if (n === 0) throw new FormatError(file, `truncated: ${what} ends past the end of the file`);
    done += n;
  }
}

function syncDir(dir: string): void {
  step('sync-dir');
  const fd = fs.openSync(dir, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

function bytesOf(view: ArrayBufferView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

/** The shortest decimal that reads back as the same float32. */
function float32Text(x: number): string {
  for (let p = 1; p < 9; p++) {
    const t = Number(x.toPrecision(p));
    if (Math.fround(t) === x) return String(t);
  }
  return String(x);
}

type Crc32Fn = (bytes: Uint8Array, crc: number) => number;
let nativeCrc: Crc32Fn | null | undefined;

/**
 * CRC-32 of bytes, the same value as zlib's: the native addon's carry-less-multiply version where
 * it is built (3-4x zlib's table code here), else zlib. Readers check chunks with it.
 */
export function checksum(bytes: Uint8Array): number {
  if (nativeCrc === undefined) {
    const f =
      nativeUnavailableReason() === undefined
        ? (loadNative() as unknown as { file?: { crc32?: Crc32Fn } }).file?.crc32
        : undefined;
    nativeCrc = typeof f === 'function' ? f : null;
  }
  return nativeCrc ? nativeCrc(bytes, 0) : crc32(bytes);
}

function hex(n: number): string {
  return n.toString(16).padStart(8, '0');
}

// ---- segment header ----

interface Section {
  offset: number;
  bytes: number;
}

export interface SegmentHeader {
  dtype: DType;
  dim: number;
  documents: number;
  tokens: number;
  hasIds: boolean;
  tokensSection: Section;
  scalesSection: Section;
  offsetsSection: Section;
  idsSection: Section;
  checksumsSection: Section;
  chunkBytes: number;
}

const SECTION_KEYS = [
  'tokensSection',
  'scalesSection',
  'offsetsSection',
  'idsSection',
  'checksumsSection',
] as const;

function encodeHeader(h: SegmentHeader): Uint8Array {
  const bytes = new Uint8Array(HEADER_BYTES);
  const v = new DataView(bytes.buffer);
  bytes.set(Buffer.from(SEGMENT_MAGIC, 'latin1'), 0);
  v.setUint32(8, VERSION, true);
  v.setUint32(12, DTYPE_CODES[h.dtype], true);
  v.setUint32(16, h.dim, true);
  v.setUint32(20, h.hasIds ? 1 : 0, true);
  v.setBigUint64(24, BigInt(h.documents), true);
  v.setBigUint64(32, BigInt(h.tokens), true);
  SECTION_KEYS.forEach((key, i) => {
    v.setBigUint64(40 + 16 * i, BigInt(h[key].offset), true);
    v.setBigUint64(48 + 16 * i, BigInt(h[key].bytes), true);
  });
  v.setUint32(120, h.chunkBytes, true);
  v.setUint32(124, crc32(bytes.subarray(0, 124)), true);
  return bytes;
}

function decodeHeader(file: string, bytes: Uint8Array, fileSize: number): SegmentHeader {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (Buffer.from(bytes.subarray(0, 8)).toString('latin1') !== SEGMENT_MAGIC)
    throw new FormatError(file, 'not a maxsim corpus segment (bad magic)');
  if (v.getUint32(124, true) !== crc32(bytes.subarray(0, 124)))
    throw new FormatError(file, 'the segment header is corrupted (checksum mismatch)');
  const version = v.getUint32(8, true);
  if (version !== VERSION)
    throw new FormatError(
      file,
      `segment format version ${version} is not supported (this build reads ${VERSION})`,
    );
  const code = v.getUint32(12, true);
  if (code >= CODE_DTYPES.length) throw new FormatError(file, `unknown dtype code ${code}`);
  const num = (at: number) => {
    const x = v.getBigUint64(at, true);
    if (x > BigInt(Number.MAX_SAFE_INTEGER))
      throw new FormatError(file, `header field at byte ${at} is too large`);
    return Number(x);
  };
  const h: SegmentHeader = {
    dtype: CODE_DTYPES[code],
    dim: v.getUint32(16, true),
    hasIds: (v.getUint32(20, true) & 1) === 1,
    documents: num(24),
    tokens: num(32),
    tokensSection: { offset: num(40), bytes: num(48) },
    scalesSection: { offset: num(56), bytes: num(64) },
    offsetsSection: { offset: num(72), bytes: num(80) },
    idsSection: { offset: num(88), bytes: num(96) },
    checksumsSection: { offset: num(104), bytes: num(112) },
    chunkBytes: v.getUint32(120, true),
  };
  const rowBytes = h.dim * dtypeSize(h.dtype);
  const expect = (ok: boolean, what: string) => {
    if (!ok) throw new FormatError(file, `inconsistent segment header: ${what}`);
  };
  expect(h.dim >= 1, 'dim is 0');
  expect(h.chunkBytes > 0, 'checksum chunk size is 0');
  expect(h.tokensSection.offset === HEADER_BYTES, 'tokens do not start at byte 4096');
  expect(h.tokensSection.bytes === h.tokens * rowBytes, 'tokens section size');
  expect(h.scalesSection.bytes === (h.dtype === 'int8' ? h.tokens * 4 : 0), 'scales section size');
  expect(h.offsetsSection.bytes === (h.documents + 1) * 8, 'offsets section size');
  expect(h.hasIds || h.idsSection.bytes === 0, 'ids section without the ids flag');
  expect(
    h.checksumsSection.bytes === (Math.ceil(h.tokensSection.bytes / h.chunkBytes) + 3) * 4,
    'checksums size',
  );
  for (const key of SECTION_KEYS) {
    const s = h[key];
    expect(s.offset % 8 === 0, `${key} is not 8-byte aligned`);
    if (s.offset + s.bytes > fileSize)
      throw new FormatError(
        file,
        `truncated: the ${key.replace('Section', '')} section ends at byte ${s.offset + s.bytes} but the file has ${fileSize} bytes`,
      );
  }
  return h;
}

// ---- manifest ----

interface ManifestSegment {
  file: string;
  documents: number;
  tokens: number;
  bytes: number;
  headerCrc: number;
}

/** The tombstone file of a corpus: the global indices of its deleted documents. */
interface ManifestDeletions {
  file: string;
  count: number;
  bytes: number;
  crc: number;
}

interface Manifest {
  format: string;
  version: number;
  dtype: DType;
  dim: number;
  ids: boolean;
  generation: number;
  documents: number;
  tokens: number;
  maxLength: number;
  segments: ManifestSegment[];
  deletions?: ManifestDeletions;
}

function encodeManifest(m: Manifest): string {
  const { deletions, ...rest } = m;
  const body = JSON.stringify(
    deletions ? { ...rest, version: VERSION_DELETIONS, deletions } : { ...rest, version: VERSION },
  );
  return `${body}\ncrc32 ${hex(crc32(body))}\n`;
}

/** The MANIFEST's file, at most this large (a million segments fit in about 150 MB). */
const MANIFEST_MAX_BYTES = 256 * 1024 * 1024;

function readManifest(dir: string): Manifest {
  const file = path.join(dir, MANIFEST);
  let text: string;
  try {
    const st = fs.statSync(file);
    // not only directories: a FIFO would hang the read below
    if (!st.isFile()) throw new FormatError(file, `the MANIFEST is ${statWords(st)}, not a regular file`);
    if (st.size > MANIFEST_MAX_BYTES)
      throw new FormatError(
        file,
        `the MANIFEST has ${st.size} bytes (at most ${MANIFEST_MAX_BYTES} are read)`,
      );
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    if (e instanceof FormatError) throw e;
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') {
      if (!fs.existsSync(dir)) {
        const what = describePath(dir);
        throw new FormatError(
          dir,
          `no such corpus (${what.startsWith('a symbolic link') ? what : 'the directory does not exist'})`,
        );
      }
      const segments = fs.readdirSync(dir).filter((n) => SEGMENT_NAME.test(n)).length;
      throw new FormatError(
        dir,
        segments > 0
          ? `not a maxsim corpus: it has no MANIFEST but ${segments} segment file(s) (\`maxsim corpus recover ${dir}\` rebuilds the MANIFEST from the intact ones)`
          : 'not a maxsim corpus (no MANIFEST and no segment files)',
      );
    }
    if (code === 'ENOTDIR') throw new FormatError(dir, 'not a maxsim corpus (a corpus is a directory)');
    throw new FormatError(file, `cannot read the MANIFEST (${code ?? (e as Error).message})`);
  }
  const match = /^(.*)\ncrc32 ([0-9a-f]{8})\n$/s.exec(text);
  if (!match) throw new FormatError(file, 'the MANIFEST is damaged (no checksum line)');
  if (hex(crc32(match[1])) !== match[2])
    throw new FormatError(file, 'the MANIFEST is corrupted (checksum mismatch)');
  let parsed: unknown;
  try {
    parsed = JSON.parse(match[1]);
  } catch {
    throw new FormatError(file, 'the MANIFEST is not valid JSON');
  }
  return validateManifest(file, parsed);
}

/** A value for an error message: scalars as JSON (cut short), containers by kind only (never walked). */
function describeValue(x: unknown): string {
  if (x === null) return 'null';
  if (Array.isArray(x)) return `an array of ${x.length}`;
  if (typeof x === 'object') return 'an object';
  if (typeof x === 'string') return JSON.stringify(x.length > 80 ? `${x.slice(0, 80)}...` : x);
  if (typeof x === 'number' && Number.isFinite(x) && Math.abs(x) > Number.MAX_SAFE_INTEGER)
    return `${x.toExponential(3)} (beyond 2^53)`;
  return String(x);
}

/**
 * The MANIFEST is data: every field is type- and range-checked, segment files must be the canonical
 * names of increasing segment numbers (so never a path, never twice), and the totals must add up.
 */
function validateManifest(file: string, raw: unknown): Manifest {
  const bad = (field: string, rule: string, value: unknown): never => {
    throw new FormatError(file, `MANIFEST field ${field} must be ${rule} but is ${describeValue(value)}`);
  };
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) bad('(top level)', 'an object', raw);
  const o = raw as Record<string, unknown>;
  if (o.format !== FORMAT)
    throw new FormatError(file, `not a maxsim corpus manifest (format ${describeValue(o.format)})`);
  if (o.version !== VERSION && o.version !== VERSION_DELETIONS)
    throw new FormatError(
      file,
      `corpus format version ${describeValue(o.version)} is not supported (this build reads ${VERSION} and ${VERSION_DELETIONS})`,
    );
  const count = (field: string, x: unknown, max = Number.MAX_SAFE_INTEGER): number => {
    if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < 0 || x > max)
      bad(field, `an integer in [0, ${max}]`, x);
    return x as number;
  };
  const countOf = count;
  if (typeof o.dtype !== 'string' || !CODE_DTYPES.includes(o.dtype as DType))
    bad('dtype', `one of ${CODE_DTYPES.join(', ')}`, o.dtype);
  if (typeof o.dim !== 'number' || !Number.isInteger(o.dim) || o.dim < 1 || o.dim > 65536)
    bad('dim', 'an integer in [1, 65536]', o.dim);
  if (typeof o.ids !== 'boolean') bad('ids', 'true or false', o.ids);
  const generation = count('generation', o.generation, 999_999_999_999);
  const documents = count('documents', o.documents, MAX_DOCUMENTS);
  const tokens = count('tokens', o.tokens);
  const maxLength = count('maxLength', o.maxLength, 0x7fffffff);
  if (!Array.isArray(o.segments)) bad('segments', 'an array', o.segments);
  const list = o.segments as unknown[];
  const segments: ManifestSegment[] = [];
  let last = 0;
  let docSum = 0;
  let tokenSum = 0;
  list.forEach((x, i) => {
    const at = `segments[${i}]`;
    if (x === null || typeof x !== 'object' || Array.isArray(x)) bad(at, 'an object', x);
    const s = x as Record<string, unknown>;
    const name = typeof s.file === 'string' ? SEGMENT_NAME.exec(s.file) : null;
    if (!name) bad(`${at}.file`, 'a segment file name seg-NNNNNN.msxs (never a path)', s.file);
    const n = Number(name![1]);
    if (!Number.isSafeInteger(n) || n < 1 || n > generation || s.file !== segmentName(n))
      bad(`${at}.file`, `a canonical segment name numbered 1..${generation} (the generation)`, s.file);
    if (n <= last)
      bad(
        `${at}.file`,
        n === last ? 'a segment listed once (duplicate)' : 'numbered after the previous segment',
        s.file,
      );
    last = n;
    const seg: ManifestSegment = {
      file: segmentName(n),
      documents: count(`${at}.documents`, s.documents, MAX_DOCUMENTS),
      tokens: count(`${at}.tokens`, s.tokens),
      bytes: count(`${at}.bytes`, s.bytes),
      headerCrc: count(`${at}.headerCrc`, s.headerCrc, 0xffffffff),
    };
    if (seg.bytes < HEADER_BYTES + (seg.documents + 1) * 8)
      bad(
        `${at}.bytes`,
        `at least the header and offsets of its documents (${HEADER_BYTES + (seg.documents + 1) * 8})`,
        seg.bytes,
      );
    docSum += seg.documents;
    tokenSum += seg.tokens;
    segments.push(seg);
  });
  if (docSum !== documents) bad('documents', `the sum over its segments (${docSum})`, documents);
  if (tokenSum !== tokens) bad('tokens', `the sum over its segments (${tokenSum})`, tokens);
  if (maxLength > tokens) bad('maxLength', `at most the token count (${tokens})`, maxLength);
  let deletions: ManifestDeletions | undefined;
  if (o.version === VERSION_DELETIONS) {
    const d = o.deletions;
    if (d === null || typeof d !== 'object' || Array.isArray(d)) bad('deletions', 'an object', d);
    const r = d as Record<string, unknown>;
    const name = typeof r.file === 'string' ? DELETIONS_NAME.exec(r.file) : null;
    if (!name || Number(name[1]) > generation || r.file !== deletionsName(Number(name[1])))
      bad('deletions.file', `a tombstone file name del-NNNNNN.msxd numbered 1..${generation}`, r.file);
    const count = countOf('deletions.count', r.count, documents);
    deletions = {
      file: r.file as string,
      count,
      bytes: countOf('deletions.bytes', r.bytes),
      crc: countOf('deletions.crc', r.crc, 0xffffffff),
    };
    if (deletions.bytes !== deletionsBytes(count))
      bad('deletions.bytes', `${deletionsBytes(count)} (for ${count} deletions)`, deletions.bytes);
  } else if (o.deletions !== undefined) bad('deletions', 'absent in a version 1 MANIFEST', o.deletions);
  return {
    format: FORMAT,
    version: VERSION,
    dtype: o.dtype as DType,
    dim: o.dim as number,
    ids: o.ids as boolean,
    generation,
    documents,
    tokens,
    maxLength,
    segments,
    deletions,
  };
}

/** Opens a segment named by the MANIFEST, refusing one whose real path leaves the corpus directory. */
function openSegment(dir: string, name: string): { file: string; fd: number } {
  const file = path.join(dir, name);
  let real: string;
  try {
    real = fs.realpathSync(file);
  } catch {
    throw new FormatError(file, 'a segment named by the MANIFEST is missing');
  }
  if (path.dirname(real) !== fs.realpathSync(dir))
    throw new FormatError(file, `the segment resolves to ${real}, outside the corpus directory; refused`);
  try {
    // non-blocking: opening a FIFO for reading would wait for a writer (no effect on regular files)
    const fd = fs.openSync(real, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
    if (!fs.fstatSync(fd).isFile()) {
      fs.closeSync(fd);
      throw new FormatError(file, 'a segment named by the MANIFEST is not a regular file');
    }
    return { file, fd };
  } catch (e) {
    if (e instanceof FormatError) throw e;
    throw new FormatError(file, `cannot open the segment (${(e as NodeJS.ErrnoException).code ?? e})`);
  }
}

// ---- writer ----

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
  private fd: number | undefined;
  private scalesFd: number | undefined;
  private readonly segFile: string;
  private readonly tmpFile: string;
  private readonly scalesFile: string;
  private readonly buffer = new Uint8Array(WRITE_BUFFER);
  private buffered = 0;
  private position = HEADER_BYTES;
  private scalesPosition = 0;
  private readonly chunkCrcs: number[] = [];
  private chunkCrc = 0;
  private chunkFill = 0;
  private scalesCrc = 0;
  // token offsets of the documents so far, [documents + 1], in a typed array grown by doubling
  private offsets = new Float64Array(1024);
  private documentCount = 0;
  private readonly ids: string[] = [];
  private tokens = 0;
  private maxLength = 0;
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
    this.tmpFile = path.join(dir, `${this.segFile}.${lock.token}.tmp`);
    this.scalesFile = path.join(dir, `${this.segFile}.${lock.token}.scales.tmp`);
    step('open-segment');
    this.fd = fs.openSync(this.tmpFile, 'wx');
    if (manifest.dtype === 'int8') this.scalesFd = fs.openSync(this.scalesFile, 'wx+');
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
    return this.documentCount;
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
  static delete(dir: string, ids: readonly string[], options: LockOptions = {}): DeleteResult {
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
    readManifest(dir);
    const lock = CorpusLock.acquire(dir, options);
    let w: CorpusWriter | undefined;
    try {
      const m = readManifest(dir);
      removeLeftovers(dir, m);
      const old = CorpusFile.open(dir);
      const base: Manifest = {
        ...m,
        documents: 0,
        tokens: 0,
        maxLength: 0,
        segments: [],
        deletions: undefined,
      };
      w = new CorpusWriter(dir, base, lock, undefined, {});
      const named = new Set([...m.segments.map((x) => x.file), m.deletions?.file]);
      // everything the new MANIFEST will not name: the old files, and orphans of an earlier compact
      w.retire = fs
        .readdirSync(dir)
        .filter(
          (n) =>
            (SEGMENT_NAME.test(n) || DELETIONS_NAME.test(n)) &&
            (named.has(n) || Number(/\d+/.exec(n)![0]) <= m.generation),
        )
        .sort();
      const live: number[] = [];
      for (let i = 0; i < old.info.documents; i++) if (!old.isDeleted(i)) live.push(i);
      const rowBytes = storedTokenBytes(m.dtype, m.dim);
      for (let a = 0; a < live.length; ) {
        // copy in runs of about 32 MiB: memory stays flat whatever the corpus size
        let b = a;
        let bytes = 0;
        while (b < live.length && (b === a || bytes + old.lengths[live[b]] * rowBytes <= 32 << 20))
          bytes += old.lengths[live[b++]] * rowBytes;
        const run = live.slice(a, b);
        const docs = old.readDocuments(run);
        w.addEncoded(
          { data: docs.data, lengths: docs.lengths, scales: docs.scales },
          m.ids ? run.map((i) => old.id(i)) : undefined,
        );
        a = b;
        options.onProgress?.(a, live.length);
      }
      return w.commit();
    } catch (e) {
      if (w) w.abort();
      else lock.release();
      throw e;
    }
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
    this.checkIds(ids, batch.count);
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
    if (converts && !this.clamp) this.refuseOverflow(source);
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
        this.writeTokens(bytesOf(rows));
        if (this.dtype === 'int8')
          this.writeScales(scales!.subarray(source.starts[i], source.starts[i] + len));
        this.endDocument(len, ids?.[i]);
      }
    });
  }

  // Before writing anything: finite values the corpus dtype cannot hold are an error naming the first.
  private refuseOverflow(batch: TokenBatch) {
    const dtype = this.dtype as FloatDType;
    let count = 0;
    let first = '';
    for (let i = 0; i < batch.count; i++) {
      const start = batch.starts[i] * this.dim;
      const rows = batch.data.subarray(start, start + batch.lengths[i] * this.dim);
      const found = findOverflow(
        batch.dtype === 'float32' ? rows : decodeToFloat32(rows, batch.dtype, this.dim),
        dtype,
      );
      if (!found) continue;
      if (count === 0)
        first = `the first, ${float32Text(found.value)}, in document ${i} at token ${Math.floor(found.first / this.dim)}, component ${found.first % this.dim}`;
      count += found.count;
    }
    if (count > 0)
      throw new InvalidArgumentError(
        'batch.data',
        `finite values within the ${dtype} range of the corpus (|x| < ${OVERFLOW_AT[dtype as 'float16' | 'bfloat16']}; they would become +-Infinity; pass clamp: true / --clamp to store them as +-${dtype === 'float16' ? 65504 : '3.3895e38'})`,
        `${count} value${count === 1 ? '' : 's'} beyond it (${first})`,
      );
  }

  /** Adds documents already encoded in the corpus dtype (no conversion; for large builds and benchmarks). */
  addEncoded(docs: EncodedDocuments, ids?: readonly string[]): void {
    this.checkOpen();
    this.checkIds(ids, docs.lengths.length);
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
      this.writeTokens(bytesOf(docs.data));
      if (this.dtype === 'int8') this.writeScales(docs.scales!);
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
      this.flush();
      if (this.chunkFill > 0) this.chunkCrcs.push(this.chunkCrc);
      const rowBytes = this.dim * dtypeSize(this.dtype);
      const documents = this.documents;
      const tokensSection = { offset: HEADER_BYTES, bytes: this.tokens * rowBytes };
      let at = alignUp(HEADER_BYTES + tokensSection.bytes);
      const scalesSection = { offset: at, bytes: this.dtype === 'int8' ? this.tokens * 4 : 0 };
      if (this.scalesFd !== undefined) this.copyScales(at);
      at = alignUp(at + scalesSection.bytes);
      const off64 = new BigUint64Array(documents + 1);
      for (let i = 1; i <= documents; i++) off64[i] = BigInt(this.offsets[i]);
      const offsetsBytes = new Uint8Array(off64.buffer);
      const offsetsSection = { offset: at, bytes: offsetsBytes.length };
      step('write-offsets');
      writeAll(this.fd!, offsetsBytes, at);
      at = alignUp(at + offsetsBytes.length);
      let idsBytes = new Uint8Array(0);
      if (this.manifest.ids) {
        const text = this.ids.map((s) => Buffer.from(s, 'utf8'));
        const starts = new BigUint64Array(documents + 1);
        let o = 0;
        text.forEach((t, i) => {
          o += t.length;
          starts[i + 1] = BigInt(o);
        });
        idsBytes = Buffer.concat([Buffer.from(starts.buffer), ...text]);
      }
      const idsSection = { offset: at, bytes: idsBytes.length };
      if (idsBytes.length > 0) {
        step('write-ids');
        writeAll(this.fd!, idsBytes, at);
      }
      at = alignUp(at + idsBytes.length);
      const sums = new Uint32Array([...this.chunkCrcs, this.scalesCrc, crc32(offsetsBytes), crc32(idsBytes)]);
      const checksumsSection = { offset: at, bytes: sums.byteLength };
      step('write-checksums');
      writeAll(this.fd!, bytesOf(sums), at);
      const header = encodeHeader({
        dtype: this.dtype,
        dim: this.dim,
        documents,
        tokens: this.tokens,
        hasIds: this.manifest.ids,
        tokensSection,
        scalesSection,
        offsetsSection,
        idsSection,
        checksumsSection,
        chunkBytes: CHECKSUM_CHUNK,
      });
      step('write-header');
      writeAll(this.fd!, header, 0);
      step('sync-segment');
      fs.fsyncSync(this.fd!);
      fs.closeSync(this.fd!);
      this.fd = undefined;
      const segPath = path.join(this.dir, this.segFile);
      this.checkStillCurrent();
      if (fs.existsSync(segPath))
        throw new MaxsimError(`${segPath} exists already; refusing to replace it (nothing was published)`);
      step('rename-segment');
      fs.renameSync(this.tmpFile, segPath);
      syncDir(this.dir);

      const m = this.manifest;
      const next: Manifest = {
        ...m,
        generation: m.generation + 1,
        documents: m.documents + documents,
        tokens: m.tokens + this.tokens,
        maxLength: Math.max(m.maxLength, this.maxLength),
        segments: [
          ...m.segments,
          {
            file: this.segFile,
            documents,
            tokens: this.tokens,
            bytes: at + sums.byteLength,
            headerCrc: new DataView(header.buffer).getUint32(124, true),
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
    for (const fd of [this.fd, this.scalesFd]) {
      if (fd === undefined) continue;
      try {
        fs.closeSync(fd);
      } catch {
        // already closed
      }
    }
    this.fd = this.scalesFd = undefined;
    try {
      fs.rmSync(this.scalesFile, { force: true });
      if (removeSegment) fs.rmSync(this.tmpFile, { force: true });
    } catch {
      // best effort: leftovers are removed by the next writer
    }
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

  private checkIds(ids: readonly string[] | undefined, count: number) {
    if (this.manifest.ids) {
      if (!ids || ids.length !== count)
        throw new InvalidArgumentError(
          'ids',
          `${count} document ids (the corpus has ids)`,
          ids ? String(ids.length) : 'none',
        );
      for (const id of ids)
        if (typeof id !== 'string' || id.includes('\n'))
          throw new InvalidArgumentError('ids', 'strings without newlines', JSON.stringify(id));
      const batch = new Map<string, string>();
      const message = duplicateIds(
        ids,
        (id) => {
          const at = this.existing?.indexOf(id);
          if (at !== undefined) return `already in the corpus (document ${at})`;
          return this.taken.get(id) ?? batch.get(id);
        },
        (id, i) => {
          batch.set(id, `repeats ids[${i}] of this batch`);
        },
      );
      if (message) throw new InvalidArgumentError('ids', 'unique document ids', message);
      for (const id of batch.keys()) this.taken.set(id, 'already added by an earlier add() of this writer');
    } else if (ids !== undefined) {
      throw new InvalidArgumentError(
        'ids',
        'no ids (the corpus was created without ids)',
        `${ids.length} ids`,
      );
    }
  }

  private endDocument(length: number, id: string | undefined) {
    if (this.manifest.documents + this.documentCount >= MAX_DOCUMENTS)
      throw new InvalidArgumentError(
        'documents',
        `at most ${MAX_DOCUMENTS} documents in a corpus`,
        `document ${this.manifest.documents + this.documentCount + 1}`,
      );
    this.tokens += length;
    if (this.documentCount + 2 > this.offsets.length) {
      const grown = new Float64Array(this.offsets.length * 2);
      grown.set(this.offsets);
      this.offsets = grown;
    }
    this.offsets[++this.documentCount] = this.tokens;
    if (length > this.maxLength) this.maxLength = length;
    if (id !== undefined) this.ids.push(id);
  }

  // Token bytes go through a write buffer; checksums are taken per CHECKSUM_CHUNK of the section.
  private writeTokens(bytes: Uint8Array) {
    let at = 0;
    while (at < bytes.length) {
      const take = Math.min(bytes.length - at, CHECKSUM_CHUNK - this.chunkFill, WRITE_BUFFER - this.buffered);
      const part = bytes.subarray(at, at + take);
      this.buffer.set(part, this.buffered);
      this.buffered += take;
      this.chunkCrc = crc32(part, this.chunkCrc);
      this.chunkFill += take;
      at += take;
      if (this.chunkFill === CHECKSUM_CHUNK) {
        this.chunkCrcs.push(this.chunkCrc);
        this.chunkCrc = 0;
        this.chunkFill = 0;
      }
      if (this.buffered === WRITE_BUFFER) this.flush();
    }
  }

  private flush() {
    if (this.buffered === 0) return;
    step('write-tokens');
    writeAll(this.fd!, this.buffer.subarray(0, this.buffered), this.position);
    this.position += this.buffered;
    this.buffered = 0;
  }

  private writeScales(scales: Float32Array) {
    const bytes = bytesOf(scales);
    step('write-scales');
    writeAll(this.scalesFd!, bytes, this.scalesPosition);
    this.scalesPosition += bytes.length;
    this.scalesCrc = crc32(bytes, this.scalesCrc);
  }

  // int8: the scales went to a side file while tokens streamed; copy them into their section.
  private copyScales(at: number) {
    const chunk = new Uint8Array(WRITE_BUFFER);
    for (let done = 0; done < this.scalesPosition; ) {
      const n = fs.readSync(
        this.scalesFd!,
        chunk,
        0,
        Math.min(chunk.length, this.scalesPosition - done),
        done,
      );
      if (n === 0) throw new MaxsimError(`${this.scalesFile} shrank while the segment was written`);
      step('write-scales');
      writeAll(this.fd!, chunk.subarray(0, n), at + done);
      done += n;
    }
  }
}

/**
 * Checks a list of new ids against the ids already taken (`takenAt(id)` says where, or undefined) and
 * against each other; `accept(id, i)` records each new one. Returns a message naming the first
 * duplicates and where they are, or undefined when all are unique. Shared by the writer and the server.
 */
export function duplicateIds(
  ids: readonly string[],
  takenAt: (id: string) => string | undefined,
  accept: (id: string, i: number) => void,
): string | undefined {
  const found: string[] = [];
  let count = 0;
  ids.forEach((id, i) => {
    const where = takenAt(id);
    if (where !== undefined) {
      if (count++ < 3) found.push(`${JSON.stringify(id)} at ids[${i}] ${where}`);
      return;
    }
    accept(id, i);
  });
  if (count === 0) return undefined;
  return `${count} duplicate id${count === 1 ? '' : 's'}: ${found.join('; ')}${count > 3 ? '; ...' : ''}`;
}

function segmentName(generation: number): string {
  return `seg-${String(generation).padStart(6, '0')}.msxs`;
}

// ---- tombstones ----
// A tombstone file del-NNNNNN.msxd (NNNNNN: the generation that published it) lists every deleted
// document of the corpus, not just the latest ones, so readers need only the one the MANIFEST names:
//   "MSXDEL01", uint32 version 1, uint32 0, uint64 count, uint64 [count] global document indices
//   (strictly increasing), uint32 CRC-32 of all the bytes before it.

function deletionsName(generation: number): string {
  return `del-${String(generation).padStart(6, '0')}.msxd`;
}

function deletionsBytes(count: number): number {
  return 24 + 8 * count + 4;
}

function encodeDeletions(indices: readonly number[]): Uint8Array {
  const bytes = new Uint8Array(deletionsBytes(indices.length));
  const v = new DataView(bytes.buffer);
  bytes.set(Buffer.from(DELETIONS_MAGIC, 'latin1'), 0);
  v.setUint32(8, 1, true);
  v.setBigUint64(16, BigInt(indices.length), true);
  indices.forEach((x, i) => {
    v.setBigUint64(24 + 8 * i, BigInt(x), true);
  });
  v.setUint32(bytes.length - 4, crc32(bytes.subarray(0, bytes.length - 4)), true);
  return bytes;
}

/** Reads the tombstone file the MANIFEST names: a mask over the documents, checked end to end. */
function readDeletions(dir: string, d: ManifestDeletions, documents: number): Uint8Array {
  const file = path.join(dir, d.file);
  let bytes: Uint8Array;
  try {
    bytes = fs.readFileSync(file);
  } catch (e) {
    throw new FormatError(
      file,
      `cannot read the tombstone file the MANIFEST names (${(e as NodeJS.ErrnoException).code ?? e})`,
    );
  }
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.length !== d.bytes)
    throw new FormatError(
      file,
      `the tombstone file has ${bytes.length} bytes but the MANIFEST says ${d.bytes}`,
    );
  const crc = crc32(bytes.subarray(0, bytes.length - 4));
  if (Buffer.from(bytes.subarray(0, 8)).toString('latin1') !== DELETIONS_MAGIC)
    throw new FormatError(file, 'not a maxsim tombstone file (bad magic)');
  if (crc !== v.getUint32(bytes.length - 4, true) || crc !== d.crc)
    throw new FormatError(file, 'the tombstone file is corrupted (checksum mismatch)');
  if (v.getUint32(8, true) !== 1)
    throw new FormatError(file, `tombstone format version ${v.getUint32(8, true)} is not supported`);
  if (Number(v.getBigUint64(16, true)) !== d.count)
    throw new FormatError(file, 'the tombstone count disagrees with the MANIFEST');
  const mask = new Uint8Array(documents);
  let last = -1;
  for (let i = 0; i < d.count; i++) {
    const x = Number(v.getBigUint64(24 + 8 * i, true));
    if (!(x > last && x < documents))
      throw new FormatError(
        file,
        `tombstone ${i} (${x}) is not an increasing document index below ${documents}`,
      );
    mask[x] = 1;
    last = x;
  }
  return mask;
}

/** Writes a file under a temporary name, syncs it, renames it into place and syncs the directory. */
function writeDurably(dir: string, name: string, token: string, bytes: Uint8Array, what: string) {
  const tmp = path.join(dir, `${name}.${token}.tmp`);
  step(`write-${what}`);
  const fd = fs.openSync(tmp, 'wx');
  try {
    writeAll(fd, bytes, 0);
    step(`sync-${what}`);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  step(`rename-${what}`);
  fs.renameSync(tmp, path.join(dir, name));
  syncDir(dir);
}

export interface DeleteResult {
  info: CorpusInfo;
  /** Documents deleted by this call (global indices, increasing). */
  deleted: number[];
}

/**
 * Deletes documents by id (ids corpora) or by index as a decimal string (corpora without ids), under
 * the writer lock: a new tombstone file listing every deleted document is written and synced, then
 * published with a new MANIFEST in one rename. Unknown (or already deleted) ids are an error and
 * nothing is written. Deleted documents disappear from search and get(); their bytes stay in the
 * segments until `compactCorpus`.
 */
export function deleteDocuments(
  dir: string,
  ids: readonly string[],
  options: LockOptions = {},
): DeleteResult {
  if (!Array.isArray(ids) || ids.some((x) => typeof x !== 'string'))
    throw new InvalidArgumentError('ids', 'an array of document id strings', describeValue(ids));
  readManifest(dir); // a clear error before locking when it is not a corpus
  const lock = CorpusLock.acquire(dir, options);
  try {
    const m = readManifest(dir);
    removeLeftovers(dir, m);
    const corpus = CorpusFile.open(dir);
    const indices = [...new Set(corpus.indicesOf(ids, 'ids'))].sort((a, b) => a - b);
    if (indices.length === 0) return { info: corpus.info, deleted: [] };
    const all: number[] = [];
    for (let i = 0; i < corpus.info.documents; i++) if (corpus.isDeleted(i)) all.push(i);
    const merged = [...all, ...indices].sort((a, b) => a - b);
    const bytes = encodeDeletions(merged);
    const generation = m.generation + 1;
    const name = deletionsName(generation);
    lock.check();
    writeDurably(dir, name, lock.token, bytes, 'deletions');
    const next: Manifest = {
      ...m,
      generation,
      deletions: {
        file: name,
        count: merged.length,
        bytes: bytes.length,
        crc: new DataView(bytes.buffer).getUint32(bytes.length - 4, true),
      },
    };
    publishManifest(dir, lock.token, next, () => {
      lock.check();
      const now = readManifest(dir);
      if (now.generation !== m.generation)
        throw new MaxsimError(
          `${dir}: the corpus changed meanwhile (generation ${m.generation} -> ${now.generation}); nothing was published`,
        );
    });
    // the previous tombstone file is superseded (a reader that opened it already holds its mask)
    if (m.deletions) removeFile(dir, m.deletions.file);
    return { info: describeManifest(dir, next), deleted: indices };
  } finally {
    lock.release();
  }
}

// The one publish step of every writer: writes the next MANIFEST to this writer's temporary, syncs
// it, runs `check` (the lock is still ours and nobody published meanwhile), renames it over the
// MANIFEST and syncs the directory.
function publishManifest(dir: string, token: string, next: Manifest, check: () => void) {
  const tmpManifest = path.join(dir, `${MANIFEST}.${token}.tmp`);
  step('write-manifest');
  const mfd = fs.openSync(tmpManifest, 'w');
  try {
    writeAll(mfd, Buffer.from(encodeManifest(next), 'utf8'), 0);
    step('sync-manifest');
    fs.fsyncSync(mfd);
  } finally {
    fs.closeSync(mfd);
  }
  check();
  step('publish-manifest');
  fs.renameSync(tmpManifest, path.join(dir, MANIFEST));
  syncDir(dir);
}

// After a publish: files the new MANIFEST no longer names (best effort; the next writer retries).
function removeFile(dir: string, name: string) {
  step('remove-old');
  fs.rmSync(path.join(dir, name), { force: true });
}

// Under the lock: temporaries of dead writers, and segments that a writer renamed but died before
// publishing (numbered past the MANIFEST's generation). Nothing else is touched.
function removeLeftovers(dir: string, m: Manifest) {
  for (const name of fs.readdirSync(dir)) {
    const seg = SEGMENT_NAME.exec(name);
    const stale = DELETIONS_NAME.test(name) && name !== m.deletions?.file;
    if (LEFTOVER_NAME.test(name) || stale || (seg && Number(seg[1]) > m.generation))
      fs.rmSync(path.join(dir, name), { force: true });
    else if (LOCK_TEMP_NAME.test(name)) {
      // a contender's lock record lives for microseconds: one a minute old was left by a crash
      try {
        if (Date.now() - fs.statSync(path.join(dir, name)).mtimeMs > 60_000)
          fs.rmSync(path.join(dir, name), { force: true });
      } catch {
        // gone meanwhile
      }
    }
  }
}

// ---- the directory of a new corpus ----

function refuseOut(dir: string, why: string): never {
  throw new InvalidArgumentError('out', 'a new or empty directory for the corpus', `${dir} (${why})`);
}

/** Makes the directory of a new corpus, or checks an existing one; true when this call made it. */
function prepareNewDirectory(dir: string): boolean {
  const resolved = path.resolve(dir);
  if (resolved === path.parse(resolved).root) refuseOut(dir, 'the file-system root');
  let st: fs.Stats | undefined;
  // file-system errors as one line naming the path (ENOTDIR under a file, EACCES, EROFS, ...)
  const refuseErrno = (e: unknown): never => {
    const code = (e as NodeJS.ErrnoException).code;
    refuseOut(
      dir,
      code === 'ENOTDIR'
        ? 'a path through something that is not a directory'
        : code === 'ENOENT'
          ? 'the file system does not let a directory be made there'
          : errnoWords(e),
    );
  };
  try {
    st = fs.lstatSync(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') refuseErrno(e);
  }
  if (!st) {
    try {
      makeParents(path.dirname(resolved));
    } catch (e) {
      refuseErrno(e);
    }
    try {
      fs.mkdirSync(dir);
      return true;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') refuseErrno(e);
      st = fs.lstatSync(dir); // made by someone else meanwhile: check it like any existing one
    }
  }
  if (st.isSymbolicLink()) refuseOut(dir, 'a symbolic link');
  if (!st.isDirectory()) refuseOut(dir, 'an existing file');
  checkNewDirectory(dir, false);
  return false;
}

// mkdir -p, one level at a time: Node's recursive mkdirSync never returns for a path under /proc
function makeParents(dir: string) {
  const missing: string[] = [];
  for (let d = dir; !fs.existsSync(d); d = path.dirname(d)) {
    if (path.dirname(d) === d) break;
    missing.push(d);
  }
  for (const d of missing.reverse()) {
    try {
      fs.mkdirSync(d);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
  }
}

// An existing directory may become a corpus only when it holds nothing but our own temporaries
// (an interrupted build); with `locked`, those are removed.
function checkNewDirectory(dir: string, locked: boolean) {
  const names = fs.readdirSync(dir);
  if (names.includes(MANIFEST))
    throw new InvalidArgumentError(
      'out',
      'a path where no corpus exists yet (use append to add documents)',
      `${dir} (a corpus)`,
    );
  const segments = names.filter((n) => SEGMENT_NAME.test(n));
  if (segments.length > 0)
    refuseOut(
      dir,
      `it holds ${segments.length} corpus segment(s) but no MANIFEST; \`maxsim corpus recover ${dir}\` rebuilds the MANIFEST from them`,
    );
  const others = names.filter((n) => !LEFTOVER_NAME.test(n) && n !== LOCK_FILE && !LOCK_TEMP_NAME.test(n));
  if (others.length > 0)
    refuseOut(dir, `not empty: ${others.length} entries such as ${JSON.stringify(others[0])}`);
  if (locked) for (const n of names) if (LEFTOVER_NAME.test(n)) fs.rmSync(path.join(dir, n), { force: true });
}

function removeEmptyDirectory(dir: string) {
  try {
    fs.rmdirSync(dir); // fails unless empty: never removes what someone else put there
  } catch {
    // not empty or gone: leave it
  }
}

// ---- reader ----

export interface CorpusInfo {
  path: string;
  dtype: DType;
  dim: number;
  documents: number;
  tokens: number;
  maxLength: number;
  segments: number;
  /** Bytes of all segment files. */
  bytes: number;
  /** Bytes of token rows (and int8 scales): what a full scan reads. */
  tokenBytes: number;
  hasIds: boolean;
  generation: number;
  /** Documents deleted (tombstoned) and not yet compacted away; they keep their indices. */
  deleted: number;
  /** Documents that search and get() see: documents - deleted. */
  live: number;
}

function describeManifest(dir: string, m: Manifest): CorpusInfo {
  const rowBytes = storedTokenBytes(m.dtype, m.dim);
  return {
    path: dir,
    dtype: m.dtype,
    dim: m.dim,
    documents: m.documents,
    tokens: m.tokens,
    maxLength: m.maxLength,
    segments: m.segments.length,
    bytes: m.segments.reduce((a, s) => a + s.bytes, 0),
    tokenBytes: m.tokens * rowBytes,
    hasIds: m.ids,
    generation: m.generation,
    deleted: m.deletions?.count ?? 0,
    live: m.documents - (m.deletions?.count ?? 0),
  };
}

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
const verifiedChunks = new Map<string, Set<number>>();

/** Bench / test hook: forget which chunks were checked (later opens check them again). */
export function forgetVerifiedChunks(): void {
  verifiedChunks.clear();
}

function verifiedSet(st: fs.Stats, headerCrc: number): Set<number> {
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

interface SegmentMeta {
  header: SegmentHeader;
  headerCrc: number;
  /** Token offsets of its documents, [documents + 1], checked. */
  offsets: Float64Array;
  ids?: string[];
  sums: Uint32Array;
}

/** Reads and checks a segment's header, checksums, offsets and (withIds) ids: everything but the tokens. */
function readSegmentMeta(file: string, fd: number, size: number, withIds: boolean): SegmentMeta {
  const raw = new Uint8Array(HEADER_BYTES);
  readExactly(fd, file, raw, 0, 'the header');
  const header = decodeHeader(file, raw, size);
  const headerCrc = new DataView(raw.buffer).getUint32(124, true);
  const sumBytes = readSection(fd, file, header.checksumsSection, 'checksums');
  const sums = new Uint32Array(sumBytes.buffer, sumBytes.byteOffset, sumBytes.byteLength / 4);
  const nChunks = sums.length - 3;
  const offBytes = readSection(fd, file, header.offsetsSection, 'offsets');
  if (crc32(offBytes) !== sums[nChunks + 1])
    throw new FormatError(file, 'the document offsets are corrupted (checksum mismatch)');
  // uint64 as two uint32 words: no BigInt per document (a million of them are GC-bound); exact below
  // 2^53, and anything larger fails the range checks below
  const off32 = new Uint32Array(offBytes.buffer, offBytes.byteOffset, 2 * (header.documents + 1));
  const offsets = new Float64Array(header.documents + 1);
  for (let i = 0; i <= header.documents; i++) {
    offsets[i] = off32[2 * i] + off32[2 * i + 1] * 4294967296;
    if (i > 0 && !(offsets[i] >= offsets[i - 1] && offsets[i] - offsets[i - 1] <= 0x7fffffff))
      throw new FormatError(file, `the document offsets are not increasing at document ${i - 1}`);
  }
  if (offsets[0] !== 0 || offsets[header.documents] !== header.tokens)
    throw new FormatError(file, 'the document offsets do not cover the tokens');
  if (withIds !== header.hasIds)
    throw new FormatError(
      file,
      `the segment ${header.hasIds ? 'has' : 'has no'} document ids, unlike its corpus`,
    );
  let ids: string[] | undefined;
  if (withIds) {
    const idBytes = readSection(fd, file, header.idsSection, 'ids');
    if (crc32(idBytes) !== sums[nChunks + 2])
      throw new FormatError(file, 'the document ids are corrupted (checksum mismatch)');
    const head = (header.documents + 1) * 8;
    if (idBytes.length < head) throw new FormatError(file, 'the ids section is shorter than its offsets');
    const starts = new Uint32Array(idBytes.buffer.slice(idBytes.byteOffset, idBytes.byteOffset + head));
    const text = Buffer.from(idBytes.buffer, idBytes.byteOffset + head, idBytes.length - head);
    ids = [];
    // ASCII ids (the usual case): decode the section once and slice it, several times faster than
    // one decode per id; byte offsets are character offsets exactly when the decoded text is as long
    const whole = text.toString('utf8');
    const ascii = whole.length === text.length;
    for (let i = 0; i < header.documents; i++) {
      const a = starts[2 * i] + starts[2 * i + 1] * 4294967296;
      const b = starts[2 * i + 2] + starts[2 * i + 3] * 4294967296;
      if (!(a <= b && b <= text.length))
        throw new FormatError(file, `the id of document ${i} is out of its section`);
      ids.push(ascii ? whole.slice(a, b) : text.toString('utf8', a, b));
    }
  }
  return { header, headerCrc, offsets, ids, sums };
}

/** Re-reads a segment's tokens (and scales) and checks their checksums; `onBytes(n)` after each chunk. */
function verifySegmentData(
  file: string,
  header: SegmentHeader,
  sums: Uint32Array,
  onBytes?: (n: number) => void,
) {
  const fd = fs.openSync(file, 'r');
  try {
    const t = header.tokensSection;
    const chunk = new Uint8Array(Math.min(header.chunkBytes, t.bytes));
    for (let c = 0; c * header.chunkBytes < t.bytes; c++) {
      const n = Math.min(header.chunkBytes, t.bytes - c * header.chunkBytes);
      const buf = chunk.subarray(0, n);
      readExactly(fd, file, buf, t.offset + c * header.chunkBytes, 'the tokens');
      if (checksum(buf) !== sums[c])
        throw new FormatError(
          file,
          `token data is corrupted in bytes [${c * header.chunkBytes}, ${c * header.chunkBytes + n}) of the tokens section`,
        );
      onBytes?.(n);
    }
    if (header.scalesSection.bytes > 0) {
      const scales = readSection(fd, file, header.scalesSection, 'scales');
      if (checksum(scales) !== sums[sums.length - 3])
        throw new FormatError(file, 'the int8 scales are corrupted (checksum mismatch)');
      onBytes?.(scales.length);
    }
  } finally {
    fs.closeSync(fd);
  }
}

function readSection(fd: number, file: string, s: Section, what: string): Uint8Array {
  const bytes = new Uint8Array(s.bytes);
  readExactly(fd, file, bytes, s.offset, `the ${what} section`);
  return bytes;
}

/** A typed view of `count` elements of dtype at a byte offset. */
export function typedView(
  dtype: DType,
  buffer: ArrayBufferLike,
  byteOffset: number,
  count: number,
): TokenData {
  if (dtype === 'float32') return new Float32Array(buffer, byteOffset, count);
  if (dtype === 'int8') return new Int8Array(buffer, byteOffset, count);
  return new Uint16Array(buffer, byteOffset, count);
}

/** Opens the corpus at `dir` (see CorpusFile.open). */
export function openCorpusFile(dir: string): CorpusFile {
  return CorpusFile.open(dir);
}

// ---- recovery ----

export interface RecoverOptions extends LockOptions {
  /** Re-read every token and check its checksum before adopting a segment (default true). */
  verify?: boolean;
  onProgress?: (segment: number, segments: number) => void;
}

export interface RecoverResult {
  info: CorpusInfo;
  /** Segment files left out (kept on disk), with the reason. */
  skipped: { file: string; reason: string }[];
  /** Where a damaged MANIFEST was moved (kept, never deleted). */
  damagedManifest?: string;
}

/**
 * Rebuilds a lost or damaged MANIFEST from the intact segment files of a corpus directory. Segments
 * are adopted in their numeric order when their header, offsets, ids (and with `verify`, tokens)
 * check out and they agree with the first intact one on dtype, dim and ids; the others are reported
 * and left where they are. Nothing is deleted: a damaged MANIFEST is renamed to MANIFEST.damaged-<time>.
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
    let damagedManifest: string | undefined;
    if (fs.existsSync(manifestFile)) {
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
      damagedManifest = `${manifestFile}.damaged-${new Date().toISOString().replace(/[:.]/g, '-')}`;
    }
    const numbered = fs
      .readdirSync(dir)
      .map((name) => ({ name, m: SEGMENT_NAME.exec(name) }))
      .filter((x) => x.m !== null && x.name === segmentName(Number(x.m[1])))
      .map((x) => ({ name: x.name, n: Number(x.m![1]) }))
      .sort((a, b) => a.n - b.n);
    const skipped: { file: string; reason: string }[] = [];
    const segments: ManifestSegment[] = [];
    let first: SegmentHeader | undefined;
    let maxLength = 0;
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
        for (let i = 0; i < h.documents; i++)
          maxLength = Math.max(maxLength, meta.offsets[i + 1] - meta.offsets[i]);
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
    const documents = segments.reduce((a, s) => a + s.documents, 0);
    if (documents > MAX_DOCUMENTS)
      throw new FormatError(dir, `the segments hold ${documents} documents (at most ${MAX_DOCUMENTS})`);
    // The newest tombstone file applies when every segment was adopted (its indices count documents
    // across all of them); otherwise it is reported and left, and the deleted documents come back.
    const tombstones = fs
      .readdirSync(dir)
      .map((name) => ({ name, m: DELETIONS_NAME.exec(name) }))
      .filter((x) => x.m !== null && x.name === deletionsName(Number(x.m[1])))
      .map((x) => ({ name: x.name, n: Number(x.m![1]) }))
      .sort((a, b) => b.n - a.n);
    let deletions: ManifestDeletions | undefined;
    if (tombstones.length > 0) {
      const name = tombstones[0].name;
      const file = path.join(dir, name);
      try {
        if (skipped.length > 0)
          throw new FormatError(
            file,
            'not applied: some segments were left out, so its document indices do not hold',
          );
        const bytes = fs.readFileSync(file);
        if (bytes.length < 28) throw new FormatError(file, 'truncated tombstone file');
        const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
        const d: ManifestDeletions = {
          file: name,
          count: Number(v.getBigUint64(16, true)),
          bytes: bytes.length,
          crc: v.getUint32(bytes.length - 4, true),
        };
        if (d.bytes !== deletionsBytes(d.count))
          throw new FormatError(file, 'the tombstone file size does not match its count');
        readDeletions(dir, d, documents);
        if (d.count > 0) deletions = d;
      } catch (e) {
        if (!(e instanceof FormatError)) throw e;
        skipped.push({ file, reason: e.message });
      }
    }
    const m: Manifest = {
      format: FORMAT,
      version: VERSION,
      dtype: first.dtype,
      dim: first.dim,
      ids: first.hasIds,
      // past every segment and tombstone file present, adopted or not: the next writer never reuses
      // or removes one
      generation: Math.max(numbered[numbered.length - 1].n, tombstones[0]?.n ?? 0),
      documents,
      tokens: segments.reduce((a, s) => a + s.tokens, 0),
      maxLength,
      segments,
      deletions,
    };
    lock.check();
    if (damagedManifest) fs.renameSync(manifestFile, damagedManifest);
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
