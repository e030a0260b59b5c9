// NumPy .npy reader and writer (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html).
//
// Layout: "\x93NUMPY", major, minor, header length (u16 LE for 1.0, u32 LE for 2.0 / 3.0), then a Python
// dict literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces and a
// final '\n', then the raw C-order data. The header is parsed by a tiny literal parser below, never
// evaluated: a .npy file is untrusted input.

import { constants as bufferConstants } from 'node:buffer';
import * as fs from 'node:fs';
import { FormatError, InvalidArgumentError } from '../errors.js';
import { loadNative, nativeUnavailableReason } from '../native.js';
import {
  type ArrayDType,
  arrayBytes,
  checkArray,
  concatBytes,
  formatShape,
  itemSize,
  type NpyArray,
  shapeProduct,
  viewAs,
  writeFileChunks,
} from './array.js';

export type { ArrayData, ArrayDType, NpyArray } from './array.js';

export interface NpyReadOptions {
  /**
   * Read '<u2' (and '<i2') arrays as bfloat16 raw bits. NumPy has no bfloat16, so bfloat16 tensors are
   * usually saved as their bits, e.g. `t.view(torch.uint16).numpy()` or `t.view(torch.int16).numpy()`.
   */
  u2As?: 'bfloat16';
  /** How messages spell the u2As option (the CLI passes '--bf16'); default "u2As: 'bfloat16'". */
  u2AsOption?: string;
}

const MAGIC = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]; // "\x93NUMPY"
/** Headers above this are rejected (NumPy itself refuses 10,000+ characters by default). */
export const NPY_MAX_HEADER_BYTES = 64 * 1024;
const ARRAY_ALIGN = 64;
/** NumPy leaves room in the header for the growth axis to reach this many digits. */
const GROWTH_AXIS_MAX_DIGITS = 21;
const MAX_DEPTH = 8;

const DESCR_TO_DTYPE: Record<string, ArrayDType> = {
  '<f4': 'float32',
  '<f2': 'float16',
  '|i1': 'int8',
  '<i1': 'int8',
  '<i4': 'int32',
  '<i8': 'int64',
  '<u4': 'uint32',
  '<u8': 'uint64',
  '<f8': 'float64',
};

const DTYPE_TO_DESCR: Record<ArrayDType, string> = {
  float32: '<f4',
  float16: '<f2',
  // NumPy has no bfloat16: write the bits as uint16, which np.load reads and torch can .view() back.
  bfloat16: '<u2',
  int8: '|i1',
  int32: '<i4',
  int64: '<i8',
  uint32: '<u4',
  uint64: '<u8',
  float64: '<f8',
};

const SUPPORTED_DESCRS =
  "'<f4' (float32), '<f2' (float16), '|i1' (int8), '<u2' (bfloat16 bits, with u2As: 'bfloat16'), " +
  "'<i4', '<i8', '<u4', '<u8', '<f8'";

// ---- Python literal parser: exactly the subset np.save writes ----

type PyValue =
  | { kind: 'str'; value: string }
  | { kind: 'int'; text: string }
  | { kind: 'float'; text: string }
  | { kind: 'bool'; value: boolean }
  | { kind: 'none' }
  | { kind: 'tuple'; items: PyValue[] }
  | { kind: 'list'; items: PyValue[] }
  | { kind: 'dict'; entries: [PyValue, PyValue][] };

class HeaderSyntaxError extends Error {}

class LiteralParser {
  private pos = 0;
  constructor(private readonly text: string) {}

  parseWhole(): PyValue {
    const value = this.parseValue(0);
    this.skipSpace();
    if (this.pos !== this.text.length) this.fail('unexpected text after the dict');
    return value;
  }

  private fail(detail: string): never {
    throw new HeaderSyntaxError(`${detail} at character ${this.pos}`);
  }

  private skipSpace() {
    while (this.pos < this.text.length) {
      const c = this.text[this.pos];
      if (c !== ' ' && c !== '\n' && c !== '\t' && c !== '\r') break;
      this.pos++;
    }
  }

  private parseValue(depth: number): PyValue {
    if (depth > MAX_DEPTH) this.fail('nesting too deep');
    this.skipSpace();
    if (this.pos >= this.text.length) this.fail('unexpected end of header');
    const c = this.text[this.pos];
    if (c === '{') return this.parseDict(depth);
    if (c === '(') return this.parseSequence('tuple', ')', depth);
    if (c === '[') return this.parseSequence('list', ']', depth);
    if (c === "'" || c === '"') return this.parseString(c);
    if (c === '-' || c === '+' || (c >= '0' && c <= '9')) return this.parseNumber();
    for (const [word, value] of [
      ['True', { kind: 'bool', value: true }],
      ['False', { kind: 'bool', value: false }],
      ['None', { kind: 'none' }],
    ] as const) {
      if (
        this.text.startsWith(word, this.pos) &&
        !/[A-Za-z0-9_]/.test(this.text[this.pos + word.length] ?? '')
      ) {
        this.pos += word.length;
        return value;
      }
    }
    this.fail(`unexpected character ${JSON.stringify(c)}`);
  }

  private parseString(quote: string): PyValue {
    const start = ++this.pos;
    while (this.pos < this.text.length && this.text[this.pos] !== quote) {
      const c = this.text[this.pos];
      // np.save never writes escapes or multi-line strings; refusing them keeps the parser trivial.
      if (c === '\\') this.fail('escape sequences in strings are not supported');
      if (c === '\n' || c === '\r') this.fail('unterminated string');
      this.pos++;
    }
    if (this.pos >= this.text.length) this.fail('unterminated string');
    const value = this.text.slice(start, this.pos);
    this.pos++;
    return { kind: 'str', value };
  }

  private parseNumber(): PyValue {
    const m = /^[-+]?(\d+)(\.\d*)?([eE][-+]?\d+)?([lL])?/.exec(this.text.slice(this.pos, this.pos + 64));
    if (!m) this.fail('malformed number');
    const text = m[0];
    this.pos += text.length;
    if (/^[A-Za-z0-9_.]/.test(this.text[this.pos] ?? '')) this.fail('malformed number');
    if (m[2] !== undefined || m[3] !== undefined) {
      if (m[4] !== undefined) this.fail('malformed number');
      return { kind: 'float', text };
    }
    // The 'L' suffix comes from Python 2 (e.g. shape (2L, 3L)); NumPy still reads those files.
    return { kind: 'int', text: m[4] !== undefined ? text.slice(0, -1) : text };
  }

  private parseSequence(kind: 'tuple' | 'list', close: string, depth: number): PyValue {
    this.pos++;
    const items: PyValue[] = [];
    let sawComma = false;
    for (;;) {
      this.skipSpace();
      if (this.text[this.pos] === close) break;
      items.push(this.parseValue(depth + 1));
      this.skipSpace();
      const c = this.text[this.pos];
      if (c === ',') {
        sawComma = true;
        this.pos++;
      } else if (c === close) {
        break;
      } else {
        this.fail(`expected ',' or '${close}'`);
      }
    }
    this.pos++;
    // (3) is just 3 in Python; only (3,) is a tuple.
    if (kind === 'tuple' && items.length === 1 && !sawComma) return items[0];
    return { kind, items };
  }

  private parseDict(depth: number): PyValue {
    this.pos++;
    const entries: [PyValue, PyValue][] = [];
    for (;;) {
      this.skipSpace();
      if (this.text[this.pos] === '}') break;
      const key = this.parseValue(depth + 1);
      this.skipSpace();
      if (this.text[this.pos] !== ':') this.fail("expected ':'");
      this.pos++;
      entries.push([key, this.parseValue(depth + 1)]);
      this.skipSpace();
      const c = this.text[this.pos];
      if (c === ',') this.pos++;
      else if (c !== '}') this.fail("expected ',' or '}'");
    }
    this.pos++;
    return { kind: 'dict', entries };
  }
}

function pyRepr(v: PyValue): string {
  switch (v.kind) {
    case 'str':
      return `'${v.value}'`;
    case 'int':
    case 'float':
      return v.text;
    case 'bool':
      return v.value ? 'True' : 'False';
    case 'none':
      return 'None';
    case 'tuple':
      return `(${v.items.map(pyRepr).join(', ')}${v.items.length === 1 ? ',' : ''})`;
    case 'list':
      return `[${v.items.map(pyRepr).join(', ')}]`;
    case 'dict':
      return `{${v.entries.map(([k, x]) => `${pyRepr(k)}: ${pyRepr(x)}`).join(', ')}}`;
  }
}

function clip(text: string, max = 160): string {
  return text.length <= max ? text : `${text.slice(0, max)}...`;
}

function u2AsName(opts: NpyReadOptions): string {
  return opts.u2AsOption ?? "u2As: 'bfloat16'";
}

function descrToDtype(file: string, descr: PyValue, opts: NpyReadOptions): ArrayDType {
  if (descr.kind === 'list') {
    const bf16Hint =
      descr.items.length === 1 && /V2'/.test(pyRepr(descr))
        ? ` (an ml_dtypes bfloat16 array? save arr.view(np.uint16) and read it with ${u2AsName(opts)})`
        : '';
    throw new FormatError(
      file,
      `structured dtype ${clip(pyRepr(descr))} is not supported${bf16Hint}; save a plain numeric array`,
    );
  }
  if (descr.kind !== 'str') {
    throw new FormatError(file, `'descr' must be a dtype string such as '<f4', got ${clip(pyRepr(descr))}`);
  }
  const d = descr.value;
  const known = DESCR_TO_DTYPE[d];
  if (known !== undefined && Object.hasOwn(DESCR_TO_DTYPE, d)) return known;
  if (d === '<u2' || d === '<i2') {
    if (opts.u2As === 'bfloat16') return 'bfloat16';
    throw new FormatError(
      file,
      `dtype '${d}' (${d === '<u2' ? 'uint16' : 'int16'}) is only read as bfloat16 bits: pass ${u2AsName(opts)} ` +
        'if the array holds bfloat16 values saved with .view(torch.uint16) / .view(np.uint16)',
    );
  }
  if (d.startsWith('>') && d !== '>i1') {
    throw new FormatError(
      file,
      `big-endian dtype '${d}' is not supported; convert it first with arr.astype('<${d.slice(1)}')`,
    );
  }
  if (d === '|O' || d === 'O' || d === '<O') {
    throw new FormatError(
      file,
      'object arrays (pickled Python objects) are not supported and never unpickled',
    );
  }
  const hint = /^[|<]V2$/.test(d)
    ? ` (bfloat16? save arr.view(np.uint16) and read it with ${u2AsName(opts)})`
    : '';
  throw new FormatError(file, `unsupported dtype '${clip(d)}'${hint}; supported: ${SUPPORTED_DESCRS}`);
}

interface NpyHeader {
  dtype: ArrayDType;
  shape: number[];
}

function interpretHeader(file: string, text: string, opts: NpyReadOptions): NpyHeader {
  let root: PyValue;
  try {
    root = new LiteralParser(text).parseWhole();
  } catch (e) {
    if (e instanceof HeaderSyntaxError) {
      throw new FormatError(
        file,
        `cannot parse the .npy header (${e.message}): ${JSON.stringify(clip(text))}`,
      );
    }
    throw e;
  }
  if (root.kind !== 'dict')
    throw new FormatError(file, `the .npy header is not a dict: ${JSON.stringify(clip(text))}`);
  const fields = new Map<string, PyValue>();
  for (const [k, v] of root.entries) {
    if (k.kind !== 'str')
      throw new FormatError(file, `the .npy header has a non-string key ${clip(pyRepr(k))}`);
    if (fields.has(k.value))
      throw new FormatError(file, `the .npy header repeats the key '${clip(k.value)}'`);
    fields.set(k.value, v);
  }
  const keys = [...fields.keys()].sort();
  if (keys.join() !== 'descr,fortran_order,shape') {
    throw new FormatError(
      file,
      `the .npy header must have exactly the keys 'descr', 'fortran_order', 'shape'; got ${clip(keys.map((k) => `'${k}'`).join(', ') || 'none')}`,
    );
  }
  const fortran = fields.get('fortran_order')!;
  if (fortran.kind !== 'bool') {
    throw new FormatError(file, `'fortran_order' must be True or False, got ${clip(pyRepr(fortran))}`);
  }
  const shapeValue = fields.get('shape')!;
  if (shapeValue.kind !== 'tuple') {
    throw new FormatError(
      file,
      `'shape' must be a tuple of integers such as (2, 3), got ${clip(pyRepr(shapeValue))}`,
    );
  }
  const shape = shapeValue.items.map((item, i) => {
    const n = item.kind === 'int' ? Number(item.text) : Number.NaN;
    if (!Number.isSafeInteger(n) || n < 0) {
      throw new FormatError(
        file,
        `shape[${i}] must be a non-negative integer below 2^53, got ${clip(pyRepr(item))} in shape ${clip(pyRepr(shapeValue))}`,
      );
    }
    return n;
  });
  const dtype = descrToDtype(file, fields.get('descr')!, opts);
  if (fortran.value) {
    throw new FormatError(
      file,
      'Fortran-order (column-major) arrays are not supported; save a C-order copy with ' +
        'np.save(path, np.ascontiguousarray(arr))',
    );
  }
  return { dtype, shape };
}

/** The layout of a .npy file from its first bytes (at least the whole header): dtype, shape and where the data starts. */
export function parseNpyHeader(
  bytes: Uint8Array,
  name = '<buffer>',
  opts: NpyReadOptions = {},
): { dtype: ArrayDType; shape: number[]; dataStart: number } {
  if (!(bytes instanceof Uint8Array)) {
    throw new InvalidArgumentError('bytes', 'a Uint8Array', bytes === null ? 'null' : typeof bytes);
  }
  for (let i = 0; i < MAGIC.length; i++) {
    if (i >= bytes.length) throw new FormatError(name, `too short for a .npy file (${bytes.length} bytes)`);
    if (bytes[i] !== MAGIC[i])
      throw new FormatError(name, 'not a .npy file (it does not start with "\\x93NUMPY")');
  }
  if (bytes.length < 8) throw new FormatError(name, `too short for a .npy file (${bytes.length} bytes)`);
  const major = bytes[6];
  const minor = bytes[7];
  if (major < 1 || major > 3 || minor !== 0) {
    throw new FormatError(
      name,
      `unsupported .npy format version ${major}.${minor} (supported: 1.0, 2.0, 3.0)`,
    );
  }
  const lengthBytes = major === 1 ? 2 : 4;
  const headerStart = 8 + lengthBytes;
  if (bytes.length < headerStart) {
    throw new FormatError(
      name,
      `truncated .npy file: ${bytes.length} bytes, the header length alone ends at ${headerStart}`,
    );
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headerLength = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  if (headerLength > NPY_MAX_HEADER_BYTES) {
    throw new FormatError(
      name,
      `the .npy header is ${headerLength} bytes, more than the ${NPY_MAX_HEADER_BYTES} allowed`,
    );
  }
  const dataStart = headerStart + headerLength;
  if (dataStart > bytes.length) {
    throw new FormatError(
      name,
      `truncated .npy header: it declares ${headerLength} bytes but only ${bytes.length - headerStart} follow`,
    );
  }
  const headerBytes = bytes.subarray(headerStart, dataStart);
  let text: string;
  if (major === 3) {
    try {
      text = new TextDecoder('utf-8', { fatal: true }).decode(headerBytes);
    } catch {
      throw new FormatError(name, 'the .npy 3.0 header is not valid UTF-8');
    }
  } else {
    // Versions 1.0 and 2.0 are latin1; TextDecoder('latin1') would be windows-1252, so map bytes directly.
    text = Buffer.from(headerBytes.buffer, headerBytes.byteOffset, headerBytes.byteLength).toString('latin1');
  }
  const { dtype, shape } = interpretHeader(name, text, opts);
  return { dtype, shape, dataStart };
}

/** The element count of the shape, checked against the `available` data bytes. */
function elementsFor(name: string, dtype: ArrayDType, shape: number[], available: number): number {
  const count = shapeProduct(shape);
  const size = itemSize(dtype);
  if (count === undefined || count * size > Number.MAX_SAFE_INTEGER) {
    throw new FormatError(
      name,
      `shape ${formatShape(shape)} has too many elements (data is ${available} bytes)`,
    );
  }
  const need = count * size;
  if (need !== available) {
    throw new FormatError(
      name,
      `shape ${formatShape(shape)} of ${dtype} needs ${need} data bytes but the file has ${available}` +
        (available < need ? ' (truncated file?)' : ' (trailing bytes)'),
    );
  }
  return count;
}

/** Parses .npy bytes. The result views `bytes` when the data is aligned (no copy), else holds a copy. */
export function parseNpy(bytes: Uint8Array, name = '<buffer>', opts: NpyReadOptions = {}): NpyArray {
  const { dtype, shape, dataStart } = parseNpyHeader(bytes, name, opts);
  const count = elementsFor(name, dtype, shape, bytes.length - dataStart);
  return { dtype, shape, data: viewAs(name, dtype, bytes, dataStart, count) };
}

/**
 * Reads `byteLength` bytes of an open file from `position` into a new ArrayBuffer, in chunks of at
 * most 1 GiB, so arrays beyond the 4 GiB a single Uint8Array can hold are read too.
 */
export function readFileRange(fd: number, position: number, byteLength: number, name: string): ArrayBuffer {
  let buffer: ArrayBuffer;
  try {
    buffer = new ArrayBuffer(byteLength);
  } catch {
    throw new FormatError(name, `the array is ${byteLength} bytes, more than this runtime can allocate`);
  }
  const chunk = 1 << 30;
  let done = 0;
  while (done < byteLength) {
    const want = Math.min(chunk, byteLength - done);
    const n = fs.readSync(fd, new Uint8Array(buffer, done, want), 0, want, position + done);
    if (n === 0)
      throw new FormatError(name, `the file shrank while being read (${done} of ${byteLength} data bytes)`);
    done += n;
  }
  return buffer;
}

/** Arrays from this size up are memory-mapped rather than read (when the native addon is present). */
export const MAP_MIN_BYTES = 256 * 1024 * 1024;
// the largest ArrayBuffer this Node makes (Node 20: 4 GiB); mapFile refuses more
const MAP_MAX_BYTES = bufferConstants.MAX_LENGTH;

/**
 * The bytes [position, position + byteLength) of a file as an ArrayBuffer: large ranges are mapped
 * (the addon's private copy-on-write mapping, the one the corpus reader uses: no copy, pages come
 * from the page cache, writes never reach the file, unmapped when the buffer is collected), smaller
 * ones, or any without the addon, are read. A mapped file must not shrink while it is in use.
 */
export function fileRange(path: string, fd: number, position: number, byteLength: number): ArrayBuffer {
  // mapped only where the elements come out aligned (a typed array assumes it; .npy data is 64-aligned),
  // and within the largest ArrayBuffer this Node makes (Node 20: 4 GiB); larger ranges are read
  if (
    byteLength >= MAP_MIN_BYTES &&
    byteLength <= MAP_MAX_BYTES &&
    position % 8 === 0 &&
    nativeUnavailableReason() === undefined
  ) {
    const file = (
      loadNative() as unknown as { file: { mapFile(p: string, o: number, l: number): ArrayBuffer } }
    ).file;
    return file.mapFile(path, position, byteLength);
  }
  return readFileRange(fd, position, byteLength, path);
}

/**
 * Reads a .npy file: the header first, then the data straight into the array's own buffer, or
 * mapped from the file from MAP_MIN_BYTES up (no whole-file copy, no 4 GiB limit).
 */
export function readNpy(path: string, opts: NpyReadOptions = {}): NpyArray {
  const fd = fs.openSync(path, 'r');
  try {
    const size = fs.fstatSync(fd).size;
    const head = new Uint8Array(Math.min(size, 12 + NPY_MAX_HEADER_BYTES));
    let got = 0;
    while (got < head.length) {
      const n = fs.readSync(fd, head, got, head.length - got, got);
      if (n === 0) break;
      got += n;
    }
    const { dtype, shape, dataStart } = parseNpyHeader(head.subarray(0, got), path, opts);
    const count = elementsFor(path, dtype, shape, size - dataStart);
    const buffer = fileRange(path, fd, dataStart, count * itemSize(dtype));
    return { dtype, shape, data: viewAs(path, dtype, new Uint8Array(buffer, 0, 0), 0, count) };
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * The header bytes NumPy itself would write for this array. Always format 1.0: a 2.0 header (over 64 KiB)
 * would need thousands of dimensions and is refused by the reader anyway.
 */
export function npyHeader(array: NpyArray): Uint8Array {
  checkArray('array', array);
  const { shape } = array;
  const shapeRepr = `(${shape.join(', ')}${shape.length === 1 ? ',' : ''})`;
  let dict = `{'descr': '${DTYPE_TO_DESCR[array.dtype]}', 'fortran_order': False, 'shape': ${shapeRepr}, }`;
  if (shape.length > 0) dict += ' '.repeat(Math.max(0, GROWTH_AXIS_MAX_DIGITS - String(shape[0]).length));
  const prefixLength = 10;
  const unpadded = dict.length + 1; // + '\n'
  const headerLength = unpadded + ARRAY_ALIGN - ((prefixLength + unpadded) % ARRAY_ALIGN);
  if (headerLength > 0xffff) {
    throw new InvalidArgumentError(
      'array.shape',
      'a shape whose .npy header fits in 64 KiB',
      `${shape.length} dimensions`,
    );
  }
  const out = new Uint8Array(prefixLength + headerLength);
  out.set(MAGIC, 0);
  out[6] = 1;
  out[7] = 0;
  new DataView(out.buffer).setUint16(8, headerLength, true);
  for (let i = 0; i < dict.length; i++) out[prefixLength + i] = dict.charCodeAt(i);
  out.fill(0x20, prefixLength + dict.length, out.length - 1);
  out[out.length - 1] = 0x0a;
  return out;
}

/** Encodes an array as .npy bytes (bfloat16 is written as '<u2' bits). */
export function encodeNpy(array: NpyArray): Uint8Array {
  return concatBytes([npyHeader(array), arrayBytes(array)]);
}

/** Writes an array as a .npy file (bfloat16 is written as '<u2' bits). */
export function writeNpy(path: string, array: NpyArray): void {
  writeFileChunks(path, [npyHeader(array), arrayBytes(array)]);
}
