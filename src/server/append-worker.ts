// Runs one corpus write off the JS thread of the server: an appended segment or a deletion. Both
// are O(corpus) (the writer opens the corpus under the lock to check ids; its writes and fsyncs are
// synchronous), and on a large corpus or a slow disk they would otherwise stall every request.
import { parentPort, workerData } from 'node:worker_threads';
import { type CorpusInfo, CorpusWriter, DuplicateIdError, MissingIdsError } from '../io/corpus/index.js';
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

function run(job: WriteJob): WriteAnswer {
  if (job.op === 'delete') {
    const r = CorpusWriter.delete(job.dir, job.ids, { ignoreMissing: job.ignoreMissing });
    return { ok: true, info: r.info, deleted: r.deleted, absent: r.absent };
  }
  const writer = CorpusWriter.append(job.dir);
  try {
    writer.add(raggedBatch(job.data, job.offsets, { dim: job.dim, checkFinite: false }), job.ids);
    return { ok: true, info: writer.commit() };
  } catch (e) {
    writer.abort();
    throw e;
  }
}

let answer: WriteAnswer;
try {
  answer = run(workerData as WriteJob);
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
