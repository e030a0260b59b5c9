// The plan of the CUDA training passes, decided here once per call and passed down: which forward
// kernel runs with which shared memory and grid, how the argmax is stored, how dD is built and how
// its CSR is cut into document blocks (cuda-train-blocks.ts). The native engine
// (native/cuda/train_engine.h) checks that a plan is one its kernels can run and executes it. The
// one decision left to run time is the data's: dD 'auto' measures the first CSR block's contention
// on the device and applies this plan's rule (autoAtomicDistinct) to it.
//
// The launch constants a plan must match (the forward's block size and dynamic shared memory, where
// the tensor-core forward applies, the grid limit) are stated once, in
// native/cuda/kernels/maxsim_train_params.h, and reach this file through the addon
// (cuda.trainKernelInfo); those of the dD walk come from native/common/constants.json. The policy
// numbers below (scratch budgets, the dD heuristic's threshold, the CSR chunk) are stated here only.
//
import { InvalidArgumentError } from '../errors.js';
import type { DType } from '../tensor.js';
import { packDocBlocks, planDocBlocks } from './cuda-train-blocks.js';

/** The launch constants of native/cuda/kernels/maxsim_train_params.h, as the addon reports them. */
export interface TrainKernelInfo {
  readonly fwdThreads: number;
  readonly fwdMmaSmem: number;
  readonly fwdWgmmaThreads: number;
  readonly fwdWgmmaSmem: number;
  /** Query rows one wgmma CTA holds at a time (a slab). */
  readonly wgmmaSlabRows: number;
  /** The compute capability (major) the wgmma forward runs on, and only it (sm_90a cubins). */
  readonly wgmmaCc: number;
  readonly mmaDimMultiple: number;
  readonly mmaMaxDim: number;
  readonly mmaMinCc: number;
  readonly maxGrid: number;
}

/**
 * 'auto' picks the Hopper wgmma forward for all pairs on compute capability 9.x, the mma.sync forward
 * where tensor cores apply otherwise, the CUDA-core one elsewhere; the others force one.
 */
export type TrainKernelChoice = 'auto' | 'wgmma' | 'mma' | 'simt';

/** The device a plan is made for. */
export interface TrainDevice {
  ccMajor: number;
  /** Streaming multiprocessors (the wgmma forward runs one CTA per SM). */
  sms: number;
}
export type TrainDDChoice = 'csr' | 'atomic' | 'auto';

/** The internal knobs a plan takes (see TrainCudaTuning in src/ops/train.ts). */
export interface TrainPlanTuning {
  argmaxBits?: 0 | 16 | 32;
  /** wgmma forward: false reads the documents with cp.async instead of TMA (for A/B measurements). */
  forwardTma?: boolean;
  docBlock?: number;
  queryBlock?: number;
  forwardGrid?: number;
  csrChunk?: number;
  /** false: the dD CSR's count and placement run one warp per unit even where the block-wide walk applies (A/B). */
  csrBlockWalk?: boolean;
}

export interface TrainForwardPlan {
  kernel: 'wgmma' | 'mma' | 'simt';
  threads: number;
  /** Dynamic shared memory, bytes (the tensor-core forwards', 0 for simt). */
  smem: number;
  /** CTAs: each striding over pairs (mma, simt) or over (slab, document group) items (wgmma); 0 without pairs. */
  grid: number;
  /** argmax entries stored as int16 on the device (every document shorter than 32768 tokens). */
  argmax16: boolean;
  /** wgmma: queries per launch (best[] holds their pairs' slots); 0 for the others. */
  queryChunk: number;
  /** wgmma: the groups each slab's documents are dealt into, so that every SM has work; 0 for the others. */
  docGroups: number;
  /** wgmma: the documents come through a TMA tensor map (else cp.async); false for the others. */
  tma: boolean;
}

export interface TrainBackwardPlan {
  dD: TrainDDChoice;
  /** dD 'auto': the atomic scatter when the first CSR block's rows with sources / its sources >= this. */
  autoAtomicDistinct: number;
  csrChunk: number;
  /** The CSR's document blocks, [blocks, 4]: docEnd, byBlock, qblocks, qblockSize (cuda-train-blocks.ts); empty for 'atomic'. */
  blocks: Int32Array;
  argmax16: boolean;
}

/** The forward's best[] stripes take at most this (at least 1024 CTAs, ~8 per SM, so the GPU stays full). */
export const FWD_SCRATCH_BYTES = 64 * 2 ** 20;
const FWD_MIN_GRID = 1024;
/**
 * Rows of dD with more than csrChunk sources (hot document tokens) are split: chunks of csrChunk
 * sources, one warp each, fp64 partial sums added in chunk order. Chunks of a block <= 2 * sources /
 * chunk, so partials <= 2 * SOURCE_CAP / CSR_CHUNK * 128 * 8 bytes = 64 MB. Tests may lower the chunk
 * to CSR_CHUNK_MIN (scratch <= 1 GB at the source cap).
 */
export const CSR_CHUNK = 512;
export const CSR_CHUNK_MIN = 32;
/** CSR budget per document block: sources (u32 argmax slot indices, 64 MB) and cells (u32 counts and offsets, 32 MB each). */
export const SOURCE_CAP = 2 ** 24;
export const CELL_CAP = 2 ** 23;
/** Warps the count / place kernels should have per block: (documents in the block) x (query blocks). */
export const WALK_WARPS = 8192;
/**
 * dD 'auto' runs the atomic scatter when the rows with sources are at least this fraction of the
 * sources (about 2 or fewer sources per touched row: little to reduce, so the CSR's passes are pure
 * overhead). A first guess, to be calibrated on the H200 with bench/train-contention.ts.
 */
export const AUTO_ATOMIC_DISTINCT = 0.5;
/** argmax entries fit int16 (-1 .. 32766) when every document is shorter than this. */
const ARGMAX16_DOC_LIMIT = 2 ** 15;

export interface TrainShape {
  queryDtype: DType;
  docDtype: DType;
  dim: number;
  queries: number;
  docs: number;
  pairs: 'all' | 'diagonal';
  /** argmax slots per pair (>= the longest query). */
  stride: number;
  /** The longest document, tokens. */
  maxDocLength: number;
}

/** Whether the tensor-core forward applies: fp16 / bf16 on both sides, one dtype, dim and device within its range. */
export function mmaForwardApplies(shape: TrainShape, ccMajor: number, info: TrainKernelInfo): boolean {
  const half = shape.docDtype === 'float16' || shape.docDtype === 'bfloat16';
  return (
    half &&
    shape.queryDtype === shape.docDtype &&
    shape.dim % info.mmaDimMultiple === 0 &&
    shape.dim >= info.mmaDimMultiple &&
    shape.dim <= info.mmaMaxDim &&
    ccMajor >= info.mmaMinCc
  );
}

/** int16 argmax entries unless a document is too long for them or argmaxBits says 32. */
export function planArgmax16(maxDocLength: number, argmaxBits: 0 | 16 | 32 | undefined): boolean {
  const fits = maxDocLength < ARGMAX16_DOC_LIMIT;
  if (argmaxBits === 32) return false;
  if (argmaxBits === 16 && !fits) {
    throw new InvalidArgumentError(
      'cudaTuning.argmaxBits',
      `0 or 32 (int16 entries need documents shorter than ${ARGMAX16_DOC_LIMIT} tokens)`,
      `16 with a document of ${maxDocLength} tokens`,
    );
  }
  return fits;
}

export function numPairs(shape: TrainShape): number {
  return shape.pairs === 'all' ? shape.queries * shape.docs : shape.queries;
}

/** Whether the wgmma forward applies: where mma does, all pairs, on its compute capability, one query's slots within the scratch budget. */
export function wgmmaForwardApplies(shape: TrainShape, device: TrainDevice, info: TrainKernelInfo): boolean {
  return (
    mmaForwardApplies(shape, device.ccMajor, info) &&
    device.ccMajor === info.wgmmaCc &&
    shape.pairs === 'all' &&
    shape.docs * Math.max(shape.stride, 1) * 4 <= FWD_SCRATCH_BYTES
  );
}

export function planForward(
  shape: TrainShape,
  kernel: TrainKernelChoice,
  tuning: TrainPlanTuning,
  device: TrainDevice,
  info: TrainKernelInfo,
): TrainForwardPlan {
  const { ccMajor } = device;
  const applies = mmaForwardApplies(shape, ccMajor, info);
  const needs = `float16 or bfloat16 queries and docs of one dtype, dim a multiple of ${info.mmaDimMultiple} up to ${info.mmaMaxDim}`;
  const have = `${shape.queryDtype} queries, ${shape.docDtype} docs, dim ${shape.dim}, compute capability ${ccMajor}`;
  if (kernel === 'mma' && !applies) {
    throw new InvalidArgumentError(
      'trainKernel',
      `'auto' or 'simt' (trainKernel 'mma' needs ${needs}, compute capability >= ${info.mmaMinCc}.0)`,
      `'mma' with ${have}`,
    );
  }
  const wgApplies = wgmmaForwardApplies(shape, device, info);
  if (kernel === 'wgmma' && !wgApplies) {
    throw new InvalidArgumentError(
      'trainKernel',
      `'auto', 'mma' or 'simt' (trainKernel 'wgmma' needs ${needs}, pairs 'all', compute capability ${info.wgmmaCc}.x and one query's ${shape.docs} x ${shape.stride} slots within ${FWD_SCRATCH_BYTES / 2 ** 20} MB)`,
      `'wgmma' with ${have}, pairs '${shape.pairs}'`,
    );
  }
  const pairs = numPairs(shape);
  const argmax16 = planArgmax16(shape.maxDocLength, tuning.argmaxBits);
  if ((kernel === 'auto' || kernel === 'wgmma') && wgApplies && pairs > 0) {
    // best[] holds one float per slot of a chunk's pairs; a slab is wgmmaSlabRows query rows (queries
    // cut into 16-row chunks); with fewer slabs than about four per SM the documents are dealt into
    // groups so that every SM has items (each item reloads its slab's query rows: few groups).
    const perQuery = shape.docs * Math.max(shape.stride, 1) * 4;
    const queryChunk = Math.min(shape.queries, Math.max(1, Math.floor(FWD_SCRATCH_BYTES / perQuery)));
    const slabs = Math.ceil(
      (queryChunk * Math.max(1, Math.ceil(shape.stride / 16))) / (info.wgmmaSlabRows / 16),
    );
    const sms = Math.max(1, device.sms);
    const docGroups = Math.max(1, Math.min(shape.docs, Math.floor((4 * sms) / slabs)));
    let grid = Math.min(sms, slabs * docGroups);
    if (tuning.forwardGrid) grid = Math.min(grid, tuning.forwardGrid);
    return {
      kernel: 'wgmma',
      threads: info.fwdWgmmaThreads,
      smem: info.fwdWgmmaSmem,
      grid,
      argmax16,
      queryChunk,
      docGroups,
      tma: tuning.forwardTma !== false,
    };
  }
  const mma = kernel !== 'simt' && applies;
  const perCta = Math.max(shape.stride, 1) * 4; // one float per argmax slot
  let grid = 0;
  if (pairs > 0) {
    grid = Math.min(pairs, info.maxGrid, Math.max(FWD_MIN_GRID, Math.floor(FWD_SCRATCH_BYTES / perCta)));
    if (tuning.forwardGrid) grid = Math.min(grid, tuning.forwardGrid);
  }
  return {
    kernel: mma ? 'mma' : 'simt',
    threads: info.fwdThreads,
    smem: mma ? info.fwdMmaSmem : 0,
    grid,
    argmax16,
    queryChunk: 0,
    docGroups: 0,
    tma: false,
  };
}

/** The lengths the backward's CSR blocks are cut by (of the items the pass reads). */
export interface TrainLengths {
  queries: ArrayLike<number>;
  docs: ArrayLike<number>;
}

export function planBackward(
  dD: TrainDDChoice,
  tuning: TrainPlanTuning,
  shape: Pick<TrainShape, 'pairs' | 'maxDocLength'>,
  lengths: TrainLengths,
): TrainBackwardPlan {
  const blocks =
    dD === 'atomic'
      ? []
      : planDocBlocks(lengths.queries, lengths.docs, shape.pairs, {
          docBlock: tuning.docBlock ?? 0,
          queryBlock: tuning.queryBlock ?? 0,
          walkWarps: WALK_WARPS,
          blockWalk: tuning.csrBlockWalk ?? true,
          sourceCap: SOURCE_CAP,
          cellCap: CELL_CAP,
        });
  return {
    dD,
    autoAtomicDistinct: AUTO_ATOMIC_DISTINCT,
    csrChunk: tuning.csrChunk || CSR_CHUNK,
    blocks: packDocBlocks(blocks),
    argmax16: planArgmax16(shape.maxDocLength, tuning.argmaxBits),
  };
}
