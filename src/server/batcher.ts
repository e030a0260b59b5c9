// The cross-request batcher. Searches queue; a pass takes up to maxBatch queries (from as many
// requests as fit, first come first served, waiting a little for the first one's company), scores
// them in one call, and hands every request its own rows, cut to its own top_k (the pass ranks by the
// largest: the order is total, score then index, so a shorter list is a prefix). Other work (rerank,
// score) runs as a pass of its own in the same lane, so the queue bound and deadlines hold for
// everything.
//
// Pipelining (passesInFlight 2, the GPU default): while a pass runs, the next one gathers and is
// handed to the backend shortly before the running one is expected to end, so the device's queue is
// never empty while the JS thread answers one pass and decodes the next; the backend runs the passes
// one after the other (one worker thread per GPU; the CPU pool takes one job at a time), so passes
// never share the cores or the device, they only overlap their host work with each other's scoring.

import { MaxsimError } from '../errors.js';
import type { CorpusHit } from '../ops/corpus-search.js';
import { concatBits, concatEncoded, type EncodedTokens, itemCount, sliceItems } from './codecs.js';

/** The queue is full: HTTP 429 with Retry-After. */
export class QueueFullError extends MaxsimError {
  override name = 'QueueFullError';
  constructor(
    readonly retryAfterSeconds: number,
    depth: number,
    limit: number,
  ) {
    super(
      `the server is busy: ${depth} queries queued (the limit is ${limit}); retry in ${retryAfterSeconds} s`,
    );
  }
}

/** The request's deadline passed before its answer was ready: HTTP 504. */
export class DeadlineError extends MaxsimError {
  override name = 'DeadlineError';
  constructor(ms: number) {
    super(`the request took longer than its deadline of ${ms} ms`);
  }
}

/**
 * The client closed its connection before its answer: the request leaves the queue unscored (or, in a
 * running pass, its rows are dropped). Nobody reads the answer; the log shows 499.
 */
export class AbandonedError extends MaxsimError {
  override name = 'AbandonedError';
  constructor() {
    super('the client closed the connection before its answer was ready');
  }
}

/** The batcher is draining for shutdown: HTTP 503. */
export class ClosingError extends MaxsimError {
  override name = 'ClosingError';
}

export interface BatcherOptions {
  /** Queries per pass. 1 turns batching off. */
  maxBatch: number;
  /**
   * Longest a pass waits for company once the lane is free, ms. 'auto': a tenth of the recent pass
   * time, between 1 and 50 ms (clients answered by the pass that just ended get that long to come
   * back and join the next one).
   */
  maxWaitMs: number | 'auto';
  /** Queries queued at most; beyond it a request is refused with 429. */
  maxQueue: number;
  /** Passes handed to the backend at once (default 1; 2 pipelines them). */
  passesInFlight?: number;
  /**
   * The 16-bit dtype the backend takes as it is for searches of `key` (a GPU corpus of that dtype):
   * a pass whose requests all sent it copies their bits, no float32 decode (nor the backend's check
   * and rounding of float32 values). Otherwise (and by default) a pass is float32.
   */
  keepBits?: (key: string) => 'float16' | 'bfloat16' | undefined;
  /**
   * Pipelined: how long before the running pass's expected end the next is handed over, as a share of
   * the pass time (default 0.25). @internal bench/serve-sim.ts varies it.
   */
  handOverLead?: number;
  /**
   * Called once per request whose client went away (RequestLimits.gone): 'queued' when it was dropped
   * before any of its passes ran, 'running' when a pass held it (the pass goes on for the others).
   */
  onAbandoned?: (stage: 'queued' | 'running') => void;
}

/** A request's side of its jobs, beside the time it has left. */
export interface RequestLimits {
  /** The request's whole deadline, ms, for the 504's message (default: the time it had left). */
  limitMs?: number;
  /** Aborts when the client closed its connection: the request's jobs are dropped (AbandonedError). */
  gone?: AbortSignal;
}

/** The 'auto' wait: a tenth of the recent pass time, clamped to [1, 50] ms. */
export function autoWaitMs(passSeconds: number): number {
  return Math.min(50, Math.max(1, passSeconds * 100));
}

/**
 * Where a search pass's time went, seconds (the host work around the kernel made visible): `gather`
 * decodes the requests' tokens into the pass's buffer; `backend` is the search call from when the
 * backend could start it (the later of the hand-over and the end of the pass ahead) to its answer,
 * of which the run reports `merge` (hits -> ids, segments merged, on the JS thread) and the rest is
 * the native call (kernel, copies, the worker's round trip, the event loop's delay in taking the
 * answer); `wait` is the time handed over but queued behind the pass ahead; `split` cuts the rows
 * per request and resolves them. (The answers' own work, handlers and serialisation, is measured by
 * whoever answers: see PassToken.)
 */
export interface PassPhases {
  gather: number;
  wait: number;
  backend: number;
  merge: number;
  split: number;
}

/**
 * Handed to every request of a search pass with its rows: when the rows were resolved, and how many
 * of the pass's requests have not yet finished their answer (the server counts them down and times
 * the pass's answering, which runs in the microtasks that follow the resolves).
 */
export interface PassToken {
  resolvedAt: number;
  pending: number;
  /** The run's SearchTiming.stats, if it gave any. */
  stats?: object;
}

export interface PassInfo {
  queries: number;
  requests: number;
  /** From the hand-over to the answer (includes `phases.wait` when pipelined). */
  seconds: number;
  /** Search passes only. */
  phases?: PassPhases;
  /** Per request of the pass: from its arrival in the queue to the pass's start, seconds. */
  queued: number[];
}

/** What a search run reports of its own time, seconds (filled in by the run). */
export interface SearchTiming {
  merge: number;
  /** What the run says of its search (which path ran): handed to every request of the pass. */
  stats?: object;
}

/**
 * A pass's queries: float32, or float16 / bfloat16 bits where BatcherOptions.keepBits allows.
 * `signal` aborts once every request of the pass has passed its deadline (the CPU scan stops at its
 * next chunk; nobody waits for the answer).
 */
export type SearchRun = (
  queries: EncodedTokens,
  k: number,
  key: string,
  timing: SearchTiming,
  signal: AbortSignal,
) => Promise<CorpusHit[][]>;

interface BaseJob {
  size: number;
  enqueued: number;
  /** When its deadline passes (performance.now() ms; Infinity: none). */
  deadline: number;
  settled: boolean;
  /** Taken into a pass. */
  taken: boolean;
  /** The request's whole deadline, ms (the 504's message). */
  limitMs: number;
  timer?: NodeJS.Timeout;
  /**
   * Set by the pass that runs it: called once it settles, `answered` when resolved (the pass aborts
   * when all its jobs have settled unanswered).
   */
  onSettle?: (answered: boolean) => void;
  reject(e: unknown): void;
}
interface SearchJob extends BaseJob {
  kind: 'search';
  queries: EncodedTokens;
  k: number;
  key: string;
  resolve(v: { hits: CorpusHit[][]; batch: number; pass: PassToken }): void;
}
interface SoloJob extends BaseJob {
  kind: 'solo';
  run: (signal: AbortSignal) => Promise<unknown>;
  resolve(v: unknown): void;
}
type Job = SearchJob | SoloJob;

export class Batcher {
  private queue: Job[] = [];
  private queued = 0;
  /** Passes handed to the backend and not yet answered. */
  private inFlight = 0;
  /** When the backend is expected to finish the passes in flight (performance.now() ms). */
  private busyUntil = 0;
  private closing = false;
  private timer: NodeJS.Timeout | undefined;
  private timerAt = 0;
  /** Moving average of the pass time, s (the schedule and Retry-After use it). */
  private passSeconds = 0.01;
  private laneFreeAt = 0;
  /** Queries of the search pass that ended last (0 before the first). */
  private lastPassQueries = 0;
  /** When the backend last answered a search pass (performance.now() ms). */
  private lastAnswerAt = 0;
  private idle: (() => void)[] = [];
  private readonly depthLimit: number;
  /** The passes running now: when each started and the latest deadline of its requests. */
  private readonly running = new Set<{ started: number; deadline: number }>();

  constructor(
    private readonly searchRun: SearchRun,
    readonly options: BatcherOptions,
    private readonly onPass?: (p: PassInfo) => void,
  ) {
    this.depthLimit = Math.max(1, Math.floor(options.passesInFlight ?? 1));
  }

  get passesInFlight(): number {
    return this.depthLimit;
  }

  /** The wait for company in force now, ms. */
  get waitMs(): number {
    return this.options.maxWaitMs === 'auto' ? autoWaitMs(this.passSeconds) : this.options.maxWaitMs;
  }

  /** Queries waiting (not counting the pass running). */
  get depth(): number {
    return this.queued;
  }

  /**
   * How long the lane has been busy past the deadline of every request of a running pass, ms (0:
   * not overdue). /readyz reports such a lane: its work no longer answers anyone.
   */
  overdueMs(now = performance.now()): number {
    let worst = 0;
    for (const p of this.running) worst = Math.max(worst, now - p.deadline);
    return worst;
  }

  /**
   * Queues a search of `queries` for `k` hits; resolves with its rows and the size of its pass. A
   * request of more than maxBatch queries goes as several passes (its parts queued together, so it
   * fits the queue whole or is refused whole); its rows come back in order. `deadlineMs`: the time
   * the request has left (Infinity: no deadline; 0 or less: it is past, 504 at once).
   */
  async search(
    queries: EncodedTokens,
    k: number,
    key: string,
    deadlineMs: number,
    limits: RequestLimits = {},
  ): Promise<{ hits: CorpusHit[][]; batch: number; pass: PassToken }> {
    const n = itemCount(queries);
    if (n <= this.options.maxBatch)
      return new Promise((resolve, reject) => {
        this.enqueue(
          [{ kind: 'search', queries, k, key, size: n, resolve, reject } as SearchJob],
          deadlineMs,
          limits,
        );
      });
    const parts: Promise<{ hits: CorpusHit[][]; batch: number; pass: PassToken }>[] = [];
    const jobs: SearchJob[] = [];
    for (let at = 0; at < n; at += this.options.maxBatch) {
      const part = sliceItems(queries, at, Math.min(n, at + this.options.maxBatch));
      parts.push(
        new Promise((resolve, reject) => {
          jobs.push({
            kind: 'search',
            queries: part,
            k,
            key,
            size: itemCount(part),
            resolve,
            reject,
          } as SearchJob);
        }),
      );
    }
    this.enqueue(jobs, deadlineMs, limits);
    try {
      const answers = await Promise.all(parts);
      return {
        hits: answers.flatMap((a) => a.hits),
        batch: Math.max(...answers.map((a) => a.batch)),
        pass: answers[answers.length - 1].pass,
      };
    } catch (e) {
      // one part failed: the others are dropped from their passes
      for (const job of jobs) job.reject(e);
      throw e;
    }
  }

  /** Queues other work as a pass of its own; `run` gets a signal that aborts at the deadline. */
  solo<T>(
    run: (signal: AbortSignal) => Promise<T>,
    deadlineMs: number,
    limits: RequestLimits = {},
  ): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.enqueue([{ kind: 'solo', run, size: 1, resolve, reject } as SoloJob], deadlineMs, limits);
    });
  }

  private enqueue(
    partials: Omit<Job, 'enqueued' | 'settled' | 'taken' | 'limitMs' | 'deadline'>[],
    deadlineMs: number,
    limits: RequestLimits,
  ) {
    const jobs = partials as Job[];
    const size = jobs.reduce((a, j) => a + j.size, 0);
    if (this.closing) {
      for (const job of jobs) job.reject(new ClosingError('the server is shutting down'));
      return;
    }
    if (this.queued > 0 && this.queued + size > this.options.maxQueue) {
      // roughly the time the passes ahead take
      const passes = Math.ceil(this.queued / this.options.maxBatch);
      const retry = Math.max(1, Math.ceil(passes * this.passSeconds));
      for (const job of jobs) job.reject(new QueueFullError(retry, this.queued, this.options.maxQueue));
      return;
    }
    const now = performance.now();
    const timed = Number.isFinite(deadlineMs);
    const limitMs = limits.limitMs ?? deadlineMs;
    for (const job of jobs) this.arm(job, now, timed ? Math.max(0, deadlineMs) : undefined, limitMs);
    if (limits.gone && !this.watchGone(jobs, limits.gone)) return;
    this.queue.push(...jobs);
    this.queued += size;
    this.schedule();
  }

  /**
   * Drops a request's jobs once its client is gone (queued ones leave the queue at the next take,
   * unscored; a pass whose every job is gone aborts); false when it is gone already.
   */
  private watchGone(jobs: Job[], gone: AbortSignal): boolean {
    const drop = () => {
      if (jobs.every((j) => j.settled)) return;
      const stage = jobs.some((j) => j.taken) ? 'running' : 'queued';
      for (const job of jobs) job.reject(new AbandonedError());
      this.options.onAbandoned?.(stage);
    };
    if (gone.aborted) {
      drop();
      return false;
    }
    gone.addEventListener('abort', drop, { once: true });
    return true;
  }

  /** Wraps a job's resolve / reject so it settles once, and starts its deadline. */
  private arm(job: Job, now: number, deadlineMs: number | undefined, limitMs: number) {
    job.enqueued = now;
    job.settled = false;
    job.taken = false;
    job.limitMs = limitMs;
    job.deadline = deadlineMs === undefined ? Number.POSITIVE_INFINITY : now + deadlineMs;
    const resolve = job.resolve as (v: unknown) => void;
    const reject = job.reject;
    const settle = (answered: boolean) => {
      job.settled = true;
      if (job.timer) clearTimeout(job.timer);
      job.onSettle?.(answered);
    };
    job.resolve = (v: unknown) => {
      if (job.settled) return;
      settle(true);
      resolve(v);
    };
    job.reject = (e: unknown) => {
      if (job.settled) return;
      settle(false);
      reject(e);
    };
    if (deadlineMs !== undefined) {
      job.timer = setTimeout(() => job.reject(new DeadlineError(limitMs)), deadlineMs);
      job.timer.unref();
    }
  }

  private schedule() {
    if (this.queue.length === 0 || this.inFlight >= this.depthLimit) return;
    const now = performance.now();
    let at: number;
    // a full batch goes now; so does other work (rerank, score): it never has company to wait for
    if (this.queued >= this.options.maxBatch || this.queue[0].kind === 'solo') at = now;
    else if (this.inFlight === 0) {
      // the wait for company counts from when the lane is free: clients answered by the pass that just
      // ended get the wait to come back and join the next one, instead of splitting into two halves
      // that alternate, each pass half as large as it could be. Once as many queries wait as that
      // pass had, within the wait after it, its clients are back: waiting longer would only idle the
      // backend (on the CPU, a tenth of every pass). (Not after a quiet spell: a burst then waits
      // for company as before, not going in passes the size of the last small one.)
      const back =
        this.lastPassQueries > 0 &&
        this.queued >= this.lastPassQueries &&
        now - this.laneFreeAt <= this.waitMs;
      at = back ? now : Math.max(this.queue[0].enqueued, this.laneFreeAt) + this.waitMs;
    } else {
      // pipelined: hand the next pass over when the backend has about a quarter of a pass left, so it
      // gathers as long as it can and the backend still never waits for it
      at = Math.max(
        this.busyUntil - 1000 * (this.options.handOverLead ?? 0.25) * this.passSeconds,
        this.queue[0].enqueued + this.waitMs,
      );
    }
    if (at <= now) {
      this.clearTimer();
      void this.pass();
      return;
    }
    if (this.timer && this.timerAt === at) return;
    this.clearTimer();
    this.timerAt = at;
    // on firing, decide again: a pass that ended meanwhile may have moved the hand-over time
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.schedule();
    }, at - now);
  }

  private clearTimer() {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** The jobs of the next pass: the first live job, and (searches) the live searches of its key that fit. */
  private take(): Job[] {
    const taken: Job[] = [];
    let queries = 0;
    let key: string | undefined;
    const rest: Job[] = [];
    const now = performance.now();
    for (const job of this.queue) {
      // a request past its deadline (its timer may not have fired yet) is dropped before the pass
      if (!job.settled && job.deadline <= now) job.reject(new DeadlineError(job.limitMs));
      if (job.settled) {
        this.queued -= job.size;
        continue;
      }
      const fits =
        taken.length === 0 ||
        (key !== undefined &&
          job.kind === 'search' &&
          job.key === key &&
          queries + job.size <= this.options.maxBatch);
      if (fits) {
        job.taken = true;
        taken.push(job);
        this.queued -= job.size;
        queries += job.size;
        if (taken.length === 1) key = job.kind === 'search' ? job.key : undefined;
      } else rest.push(job);
    }
    this.queue = rest;
    return taken;
  }

  private async pass() {
    if (this.inFlight >= this.depthLimit) return;
    const jobs = this.take();
    if (jobs.length === 0) {
      if (this.inFlight === 0 && this.queue.length === 0) for (const wake of this.idle.splice(0)) wake();
      return;
    }
    this.inFlight++;
    const started = performance.now();
    const queued = jobs.map((j) => (started - j.enqueued) / 1000);
    // the pass's work stops once none of its requests waits for it any more (answered ones: the
    // work is done, nothing to stop; no error made and no abort event per pass)
    const abort = new AbortController();
    let open = jobs.length;
    for (const job of jobs)
      job.onSettle = (answered) => {
        if (--open === 0 && !answered && !abort.signal.aborted) abort.abort(new DeadlineError(job.limitMs));
      };
    const running = { started, deadline: Math.max(...jobs.map((j) => j.deadline)) };
    this.running.add(running);
    // the backend takes it after the passes ahead of it
    this.busyUntil = Math.max(started, this.busyUntil) + 1000 * this.passSeconds;
    let phases: PassPhases | undefined;
    try {
      if (jobs[0].kind === 'solo') {
        const job = jobs[0];
        try {
          job.resolve(await job.run(abort.signal));
        } catch (e) {
          job.reject(e);
        }
      } else {
        phases = await this.searchPass(jobs as SearchJob[], abort.signal);
      }
    } finally {
      this.running.delete(running);
      for (const job of jobs) job.onSettle = undefined;
      const ended = performance.now();
      const seconds = (ended - started) / 1000;
      // pipelined passes queue behind each other in the backend: their own time is from the later of
      // their start and the previous pass's end
      const own = (ended - Math.max(started, this.laneFreeAt)) / 1000;
      this.passSeconds = 0.7 * this.passSeconds + 0.3 * own;
      this.inFlight--;
      // the next pass in flight (if any) starts on the backend now
      this.busyUntil = ended + (this.inFlight > 0 ? 1000 * this.passSeconds : 0);
      this.laneFreeAt = ended;
      const queries = jobs.reduce((a, j) => a + j.size, 0);
      if (jobs[0].kind === 'search') this.lastPassQueries = queries;
      this.onPass?.({ queries, requests: jobs.length, seconds, phases, queued });
      if (this.queue.length > 0) this.schedule();
      else if (this.inFlight === 0) for (const wake of this.idle.splice(0)) wake();
    }
  }

  private async searchPass(jobs: SearchJob[], signal: AbortSignal): Promise<PassPhases | undefined> {
    const k = Math.max(...jobs.map((j) => j.k));
    const batch = jobs.reduce((a, j) => a + j.size, 0);
    try {
      const t0 = performance.now();
      const parts = jobs.map((j) => j.queries);
      const dim = parts[0].dim;
      const keep = this.options.keepBits?.(jobs[0].key);
      let queries: EncodedTokens;
      if (keep !== undefined && parts.every((p) => p.dtype === keep)) queries = concatBits(parts, dim);
      else {
        // every request's tokens decoded straight into the pass's one float32 buffer
        const packed = concatEncoded(parts, dim);
        queries = { dtype: 'float32', values: packed.data, offsets: packed.offsets, dim };
      }
      const t1 = performance.now();
      const timing: SearchTiming = { merge: 0 };
      const hits = await this.searchRun(queries, k, jobs[0].key, timing, signal);
      const t2 = performance.now();
      // the backend answers in order: a pass handed over while another ran started when that one's
      // answer came
      const from = Math.max(t1, this.lastAnswerAt);
      this.lastAnswerAt = t2;
      let at = 0;
      // (a request whose deadline passed is answered already: not counted)
      const pass: PassToken = {
        resolvedAt: performance.now(),
        pending: jobs.filter((j) => !j.settled).length,
        ...(timing.stats ? { stats: timing.stats } : {}),
      };
      for (const job of jobs) {
        const rows = hits.slice(at, at + job.size);
        // the pass ranked by the largest k: a smaller one keeps a prefix
        for (let r = 0; r < rows.length; r++) if (rows[r].length > job.k) rows[r] = rows[r].slice(0, job.k);
        at += job.size;
        job.resolve({ hits: rows, batch, pass });
      }
      const t3 = performance.now();
      return {
        gather: (t1 - t0) / 1000,
        wait: (from - t1) / 1000,
        backend: (t2 - from) / 1000,
        merge: timing.merge,
        split: (t3 - t2) / 1000,
      };
    } catch (e) {
      for (const job of jobs) job.reject(e);
      return undefined;
    }
  }

  /** Refuses new work and resolves once the queue is empty and no pass runs. */
  drain(): Promise<void> {
    this.closing = true;
    if (this.inFlight === 0 && this.queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idle.push(resolve));
  }
}
