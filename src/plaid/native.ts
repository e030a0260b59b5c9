// Typed face of the residual codec and index search stages (native/cpu/residual.h via
// native/binding/residual_binding.cc, exports.residual).
import { loadNative } from '../native.js';
import type { TokenBatch } from '../tensor.js';
import type { AssignGroups } from './kmeans.js';

/**
 * CPU kernel sets of the residual engine. avx512vnni, avxvnni, avx2int8: the avx512 / avx2 kernels
 * with the 2-bit residual scoring in int8 (VPDPBUSD zmm / ymm, VPMADDUBSW; native/cpu/residual_int8_impl.h).
 */
export type ResidualIsa = 'avx512vnni' | 'avx512' | 'avxvnni' | 'avx2int8' | 'avx2' | 'portable';

/**
 * The int8 residual sets (2-bit only): the fp32 set that re-scores their final lists and the
 * largest int8 weight of their table (avx2int8: 7 bits, so VPMADDUBSW's int16 pair sums never saturate).
 */
export const int8Residual: Partial<Record<ResidualIsa, { fp32: ResidualIsa; weightMax: number }>> = {
  avx512vnni: { fp32: 'avx512', weightMax: 127 },
  avxvnni: { fp32: 'avx2', weightMax: 127 },
  avx2int8: { fp32: 'avx2', weightMax: 63 },
};

export interface KernelOptions {
  threads?: number;
  isa?: ResidualIsa;
}

/** The arrays the native stages read (see native/cpu/residual.h for the layouts). */
export interface NativeIndex {
  k: number;
  d: number;
  docs: number;
  bits: 2 | 4;
  centroids: Float32Array;
  tables: Float32Array;
  cids: Int32Array;
  codes: Uint8Array;
  docOffsets: Float64Array;
  bagOffsets: Float64Array;
  bags: Int32Array;
  ivfOffsets: Float64Array;
  ivf: Int32Array;
}

export interface NativeSearchStats {
  probed: number;
  generated: number;
  keptCentroids: number;
  scored: number;
  msCentroids: number;
  msCandidates: number;
  msInteraction: number;
  msResidual: number;
  isa: ResidualIsa;
}

/** The native stages' options (search and searchBatch). */
export interface NativeSearchOptions extends KernelOptions {
  nprobe: number;
  candidates: number;
  threshold?: number;
  prune?: number;
  interaction?: 'lists' | 'bags' | 'hybrid';
}

interface ResidualAddon {
  isas(): ResidualIsa[];
  assign(
    x: Float32Array,
    centroids: Float32Array,
    d: number,
    l2: boolean,
    o: KernelOptions & { groups?: AssignGroups },
  ): Promise<{ ids: Int32Array; scores: Float32Array }>;
  encode(
    docs: TokenBatch,
    centroids: Float32Array,
    cutoffs: Float32Array,
    tables: Float32Array,
    bits: number,
    o: KernelOptions & { first?: number; cids?: Int32Array; codes?: Uint8Array; groups?: AssignGroups },
  ): Promise<{ cids: Int32Array; codes: Uint8Array; sqError: Float64Array }>;
  checkIndex(index: NativeIndex): void;
  search(
    index: NativeIndex,
    query: Float32Array,
    o: NativeSearchOptions,
  ): Promise<{ ids: Int32Array; scores: Float32Array; stats: NativeSearchStats }>;
  /** Query i's results are ids / scores [offsets[i], offsets[i + 1]), each what search returns for it. */
  searchBatch(
    index: NativeIndex,
    queries: Float32Array,
    lengths: Int32Array,
    o: NativeSearchOptions & { passBytes?: number },
  ): Promise<{ ids: Int32Array; scores: Float32Array; offsets: Float64Array; stats: NativeSearchStats[] }>;
  scoreDocs(
    index: NativeIndex,
    query: Float32Array,
    docs: Int32Array,
    o: KernelOptions & { keep?: Uint8Array },
  ): Float32Array;
  prunePlan(
    index: NativeIndex,
    query: Float32Array,
    o: KernelOptions & { nprobe: number; prune: number },
  ): Uint8Array;
  centroidDocs(
    index: NativeIndex,
    query: Float32Array,
    docs: Int32Array,
    keep: Uint8Array | null,
    o: KernelOptions,
  ): Float32Array;
}

export function residualAddon(): ResidualAddon {
  return (loadNative() as unknown as { residual: ResidualAddon }).residual;
}
