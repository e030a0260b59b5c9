// maxsim/browser: the in-memory API on the WebAssembly engine, for browsers, workers and edge
// runtimes (ESM, no Node built-ins). Call init() once (it fetches native/wasm/maxsim-relaxed.wasm
// next to the package where relaxed SIMD validates, else maxsim.wasm, or takes the bytes you give
// it), then score, rank, or load a corpus from ArrayBuffers.
import { InvalidArgumentError } from '../errors.js';
import { queriesName, rankShaped, shapeScores } from '../ops/shape.js';
import { checkK, topKOfRow } from '../ops/topk.js';
import {
  checkCompatible,
  type DType,
  type Hit,
  isTokenBatch,
  isTokenMatrix,
  matrixAsBatch,
  raggedBatch,
  type ScoreMatrix,
  type TokenBatch,
  type TokenMatrix,
} from '../tensor.js';
import { type ResidentDocs, WasmEngine } from '../wasm/engine.js';
import { flavorFile, supportedFlavor, type WasmFlavor } from '../wasm/features.js';

export { BackendUnavailableError, InvalidArgumentError, MaxsimError } from '../errors.js';
export { decodeToFloat32, encodeFloats } from '../floats.js';
export {
  type DType,
  denseBatch,
  type FloatDType,
  type Hit,
  raggedBatch,
  type ScoreMatrix,
  type TokenBatch,
  type TokenMatrix,
  tokenMatrix,
} from '../tensor.js';
export { flavorFile, supportedFlavor, type WasmFlavor } from '../wasm/features.js';

/** Where the module comes from: its bytes, a fetch Response, or a URL (default: next to this package). */
export type WasmSource = ArrayBuffer | ArrayBufferView | Response | URL | string;

let engine: WasmEngine | undefined;
let loading: Promise<void> | undefined;

async function bytesOf(source: WasmSource): Promise<ArrayBuffer | ArrayBufferView> {
  if (source instanceof ArrayBuffer || ArrayBuffer.isView(source)) return source;
  // file: URLs (Node, Deno) have no fetch; the module name is a variable so bundlers leave it alone
  if (source instanceof URL && source.protocol === 'file:') {
    const fsModule = 'node:fs/promises';
    const fs = (await import(fsModule)) as { readFile(u: URL): Promise<Uint8Array> };
    return fs.readFile(source);
  }
  const response = source instanceof Response ? source : await fetch(source);
  if (!response.ok)
    throw new InvalidArgumentError(
      'source',
      'a reachable maxsim.wasm',
      `HTTP ${response.status} for ${response.url}`,
    );
  return response.arrayBuffer();
}

/** Loads and instantiates the wasm engine (once; later calls wait for the first). */
export function init(source?: WasmSource): Promise<void> {
  loading ??= (async () => {
    // dist/src/browser/index.js -> the package's native/wasm/, the module this browser validates
    const flavor = supportedFlavor();
    const url = new URL(`../../../native/wasm/${flavorFile(flavor)}`, import.meta.url);
    engine = await WasmEngine.fromBytes(
      await bytesOf(source ?? url),
      source === undefined ? flavor : 'unknown',
    );
  })().catch((e) => {
    loading = undefined;
    throw e;
  });
  return loading;
}

/** The module init() loaded ('unknown' for bytes given to it), or undefined before init(). */
export function wasmFlavor(): WasmFlavor | 'unknown' | undefined {
  return engine?.flavor;
}

function ready(): WasmEngine {
  if (!engine) throw new InvalidArgumentError('init', 'await init() before scoring', 'no engine loaded yet');
  return engine;
}

export interface BrowserScoreOptions {
  /** Cancels between slices of documents; the promise rejects with the signal's reason. */
  signal?: AbortSignal;
}

function asQueries(x: TokenMatrix | TokenBatch, docs: TokenBatch, name: string): TokenBatch {
  checkCompatible(x, docs, name, 'docs');
  if ((x.dtype === 'int8') !== (docs.dtype === 'int8')) {
    throw new InvalidArgumentError(
      `${name}.dtype`,
      `int8 on both sides or float on both sides (docs are ${docs.dtype})`,
      `'${x.dtype}'`,
    );
  }
  return isTokenMatrix(x) ? matrixAsBatch(x) : x;
}

/** One query against every document: Float32Array [B]. Yields to the page between slices. */
export function maxsim(
  query: TokenMatrix,
  docs: TokenBatch,
  options?: BrowserScoreOptions,
): Promise<Float32Array>;
/** Every query of a batch against every document: rows = queries, cols = documents. */
export function maxsim(
  queries: TokenBatch,
  docs: TokenBatch,
  options?: BrowserScoreOptions,
): Promise<ScoreMatrix>;
export function maxsim(
  queries: TokenMatrix | TokenBatch,
  docs: TokenBatch,
  options?: BrowserScoreOptions,
): Promise<Float32Array | ScoreMatrix>;
export async function maxsim(
  queries: TokenMatrix | TokenBatch,
  docs: TokenBatch,
  options: BrowserScoreOptions = {},
): Promise<Float32Array | ScoreMatrix> {
  const q = asQueries(queries, docs, queriesName(queries));
  return shapeScores(queries, await ready().score(q, docs, { signal: options.signal }), docs.count);
}

/** maxsim without yielding (blocks the thread: keep batches small on a page's main thread). */
export function maxsimSync(query: TokenMatrix, docs: TokenBatch): Float32Array;
export function maxsimSync(queries: TokenBatch, docs: TokenBatch): ScoreMatrix;
export function maxsimSync(queries: TokenMatrix | TokenBatch, docs: TokenBatch): Float32Array | ScoreMatrix;
export function maxsimSync(queries: TokenMatrix | TokenBatch, docs: TokenBatch): Float32Array | ScoreMatrix {
  const q = asQueries(queries, docs, queriesName(queries));
  return shapeScores(queries, ready().scoreSync(q, docs), docs.count);
}

/** The k best documents, best first (ties: lower index first): hits, or hits per query of a batch. */
export function topK(
  query: TokenMatrix,
  docs: TokenBatch,
  k: number,
  options?: BrowserScoreOptions,
): Promise<Hit[]>;
export function topK(
  queries: TokenBatch,
  docs: TokenBatch,
  k: number,
  options?: BrowserScoreOptions,
): Promise<Hit[][]>;
export function topK(
  queries: TokenMatrix | TokenBatch,
  docs: TokenBatch,
  k: number,
  options?: BrowserScoreOptions,
): Promise<Hit[] | Hit[][]>;
export async function topK(
  queries: TokenMatrix | TokenBatch,
  docs: TokenBatch,
  k: number,
  options: BrowserScoreOptions = {},
): Promise<Hit[] | Hit[][]> {
  checkK(k);
  return rankShaped(await maxsim(queries, docs, options), k);
}

export interface CorpusBuffers {
  /** Packed tokens [T, dim]: float32 values, float16 / bfloat16 bits, or int8 values. */
  data: ArrayBuffer | ArrayBufferView;
  /** B + 1 token offsets: document i is tokens [offsets[i], offsets[i+1]). */
  offsets: ArrayLike<number>;
  dim: number;
  dtype?: DType;
  /** int8 only: one float32 scale per token. */
  scales?: ArrayBuffer | Float32Array;
  /** Optional ids, one per document, returned with the hits. */
  ids?: readonly string[];
}

export interface CorpusHit extends Hit {
  id?: string;
}

/** Documents copied into the engine's memory once, searched many times. */
export class BrowserCorpus {
  readonly count: number;
  readonly dim: number;
  readonly dtype: DType;
  readonly #docs: TokenBatch;
  readonly #ids: readonly string[] | undefined;
  #resident: ResidentDocs | undefined;

  constructor(buffers: CorpusBuffers) {
    const dtype = buffers.dtype ?? 'float32';
    const raw = buffers.data instanceof ArrayBuffer ? buffers.data : buffers.data.buffer;
    const offset = buffers.data instanceof ArrayBuffer ? 0 : buffers.data.byteOffset;
    const bytes = buffers.data instanceof ArrayBuffer ? raw.byteLength : buffers.data.byteLength;
    const size = dtype === 'float32' ? 4 : dtype === 'int8' ? 1 : 2;
    if (bytes % size !== 0)
      throw new InvalidArgumentError('data', `a multiple of ${size} bytes for ${dtype}`, `${bytes} bytes`);
    const view =
      dtype === 'float32'
        ? new Float32Array(raw, offset, bytes / 4)
        : dtype === 'int8'
          ? new Int8Array(raw, offset, bytes)
          : new Uint16Array(raw, offset, bytes / 2);
    const scales = buffers.scales instanceof ArrayBuffer ? new Float32Array(buffers.scales) : buffers.scales;
    this.#docs = raggedBatch(view, buffers.offsets, { dim: buffers.dim, dtype, scales, view: true });
    if (buffers.ids && buffers.ids.length !== this.#docs.count) {
      throw new InvalidArgumentError(
        'ids',
        `${this.#docs.count} ids (one per document)`,
        `${buffers.ids.length}`,
      );
    }
    this.#ids = buffers.ids;
    this.count = this.#docs.count;
    this.dim = buffers.dim;
    this.dtype = dtype;
    this.#resident = ready().resident(this.#docs);
  }

  #live(): ResidentDocs {
    if (!this.#resident) throw new InvalidArgumentError('corpus', 'a corpus not yet freed', 'a freed corpus');
    return this.#resident;
  }

  /** Scores of one query against every document. */
  async score(query: TokenMatrix, options: BrowserScoreOptions = {}): Promise<Float32Array> {
    if (!isTokenMatrix(query))
      throw new InvalidArgumentError(
        'query',
        'a TokenMatrix (one query)',
        isTokenBatch(query) ? 'a TokenBatch' : typeof query,
      );
    const r = this.#live();
    return ready().score(asQueries(query, this.#docs, 'query'), this.#docs, { signal: options.signal }, r);
  }

  /** The k best documents for one query, with ids when the corpus has them. */
  async search(query: TokenMatrix, k: number, options: BrowserScoreOptions = {}): Promise<CorpusHit[]> {
    checkK(k);
    const hits: CorpusHit[] = topKOfRow(await this.score(query, options), k);
    if (this.#ids) for (const h of hits) h.id = this.#ids[h.index];
    return hits;
  }

  /** Gives the engine memory back (last loaded, first freed: see WasmEngine.resident). */
  free(): void {
    this.#resident?.free();
    this.#resident = undefined;
  }
}

/** A corpus from ArrayBuffers (after init()). */
export function corpusFromBuffers(buffers: CorpusBuffers): BrowserCorpus {
  return new BrowserCorpus(buffers);
}
