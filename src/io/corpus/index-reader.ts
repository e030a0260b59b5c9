// The index of a corpus snapshot: the index files its MANIFEST names, held open like its segments
// (PinnedFile), each mapped and made a PlaidIndex on first use (arrays CRC-checked once per process).
// A newer snapshot reuses the files both name. Token segments the index does not list (appended since
// the last `corpus index`) are unindexed: a search scans them exactly.
import * as fs from 'node:fs';
import { FormatError } from '../../errors.js';
import { PlaidIndex } from '../../plaid/plaid.js';
import { openNamedFile, type PinnedFile } from './handles.js';
import { type IndexFileMeta, mapIndexParts, readIndexMeta, verifyIndexArrays } from './index-segments.js';
import type { Manifest } from './manifest.js';
import type { ManifestIndex } from './manifest-index.js';

interface IndexHandle {
  key: string;
  pinned: PinnedFile;
  meta: IndexFileMeta;
  size: number;
  plaid?: PlaidIndex;
}

function openIndexHandle(dir: string, name: string, bytes: number, crc: number): IndexHandle {
  return openNamedFile(dir, name, 'open the index file', (pinned, fd) => {
    const file = pinned.file;
    const st = fs.fstatSync(fd);
    if (!st.isFile())
      throw new FormatError(file, 'an index file named by the MANIFEST is not a regular file');
    if (st.size !== bytes)
      throw new FormatError(
        file,
        `the index file has ${st.size} bytes but the MANIFEST says ${bytes} (truncated or replaced)`,
      );
    const meta = readIndexMeta(file, fd, st.size);
    if (meta.headerCrc !== crc)
      throw new FormatError(file, 'the index file does not match the MANIFEST (replaced file?)');
    return { key: `${name}:${bytes}:${crc}`, pinned, meta, size: st.size };
  });
}

export class CorpusIndex {
  private constructor(
    readonly manifest: ManifestIndex,
    /** The codec file's handle, then one per indexed segment (in manifest.segments order). */
    private readonly handles: IndexHandle[],
    /** For each token segment of the snapshot: its position in manifest.segments, or -1. */
    readonly segmentSlots: Int32Array,
  ) {}

  static open(dir: string, m: Manifest, previous: CorpusIndex | undefined): CorpusIndex {
    const ix = m.index!;
    const reuse = new Map<string, IndexHandle>();
    for (const h of previous?.handles ?? []) reuse.set(h.key, h);
    const handles: IndexHandle[] = [];
    try {
      for (const e of [ix, ...ix.segments]) {
        const kept = reuse.get(`${e.file}:${e.bytes}:${e.crc}`);
        if (kept) kept.pinned.retain();
        handles.push(kept ?? openIndexHandle(dir, e.file, e.bytes, e.crc));
      }
    } catch (e) {
      for (const h of handles) h.pinned.release();
      throw e;
    }
    const slots = new Int32Array(m.segments.length).fill(-1);
    ix.segments.forEach((s, i) => {
      slots[m.segments.findIndex((x) => x.file === s.segment)] = i;
    });
    return new CorpusIndex(ix, handles, slots);
  }

  /** The codec: the index of the build's sample (its centroids and buckets encode new documents). */
  codec(): PlaidIndex {
    return this.plaidOf(0);
  }

  /** The index of token segment `segment` of the snapshot, or undefined when it is unindexed. */
  segment(segment: number): PlaidIndex | undefined {
    const slot = this.segmentSlots[segment];
    return slot < 0 ? undefined : this.plaidOf(slot + 1);
  }

  /** Bytes of the index files. */
  get bytes(): number {
    return this.handles.reduce((a, h) => a + h.size, 0);
  }

  /**
   * Re-reads every array of every index file (the codec's centroids included) and checks its CRC;
   * throws FormatError naming the damaged file and array. Opening checks only sizes and headers.
   */
  verify(): void {
    for (const h of this.handles) verifyIndexArrays(h.pinned.file, h.pinned.fd, h.meta);
  }

  private plaidOf(i: number): PlaidIndex {
    const h = this.handles[i];
    h.plaid ??= PlaidIndex.fromParts(mapIndexParts(h.pinned, h.meta, h.size), undefined, h.pinned.file);
    return h.plaid;
  }

  release(): void {
    for (const h of this.handles) h.pinned.release();
  }
}
