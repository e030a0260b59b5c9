// Text in through the service: the ColBERT model `maxsim serve --model DIR` opened (or the one the
// corpus records in its encoder.json), the admission of text fields (count, length, well-formed
// Unicode, checked before anything is tokenized), tokenization on the JS thread in slices, and the
// encoder queue that batches every request's texts into shared runs (onnxruntime's own threads).
// The routes turn text fields into the same packed embeddings as embedding fields, so everything
// after this point (the batcher, scoring, appends) is the path embeddings take.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { ItemLimitError } from '../admission.js';
import { type ColbertEncoder, type LoadColbertOptions, loadColbert } from '../encode/colbert.js';
import { corpusEncoder } from '../encode/corpus-texts.js';
import { type EncodeKind, EncodeQueue } from '../encode/queue.js';
import { pythonStrip, type Tokenized } from '../encode/tokenize.js';
import { InvalidArgumentError, MaxsimError } from '../errors.js';
import type { TokenBatch } from '../tensor.js';
import { DeadlineError } from './batcher.js';
import type { EncodedTokens } from './codecs.js';
import { loneSurrogate } from './context.js';

/** The text options of a server (ServerOptions extends these). */
export interface TextOptions {
  /**
   * A ColBERT model directory (loadColbert's layout): text fields of search, rerank and documents,
   * and POST /v1/encode. Default: the model the corpus records (encoder.json) when its directory is
   * still there.
   */
  model?: string;
  /** loadColbert's options for `model` (threads, batchSize, settings). */
  modelOptions?: LoadColbertOptions;
  /** Texts in one request at most (default 1024): 413 beyond. */
  maxTexts?: number;
  /**
   * Characters of one text at most (default 32768): 413 beyond. Texts are tokenized on the JS thread
   * (about 90,000 tokens/s here), so this bounds how long one text holds it.
   */
  maxTextChars?: number;
  /** How long the first text of an idle encoder queue waits for company, ms (default 2). */
  encodeWaitMs?: number;
}

/** A text field sent to a server without a model: HTTP 400 (code no_model). */
export class NoModelError extends MaxsimError {
  override name = 'NoModelError';
  constructor(
    readonly field: string,
    why: string,
  ) {
    super(`${field} is text, and ${why}: send embeddings, or start the server with --model DIR`);
  }
}

/** A text longer than --max-text-chars: HTTP 413 (code text_too_long), before it is tokenized. */
export class TextLengthError extends InvalidArgumentError {
  override name = 'TextLengthError';
  constructor(field: string, chars: number, limit: number) {
    super(field, `at most ${limit} characters (one text: --max-text-chars)`, `${chars} characters`);
  }
}

/** Where the model came from, and its settings, as /v1/info and /v1/model show them. */
export interface ModelSummary {
  name: string;
  source: 'option' | 'corpus';
  dim: number;
  hidden: number | null;
  query_length: number;
  document_length: number;
  query_prefix: string;
  document_prefix: string;
  query_expansion: boolean;
  attend_to_expansion_tokens: boolean;
  skiplist: number;
  lowercase: boolean;
  backend: string;
}

interface Metrics {
  onRun(kind: EncodeKind, texts: number, seconds: number): void;
  tokenize(seconds: number): void;
  embed(seconds: number): void;
}

function describe(x: unknown): string {
  if (Array.isArray(x)) return `an array of ${x.length}`;
  if (x === null) return 'null';
  if (typeof x === 'string') return x.length > 40 ? `a string of ${x.length} characters` : JSON.stringify(x);
  return typeof x;
}

/** The model the server encodes with, or why it has none. */
export class TextModel {
  private metrics: Metrics | undefined;
  readonly maxTexts: number;
  readonly maxTextChars: number;
  private readonly queue: EncodeQueue | undefined;

  private constructor(
    readonly encoder: ColbertEncoder | undefined,
    readonly source: 'option' | 'corpus' | undefined,
    /** Why there is no model (when there is none). */
    private readonly missing: string,
    options: TextOptions,
  ) {
    this.maxTexts = options.maxTexts ?? 1024;
    this.maxTextChars = options.maxTextChars ?? 32_768;
    for (const [name, v] of [
      ['maxTexts', this.maxTexts],
      ['maxTextChars', this.maxTextChars],
    ] as const)
      if (!Number.isInteger(v) || v < 1)
        throw new InvalidArgumentError(name, 'a positive integer', String(v));
    this.queue = encoder
      ? new EncodeQueue(encoder, {
          waitMs: options.encodeWaitMs,
          onRun: (r) => this.metrics?.onRun(r.kind, r.texts, r.seconds),
        })
      : undefined;
  }

  /**
   * Opens options.model, else the model corpus `corpusDir` records (with the settings it was built
   * with) when its directory is there; checks its dimension against the corpus's. `note` gets one
   * line on what was chosen.
   */
  static async open(
    options: TextOptions,
    corpusDir: string,
    corpusDim: number,
    note: (line: string) => void,
  ): Promise<TextModel> {
    let dir = options.model;
    let source: 'option' | 'corpus' = 'option';
    let modelOptions = options.modelOptions ?? {};
    if (dir === undefined) {
      const recorded = corpusEncoder(corpusDir);
      if (!recorded) return new TextModel(undefined, undefined, 'the server has no model', options);
      if (!fs.existsSync(recorded.model)) {
        note(`the corpus's model ${recorded.model} is gone: text fields get 400 (start with --model DIR)`);
        return new TextModel(
          undefined,
          undefined,
          `the model the corpus was built with (${recorded.model}) is gone`,
          options,
        );
      }
      dir = recorded.model;
      source = 'corpus';
      modelOptions = {
        ...recorded.settings,
        onnxFile: path.relative(recorded.model, recorded.onnx),
        ...modelOptions,
      };
    }
    const encoder = await loadColbert(dir, modelOptions);
    try {
      if (encoder.info.dtype !== 'float32')
        throw new InvalidArgumentError(
          'modelOptions.dtype',
          "'float32' (the server scores float32)",
          encoder.info.dtype,
        );
      // one query encoded at start: it warms onnxruntime and tells the dimension of a model without
      // a projection
      const warm = await encoder.encodeQueries(['warm up']);
      if (warm.dim !== corpusDim)
        throw new InvalidArgumentError(
          source === 'option' ? 'model' : 'encoder.json',
          `a model of the corpus's dimension ${corpusDim}`,
          `${dir} (dim ${warm.dim})`,
        );
    } catch (error) {
      await encoder.close();
      throw error;
    }
    note(
      `model ${path.basename(path.resolve(dir))} (${source === 'corpus' ? 'recorded in the corpus' : '--model'}, dim ${corpusDim})`,
    );
    return new TextModel(encoder, source, '', options);
  }

  /** The metrics the server records (set once the registry exists). */
  setMetrics(metrics: Metrics): void {
    this.metrics = metrics;
  }

  /** The model as /v1/info shows it, or null. */
  summary(): ModelSummary | null {
    const e = this.encoder;
    if (!e) return null;
    const i = e.info;
    const s = i.settings;
    return {
      name: path.basename(path.resolve(i.dir)),
      source: this.source!,
      dim: i.dim!,
      hidden: i.hidden ?? null,
      query_length: s.queryLength,
      document_length: s.documentLength,
      query_prefix: s.queryPrefix,
      document_prefix: s.documentPrefix,
      query_expansion: s.doQueryExpansion,
      attend_to_expansion_tokens: s.attendToExpansionTokens,
      skiplist: s.skiplistWords.length,
      lowercase: s.doLowerCase,
      backend: i.backend,
    };
  }

  /** The encoder queue's counters. */
  get stats() {
    return this.queue?.stats ?? { runs: 0, texts: 0, largestRun: 0 };
  }

  /** Throws NoModelError naming `field` when the server has no model. */
  require(field: string): ColbertEncoder {
    if (!this.encoder) throw new NoModelError(field, this.missing);
    return this.encoder;
  }

  /**
   * The texts of a text field, admitted: a string (as one text) or an array of strings, at most
   * `maxItems` (and maxTexts) of them, each non-blank, at most maxTextChars, without lone surrogates.
   * Checked before the model is asked for (a bad body is a 400 whether or not there is one).
   */
  readTexts(value: unknown, field: string, maxItems = Number.POSITIVE_INFINITY): string[] {
    const texts = typeof value === 'string' ? [value] : value;
    if (!Array.isArray(texts))
      throw new InvalidArgumentError(field, 'a text or an array of texts', describe(value));
    const limit = Math.min(maxItems, this.maxTexts);
    if (texts.length > limit)
      throw new ItemLimitError(
        field,
        texts.length,
        limit,
        limit === this.maxTexts ? 'texts of one request: --max-texts' : 'queries of one request: --max-queue',
      );
    texts.forEach((t, i) => {
      const f = typeof value === 'string' ? field : `${field}[${i}]`;
      if (typeof t !== 'string')
        throw new InvalidArgumentError(f, 'a text (every item of the field a string)', describe(t));
      if (t.length > this.maxTextChars) throw new TextLengthError(f, t.length, this.maxTextChars);
      if (pythonStrip(t) === '') throw new InvalidArgumentError(f, 'a non-blank text', describe(t));
      const bad = loneSurrogate(t);
      if (bad >= 0)
        throw new InvalidArgumentError(
          f,
          'well-formed Unicode (no lone surrogate code unit)',
          `a lone surrogate U+${t.charCodeAt(bad).toString(16).toUpperCase()} at position ${bad}`,
        );
    });
    return texts as string[];
  }

  /**
   * Tokenizes admitted texts on the JS thread, yielding to the event loop every few milliseconds and
   * stopping when `signal` aborts; returns them with the embedding tokens each will have (the
   * skiplist applied), for the work admission that follows.
   */
  async tokenize(
    kind: EncodeKind,
    texts: readonly string[],
    field: string,
    signal: AbortSignal,
  ): Promise<{ items: Tokenized[]; tokens: number[] }> {
    const encoder = this.require(field);
    const t = encoder.tokenizer;
    const t0 = performance.now();
    let slice = t0;
    const items: Tokenized[] = [];
    const tokens: number[] = [];
    for (const text of texts) {
      const item = kind === 'query' ? t.query(text) : t.document(text);
      items.push(item);
      tokens.push(t.keptPositions(item, kind === 'query').length);
      if (performance.now() - slice > 4) {
        await new Promise((resolve) => setImmediate(resolve));
        signal.throwIfAborted();
        slice = performance.now();
      }
    }
    signal.throwIfAborted();
    this.metrics?.tokenize((performance.now() - t0) / 1000);
    return { items, tokens };
  }

  /** Embeddings of tokenized texts through the shared encoder queue, as packed float32 rows. */
  async embed(
    kind: EncodeKind,
    items: readonly Tokenized[],
    field: string,
    signal: AbortSignal,
  ): Promise<EncodedTokens> {
    this.require(field);
    const t0 = performance.now();
    const batch = await this.queue!.encodeTokenized(kind, items, signal);
    this.metrics?.embed((performance.now() - t0) / 1000);
    return packedOf(batch);
  }

  /** Texts to embeddings: admitted, tokenized, encoded. */
  async encodeTexts(kind: EncodeKind, texts: readonly string[], field: string, signal: AbortSignal) {
    const { items } = await this.tokenize(kind, texts, field, signal);
    return this.embed(kind, items, field, signal);
  }

  async close(): Promise<void> {
    await this.encoder?.close();
  }
}

/** A caller's items of an encoder run (consecutive in it) as packed rows: a view, no copy. */
function packedOf(batch: TokenBatch): EncodedTokens {
  const dim = batch.dim;
  const base = batch.count > 0 ? batch.starts[0] : 0;
  const offsets = [0];
  for (let i = 0; i < batch.count; i++) {
    if (batch.starts[i] - base !== offsets[i]) throw new MaxsimError('encoder items are not consecutive');
    offsets.push(offsets[i] + batch.lengths[i]);
  }
  const values = (batch.data as Float32Array).subarray(base * dim, (base + offsets[batch.count]) * dim);
  return { dtype: 'float32', values, offsets, dim };
}

/**
 * A request's deadline of `ms` counted from its arrival, `elapsedMs` ago (Fastify's
 * reply.elapsedTime: the body's upload and parse count too), as a signal (its reason a
 * DeadlineError, HTTP 504) and the time left of it, for the scoring that follows the encoding (0 or
 * less: none, the batcher refuses it at once).
 */
export function requestDeadline(
  ms: number,
  elapsedMs = 0,
): { signal: AbortSignal; left(): number; dispose(): void } {
  const controller = new AbortController();
  const end = performance.now() + ms - elapsedMs;
  const timer = setTimeout(() => controller.abort(new DeadlineError(ms)), Math.max(0, ms - elapsedMs));
  timer.unref();
  return {
    signal: controller.signal,
    left: () => end - performance.now(),
    dispose: () => clearTimeout(timer),
  };
}
