// Which backend runs a call: 'cpu', 'cuda', 'wasm', or 'auto' (CUDA when a usable GPU is present,
// else the native CPU engine, else, for the operations the wasm engine has, WebAssembly).
import { BackendUnavailableError, InvalidArgumentError } from '../errors.js';
import { loadNative, nativeUnavailableReason } from '../native.js';
import { version } from '../version.js';

export type BackendName = 'cpu' | 'cuda' | 'wasm';
/** The backends of the native addon (every operation has them). */
export type NativeBackend = 'cpu' | 'cuda';
export type BackendChoice = BackendName | 'auto';

interface CudaStatusLike {
  available: boolean;
  reason?: string;
  devices?: unknown[];
  kernelDir?: string;
  kernelFiles?: string[];
}

/** Why CUDA cannot be used here, or undefined when it can. Never throws. */
export function cudaUnavailableReason(): string | undefined {
  const nativeReason = nativeUnavailableReason();
  if (nativeReason) return nativeReason;
  try {
    const status = (loadNative().cuda.status as unknown as () => CudaStatusLike)();
    if (status.available) return undefined;
    // A GPU but no fatbins: an install from the registry leaves the kernels package out by default.
    if ((status.devices?.length ?? 0) > 0 && (status.kernelFiles ?? []).length === 0) {
      return `no CUDA kernels found${status.kernelDir ? ` (looked in ${status.kernelDir})` : ''}: install them with \`npm install @maxsim/cuda-kernels@${version}\`, or in a source checkout build them where nvcc exists (\`node scripts/build-native.mjs kernels\`)`;
    }
    return status.reason ?? 'CUDA is unavailable';
  } catch (e) {
    return e instanceof Error ? e.message : String(e);
  }
}

export interface ResolveOptions {
  /** The operation runs on the wasm engine too (in-memory scoring and top-K). */
  wasm?: boolean;
}

const WASM_OPS = 'maxsim, topK and maxsimSync';

export function resolveBackend(choice: BackendChoice | undefined): NativeBackend;
export function resolveBackend(choice: BackendChoice | undefined, options: ResolveOptions): BackendName;
export function resolveBackend(choice: BackendChoice | undefined, options: ResolveOptions = {}): BackendName {
  const c = choice ?? 'auto';
  if (c !== 'auto' && c !== 'cpu' && c !== 'cuda' && c !== 'wasm') {
    throw new InvalidArgumentError('backend', "'auto', 'cpu', 'cuda' or 'wasm'", JSON.stringify(c));
  }
  if (c === 'wasm') {
    if (!options.wasm) {
      throw new InvalidArgumentError(
        'backend',
        `'auto', 'cpu' or 'cuda' here (the wasm engine runs ${WASM_OPS})`,
        "'wasm'",
      );
    }
    return 'wasm';
  }
  if (c === 'cpu') return 'cpu';
  const reason = cudaUnavailableReason();
  if (c === 'cuda') {
    if (reason) throw new BackendUnavailableError(`CUDA backend unavailable: ${reason}`);
    return 'cuda';
  }
  if (!reason) return 'cuda';
  // No addon at all: the wasm engine where the operation has one; else 'cpu' (whose use then
  // raises the addon's reason).
  return options.wasm && nativeUnavailableReason() ? 'wasm' : 'cpu';
}
