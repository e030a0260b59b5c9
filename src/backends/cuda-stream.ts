// The CUDA side of an out-of-core corpus search: chooses how blocks reach the GPU (cuda-transfer.ts),
// plans the blocks, the slot sizes (cuda-stream-plan.ts) and the kernel, then hands the scan to the
// native pipeline (native/cuda/stream_scan.cc) on each GPU, reports progress and merges the top-Ks.

import { BackendUnavailableError } from '../errors.js';
import { decodeToFloat32, encodeFloats } from '../floats.js';
import type { CorpusBlock, CorpusFile, CorpusInfo } from '../io/corpus/index.js';
import type { CorpusSearchOptions, ScanStats } from '../ops/corpus-search.js';
import { better } from '../ops/topk.js';
import type { FloatDType, Hit, TokenBatch } from '../tensor.js';
import { type CudaDevice, cuda, nativeCuda } from './cuda.js';
import {
  deviceCaps,
  dispatchTable,
  type Launch,
  launchFor,
  type Problem,
  selectVariant,
  type Variant,
} from './cuda-dispatch.js';
import {
  buildStreamPlan,
  depthFor,
  gpuBudgetFor,
  readersPerGpu,
  type StreamPlan,
  sizeSlots,
  splitBlocks,
  streamDevices,
} from './cuda-stream-plan.js';
import {
  type CorpusPin,
  type CorpusPins,
  checkTransferOptions,
  chooseTransfer,
  defaultHostMemoryBudget,
  namedAfterSegments,
  type PinAddon,
  pinCorpusFiles,
  pinnedByProcess,
  pinnedBytesOf,
  type TransferMode,
  unpinCorpusFiles,
} from './cuda-transfer.js';

// What corpus-search.ts takes from the CUDA stream search, in one place.
export {
  type CorpusPins,
  checkTransferOptions,
  pinCorpusFiles,
  pinnedBytesOf,
  type TransferOption,
  type TransferStats,
  unpinCorpusFiles,
} from './cuda-transfer.js';

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

interface StreamAddon extends PinAddon {
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
  const depth = depthFor(options, choice.mode);
  const indices = streamDevices(options);
  const readers = readersPerGpu(options, choice.mode, indices.length);
  const devices = await Promise.all(indices.map((device) => cuda({ device })));
  const frees = await Promise.all(devices.map(async (d) => (await d.memory()).free));
  const budget = gpuBudgetFor(options.gpuMemory, frees);
  const q = inCorpusDtype(queries, info);
  const slots = sizeSlots({
    budget,
    depth,
    explicitDepth: options.pipelineDepth !== undefined,
    blockBytes: options.blockBytes,
    q,
    info,
  });
  const blocks = file.planBlocks(slots.blockBytes, slots.maxDocs, slots.firstBlockBytes);
  // one kernel for every GPU, planned for the largest block of the whole corpus
  const whole = buildStreamPlan(file, blocks);
  const { variant, launch } = kernelFor(q, whole, info, devices[0]);

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
  const scan: ScanSetup = { file, q, k, options, cancel, choice, pinned, launch, readers };
  const results = await runScans(scan, indices, devices, blocks, whole, slots.depth);
  return {
    hits: mergeHits(results, q.count, k),
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
        depth: slots.depth,
        readers,
      },
    },
  };
}

// corpus-search.ts hands int8 queries to an int8 corpus and float queries to a float one, in any
// float dtype: those are encoded in the corpus's.
function inCorpusDtype(queries: TokenBatch, info: CorpusInfo): TokenBatch {
  const dtype = info.dtype;
  if (queries.dtype === dtype) return queries;
  const data = encodeFloats(decodeToFloat32(queries.data, queries.dtype, queries.dim), dtype as FloatDType, {
    name: 'queries.data',
    dim: queries.dim,
  });
  return { ...queries, dtype, data, scales: undefined };
}

// The kernel variant and launch of a scan, for the largest block of `whole` and the longest query.
function kernelFor(
  q: TokenBatch,
  whole: StreamPlan,
  info: CorpusInfo,
  device: CudaDevice,
): { variant: Variant; launch: Launch } {
  let qMax = 0;
  for (let i = 0; i < q.count; i++) qMax = Math.max(qMax, q.lengths[i]);
  const problem: Problem = {
    numQueries: q.count,
    maxQueryLength: qMax,
    maxDocLength: whole.maxLength,
    dim: info.dim,
    numDocs: whole.capacityDocs,
    dtype: info.dtype,
  };
  const caps = deviceCaps(device.info);
  const variant = selectVariant(problem, caps, undefined, dispatchTable(), new Set(device.info.kernels));
  return { variant, launch: launchFor(variant, problem, caps) };
}

/** What every GPU's scan of one search shares. */
interface ScanSetup {
  file: CorpusFile;
  q: TokenBatch;
  k: number;
  options: CorpusSearchOptions;
  cancel: Int32Array | undefined;
  choice: { mode: TransferMode; reason: string };
  pinned: CorpusPin | undefined;
  launch: Launch;
  readers: number;
}

// Runs the native scan of each GPU's share of the blocks at once, reporting progress; a GPU that
// failed is named (one GPU: its error as it is).
async function runScans(
  scan: ScanSetup,
  indices: readonly number[],
  devices: readonly CudaDevice[],
  blocks: readonly CorpusBlock[],
  whole: StreamPlan,
  depth: number,
): Promise<NativeStreamResult[]> {
  const { file, options, choice } = scan;
  const shares = indices.length === 1 ? [blocks] : splitBlocks(blocks, indices.length);
  const progress = shares.map(() => new Float64Array(2));
  const started = performance.now();
  const report = () =>
    options.onProgress?.({
      documents: progress.reduce((s, p) => s + p[0], 0),
      totalDocuments: file.info.documents,
      bytes: progress.reduce((s, p) => s + p[1], 0),
      totalBytes: file.info.tokenBytes,
      elapsedMs: performance.now() - started,
    });
  const addon = nativeCuda() as unknown as StreamAddon;
  const timer = options.onProgress ? setInterval(report, PROGRESS_MS) : undefined;
  let settled: PromiseSettledResult<NativeStreamResult | undefined>[];
  try {
    settled = await Promise.allSettled(
      shares.map((share, i) => {
        if (share.length === 0) return Promise.resolve(undefined);
        const plan = indices.length === 1 ? whole : buildStreamPlan(file, share);
        return addon.streamScan(
          indices[i],
          scan.q,
          {
            files: file.segments.map((s) => s.path),
            blocks: plan.blockFields,
            starts: plan.starts,
            lengths: plan.lengths,
            capacityTokens: plan.capacityTokens,
            capacityDocs: plan.capacityDocs,
            depth,
            readers: scan.readers,
            k: scan.k,
            registerPages: choice.mode === 'register',
            directIo: choice.mode === 'direct',
            // auto: files mostly in the page cache are read from there (O_DIRECT would go to the disk)
            directIoUnlessCached: (options.transfer ?? 'auto') === 'auto',
            // the pin is registered for every GPU of the host (portable)
            pinned: scan.pinned?.handle,
          },
          scan.launch,
          progress[i],
          // set by an aborted signal: every GPU's scan stops before its next block (GPU-unverified)
          scan.cancel,
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
  return settled.flatMap((s) => (s.status === 'fulfilled' && s.value ? [s.value] : []));
}

// Each GPU's running top-K per query, merged exactly (descending score, ties to the lower index).
function mergeHits(results: readonly NativeStreamResult[], queries: number, k: number): Hit[][] {
  const hits: Hit[][] = [];
  for (let i = 0; i < queries; i++) {
    const row: Hit[] = [];
    for (const r of results)
      for (let j = 0; j < r.k; j++) row.push({ index: r.indices[i * r.k + j], score: r.scores[i * r.k + j] });
    if (results.length > 1) {
      row.sort((a, b) => (better(a.score, a.index, b.score, b.index) ? -1 : 1));
      row.length = Math.min(row.length, k);
    }
    hits.push(row);
  }
  return hits;
}
