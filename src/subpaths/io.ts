// 'maxsim/io': the file readers and writers (.npy, .safetensors, any array file by spec), the formats
// in detail (the corpus file and its blocks), array sources and the conversions between arrays and
// batches. Re-exports only.

export type { NpyArray } from '../io/array.js';
export { type ArraySource, openArraySource } from '../io/array-source.js';
export {
  CHECKSUM_CHUNK,
  type CorpusBlock,
  CorpusFile,
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
  batchToArrays,
  type LoadArrayOptions,
  loadArray,
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
  writeSafetensors,
} from '../io/safetensors.js';
