// maxsim: the public API. Re-exports only.
export { version } from './version.js';
export * from './errors.js';
export {
  type DType,
  type FloatDType,
  type TokenData,
  type TokenMatrix,
  type TokenBatch,
  type ScoreMatrix,
  type Hit,
  type Offsets,
  type DenseBatchOptions,
  type RaggedBatchOptions,
  type DtypeOptions,
  type ValidationOptions,
  tokenMatrix,
  denseBatch,
  raggedBatch,
  matrixAsBatch,
  batchItem,
  totalTokens,
  encodeFloats,
  decodeToFloat32,
  floatToF16Bits,
  f16BitsToFloat,
  floatToBf16Bits,
  bf16BitsToFloat,
} from './tensor.js';
export { type ScoreOptions, maxsim, maxsimSync, maxsimAll, maxsimAllSync, topK, topKAll, rankRows } from './ops/maxsim.js';
export { type CpuInfo, type CpuIsa, type CpuOptions, cpuInfo } from './backends/cpu.js';
export { type BackendChoice, type BackendName, cudaUnavailableReason } from './backends/select.js';
export { referenceMaxsim, referenceTopK } from './backends/reference.js';
export { info, type MaxsimInfo } from './info.js';
export * from './io/npy.js';
export * from './io/safetensors.js';
export { type NpyArray } from './io/array.js';
export { loadArray, arrayToMatrix, arrayToQueries, arrayToDocs, batchToArrays } from './io/load.js';
