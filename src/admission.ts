// One admission rule for work, shared by the HTTP service, the CLI and the library: an input's items,
// tokens and work are derived from its header (a shape, offsets, a byte count) before anything is
// allocated for it, and refused when they exceed a stated limit. A few header bytes can claim a
// hundred million empty items (shape [1e8, 0, 16] has no data at all), and two small inline sets can
// ask for hours of scoring: both are refused at the door, with an error naming the limit.

import { InvalidArgumentError } from './errors.js';

/**
 * Items an input may claim when it holds no data at all (a zero-length axis): such items cost
 * metadata (offsets, spans, a score each) but no bytes of input, so their count is not bounded by
 * the input's size. Beyond this count an empty input is refused.
 */
export const MAX_EMPTY_ITEMS = 65_536;

/**
 * The default work limit: query tokens x document tokens x dim multiply-adds (plus one per score of
 * the result). 2.5e11 is about 3 s on two CPU cores with AVX2 (8.3e10 per second measured with
 * maxsim, 32 x 32-token queries x 2,000 x 128-token documents, d = 128).
 */
export const DEFAULT_MAX_WORK = 2.5e11;

/** Work above the limit: HTTP 413, a one-line CLI error naming the limit. */
export class WorkLimitError extends InvalidArgumentError {
  override name = 'WorkLimitError';
  constructor(
    argument: string,
    readonly work: number,
    readonly limit: number,
    limitName: string,
    what = 'query tokens x document tokens x dim',
  ) {
    super(argument, `work of at most ${fmt(limit)} (${limitName}; ${what})`, `work of ${fmt(work)}`);
  }
}

/** Items above a limit (a request's queries above the queue, an empty input's items): HTTP 413. */
export class ItemLimitError extends InvalidArgumentError {
  override name = 'ItemLimitError';
  constructor(
    argument: string,
    readonly items: number,
    readonly limit: number,
    why: string,
  ) {
    super(argument, `at most ${limit} items (${why})`, `${items} items`);
  }
}

function fmt(x: number): string {
  return x < 1e6 ? String(x) : x.toExponential(2).replace('e+', 'e');
}

/**
 * The work of scoring every query against every document: query tokens x document tokens x dim, plus
 * the scores written (so empty items still count).
 */
export function workOf(queryTokens: number, queries: number, docTokens: number, docs: number, dim: number) {
  return queryTokens * docTokens * dim + queries * docs;
}

/** Refuses `work` above `limit` (Infinity: no limit). `limitName` says how to raise it ('--max-work'). */
export function checkWork(work: number, limit: number, argument: string, limitName: string): void {
  if (work > limit) throw new WorkLimitError(argument, work, limit, limitName);
}

/**
 * The items of an array of `shape` (its leading axes before the last two, for [n, L, d]: n), refused
 * when the array has no elements and claims more than MAX_EMPTY_ITEMS items. Call before allocating
 * anything per item.
 */
export function checkEmptyItems(items: number, elements: number, argument: string): void {
  if (elements === 0 && items > MAX_EMPTY_ITEMS)
    throw new ItemLimitError(
      argument,
      items,
      MAX_EMPTY_ITEMS,
      'an input without data may claim at most that many empty items',
    );
}

/** Checks a limit option (maxWork, --max-work): a positive number or Infinity. */
export function checkWorkLimit(value: unknown, argument: string): number {
  if (typeof value !== 'number' || !(value > 0))
    throw new InvalidArgumentError(
      argument,
      'a positive number of multiply-adds (or Infinity)',
      String(value),
    );
  return value;
}
