// Runs one corpus write off the JS thread of the server: an appended segment or a deletion. Both
// are O(corpus) (the writer opens the corpus under the lock to check ids; its writes and fsyncs are
// synchronous), and on a large corpus or a slow disk they would otherwise stall every request.
import { parentPort, workerData } from 'node:worker_threads';
import {
  type CorpusInfo,
  CorpusLockedError,
  CorpusWriter,
  DuplicateIdError,
  MissingIdsError,
} from '../io/corpus/index.js';
import { indexCorpus } from '../io/corpus/index-build.js';
import { raggedBatch } from '../tensor.js';

export type WriteJob =
  | {
      op: 'append';
      dir: string;
      data: Float32Array;
      offsets: number[];
      dim: number;
      ids: string[] | undefined;
    }
  | { op: 'delete'; dir: string; ids: string[]; ignoreMissing: boolean };

/** What the worker answers: the corpus as the write published it, or the error with its kind. */
export type WriteAnswer =
  | { ok: true; info: CorpusInfo; deleted?: number[]; absent?: string[] }
  | {
      ok: false;
      name: string;
      /** 'duplicate' (an id the corpus holds), 'missing' (ids it does not hold), else undefined. */
      kind?: 'duplicate' | 'missing';
      message: string;
      argument?: string;
      expected?: string;
      received?: string;
      missing?: string[];
    };

async function run(job: WriteJob): Promise<WriteAnswer> {
  if (job.op === 'delete') {
    const r = CorpusWriter.delete(job.dir, job.ids, { ignoreMissing: job.ignoreMissing });
    return { ok: true, info: r.info, deleted: r.deleted, absent: r.absent };
  }
  const writer = CorpusWriter.append(job.dir);
  let info: CorpusInfo;
  try {
    writer.add(raggedBatch(job.data, job.offsets, { dim: job.dim, checkFinite: false }), job.ids);
    info = writer.commit();
  } catch (e) {
    writer.abort();
    throw e;
  }
  // an indexed corpus: the new segment encoded against the centroids (and its tokens dropped where
  // the corpus keeps only its index), as `corpus append` does; published after the append, so
  // searches meanwhile scan it exactly. Another writer holding the lock leaves that to a later step.
  if (info.index) {
    try {
      info = (await indexCorpus(job.dir, { waitMs: 10_000 })).info;
    } catch (e) {
      if (!(e instanceof CorpusLockedError)) throw e;
    }
  }
  return { ok: true, info };
}

let answer: WriteAnswer;
try {
  answer = await run(workerData as WriteJob);
} catch (e) {
  const err = e as Error & { argument?: string; expected?: string; received?: string };
  answer = {
    ok: false,
    name: err.name,
    kind: e instanceof DuplicateIdError ? 'duplicate' : e instanceof MissingIdsError ? 'missing' : undefined,
    message: err.message,
    argument: err.argument,
    expected: err.expected,
    received: err.received,
    missing: e instanceof MissingIdsError ? e.missing : undefined,
  };
}
parentPort!.postMessage(answer);
