// The corpus a server holds: an on-disk corpus (memory-mapped on the CPU; uploaded segment by segment
// to the GPU when it fits there, else streamed), as immutable snapshots. The server follows the
// directory: before each request it checks (one stat and a 16-byte read) whether a newer MANIFEST
// generation was published, by itself or any other process, and if so builds the next snapshot
// (reusing the files and ids both name) and swaps it in. A request runs on the one snapshot it
// started with, ids resolved and documents scored on it, so it sees a write whole or not at all; the
// files of older snapshots stay open until their last request ends. Writes (appends, deletes) run in
// a worker thread, and the answer comes from the MANIFEST that the write published.

import type { CudaMemory } from '../backends/cuda.js';
import { type BackendChoice, type BackendName, resolveBackend } from '../backends/select.js';
import { InvalidArgumentError, MaxsimError } from '../errors.js';
import { type CorpusFile, type CorpusInfo, manifestStamp } from '../io/corpus/index.js';
import { Corpus, type CorpusHit, openCorpus } from '../ops/corpus-search.js';
import { matrixAsBatch, type TokenBatch, type TokenMatrix } from '../tensor.js';
import type { PackedTokens } from './codecs.js';
import {
  checkTokensKept,
  defaultPath,
  indexSearcherFor,
  type PassRoute,
  type PassStats,
  passStats,
  scanReason,
} from './index-path.js';
import { hostRuns, mappedSegment } from './resident-cpu.js';
import {
  type DeviceSegment,
  deviceRuns,
  eightBitBytes,
  type Gpus,
  openGpus,
  uploadSegments,
} from './resident-gpu.js';
import {
  closeSnapshot,
  resolveOn,
  type Snapshot,
  scoreMapped,
  scoreOnDevice,
  snapshotOf,
} from './resident-snapshot.js';
import { refuseTakenIds, runWrite } from './resident-writes.js';
import { checkPassDtype, hostCopies, type PassDtype, searchSegments } from './segment-search.js';

export { mapLimit } from './resident-cpu.js';

export interface ResidentOptions {
  corpus: string;
  backend?: BackendChoice;
  /** CUDA streaming mode: page-lock the corpus files. */
  pin?: boolean;
  /** CPU worker threads (default all cores). */
  threads?: number;
  /** CUDA device (default 0). */
  device?: number;
  /** CUDA: device bytes the resident corpus may take (default 3/4 of the free memory). */
  gpuMemory?: number;
  /** CUDA: several GPUs ('all' or indices): each segment is sharded over them, or they all stream. */
  devices?: 'all' | number[];
  /**
   * 8-bit search passes: every search scans an 8-bit copy of the corpus (kept beside the float one:
   * in memory on the CPU, int8 only; on the GPU, both copies on the device, which must hold them)
   * and rescores PREFILTER_FACTOR x k candidates per query exactly from the float corpus. Rerank,
   * score and id-restricted searches stay exact. Default: exact float passes.
   */
  dtype?: PassDtype;
}

/** 'mapped': CPU over the mapped files; 'resident': on the GPU; 'streamed': CUDA scans of the files. */
export type ResidentMode = 'mapped' | 'resident' | 'streamed';

export class ResidentCorpus {
  private current: Snapshot;
  private writes: Promise<unknown> = Promise.resolve();
  private switching: Promise<void> | undefined;
  private lastFollowError: Error | undefined;
  private closed = false;
  // resolveIds() answers: the snapshot and ids behind them, so scoring resolves on its own snapshot
  private readonly resolved = new WeakMap<
    readonly number[],
    { ids: readonly string[]; field: string; file: CorpusFile }
  >();

  private constructor(
    readonly dir: string,
    readonly backend: BackendName,
    readonly mode: ResidentMode,
    private readonly options: ResidentOptions,
    private readonly gpu: Gpus | undefined,
    first: Snapshot,
    /** The 8-bit type of search passes; undefined: exact. */
    readonly dtype: PassDtype | undefined,
  ) {
    this.current = first;
  }

  static async open(options: ResidentOptions): Promise<ResidentCorpus> {
    const backend = resolveBackend(options.backend ?? 'auto');
    // a fixed snapshot per Corpus: the server decides when to switch (see follow())
    const corpus = openCorpus(options.corpus, { follow: false });
    try {
      return await ResidentCorpus.start(options, backend, corpus);
    } catch (e) {
      corpus.close();
      throw e;
    }
  }

  private static async start(
    options: ResidentOptions,
    backend: BackendName,
    corpus: Corpus,
  ): Promise<ResidentCorpus> {
    const dtype = checkPassDtype(options.dtype, backend, corpus.info.dtype, options.pin === true);
    checkTokensKept(corpus.file, backend, dtype);
    await corpus.file.indexIds();
    if (backend === 'cpu') {
      if (options.pin)
        throw new InvalidArgumentError('pin', "backend 'cuda' or 'auto' (pinning feeds the GPU)", "'cpu'");
      const first = snapshotOf(corpus, []);
      if (dtype) first.eight = hostCopies(corpus.file, (g) => mappedSegment(first, g), undefined);
      return new ResidentCorpus(options.corpus, 'cpu', 'mapped', options, undefined, first, dtype);
    }
    const gpu = await openGpus(options);
    try {
      const budget = options.gpuMemory ?? Math.floor(0.75 * (await gpu.free()));
      const { tokenBytes, tokens, dim } = corpus.info;
      const need = tokenBytes + (dtype ? eightBitBytes(tokens, dim) : 0);
      if (need <= budget && !options.pin) {
        const segments = await uploadSegments(gpu, corpus, 0, undefined, dtype);
        return new ResidentCorpus(
          options.corpus,
          'cuda',
          'resident',
          options,
          gpu,
          snapshotOf(corpus, segments),
          dtype,
        );
      }
      if (dtype)
        throw new InvalidArgumentError(
          'dtype',
          `a corpus whose float and ${dtype} copies fit the GPU budget (${mib(budget)} MiB; see gpuMemory)`,
          `${mib(need)} MiB`,
        );
      if (options.pin) await corpus.pin({ device: options.device });
      return new ResidentCorpus(
        options.corpus,
        'cuda',
        'streamed',
        options,
        gpu,
        snapshotOf(corpus, []),
        dtype,
      );
    } catch (e) {
      gpu.dispose();
      throw e;
    }
  }

  /** The GPU, where the server runs on CUDA. */
  get deviceName(): string | undefined {
    return this.gpu?.name;
  }

  /**
   * The corpus as the current snapshot holds it (`live` and `deleted` count its documents). A newer
   * generation on disk is noticed here too and swapped in for the next request.
   */
  get info(): CorpusInfo {
    void this.follow();
    return this.current.corpus.info;
  }

  /**
   * The current snapshot's info, read without looking for a newer generation: for the checks made
   * per request and per pass (the `info` getter's stat and read cost the JS thread ~6% per request
   * when every search body was checked against it); the pass itself still follows, and re-checks.
   */
  get heldInfo(): CorpusInfo {
    return this.current.corpus.info;
  }

  /** The embedding dimension of the current snapshot (as heldInfo: no look for a newer one). */
  get dim(): number {
    return this.current.corpus.info.dim;
  }

  /** Why the last attempt to follow a newer generation failed (the server kept the snapshot it had). */
  get followError(): Error | undefined {
    return this.lastFollowError;
  }

  /**
   * Swaps in the newest published generation when it is newer than the current snapshot: one stat
   * and a 16-byte read when it is not. One swap at a time; callers wait for one in progress.
   */
  follow(): Promise<void> {
    if (this.switching) return this.switching;
    if (this.closed || manifestStamp(this.dir) === this.current.corpus.file.stamp) return Promise.resolve();
    this.switching = this.swap()
      .then(
        () => {
          this.lastFollowError = undefined;
        },
        (e: Error) => {
          // kept serving the snapshot it has (never half a new one); the next request tries again
          this.lastFollowError = e;
        },
      )
      .finally(() => {
        this.switching = undefined;
      });
    return this.switching;
  }

  // Follows until the current snapshot is at least `generation` (a swap begun before a write published
  // may bring an older one).
  private async followTo(generation: number): Promise<void> {
    for (let i = 0; i < 4 && this.current.corpus.info.generation < generation; i++) await this.follow();
  }

  private async swap(): Promise<void> {
    const before = this.current;
    const file = before.corpus.file.refresh();
    if (file === before.corpus.file) return;
    const corpus = new Corpus(file, { follow: false });
    try {
      // the ids of a rewritten corpus (a compaction) are indexed a slice at a time between requests
      await file.indexIds();
      checkTokensKept(file, this.backend, this.dtype);
      if (this.mode === 'streamed' && this.options.pin) await corpus.pin({ device: this.options.device });
      const segments = this.mode === 'resident' ? await this.refreshSegments(before, corpus) : [];
      if (this.closed) throw new MaxsimError('the server is shutting down');
      const next = snapshotOf(corpus, segments);
      // the int8 copies of segments the last snapshot had are kept; new ones quantized now
      if (this.dtype && this.mode === 'mapped')
        next.eight = hostCopies(file, (g) => mappedSegment(next, g), before.eight);
      this.current = next;
    } catch (e) {
      corpus.close();
      throw e;
    }
    before.retired = true;
    if (before.users === 0) closeSnapshot(before);
  }

  /** Runs `work` on the newest snapshot; the snapshot stays usable until it returns. */
  private async using<T>(work: (s: Snapshot) => Promise<T>): Promise<T> {
    await this.follow();
    const s = this.current;
    s.users++;
    try {
      return await work(s);
    } finally {
      s.users--;
      if (s.retired && s.users === 0) closeSnapshot(s);
    }
  }

  /**
   * Top-k over the whole corpus for every query of a float32 batch: through the corpus's index where
   * it has one and the backend an index searcher (index-path.ts), unless the route forces the scan.
   * `timing.merge` gets the seconds spent on this thread merging segments and naming hits
   * (GPU-resident; elsewhere the scan does it), `timing.stats` which path ran.
   */
  search(
    queries: TokenBatch,
    k: number,
    route: PassRoute = {},
    timing?: { merge: number; stats?: PassStats },
    signal?: AbortSignal,
  ): Promise<CorpusHit[][]> {
    return this.using(async (s) => {
      const file = s.corpus.file;
      let reason = scanReason(route);
      if (file.index && reason === undefined) {
        const searcher = indexSearcherFor(this.backend);
        if (searcher) {
          const index = route.index === false ? undefined : route.index;
          const r = await searcher.search(s.corpus, queries, k, index, {
            threads: this.options.threads,
            device: this.options.device,
            signal,
          });
          if (timing) timing.stats = passStats(file.info.generation, r.stats);
          return r.hits;
        }
        reason = `no index search on the ${this.backend} backend yet: the pass scans`;
      }
      if (file.tokensDropped)
        throw new InvalidArgumentError(
          route.exact === true ? 'exact' : route.index === false ? 'index' : 'prefilter',
          'a search through the index (the corpus keeps only its index: `corpus index --drop-tokens`; there are no tokens to scan)',
          reason ?? 'a scan',
        );
      const hits = await this.scan(s, queries, k, route.prefilter, timing, signal);
      if (timing) timing.stats = passStats(file.info.generation, undefined, file.index ? reason : undefined);
      return hits;
    });
  }

  // The full scan of a pass (mapped, 8-bit copies, GPU-resident or streamed).
  private async scan(
    s: Snapshot,
    queries: TokenBatch,
    k: number,
    prefilter: 'int8' | undefined,
    timing: { merge: number } | undefined,
    signal: AbortSignal | undefined,
  ): Promise<CorpusHit[][]> {
    // a server with 8-bit passes scans its copy for every search, prefiltered or not
    if (prefilter !== undefined && this.dtype === undefined && this.mode !== 'resident')
      throw new InvalidArgumentError(
        'prefilter',
        `no prefilter here: the int8 prefilter runs on a GPU-resident corpus or a server started with dtype int8 | fp8 (this server scans ${this.mode === 'mapped' ? 'on the CPU' : 'streamed from disk'}; build an int8 corpus instead)`,
        JSON.stringify(prefilter),
      );
    if (prefilter !== undefined && s.corpus.info.dtype === 'int8')
      throw new InvalidArgumentError(
        'prefilter',
        'no prefilter on an int8 corpus',
        JSON.stringify(prefilter),
      );
    const eight = this.dtype ?? prefilter;
    if (this.mode === 'streamed' || (this.mode === 'mapped' && eight === undefined))
      return s.corpus.search(queries, {
        topK: k,
        backend: this.backend,
        threads: this.options.threads,
        device: this.options.device,
        devices: this.options.devices,
        gpuMemory: this.options.gpuMemory,
        signal,
        index: false,
      });
    const runs =
      this.mode === 'mapped'
        ? hostRuns(s, queries, { threads: this.options.threads, signal })
        : deviceRuns(s.corpus.file, s.segments, queries, eight);
    const { hits, merge } = await searchSegments(s.corpus.file, queries.count, k, runs);
    if (timing) timing.merge = merge;
    return hits;
  }

  /** The path a default search takes now: 'index' or 'scan' (and why a corpus with an index scans). */
  get searchPath(): { path: 'index' | 'scan'; reason?: string } {
    return defaultPath(this.current.corpus.file, this.backend);
  }

  /**
   * Global indices of ids (an id is its index as a string in a corpus without ids) in the current
   * snapshot; unknown or deleted ids are a NotFoundError. Scoring these indices later
   * (scoreDocuments / scoreDocumentsAll) resolves the same ids again if the snapshot changed
   * meanwhile, so the scores always belong to the ids.
   */
  resolveIds(ids: readonly string[], field: string): number[] {
    const out = resolveOn(this.current, ids, field);
    this.resolved.set(out, { ids: [...ids], field, file: this.current.corpus.file });
    return out;
  }

  /**
   * Whether the document `index` (with id `id`) has no tokens, on the current snapshot; undefined when
   * that index no longer holds that id (a compaction renumbered it since it was scored).
   */
  isEmptyDocument(index: number, id: string): boolean | undefined {
    const file = this.current.corpus.file;
    if (!(index >= 0 && index < file.lengths.length) || file.id(index) !== id) return undefined;
    return file.lengths[index] === 0;
  }

  /**
   * Every query against documents of the corpus by id, resolved and scored on one snapshot:
   * [queries.count * ids.length] scores, and the indices the ids had there.
   */
  scoreIds(
    queries: TokenBatch,
    ids: readonly string[],
    field: string,
  ): Promise<{ indices: number[]; scores: Float32Array; info: CorpusInfo }> {
    return this.using(async (s) => {
      const indices = resolveOn(s, ids, field);
      return { indices, scores: await this.scoreOn(s, queries, indices), info: s.corpus.info };
    });
  }

  /** One query against documents of the corpus by index: [indices.length] scores. */
  scoreDocuments(
    query: TokenMatrix,
    indices: readonly number[],
    signal?: AbortSignal,
  ): Promise<Float32Array> {
    return this.scoreDocumentsAll(matrixAsBatch(query), indices, signal);
  }

  /** Every query against documents of the corpus by index: [queries.count * indices.length] scores. */
  scoreDocumentsAll(
    queries: TokenBatch,
    indices: readonly number[],
    signal?: AbortSignal,
  ): Promise<Float32Array> {
    const from = this.resolved.get(indices);
    return this.using(async (s) => {
      // indices from resolveIds() on an older snapshot: the same ids, resolved on this one
      const at = from && s.corpus.file !== from.file ? resolveOn(s, from.ids, from.field) : indices;
      return this.scoreOn(s, queries, at, signal);
    });
  }

  // The scores of documents by index on snapshot `s` (pinned by the caller).
  private scoreOn(
    s: Snapshot,
    queries: TokenBatch,
    indices: readonly number[],
    signal?: AbortSignal,
  ): Promise<Float32Array> {
    if (indices.length === 0 || queries.count === 0)
      return Promise.resolve(new Float32Array(queries.count * indices.length));
    if (this.mode === 'resident') return scoreOnDevice(s, queries, indices);
    const { threads, device } = this.options;
    return scoreMapped(s, queries, indices, { backend: this.backend, threads, device, signal });
  }

  /**
   * Appends documents as one new segment (crash-safe, published atomically; written in a worker
   * thread), then makes them visible: later searches see all of them, earlier ones none. Appends and
   * deletes run one at a time; `first` and `info` come from the MANIFEST the append published (another
   * writer may have added documents since this server last looked).
   */
  append(
    docs: PackedTokens,
    ids: string[] | undefined,
  ): Promise<{ first: number; added: number; info: CorpusInfo }> {
    const run = async () => {
      if (this.closed) throw new MaxsimError('the server is shutting down');
      await this.follow();
      const before = this.current;
      const info = before.corpus.info;
      if (info.hasIds !== (ids !== undefined))
        throw new InvalidArgumentError(
          'documents[].id',
          info.hasIds ? 'an id for every document (the corpus has ids)' : 'no ids (the corpus has no ids)',
          ids === undefined ? 'none' : 'ids',
        );
      if (ids) refuseTakenIds(ids, before.corpus.file);
      const added = docs.offsets.length - 1;
      const done = await runWrite({
        op: 'append',
        dir: this.dir,
        data: docs.data,
        offsets: docs.offsets,
        dim: docs.dim,
        ids,
      });
      await this.followTo(done.info.generation);
      return { first: done.info.documents - added, added, info: done.info };
    };
    const result = this.writes.then(run, run);
    this.writes = result.catch(() => undefined);
    return result;
  }

  /**
   * Deletes documents by id (tombstones published atomically, see deleteDocuments; in a worker
   * thread), then makes that visible: later searches and lookups skip them, earlier ones see them all.
   * Ids are looked up in the corpus as the write finds it under the lock: unknown or already deleted
   * ones are a NotFoundError and nothing is written, unless `ignoreMissing` (then they are `absent`).
   */
  delete(
    ids: readonly string[],
    options: { ignoreMissing?: boolean } = {},
  ): Promise<{ deleted: number; absent: string[]; info: CorpusInfo }> {
    const run = async () => {
      if (this.closed) throw new MaxsimError('the server is shutting down');
      const done = await runWrite({
        op: 'delete',
        dir: this.dir,
        ids: [...ids],
        ignoreMissing: options.ignoreMissing === true,
      });
      await this.followTo(done.info.generation);
      return { deleted: done.deleted?.length ?? 0, absent: done.absent ?? [], info: done.info };
    };
    const result = this.writes.then(run, run);
    this.writes = result.catch(() => undefined);
    return result;
  }

  // The device segments of a newly opened corpus: those already uploaded are kept (same file, same
  // first document), the others uploaded; ones the corpus no longer names (another process compacted
  // it) are released with the old snapshot.
  private async refreshSegments(before: Snapshot, corpus: Corpus): Promise<DeviceSegment[]> {
    const have = new Map(before.segments.map((seg) => [`${seg.file}@${seg.firstDocument}`, seg]));
    const out: DeviceSegment[] = [];
    for (let g = 0; g < corpus.file.segments.length; g++) {
      const seg = corpus.file.segments[g];
      const kept = have.get(`${seg.file}@${seg.firstDocument}`);
      if (kept) {
        out.push(kept);
        have.delete(`${seg.file}@${seg.firstDocument}`);
      } else out.push(...(await uploadSegments(this.gpu!, corpus, g, g + 1, this.dtype)));
    }
    before.drop = [...have.values()];
    return out;
  }

  /** GPU memory of the device, where the server runs on CUDA. */
  async memory(): Promise<CudaMemory | undefined> {
    return this.gpu && !this.closed ? this.gpu.memory() : undefined;
  }

  /** Waits for a running append, then releases mappings, pins and GPU memory. */
  async close(): Promise<void> {
    if (this.closed) return;
    await this.writes;
    await this.switching;
    this.closed = true;
    this.current.corpus.close();
    this.gpu?.dispose();
  }
}

function mib(bytes: number): string {
  return (bytes / 2 ** 20).toFixed(1);
}
