// 'maxsim/sync': the blocking variants of the root's async entries, for scripts and workers that
// would rather hold the thread than await. Scoring runs on the CPU or wasm engine (CUDA work is
// asynchronous). Re-exports only.

export { buildCorpusFromFilesSync } from '../io/corpus-build.js';
export { maxsimSync } from '../ops/maxsim.js';
