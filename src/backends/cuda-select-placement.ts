// Where the CUDA top-K and two-stage jobs may select their best columns (src/backends/cuda-select-plan.ts):
// 'auto' (default) lets the plan choose the device wherever the device selection takes the shape,
// 'host' makes it choose the host heaps for every selection. For the benchmarks' A/B runs only
// (maxsim/internal): process-wide, read by each job's plan when it is made, so one process can switch
// between jobs.

import { InvalidArgumentError } from '../errors.js';

export type SelectPlacement = 'auto' | 'host';

let placement: SelectPlacement = 'auto';

export function setSelectPlacement(value: SelectPlacement): void {
  if (value !== 'auto' && value !== 'host') {
    throw new InvalidArgumentError('placement', "'auto' or 'host'", JSON.stringify(value));
  }
  placement = value;
}

/** The placement the next job's plan goes by. */
export function selectPlacement(): SelectPlacement {
  return placement;
}
