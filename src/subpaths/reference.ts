// 'maxsim/reference': the float64 references every kernel answers to in the tests. Slow by design.

export { referenceMaxsim, referenceTopK } from '../backends/reference.js';
export {
  type ReferenceChamferResult,
  type ReferenceNearestResult,
  referenceChamfer,
  referenceNearest,
} from '../backends/reference-chamfer.js';
export { e4m3ToFloat, type Fp8Tokens, referenceMaxsimFp8 } from '../backends/reference-fp8.js';
export {
  type ReferencePairs,
  type ReferenceTrainResult,
  type ReferenceValues,
  referenceBackward,
  referenceMaxsimTrain,
} from '../backends/reference-train.js';
