// Index files of a corpus: ix-GGGGGG-NNNN.msxi (GGGGGG: the generation that published it; NNNN: 0 for
// the codec, i + 1 for the i-th indexed segment), one per indexed token segment plus one codec file (the index of the build's sample: centroids and buckets that new
// segments are encoded against). A file stores one PlaidIndex's parts() generically:
//   [0, 64)        "MSXIDX01", uint32 version 1, uint32 JSON bytes, uint32 CRC-32 of the JSON,
//                  uint32 data offset (a multiple of 4096), uint32 CRC-32 of bytes [0, 20)
//   [64, ...)      JSON { header: the parts' header, arrays: [{ name, type, offset, length, crc }],
//                  corpus?: its place in the corpus (IndexFileCorpus: what `corpus recover` adopts by) }
//   data offset..  each array at a 4096-aligned offset (relative to the file), little-endian
// The MANIFEST names each file with its size and header CRC (bytes [16, 20)); a reader holds it open
// like the token segments, maps its data through /proc/self/fd (no copy into the JS heap) and checks
// every array's CRC once per process.
import * as fs from 'node:fs';
import { crc32 } from 'node:zlib';
import { FormatError } from '../../errors.js';
import { loadNative } from '../../native.js';
import { PART_TYPES, type PartArray, type PartType, type PlaidParts, partTypeOf } from '../../plaid/parts.js';
import { readExactly, step, writeAll, writeDurably } from './files.js';
import { alignUp, checksum } from './format.js';
import type { PinnedFile } from './handles.js';

export const INDEX_MAGIC = 'MSXIDX01';
export const INDEX_NAME = /^ix-(\d{6,})-(\d{4,})\.msxi$/;
const FIXED = 64;
/** The JSON of an index file, at most this large (it lists a few arrays). */
const MAX_JSON = 1 << 20;

export function indexName(generation: number, n: number): string {
  return `ix-${String(generation).padStart(6, '0')}-${String(n).padStart(4, '0')}.msxi`;
}

interface ArrayEntry {
  name: string;
  type: PartType;
  offset: number;
  length: number;
  crc: number;
}

/**
 * What an index file says of its place in the corpus, so that `corpus recover` can adopt it without
 * the MANIFEST: the codec file its build's settings, a segment's index file the token segment it
 * encodes (name and header CRC), that segment's drift and the codec it was encoded against. Files
 * written before this field carry none and are not adopted.
 */
export type IndexFileCorpus =
  | { role: 'codec'; bits: 2 | 4; centroids: number; sample: number; threshold: number }
  | { role: 'segment'; codec: string; segment: string; segmentCrc: number; drift: number };

export interface IndexFileMeta {
  header: PlaidParts['header'];
  arrays: ArrayEntry[];
  headerCrc: number;
  dataOffset: number;
  corpus?: IndexFileCorpus;
}

/**
 * Writes parts to `name` in dir durably (temporary, fsync, rename, directory fsync; each step reports
 * to the fault hook). Returns the size and header CRC the MANIFEST records.
 */
export function writeIndexFile(
  dir: string,
  name: string,
  token: string,
  parts: PlaidParts,
  corpus: IndexFileCorpus,
): { bytes: number; headerCrc: number } {
  const entries: ArrayEntry[] = [];
  const json0 = JSON.stringify({ header: parts.header, arrays: [], corpus });
  // room for the array list: each entry's JSON is bounded; the data offset is fixed before writing
  let at = alignUp(FIXED + json0.length + 160 * Object.keys(parts.arrays).length + 4096);
  const dataOffset = at;
  for (const [name, a] of Object.entries(parts.arrays)) {
    const bytes = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
    entries.push({ name, type: partTypeOf(a), offset: at, length: a.length, crc: checksum(bytes) });
    at = alignUp(at + a.byteLength);
  }
  const json = Buffer.from(JSON.stringify({ header: parts.header, arrays: entries, corpus }), 'utf8');
  if (FIXED + json.length > dataOffset) throw new Error('index file header overflow');
  const fixed = new Uint8Array(FIXED);
  const v = new DataView(fixed.buffer);
  fixed.set(Buffer.from(INDEX_MAGIC, 'latin1'), 0);
  v.setUint32(8, 1, true);
  v.setUint32(12, json.length, true);
  v.setUint32(16, crc32(json), true);
  v.setUint32(20, dataOffset, true);
  v.setUint32(24, crc32(fixed.subarray(0, 24)), true);
  writeDurably(dir, name, token, 'index', (fd) => {
    writeAll(fd, fixed, 0);
    writeAll(fd, json, FIXED);
    const list = Object.values(parts.arrays);
    entries.forEach((e, i) => {
      const a = list[i];
      step('write-index');
      writeAll(fd, new Uint8Array(a.buffer, a.byteOffset, a.byteLength), e.offset);
    });
    // the file ends at the last array's aligned end (a zero-length tail is still addressable)
    fs.ftruncateSync(fd, at);
  });
  return { bytes: at, headerCrc: v.getUint32(16, true) };
}

/** Reads and checks an index file's header (not its arrays' data: see mapIndexParts). */
export function readIndexMeta(file: string, fd: number, size: number): IndexFileMeta {
  if (size < FIXED) throw new FormatError(file, `truncated index file (${size} bytes)`);
  const fixed = new Uint8Array(FIXED);
  readExactly(fd, file, fixed, 0, 'the index header');
  const v = new DataView(fixed.buffer);
  if (Buffer.from(fixed.subarray(0, 8)).toString('latin1') !== INDEX_MAGIC)
    throw new FormatError(file, 'not a maxsim index file (bad magic)');
  if (v.getUint32(24, true) !== crc32(fixed.subarray(0, 24)))
    throw new FormatError(file, 'the index file header is corrupted (checksum mismatch)');
  if (v.getUint32(8, true) !== 1)
    throw new FormatError(
      file,
      `index file version ${v.getUint32(8, true)} is not supported (this build reads 1)`,
    );
  const jsonBytes = v.getUint32(12, true);
  const dataOffset = v.getUint32(20, true);
  if (jsonBytes > MAX_JSON || FIXED + jsonBytes > dataOffset || dataOffset % 4096 !== 0 || dataOffset > size)
    throw new FormatError(file, 'inconsistent index file header (JSON size or data offset)');
  const json = new Uint8Array(jsonBytes);
  readExactly(fd, file, json, FIXED, 'the index JSON');
  if (crc32(json) !== v.getUint32(16, true))
    throw new FormatError(file, 'the index file description is corrupted (checksum mismatch)');
  let o: { header?: unknown; arrays?: unknown; corpus?: unknown };
  try {
    o = JSON.parse(Buffer.from(json).toString('utf8'));
  } catch {
    throw new FormatError(file, 'the index file description is not valid JSON');
  }
  if (!o || typeof o !== 'object' || !Array.isArray(o.arrays) || !o.header || typeof o.header !== 'object')
    throw new FormatError(file, 'the index file description has no header or arrays');
  const arrays: ArrayEntry[] = [];
  let end = dataOffset;
  for (const [i, raw] of (o.arrays as unknown[]).entries()) {
    const e = raw as Record<string, unknown>;
    const ok =
      e !== null &&
      typeof e === 'object' &&
      typeof e.name === 'string' &&
      typeof e.type === 'string' &&
      Object.hasOwn(PART_TYPES, e.type) &&
      [e.offset, e.length, e.crc].every((x) => typeof x === 'number' && Number.isSafeInteger(x) && x >= 0);
    if (!ok) throw new FormatError(file, `index array entry ${i} is malformed`);
    const entry = e as unknown as ArrayEntry;
    const bytes = entry.length * PART_TYPES[entry.type].BYTES_PER_ELEMENT;
    if (entry.offset < end || entry.offset % 4096 !== 0 || entry.offset + bytes > size)
      throw new FormatError(
        file,
        `index array ${entry.name} lies outside its file or overlaps another (offset ${entry.offset}, ${bytes} bytes, file ${size})`,
      );
    end = entry.offset + bytes;
    arrays.push(entry);
  }
  const corpus = o.corpus === undefined ? undefined : corpusPlace(file, o.corpus);
  return {
    header: o.header as PlaidParts['header'],
    arrays,
    headerCrc: v.getUint32(16, true),
    dataOffset,
    ...(corpus ? { corpus } : {}),
  };
}

// The `corpus` field of an index file's description, checked.
function corpusPlace(file: string, raw: unknown): IndexFileCorpus {
  const o = (raw ?? {}) as Record<string, unknown>;
  const count = (x: unknown, max = Number.MAX_SAFE_INTEGER) =>
    typeof x === 'number' && Number.isSafeInteger(x) && x >= 0 && x <= max;
  if (
    o.role === 'codec' &&
    (o.bits === 2 || o.bits === 4) &&
    count(o.centroids) &&
    count(o.sample) &&
    typeof o.threshold === 'number' &&
    o.threshold >= 0 &&
    Number.isFinite(o.threshold)
  )
    return o as unknown as IndexFileCorpus;
  if (
    o.role === 'segment' &&
    typeof o.codec === 'string' &&
    INDEX_NAME.test(o.codec) &&
    typeof o.segment === 'string' &&
    count(o.segmentCrc, 0xffffffff) &&
    typeof o.drift === 'number' &&
    o.drift >= 0 &&
    o.drift <= 1
  )
    return o as unknown as IndexFileCorpus;
  throw new FormatError(file, 'the index file description has a malformed corpus field');
}

/** Checks every array of an index file against its CRC (reads the file once, 64 MiB at a time). */
export function verifyIndexArrays(file: string, fd: number, meta: IndexFileMeta): void {
  const chunk = new Uint8Array(64 << 20);
  for (const e of meta.arrays) {
    const bytes = e.length * PART_TYPES[e.type].BYTES_PER_ELEMENT;
    let crc = 0;
    for (let at = 0; at < bytes; at += chunk.length) {
      const part = chunk.subarray(0, Math.min(chunk.length, bytes - at));
      readExactly(fd, file, part, e.offset + at, `index array ${e.name}`);
      crc = crc32(part, crc);
    }
    if (crc !== e.crc) throw new FormatError(file, `index array ${e.name} is corrupted (checksum mismatch)`);
  }
}

// Files whose arrays were CRC-checked in this process (immutable once published), by identity.
const checkedFiles = new Set<string>();

/**
 * The parts of an opened index file as typed views of one mapping of its data (no copy); each array's
 * CRC is checked the first time this process maps the file.
 */
export function mapIndexParts(pinned: PinnedFile, meta: IndexFileMeta, size: number): PlaidParts {
  const map = (loadNative() as unknown as { file: { mapFile(p: string, o: number, l: number): ArrayBuffer } })
    .file.mapFile;
  const st = fs.fstatSync(pinned.fd);
  const identity = `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}:${meta.headerCrc}`;
  const buffer = map(pinned.path, meta.dataOffset, size - meta.dataOffset);
  const arrays: Record<string, PartArray> = {};
  for (const e of meta.arrays) {
    const Ctor = PART_TYPES[e.type];
    const view = new Ctor(buffer, e.offset - meta.dataOffset, e.length) as PartArray;
    if (!checkedFiles.has(identity)) {
      const bytes = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
      if (checksum(bytes) !== e.crc)
        throw new FormatError(pinned.file, `index array ${e.name} is corrupted (checksum mismatch)`);
    }
    arrays[e.name] = view;
  }
  checkedFiles.add(identity);
  return { header: meta.header, arrays };
}

/** Test hook: forget which index files were checked. */
export function forgetCheckedIndexFiles(): void {
  checkedFiles.clear();
}
