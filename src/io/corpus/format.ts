// The segment file format: names and constants, the 4096-byte header, checksums, and reading a
// segment's metadata and checking its data. See index.ts for the layout.

import * as fs from 'node:fs';
import { crc32 } from 'node:zlib';
import { FormatError } from '../../errors.js';
import { loadNative, nativeUnavailableReason } from '../../native.js';
import { type DType, dtypeSize, type TokenData } from '../../tensor.js';
import { readExactly } from './files.js';

export const MANIFEST = 'MANIFEST';
export const FORMAT = 'maxsim-corpus';
export const VERSION = 1;
/** The MANIFEST's version when it names a tombstone file: older builds refuse it instead of misreading. */
export const VERSION_DELETIONS = 2;
/** The MANIFEST's version when it names an index (older builds refuse it instead of ignoring it). */
export const VERSION_INDEX = 3;
/** The MANIFEST's version when its corpus keeps only the index (token-less segments: older builds refuse it). */
export const VERSION_DROPPED = 4;
export const DELETIONS_MAGIC = 'MSXDEL01';
export const DELETIONS_NAME = /^del-(\d{6,})\.msxd$/;
export const SEGMENT_MAGIC = 'MSXSEG01';
export const HEADER_BYTES = 4096;
export const ALIGN = 4096;
/** Token bytes per checksum chunk: verification can run chunk by chunk while streaming. */
export const CHECKSUM_CHUNK = 64 * 1024 * 1024;
export const WRITE_BUFFER = 8 * 1024 * 1024;
export const DTYPE_CODES: Record<DType, number> = { float32: 0, float16: 1, bfloat16: 2, int8: 3 };
export const CODE_DTYPES: DType[] = ['float32', 'float16', 'bfloat16', 'int8'];
export const SEGMENT_NAME = /^seg-(\d{6,})\.msxs$/;
// Temporaries of a writer: `<segment>.<token>.tmp`, `<segment>.<token>.scales.tmp`, `MANIFEST.<token>.tmp`
// (older versions: without the token).
export const LEFTOVER_NAME =
  /^(seg-\d{6,}\.msxs(\.[0-9a-f]{32})?\.(tmp|scales\.tmp)|MANIFEST(\.[0-9a-f]{32})?\.tmp|del-\d{6,}\.msxd\.[0-9a-f]{32}\.tmp|ix-\d{6,}-\d{4,}\.msxi\.[0-9a-f]{32}\.tmp)$/;

// ---- small helpers ----

/** Bytes a scan reads per stored token: the row, plus its float32 scale for int8. */
export function storedTokenBytes(dtype: DType, dim: number): number {
  return dim * dtypeSize(dtype) + (dtype === 'int8' ? 4 : 0);
}

export function alignUp(n: number): number {
  return Math.ceil(n / ALIGN) * ALIGN;
}

export type Crc32Fn = (bytes: Uint8Array, crc: number) => number;
export let nativeCrc: Crc32Fn | null | undefined;

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

export function hex(n: number): string {
  return n.toString(16).padStart(8, '0');
}

// ---- segment header ----

export interface Section {
  offset: number;
  bytes: number;
}

export interface SegmentHeader {
  dtype: DType;
  dim: number;
  documents: number;
  tokens: number;
  hasIds: boolean;
  /**
   * The segment keeps no tokens (flag bit 1; `corpus index --drop-tokens`): its tokens and scales
   * sections are empty, its documents live in the corpus index only. `tokens` still counts them.
   */
  tokensDropped?: boolean;
  tokensSection: Section;
  scalesSection: Section;
  offsetsSection: Section;
  idsSection: Section;
  checksumsSection: Section;
  chunkBytes: number;
}

export const SECTION_KEYS = [
  'tokensSection',
  'scalesSection',
  'offsetsSection',
  'idsSection',
  'checksumsSection',
] as const;

export function encodeHeader(h: SegmentHeader): Uint8Array {
  const bytes = new Uint8Array(HEADER_BYTES);
  const v = new DataView(bytes.buffer);
  bytes.set(Buffer.from(SEGMENT_MAGIC, 'latin1'), 0);
  v.setUint32(8, VERSION, true);
  v.setUint32(12, DTYPE_CODES[h.dtype], true);
  v.setUint32(16, h.dim, true);
  v.setUint32(20, (h.hasIds ? 1 : 0) | (h.tokensDropped ? 2 : 0), true);
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

export function decodeHeader(file: string, bytes: Uint8Array, fileSize: number): SegmentHeader {
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
    tokensDropped: (v.getUint32(20, true) & 2) === 2,
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
  expect((v.getUint32(20, true) & ~3) === 0, 'unknown flags');
  const stored = h.tokensDropped ? 0 : h.tokens;
  expect(h.tokensSection.bytes === stored * rowBytes, 'tokens section size');
  expect(h.scalesSection.bytes === (h.dtype === 'int8' ? stored * 4 : 0), 'scales section size');
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

export function segmentName(generation: number): string {
  return `seg-${String(generation).padStart(6, '0')}.msxs`;
}

export interface SegmentMeta {
  header: SegmentHeader;
  headerCrc: number;
  /** Token offsets of its documents, [documents + 1], checked. */
  offsets: Float64Array;
  ids?: string[];
  sums: Uint32Array;
}

/** Reads and checks a segment's header, checksums, offsets and (withIds) ids: everything but the tokens. */
export function readSegmentMeta(file: string, fd: number, size: number, withIds: boolean): SegmentMeta {
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
export function verifySegmentData(
  file: string,
  header: SegmentHeader,
  sums: Uint32Array,
  onBytes?: (n: number) => void,
  /** An open descriptor of the segment (kept open), else it is opened by name. */
  openFd?: number,
) {
  const fd = openFd ?? fs.openSync(file, 'r');
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
    if (openFd === undefined) fs.closeSync(fd);
  }
}

export function readSection(fd: number, file: string, s: Section, what: string): Uint8Array {
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
