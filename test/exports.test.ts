// The public surface: the package root exports this list and nothing else (a new root name is a
// decision, made here), and the subpaths resolve through the package's exports map as a user's import
// would ('maxsim/io', 'maxsim/reference', 'maxsim/internal').
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

const ROOT = [
  'BackendUnavailableError',
  'Corpus',
  'CorpusLockedError',
  'CorpusWriter',
  'FormatError',
  'InvalidArgumentError',
  'MaxsimError',
  'buildCorpusFromFiles',
  'buildCorpusFromFilesAsync',
  'chamfer',
  'chamferTrain',
  'contrastiveLoss',
  'contrastiveStep',
  'createServer',
  'cuda',
  'cudaStatus',
  'decodeToFloat32',
  'denseBatch',
  'denseBatchView',
  'dequantize',
  'encodeFloats',
  'info',
  'loadArray',
  'maxsim',
  'maxsimAll',
  'maxsimAllSync',
  'maxsimSync',
  'maxsimTrain',
  'nearest',
  'openCorpus',
  'quantize',
  'raggedBatch',
  'raggedBatchView',
  'readNpy',
  'readSafetensors',
  'recoverCorpus',
  'tokenMatrix',
  'tokenMatrixView',
  'topK',
  'topKAll',
  'twoStageTopK',
  'twoStageTopKAll',
  'version',
  'writeNpy',
  'writeSafetensors',
];

describe('package exports', () => {
  test('the root exports the public API and nothing else', async () => {
    const root = await import('maxsim');
    assert.deepEqual(Object.keys(root).sort(), [...ROOT].sort());
  });

  test('subpaths resolve by package name and hold the rest', async () => {
    const io = await import('maxsim/io');
    for (const name of ['parseNpy', 'parseSafetensors', 'CorpusFile', 'openArraySource', 'arrayToDocs'])
      assert.ok(name in io, `maxsim/io exports ${name}`);
    const reference = await import('maxsim/reference');
    for (const name of ['referenceMaxsim', 'referenceTopK', 'referenceMaxsimTrain', 'referenceChamfer'])
      assert.ok(name in reference, `maxsim/reference exports ${name}`);
    const internal = await import('maxsim/internal');
    for (const name of ['cpuInfo', 'rankRows', 'floatToF16Bits', 'cudaUnavailableReason'])
      assert.ok(name in internal, `maxsim/internal exports ${name}`);
    // no name is exported twice across the root and the subpaths
    const root = Object.keys(await import('maxsim'));
    for (const [path, mod] of Object.entries({ io, reference, internal }))
      for (const name of Object.keys(mod))
        assert.ok(!root.includes(name), `${name} is in both the root and maxsim/${path}`);
  });
});
