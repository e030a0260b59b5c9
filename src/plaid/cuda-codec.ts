// The residual codec on the GPU: the assignment (exact or two-level) and the encode of every part's
// tokens, bitwise what the CPU codec computes (native/cuda/kernels/maxsim_plaid.cu says how), so an
// index built with backend 'cuda' is the index built with 'cpu'.
import { InvalidArgumentError } from '../errors.js';
import type { TokenBatch } from '../tensor.js';
import type { Buckets } from './codec.js';
import { plaidCuda, plaidCudaReason } from './cuda-native.js';
import type { AssignGroups } from './kmeans.js';

export type CodecBackend = 'auto' | 'cpu' | 'cuda';

/** Tokens per GPU encode call (one upload, one assignment; progress between calls). */
export const CUDA_ENCODE_SLICE = 1 << 22;

export interface GpuCodec {
  device: number;
  /** Nearest centroid of each row ([n][d]) by the CPU's rule (ties to the lower id). */
  assign(x: Float32Array, centroids: Float32Array, d: number, groups?: AssignGroups): Promise<Int32Array>;
  /** Every part's tokens as one stream: ids, codes and the summed squared error. */
  encodeParts(
    parts: readonly TokenBatch[],
    tokens: number,
    centroids: Float32Array,
    buckets: Buckets,
    groups: AssignGroups | undefined,
    onSlice: (done: number) => void,
  ): Promise<{ cids: Int32Array; codes: Uint8Array; sqError: number }>;
}

/** Largest token dimension of the GPU codec (native PLAID_MAX_DIM). */
export const CUDA_MAX_DIM = 1024;

/**
 * The GPU codec for a build's `backend` option, or undefined for the CPU ('auto' without a GPU, or
 * with tokens wider than CUDA_MAX_DIM).
 */
export function codecFor(backend: unknown, dim = 0, device = 0): GpuCodec | undefined {
  if (backend === undefined || backend === 'cpu') return undefined;
  if (backend !== 'auto' && backend !== 'cuda')
    throw new InvalidArgumentError('options.backend', "'auto', 'cpu' or 'cuda'", String(backend));
  if (backend === 'auto' && (plaidCudaReason() !== undefined || dim > CUDA_MAX_DIM)) return undefined;
  if (dim > CUDA_MAX_DIM)
    throw new InvalidArgumentError('docs.dim', `at most ${CUDA_MAX_DIM} for backend 'cuda'`, String(dim));
  const cu = plaidCuda();
  return {
    device,
    async assign(x, centroids, d, groups) {
      const enc = await cu.plaidEncoder(device, { centroids, d, bits: 2, groups });
      return (await cu.plaidAssign(enc, x)).ids;
    },
    async encodeParts(parts, tokens, centroids, buckets, groups, onSlice) {
      const d = buckets.d;
      const enc = await cu.plaidEncoder(device, {
        centroids,
        d,
        bits: buckets.bits,
        cutoffs: buckets.cutoffs,
        tables: buckets.tables,
        groups,
      });
      const padded = Math.ceil(tokens / 16) * 16;
      const cids = new Int32Array(padded);
      const codes = new Uint8Array((padded / 16) * d * 2 * buckets.bits);
      let first = 0;
      let sqError = 0;
      for (const p of parts) {
        for (let b0 = 0; b0 < p.count; ) {
          let b1 = b0;
          let n = 0;
          while (b1 < p.count && (b1 === b0 || n + p.lengths[b1] <= CUDA_ENCODE_SLICE)) n += p.lengths[b1++];
          const slice: TokenBatch = {
            ...p,
            count: b1 - b0,
            starts: p.starts.subarray(b0, b1),
            lengths: p.lengths.subarray(b0, b1),
          };
          sqError += (await cu.plaidEncode(enc, slice, { first, cids, codes })).sqError;
          first += n;
          b0 = b1;
          onSlice(first);
        }
      }
      return { cids, codes, sqError };
    },
  };
}
