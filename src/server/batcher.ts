// The cross-request batcher. Searches queue; a pass takes up to maxBatch queries (from as many
// requests as fit, waiting at most maxWaitMs for the first one's company), scores them in one call,
// and hands every request its own rows, cut to its own top_k (the pass ranks by the largest: the
// order is total, score then index, so a shorter list is a prefix). Other work (rerank, score) runs
// as a pass of its own in the same lane, so one pass at a time owns the cores or the GPU, and the
// queue bound and deadlines hold for everything.

import { MaxsimError } from '../errors.js';
import type { CorpusHit } from '../ops/corpus-search.js';
import { concatPacked, itemCount, type PackedTokens } from './codecs.js';

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

/** The batcher is draining for shutdown: HTTP 503. */
export class ClosingError extends MaxsimError {
  override name = 'ClosingError';
}

export interface BatcherOptions {
  /** Queries per pass (default 256). 1 turns batching off. */
  maxBatch: number;
  /** Longest a request waits for others before its pass starts, ms (default 2). */
  maxWaitMs: number;
  /** Queries queued at most; beyond it a request is refused with 429 (default 16 * maxBatch). */
  maxQueue: number;
}

export interface PassInfo {
  queries: number;
  requests: number;
  seconds: number;
}

export type SearchRun = (queries: PackedTokens, k: number, key: string) => Promise<CorpusHit[][]>;

interface BaseJob {
  size: number;
  enqueued: number;
  settled: boolean;
  timer?: NodeJS.Timeout;
  reject(e: unknown): void;
}
interface SearchJob extends BaseJob {
  kind: 'search';
  queries: PackedTokens;
  k: number;
  key: string;
  resolve(v: { hits: CorpusHit[][]; batch: number }): void;
}
interface SoloJob extends BaseJob {
  kind: 'solo';
  run: () => Promise<unknown>;
  resolve(v: unknown): void;
}
type Job = SearchJob | SoloJob;

export class Batcher {
  private queue: Job[] = [];
  private queued = 0;
  private running = false;
  private closing = false;
  private timer: NodeJS.Timeout | undefined;
  private lastPassSeconds = 0.01;
  private laneFreeAt = 0;
  private idle: (() => void)[] = [];

  constructor(
    private readonly searchRun: SearchRun,
    readonly options: BatcherOptions,
    private readonly onPass?: (p: PassInfo) => void,
  ) {}

  /** Queries waiting (not counting the pass running). */
  get depth(): number {
    return this.queued;
  }

  /** Queues a search of `queries` for `k` hits; resolves with its rows and the size of its pass. */
  search(
    queries: PackedTokens,
    k: number,
    key: string,
    deadlineMs: number,
  ): Promise<{ hits: CorpusHit[][]; batch: number }> {
    return new Promise((resolve, reject) => {
      this.enqueue(
        { kind: 'search', queries, k, key, size: itemCount(queries), resolve, reject } as SearchJob,
        deadlineMs,
      );
    });
  }

  /** Queues other work as a pass of its own. */
  solo<T>(run: () => Promise<T>, deadlineMs: number): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.enqueue({ kind: 'solo', run, size: 1, resolve, reject } as SoloJob, deadlineMs);
    });
  }

  private enqueue(partial: Omit<Job, 'enqueued' | 'settled'>, deadlineMs: number) {
    const job = partial as Job;
    if (this.closing) return job.reject(new ClosingError('the server is shutting down'));
    if (this.queued > 0 && this.queued + job.size > this.options.maxQueue) {
      // roughly the time the passes ahead take
      const passes = Math.ceil(this.queued / this.options.maxBatch);
      const retry = Math.max(1, Math.ceil(passes * this.lastPassSeconds));
      return job.reject(new QueueFullError(retry, this.queued, this.options.maxQueue));
    }
    job.enqueued = performance.now();
    job.settled = false;
    const resolve = job.resolve as (v: unknown) => void;
    const reject = job.reject;
    const settle = () => {
      job.settled = true;
      if (job.timer) clearTimeout(job.timer);
    };
    job.resolve = (v: unknown) => {
      if (job.settled) return;
      settle();
      resolve(v);
    };
    job.reject = (e: unknown) => {
      if (job.settled) return;
      settle();
      reject(e);
    };
    if (deadlineMs > 0 && Number.isFinite(deadlineMs)) {
      job.timer = setTimeout(() => job.reject(new DeadlineError(deadlineMs)), deadlineMs);
      job.timer.unref();
    }
    this.queue.push(job);
    this.queued += job.size;
    this.schedule();
  }

  private schedule() {
    if (this.running || this.queue.length === 0) return;
    if (this.timer) {
      if (this.queued < this.options.maxBatch) return;
      clearTimeout(this.timer); // a full batch goes now
      this.timer = undefined;
    }
    // the wait for company counts from when the lane is free: clients answered by the pass that just
    // ended get maxWaitMs to come back and join the next one, instead of splitting into two halves that
    // alternate, each pass half as large as it could be
    const since = Math.max(this.queue[0].enqueued, this.laneFreeAt);
    const wait =
      this.queued >= this.options.maxBatch ? 0 : since + this.options.maxWaitMs - performance.now();
    if (wait <= 0) {
      void this.pass();
      return;
    }
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.pass();
    }, wait);
  }

  /** The jobs of the next pass: the first live job, and (searches) the live searches of its key that fit. */
  private take(): Job[] {
    const taken: Job[] = [];
    let queries = 0;
    let key: string | undefined;
    const rest: Job[] = [];
    for (const job of this.queue) {
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
    if (this.running) return;
    this.running = true;
    try {
      const jobs = this.take();
      if (jobs.length === 0) return;
      const started = performance.now();
      if (jobs[0].kind === 'solo') {
        const job = jobs[0];
        try {
          job.resolve(await job.run());
        } catch (e) {
          job.reject(e);
        }
      } else {
        await this.searchPass(jobs as SearchJob[]);
      }
      const seconds = (performance.now() - started) / 1000;
      this.lastPassSeconds = seconds;
      const queries = jobs.reduce((a, j) => a + j.size, 0);
      this.onPass?.({ queries, requests: jobs.length, seconds });
    } finally {
      this.running = false;
      this.laneFreeAt = performance.now();
      if (this.queue.length > 0) this.schedule();
      else for (const wake of this.idle.splice(0)) wake();
    }
  }

  private async searchPass(jobs: SearchJob[]) {
    const k = Math.max(...jobs.map((j) => j.k));
    const batch = jobs.reduce((a, j) => a + j.size, 0);
    try {
      const queries =
        jobs.length === 1
          ? jobs[0].queries
          : concatPacked(
              jobs.map((j) => j.queries),
              jobs[0].queries.dim,
            );
      const hits = await this.searchRun(queries, k, jobs[0].key);
      let at = 0;
      for (const job of jobs) {
        const rows = hits.slice(at, at + job.size).map((row) => row.slice(0, job.k));
        at += job.size;
        job.resolve({ hits: rows, batch });
      }
    } catch (e) {
      for (const job of jobs) job.reject(e);
    }
  }

  /** Refuses new work and resolves once the queue is empty and no pass runs. */
  drain(): Promise<void> {
    this.closing = true;
    if (!this.running && this.queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idle.push(resolve));
  }
}
