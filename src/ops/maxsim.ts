// MaxSim scoring on host arrays: score(Q, D) = sum over query tokens of the max over document tokens
// of <q, d>. One query against B documents, or every query of a batch against every document: the
// entry points take either shape and answer in it (shape.ts).
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
  isTokenMatrix,
  matrixAsBatch,
  optionsObject,
  type ScoreMatrix,
  type TokenBatch,
  type TokenMatrix,
} from '../tensor.js';
import { refuseCenteredQueries, uncenterScores } from './center.js';
import { cpuMaxsimInt8, cpuMaxsimInt8Sync, type Int8Isa } from './quantize.js';
import { queriesName, rankShaped, shapeScores } from './shape.js';
import { checkK } from './topk.js';

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
      "'cpu', 'wasm' or 'auto' for a synchronous call (CUDA work is asynchronous: use maxsim() from 'maxsim')",
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

/** Scores one query against every document: Float32Array [B]. */
export function maxsim(query: TokenMatrix, docs: TokenBatch, options?: ScoreOptions): Promise<Float32Array>;
/** Scores every query of a batch against every document: rows = queries, cols = documents. */
export function maxsim(queries: TokenBatch, docs: TokenBatch, options?: ScoreOptions): Promise<ScoreMatrix>;
export function maxsim(
  queries: TokenMatrix | TokenBatch,
  docs: TokenBatch,
  options?: ScoreOptions,
): Promise<Float32Array | ScoreMatrix>;
export async function maxsim(
  queries: TokenMatrix | TokenBatch,
  docs: TokenBatch,
  options: ScoreOptions = {},
): Promise<Float32Array | ScoreMatrix> {
  const q = prepare(queries, docs, queriesName(queries));
  return shapeScores(queries, await scoreAllPairs(q, docs, options), docs.count);
}

/**
 * maxsim on the calling thread (blocks it), on the CPU or wasm engine; from 'maxsim/sync'. One query:
 * Float32Array [B]; a batch: a ScoreMatrix.
 */
export function maxsimSync(query: TokenMatrix, docs: TokenBatch, options?: ScoreOptions): Float32Array;
export function maxsimSync(queries: TokenBatch, docs: TokenBatch, options?: ScoreOptions): ScoreMatrix;
export function maxsimSync(
  queries: TokenMatrix | TokenBatch,
  docs: TokenBatch,
  options?: ScoreOptions,
): Float32Array | ScoreMatrix;
export function maxsimSync(
  queries: TokenMatrix | TokenBatch,
  docs: TokenBatch,
  options: ScoreOptions = {},
): Float32Array | ScoreMatrix {
  const q = prepare(queries, docs, queriesName(queries));
  return shapeScores(queries, scoreAllPairsSync(q, docs, options), docs.count);
}

/** The k best documents for one query, best first (ties: lower index first). */
export function topK(query: TokenMatrix, docs: TokenBatch, k: number, options?: ScoreOptions): Promise<Hit[]>;
/** The k best documents for every query of a batch. */
export function topK(
  queries: TokenBatch,
  docs: TokenBatch,
  k: number,
  options?: ScoreOptions,
): Promise<Hit[][]>;
export function topK(
  queries: TokenMatrix | TokenBatch,
  docs: TokenBatch,
  k: number,
  options?: ScoreOptions,
): Promise<Hit[] | Hit[][]>;
export async function topK(
  queries: TokenMatrix | TokenBatch,
  docs: TokenBatch,
  k: number,
  options: ScoreOptions = {},
): Promise<Hit[] | Hit[][]> {
  checkK(k);
  return rankShaped(await maxsim(queries, docs, options), k);
}
