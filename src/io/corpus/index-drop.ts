// A corpus that keeps only its index (`maxsim corpus index --drop-tokens`). Its token segments are
// replaced by token-less segments (the same header, offsets and ids; flag bit 1 set, empty tokens and
// scales sections) whose documents live in the index only. Dropping merges the trailing segments that
// still hold tokens (all of them the first time; later, the appended ones once encoded) into one
// token-less segment and one index file (src/plaid/merge.ts: codes copied, never re-encoded), every
// document kept, so document indices and tombstones stay valid; compacting such a corpus does the
// same over the live documents only. Files are written durably under the writer lock and published
// by one MANIFEST (version 4) like every other write.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { crc32 } from 'node:zlib';
import { InvalidArgumentError, MaxsimError } from '../../errors.js';
import { mergeIndexes } from '../../plaid/merge.js';
import type { PlaidIndex } from '../../plaid/plaid.js';
import { bytesOf, removeFile, step, syncDir, writeAll, writeDurably } from './files.js';
import { alignUp, encodeHeader, HEADER_BYTES, segmentName } from './format.js';
import { indexName, writeIndexFile } from './index-segments.js';
import { CorpusLock, type LockOptions } from './lock.js';
import {
  type CorpusInfo,
  describeManifest,
  indexFilesOf,
  type Manifest,
  type ManifestSegment,
  publishManifest,
  readManifest,
  removeLeftovers,
} from './manifest.js';
import type { ManifestIndexSegment } from './manifest-index.js';
import { CorpusFile } from './reader.js';

/**
 * Writes the token-less segment of documents `docs` (ascending global indices of `file`) as `name`:
 * header, offsets, ids and checksums, durably (temporary, fsync, rename, directory fsync).
 */
export function writeTokenlessSegment(
  dir: string,
  name: string,
  token: string,
  file: CorpusFile,
  docs: readonly number[],
): ManifestSegment {
  const info = file.info;
  const off64 = new BigUint64Array(docs.length + 1);
  let tokens = 0;
  docs.forEach((doc, i) => {
    tokens += file.lengths[doc];
    off64[i + 1] = BigInt(tokens);
  });
  const offsetsBytes = new Uint8Array(off64.buffer);
  let idsBytes = new Uint8Array(0);
  if (info.hasIds) {
    const text = docs.map((doc) => Buffer.from(file.id(doc), 'utf8'));
    const starts = new BigUint64Array(docs.length + 1);
    let o = 0;
    text.forEach((t, i) => {
      o += t.length;
      starts[i + 1] = BigInt(o);
    });
    idsBytes = Buffer.concat([Buffer.from(starts.buffer), ...text]);
  }
  const empty = { offset: HEADER_BYTES, bytes: 0 };
  const offsetsSection = { offset: HEADER_BYTES, bytes: offsetsBytes.length };
  const idsSection = { offset: alignUp(HEADER_BYTES + offsetsBytes.length), bytes: idsBytes.length };
  // no token chunks: the scales' (empty), offsets' and ids' CRCs
  const sums = new Uint32Array([0, crc32(offsetsBytes), crc32(idsBytes)]);
  const checksumsSection = { offset: alignUp(idsSection.offset + idsBytes.length), bytes: sums.byteLength };
  const header = encodeHeader({
    dtype: info.dtype,
    dim: info.dim,
    documents: docs.length,
    tokens,
    hasIds: info.hasIds,
    tokensDropped: true,
    tokensSection: empty,
    scalesSection: empty,
    offsetsSection,
    idsSection,
    checksumsSection,
    chunkBytes: file.segments[0]?.header.chunkBytes ?? 64 * 1024 * 1024,
  });
  writeDurably(
    dir,
    name,
    token,
    'segment',
    (fd) => {
      step('write-offsets');
      writeAll(fd, offsetsBytes, offsetsSection.offset);
      if (idsBytes.length > 0) {
        step('write-ids');
        writeAll(fd, idsBytes, idsSection.offset);
      }
      step('write-checksums');
      writeAll(fd, bytesOf(sums), checksumsSection.offset);
      step('write-header');
      writeAll(fd, header, 0);
    },
    'open-segment',
  );
  return {
    file: name,
    documents: docs.length,
    tokens,
    bytes: checksumsSection.offset + sums.byteLength,
    headerCrc: new DataView(header.buffer).getUint32(124, true),
  };
}

/**
 * The segments of `file` from `from` on (all indexed: `plaids[i]` is segment from + i's index)
 * merged into one token-less segment and one index file of generation `generation`; `live`: only the
 * live documents (a compaction), else every one. Returns the new segment, its index entry and the
 * files written (removed by the caller if the publish does not happen).
 */
export function writeMerged(
  dir: string,
  token: string,
  file: CorpusFile,
  generation: number,
  codec: PlaidIndex,
  /** The codec's file, recorded in the new index file (recovery). */
  codecFile: string,
  from: number,
  plaids: readonly PlaidIndex[],
  drifts: readonly number[],
  indexSlot: number,
  live: boolean,
  written: string[],
): { segment: ManifestSegment; entry: ManifestIndexSegment } {
  const segs = file.segments.slice(from);
  const keep = segs.map((s) => {
    const out: number[] = [];
    for (let i = 0; i < s.header.documents; i++)
      if (!live || !file.isDeleted(s.firstDocument + i)) out.push(i);
    return out;
  });
  const merged = mergeIndexes(codec, plaids, keep);
  // the segment first: its header CRC goes into the index file, which names the segment it encodes
  const docs = segs.flatMap((s, i) => keep[i].map((l) => s.firstDocument + l));
  const segment = writeTokenlessSegment(dir, segmentName(generation), token, file, docs);
  written.push(segment.file);
  let drifted = 0;
  segs.forEach((s, i) => {
    drifted += drifts[i] * s.header.tokens;
  });
  const tokens = segs.reduce((a, s) => a + s.header.tokens, 0);
  const drift = tokens > 0 ? drifted / tokens : 0;
  const name = indexName(generation, indexSlot);
  const w = writeIndexFile(dir, name, token, merged.parts(), {
    role: 'segment',
    codec: codecFile,
    segment: segment.file,
    segmentCrc: segment.headerCrc,
    drift,
  });
  written.push(name);
  return {
    segment,
    entry: { file: name, segment: segment.file, bytes: w.bytes, crc: w.headerCrc, drift },
  };
}

/**
 * Compacts a corpus that keeps only its index: the live documents into one token-less segment and
 * one index file, no tombstones; the old files go once the new MANIFEST is durable.
 */
export function compactTokenless(dir: string, options: LockOptions = {}): CorpusInfo {
  readManifest(dir);
  const lock = CorpusLock.acquire(dir, options);
  let file: CorpusFile | undefined;
  const written: string[] = [];
  let published = false;
  try {
    const m = readManifest(dir);
    removeLeftovers(dir, m);
    file = CorpusFile.open(dir);
    const ix = file.index!;
    const unindexed = file.segments.findIndex((_, si) => ix.segmentSlots[si] < 0);
    if (unindexed >= 0)
      throw new InvalidArgumentError(
        'corpus',
        'every segment indexed before a compaction of a corpus that keeps only its index (`maxsim corpus index DIR` encodes the appended ones)',
        `segment ${m.segments[unindexed].file} unindexed`,
      );
    const generation = m.generation + 1;
    const plaids = file.segments.map((_, si) => ix.segment(si)!);
    const drifts = m.index!.segments.map((s) => s.drift);
    const r = writeMerged(
      dir,
      lock.token,
      file,
      generation,
      ix.codec(),
      m.index!.file,
      0,
      plaids,
      drifts,
      1,
      true,
      written,
    );
    const next: Manifest = {
      ...m,
      generation,
      documents: r.segment.documents,
      tokens: r.segment.tokens,
      maxLength: liveMaxLength(file),
      segments: [r.segment],
      deletions: undefined,
      index: { ...m.index!, segments: [r.entry] },
    };
    publishManifest(dir, lock.token, next, () => {
      lock.check();
      if (readManifest(dir).generation !== m.generation)
        throw new MaxsimError(`${dir}: the corpus changed while it was compacted; nothing was published`);
      published = true;
    });
    const now = new Set([...next.segments.map((s) => s.file), ...indexFilesOf(next)]);
    const old = [
      ...m.segments.map((s) => s.file),
      ...indexFilesOf(m),
      ...(m.deletions ? [m.deletions.file] : []),
    ];
    for (const name of old.filter((n) => !now.has(n))) removeFile(dir, name);
    syncDir(dir);
    return describeManifest(dir, next);
  } finally {
    if (!published) for (const name of written) fs.rmSync(path.join(dir, name), { force: true });
    file?.close();
    lock.release();
  }
}

function liveMaxLength(file: CorpusFile): number {
  let max = 0;
  for (let i = 0; i < file.info.documents; i++) if (!file.isDeleted(i)) max = Math.max(max, file.lengths[i]);
  return max;
}
