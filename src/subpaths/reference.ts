// 'maxsim/reference': the float64 references every kernel answers to in the tests. Slow by design.

export { referenceMaxsim, referenceTopK } from '../backends/reference.js';
export { referenceChamfer, referenceNearest } from '../backends/reference-chamfer.js';
export { e4m3ToFloat, type Fp8Tokens, referenceMaxsimFp8 } from '../backends/reference-fp8.js';
export { referenceBackward, referenceMaxsimTrain } from '../backends/reference-train.js';
