// Two-stage top-K: scan every document with the int8 kernel, keep the c·K best candidates per query,
// rescore those exactly from the float copy, return the exact top K with exact scores. The first
// stage reads a quarter of the bytes of fp32; the second scores c·K documents per query.

import { checkSignal } from '../abort.js';
import type { CpuIsa } from '../backends/cpu.js';
import type { DeviceCorpus } from '../backends/cuda.js';
import { InvalidArgumentError } from '../errors.js';
import {
  batchItem,
  type Hit,
  isTokenMatrix,
  matrixAsBatch,
  selectItems,
  type TokenBatch,
  type TokenMatrix,
} from '../tensor.js';
import { maxsim, type ScoreOptions, topK } from './maxsim.js';
import { type Int8Isa, quantize, warnIfInt8Slower } from './quantize.js';
import { queriesName } from './shape.js';
import { checkK, topKOfRow } from './topk.js';

export interface TwoStageOptions extends ScoreOptions {
  /** c: candidates kept per query are c·K (default 4). */
  candidateFactor?: number;
  /**
   * Host batches: 'auto' (default) skips the int8 scan where its kernel set is slower than the float
   * one on this CPU (cpuInt8SlowerReason of int8Isa and isa; a process warning says so once) and
   * ranks every document exactly instead, the result the scan would at best reproduce; 'always'
   * scans regardless.
   */
  prefilter?: 'auto' | 'always';
  /** The int8 kernel set of the scan (default: the fastest here); `isa` is the rescoring's. */
  int8Isa?: Int8Isa;
}

/**
 * The exact top-k documents for one query (a TokenMatrix: hits) or every query of a batch (a list of
 * hits per query): `docs` is the float corpus, `docsInt8` the same corpus
 * quantized with quantize(docs, 'int8') (same items in the same order). Queries are quantized here.
 * Both may be device corpora (`docsInt8 = await docs.quantize('int8')`): then both stages run in one
 * GPU job, and only the candidates' spans go up and the k hits per query come back.
 * Equal to the exact top-k whenever each true top-k document ranks within the first c·k of the
 * int8 scan.
 */
export function twoStageTopK(
  query: TokenMatrix,
  docs: TokenBatch | DeviceCorpus,
  docsInt8: TokenBatch | DeviceCorpus,
  k: number,
  options?: TwoStageOptions,
): Promise<Hit[]>;
export function twoStageTopK(
  queries: TokenBatch,
  docs: TokenBatch | DeviceCorpus,
  docsInt8: TokenBatch | DeviceCorpus,
  k: number,
  options?: TwoStageOptions,
): Promise<Hit[][]>;
export function twoStageTopK(
  queries: TokenMatrix | TokenBatch,
  docs: TokenBatch | DeviceCorpus,
  docsInt8: TokenBatch | DeviceCorpus,
  k: number,
  options?: TwoStageOptions,
): Promise<Hit[] | Hit[][]>;
export async function twoStageTopK(
  queries: TokenMatrix | TokenBatch,
  docs: TokenBatch | DeviceCorpus,
  docsInt8: TokenBatch | DeviceCorpus,
  k: number,
  options: TwoStageOptions = {},
): Promise<Hit[] | Hit[][]> {
  queriesName(queries);
  const hits = await twoStageRows(queries, docs, docsInt8, k, options);
  return isTokenMatrix(queries) ? hits[0] : hits;
}

// twoStageTopK for either shape, one list of hits per query
async function twoStageRows(
  queries: TokenMatrix | TokenBatch,
  docs: TokenBatch | DeviceCorpus,
  docsInt8: TokenBatch | DeviceCorpus,
  k: number,
  options: TwoStageOptions,
): Promise<Hit[][]> {
  checkK(k);
  // host batches: both stages pass `signal` to the CPU engines (they stop early); device corpora: one job
  const signal = checkSignal(options.signal);
  signal?.throwIfAborted();
  const c = options.candidateFactor ?? 4;
  if (!Number.isFinite(c) || c < 1)
    throw new InvalidArgumentError('candidateFactor', 'a number >= 1', String(c));
  if (isDeviceCorpus(docs) || isDeviceCorpus(docsInt8)) {
    if (!isDeviceCorpus(docs) || !isDeviceCorpus(docsInt8))
      throw new InvalidArgumentError(
        'docs / docsInt8',
        'two device corpora (or two host batches)',
        'one of each',
      );
    const hits = await twoStageDevice(queries, docs, docsInt8, k, c);
    signal?.throwIfAborted(); // the GPU job ran to its end: its result is dropped
    return hits;
  }
  if (docsInt8.dtype !== 'int8') {
    throw new InvalidArgumentError(
      'docsInt8.dtype',
      "'int8' (quantize(docs, 'int8'))",
      `'${docsInt8.dtype}'`,
    );
  }
  if (docsInt8.count !== docs.count || docsInt8.dim !== docs.dim) {
    throw new InvalidArgumentError(
      'docsInt8',
      `the quantized copy of docs (${docs.count} items of dim ${docs.dim})`,
      `${docsInt8.count} items of dim ${docsInt8.dim}`,
    );
  }
  const q = isTokenMatrix(queries) ? matrixAsBatch(queries) : queries;
  const prefilter = options.prefilter ?? 'auto';
  if (prefilter !== 'auto' && prefilter !== 'always')
    throw new InvalidArgumentError('prefilter', "'auto' or 'always'", JSON.stringify(prefilter));
  // the scan of host batches runs on the CPU
  const floatIsa = options.isa as CpuIsa | undefined;
  if (
    warnIfInt8Slower(docs.dim, 'two-stage top-k', options.int8Isa, floatIsa) !== undefined &&
    prefilter === 'auto'
  )
    return topK(q, docs, k, options);
  const scan = await maxsim(quantize(q, 'int8'), docsInt8, {
    ...options,
    backend: 'cpu',
    isa: options.int8Isa,
  });
  const keep = Math.min(docs.count, Math.ceil(c * k));
  const out: Hit[][] = [];
  for (let i = 0; i < q.count; i++) {
    const candidates = topKOfRow(scan.data, keep, i * scan.cols, scan.cols).map((h) => h.index);
    // Candidates in ascending index order, so exact ties still break towards the lower index.
    candidates.sort((a, b) => a - b);
    const exact = await maxsim(batchItem(q, i), selectItems(docs, candidates), options);
    out.push(topKOfRow(exact, k).map((h) => ({ index: candidates[h.index], score: h.score })));
  }
  return out;
}

function isDeviceCorpus(x: unknown): x is DeviceCorpus {
  return typeof x === 'object' && x !== null && typeof (x as DeviceCorpus).select === 'function';
}

// Both stages on the GPU, in one job (DeviceCorpus.topK with rescore): the int8 scan of the device
// corpus, a top-c·K per query selected on the GPU, then the candidates rescored from the float corpus
// through a view (new spans, no token copy) and the top K of each query's own candidates, ties to the
// lower index. The TypeScript dispatcher plans both launches (Corpus.topK).
async function twoStageDevice(
  queries: TokenBatch | TokenMatrix,
  docs: DeviceCorpus,
  docsInt8: DeviceCorpus,
  k: number,
  c: number,
): Promise<Hit[][]> {
  if (docsInt8.dtype !== 'int8')
    throw new InvalidArgumentError('docsInt8.dtype', "'int8' (docs.quantize('int8'))", `'${docsInt8.dtype}'`);
  if (docs.dtype === 'int8' || docs.dtype === 'fp8')
    throw new InvalidArgumentError('docs.dtype', 'a float corpus (the exact copy)', `'${docs.dtype}'`);
  if (docsInt8.count !== docs.count || docsInt8.dim !== docs.dim)
    throw new InvalidArgumentError(
      'docsInt8',
      `the quantized copy of docs (${docs.count} items of dim ${docs.dim})`,
      `${docsInt8.count} items of dim ${docsInt8.dim}`,
    );
  const q = isTokenMatrix(queries) ? matrixAsBatch(queries) : queries;
  const keep = Math.min(docs.count, Math.ceil(c * k));
  return docsInt8.topK(q, k, { rescore: { docs, candidates: keep } });
}
