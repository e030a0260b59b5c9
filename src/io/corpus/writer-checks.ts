// The checks a writer runs on new documents before writing a byte: ids unique and well-formed,
// values within the corpus dtype's range.

import { InvalidArgumentError } from '../../errors.js';
import { decodeToFloat32, findOverflow, OVERFLOW_AT } from '../../floats.js';
import type { DType, FloatDType, TokenBatch } from '../../tensor.js';
import type { CorpusInfo } from './manifest.js';

/** New ids that the corpus (or the same batch) holds already: HTTP 409 where a server answers. */
export class DuplicateIdError extends InvalidArgumentError {
  constructor(message: string) {
    super('ids', 'unique document ids', message);
  }
}

/**
 * Checks the ids of `count` new documents: given exactly when the corpus has ids, strings without
 * newlines, new to the corpus (`existing`) and to this writer (`taken`, which gains them).
 */
export function checkIds(
  hasIds: boolean,
  ids: readonly string[] | undefined,
  count: number,
  existing: { findIds(ids: readonly string[]): (number | undefined)[] } | undefined,
  taken: Map<string, string>,
): void {
  if (hasIds) {
    if (!ids || ids.length !== count)
      throw new InvalidArgumentError(
        'ids',
        `${count} document ids (the corpus has ids)`,
        ids ? String(ids.length) : 'none',
      );
    ids.forEach((id, i) => {
      if (typeof id !== 'string' || id.includes('\n'))
        throw new InvalidArgumentError(`ids[${i}]`, 'a string without newlines', JSON.stringify(id));
      // a blank id cannot be told apart in an ids file, nor asked for by get / delete
      if (id.trim() === '')
        throw new InvalidArgumentError(
          `ids[${i}]`,
          'a non-blank document id (not empty, not only whitespace)',
          JSON.stringify(id),
        );
    });
    const batch = new Map<string, string>();
    // where the corpus holds them already, in one pass over its ids
    const inCorpus = new Map<string, number>();
    existing?.findIds(ids).forEach((at, i) => {
      if (at !== undefined) inCorpus.set(ids[i], at);
    });
    const message = duplicateIds(
      ids,
      (id) => {
        const at = inCorpus.get(id);
        if (at !== undefined) return `already in the corpus (document ${at})`;
        return taken.get(id) ?? batch.get(id);
      },
      (id, i) => {
        batch.set(id, `repeats ids[${i}] of this batch`);
      },
    );
    if (message) throw new InvalidArgumentError('ids', 'unique document ids', message);
    for (const id of batch.keys()) taken.set(id, 'already added by an earlier add() of this writer');
  } else if (ids !== undefined) {
    throw new InvalidArgumentError('ids', 'no ids (the corpus was created without ids)', `${ids.length} ids`);
  }
}

// Before writing anything: finite values the corpus dtype cannot hold are an error naming the first.
export function refuseOverflow(batch: TokenBatch, corpusDtype: DType, dim: number): void {
  const dtype = corpusDtype as FloatDType;
  let count = 0;
  let first = '';
  for (let i = 0; i < batch.count; i++) {
    const start = batch.starts[i] * dim;
    const rows = batch.data.subarray(start, start + batch.lengths[i] * dim);
    const found = findOverflow(
      batch.dtype === 'float32' ? rows : decodeToFloat32(rows, batch.dtype, dim),
      dtype,
    );
    if (!found) continue;
    if (count === 0)
      first = `the first, ${float32Text(found.value)}, in document ${i} at token ${Math.floor(found.first / dim)}, component ${found.first % dim}`;
    count += found.count;
  }
  if (count > 0)
    throw new InvalidArgumentError(
      'batch.data',
      `finite values within the ${dtype} range of the corpus (|x| < ${OVERFLOW_AT[dtype as 'float16' | 'bfloat16']}; they would become +-Infinity; pass clamp: true / --clamp to store them as +-${dtype === 'float16' ? 65504 : '3.3895e38'})`,
      `${count} value${count === 1 ? '' : 's'} beyond it (${first})`,
    );
}

/**
 * Checks a list of new ids against the ids already taken (`takenAt(id)` says where, or undefined) and
 * against each other; `accept(id, i)` records each new one. Returns a message with the exact counts
 * (occurrences that repeat an id, and distinct ids repeated) naming the first duplicates and where
 * they are, or undefined when all are unique. Shared by the writer and the server.
 */
export function duplicateIds(
  ids: readonly string[],
  takenAt: (id: string) => string | undefined,
  accept: (id: string, i: number) => void,
): string | undefined {
  const found: string[] = [];
  let count = 0;
  const distinct = new Set<string>();
  ids.forEach((id, i) => {
    const where = takenAt(id);
    if (where !== undefined) {
      if (count++ < 3) found.push(`${JSON.stringify(id)} at ids[${i}] ${where}`);
      distinct.add(id);
      return;
    }
    accept(id, i);
  });
  if (count === 0) return undefined;
  // occurrences and distinct ids apart: "a" three times is 2 duplicates of 1 id
  return `${count} duplicate${count === 1 ? '' : 's'} of ${distinct.size} id${distinct.size === 1 ? '' : 's'}: ${found.join('; ')}${count > 3 ? `; and ${count - 3} more` : ''}`;
}
/** The shortest decimal that reads back as the same float32. */
function float32Text(x: number): string {
  for (let p = 1; p < 9; p++) {
    const t = Number(x.toPrecision(p));
    if (Math.fround(t) === x) return String(t);
  }
  return String(x);
}

/** Ids asked for that are not live documents (unknown or deleted): `missing` lists them all. */
export class MissingIdsError extends InvalidArgumentError {
  constructor(
    argument: string,
    readonly missing: string[],
    info: CorpusInfo,
  ) {
    super(
      argument,
      info.hasIds
        ? 'ids of live documents of the corpus'
        : `document indices in [0, ${info.documents}) not deleted (the corpus has no ids)`,
      `${missing.length} unknown or deleted: ${missing
        .slice(0, 5)
        .map((x) => JSON.stringify(x))
        .join(', ')}${missing.length > 5 ? ', ...' : ''}`,
    );
  }
}
