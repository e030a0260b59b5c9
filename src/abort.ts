// Cancellation: the `signal` option of long operations. An aborted operation rejects with the
// signal's reason (an AbortError DOMException unless the caller gave another reason), like fetch().
// Native jobs see an abort through a one-element Int32Array they poll between chunks or blocks.

import { InvalidArgumentError } from './errors.js';

/** `signal` as given: an AbortSignal or undefined (anything else is an InvalidArgumentError). */
export function checkSignal(signal: unknown, argument = 'signal'): AbortSignal | undefined {
  if (signal === undefined || signal instanceof AbortSignal) return signal;
  const received =
    signal === null
      ? 'null'
      : typeof signal === 'object'
        ? (signal.constructor?.name ?? 'an object')
        : typeof signal;
  throw new InvalidArgumentError(argument, 'an AbortSignal or undefined', received);
}

/** Throws the signal's reason when it is aborted (before any work, and between steps). */
export function throwIfAborted(signal: AbortSignal | undefined): void {
  signal?.throwIfAborted();
}

/** A flag the native side polls: [0] becomes 1 when the signal aborts. dispose() drops the listener. */
export interface CancelFlag {
  readonly flag: Int32Array | undefined;
  dispose(): void;
}

export function cancelFlag(signal: AbortSignal | undefined): CancelFlag {
  if (!signal) return { flag: undefined, dispose() {} };
  // Its own ArrayBuffer: the backing store is off the V8 heap and never moves while a native job reads it.
  const flag = new Int32Array(new ArrayBuffer(4));
  if (signal.aborted) {
    flag[0] = 1;
    return { flag, dispose() {} };
  }
  const onAbort = () => {
    flag[0] = 1;
  };
  signal.addEventListener('abort', onAbort, { once: true });
  return { flag, dispose: () => signal.removeEventListener('abort', onAbort) };
}

/**
 * Runs a native job that polls `flag`: rejects before starting when the signal is already aborted,
 * and with the signal's reason when it aborted while the job ran (its partial result is dropped).
 * The job is awaited to its end either way, so no native work outlives the rejection.
 */
export async function withCancelFlag<T>(
  signal: AbortSignal | undefined,
  job: (flag: Int32Array | undefined) => Promise<T>,
): Promise<T> {
  throwIfAborted(signal);
  const cancel = cancelFlag(signal);
  try {
    const result = await job(cancel.flag);
    throwIfAborted(signal);
    return result;
  } catch (e) {
    throwIfAborted(signal);
    throw e;
  } finally {
    cancel.dispose();
  }
}

/** An AbortError (DOMException or anything else named so), as a rejected operation gives. */
export function isAbortError(e: unknown): boolean {
  return typeof e === 'object' && e !== null && (e as { name?: unknown }).name === 'AbortError';
}

/**
 * For native jobs that cannot stop early (a CUDA kernel, a training pass): settles with `job`, or
 * rejects with the signal's reason as soon as it aborts. The job then runs to its end in the
 * background, holding its inputs until then, and its result (or error) is dropped.
 */
export function untilAborted<T>(signal: AbortSignal | undefined, job: Promise<T>): Promise<T> {
  if (!signal) return job;
  const drop = () => {
    job.catch(() => {});
  };
  if (signal.aborted) {
    drop();
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => {
      drop();
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
    job.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        if (signal.aborted) reject(signal.reason);
        else resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(signal.aborted ? signal.reason : error);
      },
    );
  });
}
