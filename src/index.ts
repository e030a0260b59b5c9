// maxsim: the public API. Re-exports only: the data model, one async entry per job (each takes one
// query or a batch), the device and on-disk corpora, training, Chamfer distance, the service, the
// errors. The rest is under subpaths: 'maxsim/sync' (the blocking variants), 'maxsim/io' (file
// readers and writers, arrays, the corpus file), 'maxsim/reference' (float64 references) and
// 'maxsim/internal' (kernel sets, conversions, helpers the CLI and benchmarks use).
// test/exports.test.ts states the surface of each.

export type { CpuInfo, CpuIsa } from './backends/cpu.js';
export {
  type CudaDevice,
  type CudaDeviceInfo,
  type CudaMemory,
  type CudaStatus,
  cuda,
  type DeviceCorpus,
  type QuantizeMode8,
  type ScoreOptions as DeviceScoreOptions,
  type TopKOptions,
} from './backends/cuda.js';
export type { CudaDeviceGroup } from './backends/cuda-device-group.js';
export type { DeviceDType } from './backends/cuda-dispatch.js';
export type { CudaDeviceStatus } from './backends/cuda-native.js';
export type { ShardedCorpus, ShardedTopKOptions, ShardInfo } from './backends/cuda-sharded.js';
export type { TransferMode, TransferOption, TransferStats } from './backends/cuda-transfer.js';
export type { BackendChoice, BackendName } from './backends/select.js';
export type { LoadColbertOptions } from './encode/colbert.js';
export * from './errors.js';
export { decodeToFloat32, type EncodeFloatsOptions, encodeFloats } from './floats.js';
export { info, type MaxsimInfo } from './info.js';
export {
  type CorpusCreateOptions,
  type CorpusDType,
  type CorpusInfo,
  CorpusLockedError,
  CorpusWriter,
  type DeleteOptions,
  type DeleteResult,
  recoverCorpus,
  type WriterOptions,
} from './io/corpus/index.js';
export type { CorpusIndexInfo } from './io/corpus/manifest.js';
export { type BuildFromFilesOptions, type BuildResult, buildCorpusFromFiles } from './io/corpus-build.js';
export type { CenterOption } from './ops/center.js';
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
export type { CorpusIndexOptions, IndexSearchStats, IndexStage } from './ops/corpus-index-search.js';
export {
  Corpus,
  type CorpusHit,
  type CorpusSearchOptions,
  openCorpus,
  type ScanStats,
  type SearchProgress,
  type SearchResult,
} from './ops/corpus-search.js';
export { maxsim, type ScoreOptions, topK } from './ops/maxsim.js';
export {
  dequantize,
  type Int8Isa,
  type QuantizeMode,
  type QuantizeOptions,
  quantize,
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
export { type TwoStageOptions, twoStageTopK } from './ops/two-stage.js';
export type { StagePrecision } from './plaid/cuda-plan.js';
export type { ServerApp } from './server/app.js';
export { createServer, type MaxsimServer, type ServerOptions } from './server/index.js';
export type { PassDtype } from './server/segment-search.js';
export type { ModelSummary } from './server/text.js';
export {
  type DenseBatchOptions,
  type DType,
  denseBatch,
  type FloatDType,
  type Hit,
  type Offsets,
  type RaggedBatchOptions,
  raggedBatch,
  type ScoreMatrix,
  type TokenBatch,
  type TokenData,
  type TokenInput,
  type TokenMatrix,
  tokenMatrix,
  type ValidationOptions,
  type ViewOptions,
} from './tensor.js';
export { version } from './version.js';
