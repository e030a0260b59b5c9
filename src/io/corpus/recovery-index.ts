// Recovery of a corpus's index: the index files that still describe the adopted token segments
// (each file's `corpus` field, index-segments.ts) rebuilt into the MANIFEST's `index`, so that a
// corpus that kept only its index (`corpus index --drop-tokens`) keeps its documents' vectors.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { FormatError } from '../../errors.js';
import type { SegmentHeader } from './format.js';
import {
  INDEX_NAME,
  type IndexFileMeta,
  indexName,
  readIndexMeta,
  verifyIndexArrays,
} from './index-segments.js';
import type { ManifestSegment } from './manifest.js';
import type { ManifestIndex, ManifestIndexSegment } from './manifest-index.js';

interface IndexFile {
  name: string;
  generation: number;
  bytes: number;
  meta: IndexFileMeta;
}

export interface AdoptedIndex {
  /** The MANIFEST's index, or undefined when no intact codec describes the adopted segments. */
  index?: ManifestIndex;
  /** The adopted segments that remain: a segment that keeps no tokens and lost its index is left out. */
  segments: ManifestSegment[];
  /** The highest generation of an index file present (adopted or not): the next writer goes past it. */
  generation: number;
}

/**
 * The newest intact codec file and, for each adopted token segment, the index file encoded against
 * it for exactly that segment (its name and header CRC; with `verify`, every array's CRC). Files
 * that do not check out are added to `skipped` with the reason; so is a segment that keeps no
 * tokens and has no index left (its documents have no vectors), which is then not adopted.
 */
export function adoptIndex(
  dir: string,
  segments: readonly ManifestSegment[],
  headers: readonly SegmentHeader[],
  verify: boolean,
  skipped: { file: string; reason: string }[],
): AdoptedIndex {
  const files = readIndexFiles(dir, skipped);
  const generation = files.reduce((g, f) => Math.max(g, f.generation), 0);
  const codec = files
    .filter((f) => f.meta.corpus?.role === 'codec')
    .sort((a, b) => b.generation - a.generation)
    .find((f) => checked(dir, f, verify, skipped));
  const entries: ManifestIndexSegment[] = [];
  const kept: ManifestSegment[] = [];
  segments.forEach((s, i) => {
    const file = codec
      ? files
          .filter((f) => {
            const c = f.meta.corpus;
            return (
              c?.role === 'segment' &&
              c.codec === codec.name &&
              c.segment === s.file &&
              c.segmentCrc === s.headerCrc &&
              f.meta.header.docs === s.documents
            );
          })
          .sort((a, b) => b.generation - a.generation)
          .find((f) => checked(dir, f, verify, skipped))
      : undefined;
    if (file && file.meta.corpus?.role === 'segment') {
      entries.push({
        file: file.name,
        segment: s.file,
        bytes: file.bytes,
        crc: file.meta.headerCrc,
        drift: file.meta.corpus.drift,
      });
    } else if (headers[i].tokensDropped) {
      skipped.push({
        file: path.join(dir, s.file),
        reason: `${s.file} keeps no tokens (corpus index --drop-tokens) and no intact index file encodes it: its documents have no vectors left`,
      });
      return;
    }
    kept.push(s);
  });
  const c = codec?.meta.corpus;
  if (!codec || c?.role !== 'codec') return { segments: kept, generation };
  const dropped = headers.some((h, i) => h.tokensDropped && kept.includes(segments[i]));
  return {
    segments: kept,
    generation,
    index: {
      file: codec.name,
      bytes: codec.bytes,
      crc: codec.meta.headerCrc,
      bits: c.bits,
      centroids: c.centroids,
      sample: c.sample,
      threshold: c.threshold,
      ...(dropped ? { dropped: true as const } : {}),
      segments: entries,
    },
  };
}

// Every ix-GGGGGG-NNNN.msxi whose header and description check out (the others go to skipped).
function readIndexFiles(dir: string, skipped: { file: string; reason: string }[]): IndexFile[] {
  const out: IndexFile[] = [];
  for (const name of fs.readdirSync(dir).sort()) {
    const m = INDEX_NAME.exec(name);
    if (!m || name !== indexName(Number(m[1]), Number(m[2]))) continue;
    const file = path.join(dir, name);
    try {
      const fd = fs.openSync(file, 'r');
      try {
        const bytes = fs.fstatSync(fd).size;
        const meta = readIndexMeta(file, fd, bytes);
        if (!meta.corpus)
          throw new FormatError(
            file,
            'written before index files named their place in the corpus: not adopted',
          );
        out.push({ name, generation: Number(m[1]), bytes, meta });
      } finally {
        fs.closeSync(fd);
      }
    } catch (e) {
      if (!(e instanceof FormatError)) throw e;
      skipped.push({ file, reason: e.message });
    }
  }
  return out;
}

// Whether f's arrays check out (always, without verify); a damaged file goes to skipped once.
function checked(
  dir: string,
  f: IndexFile,
  verify: boolean,
  skipped: { file: string; reason: string }[],
): boolean {
  if (!verify) return true;
  const file = path.join(dir, f.name);
  if (skipped.some((s) => s.file === file)) return false;
  try {
    const fd = fs.openSync(file, 'r');
    try {
      verifyIndexArrays(file, fd, f.meta);
    } finally {
      fs.closeSync(fd);
    }
    return true;
  } catch (e) {
    if (!(e instanceof FormatError)) throw e;
    skipped.push({ file, reason: e.message });
    return false;
  }
}
