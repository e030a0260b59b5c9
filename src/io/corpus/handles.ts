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
import type { SegmentHeader } from './format.js';

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
