// The benchmark-only surface of the CUDA backend (issue 19): kernel timing, the matrix selections and
// job phase timing are reached through maxsim/internal and the addon's cuda.internal, never through
// the product's entries or the environment. No GPU needed.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { nativeCuda } from '../src/backends/cuda.js';
import { InvalidArgumentError } from '../src/errors.js';
import { nativeUnavailableReason } from '../src/native.js';
import { benchKernel } from '../src/subpaths/internal.js';
import { randomRagged, rng, runSeed } from './helpers.js';

describe('CUDA internal surface', () => {
  test('the addon keeps bench, hostTopK, deviceTopK and selectLimitBreach under cuda.internal only', {
    skip: nativeUnavailableReason() ?? false,
  }, () => {
    const cuda = nativeCuda() as unknown as Record<string, unknown>;
    for (const name of ['bench', 'hostTopK', 'deviceTopK', 'selectLimitBreach']) {
      assert.equal(name in cuda, false, `cuda.${name} is not a product entry`);
      assert.equal(
        typeof (cuda.internal as Record<string, unknown>)[name],
        'function',
        `cuda.internal.${name}`,
      );
    }
    for (const name of ['score', 'topK', 'twoStage', 'upload', 'quantize', 'select', 'download'])
      assert.equal(typeof cuda[name], 'function', `cuda.${name}`);
  });

  test('benchKernel names the device argument it cannot use', async () => {
    const rand = rng(runSeed + 41);
    const queries = randomRagged([3], 8, 'float32', rand);
    await assert.rejects(
      async () => benchKernel({} as never, queries, {} as never),
      (e: unknown) => e instanceof InvalidArgumentError && /device/.test(e.message),
    );
  });
});
