// The corpus store: documents on disk, built once, grown by appends, searched without loading them.
//
// A corpus is a directory (by convention `name.msx`):
//   MANIFEST             the published state: format, dtype, dim, the list of segments (JSON + CRC line)
//   seg-000001.msxs ...  immutable segment files, one per build or append
//   LOCK                 held by a writer for its lifetime (owner record; see lock.ts)
// A segment file is self-describing and memory-mappable (all numbers little-endian):
//   [0, 4096)   header: magic "MSXSEG01", version, dtype, dim, flags, documents, tokens, the five
//               sections below as (byte offset, byte length), the checksum chunk size, a header CRC
//   tokens      packed [tokens, dim] rows in the corpus dtype, at byte 4096
//   scales      int8 only: float32 [tokens], one scale per token row
//   offsets     uint64 [documents + 1]: the first token of each document, relative to the segment
//   ids         optional: uint64 [documents + 1] byte offsets, then the UTF-8 ids back to back
//   checksums   uint32 CRC-32 per 64 MiB chunk of tokens, then one each for scales, offsets and ids
// Sections start on 4096-byte boundaries, so any typed view of a mapped section is aligned.
//
// Crash safety: a write never touches published bytes. A build or append writes a new segment under
// a temporary name, syncs it, renames it, syncs the directory, then writes MANIFEST.tmp, syncs it and
// renames it over MANIFEST (atomic on POSIX), and syncs the directory. A crash or a failed write at
// any step leaves the old MANIFEST, which names only complete, synced segments; leftovers are removed
// by the next writer.
//
// Modules: format (segment files, checksums), tombstones, manifest (read / validate / publish),
// files (durable steps), directory (a new corpus's directory), lock, writer (build, append,
// compact: the lock and the publish), segment-writer (one segment file's bytes), delete, reader
// (CorpusFile), recovery.

import type { DType } from '../../tensor.js';

export type CorpusDType = DType;
export { type DeleteOptions, type DeleteResult, deleteDocuments } from './delete.js';
export { corpusHolding } from './directory.js';
export { setCorpusFaultHook } from './files.js';
export { CHECKSUM_CHUNK, checksum, type SegmentHeader, storedTokenBytes, typedView } from './format.js';
export { forgetVerifiedChunks } from './handles.js';
export { CorpusLockedError, type LockOptions } from './lock.js';
export type { CorpusInfo } from './manifest.js';
export { manifestStamp } from './manifest.js';
export {
  type CorpusBlock,
  CorpusFile,
  type CorpusSegment,
  openCorpusFile,
  type VerifyProgress,
} from './reader.js';
export { type RecoverOptions, type RecoverResult, recoverCorpus } from './recovery.js';
export {
  type CorpusCreateOptions,
  CorpusWriter,
  type EncodedDocuments,
  type WriterOptions,
} from './writer.js';
export { DuplicateIdError, duplicateIds, MissingIdsError } from './writer-checks.js';
