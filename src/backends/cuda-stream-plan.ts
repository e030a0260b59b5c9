// How a CUDA corpus scan is laid out: the pipeline depth and reader threads for a transfer mode,
// the slot and block sizes that fit a GPU memory budget, the GPUs and their shares of the blocks,
// and the plan arrays the native scan (native/cuda/stream_scan.cc) takes. Plain decisions, no GPU.

import * as os from 'node:os';
import { InvalidArgumentError } from '../errors.js';
import { type CorpusBlock, type CorpusFile, type CorpusInfo, storedTokenBytes } from '../io/corpus/index.js';
import type { CorpusSearchOptions } from '../ops/corpus-search.js';
import { dtypeSize, type TokenBatch } from '../tensor.js';
import { STREAM_BLOCK_FIELDS } from './constants.js';
import { cudaStatus } from './cuda.js';
import { balancedCuts } from './cuda-device-group.js';
import type { TransferMode } from './cuda-transfer.js';

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

function readersFor(): number {
  // pread from the page cache runs at several GB/s per thread; a handful of threads feed the bus.
  const cores = os.availableParallelism();
  return Math.max(2, Math.min(12, cores - 2));
}

// O_DIRECT reads wait on the device, not on a CPU copy: more of them in flight, up to 16.
function directReadersFor(): number {
  return Math.max(4, Math.min(16, os.availableParallelism()));
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
export function streamDevices(options: CorpusSearchOptions): number[] {
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
export function splitBlocks(blocks: readonly CorpusBlock[], parts: number): CorpusBlock[][] {
  const cuts = balancedCuts(
    blocks.map((b) => b.tokens),
    parts,
  );
  return Array.from({ length: parts }, (_, i) => blocks.slice(cuts[i], cuts[i + 1]));
}

/** The pipeline depth of a scan in `mode` (`pipelineDepth` overrides it). */
export function depthFor(options: Pick<CorpusSearchOptions, 'pipelineDepth'>, mode: TransferMode): number {
  const depth = options.pipelineDepth ?? DEFAULT_DEPTH[mode];
  if (!Number.isInteger(depth) || depth < 1 || depth > 8)
    throw new InvalidArgumentError('pipelineDepth', 'an integer in [1, 8]', String(options.pipelineDepth));
  return depth;
}

/** Reader threads per GPU of a scan over `gpus` GPUs in `mode` (`readers` overrides it). */
export function readersPerGpu(
  options: Pick<CorpusSearchOptions, 'readers'>,
  mode: TransferMode,
  gpus: number,
): number {
  // reader threads feed host memory, which the GPUs share: split them
  const readers =
    options.readers ??
    Math.max(2, Math.floor((mode === 'direct' ? directReadersFor() : readersFor()) / gpus));
  if (!Number.isInteger(readers) || readers < 1 || readers > 64)
    throw new InvalidArgumentError('readers', 'an integer in [1, 64]', String(options.readers));
  return readers;
}

/** The GPU memory budget of a scan: `gpuMemory`, else 3/4 of the least free memory, at most 8 GiB. */
export function gpuBudgetFor(gpuMemory: number | undefined, frees: readonly number[]): number {
  const budget = gpuMemory ?? Math.min(DEFAULT_BUDGET_CAP, Math.floor(Math.min(...frees) * 0.75));
  if (!(Number.isSafeInteger(budget) && budget >= 1024 * 1024))
    throw new InvalidArgumentError('gpuMemory', 'an integer number of bytes >= 1 MiB', String(gpuMemory));
  return budget;
}

/** How the GPU budget is cut: the pipeline depth, the block size, documents per block, the first block. */
export interface SlotSizes {
  depth: number;
  blockBytes: number;
  maxDocs: number;
  firstBlockBytes: number;
}

/**
 * Slots for `depth` blocks in flight within `budget` bytes, beside the queries `q` (already in the
 * corpus dtype). A default depth above 3 gives way to 3 where the budget cannot hold that many slots;
 * an explicit `blockBytes` is obeyed from the first block on.
 */
export function sizeSlots(input: {
  budget: number;
  depth: number;
  explicitDepth: boolean;
  blockBytes: number | undefined;
  q: TokenBatch;
  info: Pick<CorpusInfo, 'dim' | 'maxLength'>;
}): SlotSizes {
  const { budget, q, info } = input;
  const dtype = q.dtype;
  // Per slot: token rows + per document (starts 8 B, lengths 4 B, one score per query 4 B); the
  // queries stay outside the slots. The allocator rounds each of the slot's 4 blocks (and the
  // queries' 3) up to 2 MiB, so that slack is reserved too.
  const GRANULE = 2 * 1024 * 1024;
  const queryBytes =
    q.data.length * (dtypeSize(dtype) + (dtype === 'int8' ? 4 / info.dim : 0)) + q.count * 12 + 4 * GRANULE;
  const perDocBytes = 12 + 4 * Math.max(1, q.count);
  const longest = info.maxLength * storedTokenBytes(dtype, info.dim);
  const slotFor = (depth: number) => Math.floor((budget - queryBytes) / depth) - 5 * GRANULE;
  let depth = input.depth;
  if (!input.explicitDepth && depth > 3 && slotFor(depth) < longest + perDocBytes) depth = 3;
  const perSlot = slotFor(depth);
  let blockBytes = Math.min(input.blockBytes ?? MAX_BLOCK_BYTES, Math.floor(perSlot * 0.9));
  if (blockBytes < longest) blockBytes = longest;
  const maxDocs = Math.max(1, Math.floor((perSlot - blockBytes) / perDocBytes));
  if (perSlot < longest + perDocBytes)
    throw new InvalidArgumentError(
      'gpuMemory',
      `at least ${Math.ceil((depth * (longest + perDocBytes) + queryBytes) / 1024 ** 2)} MiB (three slots of the longest document)`,
      `${budget} bytes`,
    );
  const firstBlockBytes =
    input.blockBytes === undefined ? Math.min(blockBytes, FIRST_BLOCK_BYTES) : blockBytes;
  return { depth, blockBytes, maxDocs, firstBlockBytes };
}
