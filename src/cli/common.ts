// Shared by the CLI commands: option parsers, loading inputs, and printing tables and JSON.

import { type Command, Option, InvalidArgumentError as UsageError } from 'commander';
import { untilAborted } from '../abort.js';
import { checkWork, workOf } from '../admission.js';
import { MAX_THREADS } from '../backends/constants.js';
import { cudaScoreFp8Host } from '../backends/cuda-host.js';
import { type BackendChoice, cudaUnavailableReason, resolveBackend } from '../backends/select.js';
import type { BenchShape } from '../bench/cuda.js';
import { BackendUnavailableError, InvalidArgumentError } from '../errors.js';
import { arrayToDocs, arrayToQueries, loadArray } from '../io/load.js';
import type { NpyArray } from '../io/npy.js';
import { checkMean } from '../ops/center.js';
import { maxsim } from '../ops/maxsim.js';
import { quantize, type ScaleGranularity, warnIfInt8Slower } from '../ops/quantize.js';
import {
  type FloatDType,
  matrixAsBatch,
  type ScoreMatrix,
  selectItems,
  type TokenBatch,
  type TokenMatrix,
  totalTokens,
} from '../tensor.js';
import { Progress } from './progress.js';

export const BACKEND_CHOICES: readonly BackendChoice[] = ['auto', 'cpu', 'cuda'];

// ---- option parsers (a thrown commander InvalidArgumentError is a usage error, exit code 2) ----

/** A parser for integer options in [min, max]. */
export function integerOption(min: number, max = Number.MAX_SAFE_INTEGER): (value: string) => number {
  return (value) => {
    const n = /^[+-]?\d+$/.test(value.trim()) ? Number(value) : Number.NaN;
    if (!Number.isSafeInteger(n) || n < min || n > max) {
      const range = max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `in [${min}, ${max}]`;
      throw new UsageError(`expected an integer ${range}`);
    }
    return n;
  };
}

/** A parser for number options >= min ('Infinity' allowed). */
export function numberOption(min: number, why = ''): (value: string) => number {
  return (value) => {
    const n = value.trim() === '' ? Number.NaN : Number(value);
    if (!(n >= min)) throw new UsageError(`expected a number >= ${min}${why}`);
    return n;
  };
}

const DTYPE_ALIASES: Record<string, FloatDType> = {
  f32: 'float32',
  float32: 'float32',
  fp32: 'float32',
  f16: 'float16',
  float16: 'float16',
  fp16: 'float16',
  bf16: 'bfloat16',
  bfloat16: 'bfloat16',
};

/** f32|f16|bf16 (or float32|float16|bfloat16). */
export function parseDtype(value: string): FloatDType {
  const dtype = DTYPE_ALIASES[value.toLowerCase()];
  if (!dtype) throw new UsageError('expected f32, f16 or bf16 (or float32, float16, bfloat16)');
  return dtype;
}

export type { BenchShape };

/** 'Nq,Lq,Ld,d,B', e.g. '1,32,128,128,20000'. */
export function parseShape(value: string): BenchShape {
  const parts = value.split(',').map((p) => p.trim());
  const numbers = parts.map(Number);
  if (
    parts.length !== 5 ||
    !numbers.every((n, i) => /^\d+$/.test(parts[i]) && Number.isSafeInteger(n) && n >= 1)
  ) {
    throw new UsageError('expected Nq,Lq,Ld,d,B: five integers >= 1, e.g. 1,32,128,128,20000');
  }
  const [nq, lq, ld, d, b] = numbers;
  return { nq, lq, ld, d, b };
}

/** Collects a repeatable option into a list. */
export function collect<T>(parse: (value: string) => T): (value: string, previous: T[] | undefined) => T[] {
  return (value, previous) => [...(previous ?? []), parse(value)];
}

export function formatShape(shape: BenchShape): string {
  return `${shape.nq},${shape.lq},${shape.ld},${shape.d},${shape.b}`;
}

// ---- inputs ----

export interface InputOptions {
  queries: string;
  docs: string;
  docOffsets?: string;
  docLengths?: string;
  /** int8 inputs: one float32 scale per token row. */
  docScales?: string;
  /** centered int8 documents (maxsim quantize --center): the float32 [d] mean subtracted. */
  docMean?: string;
  queryScales?: string;
  /** Real tokens per query [Nq] of [Nq, L, d] queries. */
  queryLengths?: string;
  /** Read .npy uint16 / int16 arrays as bfloat16 bits. */
  bf16?: boolean;
  checkFinite: boolean;
  /** Work limit (query tokens x document tokens x dim): refused beyond, before scoring. */
  maxWork?: number;
}

/** loadArray's options for a CLI spec: the argument's name and --bf16. */
function cliLoad(spec: string, argument: string, bf16: boolean | undefined) {
  return loadArray(spec, {
    argument,
    u2As: bf16 ? 'bfloat16' : undefined,
    u2AsOption: '--bf16',
  });
}

/** Documents from --docs (+ --doc-offsets / --doc-lengths / --doc-scales / --doc-mean). */
export function loadDocs(opts: {
  docs: string;
  docOffsets?: string;
  docLengths?: string;
  docScales?: string;
  docMean?: string;
  bf16?: boolean;
  checkFinite: boolean;
}): TokenBatch {
  const load = (spec: string | undefined, argument: string) =>
    spec === undefined ? undefined : loadArray(spec, { argument });
  const docs = loadDocsArrays(opts, load);
  if (opts.docMean === undefined) return docs;
  if (docs.dtype !== 'int8')
    throw new InvalidArgumentError(
      '--doc-mean',
      'int8 documents (centered by maxsim quantize --center)',
      `${docs.dtype} documents`,
    );
  const mean = load(opts.docMean, '--doc-mean') as NpyArray;
  return { ...docs, mean: checkMean(mean.data, docs.dim, '--doc-mean') };
}

function loadDocsArrays(
  opts: Parameters<typeof loadDocs>[0],
  load: (spec: string | undefined, argument: string) => NpyArray | undefined,
): TokenBatch {
  return arrayToDocs(
    cliLoad(opts.docs, '--docs', opts.bf16),
    {
      offsets: load(opts.docOffsets, '--doc-offsets'),
      lengths: load(opts.docLengths, '--doc-lengths'),
      scales: load(opts.docScales, '--doc-scales'),
      checkFinite: opts.checkFinite,
    },
    '--docs',
  );
}

/** Queries from --queries (+ --query-lengths / --query-scales / --bf16). */
export function loadQueries(opts: {
  queries: string;
  queryLengths?: string;
  queryScales?: string;
  bf16?: boolean;
  checkFinite: boolean;
}): TokenMatrix | TokenBatch {
  const load = (spec: string | undefined, argument: string) =>
    spec === undefined ? undefined : loadArray(spec, { argument });
  return arrayToQueries(cliLoad(opts.queries, '--queries', opts.bf16), '--queries', {
    checkFinite: opts.checkFinite,
    scales: load(opts.queryScales, '--query-scales'),
    lengths: load(opts.queryLengths, '--query-lengths'),
  });
}

/**
 * Queries ([L, d] -> one query, [Nq, L, d] -> a batch) and documents, from .npy / .safetensors specs;
 * their work (query tokens x document tokens x dim) admitted against --max-work before any scoring.
 */
export function loadInputs(opts: InputOptions): { queries: TokenMatrix | TokenBatch; docs: TokenBatch } {
  const queries = loadQueries(opts);
  const docs = loadDocs(opts);
  if (opts.maxWork !== undefined) {
    const q =
      queries.kind === 'matrix'
        ? { tokens: queries.length, count: 1 }
        : { tokens: totalTokens(queries), count: queries.count };
    checkWork(
      workOf(q.tokens, q.count, totalTokens(docs), docs.count, docs.dim),
      opts.maxWork,
      '--docs',
      '--max-work',
    );
  }
  return { queries, docs };
}

/** Parses --max-work: a positive number of multiply-adds (1e12 and 2.5e11 spellings welcome). */
export function parseMaxWork(value: string): number {
  const n = Number(value);
  if (!(Number.isFinite(n) && n > 0))
    throw new UsageError('expected a positive number of multiply-adds, e.g. 1e12');
  return n;
}

// ---- output ----

/** JSON has no -Infinity (the score of an empty document): it is written as null. */
export function jsonScore(score: number): number | null {
  return Number.isFinite(score) ? score : null;
}

const NUMERIC = /^[-+]?(\d[\d,]*(\.\d+)?(e[-+]?\d+)?|Infinity|NaN)$/i;

/** Prints rows as an aligned table: numeric columns right-aligned, text columns left-aligned. */
export function printTable(headers: readonly string[], rows: readonly (readonly string[])[]): void {
  const numeric = headers.map((_, c) => rows.length > 0 && rows.every((row) => NUMERIC.test(row[c])));
  const widths = headers.map((h, c) => Math.max(h.length, ...rows.map((row) => row[c].length)));
  const line = (row: readonly string[]) =>
    row
      .map((cell, c) => (numeric[c] ? cell.padStart(widths[c]) : cell.padEnd(widths[c])))
      .join('  ')
      .trimEnd();
  console.log(line(headers));
  for (const row of rows) console.log(line(row));
}

/** Fixed-point with `digits` decimals; non-finite values as themselves. */
export function fixed(value: number, digits: number): string {
  return Number.isFinite(value) ? value.toFixed(digits) : String(value);
}

/** Thousands separators, e.g. 1,441,234. */
export function grouped(value: number): string {
  return Math.round(value).toLocaleString('en-US');
}

/** Adds the input options shared by `score` and `search` (`search` may take --corpus instead of --docs). */
export function addInputOptions(command: Command, docsRequired = true): Command {
  const docs = 'documents: dense [B, L, d] or packed [T, d] (with --doc-offsets or --doc-lengths)';
  return command
    .requiredOption(
      '--queries <spec>',
      "queries: [L, d] (one query) or [Nq, L, d]; path.npy or path.safetensors:name ('-' reads stdin)",
    )
    .addOption(
      docsRequired
        ? new Option('--docs <spec>', docs).makeOptionMandatory()
        : new Option('--docs <spec>', docs),
    )
    .option('--doc-offsets <spec>', 'packed documents: token offsets [B+1] (int32/int64)')
    .option(
      '--doc-lengths <spec>',
      'token counts [B]: of packed documents, or real lengths of dense [B, L, d] ones',
    )
    .option('--doc-scales <spec>', 'int8 documents: one float32 scale per token row (value = int8 x scale)')
    .option(
      '--doc-mean <spec>',
      'centered int8 documents (maxsim quantize --center): the float32 [d] mean (value = int8 x scale + mean)',
    )
    .option('--query-scales <spec>', 'int8 queries: one float32 scale per token row')
    .option(
      '--query-lengths <spec>',
      'real tokens per query [Nq] of [Nq, L, d] queries (the rest is padding)',
    )
    .option(
      '--bf16',
      "read .npy uint16 / int16 ('<u2' / '<i2') arrays as bfloat16 bits (NumPy has no bfloat16)",
    )
    .addOption(new Option('--backend <name>', 'where to score').choices(BACKEND_CHOICES).default('auto'))
    .option('--threads <n>', 'CPU worker threads (0 = all cores)', integerOption(0, MAX_THREADS))
    .option('--no-check-finite', 'skip the scan for NaN / Infinity in the inputs (trusted input)')
    .option(
      '--max-work <n>',
      'refuse inputs whose work (query tokens x document tokens x dim) is above n multiply-adds (default: no limit; 2.5e11 is ~3 s on two cores)',
      parseMaxWork,
    );
}

// ---- 8-bit scoring from the CLI (--dtype int8 | fp8) ----

export type ScoreFormat = 'float' | 'int8' | 'fp8';

/**
 * Every query against every document in the chosen format: 'float' as given, 'int8' with both
 * sides quantized (CPU or CUDA), 'fp8' with the documents quantized to e4m3 on the GPU (queries too,
 * by the scoring call). Queries get one scale per token; float documents one per token or, with
 * scales 'document', one per document. Documents that are int8 already keep theirs.
 */
export async function scoreInFormat(
  queries: TokenMatrix | TokenBatch,
  docs: TokenBatch,
  format: ScoreFormat,
  options: { backend: BackendChoice; threads?: number; scales?: ScaleGranularity; signal?: AbortSignal },
): Promise<ScoreMatrix> {
  const q = queries.kind === 'matrix' ? matrixAsBatch(queries) : queries;
  const { scales, ...run } = options;
  if (format === 'float') return maxsim(q, docs, run);
  if (format === 'int8') {
    const i8 = <T extends TokenBatch>(x: T, s?: ScaleGranularity) =>
      x.dtype === 'int8' ? x : quantize(x, 'int8', { scales: s });
    if (resolveBackend(run.backend) === 'cpu') warnIfInt8Slower(q.dim, '--dtype int8');
    return maxsim(i8(q), i8(docs, scales), run);
  }
  if (options.backend === 'cpu')
    throw new InvalidArgumentError(
      '--backend',
      "'cuda' or 'auto' for --dtype fp8 (fp8 is a GPU format)",
      "'cpu'",
    );
  const why = cudaUnavailableReason();
  if (why) throw new BackendUnavailableError(`--dtype fp8 needs a GPU: ${why}`);
  // the fp8 job runs to its end; an abort meanwhile rejects at once and drops its result
  options.signal?.throwIfAborted();
  return untilAborted(options.signal, cudaScoreFp8Host(q, docs, { scales }));
}

// Large inputs are scored in blocks of documents, so that a long run shows progress (per-document
// scores do not depend on the blocking).
// MAXSIM_SCORE_BLOCK_TOKENS overrides the block size (tests use a small one).
const BLOCK_TOKENS =
  Number(process.env.MAXSIM_SCORE_BLOCK_TOKENS) > 0 ? Number(process.env.MAXSIM_SCORE_BLOCK_TOKENS) : 1 << 21;

/** scoreInFormat, in blocks of documents with progress on stderr when the input is large. */
export async function scoreInBlocks(
  queries: TokenMatrix | TokenBatch,
  docs: TokenBatch,
  format: ScoreFormat,
  options: Parameters<typeof scoreInFormat>[3],
  label = 'score',
): Promise<ScoreMatrix> {
  const tokens = totalTokens(docs);
  if (tokens <= 2 * BLOCK_TOKENS) return scoreInFormat(queries, docs, format, options);
  const rows = queries.kind === 'matrix' ? 1 : queries.count;
  const out = new Float32Array(rows * docs.count);
  const bar = new Progress(label, docs.count);
  let b = 0;
  while (b < docs.count) {
    let end = b;
    let t = 0;
    while (end < docs.count && (end === b || t + docs.lengths[end] <= BLOCK_TOKENS)) t += docs.lengths[end++];
    const block = selectItems(
      docs,
      Array.from({ length: end - b }, (_, i) => b + i),
    );
    const m = await scoreInFormat(queries, block, format, options).catch((e: unknown) => {
      bar.abandon(); // a failed or interrupted run: its one error line follows
      throw e;
    });
    for (let q = 0; q < rows; q++) out.set(m.data.subarray(q * m.cols, (q + 1) * m.cols), q * docs.count + b);
    b = end;
    bar.update(b);
  }
  bar.finish();
  return { data: out, rows, cols: docs.count };
}

/** --scales of score / search: who shares a scale in the quantized documents. */
export function scalesOption(): Option {
  return new Option(
    '--scales <who>',
    'with --dtype int8 | fp8 or --prefilter int8: one scale per document token or per document (faster GPU kernels); default: token for int8 (per document costs it fidelity), document for fp8 (the same fidelity)',
  ).choices(['token', 'document']);
}

/** Refuses --scales where nothing is quantized. */
export function checkScalesUse(scales: string | undefined, quantizing: boolean): void {
  if (scales !== undefined && !quantizing)
    throw new InvalidArgumentError(
      '--scales',
      'used with --dtype int8 | fp8 (or --prefilter int8)',
      `--scales ${scales}`,
    );
}

// float32 spelt as everywhere else too (f32, fp32, float32)
export const FORMAT_CHOICES: readonly string[] = ['f32', 'fp32', 'float32', 'int8', 'fp8'];

/** The --dtype of score / search: f32 (the inputs as they are), int8, fp8. */
export function formatOf(dtype: string | undefined): ScoreFormat {
  return dtype === 'int8' || dtype === 'fp8' ? dtype : 'float';
}

/**
 * A signal that SIGINT (Ctrl-C) aborts, for the long commands (search, corpus build / append): the
 * operation stops at its next block and rejects with an AbortError, which main() reports in one line
 * with exit code 130. A second SIGINT exits at once. dispose() restores the default handling.
 */
export function interruptSignal(): { signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  const onSigint = () => {
    if (controller.signal.aborted) process.exit(INTERRUPTED_EXIT_CODE);
    controller.abort(new DOMException('interrupted (SIGINT)', 'AbortError'));
  };
  process.on('SIGINT', onSigint);
  return { signal: controller.signal, dispose: () => process.off('SIGINT', onSigint) };
}

/** Exit code of a command stopped by SIGINT (128 + 2, as shells report it). */
export const INTERRUPTED_EXIT_CODE = 130;

/** Parses --gpus: 'all' or device indices (0,1). */
export function parseGpus(v: string): 'all' | number[] {
  if (v === 'all') return 'all';
  const list = v.split(',').map((x) => (/^\d+$/.test(x.trim()) ? Number(x) : Number.NaN));
  if (list.length === 0 || list.some((x) => !Number.isInteger(x)))
    throw new InvalidArgumentError('--gpus', "'all' or device indices like 0,1", JSON.stringify(v));
  return list;
}
