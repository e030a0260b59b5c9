// What snapshots of one corpus share: the files they read, held open, and what was read from them.
//
// A snapshot (CorpusFile) is a MANIFEST plus every file it names. Each file is held by an open file
// descriptor from the moment the snapshot opens it, so a writer that removes or replaces it (compact,
// a superseded tombstone file) never pulls it from under a reader: reads go through the descriptor
// and mappings through /proc/self/fd/N. Files are immutable once published, so a newer snapshot reuses
// an older one's handles (no re-read of headers, offsets or ids); each handle counts the snapshots
// holding it and closes its descriptor when the last lets go (or when it is garbage-collected). A new
// kind of file a MANIFEST names (an index, say) is held the same way: a PinnedFile per file.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { FormatError } from '../../errors.js';
import { readSegmentMeta, type SegmentHeader } from './format.js';
import { type Manifest, type ManifestSegment, openSegment } from './manifest.js';
import { type ManifestDeletions, readDeletions } from './tombstones.js';

// Closes the descriptors of handles nobody released (a CorpusFile dropped without close()).
const orphans = new FinalizationRegistry<{ fd: number; open: boolean }>((held) => {
  if (!held.open) return;
  held.open = false;
  try {
    fs.closeSync(held.fd);
  } catch {
    // closed already
  }
});

let procFd: boolean | undefined;

/** One published file held open by the snapshots that name it. */
export class PinnedFile {
  private refs = 1;
  private readonly held: { fd: number; open: boolean };

  constructor(
    /** The file's path in the corpus directory (for messages; it may be gone). */
    readonly file: string,
    fd: number,
  ) {
    this.held = { fd, open: true };
    orphans.register(this, this.held, this);
  }

  get fd(): number {
    if (!this.held.open) throw new Error(`${this.file}: read after its snapshot was closed`);
    return this.held.fd;
  }

  /** A path that opens this very file even after it was removed (Linux); elsewhere its own path. */
  get path(): string {
    procFd ??= fs.existsSync(`/proc/self/fd/${this.fd}`);
    return procFd ? `/proc/self/fd/${this.fd}` : this.file;
  }

  retain(): void {
    this.refs++;
  }

  release(): void {
    if (--this.refs > 0 || !this.held.open) return;
    this.held.open = false;
    orphans.unregister(this);
    fs.closeSync(this.held.fd);
  }
}

/** A segment as read once: its file, header, offsets, checksums and ids (shared by snapshots). */
export interface SegmentHandle {
  /** The name the MANIFEST gives it, with its size and header CRC: the identity snapshots match. */
  readonly key: string;
  readonly pinned: PinnedFile;
  readonly header: SegmentHeader;
  readonly offsets: Float64Array;
  readonly checksums: Uint32Array;
  readonly verified: Set<number>;
  readonly ids: string[] | undefined;
}

export function segmentKey(name: string, bytes: number, headerCrc: number): string {
  return `${name}:${bytes}:${headerCrc}`;
}

/**
 * Ids to global indices over a run of segments, shared by the snapshots whose segment lists start
 * with that run (appends only add segments at the end; deletions keep indices): a snapshot extends it
 * with its newer segments instead of rebuilding it. An id maps to every index it was stored at (an id
 * deleted and added again has two); a snapshot takes the newest one below its document count that it
 * has not deleted.
 */
export class IdIndex {
  private readonly map = new Map<string, number | number[]>();
  /** The segment keys indexed, in order. */
  readonly keys: string[] = [];
  documents = 0;

  /** Whether the segments of a snapshot start with the ones indexed here. */
  covers(keys: readonly string[]): boolean {
    if (keys.length < this.keys.length) return false;
    for (let i = 0; i < this.keys.length; i++) if (keys[i] !== this.keys[i]) return false;
    return true;
  }

  /** Indexes the ids of one more segment, `from` to `to` of its documents; true when it is whole. */
  add(key: string, ids: readonly string[], from: number, to: number): boolean {
    const base = this.documents;
    for (let i = from; i < to; i++) {
      const id = ids[i];
      const at = this.map.get(id);
      if (at === undefined) this.map.set(id, base + i);
      else if (typeof at === 'number') this.map.set(id, [at, base + i]);
      else at.push(base + i);
    }
    if (to < ids.length) return false;
    this.keys.push(key);
    this.documents += ids.length;
    return true;
  }

  /** The newest index of `id` below `documents` that `deleted` does not mark, or undefined. */
  find(id: string, documents: number, deleted: Uint8Array | undefined): number | undefined {
    const at = this.map.get(id);
    if (at === undefined) return undefined;
    const live = (i: number) => i < documents && (deleted === undefined || deleted[i] === 0);
    if (typeof at === 'number') return live(at) ? at : undefined;
    for (let j = at.length - 1; j >= 0; j--) if (live(at[j])) return at[j];
    return undefined;
  }
}

// Segment files are immutable once published: a chunk checked once in this process stays checked
// for the same file (same device, inode, size, times and header). Keyed by that identity.
export const verifiedChunks = new Map<string, Set<number>>();

/** Bench / test hook: forget which chunks were checked (later opens check them again). */
export function forgetVerifiedChunks(): void {
  verifiedChunks.clear();
}

export function verifiedSet(st: fs.Stats, headerCrc: number): Set<number> {
  const key = `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}:${headerCrc}`;
  let set = verifiedChunks.get(key);
  if (!set) {
    set = new Set();
    verifiedChunks.set(key, set);
  }
  return set;
}

/** Opens segment `s` of MANIFEST `m` and reads everything but its tokens (a handle for snapshots). */
export function openSegmentHandle(dir: string, m: Manifest, s: ManifestSegment, key: string): SegmentHandle {
  const { file, fd } = openSegment(dir, s.file);
  const pinned = new PinnedFile(file, fd);
  try {
    const st = fs.fstatSync(fd);
    if (st.size !== s.bytes)
      throw new FormatError(
        file,
        `the segment has ${st.size} bytes but the MANIFEST says ${s.bytes} (truncated or replaced)`,
      );
    const { header, headerCrc, offsets, ids, sums } = readSegmentMeta(file, fd, st.size, m.ids);
    if (headerCrc !== s.headerCrc)
      throw new FormatError(file, 'the segment header does not match the MANIFEST (replaced segment?)');
    if (
      header.dtype !== m.dtype ||
      header.dim !== m.dim ||
      header.documents !== s.documents ||
      header.tokens !== s.tokens
    )
      throw new FormatError(file, 'the segment header disagrees with the MANIFEST (dtype, dim or counts)');
    return { key, pinned, header, offsets, checksums: sums, verified: verifiedSet(st, headerCrc), ids };
  } catch (e) {
    pinned.release();
    throw e;
  }
}

/**
 * Opens a file the MANIFEST names, read-only and held open like the segments, and hands it to `read`;
 * the handle is released if `read` throws. `doing` words the error: "cannot <doing> the MANIFEST names".
 */
export function openNamedFile<T>(
  dir: string,
  name: string,
  doing: string,
  read: (pinned: PinnedFile, fd: number) => T,
): T {
  const file = path.join(dir, name);
  let fd: number;
  try {
    // non-blocking: opening a FIFO for reading would wait for a writer (no effect on regular files)
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
  } catch (e) {
    throw new FormatError(
      file,
      `cannot ${doing} the MANIFEST names (${(e as NodeJS.ErrnoException).code ?? e})`,
    );
  }
  const pinned = new PinnedFile(file, fd);
  try {
    return read(pinned, fd);
  } catch (e) {
    pinned.release();
    throw e;
  }
}

/** Opens the tombstone file the MANIFEST names (held open like the segments) and reads its mask. */
export function openTombstones(
  dir: string,
  d: ManifestDeletions,
  documents: number,
): { pinned: PinnedFile; mask: Uint8Array } {
  return openNamedFile(dir, d.file, 'read the tombstone file', (pinned, fd) => ({
    pinned,
    mask: readDeletions(dir, d, documents, fd),
  }));
}
