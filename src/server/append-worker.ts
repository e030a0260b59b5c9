// Writes one appended segment off the JS thread of the server: CorpusWriter's writes and fsyncs are
// synchronous, and a slow disk would otherwise stall every request while they run.
import { parentPort, workerData } from 'node:worker_threads';
import { CorpusWriter } from '../io/corpus/index.js';
import { raggedBatch } from '../tensor.js';

export interface AppendJob {
  dir: string;
  data: Float32Array;
  offsets: number[];
  dim: number;
  ids: string[] | undefined;
}

const job = workerData as AppendJob;
try {
  const writer = CorpusWriter.append(job.dir);
  try {
    writer.add(raggedBatch(job.data, job.offsets, { dim: job.dim, checkFinite: false }), job.ids);
    writer.commit();
  } catch (e) {
    writer.abort();
    throw e;
  }
  parentPort!.postMessage({ ok: true });
} catch (e) {
  const err = e as Error & { argument?: string; expected?: string; received?: string };
  parentPort!.postMessage({
    ok: false,
    name: err.name,
    message: err.message,
    argument: err.argument,
    expected: err.expected,
    received: err.received,
  });
}
