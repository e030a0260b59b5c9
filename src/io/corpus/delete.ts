// Deleting documents: a new tombstone file listing every deleted document, published with a new MANIFEST.

import { InvalidArgumentError, MaxsimError } from '../../errors.js';
import { removeFile, writeAll, writeDurably } from './files.js';
import { CorpusLock, type LockOptions } from './lock.js';
import {
  type CorpusInfo,
  describeManifest,
  describeValue,
  type Manifest,
  publishManifest,
  readManifest,
  removeLeftovers,
} from './manifest.js';
import { CorpusFile } from './reader.js';
import { deletionsName, encodeDeletions } from './tombstones.js';

export interface DeleteOptions extends LockOptions {
  /**
   * Ids that are not live documents (unknown, or deleted already) are skipped and listed in
   * `absent` instead of failing the call (a retried delete succeeds). Default false: they are a
   * MissingIdsError and nothing is deleted.
   */
  ignoreMissing?: boolean;
}

export interface DeleteResult {
  /** The corpus as this call published it (or found it, when it deleted nothing). */
  info: CorpusInfo;
  /** Documents deleted by this call (global indices, increasing). */
  deleted: number[];
  /** With ignoreMissing: the ids that were not live documents, in request order. */
  absent: string[];
}

/**
 * Deletes documents by id (ids corpora) or by index as a decimal string (corpora without ids), under
 * the writer lock: a new tombstone file listing every deleted document is written and synced, then
 * published with a new MANIFEST in one rename. Ids are looked up in the corpus as the lock finds it.
 * Unknown (or already deleted) ids are a MissingIdsError and nothing is written, unless
 * `ignoreMissing`. Deleted documents disappear from search and get(); their bytes stay in the
 * segments until `compactCorpus`.
 */
export function deleteDocuments(
  dir: string,
  ids: readonly string[],
  options: DeleteOptions = {},
): DeleteResult {
  if (!Array.isArray(ids) || ids.some((x) => typeof x !== 'string'))
    throw new InvalidArgumentError('ids', 'an array of document id strings', describeValue(ids));
  readManifest(dir); // a clear error before locking when it is not a corpus
  const lock = CorpusLock.acquire(dir, options);
  let corpus: CorpusFile | undefined;
  try {
    const m = readManifest(dir);
    removeLeftovers(dir, m);
    corpus = CorpusFile.open(dir);
    const absent = options.ignoreMissing ? corpus.absentIds(ids) : [];
    const gone = new Set(absent);
    const wanted = gone.size > 0 ? ids.filter((id) => !gone.has(id)) : ids;
    const indices = [...new Set(corpus.indicesOf(wanted, 'ids'))].sort((a, b) => a - b);
    if (indices.length === 0) return { info: corpus.info, deleted: [], absent };
    const all: number[] = [];
    for (let i = 0; i < corpus.info.documents; i++) if (corpus.isDeleted(i)) all.push(i);
    const merged = [...all, ...indices].sort((a, b) => a - b);
    const bytes = encodeDeletions(merged);
    const generation = m.generation + 1;
    const name = deletionsName(generation);
    lock.check();
    writeDurably(dir, name, lock.token, 'deletions', (fd) => writeAll(fd, bytes, 0));
    const next: Manifest = {
      ...m,
      generation,
      deletions: {
        file: name,
        count: merged.length,
        bytes: bytes.length,
        crc: new DataView(bytes.buffer).getUint32(bytes.length - 4, true),
      },
    };
    publishManifest(dir, lock.token, next, () => {
      lock.check();
      const now = readManifest(dir);
      if (now.generation !== m.generation)
        throw new MaxsimError(
          `${dir}: the corpus changed meanwhile (generation ${m.generation} -> ${now.generation}); nothing was published`,
        );
    });
    // the previous tombstone file is superseded (a reader that opened it already holds its mask)
    if (m.deletions) removeFile(dir, m.deletions.file);
    return { info: describeManifest(dir, next), deleted: indices, absent };
  } finally {
    corpus?.close();
    lock.release();
  }
}
