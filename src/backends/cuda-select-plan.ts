// Where each top-K selection of a CUDA job runs, decided here once per job and passed down: on the
// device (native/cuda/device_select.h, kernels/maxsim_select.cu: only the kept entries come back) or
// on the host heaps of the worker thread (the score matrix read back in chunks). topK has one
// selection; twoStage one for its scan's candidates, which its exact stage follows (native/cuda/engine.h,
// TwoStageJob::select). The engine executes the choice and refuses a 'device' one outside the device
// selection's limits; it decides nothing.
//
// The limits (the entry points' keep ranges and chunks, the grid limit, the read-back size) are stated
// once, in native/cuda/device_select.{h,cc}, and reach this file through the addon
// (cuda.selectKernelInfo).

import { selectPlacement } from './cuda-select-placement.js';

export type SelectWhere = 'device' | 'host';

/** The device selection's limits as the addon reports them (cuda.selectKernelInfo). */
export interface SelectKernelInfo {
  /** Bytes one read-back may copy: the kept entries (8 per entry, 4 per row) must fit. */
  readonly readBackBytes: number;
  /** The first level's blocks (rows * ceil(cols / chunk)) at most this. */
  readonly maxBlocks: number;
  /** By ascending maxKeep: the entry points for a keep up to maxKeep, the chunk each level reduces, and
   *  the kernel a runtime must have loaded. The last maxKeep is the largest keep the device takes. */
  readonly entries: ReadonlyArray<{
    readonly maxKeep: number;
    readonly chunk: number;
    readonly kernel: string;
  }>;
}

/** One selection: the `keep` best columns of each of `rows` rows of `cols` scores. */
export interface SelectShape {
  rows: number;
  cols: number;
  keep: number;
}

/**
 * Score matrices of at most this many entries (16 KB) come back whole for the host heaps: one small
 * read-back costs less than the selection kernel's launch and its own read-back (H200, topK(10) of 1
 * query over 1,000 documents: 71.5 us end to end against 82.6 with the device selection,
 * `node dist/bench/call-overhead.js`).
 */
export const HOST_SELECT_MAX_SCORES = 4096;

/** Whether a selection is small enough that the host heaps are the faster place for it. */
export function smallSelection(shape: SelectShape): boolean {
  return shape.rows * shape.cols <= HOST_SELECT_MAX_SCORES;
}

/**
 * Where a selection of this shape runs: 'device' when the device selection takes it (keep in range,
 * grid and one read-back of the kept entries within the limits, its kernel loaded: `kernels` is the
 * device's loaded entry points, empty when the driver cannot list them, then taken as loaded), and
 * the placement is 'auto'; else 'host'.
 */
export function planSelect(
  shape: SelectShape,
  limits: SelectKernelInfo,
  kernels: ReadonlySet<string> = new Set(),
  placement = selectPlacement(),
): SelectWhere {
  const { rows, cols, keep } = shape;
  if (placement === 'host') return 'host';
  const entries = limits.entries;
  if (entries.length === 0) return 'host';
  const maxKeep = entries[entries.length - 1].maxKeep;
  if (rows <= 0 || keep <= 0 || keep > maxKeep || keep > cols) return 'host';
  const entry = entries.find((e) => keep <= e.maxKeep) ?? entries[entries.length - 1];
  // exact in doubles: rows and cols are int32 counts, keep <= maxKeep
  if (rows * Math.ceil(cols / entry.chunk) > limits.maxBlocks) return 'host';
  if (rows * keep * 8 + rows * 4 > limits.readBackBytes) return 'host';
  if (kernels.size > 0 && !kernels.has(entry.kernel)) return 'host';
  return 'device';
}
