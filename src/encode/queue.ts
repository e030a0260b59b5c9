// Encoding batched across callers (the HTTP service's requests): texts of the same kind that arrive
// while a run is in flight, or within `waitMs` of the first, are encoded in one encoder call and each
// caller gets its own items back. One run at a time: the ONNX session is busy anyway, and the next run
// picks up everything that queued meanwhile. A caller whose signal aborts leaves the queue at once; a
// run stops (at its next batch) once every caller in it has aborted.

import { checkSignal } from '../abort.js';
import { InvalidArgumentError } from '../errors.js';
import { selectItems, type TokenBatch } from '../tensor.js';
import type { ColbertEncoder } from './colbert.js';
import type { Tokenized } from './tokenize.js';

export type EncodeKind = 'query' | 'document';

interface Pending {
  items: readonly Tokenized[];
  signal: AbortSignal | undefined;
  settled: boolean;
  resolve: (batch: TokenBatch) => void;
  reject: (error: unknown) => void;
}

/** One encoder run, as reported to `onRun`. */
export interface EncodeRun {
  kind: EncodeKind;
  texts: number;
  callers: number;
  seconds: number;
}

export interface EncodeQueueOptions {
  /** Most texts in one run (default 256). */
  maxTexts?: number;
  /** How long the first text of an idle queue waits for company (default 2 ms). */
  waitMs?: number;
  /** Called after every run that encoded (the server's metrics). */
  onRun?: (run: EncodeRun) => void;
}

export interface EncodeQueueStats {
  runs: number;
  texts: number;
  /** Most callers served by one run. */
  largestRun: number;
}

export class EncodeQueue {
  private readonly pending: Record<EncodeKind, Pending[]> = { query: [], document: [] };
  private running = false;
  private timer: NodeJS.Timeout | undefined;
  private readonly maxTexts: number;
  private readonly waitMs: number;
  readonly stats: EncodeQueueStats = { runs: 0, texts: 0, largestRun: 0 };

  constructor(
    readonly encoder: ColbertEncoder,
    private readonly options: EncodeQueueOptions = {},
  ) {
    this.maxTexts = options.maxTexts ?? 256;
    this.waitMs = options.waitMs ?? 2;
    if (!Number.isInteger(this.maxTexts) || this.maxTexts < 1)
      throw new InvalidArgumentError('maxTexts', 'a positive integer', String(options.maxTexts));
    if (!(Number.isFinite(this.waitMs) && this.waitMs >= 0))
      throw new InvalidArgumentError('waitMs', 'a number >= 0', String(options.waitMs));
  }

  /** Texts queued and not yet in a run. */
  get depth(): number {
    let n = 0;
    for (const kind of ['query', 'document'] as const)
      for (const p of this.pending[kind]) n += p.items.length;
    return n;
  }

  /** The embeddings of `texts` as queries or documents (one item per text, in order). */
  async encode(kind: EncodeKind, texts: readonly string[], signal?: AbortSignal): Promise<TokenBatch> {
    if (!Array.isArray(texts)) throw new InvalidArgumentError('texts', 'an array of strings', typeof texts);
    const bad = texts.findIndex((t) => typeof t !== 'string');
    if (bad >= 0) throw new InvalidArgumentError(`texts[${bad}]`, 'a string', typeof texts[bad]);
    const t = this.encoder.tokenizer;
    return this.encodeTokenized(
      kind,
      texts.map((x) => (kind === 'query' ? t.query(x) : t.document(x))),
      signal,
    );
  }

  /** As encode, for texts already tokenized by the encoder's tokenizer. */
  encodeTokenized(kind: EncodeKind, items: readonly Tokenized[], signal?: AbortSignal): Promise<TokenBatch> {
    if (kind !== 'query' && kind !== 'document')
      return Promise.reject(new InvalidArgumentError('kind', "'query' or 'document'", JSON.stringify(kind)));
    try {
      checkSignal(signal)?.throwIfAborted();
    } catch (error) {
      return Promise.reject(error);
    }
    return new Promise((resolve, reject) => {
      const p: Pending = { items, signal, settled: false, resolve, reject };
      const settle = <T>(f: (v: T) => void) => {
        return (v: T) => {
          if (p.settled) return;
          p.settled = true;
          signal?.removeEventListener('abort', onAbort);
          f(v);
        };
      };
      p.resolve = settle(resolve);
      p.reject = settle(reject);
      // an aborted caller leaves at once: out of the queue, or unanswered by the run it is in
      const onAbort = () => {
        const queue = this.pending[kind];
        const at = queue.indexOf(p);
        if (at >= 0) queue.splice(at, 1);
        p.reject(signal!.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.pending[kind].push(p);
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.running || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.runOnce();
    }, this.waitMs);
  }

  private take(): { kind: EncodeKind; group: Pending[] } | undefined {
    // queries first: they are short, and a search waits on them
    for (const kind of ['query', 'document'] as const) {
      const queue = this.pending[kind];
      if (queue.length === 0) continue;
      const group: Pending[] = [];
      let texts = 0;
      // always take one caller, however many texts it brings; then fill up to maxTexts
      while (queue.length > 0 && (group.length === 0 || texts + queue[0].items.length <= this.maxTexts)) {
        const p = queue.shift()!;
        group.push(p);
        texts += p.items.length;
      }
      return { kind, group };
    }
    return undefined;
  }

  private async runOnce(): Promise<void> {
    const next = this.take();
    if (!next) return;
    this.running = true;
    const { kind, group } = next;
    const items = group.flatMap((p) => p.items);
    // the run stops once nobody waits for it
    const abort = new AbortController();
    const onAbort = () => {
      if (group.every((p) => p.settled)) abort.abort();
    };
    for (const p of group) p.signal?.addEventListener('abort', onAbort, { once: true });
    const t0 = performance.now();
    try {
      const batch = await this.encoder.encodeTokenized(kind, items, { signal: abort.signal });
      this.stats.runs++;
      this.stats.texts += items.length;
      this.stats.largestRun = Math.max(this.stats.largestRun, group.length);
      this.options.onRun?.({
        kind,
        texts: items.length,
        callers: group.length,
        seconds: (performance.now() - t0) / 1000,
      });
      let at = 0;
      for (const p of group) {
        const indices = Array.from({ length: p.items.length }, (_, i) => at + i);
        at += p.items.length;
        if (!p.settled) p.resolve(selectItems(batch, indices));
      }
    } catch (error) {
      // texts are checked when queued, so a failed run is the model's or the runtime's: all share it
      for (const p of group) p.reject(error);
    } finally {
      for (const p of group) p.signal?.removeEventListener('abort', onAbort);
      this.running = false;
      if (this.pending.query.length > 0 || this.pending.document.length > 0) this.schedule();
    }
  }
}
