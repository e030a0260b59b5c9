// 'maxsim/io': the file readers and writers (.npy, .safetensors, any array file by spec), the formats
// in detail (the corpus file and its blocks), array sources and the conversions between arrays and
// batches. Re-exports only.

export type { ArrayData, ArrayDType, NpyArray } from '../io/array.js';
export { type ArraySource, openArraySource } from '../io/array-source.js';
export type { Section, SegmentHeader } from '../io/corpus/format.js';
export {
  CHECKSUM_CHUNK,
  type CorpusBlock,
  CorpusFile,
  type CorpusSegment,
  type EncodedDocuments,
  type LockOptions,
  type RecoverOptions,
  type RecoverResult,
  type VerifyProgress,
} from '../io/corpus/index.js';
export {
  arrayToDocs,
  arrayToMatrix,
  arrayToQueries,
  type BatchArrays,
  batchToArrays,
  type DocsArrayOptions,
  type LoadArrayOptions,
  loadArray,
  type TokenArrayOptions,
} from '../io/load.js';
export {
  encodeNpy,
  fileRange,
  MAP_MIN_BYTES,
  NPY_MAX_HEADER_BYTES,
  type NpyReadOptions,
  npyHeader,
  parseNpy,
  parseNpyHeader,
  readFileRange,
  readNpy,
  writeNpy,
} from '../io/npy.js';
export {
  encodeSafetensors,
  openSafetensors,
  parseSafetensors,
  parseSafetensorsLayout,
  readSafetensors,
  SAFETENSORS_MAX_HEADER_BYTES,
  type SafetensorsEntry,
  type SafetensorsFile,
  type SafetensorsReader,
  type TensorInput,
  writeSafetensors,
} from '../io/safetensors.js';
