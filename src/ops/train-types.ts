import type { DeviceCorpus } from '../backends/cuda.js';
import type { TrainPlanTuning } from '../backends/cuda-train-plan.js';

/** 'all': every query with every document (scores [Nq, B]); 'diagonal': query i with document i. */
export type TrainPairs = 'all' | 'diagonal';
/** 'auto' trains on the CPU; 'cuda' only when asked for explicitly. */
export type TrainBackend = 'cpu' | 'cuda' | 'auto';
/**
 * How the CUDA backward pass builds dD: 'csr' (default) inverts the argmax into per-row source lists
 * and sums each row in a fixed order (bitwise reproducible); 'atomic' scatters with float atomics
 * (not reproducible, equal to rounding); 'auto' measures the contention on the CSR's histogram (rows
 * with sources / sources) and runs the atomic scatter where there is little to reduce, the CSR
 * otherwise (reproducible only when it picks the CSR; the gradients report the path that ran).
 */
export type TrainDDPath = 'csr' | 'atomic' | 'auto';

/**
 * Internal knobs of the CUDA passes, for tests and benchmarks (maxsimTrainTuned, from
 * maxsim/internal; not among the public options); they feed the plan (src/backends/cuda-train-plan.ts)
 * and none changes the gradients' values except csrChunk (see below).
 * argmaxBits: device storage of the argmax (0 automatic: int16 when every document is shorter than
 * 32768 tokens); docBlock / queryBlock: documents per CSR block and queries per CSR cell (0 automatic);
 * forwardGrid: at most this many forward CTAs (0 automatic); forwardTma: false makes the wgmma forward
 * read documents with cp.async instead of TMA (A/B measurements); csrChunk:
 * sources per chunk of a split dD row (0 automatic = CSR_CHUNK, else >= CSR_CHUNK_MIN; rows with more
 * sources are summed by one warp per chunk; it sets the fp64 association of long rows, so unlike the
 * others it may change the last bit of their gradients); csrBlockWalk: false counts and places the
 * CSR with one warp per (document, query block) instead of one CTA (A/B measurements; the same CSR);
 * profile: the passes report profileMs (host phases: wall time; kernels: CUDA event time).
 * @internal
 */
export interface TrainCudaTuning extends TrainPlanTuning {
  profile?: boolean;
}
/**
 * Forward kernel for backend 'cuda': 'auto' (default) runs a tensor-core kernel where one applies
 * (float16 / bfloat16 queries and documents of one dtype, dim % 8 == 0, dim <= 128): the Hopper
 * wgmma kernel for all pairs on compute capability 9.x, the mma.sync kernel otherwise (8.0 or newer),
 * and the CUDA-core kernel (bitwise equal to the CPU engine) elsewhere; 'wgmma', 'mma' and 'simt'
 * force one (where it does not apply it is refused). The two tensor-core kernels give the same
 * scores and argmax; their dot products round differently from the CPU's sequential fp32 sums, so
 * scores agree with the CPU to fp32 rounding and the argmax may differ at near-ties only.
 */
export type TrainKernel = 'auto' | 'wgmma' | 'mma' | 'simt';

/**
 * Gradient dtype: 'float32' (default) or 'input': each gradient in its input's dtype (float16 and
 * bfloat16 as Uint16Array bits, rounded to nearest even from the float32 result; float32 inputs keep
 * float32). On device-resident inputs the cast runs on the GPU.
 */
export type GradientDtype = 'float32' | 'input';
/** A host gradient array: Float32Array, or float16 / bfloat16 bits with outputDtype 'input'. */
export type GradientArray = Float32Array | Uint16Array;

export interface MaxsimTrainOptions {
  /** Default 'all'. 'diagonal' needs as many queries as documents. */
  pairs?: TrainPairs;
  /**
   * Cancels the forward pass and the backward passes of its result: rejects with an AbortError at
   * once; a native pass in flight cannot stop early, runs to its end in the background and its result
   * is dropped. Device corpora: checked before and after the forward pass.
   */
  signal?: AbortSignal;
  backend?: TrainBackend;
  /** CPU worker threads (default all cores); results do not depend on it. */
  threads?: number;
  /** Gradient dtype (default 'float32'). */
  outputDtype?: GradientDtype;
  /** CUDA device index for backend 'cuda' (default 0). */
  device?: number;
  /** dD method for backend 'cuda' (default 'csr'). */
  dDPath?: TrainDDPath;
  /** Forward kernel for backend 'cuda' (default 'auto'). */
  trainKernel?: TrainKernel;
}

/** @internal maxsimTrainTuned's options: the public ones and the CUDA passes' knobs. */
export interface TunedTrainOptions extends MaxsimTrainOptions {
  cudaTuning?: TrainCudaTuning;
}

export interface MaxsimGradients<A extends GradientArray = Float32Array> {
  /** Same layout and length as queries.data; zero outside real tokens. */
  dQ: A;
  /** Same layout and length as docs.data; zero outside real tokens. */
  dD: A;
  /** backend 'cuda' only: the dD method that ran ('auto' resolves to one of them). */
  dDPath?: 'csr' | 'atomic';
  /** @internal backend 'cuda' with cudaTuning.profile: milliseconds per phase. */
  profileMs?: Record<string, number>;
}

export interface MaxsimTrainResult<A extends GradientArray = Float32Array> {
  /** [rows * cols] row-major; -Infinity for an empty document. */
  scores: Float32Array;
  /** Queries. */
  rows: number;
  /** Documents for 'all', 1 for 'diagonal'. */
  cols: number;
  pairs: TrainPairs;
  /**
   * argmax[p * argmaxStride + s]: the index (within its document) of the document token that query
   * token s of pair p matched; ties go to the lowest index. -1 for an empty document and for slots past
   * the query's length. Pair p is i * cols + b for 'all' and i for 'diagonal'.
   */
  argmax: Int32Array;
  /** Slots per pair in argmax: the longest query (queries.maxLength for a dense batch). */
  argmaxStride: number;
  /**
   * Gradients of sum_p gradScores[p] * scores[p]. Reads the batches again: do not modify them between
   * the forward and the backward pass. Entries for empty documents are ignored.
   */
  backward(gradScores: Float32Array | Float64Array): Promise<MaxsimGradients<A>>;
  /** True once dispose() has dropped the saved state. */
  readonly released: boolean;
  /**
   * Drops the saved state (the argmax, emptied here, and the references to both batches) so its memory
   * can be collected; a later backward() throws. The same call as DeviceTrainResult.dispose().
   */
  dispose(): void;
  /** @internal backend 'cuda' with cudaTuning.profile: milliseconds per phase of the forward. */
  profileMs?: Record<string, number>;
}

export interface ContrastiveOptions {
  /** Cancels the step between its native calls (see MaxsimTrainOptions.signal). */
  signal?: AbortSignal;
  /** Scores are divided by it before the softmax (default 1; must be > 0). */
  temperature?: number;
  /** Positive document of each query (default: query i's positive is document i, which needs Nq <= B). */
  labels?: Int32Array;
  backend?: TrainBackend;
  threads?: number;
  /** CUDA device index for backend 'cuda' (default 0). */
  device?: number;
  /** dD method for backend 'cuda' (default 'csr'). */
  dDPath?: TrainDDPath;
  /** Forward kernel for backend 'cuda' (default 'auto'). */
  trainKernel?: TrainKernel;
  /** Gradient dtype (default 'float32'). */
  outputDtype?: GradientDtype;
}

export interface ContrastiveStepResult<A extends GradientArray = Float32Array> extends MaxsimGradients<A> {
  /** Mean over queries of the softmax cross-entropy. */
  loss: number;
  /** [Nq * B] row-major. */
  scores: Float32Array;
}

/** Gradients of a device-resident backward pass: device corpora (free them with dispose()). */
export interface DeviceGradients {
  /** The queries' items (same order and lengths, packed): float32, or their dtype with outputDtype 'input'. */
  dQ: DeviceCorpus;
  /** The documents' items (same order and lengths, packed): float32, or their dtype with outputDtype 'input'. */
  dD: DeviceCorpus;
  /** The dD method that ran ('auto' resolves to one of them). */
  dDPath: 'csr' | 'atomic';
  /** @internal with cudaTuning.profile: milliseconds per phase. */
  profileMs?: Record<string, number>;
}

/**
 * A device-resident forward pass (maxsimTrain with a DeviceCorpus among its inputs): the scores on
 * the host, the argmax and both operands kept on the device for the backward pass.
 */
export interface DeviceTrainResult {
  /** [rows * cols] row-major; -Infinity for an empty document. */
  scores: Float32Array;
  rows: number;
  cols: number;
  pairs: TrainPairs;
  /** Slots per pair of the argmax: the longest query. */
  argmaxStride: number;
  /** True once the saved state is freed: by a backward pass without retain, or by dispose(). */
  readonly released: boolean;
  /** The saved argmax copied to the host, in MaxsimTrainResult.argmax's layout. */
  downloadArgmax(): Promise<Int32Array>;
  /**
   * Gradients of sum_p gradScores[p] * scores[p], on the device. Frees the saved state when it is
   * done, unless { retain: true } (then call backward again or dispose()). The operands are the
   * device memory the forward read: appending to a corpus in between does not change them.
   */
  backward(gradScores: Float32Array | Float64Array, options?: { retain?: boolean }): Promise<DeviceGradients>;
  /** Frees the saved state now (a second call does nothing). */
  dispose(): void;
  /** @internal with cudaTuning.profile: milliseconds per phase of the forward. */
  profileMs?: Record<string, number>;
}

/** contrastiveStep on device-resident inputs: the gradients stay on the device. */
export interface DeviceContrastiveStepResult extends DeviceGradients {
  loss: number;
  scores: Float32Array;
}
