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
  type Problem,
  parseVariantsJson,
  selectVariant,
} from '../../src/backends/cuda-dispatch.js';
import { InvalidArgumentError } from '../../src/errors.js';

const h200: DeviceCaps = { computeCapability: [9, 0], sms: 132, smemOptin: 232_448 };
const a100: DeviceCaps = { computeCapability: [8, 0], sms: 108, smemOptin: 166_912 };
const problem = (p: Partial<Problem>): Problem => ({
  numQueries: 1,
  maxQueryLength: 32,
  maxDocLength: 300,
  dim: 128,
  numDocs: 1000,
  dtype: 'float16',
  ...p,
});

describe('CUDA dispatcher', () => {
  test('the variant table loads and every dtype has a fallback', () => {
    const t = dispatchTable();
    assert.ok(t.variants.length > 0, `table from ${t.source}: ${t.warnings.join('; ')}`);
    for (const dtype of ['float32', 'float16', 'bfloat16'] as const) {
      assert.ok(
        t.variants.some((v) => v.dtype === dtype && v.fallback),
        `no fallback variant for ${dtype} in ${t.source}`,
      );
    }
    if (t.source !== 'built-in')
      assert.deepEqual(t.warnings, [], `variants.json entries not understood: ${t.warnings.join('; ')}`);
  });

  test('formulas and conditions: arithmetic, functions, chained comparisons; junk is refused', () => {
    const vars = { num_sms: 132, num_docs: 10, num_queries: 70000, nq: 3, Lq: 40 };
    assert.equal(evaluateFormula('num_sms * 4', vars), 528);
    assert.equal(evaluateFormula('min(num_queries, 65535)', vars), 65535);
    assert.equal(evaluateFormula('ceil_div(num_docs, 4) + (3 - 1) * 2', vars), 7);
    assert.equal(evaluateFormula('7 / 2', vars), 3.5);
    assert.equal(evaluateFormula('nq*ceil(Lq/32)', vars), 6);
    assert.equal(evaluateFormula('1 < nq*ceil(Lq/32) <= 4', vars), 0);
    assert.equal(evaluateFormula('1 < nq <= 4 && Lq > 32 || 0', vars), 1);
    assert.equal(evaluateFormula(96, vars), 96);
    assert.throws(() => evaluateFormula('num_sms; process.exit()', vars));
    assert.throws(() => evaluateFormula('nope * 2', vars), /unknown name 'nope'/);
  });

  for (const [source, table] of [
    ['built-in', () => ({ variants: builtInVariants(), source: 'built-in', warnings: [] })],
    ['variants.json (or built-in when absent)', () => dispatchTable()],
  ] as const) {
    test(`${source}: fp32 and awkward d fall back to SIMT; the regimes pick the documented variants`, () => {
      const t = table();
      const pick = (p: Partial<Problem>, caps: DeviceCaps) =>
        selectVariant(problem(p), caps, undefined, t).name;
      assert.equal(pick({ dtype: 'float32' }, h200), 'maxsim_simt_f32');
      assert.equal(pick({ dim: 100 }, h200), 'maxsim_simt_f16');
      assert.equal(pick({ dim: 1 }, a100), 'maxsim_simt_f16');
      assert.equal(pick({ dim: 256, dtype: 'bfloat16' }, h200), 'maxsim_mma_ks_bf16');
      assert.equal(pick({ dim: 1024 }, a100), 'maxsim_mma_ks_f16');
      assert.equal(pick({ numQueries: 1, maxQueryLength: 32 }, h200), 'maxsim_mma_g1_f16');
      assert.equal(pick({ numQueries: 1, maxQueryLength: 32 }, a100), 'maxsim_mma_g1_f16');
      assert.equal(pick({ numQueries: 3, maxQueryLength: 32 }, a100), 'maxsim_mma_g4_f16');
      assert.equal(pick({ numQueries: 64, maxQueryLength: 32 }, a100), 'maxsim_mma_g8_f16');
      // the sm_90a kernels: only on compute capability 9.0
      assert.equal(pick({ numQueries: 1, maxQueryLength: 100 }, h200), 'maxsim_wgmma_n128_f16');
      assert.equal(
        pick({ numQueries: 1, maxQueryLength: 1024, dtype: 'bfloat16' }, h200),
        'maxsim_wgmma_w2m2n64_bf16',
      );
      assert.equal(pick({ numQueries: 16, maxQueryLength: 32 }, h200), 'maxsim_wgmma_w2m2n64_f16');
      assert.equal(pick({ numQueries: 16, maxQueryLength: 32 }, a100), 'maxsim_mma_g8_f16');
      // a kernel missing from the loaded fatbins is never picked
      assert.equal(
        selectVariant(problem({ numQueries: 16 }), h200, undefined, t, new Set(['maxsim_simt_f16'])).name,
        'maxsim_simt_f16',
      );
    });
  }

  test('launches: SIMT grid covers (docs, queries) in tiles of 65535; persistent grids scale with SMs', () => {
    const t = { variants: builtInVariants(), source: 'built-in', warnings: [] };
    const p = problem({ dtype: 'float32', numQueries: 70_000, numDocs: 12 });
    const simt = launchFor(selectVariant(p, h200, undefined, t), p, h200);
    assert.deepEqual(simt, {
      kernel: 'maxsim_simt_f32',
      grid: [12, 65535, 1],
      block: [128, 1, 1],
      smem: 0,
      queryTile: 65535,
      dtype: 'float32',
    });
    const small = problem({ dtype: 'float32', numQueries: 3, numDocs: 0 });
    assert.deepEqual(
      launchFor(selectVariant(small, h200, undefined, t), small, h200).grid,
      [1, 3, 1],
      'every grid dimension >= 1',
    );
    const g4 = launchFor(t.variants.find((v) => v.name === 'maxsim_mma_g4_f16')!, problem({}), h200);
    assert.deepEqual(g4, {
      kernel: 'maxsim_mma_g4_f16',
      grid: [264, 1, 1],
      block: [256, 1, 1],
      smem: 69_888,
      dtype: 'float16',
    });
    const wg = launchFor(t.variants.find((v) => v.name === 'maxsim_wgmma_w4n64_f16')!, problem({}), h200);
    assert.deepEqual(wg, {
      kernel: 'maxsim_wgmma_w4n64_f16',
      grid: [132, 1, 1],
      block: [640, 1, 1],
      smem: 132_096,
      dtype: 'float16',
    });
  });

  test('variants.json and the built-in table agree on every launch', () => {
    const t = dispatchTable();
    if (t.source === 'built-in') return;
    const builtIn = builtInVariants();
    for (const v of t.variants) {
      const b = builtIn.find((x) => x.name === v.name);
      assert.ok(b, `${v.name} is in variants.json but not in the built-in table`);
      for (const caps of [h200, a100]) {
        for (const p of [
          problem({ dtype: v.dtype }),
          problem({ dtype: v.dtype, numQueries: 100_000, numDocs: 7 }),
        ]) {
          assert.deepEqual(launchFor(v, p, caps), launchFor(b, p, caps), v.name);
        }
      }
      assert.deepEqual(v.requires, b.requires, `${v.name} requirements`);
    }
  });

  test('a forced variant must exist and fit the problem', () => {
    const t = { variants: builtInVariants(), source: 'built-in', warnings: [] };
    assert.equal(selectVariant(problem({}), h200, 'maxsim_simt_f16', t).name, 'maxsim_simt_f16');
    assert.equal(
      selectVariant(problem({}), h200, 'maxsim_wgmma_w2n64_f16', t).name,
      'maxsim_wgmma_w2n64_f16',
    );
    assert.throws(() => selectVariant(problem({}), h200, 'maxsim_nope', t), InvalidArgumentError);
    assert.throws(() => selectVariant(problem({ dim: 100 }), h200, 'maxsim_mma_g1_f16', t), /dim % 8 == 0/);
    assert.throws(
      () => selectVariant(problem({}), a100, 'maxsim_wgmma_n128_f16', t),
      /compute capability 9\.0/,
    );
    assert.throws(
      () => selectVariant(problem({ dtype: 'bfloat16' }), h200, 'maxsim_mma_g1_f16', t),
      /reads float16 tokens/,
    );
  });

  test('variants.json shapes: prose grids and requirements, arch strings, dispatch text; bad entries are reported', () => {
    const parsed = parseVariantsJson(
      JSON.stringify([
        {
          name: 'k_simt',
          dtype: 'float16',
          block: [128, 1, 1],
          grid: '[num_docs, num_queries - query_tile_offset, 1]  (grid.y <= 65535)',
          smem_bytes: 0,
          requires: 'dim >= 1 (any)',
          arch: 'sm_80+',
        },
        {
          name: 'k_fast',
          dtype: 'fp16',
          block: [384, 1, 1],
          grid: '[num_sms, 1, 1]  (persistent, 1 CTA/SM)',
          smem_bytes: 132096,
          requires:
            'compute capability 9.0 (sm_90a cubin); dim % 8 == 0 && 8 <= dim <= 128; MaxsimParams.max_query_length >= every query length',
          arch: 'sm_90a',
          dispatch: 'sm_90a: nq*ceil(Lq/16) > 8',
        },
        {
          name: 'k_old',
          dtype: 'f16',
          block: 256,
          grid: '(num_sms * 2, 1, 1)',
          smem_bytes: 100,
          requires: 'dim % 8 == 0',
          arch: 'sm_80+',
          dispatch: 'sm_80 only: nq > 0',
        },
        {
          name: 'k_alt',
          dtype: 'f16',
          block: 256,
          grid: 'num_sms',
          smem_bytes: 100,
          requires: 'dim % 8 == 0',
          arch: 'sm_80+',
          dispatch: 'not selected',
        },
        { name: 'k_bad', dtype: 'int4', block: 1, grid: 1 },
        { name: 'k_bad2', dtype: 'f16', block: 1, grid: '[num_widgets, 1, 1]' },
      ]),
    );
    assert.deepEqual(
      parsed.variants.map((v) => v.name),
      ['k_simt', 'k_fast', 'k_old', 'k_alt'],
    );
    assert.match(parsed.warnings.join(), /k_bad.*k_bad2.*num_widgets/);
    const [simt, fast, old, alt] = parsed.variants;
    assert.equal(simt.fallback, true);
    assert.deepEqual(simt.requires, { minComputeCapability: [8, 0] });
    assert.deepEqual(fast.requires, {
      dimMultipleOf: 8,
      minDim: 8,
      maxDim: 128,
      computeCapabilities: [[9, 0]],
    });
    assert.equal(alt.when, undefined);
    const t = { variants: parsed.variants, source: 'test', warnings: [] };
    assert.equal(selectVariant(problem({ numQueries: 8 }), h200, undefined, t).name, 'k_fast');
    assert.equal(
      selectVariant(problem({ numQueries: 1, maxQueryLength: 16 }), h200, undefined, t).name,
      'k_simt',
    );
    assert.equal(selectVariant(problem({}), a100, undefined, t).name, 'k_old');
    assert.deepEqual(launchFor(simt, problem({ numQueries: 5, numDocs: 9 }), h200).grid, [9, 5, 1]);
    assert.deepEqual(launchFor(old, problem({}), a100), {
      kernel: 'k_old',
      grid: [216, 1, 1],
      block: [256, 1, 1],
      smem: 100,
      dtype: 'float16',
    });
  });
});
