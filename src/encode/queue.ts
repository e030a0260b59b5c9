// Encoding batched across callers (the HTTP service's requests): texts of the same kind that arrive
// while a run is in flight, or within `waitMs` of the first, are encoded in one encodeQueries /
// encodeDocuments call and each caller gets its own items back. One run at a time: the ONNX session
// is busy anyway, and the next run picks up everything that queued meanwhile.

import { InvalidArgumentError } from '../errors.js';
import { selectItems, type TokenBatch } from '../tensor.js';
import type { ColbertEncoder } from './colbert.js';

interface Pending {
  texts: readonly string[];
  resolve: (batch: TokenBatch) => void;
  reject: (error: unknown) => void;
}

export interface EncodeQueueOptions {
  /** Most texts in one run (default 256). */
  maxTexts?: number;
  /** How long the first text of an idle queue waits for company (default 2 ms). */
  waitMs?: number;
}

export interface EncodeQueueStats {
  runs: number;
  texts: number;
  /** Most callers served by one run. */
  largestRun: number;
}

export class EncodeQueue {
  private readonly pending: Record<'query' | 'document', Pending[]> = { query: [], document: [] };
  private running = false;
  private timer: NodeJS.Timeout | undefined;
  private readonly maxTexts: number;
  private readonly waitMs: number;
  readonly stats: EncodeQueueStats = { runs: 0, texts: 0, largestRun: 0 };

  constructor(
    readonly encoder: ColbertEncoder,
    options: EncodeQueueOptions = {},
  ) {
    this.maxTexts = options.maxTexts ?? 256;
    this.waitMs = options.waitMs ?? 2;
    if (!Number.isInteger(this.maxTexts) || this.maxTexts < 1)
      throw new InvalidArgumentError('maxTexts', 'a positive integer', String(options.maxTexts));
  }

  /** The embeddings of `texts` as queries or documents (one item per text, in order). */
  encode(kind: 'query' | 'document', texts: readonly string[]): Promise<TokenBatch> {
    if (!Array.isArray(texts))
      return Promise.reject(new InvalidArgumentError('texts', 'an array of strings', typeof texts));
    const bad = texts.findIndex((t) => typeof t !== 'string');
    if (bad >= 0)
      return Promise.reject(new InvalidArgumentError(`texts[${bad}]`, 'a string', typeof texts[bad]));
    return new Promise((resolve, reject) => {
      this.pending[kind].push({ texts, resolve, reject });
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

  private take(): { kind: 'query' | 'document'; group: Pending[] } | undefined {
    // the kind whose oldest caller has waited longest is not tracked: queries first (they are short)
    for (const kind of ['query', 'document'] as const) {
      const queue = this.pending[kind];
      if (queue.length === 0) continue;
      const group: Pending[] = [];
      let texts = 0;
      // always take one caller, however many texts it brings; then fill up to maxTexts
      while (queue.length > 0 && (group.length === 0 || texts + queue[0].texts.length <= this.maxTexts)) {
        const p = queue.shift()!;
        group.push(p);
        texts += p.texts.length;
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
    const texts = group.flatMap((p) => p.texts);
    try {
      const batch =
        kind === 'query'
          ? await this.encoder.encodeQueries(texts)
          : await this.encoder.encodeDocuments(texts);
      this.stats.runs++;
      this.stats.texts += texts.length;
      this.stats.largestRun = Math.max(this.stats.largestRun, group.length);
      let at = 0;
      for (const p of group) {
        const indices = Array.from({ length: p.texts.length }, (_, i) => at + i);
        at += p.texts.length;
        p.resolve(selectItems(batch, indices));
      }
    } catch (error) {
      // texts are checked when queued, so a failed run is the model's or the runtime's: all share it
      for (const p of group) p.reject(error);
    } finally {
      this.running = false;
      if (this.pending.query.length > 0 || this.pending.document.length > 0) this.schedule();
    }
  }
}
