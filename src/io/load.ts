// Loading token matrices and batches from .npy / .safetensors files (used by the CLI).
//
// Saving document embeddings from Python. `embs` is a list of [L_i, d] arrays, one per document: PyLate's
// `model.encode(docs, is_query=False)`, or colpali-engine outputs split per item with padding removed
// (torch tensors: `t.float().cpu().numpy()`, since NumPy has no bfloat16):
//
//   import numpy as np
//   from safetensors.numpy import save_file
//
//   save_file({
//       "embeddings": np.concatenate(embs).astype(np.float16),                 # packed [T, d]
//       "offsets": np.cumsum([0] + [len(e) for e in embs]).astype(np.int64),  # [B + 1]
//   }, "docs.safetensors")
//
// Document b is rows offsets[b] .. offsets[b+1] of embeddings. Load it with
// arrayToDocs(loadArray('docs.safetensors:embeddings'), { offsets: loadArray('docs.safetensors:offsets') }).
// A padded [B, L, d] array (np.save('docs.npy', arr)) with optional lengths [B] works too.

import * as fs from 'node:fs';
import { FormatError, InvalidArgumentError } from '../errors.js';
import {
  type DType,
  denseBatch,
  describeNumber,
  isTokenMatrix,
  matrixAsBatch,
  raggedBatch,
  type TokenBatch,
  type TokenData,
  type TokenMatrix,
  tokenMatrix,
  type ValidationOptions,
} from '../tensor.js';
import { formatShape, type NpyArray } from './array.js';
import { checkDocumentCount } from './budget.js';
import { type NpyReadOptions, parseNpy, readNpy } from './npy.js';
import { openSafetensors, parseSafetensors } from './safetensors.js';
import { describePath } from './text-file.js';

export type { NpyArray } from './array.js';

export interface LoadArrayOptions extends NpyReadOptions {
  /** How errors name the spec (e.g. '--docs'); default 'spec'. */
  argument?: string;
}

const NPY_MAGIC = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59];
// a zip archive: what np.savez writes (.npz), named as such rather than as a bad safetensors header
const ZIP_MAGIC = [0x50, 0x4b, 0x03, 0x04];

function npzError(name: string): FormatError {
  return new FormatError(
    name,
    "a .npz archive (NumPy's zip of arrays) is not read: save each array with np.save(...) as .npy, or as one .safetensors file",
  );
}

function isFile(path: string): boolean {
  try {
    return fs.statSync(path).isFile();
  } catch {
    return false;
  }
}

/** The spec that reads standard input: '-' (or '-:tensorName' for a safetensors stream). */
export const STDIN_SPEC = '-';

/**
 * Splits `path.npy` / `path.safetensors[:tensorName]` into the file and the tensor name. A whole
 * spec that names a file wins, so paths containing ':' still work. '-' and '-:name' are standard input.
 */
export function resolveArraySpec(spec: string, argument = 'spec'): { path: string; tensor?: string } {
  if (typeof spec !== 'string')
    throw new InvalidArgumentError(
      argument,
      'a file spec: path.npy or path.safetensors[:tensorName]',
      typeof spec,
    );
  if (spec === STDIN_SPEC) return { path: STDIN_SPEC };
  if (spec.startsWith(`${STDIN_SPEC}:`) && !isFile(spec)) return { path: STDIN_SPEC, tensor: spec.slice(2) };
  if (isFile(spec)) return { path: spec };
  const colon = spec.lastIndexOf(':');
  if (colon > 0 && isFile(spec.slice(0, colon)))
    return { path: spec.slice(0, colon), tensor: spec.slice(colon + 1) };
  throw new InvalidArgumentError(
    argument,
    "an existing file: path.npy or path.safetensors[:tensorName] ('-' for standard input)",
    `${JSON.stringify(spec)} (${describePath(spec)})`,
  );
}

// Standard input is read once and kept, so several specs ('-:embeddings', '-:offsets') can name
// tensors of one safetensors stream.
let stdinBytes: Uint8Array | undefined;
function readStdin(): Uint8Array {
  if (stdinBytes === undefined) {
    const chunks: Buffer[] = [];
    const chunk = Buffer.alloc(1 << 20);
    for (;;) {
      let n: number;
      try {
        n = fs.readSync(0, chunk, 0, chunk.length, null);
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if (code === 'EAGAIN') continue; // a non-blocking pipe with nothing yet
        if (code === 'EOF') break;
        throw e;
      }
      if (n === 0) break;
      chunks.push(Buffer.from(chunk.subarray(0, n)));
    }
    const all = Buffer.concat(chunks);
    stdinBytes = new Uint8Array(all.buffer, all.byteOffset, all.byteLength);
  }
  return stdinBytes;
}

function fileMagic(path: string): 'npy' | 'zip' | undefined {
  const fd = fs.openSync(path, 'r');
  try {
    const head = new Uint8Array(NPY_MAGIC.length);
    const n = fs.readSync(fd, head, 0, head.length, 0);
    if (n === head.length && NPY_MAGIC.every((b, i) => head[i] === b)) return 'npy';
    if (n >= ZIP_MAGIC.length && ZIP_MAGIC.every((b, i) => head[i] === b)) return 'zip';
    return undefined;
  } finally {
    fs.closeSync(fd);
  }
}

function pickTensor(
  names: string[],
  tensor: string | undefined,
  path: string,
  spec: string,
  argument: string,
): string {
  const listed = [...names]
    .sort()
    .map((n) => JSON.stringify(n))
    .join(', ');
  if (tensor === undefined) {
    if (names.length === 1) return names[0];
    if (names.length === 0) throw new FormatError(path, 'the safetensors file holds no tensors');
    throw new InvalidArgumentError(
      argument,
      `a tensor name (${path}:NAME) since the file holds ${names.length} tensors: ${listed}`,
      JSON.stringify(spec),
    );
  }
  if (!names.includes(tensor)) {
    throw new InvalidArgumentError(
      argument,
      `a tensor of ${path}, one of ${listed || '(none)'}`,
      JSON.stringify(tensor),
    );
  }
  return tensor;
}

/**
 * Loads `path.npy` or `path.safetensors:tensorName` ('-' reads standard input). The `:tensorName`
 * may be left out when the safetensors file holds exactly one tensor. The format is recognized by
 * content, not extension. Files are read straight into the array (a .npy from its header on, a
 * safetensors file only the tensor asked for), so arrays beyond 4 GiB load too.
 */
export function loadArray(spec: string, opts: LoadArrayOptions = {}): NpyArray {
  const argument = opts.argument ?? 'spec';
  const { path, tensor } = resolveArraySpec(spec, argument);
  try {
    return loadResolved(spec, path, tensor, argument, opts);
  } catch (e) {
    // a system error (unreadable file, I/O error) named with the argument, not as a raw message
    const code = (e as NodeJS.ErrnoException)?.code;
    if (typeof code === 'string' && /^E[A-Z]+$/.test(code))
      throw new InvalidArgumentError(
        argument,
        'a readable file',
        `${JSON.stringify(spec)} (${code}: ${(e as Error).message.replace(/^[A-Z]+: /, '').split(',')[0]})`,
      );
    throw e;
  }
}

function loadResolved(
  spec: string,
  path: string,
  tensor: string | undefined,
  argument: string,
  opts: LoadArrayOptions,
): NpyArray {
  const name = path === STDIN_SPEC ? 'standard input' : path;
  const noSuffix = () =>
    new InvalidArgumentError(argument, `no ':name' suffix (${name} is a .npy file holding one array)`, spec);
  if (path === STDIN_SPEC) {
    const bytes = readStdin();
    if (NPY_MAGIC.every((b, i) => bytes[i] === b)) {
      if (tensor !== undefined) throw noSuffix();
      return parseNpy(bytes, name, opts);
    }
    if (ZIP_MAGIC.every((b, i) => bytes[i] === b)) throw npzError(name);
    const file = parseSafetensors(bytes, name);
    return file.tensors.get(pickTensor([...file.tensors.keys()], tensor, name, spec, argument))!;
  }
  const magic = fileMagic(path);
  if (magic === 'zip' || /\.npz$/i.test(path)) throw npzError(path);
  if (magic === 'npy' || /\.npy$/i.test(path)) {
    if (tensor !== undefined) throw noSuffix();
    return readNpy(path, opts);
  }
  const file = openSafetensors(path);
  const chosen = pickTensor(
    file.entries.map((e) => e.name),
    tensor,
    path,
    spec,
    argument,
  );
  return file.read(file.entries.find((e) => e.name === chosen)!);
}

// ---- arrays -> token matrices / batches ----

export interface TokenArrayOptions extends ValidationOptions {
  /** int8 only: per-token float32 (or float64) scales, one per token row (padding rows included). */
  scales?: NpyArray;
}

export interface DocsArrayOptions extends TokenArrayOptions {
  /** Packed [T, d] only: token offsets [B+1] (int32/int64/uint32/uint64). */
  offsets?: NpyArray;
  /** Dense `[B, L, d]`: real tokens per document `[B]`. Packed `[T, d]`: an alternative to offsets. */
  lengths?: NpyArray;
}

const TOKEN_DTYPES: readonly string[] = ['float32', 'float16', 'bfloat16', 'int8'];
const INDEX_DTYPES: readonly string[] = ['int32', 'int64', 'uint32', 'uint64'];

function describeArray(arr: NpyArray): string {
  return `${arr.dtype} array of shape ${formatShape(arr.shape)}`;
}

function checkTokenArray(arr: NpyArray, name: string, expectedShape: string, ranks: readonly number[]) {
  if (!TOKEN_DTYPES.includes(arr.dtype)) {
    throw new InvalidArgumentError(
      name,
      `float32, float16, bfloat16 or int8 ${expectedShape} embeddings`,
      describeArray(arr),
    );
  }
  if (!ranks.includes(arr.shape.length)) {
    throw new InvalidArgumentError(name, `a ${expectedShape} array`, describeArray(arr));
  }
  const dim = arr.shape[arr.shape.length - 1];
  if (dim < 1)
    throw new InvalidArgumentError(name, `a ${expectedShape} array with d >= 1`, describeArray(arr));
}

function indexArray(
  arr: NpyArray,
  name: string,
  what: string,
): Int32Array | Uint32Array | BigInt64Array | BigUint64Array {
  if (!INDEX_DTYPES.includes(arr.dtype) || arr.shape.length !== 1) {
    throw new InvalidArgumentError(
      name,
      `a 1-D integer array of ${what} (int32/int64/uint32/uint64; use .astype(np.int64))`,
      describeArray(arr),
    );
  }
  return arr.data as Int32Array | Uint32Array | BigInt64Array | BigUint64Array;
}

function toNumbers(
  data: Int32Array | Uint32Array | BigInt64Array | BigUint64Array,
  name: string,
): ArrayLike<number> {
  if (data instanceof Int32Array || data instanceof Uint32Array) return data;
  const out = new Float64Array(data.length);
  for (let i = 0; i < data.length; i++) {
    const v = data[i];
    if (v < 0n || v > BigInt(Number.MAX_SAFE_INTEGER)) {
      throw new InvalidArgumentError(`${name}[${i}]`, 'a non-negative integer below 2^53', describeNumber(v));
    }
    out[i] = Number(v);
  }
  return out;
}

function toScales(
  arr: NpyArray | undefined,
  dtype: DType,
  tokens: number,
  name: string,
): Float32Array | undefined {
  if (dtype !== 'int8') {
    if (arr !== undefined)
      throw new InvalidArgumentError(`${name} scales`, 'no scales for float embeddings', describeArray(arr));
    return undefined;
  }
  if (arr === undefined) {
    throw new InvalidArgumentError(
      `${name} scales`,
      `${tokens} per-token float32 scales for int8 embeddings`,
      'none',
    );
  }
  if ((arr.dtype !== 'float32' && arr.dtype !== 'float64') || arr.data.length !== tokens) {
    throw new InvalidArgumentError(
      `${name} scales`,
      `${tokens} float32 scales (one per token row of the int8 embeddings)`,
      describeArray(arr),
    );
  }
  return arr.data instanceof Float32Array ? arr.data : Float32Array.from(arr.data as Float64Array);
}

/** Runs a tensor.ts constructor, prefixing argument names in its errors with `name` (e.g. 'docs offsets[3]'). */
function named<T>(name: string, build: () => T): T {
  try {
    return build();
  } catch (e) {
    if (e instanceof InvalidArgumentError)
      throw new InvalidArgumentError(`${name} ${e.argument}`, e.expected, e.received);
    throw e;
  }
}

/** [L, d] -> TokenMatrix. */
export function arrayToMatrix(arr: NpyArray, name: string, opts: TokenArrayOptions = {}): TokenMatrix {
  checkTokenArray(arr, name, '[L, d]', [2]);
  const [length, dim] = arr.shape;
  const scales = toScales(opts.scales, arr.dtype as DType, length, name);
  return named(name, () =>
    tokenMatrix(arr.data as TokenData, length, dim, {
      dtype: arr.dtype as DType,
      scales,
      checkFinite: opts.checkFinite,
    }),
  );
}

/** [L, d] -> TokenMatrix (one query); [Nq, L, d] -> dense TokenBatch (with optional lengths [Nq]). */
export function arrayToQueries(
  arr: NpyArray,
  name: string,
  opts: TokenArrayOptions & { lengths?: NpyArray } = {},
): TokenMatrix | TokenBatch {
  checkTokenArray(arr, name, '[L, d] or [Nq, L, d]', [2, 3]);
  if (arr.shape.length === 2) {
    if (opts.lengths !== undefined) {
      throw new InvalidArgumentError(
        `${name} lengths`,
        'no lengths for a single [L, d] query',
        describeArray(opts.lengths),
      );
    }
    return arrayToMatrix(arr, name, opts);
  }
  return toDense(arr, name, opts);
}

/** Per-document bytes a batch and its scoring hold: start (8), length (4), one score (4). */
const BYTES_PER_DOCUMENT = 16;

function toDense(arr: NpyArray, name: string, opts: DocsArrayOptions): TokenBatch {
  const [count, length, dim] = arr.shape;
  // a 128-byte header may claim billions of (empty) documents: size their metadata first
  checkDocumentCount(count, BYTES_PER_DOCUMENT, name);
  if (opts.offsets !== undefined) {
    throw new InvalidArgumentError(
      `${name} offsets`,
      'no offsets for a dense [B, L, d] array (use lengths)',
      describeArray(opts.offsets),
    );
  }
  let lengths: ArrayLike<number> | undefined;
  if (opts.lengths !== undefined) {
    lengths = toNumbers(
      indexArray(opts.lengths, `${name} lengths`, `${count} token counts`),
      `${name} lengths`,
    );
  }
  const scales = toScales(opts.scales, arr.dtype as DType, count * length, name);
  return named(name, () =>
    denseBatch(arr.data as TokenData, {
      dtype: arr.dtype as DType,
      count,
      length,
      dim,
      lengths,
      scales,
      checkFinite: opts.checkFinite,
    }),
  );
}

/**
 * Documents: dense [B, L, d] (optional lengths [B]), or packed [T, d] with offsets [B+1] (or lengths [B],
 * from which offsets are the running sum).
 */
export function arrayToDocs(arr: NpyArray, opts: DocsArrayOptions = {}, name = 'docs'): TokenBatch {
  checkTokenArray(arr, name, '[B, L, d] or packed [T, d]', [2, 3]);
  if (arr.shape.length === 3) return toDense(arr, name, opts);
  const [tokens, dim] = arr.shape;
  let offsets: Int32Array | Uint32Array | BigInt64Array | BigUint64Array | Float64Array;
  if (opts.offsets !== undefined) {
    if (opts.lengths !== undefined) {
      throw new InvalidArgumentError(
        `${name} lengths`,
        'either offsets or lengths for packed [T, d] documents, not both',
        'both',
      );
    }
    offsets = indexArray(opts.offsets, `${name} offsets`, 'B+1 token offsets');
    checkDocumentCount(offsets.length - 1, BYTES_PER_DOCUMENT, `${name} offsets`);
  } else if (opts.lengths !== undefined) {
    const lengthsArray = indexArray(opts.lengths, `${name} lengths`, 'B token counts');
    checkDocumentCount(lengthsArray.length, BYTES_PER_DOCUMENT, `${name} lengths`);
    const lengths = toNumbers(lengthsArray, `${name} lengths`);
    // checked as lengths, so that errors speak of lengths (offsets are their running sum)
    offsets = new Float64Array(lengths.length + 1);
    for (let b = 0; b < lengths.length; b++) {
      const l = lengths[b];
      if (l < 0)
        throw new InvalidArgumentError(`${name} lengths[${b}]`, 'a non-negative token count', String(l));
      if (l > 0x7fffffff)
        throw new InvalidArgumentError(
          `${name} lengths[${b}]`,
          'fewer than 2^31 tokens per document',
          describeNumber(l),
        );
      offsets[b + 1] = offsets[b] + l;
      if (offsets[b + 1] > tokens)
        throw new InvalidArgumentError(
          `${name} lengths`,
          `token counts summing to ${tokens} (the rows of the packed [T, d] array)`,
          `a sum above ${tokens} by lengths[${b}]`,
        );
    }
    if (offsets[lengths.length] !== tokens)
      throw new InvalidArgumentError(
        `${name} lengths`,
        `token counts summing to ${tokens} (the rows of the packed [T, d] array)`,
        `a sum of ${offsets[lengths.length]}`,
      );
  } else {
    throw new InvalidArgumentError(
      `${name} offsets`,
      'offsets [B+1] (or lengths [B]) for packed [T, d] documents, or a dense [B, L, d] array',
      'none',
    );
  }
  const scales = toScales(opts.scales, arr.dtype as DType, tokens, name);
  return named(name, () =>
    raggedBatch(arr.data as TokenData, offsets, {
      dtype: arr.dtype as DType,
      dim,
      scales,
      checkFinite: opts.checkFinite,
    }),
  );
}

// ---- token batches -> arrays (for writing) ----

export interface BatchArrays {
  /** Packed [T, d] real tokens (padding dropped). */
  embeddings: NpyArray;
  /** int64 [B+1]: item b is rows offsets[b] .. offsets[b+1]. */
  offsets: NpyArray;
  /** int8 only: float32 [T]. */
  scales?: NpyArray;
}

/** Packed embeddings + int64 offsets (+ scales for int8); zero-copy when the items are already contiguous. */
export function batchToArrays(input: TokenBatch | TokenMatrix): BatchArrays {
  const batch = isTokenMatrix(input) ? matrixAsBatch(input) : input;
  const { count, dim, starts, lengths } = batch;
  const offsets = new BigInt64Array(count + 1);
  let contiguous = true;
  let total = 0;
  for (let b = 0; b < count; b++) {
    if (starts[b] !== starts[0] + total) contiguous = false;
    total += lengths[b];
    offsets[b + 1] = BigInt(total);
  }
  const first = count > 0 ? starts[0] : 0;
  let data: TokenData;
  let scales: Float32Array | undefined;
  if (contiguous) {
    data = batch.data.subarray(first * dim, (first + total) * dim) as TokenData;
    scales = batch.scales?.subarray(first, first + total);
  } else {
    const Ctor = batch.data.constructor as new (length: number) => TokenData;
    data = new Ctor(total * dim);
    scales = batch.scales ? new Float32Array(total) : undefined;
    let at = 0;
    for (let b = 0; b < count; b++) {
      const s = starts[b];
      const l = lengths[b];
      (data as Float32Array).set((batch.data as Float32Array).subarray(s * dim, (s + l) * dim), at * dim);
      if (scales && batch.scales) scales.set(batch.scales.subarray(s, s + l), at);
      at += l;
    }
  }
  const result: BatchArrays = {
    embeddings: { dtype: batch.dtype, shape: [total, dim], data },
    offsets: { dtype: 'int64', shape: [count + 1], data: offsets },
  };
  if (scales) result.scales = { dtype: 'float32', shape: [total], data: scales };
  return result;
}
