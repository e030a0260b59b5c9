// Deleting documents: a new tombstone file listing every deleted document, published with a new MANIFEST.

import { InvalidArgumentError, MaxsimError } from '../../errors.js';
import { removeFile, writeDurably } from './files.js';
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

export interface DeleteResult {
  info: CorpusInfo;
  /** Documents deleted by this call (global indices, increasing). */
  deleted: number[];
}

/**
 * Deletes documents by id (ids corpora) or by index as a decimal string (corpora without ids), under
 * the writer lock: a new tombstone file listing every deleted document is written and synced, then
 * published with a new MANIFEST in one rename. Unknown (or already deleted) ids are an error and
 * nothing is written. Deleted documents disappear from search and get(); their bytes stay in the
 * segments until `compactCorpus`.
 */
export function deleteDocuments(
  dir: string,
  ids: readonly string[],
  options: LockOptions = {},
): DeleteResult {
  if (!Array.isArray(ids) || ids.some((x) => typeof x !== 'string'))
    throw new InvalidArgumentError('ids', 'an array of document id strings', describeValue(ids));
  readManifest(dir); // a clear error before locking when it is not a corpus
  const lock = CorpusLock.acquire(dir, options);
  try {
    const m = readManifest(dir);
    removeLeftovers(dir, m);
    const corpus = CorpusFile.open(dir);
    const indices = [...new Set(corpus.indicesOf(ids, 'ids'))].sort((a, b) => a - b);
    if (indices.length === 0) return { info: corpus.info, deleted: [] };
    const all: number[] = [];
    for (let i = 0; i < corpus.info.documents; i++) if (corpus.isDeleted(i)) all.push(i);
    const merged = [...all, ...indices].sort((a, b) => a - b);
    const bytes = encodeDeletions(merged);
    const generation = m.generation + 1;
    const name = deletionsName(generation);
    lock.check();
    writeDurably(dir, name, lock.token, bytes, 'deletions');
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
    return { info: describeManifest(dir, next), deleted: indices };
  } finally {
    lock.release();
  }
}
