// The public surface: each entry point of the package exports exactly the names listed here (a new
// name is a decision, made here). They resolve through the package's exports map as a user's import
// would. The root holds one async entry per job; 'maxsim/sync' the blocking variants, 'maxsim/io'
// the file readers and writers, 'maxsim/reference' the float64 references; 'maxsim/browser' is the
// root's in-memory subset on the wasm engine, so it repeats root names by design.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

const SURFACE: Record<string, string[]> = {
  maxsim: [
    'BackendUnavailableError',
    'Corpus',
    'CorpusLockedError',
    'CorpusWriter',
    'FormatError',
    'InvalidArgumentError',
    'MaxsimError',
    'buildCorpusFromFiles',
    'chamfer',
    'chamferTrain',
    'contrastiveLoss',
    'contrastiveStep',
    'createServer',
    'cuda',
    'decodeToFloat32',
    'denseBatch',
    'dequantize',
    'encodeFloats',
    'info',
    'maxsim',
    'maxsimTrain',
    'nearest',
    'openCorpus',
    'quantize',
    'raggedBatch',
    'recoverCorpus',
    'tokenMatrix',
    'topK',
    'twoStageTopK',
    'version',
  ],
  'maxsim/sync': ['buildCorpusFromFilesSync', 'maxsimSync'],
  'maxsim/io': [
    'CHECKSUM_CHUNK',
    'CorpusFile',
    'MAP_MIN_BYTES',
    'NPY_MAX_HEADER_BYTES',
    'SAFETENSORS_MAX_HEADER_BYTES',
    'arrayToDocs',
    'arrayToMatrix',
    'arrayToQueries',
    'batchToArrays',
    'encodeNpy',
    'encodeSafetensors',
    'fileRange',
    'loadArray',
    'npyHeader',
    'openArraySource',
    'openSafetensors',
    'parseNpy',
    'parseNpyHeader',
    'parseSafetensors',
    'parseSafetensorsLayout',
    'readFileRange',
    'readNpy',
    'readSafetensors',
    'writeNpy',
    'writeSafetensors',
  ],
  'maxsim/reference': [
    'e4m3ToFloat',
    'referenceBackward',
    'referenceChamfer',
    'referenceMaxsim',
    'referenceMaxsimFp8',
    'referenceMaxsimTrain',
    'referenceNearest',
    'referenceTopK',
  ],
  'maxsim/internal': [
    'AUTO_ATOMIC_DISTINCT',
    'CSR_CHUNK',
    'PlaidIndex',
    'Rng',
    'balancedCuts',
    'batchItem',
    'benchKernel',
    'bf16BitsToFloat',
    'buildIndex',
    'cpuInfo',
    'cpuInt8IsaFor',
    'cpuInt8Isas',
    'cpuInt8SlowerReason',
    'cudaUnavailableReason',
    'defaultCentroids',
    'defaultSearch',
    'demoCorpus',
    'f16BitsToFloat',
    'floatToBf16Bits',
    'floatToF16Bits',
    'hasDocumentScales',
    'indexCorpus',
    'isDeviceCorpus',
    'isShardedCorpus',
    'matrixAsBatch',
    'maxsimTrainTuned',
    'openFastPlaid',
    'planBackward',
    'planForward',
    'rankRows',
    'roundTripError',
    'selectItems',
    'setExactGroup',
    'setJobPhases',
    'setMappedScores',
    'setSelectPlacement',
    'syntheticCorpus',
    'syntheticQueries',
    'totalTokens',
  ],
  'maxsim/encode': [
    'ColbertTokenizer',
    'DEFAULT_SETTINGS',
    'PUNCTUATION',
    'findDense',
    'loadColbert',
    'projectRows',
    'pythonStrip',
    'resolveSettings',
  ],
  'maxsim/browser': [
    'BackendUnavailableError',
    'BrowserCorpus',
    'InvalidArgumentError',
    'MaxsimError',
    'corpusFromBuffers',
    'decodeToFloat32',
    'denseBatch',
    'encodeFloats',
    // which wasm build loaded (relaxed SIMD or SIMD128), and how a page picks and fetches one
    'flavorFile',
    'init',
    'maxsim',
    'maxsimSync',
    'raggedBatch',
    'supportedFlavor',
    'tokenMatrix',
    'topK',
    'wasmFlavor',
  ],
};

describe('package exports', () => {
  for (const [path, names] of Object.entries(SURFACE))
    test(`${path} exports its stated surface and nothing else`, async () => {
      const mod = await import(path);
      assert.deepEqual(Object.keys(mod).sort(), [...names].sort());
    });

  test('the root stays small: about 30 runtime names', () => {
    assert.ok(SURFACE.maxsim.length <= 32, `${SURFACE.maxsim.length} root names`);
  });

  test('no name is exported by two of the root and its Node subpaths', () => {
    const seen = new Map<string, string>();
    for (const [path, names] of Object.entries(SURFACE)) {
      if (path === 'maxsim/browser') continue;
      for (const name of names) {
        assert.ok(!seen.has(name), `${name} is in both ${seen.get(name)} and ${path}`);
        seen.set(name, path);
      }
    }
  });
});
