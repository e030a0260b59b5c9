// Which backend runs a call: 'cpu', 'cuda', or 'auto' (CUDA when a usable GPU is present, else CPU).
import { BackendUnavailableError, InvalidArgumentError } from '../errors.js';
import { loadNative, nativeUnavailableReason } from '../native.js';

export type BackendName = 'cpu' | 'cuda';
export type BackendChoice = BackendName | 'auto';

interface CudaStatusLike {
  available: boolean;
  reason?: string;
}

/** Why CUDA cannot be used here, or undefined when it can. Never throws. */
export function cudaUnavailableReason(): string | undefined {
  const nativeReason = nativeUnavailableReason();
  if (nativeReason) return nativeReason;
  try {
    const status = (loadNative().cuda.status as unknown as () => CudaStatusLike)();
    return status.available ? undefined : (status.reason ?? 'CUDA is unavailable');
  } catch (e) {
    return e instanceof Error ? e.message : String(e);
  }
}

export function resolveBackend(choice: BackendChoice | undefined): BackendName {
  const c = choice ?? 'auto';
  if (c !== 'auto' && c !== 'cpu' && c !== 'cuda') {
    throw new InvalidArgumentError('backend', "'auto', 'cpu' or 'cuda'", JSON.stringify(c));
  }
  if (c === 'cpu') return 'cpu';
  const reason = cudaUnavailableReason();
  if (c === 'cuda') {
    if (reason) throw new BackendUnavailableError(`CUDA backend unavailable: ${reason}`);
    return 'cuda';
  }
  return reason ? 'cpu' : 'cuda';
}
