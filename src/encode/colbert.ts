// loadColbert: a local ColBERT model directory (PyLate / Hugging Face layout) to an encoder whose
// encodeQueries / encodeDocuments give the ragged token batches the rest of maxsim takes. The ONNX
// encoder runs in onnxruntime-node (its own threads: the event loop only tokenizes and projects, one
// batch at a time, yielding between batches).

import * as fs from 'node:fs';
import * as path from 'node:path';
import { checkSignal } from '../abort.js';
import { FormatError, InvalidArgumentError } from '../errors.js';
import { decodeToFloat32, encodeFloats } from '../floats.js';
import { raggedBatch, type TokenBatch } from '../tensor.js';
import { type DenseLayer, findDense, projectRows } from './dense.js';
import { fetchModel } from './remote.js';
import { loadOrt, loadTokenizerClass, type Ort, type OrtSession, type OrtTensor } from './runtime.js';
import { type ColbertSettings, resolveSettings } from './settings.js';
import { ColbertTokenizer, type Tokenized } from './tokenize.js';

export interface LoadColbertOptions extends Partial<ColbertSettings> {
  /** Where the ONNX encoder runs: 'cpu' (default) or 'cuda' (onnxruntime-node's CUDA build). */
  backend?: 'cpu' | 'cuda';
  /** dtype of the embeddings returned (default 'float32'). */
  dtype?: 'float32' | 'float16';
  /** Texts per encoder run (default 32). */
  batchSize?: number;
  /** onnxruntime's intra-op threads (default: its own choice, the physical cores). */
  threads?: number;
  /** The ONNX file, relative to the model directory (default model.onnx, else onnx/model.onnx). */
  onnxFile?: string;
  /**
   * false: the ONNX model's output is already the final token embedding (a projection exported into
   * the graph); no Dense layer is looked for. Default true: a projection is required.
   */
  projection?: boolean;
  /** Allow `model` to be a Hugging Face model id fetched over the network (never otherwise). */
  allowRemote?: boolean;
  /** Cache folder for allowRemote downloads (default ~/.cache/maxsim/models). */
  cacheDir?: string;
}

export interface EncodeOptions {
  signal?: AbortSignal;
  /** Called after each batch with the texts encoded so far and the total. */
  onProgress?: (done: number, total: number) => void;
  /** false: a text longer than the length is an error instead of being truncated (default true). */
  truncate?: boolean;
}

export interface ColbertInfo {
  dir: string;
  onnx: string;
  settingsFrom: string;
  settings: ColbertSettings;
  hidden: number | undefined;
  dim: number | undefined;
  projection: string[];
  backend: 'cpu' | 'cuda';
  dtype: 'float32' | 'float16';
}

export interface ColbertEncoder {
  /** The embedding dimension (known after the first batch when the model has no projection). */
  readonly dim: number | undefined;
  readonly settings: Readonly<ColbertSettings>;
  readonly tokenizer: ColbertTokenizer;
  readonly info: ColbertInfo;
  encodeQueries(texts: readonly string[], options?: EncodeOptions): Promise<TokenBatch>;
  encodeDocuments(texts: readonly string[], options?: EncodeOptions): Promise<TokenBatch>;
  /** Texts tokenized by `tokenizer.query` / `tokenizer.document`, encoded (no second tokenization). */
  encodeTokenized(
    kind: 'query' | 'document',
    items: readonly Tokenized[],
    options?: EncodeOptions,
  ): Promise<TokenBatch>;
  close(): Promise<void>;
}

function onnxPath(dir: string, file: string | undefined): string {
  const candidates = file !== undefined ? [file] : ['model.onnx', path.join('onnx', 'model.onnx')];
  for (const c of candidates) if (fs.existsSync(path.join(dir, c))) return path.join(dir, c);
  throw new FormatError(dir, `no ONNX encoder (looked for ${candidates.join(', ')})`);
}

async function resolveDir(model: string, options: LoadColbertOptions): Promise<string> {
  if (typeof model !== 'string' || model === '')
    throw new InvalidArgumentError('model', 'a model directory', JSON.stringify(model) ?? String(model));
  if (fs.existsSync(model)) {
    if (!fs.statSync(model).isDirectory())
      throw new InvalidArgumentError('model', 'a model directory', `the file ${model}`);
    return model;
  }
  if (options.allowRemote === true) return fetchModel(model, options);
  throw new InvalidArgumentError(
    'model',
    'an existing model directory (maxsim never downloads a model unless allowRemote: true)',
    JSON.stringify(model),
  );
}

function positiveInt(name: string, v: unknown, fallback: number | undefined): number | undefined {
  if (v === undefined) return fallback;
  if (!Number.isInteger(v) || (v as number) < 1 || (v as number) > 1_000_000)
    throw new InvalidArgumentError(name, 'a positive integer', String(v));
  return v as number;
}

/** Opens the ColBERT model in `model` (a directory) for encoding. */
export async function loadColbert(model: string, options: LoadColbertOptions = {}): Promise<ColbertEncoder> {
  if (typeof options !== 'object' || options === null)
    throw new InvalidArgumentError('options', 'an options object', String(options));
  const backend = options.backend ?? 'cpu';
  if (backend !== 'cpu' && backend !== 'cuda')
    throw new InvalidArgumentError('backend', "'cpu' or 'cuda'", JSON.stringify(backend));
  const dtype = options.dtype ?? 'float32';
  if (dtype !== 'float32' && dtype !== 'float16')
    throw new InvalidArgumentError('dtype', "'float32' or 'float16'", JSON.stringify(dtype));
  const batchSize = positiveInt('batchSize', options.batchSize, 32)!;
  const threads = positiveInt('threads', options.threads, undefined);
  const dir = await resolveDir(model, options);
  const { settings, source } = resolveSettings(dir, options);
  const onnx = onnxPath(dir, options.onnxFile);
  const layers = options.projection === false ? [] : findDense(dir);
  if (options.projection !== false && layers.length === 0)
    throw new FormatError(
      dir,
      'no projection (expected 1_Dense/model.safetensors with linear.weight, as PyLate saves it; ' +
        'pass projection: false if the ONNX output is already the final embedding)',
    );
  const [Tokenizer, ort] = await Promise.all([loadTokenizerClass(), loadOrt()]);
  const tokenizer = ColbertTokenizer.fromDir(dir, settings, Tokenizer);
  let session: OrtSession;
  try {
    session = await ort.InferenceSession.create(onnx, {
      executionProviders: [backend],
      graphOptimizationLevel: 'all',
      ...(threads ? { intraOpNumThreads: threads } : {}),
    });
  } catch (error) {
    throw new FormatError(onnx, `onnxruntime could not load it (${(error as Error).message.split('\n')[0]})`);
  }
  const known = new Set(['input_ids', 'attention_mask', 'token_type_ids', 'position_ids']);
  const unknown = session.inputNames.filter((n) => !known.has(n));
  if (unknown.length > 0 || !session.inputNames.includes('input_ids'))
    throw new FormatError(
      onnx,
      `inputs [${session.inputNames.join(', ')}] are not a BERT-style encoder's (input_ids, attention_mask, ...)`,
    );
  const output =
    ['last_hidden_state', 'token_embeddings'].find((n) => session.outputNames.includes(n)) ??
    session.outputNames[0];
  return new Encoder(
    dir,
    onnx,
    source,
    settings,
    tokenizer,
    layers,
    ort,
    session,
    output,
    backend,
    dtype,
    batchSize,
  );
}

class Encoder implements ColbertEncoder {
  private hidden: number | undefined;
  private closed = false;

  constructor(
    private readonly dir: string,
    private readonly onnx: string,
    private readonly source: string,
    readonly settings: ColbertSettings,
    readonly tokenizer: ColbertTokenizer,
    private readonly layers: readonly DenseLayer[],
    private readonly ort: Ort,
    private readonly session: OrtSession,
    private readonly output: string,
    private readonly backend: 'cpu' | 'cuda',
    private readonly dtype: 'float32' | 'float16',
    private readonly batchSize: number,
  ) {
    this.hidden = layers.length > 0 ? layers[0].inFeatures : undefined;
  }

  get dim(): number | undefined {
    return this.layers.length > 0 ? this.layers[this.layers.length - 1].outFeatures : this.hidden;
  }

  get info(): ColbertInfo {
    return {
      dir: this.dir,
      onnx: this.onnx,
      settingsFrom: this.source,
      settings: { ...this.settings, skiplistWords: [...this.settings.skiplistWords] },
      hidden: this.hidden,
      dim: this.dim,
      projection: this.layers.map((l) => `${l.file} [${l.outFeatures}, ${l.inFeatures}]`),
      backend: this.backend,
      dtype: this.dtype,
    };
  }

  encodeQueries(texts: readonly string[], options: EncodeOptions = {}): Promise<TokenBatch> {
    return this.encode(texts, true, options);
  }

  encodeDocuments(texts: readonly string[], options: EncodeOptions = {}): Promise<TokenBatch> {
    return this.encode(texts, false, options);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.session.release();
  }

  /**
   * Embeddings of texts already tokenized by this encoder's tokenizer (`tokenizer.query` for
   * 'query', `tokenizer.document` for 'document'): the HTTP service tokenizes while it admits a
   * request, then encodes without tokenizing again.
   */
  async encodeTokenized(
    kind: 'query' | 'document',
    items: readonly Tokenized[],
    options: EncodeOptions = {},
  ): Promise<TokenBatch> {
    if (kind !== 'query' && kind !== 'document')
      throw new InvalidArgumentError('kind', "'query' or 'document'", JSON.stringify(kind));
    if (!Array.isArray(items))
      throw new InvalidArgumentError('items', 'an array of tokenized texts', typeof items);
    return this.encodeItems(
      items.length,
      (i) => items[i].ids.length,
      (i) => items[i],
      kind === 'query',
      options,
    );
  }

  private async encode(
    texts: readonly string[],
    isQuery: boolean,
    options: EncodeOptions,
  ): Promise<TokenBatch> {
    if (!Array.isArray(texts)) throw new InvalidArgumentError('texts', 'an array of strings', typeof texts);
    for (let i = 0; i < texts.length; i++)
      if (typeof texts[i] !== 'string')
        throw new InvalidArgumentError(
          `texts[${i}]`,
          'a string',
          texts[i] === null ? 'null' : typeof texts[i],
        );
    const truncate = options.truncate !== false;
    return this.encodeItems(
      texts.length,
      (i) => texts[i].length,
      (i) => this.tokenizeOne(texts[i], i, isQuery, truncate),
      isQuery,
      options,
    );
  }

  /** Encodes `count` items in batches, longest (by `size`) first; `item` tokenizes one on demand. */
  private async encodeItems(
    count: number,
    size: (i: number) => number,
    item: (i: number) => Tokenized,
    isQuery: boolean,
    options: EncodeOptions,
  ): Promise<TokenBatch> {
    if (this.closed) throw new InvalidArgumentError('encoder', 'an open encoder', 'one closed by close()');
    const signal = checkSignal(options.signal);
    signal?.throwIfAborted();
    // Longest first, as PyLate orders them: batches of similar lengths pad little.
    const order = Array.from({ length: count }, (_, i) => i).sort((a, b) => size(b) - size(a) || a - b);
    const items: Float32Array[] = new Array(count);
    for (let start = 0; start < order.length; start += this.batchSize) {
      const batch = order.slice(start, start + this.batchSize);
      const vectors = await this.run(batch.map(item), isQuery);
      batch.forEach((i, k) => {
        items[i] = vectors[k];
      });
      signal?.throwIfAborted();
      options.onProgress?.(Math.min(start + this.batchSize, order.length), order.length);
      // let the event loop breathe between batches
      await new Promise((resolve) => setImmediate(resolve));
    }
    return this.pack(items);
  }

  private tokenizeOne(text: string, index: number, isQuery: boolean, truncate: boolean): Tokenized {
    const t = isQuery ? this.tokenizer.query(text) : this.tokenizer.document(text);
    if (!truncate && t.dropped > 0) {
      const length = isQuery ? this.settings.queryLength : this.settings.documentLength;
      throw new InvalidArgumentError(
        `texts[${index}]`,
        `at most ${length} tokens (the ${isQuery ? 'query' : 'document'} length)`,
        `${t.ids.length + t.dropped} tokens`,
      );
    }
    return t;
  }

  /** One encoder run over a batch: pads to its longest, projects and normalizes the kept rows. */
  private async run(batch: Tokenized[], isQuery: boolean): Promise<Float32Array[]> {
    const b = batch.length;
    const L = Math.max(...batch.map((t) => t.ids.length));
    const ids = new BigInt64Array(b * L);
    const mask = new BigInt64Array(b * L);
    const pad = BigInt(this.tokenizer.padId ?? 0);
    batch.forEach((t, r) => {
      for (let j = 0; j < L; j++) {
        ids[r * L + j] = j < t.ids.length ? BigInt(t.ids[j]) : pad;
        mask[r * L + j] = j < t.ids.length ? BigInt(t.mask[j]) : 0n;
      }
    });
    const feeds: Record<string, OrtTensor> = {};
    const dims = [b, L];
    for (const name of this.session.inputNames) {
      if (name === 'input_ids') feeds[name] = new this.ort.Tensor('int64', ids, dims);
      else if (name === 'attention_mask') feeds[name] = new this.ort.Tensor('int64', mask, dims);
      else if (name === 'token_type_ids')
        feeds[name] = new this.ort.Tensor('int64', new BigInt64Array(b * L), dims);
      else if (name === 'position_ids') {
        const pos = new BigInt64Array(b * L);
        for (let i = 0; i < b * L; i++) pos[i] = BigInt(i % L);
        feeds[name] = new this.ort.Tensor('int64', pos, dims);
      }
    }
    const result = (await this.session.run(feeds))[this.output];
    const H = result.dims[2];
    if (result.dims.length !== 3 || result.dims[0] !== b || result.dims[1] !== L)
      throw new FormatError(
        this.onnx,
        `output ${this.output} has shape [${result.dims.join(', ')}], expected [${b}, ${L}, hidden]`,
      );
    if (this.layers.length > 0 && H !== this.layers[0].inFeatures)
      throw new FormatError(
        this.layers[0].file,
        `in_features ${this.layers[0].inFeatures} does not match the encoder's hidden size ${H}`,
      );
    this.hidden = H;
    const hidden =
      result.type === 'float16'
        ? decodeToFloat32(result.data as Uint16Array, 'float16', 1)
        : (result.data as Float32Array);
    const dim = this.dim!;
    return batch.map((t, r) => {
      const rows = this.tokenizer.keptPositions(t, isQuery);
      const out = new Float32Array(rows.length * dim);
      projectRows(this.layers, hidden, r * L * H, H, rows, out, 0, true);
      return out;
    });
  }

  private pack(items: Float32Array[]): TokenBatch {
    const dim = this.dim ?? 1;
    const offsets = new Float64Array(items.length + 1);
    for (let i = 0; i < items.length; i++) offsets[i + 1] = offsets[i] + items[i].length / dim;
    const data = new Float32Array(offsets[items.length] * dim);
    items.forEach((v, i) => {
      data.set(v, offsets[i] * dim);
    });
    const stored =
      this.dtype === 'float16' ? encodeFloats(data, 'float16', { name: 'embeddings', dim }) : data;
    return raggedBatch(stored, offsets, { dim, dtype: this.dtype, checkFinite: false });
  }
}
