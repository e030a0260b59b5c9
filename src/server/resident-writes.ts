// A server's corpus writes: each append or delete runs in a worker thread (append-worker.ts), and its
// errors come back as the server's error classes (404 unknown ids, 409 conflicts, 503 a locked corpus).

import { Worker } from 'node:worker_threads';
import { InvalidArgumentError, MaxsimError } from '../errors.js';
import { type CorpusFile, duplicateIds } from '../io/corpus/index.js';
import type { WriteAnswer, WriteJob } from './append-worker.js';

/** How many unknown ids an error names (it counts them all). */
export const MISSING_SHOWN = 5;

/** An id (or index) the corpus does not hold: HTTP 404. */
export class NotFoundError extends MaxsimError {
  override name = 'NotFoundError';
  constructor(
    readonly field: string,
    readonly missing: string[],
    total: number,
  ) {
    super(
      `${total} unknown document id${total === 1 ? '' : 's'} in ${field}: ${missing.map((m) => JSON.stringify(m)).join(', ')}${total > missing.length ? ', ...' : ''}`,
    );
  }
}

/** The corpus is locked by another writer: answered 503 with Retry-After. */
export class CorpusBusyError extends MaxsimError {
  override name = 'CorpusBusyError';
}

/** A request that conflicts with the corpus (an id it already holds): HTTP 409. */
export class ConflictError extends MaxsimError {
  override name = 'ConflictError';
  readonly expected = 'ids new to the corpus, each once in the request';
  constructor(
    /** What is taken: which ids, and where they are. */
    readonly received: string,
    /** The request's field of the ids (the route that knows renames it). */
    readonly field = 'ids',
  ) {
    super(`Expected ids new to the corpus, each once in the request for ${field} but received ${received}`);
  }
}

/**
 * The writer's id rule checked before a write, to answer 409 without one: no id `file` holds, none
 * twice in the request. The writer checks again under the lock, against what another process may
 * have added since.
 */
export function refuseTakenIds(ids: readonly string[], file: CorpusFile): void {
  const seen = new Map<string, number>();
  const message = duplicateIds(
    ids,
    (id) => {
      const at = file.indexOf(id);
      if (at !== undefined) return `already in the corpus (document ${at})`;
      const i = seen.get(id);
      return i === undefined ? undefined : `repeats ids[${i}] of this request`;
    },
    (id, i) => {
      seen.set(id, i);
    },
  );
  if (message) throw new ConflictError(message);
}

/** Runs one write (append or delete) in a worker thread; its errors come back as the server's classes. */
export function runWrite(job: WriteJob): Promise<Extract<WriteAnswer, { ok: true }>> {
  const what = job.op === 'append' ? 'the append' : 'the delete';
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL('./append-worker.js', import.meta.url), { workerData: job });
    let answered = false;
    worker.once('message', (m: WriteAnswer) => {
      answered = true;
      if (m.ok) return resolve(m);
      // checked under the lock against the corpus as it is: 409 / 404 even when another process wrote
      if (m.kind === 'duplicate') return reject(new ConflictError(m.received ?? m.message));
      if (m.kind === 'missing') {
        const missing = m.missing ?? [];
        return reject(new NotFoundError('ids', missing.slice(0, MISSING_SHOWN), missing.length));
      }
      if (m.name === 'InvalidArgumentError')
        return reject(new InvalidArgumentError(m.argument!, m.expected!, m.received!));
      // another writer (a CLI append, another server) holds the corpus: the client may retry
      if (m.name === 'CorpusLockedError') return reject(new CorpusBusyError(m.message));
      reject(new MaxsimError(m.message || `${what} failed`));
    });
    worker.once('error', (e) => {
      answered = true;
      reject(new MaxsimError(`${what} failed: ${e.message}`));
    });
    worker.once('exit', (code) => {
      if (!answered) reject(new MaxsimError(`the write worker exited with code ${code}`));
    });
  });
}
