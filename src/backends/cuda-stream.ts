// The CUDA side of an out-of-core corpus search: chooses how blocks reach the GPU (chooseTransfer:
// the files pinned whole or ahead of the scan, O_DIRECT or page-cache reads into pinned buffers),
// plans the blocks, the slot sizes and the kernel, then hands the scan to the native pipeline
// (native/cuda/stream_scan.cc) and reports progress.

import * as fs from 'node:fs';
import * as os from 'node:os';
import { BackendUnavailableError, InvalidArgumentError } from '../errors.js';
import { decodeToFloat32, encodeFloats } from '../floats.js';
import { type CorpusBlock, type CorpusFile, storedTokenBytes } from '../io/corpus/index.js';
import type { CorpusSearchOptions, ScanStats } from '../ops/corpus-search.js';
import { better } from '../ops/topk.js';
import { dtypeSize, type FloatDType, type Hit, type TokenBatch } from '../tensor.js';
import { STREAM_BLOCK_FIELDS } from './constants.js';
import { cuda, cudaStatus, nativeCuda } from './cuda.js';
import {
  deviceCaps,
  dispatchTable,
  type Launch,
  launchFor,
  type Problem,
  selectVariant,
} from './cuda-dispatch.js';
import { balancedCuts } from './cuda-sharded.js';

/**
 * How a search asks blocks to reach the GPU: 'auto' (default) picks one of the others (see
 * chooseTransfer); 'pin' page-locks the corpus files chunk by chunk ahead of the scan and keeps them
 * locked; 'direct' reads with O_DIRECT into pinned buffers; 'copy' preads through the page cache into
 * pinned buffers; 'register' page-locks each block for its copy only.
 */
export type TransferOption = 'auto' | 'pin' | 'direct' | 'copy' | 'register';
export const TRANSFER_OPTIONS: readonly TransferOption[] = ['auto', 'pin', 'direct', 'copy', 'register'];
/**
 * What a scan did: 'pinned' (the files pinned whole by corpus.pin()), 'pinned-ahead' (registered chunk
 * by chunk as the scan reached them, kept), 'direct' (O_DIRECT into pinned buffers), 'copy', 'register'.
 */
export type TransferMode = 'pinned' | 'pinned-ahead' | 'direct' | 'copy' | 'register';

/** The transfer a CUDA search used, and why (ScanStats.transfer). */
export interface TransferStats {
  /** The option asked for. */
  requested: TransferOption;
  mode: TransferMode;
  /** Why this mode, in words (a fallback says what was refused). */
  reason: string;
  /** The host-memory budget the choice was made against, bytes. */
  hostMemoryBudget: number;
  /** The corpus's segment files, bytes. */
  corpusBytes: number;
  /** Bytes of this corpus page-locked after the search (kept for the next one). */
  pinnedBytes: number;
  /** Bytes this search page-locked (pin-ahead: 0 once every chunk is). */
  registeredBytes: number;
  /** Seconds spent before the scan on the transfer (mapping the files to pin ahead; else 0). */
  setupSeconds: number;
  depth: number;
  readers: number;
}

/** The default host-memory budget is this fraction of MemAvailable, less what is already pinned. */
export const HOST_MEMORY_FRACTION = 0.5;
/** Pin-ahead registers the files in chunks of this size (a copy never spans two). */
export const PIN_CHUNK_BYTES = 32 * 1024 * 1024;

/** Pipeline depth: reading block b+1, copying block b and scoring block b-1 overlap. */
const DEFAULT_DEPTH: Record<TransferMode, number> = {
  copy: 3,
  register: 6,
  pinned: 3,
  // warm, the same as pinned; cold, the readers register the chunks of each block in parallel
  'pinned-ahead': 3,
  // more reads in flight (a smaller GPU budget falls back to 3)
  direct: 4,
};
/** Largest block: big enough that per-block overheads vanish (~5 ms of copy at 50 GB/s). */
const MAX_BLOCK_BYTES = 256 * 1024 * 1024;
/**
 * The first block, after which blocks double up to the largest, so the first results come soon: a
 * first search pinning ahead registers ~25 GB/s, and a 256 MiB first block took 37 ms (H200 host;
 * 16 MiB: 7-8 ms).
 */
const FIRST_BLOCK_BYTES = 16 * 1024 * 1024;
const DEFAULT_BUDGET_CAP = 8 * 1024 ** 3;
const PROGRESS_MS = 100;

interface NativeStreamResult {
  k: number;
  scores: Float32Array;
  indices: Float64Array;
  bytes: number;
  devicePeakBytes: number;
  pinnedBytes: number;
  firstBlockSeconds: number;
  seconds: number;
  transferMode: TransferMode;
  transferNote: string;
  registeredBytes: number;
}

interface StreamAddon {
  streamScan(
    device: unknown,
    queries: TokenBatch,
    plan: {
      files: string[];
      blocks: Float64Array;
      starts: Float64Array;
      lengths: Int32Array;
      capacityTokens: number;
      capacityDocs: number;
      depth: number;
      readers: number;
      k: number;
      registerPages: boolean;
      directIo: boolean;
      directIoUnlessCached: boolean;
      pinned?: unknown;
    },
    launch: Launch,
    progress: Float64Array,
    cancel?: Int32Array,
  ): Promise<NativeStreamResult>;
  pinFiles(device: number, files: string[], chunkBytes?: number): Promise<unknown>;
  unpinFiles(handle: unknown): void;
  pinnedBytes(handle: unknown): number;
}

/** Segment files page-locked for one device (see pinCorpusFiles). */
export interface CorpusPin {
  readonly device: number;
  /** The files' bytes. */
  readonly bytes: number;
  readonly handle: unknown;
  /** The segment files, in order. */
  readonly files: readonly string[];
  /** true: registered chunk by chunk by the scans (pin-ahead); false: whole at once. */
  readonly ahead: boolean;
}

/** The pins a corpus holds: corpus.pin()'s, and the one 'auto' / 'pin' searches fill and keep. */
export interface CorpusPins {
  explicit?: CorpusPin;
  ahead?: CorpusPin;
  /** The ahead pin being made (concurrent searches share it). */
  pending?: Promise<CorpusPin>;
}

// Every pin of this process, so that the default budget leaves out what is already locked. Weak: a
// corpus dropped without close() still lets its pin be collected (the native side then unpins).
const livePins = new Set<WeakRef<CorpusPin>>();

/** Bytes a pin holds page-locked now. */
export function pinnedBytesOf(pin: CorpusPin): number {
  return (nativeCuda() as unknown as StreamAddon).pinnedBytes(pin.handle);
}

/** Bytes page-locked by every live corpus pin of this process. */
export function pinnedByProcess(): number {
  let n = 0;
  for (const ref of livePins) {
    const p = ref.deref();
    if (p) n += pinnedBytesOf(p);
    else livePins.delete(ref);
  }
  return n;
}

/**
 * Maps and page-locks every segment file of a corpus, so later GPU searches copy blocks straight
 * from the page cache by DMA: no CPU copy, no per-block registration. Costs host memory (the pages
 * stay resident) and the time to lock them once. `ahead`: maps them only; the scans register each
 * chunk just before its first block needs it, and the chunks stay registered.
 */
export async function pinCorpusFiles(
  file: CorpusFile,
  device = 0,
  options: { ahead?: boolean } = {},
): Promise<CorpusPin> {
  await cuda({ device });
  const files = file.segments.map((s) => s.file);
  const ahead = options.ahead ?? false;
  // read through the snapshot's paths (they stay valid after a writer removes the files)
  const handle = await (nativeCuda() as unknown as StreamAddon)
    .pinFiles(
      device,
      file.segments.map((s) => s.path),
      ahead ? PIN_CHUNK_BYTES : undefined,
    )
    .catch((e: unknown) => {
      throw namedAfterSegments(e, file);
    });
  const pin = { device, bytes: file.info.bytes, handle, files, ahead };
  livePins.add(new WeakRef(pin));
  return pin;
}

export function unpinCorpusFiles(pin: CorpusPin): void {
  for (const ref of livePins) if (ref.deref() === pin) livePins.delete(ref);
  (nativeCuda() as unknown as StreamAddon).unpinFiles(pin.handle);
}

function readersFor(): number {
  // pread from the page cache runs at several GB/s per thread; a handful of threads feed the bus.
  const cores = os.availableParallelism();
  return Math.max(2, Math.min(12, cores - 2));
}

// O_DIRECT reads wait on the device, not on a CPU copy: more of them in flight, up to 16.
function directReadersFor(): number {
  return Math.max(4, Math.min(16, os.availableParallelism()));
}

/** MemAvailable of /proc/meminfo text, bytes (undefined when absent). */
export function parseMemAvailable(meminfo: string): number | undefined {
  const m = /^MemAvailable:\s+(\d+)\s*kB/m.exec(meminfo);
  return m ? Number(m[1]) * 1024 : undefined;
}

/**
 * The default host-memory budget for pinning a corpus: HOST_MEMORY_FRACTION (half) of MemAvailable
 * (os.freemem() where /proc/meminfo is missing), less `pinnedElsewhere` (bytes already page-locked
 * by this process for other corpora), never below 0.
 */
export function defaultHostMemoryBudget(pinnedElsewhere: number, meminfo?: string): number {
  let text = meminfo;
  if (text === undefined) {
    try {
      text = fs.readFileSync('/proc/meminfo', 'utf8');
    } catch {
      text = '';
    }
  }
  const available = parseMemAvailable(text) ?? os.freemem();
  return Math.max(0, Math.floor(available * HOST_MEMORY_FRACTION) - pinnedElsewhere);
}

/** Checks the transfer options of a search (any backend, before anything runs). */
export function checkTransferOptions(options: { transfer?: unknown; hostMemoryBudget?: unknown }): void {
  const t = options.transfer;
  if (t !== undefined && !TRANSFER_OPTIONS.includes(t as TransferOption))
    throw new InvalidArgumentError(
      'transfer',
      TRANSFER_OPTIONS.map((x) => `'${x}'`).join(', '),
      JSON.stringify(t),
    );
  const b = options.hostMemoryBudget;
  if (b !== undefined && !(typeof b === 'number' && Number.isSafeInteger(b) && b >= 0))
    throw new InvalidArgumentError('hostMemoryBudget', 'a non-negative integer number of bytes', String(b));
}

const gbText = (b: number) => `${(b / 1e9).toFixed(2)} GB`;

/**
 * The transfer of a search: an explicit choice is obeyed ('copy' and 'register' even over a
 * corpus.pin() pin); 'auto' uses corpus.pin()'s pin when there is one, else pins the files ahead of
 * the scan when they fit the host-memory budget (the pages stay locked for the next search), else
 * reads with O_DIRECT into pinned buffers (the scan reads through the page cache instead, saying why,
 * where the file system refuses O_DIRECT or, under 'auto', where the page cache holds most of the files).
 */
export function chooseTransfer(input: {
  requested: TransferOption;
  /** corpus.pin() holds the files */
  explicitPin: boolean;
  corpusBytes: number;
  budget: number;
}): { mode: TransferMode; reason: string } {
  const { requested, explicitPin, corpusBytes, budget } = input;
  const ignored = explicitPin ? ' (the corpus.pin() pin is not used)' : '';
  switch (requested) {
    case 'copy':
    case 'register':
    case 'direct':
      return { mode: requested, reason: `transfer '${requested}' asked for${ignored}` };
    case 'pin':
      return explicitPin
        ? { mode: 'pinned', reason: 'the files are pinned whole (corpus.pin() / --pin)' }
        : { mode: 'pinned-ahead', reason: "transfer 'pin' asked for" };
    case 'auto':
      if (explicitPin) return { mode: 'pinned', reason: 'the files are pinned whole (corpus.pin() / --pin)' };
      if (corpusBytes <= budget)
        return {
          mode: 'pinned-ahead',
          reason: `the corpus files (${gbText(corpusBytes)}) fit the host-memory budget (${gbText(budget)})`,
        };
      return {
        mode: 'direct',
        reason: `the corpus files (${gbText(corpusBytes)}) exceed the host-memory budget (${gbText(budget)})`,
      };
  }
}

/** Numbers per block in the native plan (native/common/constants.json; cuda_stream_binding.cc reads them). */
export const BLOCK_FIELDS = STREAM_BLOCK_FIELDS;

/**
 * The plan the native scan takes: per block [segment, tokens byte offset, tokens, first document,
 * documents, longest document, index of its first span, scales byte offset (int8, else 0)], and
 * every document's span (start relative to its block, length), in block order.
 */
/** The native scan's plan (its type written out: an inferred one would need TypeScript 5.7 to read). */
export interface StreamPlan {
  blockFields: Float64Array;
  starts: Float64Array;
  lengths: Int32Array;
  capacityTokens: number;
  capacityDocs: number;
  maxLength: number;
}

export function buildStreamPlan(file: CorpusFile, blocks: readonly CorpusBlock[]): StreamPlan {
  const blockFields = new Float64Array(blocks.length * BLOCK_FIELDS);
  let total = 0;
  for (const b of blocks) total += b.documents;
  const starts = new Float64Array(total);
  const lengths = new Int32Array(total);
  let capacityTokens = 0;
  let capacityDocs = 1;
  let maxLength = 0;
  let at = 0;
  blocks.forEach((b, i) => {
    const ranges = file.blockRanges(b);
    const spans = file.blockSpans(b);
    starts.set(spans.starts, at);
    lengths.set(spans.lengths, at);
    const fields = [b.segment, ranges.tokens.offset, b.tokens, b.firstDocument, b.documents, b.maxLength, at];
    fields.push(ranges.scales?.offset ?? 0);
    blockFields.set(fields, i * BLOCK_FIELDS);
    at += b.documents;
    capacityTokens = Math.max(capacityTokens, b.tokens);
    capacityDocs = Math.max(capacityDocs, b.documents);
    maxLength = Math.max(maxLength, b.maxLength);
  });
  return { blockFields, starts, lengths, capacityTokens, capacityDocs, maxLength };
}

/** The GPUs a search runs on: `devices` ('all' or indices) or the one `device` (default 0). */
function streamDevices(options: CorpusSearchOptions): number[] {
  const d = options.devices;
  if (d === undefined) return [options.device ?? 0];
  const n = cudaStatus().devices?.length ?? 0;
  if (d === 'all') return Array.from({ length: n }, (_, i) => i);
  if (!Array.isArray(d) || d.length === 0)
    throw new InvalidArgumentError(
      'devices',
      "'all' or a non-empty array of device indices",
      JSON.stringify(d),
    );
  d.forEach((x, i) => {
    if (!Number.isInteger(x) || x < 0 || x >= n)
      throw new InvalidArgumentError(`devices[${i}]`, `a CUDA device index in [0, ${n})`, JSON.stringify(x));
  });
  return [...d];
}

/** Contiguous runs of blocks, one per GPU, balanced by token bytes (a GPU may get none). */
function splitBlocks(blocks: readonly CorpusBlock[], parts: number): CorpusBlock[][] {
  const cuts = balancedCuts(
    blocks.map((b) => b.tokens),
    parts,
  );
  return Array.from({ length: parts }, (_, i) => blocks.slice(cuts[i], cuts[i + 1]));
}

/**
 * Scores queries against an on-disk corpus on the GPU, block by block, with flat device memory. With
 * several `devices`, each GPU streams a contiguous share of the blocks through its own slots, copy
 * stream and readers, all at once, with the same kernel as one GPU, and the running top-Ks merge
 * exactly (descending score, ties to the lower document index).
 */
export async function cudaStreamSearch(
  file: CorpusFile,
  queries: TokenBatch,
  k: number,
  options: CorpusSearchOptions,
  pins: CorpusPins,
  cancel?: Int32Array,
): Promise<{ hits: Hit[][]; stats: ScanStats }> {
  checkTransferOptions(options);
  const requested = options.transfer ?? 'auto';
  const files = file.segments.map((s) => s.file);
  // a pin of other files (the corpus changed) serves nothing
  if (pins.ahead && pins.ahead.files.join('\0') !== files.join('\0')) {
    unpinCorpusFiles(pins.ahead);
    pins.ahead = undefined;
  }
  const own =
    (pins.ahead ? pinnedBytesOf(pins.ahead) : 0) + (pins.explicit ? pinnedBytesOf(pins.explicit) : 0);
  const hostMemoryBudget = options.hostMemoryBudget ?? defaultHostMemoryBudget(pinnedByProcess() - own);
  const choice = chooseTransfer({
    requested,
    explicitPin: pins.explicit !== undefined,
    corpusBytes: file.info.bytes,
    budget: hostMemoryBudget,
  });
  // auto, and the corpus no longer fits: what earlier searches pinned ahead goes back
  if (requested === 'auto' && choice.mode !== 'pinned-ahead' && pins.ahead) {
    unpinCorpusFiles(pins.ahead);
    pins.ahead = undefined;
  }
  try {
    return await streamSearch(file, queries, k, options, pins, cancel, choice, hostMemoryBudget);
  } catch (e) {
    // page-locking refused (a locked-memory limit, an odd file system): auto reads with O_DIRECT instead
    const message = e instanceof Error ? e.message : String(e);
    if (requested !== 'auto' || choice.mode !== 'pinned-ahead' || !message.includes('cuMemHostRegister'))
      throw e;
    if (pins.ahead) unpinCorpusFiles(pins.ahead);
    pins.ahead = undefined;
    const fallback = { mode: 'direct' as const, reason: `pinning ahead failed (${message})` };
    return streamSearch(file, queries, k, options, pins, cancel, fallback, hostMemoryBudget);
  }
}

async function streamSearch(
  file: CorpusFile,
  queries: TokenBatch,
  k: number,
  options: CorpusSearchOptions,
  pins: CorpusPins,
  cancel: Int32Array | undefined,
  choice: { mode: TransferMode; reason: string },
  hostMemoryBudget: number,
): Promise<{ hits: Hit[][]; stats: ScanStats }> {
  const info = file.info;
  // int8 corpora: queries arrive quantized (int8 with scales); float corpora take queries in their dtype
  const dtype = info.dtype;
  let DEPTH = options.pipelineDepth ?? DEFAULT_DEPTH[choice.mode];
  if (!Number.isInteger(DEPTH) || DEPTH < 1 || DEPTH > 8)
    throw new InvalidArgumentError('pipelineDepth', 'an integer in [1, 8]', String(options.pipelineDepth));
  const indices = streamDevices(options);
  // reader threads feed host memory, which the GPUs share: split them
  const readers =
    options.readers ??
    Math.max(2, Math.floor((choice.mode === 'direct' ? directReadersFor() : readersFor()) / indices.length));
  if (!Number.isInteger(readers) || readers < 1 || readers > 64)
    throw new InvalidArgumentError('readers', 'an integer in [1, 64]', String(options.readers));
  const devices = await Promise.all(indices.map((device) => cuda({ device })));
  const frees = await Promise.all(devices.map(async (d) => (await d.memory()).free));
  const budget = options.gpuMemory ?? Math.min(DEFAULT_BUDGET_CAP, Math.floor(Math.min(...frees) * 0.75));
  if (!(Number.isSafeInteger(budget) && budget >= 1024 * 1024))
    throw new InvalidArgumentError(
      'gpuMemory',
      'an integer number of bytes >= 1 MiB',
      String(options.gpuMemory),
    );

  // corpus-search.ts hands int8 queries to an int8 corpus and float queries to a float one
  const q: TokenBatch =
    queries.dtype === dtype
      ? queries
      : {
          ...queries,
          dtype,
          data: encodeFloats(decodeToFloat32(queries.data, queries.dtype, queries.dim), dtype as FloatDType, {
            name: 'queries.data',
            dim: queries.dim,
          }),
          scales: undefined,
        };
  // Per slot: token rows + per document (starts 8 B, lengths 4 B, one score per query 4 B); the
  // queries stay outside the slots. The allocator rounds each of the slot's 4 blocks (and the
  // queries' 3) up to 2 MiB, so that slack is reserved too.
  const GRANULE = 2 * 1024 * 1024;
  const queryBytes =
    q.data.length * (dtypeSize(dtype) + (dtype === 'int8' ? 4 / info.dim : 0)) + q.count * 12 + 4 * GRANULE;
  const perDocBytes = 12 + 4 * Math.max(1, q.count);
  const longest = info.maxLength * storedTokenBytes(dtype, info.dim);
  const slotFor = (depth: number) => Math.floor((budget - queryBytes) / depth) - 5 * GRANULE;
  // a default depth above 3 gives way to 3 where the GPU budget cannot hold that many slots
  if (options.pipelineDepth === undefined && DEPTH > 3 && slotFor(DEPTH) < longest + perDocBytes) DEPTH = 3;
  const perSlot = slotFor(DEPTH);
  let blockBytes = Math.min(options.blockBytes ?? MAX_BLOCK_BYTES, Math.floor(perSlot * 0.9));
  if (blockBytes < longest) blockBytes = longest;
  const maxDocs = Math.max(1, Math.floor((perSlot - blockBytes) / perDocBytes));
  if (perSlot < longest + perDocBytes)
    throw new InvalidArgumentError(
      'gpuMemory',
      `at least ${Math.ceil((DEPTH * (longest + perDocBytes) + queryBytes) / 1024 ** 2)} MiB (three slots of the longest document)`,
      `${budget} bytes`,
    );
  // an explicit blockBytes is obeyed from the first block on
  const first = options.blockBytes === undefined ? Math.min(blockBytes, FIRST_BLOCK_BYTES) : blockBytes;
  const blocks = file.planBlocks(blockBytes, maxDocs, first);

  // one kernel for every GPU, planned for the largest block of the whole corpus
  const whole = buildStreamPlan(file, blocks);
  let qMax = 0;
  for (let i = 0; i < q.count; i++) qMax = Math.max(qMax, q.lengths[i]);
  const problem: Problem = {
    numQueries: q.count,
    maxQueryLength: qMax,
    maxDocLength: whole.maxLength,
    dim: info.dim,
    numDocs: whole.capacityDocs,
    dtype,
  };
  const caps = deviceCaps(devices[0].info);
  const variant = selectVariant(problem, caps, undefined, dispatchTable(), new Set(devices[0].info.kernels));
  const launch = launchFor(variant, problem, caps);

  const shares = indices.length === 1 ? [blocks] : splitBlocks(blocks, indices.length);
  const progress = shares.map(() => new Float64Array(2));
  const started = performance.now();
  const report = () =>
    options.onProgress?.({
      documents: progress.reduce((s, p) => s + p[0], 0),
      totalDocuments: info.documents,
      bytes: progress.reduce((s, p) => s + p[1], 0),
      totalBytes: info.tokenBytes,
      elapsedMs: performance.now() - started,
    });
  const addon = nativeCuda() as unknown as StreamAddon;
  // Pinned ahead: the files are only mapped here; the scans' readers register the chunks.
  const setupStart = performance.now();
  if (choice.mode === 'pinned-ahead' && !pins.ahead) {
    pins.pending ??= pinCorpusFiles(file, indices[0], { ahead: true }).finally(() => {
      pins.pending = undefined;
    });
    pins.ahead = await pins.pending;
  }
  const setupSeconds = (performance.now() - setupStart) / 1000;
  const pinned =
    choice.mode === 'pinned' ? pins.explicit : choice.mode === 'pinned-ahead' ? pins.ahead : undefined;
  const timer = options.onProgress ? setInterval(report, PROGRESS_MS) : undefined;
  let settled: PromiseSettledResult<NativeStreamResult | undefined>[];
  try {
    settled = await Promise.allSettled(
      shares.map((share, i) => {
        if (share.length === 0) return Promise.resolve(undefined);
        const plan = indices.length === 1 ? whole : buildStreamPlan(file, share);
        return addon.streamScan(
          indices[i],
          q,
          {
            files: file.segments.map((s) => s.path),
            blocks: plan.blockFields,
            starts: plan.starts,
            lengths: plan.lengths,
            capacityTokens: plan.capacityTokens,
            capacityDocs: plan.capacityDocs,
            depth: DEPTH,
            readers,
            k,
            registerPages: choice.mode === 'register',
            directIo: choice.mode === 'direct',
            // auto: files mostly in the page cache are read from there (O_DIRECT would go to the disk)
            directIoUnlessCached: (options.transfer ?? 'auto') === 'auto',
            // the pin is registered for every GPU of the host (portable)
            pinned: pinned?.handle,
          },
          launch,
          progress[i],
          // set by an aborted signal: every GPU's scan stops before its next block (GPU-unverified)
          cancel,
        );
      }),
    );
  } finally {
    if (timer) clearInterval(timer);
  }
  options.signal?.throwIfAborted();
  const bad = settled.findIndex((s) => s.status === 'rejected');
  if (bad >= 0) {
    const e = namedAfterSegments((settled[bad] as PromiseRejectedResult).reason, file);
    if (indices.length === 1) throw e;
    const d = devices[bad].info;
    throw new BackendUnavailableError(
      `GPU ${d.index} (${d.name}) failed: ${e instanceof Error ? e.message : String(e)}`,
    );
  }
  report();
  const results = settled.flatMap((s) => (s.status === 'fulfilled' && s.value ? [s.value] : []));
  const hits: Hit[][] = [];
  for (let i = 0; i < q.count; i++) {
    const row: Hit[] = [];
    for (const r of results)
      for (let j = 0; j < r.k; j++) row.push({ index: r.indices[i * r.k + j], score: r.scores[i * r.k + j] });
    if (results.length > 1) {
      row.sort((a, b) => (better(a.score, a.index, b.score, b.index) ? -1 : 1));
      row.length = Math.min(row.length, k);
    }
    hits.push(row);
  }
  return {
    hits,
    stats: {
      backend: 'cuda',
      blocks: blocks.length,
      bytes: results.reduce((s, r) => s + r.bytes, 0),
      documents: info.documents,
      seconds: Math.max(0, ...results.map((r) => r.seconds)),
      firstBlockSeconds: Math.min(...results.map((r) => r.firstBlockSeconds)),
      devicePeakBytes: Math.max(0, ...results.map((r) => r.devicePeakBytes)),
      variant: variant.name,
      devices: indices,
      transfer: {
        requested: options.transfer ?? 'auto',
        // what the scans did (a refused O_DIRECT reads through the page cache: 'copy', with the note)
        mode: results[0]?.transferMode ?? choice.mode,
        reason: [choice.reason, ...new Set(results.map((r) => r.transferNote).filter(Boolean))].join('; '),
        hostMemoryBudget,
        corpusBytes: info.bytes,
        pinnedBytes: pinned ? pinnedBytesOf(pinned) : 0,
        registeredBytes: results.reduce((s, r) => s + r.registeredBytes, 0),
        setupSeconds,
        depth: DEPTH,
        readers,
      },
    },
  };
}

// The scan reads the snapshot's files through their /proc/self/fd paths; a message names the segment.
function namedAfterSegments(e: unknown, file: CorpusFile): unknown {
  if (!(e instanceof Error)) return e;
  let message = e.message;
  for (const s of file.segments) if (s.path !== s.file) message = message.split(s.path).join(s.file);
  if (message !== e.message) e.message = message;
  return e;
}
