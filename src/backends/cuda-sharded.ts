// A corpus sharded across the GPUs of a host. Documents are placed in contiguous runs balanced by
// token count (the work of a scan), each GPU scores its shard with its own context, stream and
// worker thread (cuda.ts's devices), all at once, and the results merge exactly: scores land in
// global document order, and top-K lists merge under the one order every top-K follows (descending
// score, ties to the lower global index). Each shard's documents keep increasing global positions, so
// a shard's own ties-to-the-lower-index order agrees with the global one and the merge is exact.

import { BackendUnavailableError, InvalidArgumentError } from '../errors.js';
import type { QuantizeOptions } from '../ops/quantize.js';
import { better, checkK } from '../ops/topk.js';
import {
  type Hit,
  isTokenBatch,
  isTokenMatrix,
  matrixAsBatch,
  type ScoreMatrix,
  type TokenBatch,
  type TokenMatrix,
} from '../tensor.js';
import type { CudaDevice, DeviceCorpus, QuantizeMode8, ScoreOptions } from './cuda.js';
import { combinedTokenMean } from './cuda-center.js';
import type { DeviceDType } from './cuda-dispatch.js';

export interface ShardedTopKOptions extends ScoreOptions {
  /**
   * Two-stage search: the global `candidates` best per query by this corpus's scan (the int8 copy,
   * say), rescored exactly against `docs` (the same documents in a float dtype, sharded alike: made by
   * the same upload or quantize()d from this corpus's source), the k best of those returned.
   */
  rescore?: { docs: ShardedCorpus; candidates: number };
}

/** Where a shard lives and what it holds. */
export interface ShardInfo {
  /** CUDA device index. */
  device: number;
  /** Documents and tokens of this shard. */
  count: number;
  tokens: number;
}

/**
 * A corpus spread over several GPUs; the DeviceCorpus calls, run on every GPU at once. `bytes` and
 * `tokens` count all GPUs together.
 */
export interface ShardedCorpus
  extends Pick<
    DeviceCorpus,
    'count' | 'dim' | 'dtype' | 'documentScales' | 'tokens' | 'maxLength' | 'bytes' | 'disposed'
  > {
  readonly shards: readonly ShardInfo[];
  /** Why the corpus is unusable (a GPU failed during a call), or undefined. */
  readonly failure: string | undefined;
  score(query: TokenMatrix, options?: ScoreOptions): Promise<Float32Array>;
  score(queries: TokenBatch, options?: ScoreOptions): Promise<ScoreMatrix>;
  /** One query: one list; a batch: one list per query (as DeviceCorpus.topK). */
  topK(query: TokenMatrix, k: number, options?: ShardedTopKOptions): Promise<Hit[]>;
  topK(queries: TokenBatch, k: number, options?: ShardedTopKOptions): Promise<Hit[][]>;
  topK(queries: TokenMatrix | TokenBatch, k: number, options?: ShardedTopKOptions): Promise<Hit[] | Hit[][]>;
  /** Appends a batch to the shard with the fewest tokens that has room (corpora made by alloc only). */
  append(batch: TokenBatch): Promise<void>;
  quantize(mode: QuantizeMode8, options?: QuantizeOptions): Promise<ShardedCorpus>;
  /** Some documents (global indices, any order, repeats allowed) as a sharded view; see DeviceCorpus.select. */
  select(indices: ArrayLike<number>): Promise<ShardedCorpus>;
  dispose(): void;
}

export interface Part {
  dev: CudaDevice;
  corpus: DeviceCorpus;
  /** Global position of each local document, increasing. */
  positions: Float64Array;
  /** Room left for appends (alloc'd corpora only). */
  room?: { tokens: number; items: number };
}

export function describe(x: unknown): string {
  if (x === null) return 'null';
  if (typeof x === 'object') return (x as object).constructor?.name ?? 'object';
  return typeof x === 'number' || typeof x === 'string' ? JSON.stringify(x) : typeof x;
}

function asBatch(queries: TokenMatrix | TokenBatch): TokenBatch {
  if (isTokenMatrix(queries)) return matrixAsBatch(queries);
  if (isTokenBatch(queries)) return queries;
  throw new InvalidArgumentError('queries', 'a TokenMatrix or TokenBatch', describe(queries));
}

export function range(first: number, n: number): Float64Array {
  const p = new Float64Array(n);
  for (let i = 0; i < n; i++) p[i] = first + i;
  return p;
}

/** One GPU's error, named: argument errors stay argument errors, anything else fails the device. */
export function deviceError(dev: CudaDevice, e: unknown): Error {
  const where = `GPU ${dev.info.index} (${dev.info.name})`;
  if (e instanceof InvalidArgumentError)
    return new InvalidArgumentError(`${e.argument} on ${where}`, e.expected, e.received);
  return new BackendUnavailableError(`${where} failed: ${e instanceof Error ? e.message : String(e)}`);
}

/**
 * Runs fn on every item at once and waits for all (nothing is left in flight); the first failure,
 * named by its device, is thrown after the others settle.
 */
export async function onAll<T, R>(
  items: readonly T[],
  devOf: (t: T) => CudaDevice,
  fn: (t: T) => Promise<R>,
): Promise<R[]> {
  const settled = await Promise.allSettled(items.map(fn));
  const bad = settled.findIndex((s) => s.status === 'rejected');
  if (bad >= 0) throw deviceError(devOf(items[bad]), (settled[bad] as PromiseRejectedResult).reason);
  return settled.map((s) => (s as PromiseFulfilledResult<R>).value);
}

export class Sharded implements ShardedCorpus {
  private fail: string | undefined;
  private gone = false;
  private appending: Promise<void> = Promise.resolve();
  // global position -> (part, local index), built when select / two-stage first need it
  private lookup: { part: Int32Array; local: Int32Array } | undefined;

  constructor(
    private readonly parts: Part[],
    private readonly view: boolean,
    private readonly dims: { dim: number; dtype: DeviceDType },
  ) {}

  get count() {
    let n = 0;
    for (const p of this.parts) n += p.positions.length;
    return n;
  }
  get dim() {
    return this.dims.dim;
  }
  get dtype() {
    return this.dims.dtype;
  }
  get documentScales() {
    const live = this.parts.filter((p) => p.corpus.count > 0);
    return live.length > 0 && live.every((p) => p.corpus.documentScales);
  }
  get tokens() {
    return this.parts.reduce((s, p) => s + p.corpus.tokens, 0);
  }
  get maxLength() {
    return this.parts.reduce((m, p) => Math.max(m, p.corpus.maxLength), 0);
  }
  get bytes() {
    return this.parts.reduce((s, p) => s + p.corpus.bytes, 0);
  }
  get disposed() {
    return this.gone;
  }
  get failure() {
    return this.fail;
  }
  get shards(): ShardInfo[] {
    return this.parts.map((p) => ({
      device: p.dev.info.index,
      count: p.corpus.count,
      tokens: p.corpus.tokens,
    }));
  }

  private check() {
    if (this.gone)
      throw new InvalidArgumentError(
        'corpus',
        'a live ShardedCorpus',
        'one that was disposed (dispose() was called)',
      );
    if (this.fail) throw new BackendUnavailableError(`the sharded corpus is unusable: ${this.fail}`);
  }

  /** fn on every part at once; a device failure (not a bad argument) leaves the corpus unusable. */
  private async all<R>(parts: readonly Part[], fn: (p: Part) => Promise<R>): Promise<R[]> {
    this.check();
    try {
      return await onAll(parts, (p) => p.dev, fn);
    } catch (e) {
      if (e instanceof BackendUnavailableError) this.fail = e.message;
      throw e;
    }
  }

  /**
   * The variant one GPU would run for the whole corpus, so that every shard computes each score
   * exactly as one GPU would (the dispatcher's choice depends on the document count). Per shard when
   * the GPUs differ or the caller forced one.
   */
  private variantFor(batch: TokenBatch, options: ScoreOptions): ScoreOptions {
    if (options.variant !== undefined || this.parts.length === 0) return options;
    const first = this.parts[0].dev.info;
    const same = this.parts.every(
      (p) =>
        p.dev.info.name === first.name &&
        p.dev.info.computeCapability.join('.') === first.computeCapability.join('.') &&
        p.dev.info.tensorMaps === first.tensorMaps,
    );
    if (!same || this.count === 0 || batch.count === 0) return options;
    const shape = { count: this.count, dim: this.dim, dtype: this.dtype, maxLength: this.maxLength };
    const whole = {
      ...shape,
      tokens: this.tokens,
      documentScales: this.documentScales,
    } as unknown as DeviceCorpus;
    return { ...options, variant: this.parts[0].dev.plan(batch, whole, options).variant.name };
  }

  private checkQueries(batch: TokenBatch) {
    if (batch.dim !== this.dim)
      throw new InvalidArgumentError(
        'queries.dim',
        `${this.dim} (the dimension of the corpus)`,
        String(batch.dim),
      );
  }

  score(query: TokenMatrix, options?: ScoreOptions): Promise<Float32Array>;
  score(queries: TokenBatch, options?: ScoreOptions): Promise<ScoreMatrix>;
  async score(
    queries: TokenMatrix | TokenBatch,
    options: ScoreOptions = {},
  ): Promise<Float32Array | ScoreMatrix> {
    const batch = asBatch(queries);
    this.check();
    this.checkQueries(batch);
    const count = this.count;
    const rows = batch.count;
    const opts = this.variantFor(batch, options);
    const live = this.parts.filter((p) => p.positions.length > 0);
    const parts = await this.all(live, (p) => p.corpus.score(batch, opts));
    const out = new Float32Array(rows * count);
    live.forEach((p, i) => {
      const m = parts[i].data;
      const n = p.positions.length;
      // a shard's documents sit in runs of consecutive positions (one run after an upload, one per
      // append after appends): one block copy per run and row
      for (const [j0, j1] of runsOf(p.positions))
        for (let r = 0; r < rows; r++)
          out.set(m.subarray(r * n + j0, r * n + j1), r * count + p.positions[j0]);
    });
    return isTokenMatrix(queries) ? out : { data: out, rows, cols: count };
  }

  topK(query: TokenMatrix, k: number, options?: ShardedTopKOptions): Promise<Hit[]>;
  topK(queries: TokenBatch, k: number, options?: ShardedTopKOptions): Promise<Hit[][]>;
  async topK(
    queries: TokenMatrix | TokenBatch,
    k: number,
    options: ShardedTopKOptions = {},
  ): Promise<Hit[] | Hit[][]> {
    checkK(k);
    const lists = await this.topKAll(asBatch(queries), k, options);
    // one query, one list (as the root topK)
    return isTokenMatrix(queries) ? lists[0] : lists;
  }

  private async topKAll(batch: TokenBatch, k: number, options: ShardedTopKOptions): Promise<Hit[][]> {
    this.check();
    this.checkQueries(batch);
    const { rescore, ...scoreOptions } = options;
    if (rescore !== undefined) return this.twoStage(batch, k, rescore, scoreOptions);
    const empty = () => Array.from({ length: batch.count }, (): Hit[] => []);
    if (batch.count === 0 || k === 0 || this.count === 0) return empty();
    const opts = this.variantFor(batch, scoreOptions);
    const live = this.parts.filter((p) => p.positions.length > 0);
    const lists = await this.all(live, (p) => p.corpus.topK(batch, k, opts));
    const out = empty();
    live.forEach((p, i) => {
      for (let q = 0; q < batch.count; q++)
        for (const h of lists[i][q]) out[q].push({ index: p.positions[h.index], score: h.score });
    });
    return out.map((hits) => rank(hits, k));
  }

  /**
   * The global candidates by this corpus's scan (a merged top-K, so exactly one GPU's set), then for
   * each shard the union of the candidates it holds, scored exactly against its part of `docs`.
   */
  private async twoStage(
    batch: TokenBatch,
    k: number,
    rescore: { docs: ShardedCorpus; candidates: number },
    options: ScoreOptions,
  ): Promise<Hit[][]> {
    const docs = rescore?.docs;
    if (!(docs instanceof Sharded) || !samePlacement(this, docs))
      throw new InvalidArgumentError(
        'options.rescore.docs',
        'a ShardedCorpus of the same documents on the same GPUs (from the same upload, or quantize() of it)',
        docs instanceof Sharded ? 'a ShardedCorpus sharded otherwise' : describe(docs),
      );
    const c = rescore.candidates;
    if (typeof c !== 'number' || !Number.isInteger(c) || c < 0)
      throw new InvalidArgumentError('options.rescore.candidates', 'a non-negative integer', describe(c));
    docs.check();
    docs.checkQueries(batch);
    const keep = Math.min(c, this.count);
    if (batch.count === 0 || keep === 0 || k === 0)
      return Array.from({ length: batch.count }, (): Hit[] => []);
    const candidates = await this.topKAll(batch, keep, options);
    const { part, local } = docs.positionsLookup();
    // per part: its candidates' local indices (ascending, unique) and each one's column in the view
    const wanted = docs.parts.map(() => new Map<number, number>());
    for (const hits of candidates) for (const h of hits) wanted[part[h.index]].set(local[h.index], -1);
    const views = docs.parts.map((_, i) => Int32Array.from(wanted[i].keys()).sort());
    views.forEach((locals, i) => {
      locals.forEach((l, column) => {
        wanted[i].set(l, column);
      });
    });
    const live = docs.parts.map((p, i) => ({ p, locals: views[i] })).filter((v) => v.locals.length > 0);
    const exact = await docs.all(
      live.map((v) => v.p),
      async (p) => {
        const { locals } = live.find((v) => v.p === p) as { locals: Int32Array };
        const view = await p.corpus.select(locals);
        try {
          return await view.score(batch);
        } finally {
          view.dispose();
        }
      },
    );
    const matrixOf = new Map(live.map((v, i) => [docs.parts.indexOf(v.p), exact[i]]));
    return candidates.map((hits, q) =>
      rank(
        hits.map((h) => {
          const pi = part[h.index];
          const m = matrixOf.get(pi) as ScoreMatrix;
          return { index: h.index, score: m.data[q * m.cols + (wanted[pi].get(local[h.index]) as number)] };
        }),
        k,
      ),
    );
  }

  private positionsLookup(): { part: Int32Array; local: Int32Array } {
    if (!this.lookup) {
      const n = this.count;
      const part = new Int32Array(n);
      const local = new Int32Array(n);
      this.parts.forEach((p, i) => {
        p.positions.forEach((g, l) => {
          part[g] = i;
          local[g] = l;
        });
      });
      this.lookup = { part, local };
    }
    return this.lookup;
  }

  async append(batch: TokenBatch): Promise<void> {
    const run = this.appending.then(() => this.appendNow(batch));
    this.appending = run.catch(() => {});
    return run;
  }

  private async appendNow(batch: TokenBatch): Promise<void> {
    this.check();
    if (!isTokenBatch(batch))
      throw new InvalidArgumentError('batch', 'a TokenBatch (denseBatch or raggedBatch)', describe(batch));
    if (this.view)
      throw new InvalidArgumentError('corpus', 'a ShardedCorpus made by alloc()', 'a view made by select()');
    let tokens = 0;
    for (let i = 0; i < batch.count; i++) tokens += batch.lengths[i];
    const fits = this.parts.filter((p) => p.room && p.room.tokens >= tokens && p.room.items >= batch.count);
    if (fits.length === 0) {
      const most = Math.max(0, ...this.parts.map((p) => p.room?.tokens ?? 0));
      throw new InvalidArgumentError(
        'batch',
        this.parts.some((p) => p.room)
          ? `a batch that fits one GPU's remaining room (at most ${most} tokens)`
          : 'a ShardedCorpus made by alloc() (an uploaded one has no room to append)',
        `${batch.count} documents of ${tokens} tokens`,
      );
    }
    const target = fits.reduce((a, b) => (b.corpus.tokens < a.corpus.tokens ? b : a));
    const first = this.count;
    await this.all([target], (p) => p.corpus.append(batch));
    const room = target.room as { tokens: number; items: number };
    room.tokens -= tokens;
    room.items -= batch.count;
    const grown = new Float64Array(target.positions.length + batch.count);
    grown.set(target.positions);
    grown.set(range(first, batch.count), target.positions.length);
    target.positions = grown;
    this.lookup = undefined;
  }

  async quantize(mode: QuantizeMode8, options: QuantizeOptions = {}): Promise<ShardedCorpus> {
    // a shard without documents has nothing to quantize: the quantized corpus leaves it out
    const live = this.parts.filter((p) => p.positions.length > 0);
    // centered: on the mean of every shard's tokens, so that each score is the one-GPU corpus's
    const center =
      options?.center === true && this.dtype !== 'int8' && this.dtype !== 'fp8'
        ? await combinedTokenMean(live.map((p) => p.corpus))
        : options?.center;
    const made = await this.all(live, (p) => p.corpus.quantize(mode, { ...options, center }));
    return new Sharded(
      live.map((p, i) => ({ dev: p.dev, corpus: made[i], positions: p.positions })),
      false,
      { dim: this.dim, dtype: made[0]?.dtype ?? mode },
    );
  }

  async select(indices: ArrayLike<number>): Promise<ShardedCorpus> {
    this.check();
    if (indices === null || typeof indices !== 'object' || typeof indices.length !== 'number')
      throw new InvalidArgumentError('indices', 'an array of document indices', describe(indices));
    const count = this.count;
    const { part, local } = this.positionsLookup();
    const picked = this.parts.map(() => ({ locals: [] as number[], positions: [] as number[] }));
    for (let j = 0; j < indices.length; j++) {
      const g = indices[j];
      if (!Number.isInteger(g) || g < 0 || g >= count)
        throw new InvalidArgumentError(`indices[${j}]`, `an integer in [0, ${count})`, describe(g));
      picked[part[g]].locals.push(local[g]);
      picked[part[g]].positions.push(j);
    }
    const live = this.parts.map((p, i) => ({ p, ...picked[i] })).filter((v) => v.locals.length > 0);
    const views = await this.all(
      live.map((v) => v.p),
      (p) => p.corpus.select((live.find((v) => v.p === p) as { locals: number[] }).locals),
    );
    return new Sharded(
      live.map((v, i) => ({ dev: v.p.dev, corpus: views[i], positions: Float64Array.from(v.positions) })),
      true,
      this.dims,
    );
  }

  dispose(): void {
    if (this.gone) return;
    this.gone = true;
    for (const p of this.parts) p.corpus.dispose();
  }

  /** Shards alike: same devices, same documents in each (for two-stage pairs). */
  placementOf(): string {
    return this.parts
      .filter((p) => p.positions.length > 0)
      .map((p) => `${p.dev.info.index}:${p.positions.length}:${p.positions[0]}`)
      .join(',');
  }
}

/** Maximal [from, to) ranges of local indices whose global positions are consecutive. */
function runsOf(positions: Float64Array): [number, number][] {
  const runs: [number, number][] = [];
  let from = 0;
  for (let j = 1; j <= positions.length; j++)
    if (j === positions.length || positions[j] !== positions[j - 1] + 1) {
      runs.push([from, j]);
      from = j;
    }
  return runs;
}

function samePlacement(a: Sharded, b: Sharded): boolean {
  return a.count === b.count && a.placementOf() === b.placementOf();
}

function rank(hits: Hit[], k: number): Hit[] {
  hits.sort((a, b) => (better(a.score, a.index, b.score, b.index) ? -1 : 1));
  return hits.length > k ? hits.slice(0, k) : hits;
}

/** Whether x is a corpus sharded over several GPUs. */
export function isShardedCorpus(x: unknown): x is ShardedCorpus {
  return x instanceof Sharded;
}
