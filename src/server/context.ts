// What every route gets: the corpus, the batcher, the limits in force and the metrics.

import type { FastifyReply } from 'fastify';
import type { BackendName } from '../backends/select.js';
import { InvalidArgumentError } from '../errors.js';
import type { Batcher, RequestLimits } from './batcher.js';
import type { ServerMetrics } from './metrics.js';
import type { ResidentCorpus } from './resident.js';
import type { TextModel } from './text.js';

export interface Limits {
  maxBatch: number;
  maxWaitMs: number | 'auto';
  maxQueue: number;
  /** Work of one request (query tokens x document tokens x dim, plus its scores): 413 beyond. */
  maxWork: number;
  timeoutMs: number;
}

export interface RouteContext {
  readonly resident: ResidentCorpus;
  readonly backend: BackendName;
  readonly threads: number | undefined;
  readonly batcher: Batcher;
  readonly limits: Limits;
  readonly metrics: ServerMetrics;
  /** The model text fields are encoded with (or why there is none). */
  readonly text: TextModel;
  /** The dimension of the corpus now. */
  dim(): number;
  /** True once close() began. */
  closing(): boolean;
}

/**
 * What the batcher needs of a request besides its time left: its whole deadline (the 504's message)
 * and a signal that aborts once its client closed the connection before the answer was sent (the
 * response's 'close' before its 'finish': the request's own 'close' fires as soon as its body is read).
 */
export function requestLimits(ctx: RouteContext, reply: FastifyReply): RequestLimits {
  const controller = new AbortController();
  const res = reply.raw;
  if (res.destroyed || reply.request.raw.socket?.destroyed) controller.abort();
  else
    res.once('close', () => {
      if (!res.writableFinished) controller.abort();
    });
  return { limitMs: ctx.limits.timeoutMs, gone: controller.signal };
}

/** Queries of the request as a batch in this server's batch / queue units. */
export function setBatch(request: unknown, n: number) {
  (request as { batchSize: number }).batchSize = n;
}

/**
 * Ids are well-formed UTF-16 (no lone surrogate: it cannot be stored as UTF-8, and two different
 * ones would both become U+FFFD on disk); `field` names the list in errors.
 */
export function checkIds(
  ids: readonly (string | undefined)[],
  field: string | ((i: number) => string),
): void {
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i];
    const bad = id === undefined ? -1 : loneSurrogate(id);
    if (bad >= 0)
      throw new InvalidArgumentError(
        typeof field === 'string' ? `${field}[${i}]` : field(i),
        'a well-formed Unicode string (no lone surrogate code unit)',
        `a lone surrogate U+${id!.charCodeAt(bad).toString(16).toUpperCase()} at position ${bad}`,
      );
  }
}

/** Index of the first lone surrogate of `s`, or -1. */
export function loneSurrogate(s: string): number {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0xd800 || c > 0xdfff) continue;
    if (c <= 0xdbff && i + 1 < s.length) {
      const n = s.charCodeAt(i + 1);
      if (n >= 0xdc00 && n <= 0xdfff) {
        i++;
        continue;
      }
    }
    return i;
  }
  return -1;
}
