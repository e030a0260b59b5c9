// Typed face of the compressed index's CUDA engine (native/cuda/plaid_engine.h via
// native/binding/plaid_cuda_binding.cc and plaid_cuda_index_binding.cc, on exports.cuda).

import { cudaStatus, nativeCuda } from '../backends/cuda-native.js';
import { BackendUnavailableError } from '../errors.js';
import type { TokenBatch } from '../tensor.js';
import type { CudaSearchPlan } from './cuda-plan.js';
import type { AssignGroups } from './kmeans.js';
import type { NativeIndex } from './native.js';

/** An opaque device-side object (an encoder or an uploaded index). */
export type PlaidHandle = { readonly __plaid: unique symbol };

export interface PlaidCudaSearch {
  offsets: Float64Array;
  docs: Int32Array;
  scores: Float32Array;
  residual: Float32Array;
  stats: {
    probed: number;
    generated: number;
    kept: number;
    scored: number;
    rescored: number;
    msCentroids: number;
    /** Of msCentroids: the probe kernels (each token's nprobe best centroids). */
    msProbe: number;
    msCandidates: number;
    msInteraction: number;
    msResidual: number;
    msRescore: number;
    msTotal: number;
  };
  stages?: {
    probed: Int32Array;
    candidates: Int32Array;
    interaction: Float32Array;
    kept: Int32Array;
    residual: Float32Array;
  }[];
}

export interface PlaidCuda {
  plaidEncoder(
    device: number,
    o: {
      centroids: Float32Array;
      d: number;
      bits: 2 | 4;
      cutoffs?: Float32Array;
      tables?: Float32Array;
      groups?: AssignGroups;
    },
  ): Promise<PlaidHandle>;
  plaidAssign(encoder: PlaidHandle, x: Float32Array): Promise<{ ids: Int32Array; scores: Float32Array }>;
  plaidEncode(
    encoder: PlaidHandle,
    docs: TokenBatch,
    o: { first: number; cids: Int32Array; codes: Uint8Array },
  ): Promise<{ sqError: number; ms: number }>;
  plaidIndex(
    device: number,
    index: NativeIndex,
    tokens?: TokenBatch[],
  ): Promise<{ handle: PlaidHandle; bytes: number }>;
  plaidSearch(
    index: PlaidHandle,
    queries: Float32Array,
    lengths: Int32Array,
    plan: CudaSearchPlan,
  ): Promise<PlaidCudaSearch>;
}

/** Whether the GPU index path can run here (a usable device and the plaid kernels built). */
export function plaidCudaReason(): string | undefined {
  const s = cudaStatus();
  if (!s.available) return s.reason;
  const c = nativeCuda() as unknown as Partial<PlaidCuda>;
  if (typeof c.plaidEncoder !== 'function') return 'the addon has no CUDA plaid engine (rebuild it)';
  return undefined;
}

export function plaidCuda(): PlaidCuda {
  const why = plaidCudaReason();
  if (why) throw new BackendUnavailableError(`The GPU index path is unavailable: ${why}`);
  return nativeCuda() as unknown as PlaidCuda;
}
