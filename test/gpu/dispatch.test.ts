// The CUDA variant dispatcher: pure TypeScript over the variant table, so these tests run on any
// machine (no GPU needed). They check the table the runtime will use (variants.json or the built-in
// one), the formula evaluator, selection and fallback, and the launches computed for each regime.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  builtInVariants,
  type DeviceCaps,
  dispatchTable,
  evaluateFormula,
  launchFor,
  parseVariantsJson,
  type Problem,
  selectVariant,
} from '../../src/backends/cuda-dispatch.js';
import { InvalidArgumentError } from '../../src/errors.js';

const h200: DeviceCaps = { computeCapability: [9, 0], sms: 132, smemOptin: 232_448 };
const a100: DeviceCaps = { computeCapability: [8, 0], sms: 108, smemOptin: 166_912 };
const problem = (p: Partial<Problem>): Problem => ({ numQueries: 1, maxQueryLength: 32, maxDocLength: 300, dim: 128, numDocs: 1000, dtype: 'float16', ...p });

describe('CUDA dispatcher', () => {
  test('the variant table loads and every dtype has a fallback', () => {
    const t = dispatchTable();
    assert.ok(t.variants.length > 0, `table from ${t.source}: ${t.warnings.join('; ')}`);
    for (const dtype of ['float32', 'float16', 'bfloat16'] as const) {
      assert.ok(t.variants.some((v) => v.dtype === dtype && v.fallback), `no fallback variant for ${dtype} in ${t.source}`);
    }
    if (t.source !== 'built-in') assert.deepEqual(t.warnings, [], `variants.json entries not understood: ${t.warnings.join('; ')}`);
  });

  test('formulas: arithmetic, min/max/ceil_div, names; junk is refused', () => {
    const vars = { num_sms: 132, num_docs: 10, num_queries: 70000 };
    assert.equal(evaluateFormula('num_sms * 4', vars), 528);
    assert.equal(evaluateFormula('min(num_queries, 65535)', vars), 65535);
    assert.equal(evaluateFormula('ceil_div(num_docs, 4) + (3 - 1) * 2', vars), 7);
    assert.equal(evaluateFormula('7 / 2', vars), 3);
    assert.equal(evaluateFormula(96, vars), 96);
    assert.throws(() => evaluateFormula('num_sms; process.exit()', vars));
    assert.throws(() => evaluateFormula('nope * 2', vars), /unknown name 'nope'/);
  });

  test('built-in table: fp32 and awkward d fall back to SIMT; d > 128 takes the K-split kernel', () => {
    const t = { variants: builtInVariants(), source: 'built-in', warnings: [] };
    assert.equal(selectVariant(problem({ dtype: 'float32' }), h200, undefined, t).name, 'maxsim_simt_f32');
    assert.equal(selectVariant(problem({ dim: 100 }), h200, undefined, t).name, 'maxsim_simt_f16');
    assert.equal(selectVariant(problem({ dim: 1 }), a100, undefined, t).name, 'maxsim_simt_f16');
    assert.equal(selectVariant(problem({ dim: 256, dtype: 'bfloat16' }), h200, undefined, t).name, 'maxsim_mma_ks_bf16');
    assert.equal(selectVariant(problem({ numQueries: 1, maxQueryLength: 32 }), a100, undefined, t).name, 'maxsim_mma_g1_f16');
    assert.equal(selectVariant(problem({ numQueries: 3, maxQueryLength: 32 }), a100, undefined, t).name, 'maxsim_mma_g4_f16');
    assert.equal(selectVariant(problem({ numQueries: 64, maxQueryLength: 32 }), a100, undefined, t).name, 'maxsim_mma_g8_f16');
    // wgmma is sm_90a only: chosen on H200 for long queries, never on A100
    assert.equal(selectVariant(problem({ numQueries: 16, maxQueryLength: 32 }), h200, undefined, t).name, 'maxsim_wgmma_n128_f16');
    assert.notEqual(selectVariant(problem({ numQueries: 16, maxQueryLength: 32 }), a100, undefined, t).name, 'maxsim_wgmma_n128_f16');
  });

  test('launches: SIMT grid covers (docs, queries) in tiles of 65535; persistent grids scale with SMs', () => {
    const t = { variants: builtInVariants(), source: 'built-in', warnings: [] };
    const p = problem({ dtype: 'float32', numQueries: 70_000, numDocs: 12 });
    const simt = launchFor(selectVariant(p, h200, undefined, t), p, h200);
    assert.deepEqual(simt, { kernel: 'maxsim_simt_f32', grid: [12, 65535, 1], block: [128, 1, 1], smem: 0, queryTile: 65535, dtype: 'float32' });
    const small = problem({ dtype: 'float32', numQueries: 3, numDocs: 0 });
    assert.deepEqual(launchFor(selectVariant(small, h200, undefined, t), small, h200).grid, [1, 3, 1], 'every grid dimension >= 1');
    const g4 = launchFor(t.variants.find((v) => v.name === 'maxsim_mma_g4_f16')!, problem({}), h200);
    assert.deepEqual(g4, { kernel: 'maxsim_mma_g4_f16', grid: [264, 1, 1], block: [256, 1, 1], smem: 69_888, dtype: 'float16' });
    const wg = launchFor(t.variants.find((v) => v.name === 'maxsim_wgmma_n128_f16')!, problem({}), h200);
    assert.deepEqual(wg, { kernel: 'maxsim_wgmma_n128_f16', grid: [132, 1, 1], block: [384, 1, 1], smem: 132_096, dtype: 'float16' });
  });

  test('a forced variant must exist and fit the problem', () => {
    const t = { variants: builtInVariants(), source: 'built-in', warnings: [] };
    assert.equal(selectVariant(problem({}), h200, 'maxsim_simt_f16', t).name, 'maxsim_simt_f16');
    assert.throws(() => selectVariant(problem({}), h200, 'maxsim_nope', t), InvalidArgumentError);
    assert.throws(() => selectVariant(problem({ dim: 100 }), h200, 'maxsim_mma_g1_f16', t), /dim % 8 == 0/);
    assert.throws(() => selectVariant(problem({}), a100, 'maxsim_wgmma_n128_f16', t), /compute capability 9\.0/);
    assert.throws(() => selectVariant(problem({ dtype: 'bfloat16' }), h200, 'maxsim_mma_g1_f16', t), /reads float16 tokens/);
  });

  test('variants.json shapes: list, map, string grids, arch strings; bad entries are reported', () => {
    const parsed = parseVariantsJson(
      JSON.stringify({
        variants: [
          { name: 'k_simt', dtype: 'f16', block: 128, grid: '(num_docs, min(num_queries, 65535), 1)', smem: 0, queryTile: 65535 },
          { name: 'k_fast', dtype: 'fp16', block: [256, 1, 1], grid: ['num_sms * 2', 1, 1], smem: 'ceil_div(1000, 10)', requires: { dim_multiple_of: 8, max_dim: 128, arch: 'sm_90a' }, priority: 5 },
          { name: 'k_bad', dtype: 'int4', block: 1, grid: 1 },
        ],
      }),
    );
    assert.equal(parsed.variants.length, 2);
    assert.match(parsed.warnings.join(), /k_bad/);
    const [simt, fast] = parsed.variants;
    assert.equal(simt.fallback, true);
    assert.deepEqual(fast.requires, { dimMultipleOf: 8, maxDim: 128, computeCapabilities: [[9, 0]] });
    const t = { variants: parsed.variants, source: 'test', warnings: [] };
    assert.equal(selectVariant(problem({}), h200, undefined, t).name, 'k_fast');
    assert.equal(selectVariant(problem({}), a100, undefined, t).name, 'k_simt');
    assert.deepEqual(launchFor(fast, problem({}), h200).grid, [264, 1, 1]);
    assert.equal(launchFor(fast, problem({}), h200).smem, 100);
    const map = parseVariantsJson(JSON.stringify({ k: { dtype: 'bf16', block: [64], grid: ['num_docs'], smem: 0 } }));
    assert.deepEqual(map.variants[0].block, [64, 1, 1]);
  });
});
