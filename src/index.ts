// maxsim: the public API. Re-exports only.

export { type CpuInfo, type CpuIsa, type CpuOptions, cpuInfo } from './backends/cpu.js';
export {
  type CudaDevice,
  type CudaDeviceInfo,
  type CudaMemory,
  type CudaStatus,
  cuda,
  cudaStatus,
  type DeviceCorpus,
  e4m3ToFloat,
  type Fp8Tokens,
  isDeviceCorpus,
  type QuantizeMode8,
  referenceMaxsimFp8,
  type TopKOptions,
} from './backends/cuda.js';
export type { DeviceDType } from './backends/cuda-dispatch.js';
export {
  type CudaDeviceGroup,
  isShardedCorpus,
  type ShardedCorpus,
  type ShardedTopKOptions,
  type ShardInfo,
} from './backends/cuda-sharded.js';
export { referenceMaxsim, referenceTopK } from './backends/reference.js';
export { referenceChamfer, referenceNearest } from './backends/reference-chamfer.js';
export { referenceBackward, referenceMaxsimTrain } from './backends/reference-train.js';
export { type BackendChoice, type BackendName, cudaUnavailableReason } from './backends/select.js';
export * from './errors.js';
export { info, type MaxsimInfo } from './info.js';
export type { NpyArray } from './io/array.js';
export { type ArraySource, openArraySource } from './io/array-source.js';
export {
  CHECKSUM_CHUNK,
  type CorpusBlock,
  type CorpusCreateOptions,
  type CorpusDType,
  CorpusFile,
  type CorpusInfo,
  CorpusLockedError,
  CorpusWriter,
  type DeleteResult,
  deleteDocuments,
  type EncodedDocuments,
  type LockOptions,
  type RecoverOptions,
  type RecoverResult,
  recoverCorpus,
  type VerifyProgress,
} from './io/corpus.js';
export { type BuildFromFilesOptions, buildCorpusFromFiles } from './io/corpus-build.js';
export { arrayToDocs, arrayToMatrix, arrayToQueries, batchToArrays, loadArray } from './io/load.js';
export * from './io/npy.js';
export * from './io/safetensors.js';
export {
  type ChamferGradients,
  type ChamferIsa,
  type ChamferOptions,
  type ChamferReduction,
  type ChamferResult,
  type ChamferTrainResult,
  chamfer,
  chamferTrain,
  type NearestOptions,
  type NearestResult,
  nearest,
  type PointClouds,
} from './ops/chamfer.js';
export {
  Corpus,
  type CorpusHit,
  type CorpusSearchOptions,
  openCorpus,
  type ScanStats,
  type SearchProgress,
  type SearchResult,
} from './ops/corpus-search.js';
export {
  maxsim,
  maxsimAll,
  maxsimAllSync,
  maxsimSync,
  rankRows,
  type ScoreOptions,
  topK,
  topKAll,
} from './ops/maxsim.js';
export {
  cpuInt8IsaFor,
  cpuInt8Isas,
  cpuInt8SlowerReason,
  dequantize,
  hasDocumentScales,
  type Int8Isa,
  type QuantizeMode,
  type QuantizeOptions,
  quantize,
  type RoundTripError,
  roundTripError,
  type ScaleGranularity,
} from './ops/quantize.js';
export {
  type ContrastiveOptions,
  type ContrastiveStepResult,
  contrastiveLoss,
  contrastiveStep,
  type DeviceContrastiveStepResult,
  type DeviceGradients,
  type DeviceTrainResult,
  type GradientArray,
  type GradientDtype,
  type MaxsimGradients,
  type MaxsimTrainOptions,
  type MaxsimTrainResult,
  maxsimTrain,
  type TrainBackend,
  type TrainDDPath,
  type TrainKernel,
  type TrainPairs,
} from './ops/train.js';
export { type TwoStageOptions, twoStageTopK, twoStageTopKAll } from './ops/two-stage.js';
export { createServer, type MaxsimServer, type ServerOptions } from './server/index.js';
export {
  batchItem,
  bf16BitsToFloat,
  type DenseBatchOptions,
  type DType,
  type DtypeOptions,
  decodeToFloat32,
  denseBatch,
  encodeFloats,
  type FloatDType,
  f16BitsToFloat,
  floatToBf16Bits,
  floatToF16Bits,
  type Hit,
  matrixAsBatch,
  type Offsets,
  type RaggedBatchOptions,
  raggedBatch,
  raggedBatchView,
  type ScoreMatrix,
  selectItems,
  type TokenBatch,
  type TokenData,
  type TokenMatrix,
  tokenMatrix,
  totalTokens,
  type ValidationOptions,
} from './tensor.js';
export { version } from './version.js';
