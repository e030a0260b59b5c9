// The corpus a server holds: an on-disk corpus (memory-mapped on the CPU; uploaded segment by segment
// to the GPU when it fits there, else streamed), as an immutable snapshot. An append writes and
// publishes a new segment through CorpusWriter, opens the corpus again and only then swaps the
// snapshot: a search runs on the snapshot it started with, so it sees a segment whole or not at all.

import { constants as bufferConstants } from 'node:buffer';
import { Worker } from 'node:worker_threads';
import { type CudaMemory, cuda } from '../backends/cuda.js';
import { type BackendChoice, type BackendName, resolveBackend } from '../backends/select.js';
import { InvalidArgumentError, MaxsimError } from '../errors.js';
import {
  type CorpusInfo,
  CorpusLockedError,
  deleteDocuments,
  duplicateIds,
  typedView,
} from '../io/corpus/index.js';
import { loadNative } from '../native.js';
import { type Corpus, type CorpusHit, mergeHits, openCorpus } from '../ops/corpus-search.js';
import { maxsimAll } from '../ops/maxsim.js';
import { quantize } from '../ops/quantize.js';
import {
  type Hit,
  matrixAsBatch,
  type ScoreMatrix,
  selectItems,
  type TokenBatch,
  type TokenMatrix,
} from '../tensor.js';
import type { AppendJob } from './append-worker.js';
import type { PackedTokens } from './codecs.js';

/** An id (or index) the corpus does not hold: HTTP 404. */
export class NotFoundError extends MaxsimError {
  override name = 'NotFoundError';
  constructor(
    readonly field: string,
    readonly missing: string[],
    total: number,
  ) {
    super(
      `${total} unknown document id${total === 1 ? '' : 's'} in ${field}: ${missing.map((m) => JSON.stringify(m)).join(', ')}${total > missing.length ? ', ...' : ''}`,
    );
  }
}

/** A request that conflicts with the corpus (an id it already holds): HTTP 409. */
/** The corpus is locked by another writer: answered 503 with Retry-After. */
export class CorpusBusyError extends MaxsimError {
  override name = 'CorpusBusyError';
}

export class ConflictError extends MaxsimError {
  override name = 'ConflictError';
}

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
}

/** What the server needs of a corpus on the GPU: one device's, or sharded over several. */
interface GpuCorpus {
  topK(
    queries: TokenBatch,
    k: number,
    options?: { rescore?: { docs: GpuCorpus; candidates: number } },
  ): Promise<Hit[][]>;
  quantize(mode: 'int8'): Promise<GpuCorpus>;
  select(indices: ArrayLike<number>): Promise<GpuCorpus>;
  score(queries: TokenBatch): Promise<ScoreMatrix>;
  dispose(): void;
}

/** The GPUs a server runs on: one device, or a group whose uploads shard each segment. */
interface Gpus {
  name: string;
  /** Free bytes the resident corpus may count on (the least free GPU's, times the GPUs). */
  free(): Promise<number>;
  upload(batch: TokenBatch): Promise<GpuCorpus>;
  memory(): Promise<CudaMemory>;
  dispose(): void;
}

async function openGpus(options: ResidentOptions): Promise<Gpus> {
  if (options.devices === undefined) {
    const d = await cuda({ device: options.device });
    return {
      name: d.info.name,
      free: async () => (await d.memory()).free,
      upload: (b) => d.upload(b),
      memory: () => d.memory(),
      dispose: () => d.dispose(),
    };
  }
  const g = await cuda({ devices: options.devices });
  const all = async () => Promise.all(g.devices.map((d) => d.memory()));
  return {
    name: `${g.devices.length} x ${g.devices[0].info.name}`,
    free: async () => Math.min(...(await all()).map((m) => m.free)) * g.devices.length,
    upload: (b) => g.upload(b),
    // the group's memory, every GPU added up
    memory: async () =>
      (await all()).reduce((s, m) => ({
        inUse: s.inUse + m.inUse,
        cached: s.cached + m.cached,
        peak: s.peak + m.peak,
        total: s.total + m.total,
        free: s.free + m.free,
      })),
    dispose: () => g.dispose(),
  };
}

/** 'mapped': CPU over the mapped files; 'resident': on the GPU; 'streamed': CUDA scans of the files. */
export type ResidentMode = 'mapped' | 'resident' | 'streamed';

interface DeviceSegment {
  /** The segment file it was uploaded from (segments are immutable: same file, same documents). */
  file: string;
  firstDocument: number;
  docs: GpuCorpus;
  int8?: Promise<GpuCorpus>;
}

interface Snapshot {
  corpus: Corpus;
  /** CPU: each segment's documents as a batch over its mapped token rows, made on first use. */
  mapped: Map<number, TokenBatch>;
  idIndex: Map<string, number> | undefined;
  segments: DeviceSegment[];
  users: number;
  retired: boolean;
  /** Device segments the next snapshot no longer uses: released with this one. */
  drop?: DeviceSegment[];
}

/** Closes a retired snapshot: its mappings and pin, and the device segments only it used. */
function closeSnapshot(s: Snapshot) {
  s.corpus.close();
  for (const seg of s.drop ?? []) {
    seg.docs.dispose();
    seg.int8?.then((d) => d.dispose()).catch(() => undefined);
  }
  s.drop = undefined;
}

/** Candidates rescored exactly per hit wanted by the int8 prefilter (as `maxsim search --prefilter`). */
const PREFILTER_FACTOR = 4;
const MISSING_SHOWN = 5;

export class ResidentCorpus {
  private current: Snapshot;
  private writes: Promise<unknown> = Promise.resolve();
  private closed = false;

  private constructor(
    readonly dir: string,
    readonly backend: BackendName,
    readonly mode: ResidentMode,
    private readonly options: ResidentOptions,
    private readonly gpu: Gpus | undefined,
    first: Snapshot,
  ) {
    this.current = first;
  }

  static async open(options: ResidentOptions): Promise<ResidentCorpus> {
    const backend = resolveBackend(options.backend ?? 'auto');
    const corpus = openCorpus(options.corpus);
    if (backend === 'cpu') {
      if (options.pin)
        throw new InvalidArgumentError('pin', "backend 'cuda' or 'auto' (pinning feeds the GPU)", "'cpu'");
      return new ResidentCorpus(options.corpus, 'cpu', 'mapped', options, undefined, snapshotOf(corpus, []));
    }
    const gpu = await openGpus(options);
    const budget = options.gpuMemory ?? Math.floor(0.75 * (await gpu.free()));
    if (corpus.info.tokenBytes <= budget && !options.pin) {
      const segments = await uploadSegments(gpu, corpus, 0);
      return new ResidentCorpus(
        options.corpus,
        'cuda',
        'resident',
        options,
        gpu,
        snapshotOf(corpus, segments),
      );
    }
    if (options.pin) await corpus.pin({ device: options.device });
    return new ResidentCorpus(options.corpus, 'cuda', 'streamed', options, gpu, snapshotOf(corpus, []));
  }

  /** The GPU, where the server runs on CUDA. */
  get deviceName(): string | undefined {
    return this.gpu?.name;
  }

  get info(): CorpusInfo {
    return this.current.corpus.info;
  }

  /** Runs `work` on the current snapshot; the snapshot stays usable until it returns. */
  private async using<T>(work: (s: Snapshot) => Promise<T>): Promise<T> {
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
   * Top-k over the whole corpus for every query of a float32 batch. `timing.merge` gets the seconds
   * spent on this thread merging segments and naming hits (GPU-resident; elsewhere the scan does it).
   */
  search(
    queries: TokenBatch,
    k: number,
    prefilter?: 'int8',
    timing?: { merge: number },
  ): Promise<CorpusHit[][]> {
    return this.using(async (s) => {
      if (prefilter !== undefined && this.mode !== 'resident')
        throw new InvalidArgumentError(
          'prefilter',
          `no prefilter here: the int8 prefilter runs on a GPU-resident corpus (this server scans ${this.mode === 'mapped' ? 'on the CPU' : 'streamed from disk'}; build an int8 corpus instead)`,
          JSON.stringify(prefilter),
        );
      if (prefilter !== undefined && s.corpus.info.dtype === 'int8')
        throw new InvalidArgumentError(
          'prefilter',
          'no prefilter on an int8 corpus',
          JSON.stringify(prefilter),
        );
      if (this.mode !== 'resident')
        return s.corpus.search(queries, {
          topK: k,
          backend: this.backend,
          threads: this.options.threads,
          device: this.options.device,
          devices: this.options.devices,
          gpuMemory: this.options.gpuMemory,
        });
      let merged: Hit[][] = Array.from({ length: queries.count }, () => []);
      let merge = 0;
      const file = s.corpus.file;
      for (const seg of s.segments) {
        // deleted documents of the segment: ask for that many more, then drop them (exact)
        const n = file.segments[file.segmentOf(seg.firstDocument)].header.documents;
        let gone = 0;
        if (file.deletedMask) for (let i = 0; i < n; i++) gone += file.deletedMask[seg.firstDocument + i];
        const kk = Math.min(k + gone, n);
        let hits: Hit[][];
        if (prefilter === 'int8') {
          seg.int8 ??= seg.docs.quantize('int8');
          const scan = await seg.int8;
          hits = await scan.topK(queries, kk, {
            rescore: { docs: seg.docs, candidates: PREFILTER_FACTOR * kk },
          });
        } else hits = await seg.docs.topK(queries, kk);
        const t0 = performance.now();
        merged = merged.map((row, i) =>
          mergeHits(
            row,
            hits[i]
              .map((h) => ({ index: h.index + seg.firstDocument, score: h.score }))
              .filter((h) => !file.isDeleted(h.index))
              .slice(0, k),
            k,
          ),
        );
        merge += performance.now() - t0;
      }
      const t0 = performance.now();
      const named = merged.map((row) => row.map((h) => ({ ...h, id: s.corpus.id(h.index) })));
      if (timing) timing.merge = (merge + performance.now() - t0) / 1000;
      return named;
    });
  }

  /** Global indices of ids (an id is its index as a string in a corpus without ids). */
  resolveIds(ids: readonly string[], field: string): number[] {
    const s = this.current;
    const n = s.corpus.info.documents;
    const missing: string[] = [];
    let total = 0;
    const out = ids.map((id) => {
      const index = s.idIndex ? s.idIndex.get(id) : /^(0|[1-9]\d*)$/.test(id) ? Number(id) : undefined;
      if (index === undefined || index >= n || s.corpus.file.isDeleted(index)) {
        total++;
        if (missing.length < MISSING_SHOWN) missing.push(id);
        return -1;
      }
      return index;
    });
    if (total > 0) throw new NotFoundError(field, missing, total);
    return out;
  }

  /** One query against documents of the corpus by index: [indices.length] scores. */
  scoreDocuments(query: TokenMatrix, indices: readonly number[]): Promise<Float32Array> {
    return this.scoreDocumentsAll(matrixAsBatch(query), indices);
  }

  /** Every query against documents of the corpus by index: [queries.count * indices.length] scores. */
  scoreDocumentsAll(queries: TokenBatch, indices: readonly number[]): Promise<Float32Array> {
    return this.using(async (s) => {
      const n = indices.length;
      if (n === 0 || queries.count === 0) return new Float32Array(queries.count * n);
      if (this.mode !== 'resident') {
        // the candidates as views of the mapped segments (no read on this thread: the kernel's workers
        // fault the pages in), scored segment by segment
        const q =
          s.corpus.info.dtype === 'int8' && queries.dtype !== 'int8' ? quantize(queries, 'int8') : queries;
        const out = new Float32Array(queries.count * n);
        for (const [g, { at, local }] of groupBySegment(s, indices)) {
          const docs = fitsOneMapping(s, g)
            ? selectItems(mappedSegment(s, g), local)
            : // a segment larger than one ArrayBuffer cannot be mapped whole: read the candidates
              s.corpus.readDocuments(local.map((l) => s.corpus.file.segments[g].firstDocument + l));
          const m = await maxsimAll(q, docs, {
            backend: this.backend,
            threads: this.options.threads,
            device: this.options.device,
          });
          scatter(out, n, m.data, at, queries.count);
        }
        return out;
      }
      // on the GPU: a view of the candidates of each segment, scored where they are (no upload)
      const out = new Float32Array(queries.count * n);
      const bySegment = new Map(s.segments.map((seg) => [s.corpus.file.segmentOf(seg.firstDocument), seg]));
      for (const [g, { at, local }] of groupBySegment(s, indices)) {
        const view = await bySegment.get(g)!.docs.select(local);
        try {
          const m = await view.score(queries);
          scatter(out, n, m.data, at, queries.count);
        } finally {
          view.dispose();
        }
      }
      return out;
    });
  }

  /**
   * Appends documents as one new segment (crash-safe, published atomically), then makes them visible:
   * later searches see all of them, earlier ones none. Appends run one at a time.
   */
  append(
    docs: PackedTokens,
    ids: string[] | undefined,
  ): Promise<{ first: number; added: number; info: CorpusInfo }> {
    const run = async () => {
      if (this.closed) throw new MaxsimError('the server is shutting down');
      const before = this.current;
      const info = before.corpus.info;
      if (info.hasIds !== (ids !== undefined))
        throw new InvalidArgumentError(
          'documents[].id',
          info.hasIds ? 'an id for every document (the corpus has ids)' : 'no ids (the corpus has no ids)',
          ids === undefined ? 'none' : 'ids',
        );
      if (ids) {
        // the writer's rule (CorpusWriter refuses the same), checked here first to answer 409
        const seen = new Map<string, number>();
        const message = duplicateIds(
          ids,
          (id) => {
            const at = before.idIndex?.get(id);
            if (at !== undefined) return `already in the corpus (document ${at})`;
            const i = seen.get(id);
            return i === undefined ? undefined : `repeats ids[${i}] of this request`;
          },
          (id, i) => {
            seen.set(id, i);
          },
        );
        if (message) throw new ConflictError(message);
      }
      await writeSegment({ dir: this.dir, data: docs.data, offsets: docs.offsets, dim: docs.dim, ids });
      const corpus = openCorpus(this.dir);
      if (this.mode === 'streamed' && this.options.pin) await corpus.pin({ device: this.options.device });
      const segments = this.mode === 'resident' ? await this.refreshSegments(before, corpus) : [];
      this.current = snapshotOf(corpus, segments);
      before.retired = true;
      if (before.users === 0) closeSnapshot(before);
      return { first: info.documents, added: docs.offsets.length - 1, info: corpus.info };
    };
    const result = this.writes.then(run, run);
    this.writes = result.catch(() => undefined);
    return result;
  }

  /**
   * Deletes documents by id (tombstones published atomically, see deleteDocuments), then makes that
   * visible: later searches and lookups skip them, earlier ones see them all. Runs in the queue of
   * appends; unknown or deleted ids are a NotFoundError and nothing is written.
   */
  delete(ids: readonly string[]): Promise<{ deleted: number; info: CorpusInfo }> {
    const run = async () => {
      if (this.closed) throw new MaxsimError('the server is shutting down');
      const before = this.current;
      this.resolveIds(ids, 'ids');
      let result: { deleted: number[] };
      try {
        result = deleteDocuments(this.dir, ids);
      } catch (e) {
        if (e instanceof CorpusLockedError) throw new CorpusBusyError(e.message);
        throw e;
      }
      const corpus = openCorpus(this.dir);
      if (this.mode === 'streamed' && this.options.pin) await corpus.pin({ device: this.options.device });
      // the segments are unchanged (unless another process compacted the corpus): GPU-resident ones
      // stay; the new snapshot carries the tombstones
      const segments = this.mode === 'resident' ? await this.refreshSegments(before, corpus) : [];
      this.current = snapshotOf(corpus, segments);
      before.retired = true;
      if (before.users === 0) closeSnapshot(before);
      return { deleted: result.deleted.length, info: corpus.info };
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
      } else out.push(...(await uploadSegments(this.gpu!, corpus, g, g + 1)));
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
    this.closed = true;
    this.current.corpus.close();
    this.gpu?.dispose();
  }
}

function snapshotOf(corpus: Corpus, segments: DeviceSegment[]): Snapshot {
  let idIndex: Map<string, number> | undefined;
  if (corpus.info.hasIds) {
    idIndex = new Map();
    for (let i = 0; i < corpus.info.documents; i++)
      if (!corpus.file.isDeleted(i)) idIndex.set(corpus.id(i), i);
  }
  return { corpus, idIndex, segments, mapped: new Map(), users: 0, retired: false };
}

/** Runs CorpusWriter.append / add / commit in a worker thread; its errors come back with their class. */
function writeSegment(job: AppendJob): Promise<void> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL('./append-worker.js', import.meta.url), { workerData: job });
    let answered = false;
    worker.once(
      'message',
      (m: {
        ok: boolean;
        name?: string;
        message?: string;
        argument?: string;
        expected?: string;
        received?: string;
      }) => {
        answered = true;
        if (m.ok) return resolve();
        if (m.name === 'InvalidArgumentError')
          return reject(new InvalidArgumentError(m.argument!, m.expected!, m.received!));
        // another writer (a CLI append, another server) holds the corpus: the client may retry
        if (m.name === 'CorpusLockedError')
          return reject(new CorpusBusyError(m.message ?? 'the corpus is locked'));
        reject(new MaxsimError(m.message ?? 'the append failed'));
      },
    );
    worker.once('error', (e) => {
      answered = true;
      reject(new MaxsimError(`the append failed: ${e.message}`));
    });
    worker.once('exit', (code) => {
      if (!answered) reject(new MaxsimError(`the append worker exited with code ${code}`));
    });
  });
}

/** Candidate positions grouped by segment: segment -> (positions in the request, indices in the segment). */
function groupBySegment(
  s: Snapshot,
  indices: readonly number[],
): Map<number, { at: number[]; local: number[] }> {
  const groups = new Map<number, { at: number[]; local: number[] }>();
  indices.forEach((ix, i) => {
    const g = s.corpus.file.segmentOf(ix);
    let group = groups.get(g);
    if (!group) {
      group = { at: [], local: [] };
      groups.set(g, group);
    }
    group.at.push(i);
    group.local.push(ix - s.corpus.file.segments[g].firstDocument);
  });
  return groups;
}

/** Copies the columns of a [rows, at.length] score block to positions `at` of [rows, n]. */
function scatter(out: Float32Array, n: number, block: Float32Array, at: number[], rows: number) {
  for (let r = 0; r < rows; r++)
    for (let j = 0; j < at.length; j++) out[r * n + at[j]] = block[r * at.length + j];
}

interface FileAddon {
  mapFile(path: string, offset: number, length: number): ArrayBuffer;
}

/**
 * The largest section mapped as one ArrayBuffer: this Node's limit (Node 20: 4 GiB; mapFile refuses
 * more). @internal tests lower it to take the read path on small corpora.
 */
export const mapLimit = { bytes: bufferConstants.MAX_LENGTH };

/** Whether segment `g`'s token section (and scales) can be mapped as one buffer each. */
function fitsOneMapping(s: Snapshot, g: number): boolean {
  const h = s.corpus.file.segments[g].header;
  return (
    h.tokensSection.bytes <= mapLimit.bytes && (h.dtype !== 'int8' || h.scalesSection.bytes <= mapLimit.bytes)
  );
}

/** Segment `g` of the snapshot as a ragged batch over its mapped token rows (and int8 scales). */
function mappedSegment(s: Snapshot, g: number): TokenBatch {
  const cached = s.mapped.get(g);
  if (cached) return cached;
  const seg = s.corpus.file.segments[g];
  const { dtype, dim, documents, tokens, tokensSection, scalesSection } = seg.header;
  const map = (loadNative() as unknown as { file: FileAddon }).file.mapFile;
  const data = typedView(dtype, map(seg.file, tokensSection.offset, tokensSection.bytes), 0, tokens * dim);
  const scales =
    dtype === 'int8'
      ? new Float32Array(map(seg.file, scalesSection.offset, scalesSection.bytes), 0, tokens)
      : undefined;
  const starts = seg.offsets.subarray(0, documents);
  const lengths = new Int32Array(documents);
  let maxLength = 0;
  for (let i = 0; i < documents; i++) {
    lengths[i] = seg.offsets[i + 1] - seg.offsets[i];
    if (lengths[i] > maxLength) maxLength = lengths[i];
  }
  const batch: TokenBatch = {
    kind: 'batch',
    layout: 'ragged',
    dtype,
    data,
    dim,
    count: documents,
    maxLength,
    starts,
    lengths,
    scales,
  };
  s.mapped.set(g, batch);
  return batch;
}

/** Uploads the segments of `corpus` from number `from` on, one device corpus each. */
async function uploadSegments(
  gpu: Gpus,
  corpus: Corpus,
  from: number,
  to = corpus.file.segments.length,
): Promise<DeviceSegment[]> {
  const out: DeviceSegment[] = [];
  for (let g = from; g < to; g++) {
    const seg = corpus.file.segments[g];
    const n = seg.header.documents;
    if (n === 0) continue;
    const indices = Array.from({ length: n }, (_, i) => seg.firstDocument + i);
    out.push({
      file: seg.file,
      firstDocument: seg.firstDocument,
      docs: await gpu.upload(corpus.readDocuments(indices)),
    });
  }
  return out;
}
