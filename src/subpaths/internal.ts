// 'maxsim/internal': what the CLI, the benchmarks and the tests use beside the public API: kernel
// sets and their choice, bit conversions, batch helpers, the demo corpus. Not covered by semver in 0.x.

export { type CpuInfo, type CpuIsa, type CpuOptions, cpuInfo } from '../backends/cpu.js';
export {
  type BenchOptions,
  type BenchResult,
  benchKernel,
  isDeviceCorpus,
  setJobPhases,
  setMappedScores,
} from '../backends/cuda.js';
export { balancedCuts } from '../backends/cuda-device-group.js';
export { type SelectPlacement, setSelectPlacement } from '../backends/cuda-select-placement.js';
export { isShardedCorpus } from '../backends/cuda-sharded.js';
export {
  AUTO_ATOMIC_DISTINCT,
  CSR_CHUNK,
  planBackward,
  planForward,
  type TrainBackwardPlan,
  type TrainForwardPlan,
  type TrainKernelInfo,
} from '../backends/cuda-train-plan.js';
export { setExactGroup } from '../backends/cuda-two-stage-plan.js';
export { cudaUnavailableReason } from '../backends/select.js';
// the demo corpus and its seeded generator, for the examples and the benchmarks
export { type DemoCorpus, type DemoCorpusOptions, demoCorpus } from '../demo/corpus.js';
export { Rng } from '../demo/random.js';
export { bf16BitsToFloat, f16BitsToFloat, floatToBf16Bits, floatToF16Bits } from '../floats.js';
// The compressed PLAID-class index (docs/index.md): in memory, inside a corpus (indexCorpus, then
// corpus.search goes through it), and a fast-plaid index opened read-only.
export {
  type CorpusIndexOptions as IndexBuildOptions,
  type CorpusIndexResult,
  type IndexProgress,
  indexCorpus,
} from '../io/corpus/index-build.js';
export type { ChamferIsa, PointClouds } from '../ops/chamfer.js';
export {
  cpuInt8IsaFor,
  cpuInt8Isas,
  cpuInt8SlowerReason,
  hasDocumentScales,
  type Int8Isa,
  type RoundTripError,
  roundTripError,
} from '../ops/quantize.js';
export { rankRows } from '../ops/shape.js';
export { maxsimTrainTuned, type TrainCudaTuning, type TunedTrainOptions } from '../ops/train.js';
export { openFastPlaid } from '../plaid/fastplaid.js';
export {
  type BuildIndexOptions,
  type BuildStats,
  buildIndex,
  defaultCentroids,
  defaultSearch,
  type IndexSearchOptions,
  type IndexSearchResult,
  type IndexSearchStats,
  PlaidIndex,
} from '../plaid/plaid.js';
export {
  type SyntheticCorpus,
  type SyntheticOptions,
  syntheticCorpus,
  syntheticQueries,
} from '../plaid/synthetic.js';
export { batchItem, matrixAsBatch, selectItems, totalTokens } from '../tensor.js';
