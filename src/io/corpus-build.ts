// Building a corpus from .npy / .safetensors files, streamed: documents are read a group at a time,
// so inputs larger than memory work. Packed [T, d] tokens with offsets [B+1] (or lengths [B]), or
// dense [B, L, d] with optional real lengths [B]; optional ids, one per line.

import { checkSignal } from '../abort.js';
import { InvalidArgumentError } from '../errors.js';
import { type DType, raggedBatch, type TokenBatch, type TokenData } from '../tensor.js';
import type { NpyArray } from './array.js';
import { type ArraySource, openArraySource } from './array-source.js';
import { checkDocumentCount } from './budget.js';
import { type CorpusDType, type CorpusInfo, CorpusWriter } from './corpus/index.js';
import { loadArray } from './load.js';
import { readTextFile } from './text-file.js';

export interface BuildFromFilesOptions {
  /** Tokens: packed [T, d] (with docOffsets or docLengths) or dense [B, L, d]. */
  docs: string;
  docOffsets?: string;
  docLengths?: string;
  /** int8 tokens: one float32 scale per token row (then the corpus is int8). */
  docScales?: string;
  /** A text file with one id per document, one per line. */
  ids?: string;
  /** New corpus: its storage dtype (default float16). On append: when given, it must be the corpus's. */
  dtype?: CorpusDType;
  /** Append to the corpus at `out` instead of creating it. */
  append?: boolean;
  out: string;
  checkFinite?: boolean;
  /** Clamp finite values beyond a float16 / bfloat16 corpus's range instead of refusing them. */
  clamp?: boolean;
  /** Milliseconds to wait for another writer of the corpus to finish (default 0: fail at once). */
  waitMs?: number;
  /** Token bytes per group read and written at once (default 64 MiB). */
  groupBytes?: number;
  onProgress?: (documents: number, total: number) => void;
  /**
   * Cancels the build between groups: the writer is aborted (its temporaries removed, the lock
   * released, a new corpus directory removed again), nothing is published and the previous corpus
   * stays as it was; throws (rejects) with the signal's reason, an AbortError. The synchronous
   * buildCorpusFromFiles sees an abort only from code it calls (onProgress); a timer or a SIGINT
   * handler needs buildCorpusFromFilesAsync, which yields to the event loop between groups.
   */
  signal?: AbortSignal;
}

/** A 1-D integer array as float64 values (exact up to 2^53), checked: one typed array, no per-value objects. */
function indexValues(a: NpyArray, name: string): Float64Array {
  if (!['int32', 'int64', 'uint32', 'uint64'].includes(a.dtype))
    throw new InvalidArgumentError(name, 'an integer array (int32 / int64)', a.dtype);
  if (a.shape.length !== 1)
    throw new InvalidArgumentError(name, 'a 1-D array', `shape [${a.shape.join(', ')}]`);
  const src = a.data as ArrayLike<number | bigint>;
  const out = new Float64Array(src.length);
  for (let i = 0; i < src.length; i++) {
    const x = Number(src[i]);
    if (!Number.isSafeInteger(x) || x < 0)
      throw new InvalidArgumentError(`${name}[${i}]`, 'a non-negative integer below 2^53', String(src[i]));
    out[i] = x;
  }
  return out;
}

/** Documents in a group: bounds the per-group metadata even when documents are empty. */
const GROUP_DOCUMENTS = 1 << 16;
/** Per-document bytes the builder and the writer hold: lengths (4), starts (8), segment offsets (8). */
const BUILD_BYTES_PER_DOCUMENT = 20;

function readIds(path: string, count: number): string[] {
  const text = readTextFile(path, '--ids', 'a text file with one id per document, one per line');
  const lines = text.endsWith('\n') ? text.slice(0, -1).split('\n') : text.split('\n');
  if (text.length === 0) lines.length = 0;
  if (lines.length !== count)
    throw new InvalidArgumentError(
      '--ids',
      `${count} lines (one id per document)`,
      `${lines.length} lines in ${path}`,
    );
  return lines.map((l) => l.replace(/\r$/, ''));
}

/** What a build from files made: the corpus, and how many values were clamped (with `clamp`). */
export type BuildResult = CorpusInfo & { clamped: number };

/**
 * buildCorpusFromFiles on the calling thread (blocks it until the corpus is published); from
 * 'maxsim/sync'. `signal` is checked between groups.
 */
export function buildCorpusFromFilesSync(options: BuildFromFilesOptions): BuildResult {
  const signal = checkSignal(options.signal);
  signal?.throwIfAborted();
  const steps = buildSteps(options);
  let step = steps.next();
  while (!step.done) step = signal?.aborted ? steps.throw(signal.reason) : steps.next();
  return step.value;
}

/**
 * Builds (or appends to) a corpus from array files; resolves to the corpus as published (and what was
 * clamped). It yields to the event loop between groups (reads and writes stay synchronous within a
 * group), so timers, I/O and a `signal` aborted by them are served meanwhile.
 */
export async function buildCorpusFromFiles(options: BuildFromFilesOptions): Promise<BuildResult> {
  const signal = checkSignal(options.signal);
  signal?.throwIfAborted();
  const steps = buildSteps(options);
  let step = steps.next();
  while (!step.done) {
    await new Promise<void>((resolve) => setImmediate(resolve));
    step = signal?.aborted ? steps.throw(signal.reason) : steps.next();
  }
  return step.value;
}

/** Per document: its token count and its first token row in the input. */
interface Layout {
  count: number;
  dim: number;
  lengthOf: (i: number) => number;
  rowOf: (i: number) => number;
}

function layoutOf(shape: readonly number[], options: BuildFromFilesOptions): Layout {
  if (shape.length === 2) return packedLayout(shape, options);
  if (shape.length === 3) return denseLayout(shape, options);
  throw new InvalidArgumentError(
    '--docs',
    'packed [T, d] or dense [B, L, d] tokens',
    `shape [${shape.join(', ')}]`,
  );
}

// Packed [T, d] tokens: documents by --doc-offsets, or by --doc-lengths summing to T.
function packedLayout(shape: readonly number[], options: BuildFromFilesOptions): Layout {
  let count: number;
  const dim = shape[1];
  let starts: Float64Array;
  if (options.docOffsets !== undefined) {
    const off = indexValues(loadArray(options.docOffsets, { argument: '--doc-offsets' }), '--doc-offsets');
    if (off.length < 1 || off[0] !== 0 || off[off.length - 1] !== shape[0])
      throw new InvalidArgumentError(
        '--doc-offsets',
        `B+1 offsets from 0 to ${shape[0]} (the token count of --docs)`,
        off.length < 1 ? 'an empty array' : `${off.length} offsets from ${off[0]} to ${off[off.length - 1]}`,
      );
    for (let i = 0; i + 1 < off.length; i++)
      if (off[i + 1] < off[i] || off[i + 1] - off[i] > 0x7fffffff)
        throw new InvalidArgumentError(
          '--doc-offsets',
          'non-decreasing offsets, at most 2^31 - 1 tokens apart',
          `offsets[${i}] = ${off[i]}, offsets[${i + 1}] = ${off[i + 1]}`,
        );
    count = off.length - 1;
    checkDocumentCount(count, BUILD_BYTES_PER_DOCUMENT, '--doc-offsets');
    starts = off;
  } else if (options.docLengths !== undefined) {
    const lens = indexValues(loadArray(options.docLengths, { argument: '--doc-lengths' }), '--doc-lengths');
    count = lens.length;
    checkDocumentCount(count, BUILD_BYTES_PER_DOCUMENT, '--doc-lengths');
    starts = new Float64Array(count + 1);
    for (let i = 0; i < count; i++) {
      if (lens[i] > 0x7fffffff)
        throw new InvalidArgumentError(`--doc-lengths[${i}]`, 'at most 2^31 - 1 tokens', String(lens[i]));
      starts[i + 1] = starts[i] + lens[i];
    }
    if (starts[count] !== shape[0])
      throw new InvalidArgumentError(
        '--doc-lengths',
        `lengths summing to ${shape[0]} tokens (the rows of --docs)`,
        `a sum of ${starts[count]}`,
      );
  } else {
    throw new InvalidArgumentError(
      '--doc-offsets',
      'offsets (or --doc-lengths) for packed [T, d] documents',
      'none',
    );
  }
  return { count, dim, lengthOf: (i) => starts[i + 1] - starts[i], rowOf: (i) => starts[i] };
}

// Dense [B, L, d] tokens: every document L tokens, or --doc-lengths of them (the rest is padding).
function denseLayout(shape: readonly number[], options: BuildFromFilesOptions): Layout {
  const [b, l, dim] = shape;
  checkDocumentCount(b, BUILD_BYTES_PER_DOCUMENT, '--docs');
  if (options.docLengths !== undefined) {
    const lens = indexValues(loadArray(options.docLengths, { argument: '--doc-lengths' }), '--doc-lengths');
    if (lens.length !== b)
      throw new InvalidArgumentError(
        '--doc-lengths',
        `${b} lengths (one per document)`,
        `${lens.length} lengths`,
      );
    const typed = new Int32Array(b);
    for (let i = 0; i < b; i++) {
      if (lens[i] > l)
        throw new InvalidArgumentError(
          `--doc-lengths[${i}]`,
          `a length in [0, ${l}] (the padded length)`,
          String(lens[i]),
        );
      typed[i] = lens[i];
    }
    return { count: b, dim, lengthOf: (i) => typed[i], rowOf: (i) => i * l };
  }
  return { count: b, dim, lengthOf: () => l, rowOf: (i) => i * l };
}

// Documents i..j-1 as one ragged batch: one read when their rows are contiguous, else one per document.
function readGroup(
  source: ArraySource,
  scaleSource: ArraySource | undefined,
  layout: Layout,
  dense: boolean,
  range: { i: number; j: number; tokens: number },
  options: BuildFromFilesOptions,
): TokenBatch {
  const { dim, lengthOf, rowOf } = layout;
  const { i, j, tokens } = range;
  // Dense inputs hold padding after short documents: read each document's rows alone then.
  let contiguous = true;
  if (dense) for (let x = i; x < j && contiguous; x++) contiguous = lengthOf(x) === source.shape[1];
  const parts: TokenData[] = [];
  const scaleParts: Float32Array[] = [];
  if (contiguous) parts.push(source.read(rowOf(i) * dim, tokens * dim) as TokenData);
  else for (let x = i; x < j; x++) parts.push(source.read(rowOf(x) * dim, lengthOf(x) * dim) as TokenData);
  if (scaleSource) {
    if (contiguous) scaleParts.push(scaleSource.read(rowOf(i), tokens) as Float32Array);
    else for (let x = i; x < j; x++) scaleParts.push(scaleSource.read(rowOf(x), lengthOf(x)) as Float32Array);
  }
  const data = parts.length === 1 ? parts[0] : concat(parts);
  const scales = scaleSource
    ? scaleParts.length === 1
      ? scaleParts[0]
      : (concat(scaleParts) as Float32Array)
    : undefined;
  const offsets = new Float64Array(j - i + 1);
  for (let x = i; x < j; x++) offsets[x - i + 1] = offsets[x - i] + lengthOf(x);
  return raggedBatch(data, offsets, {
    dim,
    dtype: source.dtype as DType,
    scales,
    checkFinite: options.checkFinite ?? true,
  });
}

// The build, one group per step: the driver resumes it, or throws the abort reason in at a yield
// (the writer's catch aborts it, the finally closes the inputs).
function* buildSteps(options: BuildFromFilesOptions): Generator<void, BuildResult, void> {
  const source = openArraySource(options.docs, '--docs');
  let scaleSource: (ArraySource & { close(): void }) | undefined;
  try {
    const { shape, dtype } = source;
    if (!['float32', 'float16', 'bfloat16', 'int8'].includes(dtype))
      throw new InvalidArgumentError('--docs', 'float32, float16, bfloat16 or int8 tokens', dtype);
    if ((dtype === 'int8') !== (options.docScales !== undefined))
      throw new InvalidArgumentError(
        '--doc-scales',
        dtype === 'int8' ? 'per-token float32 scales for int8 tokens' : 'no scales for float tokens',
        dtype === 'int8' ? 'none' : options.docScales!,
      );
    scaleSource =
      options.docScales !== undefined ? openArraySource(options.docScales, '--doc-scales') : undefined;
    const layout = layoutOf(shape, options);
    const { count, dim, lengthOf } = layout;
    const ids = options.ids !== undefined ? readIds(options.ids, count) : undefined;
    if (scaleSource) {
      const tokenRows = shape.length === 2 ? shape[0] : shape[0] * shape[1];
      if (scaleSource.dtype !== 'float32' || scaleSource.shape.reduce((a, b) => a * b, 1) !== tokenRows)
        throw new InvalidArgumentError(
          '--doc-scales',
          `${tokenRows} float32 scales (one per token row)`,
          `${scaleSource.dtype} [${scaleSource.shape.join(', ')}]`,
        );
    }
    const writer = options.append
      ? CorpusWriter.append(options.out, { waitMs: options.waitMs, clamp: options.clamp })
      : CorpusWriter.create(options.out, {
          waitMs: options.waitMs,
          clamp: options.clamp,
          dim,
          dtype: dtype === 'int8' ? 'int8' : (options.dtype ?? 'float16'),
          ids: ids !== undefined,
        });
    try {
      // an append stores what the corpus stores: a different dtype asked for is refused, not ignored
      if (options.append && options.dtype !== undefined && options.dtype !== writer.dtype)
        throw new InvalidArgumentError(
          '--dtype',
          `the corpus's dtype, ${writer.dtype} (an append stores tokens as the corpus does)`,
          options.dtype,
        );
      if (writer.dim !== dim)
        throw new InvalidArgumentError(
          '--docs',
          `tokens of dim ${writer.dim} (the corpus dimension)`,
          `dim ${dim}`,
        );
      const elem = dtype === 'float32' ? 4 : dtype === 'int8' ? 1 : 2;
      const group = Math.max(1, Math.floor((options.groupBytes ?? 64 * 1024 * 1024) / (dim * elem)));
      // every id at once: the error counts all duplicates and names their lines, not one group's
      if (ids) writer.checkIdsAhead(ids);
      let i = 0;
      while (i < count) {
        // A group: consecutive documents up to `group` tokens (at least one document).
        let j = i;
        let tokens = 0;
        while (j < count && j - i < GROUP_DOCUMENTS && (j === i || tokens + lengthOf(j) <= group))
          tokens += lengthOf(j++);
        const batch = readGroup(source, scaleSource, layout, shape.length === 3, { i, j, tokens }, options);
        writer.add(batch, ids?.slice(i, j));
        i = j;
        options.onProgress?.(i, count);
        yield;
      }
      const clamped = writer.clamped;
      return { ...writer.commit(), clamped };
    } catch (e) {
      writer.abort();
      throw e;
    }
  } finally {
    source.close();
    scaleSource?.close();
  }
}

function concat(parts: TokenData[]): TokenData {
  const total = parts.reduce((a, p) => a + p.length, 0);
  const out = new (parts[0].constructor as new (n: number) => TokenData)(total);
  let at = 0;
  for (const p of parts) {
    (out as Float32Array).set(p as Float32Array, at);
    at += p.length;
  }
  return out;
}
