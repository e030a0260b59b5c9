// Recovery of a corpus's deletions: the newest tombstone file's global document indices placed in
// the recovered corpus, past the segments that recovery leaves out, so a deleted document never
// comes back. A segment left out is moved aside as `<segment>.left-out-<generation>` (kept, never
// deleted): the generation tells which tombstone files counted its documents (those numbered below
// it), so a later recovery places them again exactly, even after a crash between its steps.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { crc32 } from 'node:zlib';
import { FormatError } from '../../errors.js';
import { MAX_DOCUMENTS } from '../budget.js';
import { HEADER_BYTES, SEGMENT_MAGIC } from './format.js';
import { decodeDeletions } from './tombstones.js';

/** A segment that a recovery left out, moved aside: `seg-NNNNNN.msxs.left-out-GGGGGG`. */
export const LEFT_OUT_NAME = /^seg-(\d{6,})\.msxs\.left-out-(\d{6,})$/;

export function leftOutName(segment: string, generation: number): string {
  return `${segment}.left-out-${String(generation).padStart(6, '0')}`;
}

/** A segment header's document count when its magic and checksum hold (the rest may be damaged). */
export function headerDocuments(raw: Uint8Array): number | undefined {
  if (raw.length < HEADER_BYTES) return undefined;
  const v = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  if (Buffer.from(raw.subarray(0, 8)).toString('latin1') !== SEGMENT_MAGIC) return undefined;
  if (v.getUint32(124, true) !== crc32(raw.subarray(0, 124))) return undefined;
  const n = v.getBigUint64(24, true);
  return n <= BigInt(MAX_DOCUMENTS) ? Number(n) : undefined;
}

/** A segment file's place in the document order that a tombstone file counts. */
export interface SegmentPlace {
  /** Its number (seg-NNNNNN). */
  n: number;
  /** Its file name as it lies now. */
  file: string;
  /** Its document count (undefined: its header is unreadable). */
  documents: number | undefined;
  /** Adopted into the recovered MANIFEST. */
  kept: boolean;
}

/** The segments that earlier recoveries moved aside, with the generation that left each out. */
export function leftOutSegments(dir: string): (SegmentPlace & { since: number })[] {
  const out: (SegmentPlace & { since: number })[] = [];
  for (const file of fs.readdirSync(dir)) {
    const m = LEFT_OUT_NAME.exec(file);
    if (!m) continue;
    out.push({
      n: Number(m[1]),
      file,
      documents: readCount(path.join(dir, file)),
      kept: false,
      since: Number(m[2]),
    });
  }
  return out;
}

function readCount(file: string): number | undefined {
  try {
    const fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
    try {
      const raw = new Uint8Array(HEADER_BYTES);
      const n = fs.readSync(fd, raw, 0, HEADER_BYTES, 0);
      return n === HEADER_BYTES ? headerDocuments(raw) : undefined;
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    return undefined;
  }
}

/**
 * The indices of tombstone file `name` in the recovered corpus, whose segments are the `kept` ones
 * of `layout` (every segment its indices count, in order). An index inside a segment left out is
 * gone with its document. Refused with a FormatError naming the files (never a silent resurrection)
 * when the file is damaged, or an index cannot be placed: a segment before it has an unreadable
 * header, or it lies past every segment present (a segment file is missing).
 */
export function placeTombstones(
  dir: string,
  name: string,
  layout: readonly SegmentPlace[],
): { indices: number[]; placed: number[] } {
  const file = path.join(dir, name);
  const way = `restore the damaged or missing files, or move ${name} out of ${dir} to recover without its deletions (the deleted documents then come back)`;
  let indices: number[];
  try {
    indices = decodeDeletions(file, fs.readFileSync(file));
  } catch (e) {
    const why = e instanceof FormatError ? e.message : ((e as NodeJS.ErrnoException).code ?? String(e));
    throw new FormatError(
      file,
      `the newest tombstone file cannot be read (${why}): recovery refused, as its deleted documents would come back; ${way}`,
    );
  }
  const order = [...layout].sort((a, b) => a.n - b.n);
  const placed: number[] = [];
  let at = 0;
  let oldBase = 0;
  let newBase = 0;
  for (const x of indices) {
    for (;;) {
      const seg = order[at];
      if (seg === undefined)
        throw new FormatError(
          file,
          `deleted document ${x} lies past the ${oldBase} documents of the segment files present (a segment file is missing): recovery refused, as deleted documents would come back; ${way}`,
        );
      if (seg.documents === undefined)
        throw new FormatError(
          file,
          `deleted document ${x} cannot be placed: ${seg.file} has an unreadable header, so where its documents end is unknown: recovery refused, as deleted documents would come back; ${way}`,
        );
      if (x < oldBase + seg.documents) break;
      oldBase += seg.documents;
      if (seg.kept) newBase += seg.documents;
      at++;
    }
    if (order[at].kept) placed.push(x - oldBase + newBase);
  }
  return { indices, placed };
}
