// MaxSim scoring on host arrays: score(Q, D) = sum over query tokens of the max over document tokens
// of <q, d>. One query against B documents, or every query of a batch against every document.
// TypeScript validates and picks the backend; the native engines do the arithmetic.

import { checkSignal, throwIfAborted, untilAborted, withCancelFlag } from '../abort.js';
import { type CpuIsa, cpuMaxsim, cpuMaxsimSync } from '../backends/cpu.js';
import { cudaScoreHost } from '../backends/cuda-host.js';
import { type BackendChoice, type BackendName, resolveBackend } from '../backends/select.js';
import { wasmEngine } from '../backends/wasm.js';
import { InvalidArgumentError } from '../errors.js';
import {
  checkCompatible,
  type Hit,
  isTokenBatch,
  isTokenMatrix,
  matrixAsBatch,
  optionsObject,
  type ScoreMatrix,
  type TokenBatch,
  type TokenMatrix,
} from '../tensor.js';
import { refuseCenteredQueries, uncenterScores } from './center.js';
import { cpuMaxsimInt8, cpuMaxsimInt8Sync, type Int8Isa } from './quantize.js';
import { checkK, topKOfRow } from './topk.js';

export interface ScoreOptions {
  /**
   * 'auto' (default): CUDA when a usable GPU is present, else the native CPU engine, else (no addon
   * for this platform) 'wasm', the WebAssembly SIMD engine (one thread, on the calling thread).
   */
  backend?: BackendChoice;
  /** CPU worker threads (default all cores). */
  threads?: number;
  /** CPU kernel set override, for tests and benchmarks (int8 inputs: an Int8Isa, see cpuInt8Isas()). */
  isa?: CpuIsa | Int8Isa;
  /** CUDA device index (default 0). */
  device?: number;
  /** CUDA kernel variant override, for benchmarks. */
  variant?: string;
  /**
   * Cancels the job: the promise rejects with the signal's reason (an AbortError). On the CPU the
   * workers stop before their next chunk of documents (<= 256 documents each) and the promise rejects
   * then; on CUDA it rejects at once, the job runs to its end and its result is dropped. The
   * synchronous variants only check it on entry.
   */
  signal?: AbortSignal;
}

// int8 scores int8 only: both sides quantized (see quantize()), or both float.
function checkDtypes(qName: string, queries: TokenMatrix | TokenBatch, docs: TokenBatch) {
  if ((queries.dtype === 'int8') === (docs.dtype === 'int8')) return;
  const [name, x, other] = queries.dtype === 'int8' ? [qName, queries, 'docs'] : ['docs', docs, qName];
  throw new InvalidArgumentError(
    `${name}.dtype`,
    `'float32', 'float16' or 'bfloat16' like ${other} (int8 scoring needs int8 queries and int8 documents: quantize both)`,
    `'${x.dtype}'`,
  );
}

function prepare(queries: TokenMatrix | TokenBatch, docs: TokenBatch, qName: string): TokenBatch {
  checkCompatible(queries, docs, qName, 'docs');
  checkDtypes(qName, queries, docs);
  refuseCenteredQueries(queries, qName);
  return isTokenMatrix(queries) ? matrixAsBatch(queries) : queries;
}

async function scoreAllPairs(q: TokenBatch, docs: TokenBatch, options: ScoreOptions): Promise<Float32Array> {
  options = optionsObject(options, 'backend, threads, isa, device, variant, signal, all optional');
  const signal = checkSignal(options.signal);
  // int8 x int8 runs on both engines (CUDA: the int8 tensor-core kernels); 'auto' as for floats
  const backend: BackendName = resolveBackend(options.backend, { wasm: true });
  throwIfAborted(signal);
  if (q.count === 0 || docs.count === 0) return new Float32Array(q.count * docs.count);
  if (backend === 'wasm') {
    checkWasmOptions(options);
    const scores = await wasmEngine().score(q, docs, { signal });
    return q.dtype === 'int8' ? uncenterScores(q, docs, scores) : scores;
  }
  return withCancelFlag(signal, (cancel) => {
    // a CUDA job cannot stop early: the promise rejects at once and the job's result is dropped
    if (backend === 'cuda')
      return untilAborted(
        signal,
        cudaScoreHost(q, docs, { device: options.device, variant: options.variant }),
      );
    // centered documents (src/ops/center.ts): the engine scores the residuals, the shift is added here
    // (the CUDA corpus adds it itself)
    if (q.dtype === 'int8')
      return cpuMaxsimInt8(q, docs, { threads: options.threads, isa: options.isa }, cancel).then((s) =>
        uncenterScores(q, docs, s),
      );
    return cpuMaxsim(q, docs, { threads: options.threads, isa: options.isa as CpuIsa | undefined }, cancel);
  });
}

// The wasm engine has one kernel set and one thread: an isa is refused rather than ignored.
function checkWasmOptions(options: ScoreOptions): void {
  if (options.isa !== undefined) {
    throw new InvalidArgumentError(
      'isa',
      'no isa with the wasm backend (it has one kernel set, SIMD128)',
      `'${options.isa}'`,
    );
  }
}

function scoreAllPairsSync(q: TokenBatch, docs: TokenBatch, options: ScoreOptions): Float32Array {
  options = optionsObject(options, 'backend, threads, isa, signal, all optional');
  throwIfAborted(checkSignal(options.signal));
  if (options.backend === 'cuda') {
    throw new InvalidArgumentError(
      'backend',
      "'cpu', 'wasm' or 'auto' for a synchronous call (CUDA work is asynchronous: use maxsim())",
      "'cuda'",
    );
  }
  const useWasm =
    options.backend === 'wasm' ||
    ((options.backend ?? 'auto') === 'auto' && resolveBackend('auto', { wasm: true }) === 'wasm');
  if (useWasm) checkWasmOptions(options);
  if (q.count === 0 || docs.count === 0) return new Float32Array(q.count * docs.count);
  if (useWasm) {
    const scores = wasmEngine().scoreSync(q, docs);
    return q.dtype === 'int8' ? uncenterScores(q, docs, scores) : scores;
  }
  if (q.dtype === 'int8')
    return uncenterScores(
      q,
      docs,
      cpuMaxsimInt8Sync(q, docs, { threads: options.threads, isa: options.isa }),
    );
  return cpuMaxsimSync(q, docs, { threads: options.threads, isa: options.isa as CpuIsa | undefined });
}

function requireMatrix(query: unknown): asserts query is TokenMatrix {
  if (!isTokenMatrix(query)) {
    throw new InvalidArgumentError(
      'query',
      'a TokenMatrix (use maxsimAll for a batch of queries)',
      isTokenBatch(query) ? 'a TokenBatch' : typeof query,
    );
  }
}
function requireBatch(queries: unknown): asserts queries is TokenBatch {
  if (!isTokenBatch(queries)) {
    throw new InvalidArgumentError(
      'queries',
      'a TokenBatch of queries (use maxsim for one query)',
      isTokenMatrix(queries) ? 'a TokenMatrix' : typeof queries,
    );
  }
}

/** Scores one query against every document: Float32Array [B]. */
export async function maxsim(
  query: TokenMatrix,
  docs: TokenBatch,
  options: ScoreOptions = {},
): Promise<Float32Array> {
  requireMatrix(query);
  return scoreAllPairs(prepare(query, docs, 'query'), docs, options);
}

/** Synchronous CPU variant of maxsim (blocks the calling thread). */
export function maxsimSync(query: TokenMatrix, docs: TokenBatch, options: ScoreOptions = {}): Float32Array {
  requireMatrix(query);
  return scoreAllPairsSync(prepare(query, docs, 'query'), docs, options);
}

/** Scores every query against every document: rows = queries, cols = documents. */
export async function maxsimAll(
  queries: TokenBatch,
  docs: TokenBatch,
  options: ScoreOptions = {},
): Promise<ScoreMatrix> {
  requireBatch(queries);
  const data = await scoreAllPairs(prepare(queries, docs, 'queries'), docs, options);
  return { data, rows: queries.count, cols: docs.count };
}

/** Synchronous CPU variant of maxsimAll. */
export function maxsimAllSync(
  queries: TokenBatch,
  docs: TokenBatch,
  options: ScoreOptions = {},
): ScoreMatrix {
  requireBatch(queries);
  const data = scoreAllPairsSync(prepare(queries, docs, 'queries'), docs, options);
  return { data, rows: queries.count, cols: docs.count };
}

/** The k best documents for one query, best first (ties: lower index first). */
export async function topK(
  query: TokenMatrix,
  docs: TokenBatch,
  k: number,
  options: ScoreOptions = {},
): Promise<Hit[]> {
  checkK(k);
  return topKOfRow(await maxsim(query, docs, options), k);
}

/** The k best documents for every query of a batch. */
export async function topKAll(
  queries: TokenBatch,
  docs: TokenBatch,
  k: number,
  options: ScoreOptions = {},
): Promise<Hit[][]> {
  checkK(k);
  return rankRows(await maxsimAll(queries, docs, options), k);
}

/** Top-k of every row of a score matrix. */
export function rankRows(scores: ScoreMatrix, k: number): Hit[][] {
  checkK(k);
  const out: Hit[][] = [];
  for (let r = 0; r < scores.rows; r++) out.push(topKOfRow(scores.data, k, r * scores.cols, scores.cols));
  return out;
}
