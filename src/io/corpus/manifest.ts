// The MANIFEST: the published state of a corpus (read, validated field by field, encoded, published
// by one rename), the segment files it names, and the leftovers of writers that died.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { crc32 } from 'node:zlib';
import { FormatError } from '../../errors.js';
import type { DType } from '../../tensor.js';
import { MAX_DOCUMENTS } from '../budget.js';
import { describePath, statWords } from '../text-file.js';
import { step, syncDir, writeAll } from './files.js';
import {
  CODE_DTYPES,
  DELETIONS_NAME,
  FORMAT,
  HEADER_BYTES,
  hex,
  LEFTOVER_NAME,
  MANIFEST,
  SEGMENT_NAME,
  segmentName,
  storedTokenBytes,
  VERSION,
  VERSION_DELETIONS,
  VERSION_DROPPED,
  VERSION_INDEX,
} from './format.js';
import { INDEX_NAME } from './index-segments.js';
import { LOCK_TEMP_NAME } from './lock.js';
import { type ManifestIndex, validateIndex } from './manifest-index.js';
import { deletionsBytes, deletionsName, type ManifestDeletions } from './tombstones.js';

export interface ManifestSegment {
  file: string;
  documents: number;
  tokens: number;
  bytes: number;
  headerCrc: number;
}

export interface Manifest {
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
  /** The index (version 3); absent: none. */
  index?: ManifestIndex;
}

export function encodeManifest(m: Manifest): string {
  const { deletions, index, ...rest } = m;
  const version = index?.dropped
    ? VERSION_DROPPED
    : index
      ? VERSION_INDEX
      : deletions
        ? VERSION_DELETIONS
        : VERSION;
  const body = JSON.stringify({
    ...rest,
    version,
    ...(deletions ? { deletions } : {}),
    ...(index ? { index } : {}),
  });
  return `${body}\ncrc32 ${hex(crc32(body))}\n`;
}

/** The MANIFEST's file, at most this large (a million segments fit in about 150 MB). */
export const MANIFEST_MAX_BYTES = 256 * 1024 * 1024;

/**
 * What tells one published MANIFEST from the next, cheaply: its inode, size and change time and its
 * last 16 bytes (the CRC line, which differs whenever the content does). A writer publishes by
 * renaming a new file over the MANIFEST, so a new generation always changes the stamp. An unreadable
 * MANIFEST gives a stamp of its error (never equal to a readable one's).
 */
export function manifestStamp(dir: string): string {
  let fd: number;
  try {
    fd = fs.openSync(path.join(dir, MANIFEST), fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
  } catch (e) {
    return `error ${(e as NodeJS.ErrnoException).code ?? e}`;
  }
  try {
    const st = fs.fstatSync(fd, { bigint: true });
    const tail = Buffer.alloc(16);
    const n = st.isFile() && st.size >= 16n ? fs.readSync(fd, tail, 0, 16, Number(st.size - 16n)) : 0;
    return `${st.dev}:${st.ino}:${st.size}:${st.ctimeNs}:${st.mtimeNs}:${tail.toString('hex', 0, n)}`;
  } catch (e) {
    return `error ${(e as NodeJS.ErrnoException).code ?? e}`;
  } finally {
    fs.closeSync(fd);
  }
}

export function readManifest(dir: string): Manifest {
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
export function describeValue(x: unknown): string {
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
export function validateManifest(file: string, raw: unknown): Manifest {
  const bad = (field: string, rule: string, value: unknown): never => {
    throw new FormatError(file, `MANIFEST field ${field} must be ${rule} but is ${describeValue(value)}`);
  };
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) bad('(top level)', 'an object', raw);
  const o = raw as Record<string, unknown>;
  if (o.format !== FORMAT)
    throw new FormatError(file, `not a maxsim corpus manifest (format ${describeValue(o.format)})`);
  if (![VERSION, VERSION_DELETIONS, VERSION_INDEX, VERSION_DROPPED].includes(o.version as number))
    throw new FormatError(
      file,
      `corpus format version ${describeValue(o.version)} is not supported (this build reads ${VERSION} to ${VERSION_DROPPED})`,
    );
  const indexed = o.version === VERSION_INDEX || o.version === VERSION_DROPPED;
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
  if (o.version === VERSION_DELETIONS || (indexed && o.deletions !== undefined)) {
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
  let index: ManifestIndex | undefined;
  if (indexed) {
    index = validateIndex(
      file,
      o.index,
      generation,
      segments.map((s) => s.file),
      bad,
    );
    if ((o.version === VERSION_DROPPED) !== (index.dropped === true))
      bad('index.dropped', `true exactly in a version ${VERSION_DROPPED} MANIFEST`, index.dropped);
  } else if (o.index !== undefined) bad('index', `absent in a version ${o.version} MANIFEST`, o.index);
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
    index,
  };
}

/** Opens a segment named by the MANIFEST, refusing one whose real path leaves the corpus directory. */
export function openSegment(dir: string, name: string): { file: string; fd: number } {
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

// The one publish step of every writer: writes the next MANIFEST to this writer's temporary, syncs
// it, runs `check` (the lock is still ours and nobody published meanwhile), renames it over the
// MANIFEST and syncs the directory.
export function publishManifest(dir: string, token: string, next: Manifest, check: () => void) {
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

// Under the lock: temporaries of dead writers, and segments that a writer renamed but died before
// publishing (numbered past the MANIFEST's generation). Nothing else is touched.
export function removeLeftovers(dir: string, m: Manifest) {
  for (const name of fs.readdirSync(dir)) {
    const seg = SEGMENT_NAME.exec(name);
    const stale =
      (DELETIONS_NAME.test(name) && name !== m.deletions?.file) ||
      (INDEX_NAME.test(name) && !indexFilesOf(m).includes(name));
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

/** The index files a MANIFEST names: the codec file, then one per indexed segment. */
export function indexFilesOf(m: Manifest): string[] {
  return m.index ? [m.index.file, ...m.index.segments.map((s) => s.file)] : [];
}

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
  /** The index, when the corpus has one (`maxsim corpus index`). */
  index?: CorpusIndexInfo;
}

/** Share of drifted tokens past which `corpus index --rebuild` is advised (the build's own is ~0.01). */
export const REBUILD_DRIFT = 0.05;

export interface CorpusIndexInfo {
  bits: 2 | 4;
  centroids: number;
  sample: number;
  /** Bytes of the index files (codec included). */
  bytes: number;
  /** Bytes of the segments' index files per indexed token. */
  bytesPerToken: number;
  indexedSegments: number;
  /** Token segments appended since and not yet encoded (search scans them exactly). */
  unindexedSegments: number;
  indexedTokens: number;
  /** Token-weighted share of indexed tokens farther from every centroid than the build's threshold. */
  drift: number;
  /**
   * Whether drift exceeds REBUILD_DRIFT and the corpus keeps its tokens: `maxsim corpus index
   * --rebuild` fits new centroids (a dropped corpus is rebuilt from its source embeddings instead).
   */
  rebuildAdvised: boolean;
  /** 'dropped': the corpus keeps only its index (`corpus index --drop-tokens`); scores are residual. */
  tokens: 'kept' | 'dropped';
}

function describeIndex(m: Manifest): CorpusIndexInfo | undefined {
  const ix = m.index;
  if (!ix) return undefined;
  const tokensOf = new Map(m.segments.map((s) => [s.file, s.tokens]));
  let tokens = 0;
  let bytes = 0;
  let drifted = 0;
  for (const s of ix.segments) {
    const t = tokensOf.get(s.segment) ?? 0;
    tokens += t;
    bytes += s.bytes;
    drifted += s.drift * t;
  }
  const drift = tokens > 0 ? drifted / tokens : 0;
  return {
    bits: ix.bits,
    centroids: ix.centroids,
    sample: ix.sample,
    bytes: bytes + ix.bytes,
    bytesPerToken: tokens > 0 ? bytes / tokens : 0,
    indexedSegments: ix.segments.length,
    unindexedSegments: m.segments.length - ix.segments.length,
    indexedTokens: tokens,
    drift,
    // a corpus that keeps only its index has no tokens to fit new centroids on: never advised
    rebuildAdvised: drift > REBUILD_DRIFT && !ix.dropped,
    tokens: ix.dropped ? 'dropped' : 'kept',
  };
}

export function describeManifest(dir: string, m: Manifest): CorpusInfo {
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
    ...(m.index ? { index: describeIndex(m) } : {}),
  };
}
