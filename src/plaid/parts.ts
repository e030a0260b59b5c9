// The serialization seam of a PlaidIndex: a JSON-able header plus named typed arrays, so a store
// (the corpus's index segments, src/io/corpus/index-segments.ts) writes and maps them generically and
// the index's own modules may add, drop or change arrays here without touching the store.
import { FormatError, InvalidArgumentError } from '../errors.js';
import { type Buckets, unorderedCutoff } from './codec.js';
import type { AssignGroups } from './kmeans.js';
import type { NativeIndex } from './native.js';
import type { BuildStats } from './plaid.js';

export type PartArray =
  | Float32Array
  | Float64Array
  | Int32Array
  | Uint32Array
  | Uint16Array
  | Int8Array
  | Uint8Array;

/** The element types a part may have, by name (what a store writes beside each array). */
export const PART_TYPES = {
  float32: Float32Array,
  float64: Float64Array,
  int32: Int32Array,
  uint32: Uint32Array,
  uint16: Uint16Array,
  int8: Int8Array,
  uint8: Uint8Array,
} as const;

export type PartType = keyof typeof PART_TYPES;

export function partTypeOf(a: PartArray): PartType {
  for (const [name, ctor] of Object.entries(PART_TYPES)) if (a instanceof ctor) return name as PartType;
  throw new InvalidArgumentError('parts.arrays', 'typed arrays', Object.prototype.toString.call(a));
}

export interface PlaidHeader {
  format: 'maxsim-plaid';
  version: 1;
  k: number;
  d: number;
  docs: number;
  bits: 2 | 4;
  buildStats: BuildStats;
  /** Groups probed per token by the two-level assignment (absent: exact; arrays GROUP_ARRAYS). */
  groupProbe?: number;
}

export interface PlaidParts {
  header: PlaidHeader;
  arrays: Record<string, PartArray>;
}

/** The arrays of a PlaidIndex, by name and element type (fromParts checks each). */
export const PLAID_ARRAYS: Record<string, PartType> = {
  centroids: 'float32',
  tables: 'float32',
  cutoffs: 'float32',
  weights: 'float32',
  cids: 'int32',
  codes: 'uint8',
  docOffsets: 'float64',
  bagOffsets: 'float64',
  bags: 'int32',
  ivfOffsets: 'float64',
  ivf: 'int32',
};

/** The two-level assignment's arrays, present together when the header has groupProbe. */
export const GROUP_ARRAYS: Record<string, PartType> = {
  groupCoarse: 'float32',
  groupOffsets: 'int32',
  groupMembers: 'int32',
};

/** The parts of an index (views of its arrays, not copies). */
export function toParts(
  native: NativeIndex,
  buckets: Buckets,
  stats: BuildStats,
  groups?: AssignGroups,
): PlaidParts {
  const parts: PlaidParts = {
    header: {
      format: 'maxsim-plaid',
      version: 1,
      k: native.k,
      d: native.d,
      docs: native.docs,
      bits: native.bits,
      buildStats: { ...stats },
    },
    arrays: {
      centroids: native.centroids,
      tables: native.tables,
      cutoffs: buckets.cutoffs,
      weights: buckets.weights,
      cids: native.cids,
      codes: native.codes,
      docOffsets: native.docOffsets,
      bagOffsets: native.bagOffsets,
      bags: native.bags,
      ivfOffsets: native.ivfOffsets,
      ivf: native.ivf,
    },
  };
  if (groups) {
    parts.header.groupProbe = groups.probe;
    parts.arrays.groupCoarse = groups.coarse;
    parts.arrays.groupOffsets = groups.offsets;
    parts.arrays.groupMembers = groups.members;
  }
  return parts;
}

/**
 * The native arrays and buckets of parts, every field checked (parts may come from a file): a wrong
 * header or a missing / mistyped array is a FormatError naming it (`source`: the file, for messages).
 * The native layer checks the arrays' sizes against each other (checkIndex) when the index is made.
 */
export function fromPartsChecked(
  parts: PlaidParts,
  source = 'index parts',
): { native: NativeIndex; buckets: Buckets; stats: BuildStats; groups?: AssignGroups } {
  if (parts === null || typeof parts !== 'object')
    throw new InvalidArgumentError('parts', '{ header, arrays }', String(parts));
  const h = parts.header as unknown as Record<string, unknown>;
  const bad = (what: string, v: unknown): never => {
    throw new FormatError(source, `index header field ${what} is ${JSON.stringify(v) ?? String(v)}`);
  };
  if (h === null || typeof h !== 'object') bad('(top level)', h);
  if (h.format !== 'maxsim-plaid') bad('format', h.format);
  if (h.version !== 1) bad('version (this build reads 1)', h.version);
  const int = (name: string, min: number) => {
    const v = h[name];
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) bad(name, v);
    return v as number;
  };
  const k = int('k', 1);
  const d = int('d', 1);
  const docs = int('docs', 0);
  if (h.bits !== 2 && h.bits !== 4) bad('bits', h.bits);
  const bits = h.bits as 2 | 4;
  const stats = h.buildStats;
  if (stats === null || typeof stats !== 'object' || Array.isArray(stats)) bad('buildStats', stats);
  const a = parts.arrays;
  if (a === null || typeof a !== 'object') throw new FormatError(source, 'the index has no arrays');
  for (const [name, type] of Object.entries(PLAID_ARRAYS))
    if (!(a[name] instanceof PART_TYPES[type]))
      throw new FormatError(source, `the index array ${name} is missing or not ${type}`);
  const expect = (name: string, n: number) => {
    if (a[name].length !== n)
      throw new FormatError(source, `the index array ${name} has ${a[name].length} elements, not ${n}`);
  };
  const levels = 1 << bits;
  expect('centroids', k * d);
  expect('cutoffs', d * (levels - 1));
  const unordered = unorderedCutoff(a.cutoffs as Float32Array, levels);
  if (unordered >= 0)
    throw new FormatError(
      source,
      `the index array cutoffs must ascend and be finite in each dimension; element ${unordered} is ${a.cutoffs[unordered]}`,
    );
  expect('weights', d * levels);
  expect('docOffsets', docs + 1);
  expect('bagOffsets', docs + 1);
  expect('ivfOffsets', k + 1);
  const native: NativeIndex = {
    k,
    d,
    docs,
    bits,
    centroids: a.centroids as Float32Array,
    tables: a.tables as Float32Array,
    cids: a.cids as Int32Array,
    codes: a.codes as Uint8Array,
    docOffsets: a.docOffsets as Float64Array,
    bagOffsets: a.bagOffsets as Float64Array,
    bags: a.bags as Int32Array,
    ivfOffsets: a.ivfOffsets as Float64Array,
    ivf: a.ivf as Int32Array,
  };
  const buckets: Buckets = {
    bits,
    d,
    cutoffs: a.cutoffs as Float32Array,
    weights: a.weights as Float32Array,
    tables: a.tables as Float32Array,
  };
  let groups: AssignGroups | undefined;
  if (h.groupProbe !== undefined) {
    const probe = int('groupProbe', 1);
    for (const [name, type] of Object.entries(GROUP_ARRAYS))
      if (!(a[name] instanceof PART_TYPES[type]))
        throw new FormatError(source, `the index array ${name} is missing or not ${type}`);
    // sizes and ids are checked by the native encode that reads them
    groups = {
      coarse: a.groupCoarse as Float32Array,
      offsets: a.groupOffsets as Int32Array,
      members: a.groupMembers as Int32Array,
      probe,
    };
  }
  return { native, buckets, stats: { ...(stats as BuildStats) }, groups };
}
