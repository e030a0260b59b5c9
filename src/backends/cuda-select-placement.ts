// Where the CUDA top-K and two-stage jobs select their best columns (native/cuda/device_select.h):
// 'auto' (default) on the device wherever the device selection takes the shape, 'host' every
// selection on the host heaps. For the benchmarks' A/B runs only (maxsim/internal): process-wide,
// read by each job when it selects, so one process can switch between jobs.

import { BackendUnavailableError, InvalidArgumentError } from '../errors.js';
import { loadNative } from '../native.js';

export type SelectPlacement = 'auto' | 'host';

export function setSelectPlacement(placement: SelectPlacement): void {
  if (placement !== 'auto' && placement !== 'host') {
    throw new InvalidArgumentError('placement', "'auto' or 'host'", JSON.stringify(placement));
  }
  const cuda = (loadNative() as unknown as { cuda?: { setSelectPlacement?: (p: SelectPlacement) => void } })
    .cuda;
  if (typeof cuda?.setSelectPlacement !== 'function') {
    throw new BackendUnavailableError(
      'the native addon has no setSelectPlacement (it predates it); run `npm rebuild maxsim`',
    );
  }
  cuda.setSelectPlacement(placement);
}
