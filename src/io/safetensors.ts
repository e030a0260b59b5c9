// safetensors reader and writer (https://github.com/huggingface/safetensors).
//
// Layout: u64 LE header length N, N bytes of UTF-8 JSON
//   { "<name>": { "dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end] }, "__metadata__": { ... } }
// then the byte buffer; offsets are relative to the start of the buffer. Validation follows the reference
// implementation: tensors tile the buffer exactly (no gaps, no overlap, nothing left over).

import * as fs from 'node:fs';
import { FormatError, InvalidArgumentError } from '../errors.js';
import {
  type ArrayDType,
  arrayBytes,
  checkArray,
  concatBytes,
  formatShape,
  itemSize,
  type NpyArray,
  readFileBytes,
  shapeProduct,
  viewAs,
  writeFileChunks,
} from './array.js';
import { fileRange } from './npy.js';

export type { ArrayData, ArrayDType, NpyArray } from './array.js';

export interface SafetensorsFile {
  /** Tensors in file order (by data offset). Data views the input bytes when aligned, else is a copy. */
  tensors: Map<string, NpyArray>;
  metadata: Record<string, string>;
}

/** Same limit as the reference implementation. */
export const SAFETENSORS_MAX_HEADER_BYTES = 100_000_000;
const METADATA_KEY = '__metadata__';

const CODE_TO_DTYPE: Record<string, ArrayDType> = {
  F32: 'float32',
  F16: 'float16',
  BF16: 'bfloat16',
  I8: 'int8',
  I32: 'int32',
  I64: 'int64',
  U32: 'uint32',
  U64: 'uint64',
  F64: 'float64',
};

const DTYPE_TO_CODE: Record<ArrayDType, string> = {
  float32: 'F32',
  float16: 'F16',
  bfloat16: 'BF16',
  int8: 'I8',
  int32: 'I32',
  int64: 'I64',
  uint32: 'U32',
  uint64: 'U64',
  float64: 'F64',
};

/** Position in the reference implementation's Dtype enum, which is ordered by increasing alignment. */
const WRITE_RANK: Record<ArrayDType, number> = {
  int8: 0,
  float16: 1,
  bfloat16: 2,
  int32: 3,
  uint32: 4,
  float32: 5,
  float64: 6,
  int64: 7,
  uint64: 8,
};

type Entry = SafetensorsEntry;

function isPlainObject(x: unknown): x is Record<string, unknown> {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

function clip(text: string, max = 120): string {
  return text.length <= max ? text : `${text.slice(0, max)}...`;
}

function describeJson(x: unknown): string {
  return clip(JSON.stringify(x) ?? String(x));
}

function parseEntry(file: string, name: string, info: unknown): Entry {
  const where = `tensor ${JSON.stringify(clip(name))}`;
  if (!isPlainObject(info))
    throw new FormatError(file, `${where}: expected an object, got ${describeJson(info)}`);
  const code = info.dtype;
  if (typeof code !== 'string' || !Object.hasOwn(CODE_TO_DTYPE, code)) {
    throw new FormatError(
      file,
      `${where}: unsupported dtype ${describeJson(code)}; supported: ${Object.keys(CODE_TO_DTYPE).join(', ')}`,
    );
  }
  const dtype = CODE_TO_DTYPE[code];
  const shape = info.shape;
  if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
    throw new FormatError(
      file,
      `${where}: shape must be an array of non-negative integers, got ${describeJson(shape)}`,
    );
  }
  const offsets = info.data_offsets;
  if (
    !Array.isArray(offsets) ||
    offsets.length !== 2 ||
    !offsets.every((o) => Number.isSafeInteger(o) && o >= 0)
  ) {
    throw new FormatError(
      file,
      `${where}: data_offsets must be [begin, end] of non-negative integers, got ${describeJson(offsets)}`,
    );
  }
  const [begin, end] = offsets as [number, number];
  if (end < begin)
    throw new FormatError(file, `${where}: data_offsets [${begin}, ${end}] end before they begin`);
  const count = shapeProduct(shape as number[]);
  const need = count === undefined ? undefined : count * itemSize(dtype);
  if (need !== end - begin) {
    throw new FormatError(
      file,
      `${where}: shape ${formatShape(shape as number[])} of ${code} needs ${need ?? 'more than 2^53'} bytes ` +
        `but data_offsets [${begin}, ${end}] span ${end - begin}`,
    );
  }
  return { name, dtype, shape: shape as number[], begin, end };
}

/** A tensor's place in a safetensors file: data bytes [begin, end) of the buffer after the header. */
export interface SafetensorsEntry {
  name: string;
  dtype: ArrayDType;
  shape: number[];
  begin: number;
  end: number;
}

/**
 * The layout of a safetensors file from its first bytes (at least 8 + the header) and its total
 * size: the tensors, the metadata, and the file offset where the data buffer starts.
 */
export function parseSafetensorsLayout(
  bytes: Uint8Array,
  name: string,
  fileSize: number,
): { entries: SafetensorsEntry[]; metadata: Record<string, string>; bufferStart: number } {
  if (!(bytes instanceof Uint8Array)) {
    throw new InvalidArgumentError('bytes', 'a Uint8Array', bytes === null ? 'null' : typeof bytes);
  }
  if (bytes.length < 8) {
    throw new FormatError(
      name,
      `too short for a safetensors file (${bytes.length} bytes; the header length alone is 8)`,
    );
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const declared = view.getBigUint64(0, true);
  if (declared > BigInt(SAFETENSORS_MAX_HEADER_BYTES)) {
    throw new FormatError(
      name,
      `the safetensors header length is ${declared} bytes, more than the ${SAFETENSORS_MAX_HEADER_BYTES} allowed ` +
        '(not a safetensors file?)',
    );
  }
  const headerLength = Number(declared);
  if (8 + headerLength > bytes.length) {
    throw new FormatError(
      name,
      `the safetensors header length is ${headerLength} bytes but only ${bytes.length - 8} follow (truncated file?)`,
    );
  }
  const headerBytes = bytes.subarray(8, 8 + headerLength);
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(headerBytes);
  } catch {
    throw new FormatError(name, 'the safetensors header is not valid UTF-8');
  }
  // The reference implementation insists on '{' first; padding is allowed only at the end.
  if (!text.startsWith('{')) throw new FormatError(name, "the safetensors header does not start with '{'");
  checkHeaderStructure(name, text);
  let header: unknown;
  try {
    header = JSON.parse(text);
  } catch (e) {
    throw new FormatError(
      name,
      `the safetensors header is not valid JSON (${e instanceof Error ? e.message : e})`,
    );
  }
  if (!isPlainObject(header)) throw new FormatError(name, 'the safetensors header is not a JSON object');

  const metadata: Record<string, string> = {};
  const entries: Entry[] = [];
  for (const [key, info] of Object.entries(header)) {
    if (key === METADATA_KEY) {
      if (info === null) continue;
      if (!isPlainObject(info)) throw new FormatError(name, `${METADATA_KEY} must be an object of strings`);
      for (const [k, v] of Object.entries(info)) {
        if (typeof v !== 'string') {
          throw new FormatError(
            name,
            `${METADATA_KEY}[${JSON.stringify(clip(k))}] must be a string, got ${describeJson(v)}`,
          );
        }
        // defineProperty: a key named "__proto__" must stay a key.
        Object.defineProperty(metadata, k, {
          value: v,
          enumerable: true,
          writable: true,
          configurable: true,
        });
      }
      continue;
    }
    entries.push(parseEntry(name, key, info));
  }

  entries.sort((a, b) => a.begin - b.begin || a.end - b.end);
  const bufferStart = 8 + headerLength;
  const bufferLength = fileSize - bufferStart;
  let covered = 0;
  let previous: Entry | undefined;
  for (const e of entries) {
    const where = `tensor ${JSON.stringify(clip(e.name))}`;
    if (e.begin < covered) {
      throw new FormatError(
        name,
        `${where}: data_offsets [${e.begin}, ${e.end}] overlap tensor ${JSON.stringify(clip(previous!.name))} ` +
          `[${previous!.begin}, ${previous!.end}]`,
      );
    }
    if (e.begin > covered) {
      throw new FormatError(
        name,
        `${where}: data_offsets [${e.begin}, ${e.end}] leave a gap after byte ${covered}`,
      );
    }
    if (e.end > bufferLength) {
      throw new FormatError(
        name,
        `${where}: data_offsets [${e.begin}, ${e.end}] run past the ${bufferLength}-byte data buffer (truncated file?)`,
      );
    }
    covered = e.end;
    previous = e;
  }
  if (covered !== bufferLength) {
    throw new FormatError(
      name,
      `the tensors cover ${covered} bytes but the data buffer has ${bufferLength} (trailing bytes)`,
    );
  }

  return { entries, metadata, bufferStart };
}

/** Nesting deeper than this is refused before JSON.parse (a real header nests 3 levels). */
const MAX_HEADER_DEPTH = 16;

/**
 * One pass over the header text before JSON.parse: refuses nesting deeper than MAX_HEADER_DEPTH
 * (JSON.parse would recurse into a stack overflow) and a top-level key given twice (JSON.parse would
 * silently keep the last).
 */
function checkHeaderStructure(name: string, text: string): void {
  const keys = new Set<string>();
  let depth = 0;
  let stringStart = -1;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (stringStart >= 0) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped character
      else if (c === 0x22) {
        // a string at depth 1 followed by ':' is a top-level key
        if (depth === 1) {
          let j = i + 1;
          while (j < text.length && /\s/.test(text[j])) j++;
          if (text[j] === ':') {
            let key: string;
            try {
              key = JSON.parse(text.slice(stringStart, i + 1)) as string;
            } catch {
              return; // malformed: JSON.parse reports it
            }
            if (keys.has(key))
              throw new FormatError(
                name,
                `the safetensors header gives the key ${JSON.stringify(clip(key))} twice (only one entry per tensor is allowed)`,
              );
            keys.add(key);
          }
        }
        stringStart = -1;
      }
      continue;
    }
    if (c === 0x22) stringStart = i;
    else if (c === 0x7b || c === 0x5b) {
      if (++depth > MAX_HEADER_DEPTH)
        throw new FormatError(
          name,
          `the safetensors header nests deeper than ${MAX_HEADER_DEPTH} levels (a valid header nests 3)`,
        );
    } else if (c === 0x7d || c === 0x5d) depth--;
  }
}

/** Parses safetensors bytes. */
export function parseSafetensors(bytes: Uint8Array, name = '<buffer>'): SafetensorsFile {
  const { entries, metadata, bufferStart } = parseSafetensorsLayout(bytes, name, bytes.length);
  const tensors = new Map<string, NpyArray>();
  for (const e of entries) {
    const count = (e.end - e.begin) / itemSize(e.dtype);
    tensors.set(e.name, {
      dtype: e.dtype,
      shape: e.shape,
      data: viewAs(name, e.dtype, bytes, bufferStart + e.begin, count),
    });
  }
  return { tensors, metadata };
}

/** Reads a safetensors file. */
export function readSafetensors(path: string): SafetensorsFile {
  return parseSafetensors(readFileBytes(path), path);
}

/** A safetensors file opened by its header alone: tensors are read one at a time, on request. */
export interface SafetensorsReader {
  readonly entries: readonly SafetensorsEntry[];
  readonly metadata: Record<string, string>;
  /** Reads (or, when large, maps) one tensor's data (no 4 GiB limit; the rest of the file is not read). */
  read(entry: SafetensorsEntry): NpyArray;
}

/** Opens a safetensors file by its header (the whole layout is checked against the file size). */
export function openSafetensors(path: string): SafetensorsReader {
  const fd = fs.openSync(path, 'r');
  let layout: ReturnType<typeof parseSafetensorsLayout>;
  try {
    const size = fs.fstatSync(fd).size;
    const first = new Uint8Array(8);
    const n = fs.readSync(fd, first, 0, 8, 0);
    let headerLength = 0;
    if (n === 8) {
      const declared = new DataView(first.buffer).getBigUint64(0, true);
      // larger values are refused by parseSafetensorsLayout; read no more than the file has
      headerLength = Number(declared > BigInt(SAFETENSORS_MAX_HEADER_BYTES) ? 0n : declared);
    }
    const head = new Uint8Array(Math.min(size, 8 + headerLength));
    head.set(first.subarray(0, Math.min(n, head.length)));
    if (head.length > 8) readExactly(fd, head.subarray(8), 8);
    layout = parseSafetensorsLayout(head, path, size);
  } finally {
    fs.closeSync(fd);
  }
  const { entries, metadata, bufferStart } = layout;
  return {
    entries,
    metadata,
    read(entry) {
      const fd2 = fs.openSync(path, 'r');
      try {
        const bytes = entry.end - entry.begin;
        const buffer = fileRange(path, fd2, bufferStart + entry.begin, bytes);
        const count = bytes / itemSize(entry.dtype);
        return {
          dtype: entry.dtype,
          shape: entry.shape,
          data: viewAs(path, entry.dtype, new Uint8Array(buffer, 0, 0), 0, count),
        };
      } finally {
        fs.closeSync(fd2);
      }
    },
  };
}

function readExactly(fd: number, into: Uint8Array, position: number): void {
  let done = 0;
  while (done < into.length) {
    const n = fs.readSync(fd, into, done, into.length - done, position + done);
    if (n === 0) break;
    done += n;
  }
}

/** The tensors of a safetensors file, by name. */
export type TensorInput = Record<string, NpyArray> | ReadonlyMap<string, NpyArray>;

function encodeParts(tensors: TensorInput, metadata?: Record<string, string>): Uint8Array[] {
  const list = [...(tensors instanceof Map ? tensors : Object.entries(tensors))] as [string, NpyArray][];
  for (const [key, array] of list) {
    if (key === METADATA_KEY)
      throw new InvalidArgumentError('tensors', `tensor names other than '${METADATA_KEY}'`, key);
    checkArray(`tensors[${JSON.stringify(key)}]`, array);
  }
  // The reference writer's order (dtype rank descending, then name by UTF-8 bytes), so output is
  // byte-identical; widest elements come first, so after the 8-byte padded header each tensor is aligned.
  list.sort(
    ([na, a], [nb, b]) =>
      WRITE_RANK[b.dtype] - WRITE_RANK[a.dtype] || Buffer.compare(Buffer.from(na), Buffer.from(nb)),
  );

  const header: Record<string, unknown> = {};
  if (metadata !== undefined) {
    for (const [k, v] of Object.entries(metadata)) {
      if (typeof v !== 'string')
        throw new InvalidArgumentError(`metadata[${JSON.stringify(k)}]`, 'a string', typeof v);
    }
    header[METADATA_KEY] = metadata;
  }
  let offset = 0;
  for (const [key, array] of list) {
    const end = offset + array.data.byteLength;
    // defineProperty: a tensor named "__proto__" must become a key, not a prototype.
    Object.defineProperty(header, key, {
      value: { dtype: DTYPE_TO_CODE[array.dtype], shape: array.shape, data_offsets: [offset, end] },
      enumerable: true,
      writable: true,
      configurable: true,
    });
    offset = end;
  }
  const json = new TextEncoder().encode(JSON.stringify(header));
  const padded = Math.ceil(json.length / 8) * 8;
  if (padded > SAFETENSORS_MAX_HEADER_BYTES) {
    throw new InvalidArgumentError(
      'tensors',
      `a header of at most ${SAFETENSORS_MAX_HEADER_BYTES} bytes`,
      `${padded}`,
    );
  }
  const prefix = new Uint8Array(8 + padded);
  new DataView(prefix.buffer).setBigUint64(0, BigInt(padded), true);
  prefix.set(json, 8);
  prefix.fill(0x20, 8 + json.length);
  return [prefix, ...list.map(([, array]) => arrayBytes(array))];
}

/** Encodes tensors as safetensors bytes. */
export function encodeSafetensors(tensors: TensorInput, metadata?: Record<string, string>): Uint8Array {
  return concatBytes(encodeParts(tensors, metadata));
}

/** Writes tensors as a safetensors file. */
export function writeSafetensors(
  path: string,
  tensors: TensorInput,
  metadata?: Record<string, string>,
): void {
  writeFileChunks(path, encodeParts(tensors, metadata));
}
