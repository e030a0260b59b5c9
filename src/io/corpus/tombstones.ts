// Tombstone files: which documents of a corpus are deleted.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { crc32 } from 'node:zlib';
import { FormatError } from '../../errors.js';
import { DELETIONS_MAGIC } from './format.js';

/** The tombstone file of a corpus: the global indices of its deleted documents. */
export interface ManifestDeletions {
  file: string;
  count: number;
  bytes: number;
  crc: number;
}

// ---- tombstones ----
// A tombstone file del-NNNNNN.msxd (NNNNNN: the generation that published it) lists every deleted
// document of the corpus, not just the latest ones, so readers need only the one the MANIFEST names:
//   "MSXDEL01", uint32 version 1, uint32 0, uint64 count, uint64 [count] global document indices
//   (strictly increasing), uint32 CRC-32 of all the bytes before it.

export function deletionsName(generation: number): string {
  return `del-${String(generation).padStart(6, '0')}.msxd`;
}

export function deletionsBytes(count: number): number {
  return 24 + 8 * count + 4;
}

export function encodeDeletions(indices: readonly number[]): Uint8Array {
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
export function readDeletions(
  dir: string,
  d: ManifestDeletions,
  documents: number,
  /** An open descriptor of the file (read from its start), else it is opened by name. */
  fd?: number,
): Uint8Array {
  const file = path.join(dir, d.file);
  let bytes: Uint8Array;
  try {
    bytes = fd === undefined ? fs.readFileSync(file) : readWhole(fd, d.bytes);
  } catch (e) {
    throw new FormatError(
      file,
      `cannot read the tombstone file the MANIFEST names (${(e as NodeJS.ErrnoException).code ?? e})`,
    );
  }
  if (bytes.length !== d.bytes)
    throw new FormatError(
      file,
      `the tombstone file has ${bytes.length} bytes but the MANIFEST says ${d.bytes}`,
    );
  const indices = decodeDeletions(file, bytes, d.crc);
  if (indices.length !== d.count)
    throw new FormatError(file, 'the tombstone count disagrees with the MANIFEST');
  const mask = new Uint8Array(documents);
  indices.forEach((x, i) => {
    if (x >= documents)
      throw new FormatError(
        file,
        `tombstone ${i} (${x}) is not an increasing document index below ${documents}`,
      );
    mask[x] = 1;
  });
  return mask;
}

/**
 * The document indices of a tombstone file's bytes, checked: magic, checksum (and `crc`, the one
 * the MANIFEST records, when given), version, size against the count, strictly increasing.
 */
export function decodeDeletions(file: string, bytes: Uint8Array, crc?: number): number[] {
  if (bytes.length < deletionsBytes(0)) throw new FormatError(file, 'truncated tombstone file');
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const sum = crc32(bytes.subarray(0, bytes.length - 4));
  if (Buffer.from(bytes.subarray(0, 8)).toString('latin1') !== DELETIONS_MAGIC)
    throw new FormatError(file, 'not a maxsim tombstone file (bad magic)');
  if (sum !== v.getUint32(bytes.length - 4, true) || (crc !== undefined && sum !== crc))
    throw new FormatError(file, 'the tombstone file is corrupted (checksum mismatch)');
  if (v.getUint32(8, true) !== 1)
    throw new FormatError(file, `tombstone format version ${v.getUint32(8, true)} is not supported`);
  const count = v.getBigUint64(16, true);
  if (BigInt(bytes.length) !== BigInt(deletionsBytes(0)) + 8n * count)
    throw new FormatError(
      file,
      `the tombstone file size (${bytes.length}) does not match its count (${count})`,
    );
  const out: number[] = [];
  let last = -1;
  for (let i = 0; i < Number(count); i++) {
    const x = Number(v.getBigUint64(24 + 8 * i, true));
    if (!(x > last && Number.isSafeInteger(x)))
      throw new FormatError(file, `tombstone ${i} (${x}) is not an increasing document index`);
    out.push(x);
    last = x;
  }
  return out;
}

// A file through its descriptor: up to `expect` bytes and one more (so a longer file shows as longer).
function readWhole(fd: number, expect: number): Uint8Array {
  const bytes = new Uint8Array(expect + 1);
  let n = 0;
  for (let r = 1; r > 0 && n < bytes.length; n += r) r = fs.readSync(fd, bytes, n, bytes.length - n, n);
  return bytes.subarray(0, n);
}
