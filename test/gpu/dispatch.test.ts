// The CUDA variant dispatcher: pure TypeScript over native/cuda/kernels/variants.json, so these tests
// run on any machine (no GPU needed). The expected decisions below were recorded from the previous
// (prose-table) dispatcher before the table became structured data; the new one must reproduce them.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import {
  type DeviceCaps,
  dispatchTable,
  expandVariantEntries,
  launchFor,
  type Problem,
  parseVariants,
  readDispatchTable,
  selectVariant,
  variantsPath,
} from '../../src/backends/cuda-dispatch.js';
import { BackendUnavailableError, FormatError, InvalidArgumentError } from '../../src/errors.js';

const gpu = (cc: [number, number], sms: number, smemOptin: number): DeviceCaps => ({
  computeCapability: cc,
  sms,
  smemOptin,
});
const h200 = gpu([9, 0], 132, 232_448);
const a100 = gpu([8, 0], 108, 166_912);
const rtx3090 = gpu([8, 6], 82, 101_376);
const b200 = gpu([10, 0], 148, 232_448);
const rtx5090 = gpu([12, 0], 170, 101_376);
const tiny = gpu([8, 0], 4, 60_000);
const t4 = gpu([7, 5], 40, 65_536);

const problem = (p: Partial<Problem>): Problem => ({
  numQueries: 1,
  maxQueryLength: 32,
  maxDocLength: 300,
  dim: 128,
  numDocs: 1000,
  dtype: 'float16',
  ...p,
});

const NAMES = [
  'maxsim_simt_f32',
  'maxsim_simt_f16',
  'maxsim_simt_bf16',
  ...['f16', 'bf16'].flatMap((s) =>
    [
      'mma_g1',
      'mma_g1t32',
      'mma_g4',
      'mma_g8',
      'mma_ks',
      'wgmma_n128',
      'wgmma_w2m2n64',
      'wgmma_w2m2n128',
      'wgmma_w2n64',
      'wgmma_w4n64',
      'wgmma_pp_m1n64',
      'wgmma_pp_m2n64',
      'wgmma_tma_n128',
      'wgmma_tma_w2m2n64',
      'wgmma_tma_pp_m1n64',
      'wgmma_tma_pp_m2n64',
      'wgmma_tma_w2m2n128',
    ].map((k) => `maxsim_${k}_${s}`),
  ),
  // int8 and fp8 (maxsim_int8.cu, maxsim_fp8.cu; their rules are tested in test/int8-dispatch.test.ts)
  ...['int8', 'fp8'].flatMap((t) =>
    [
      'simt',
      'mma_g1',
      'mma_g4',
      'mma_g8',
      'mma_ks',
      'wgmma_n128',
      'wgmma_w2m2n64',
      'wgmma_w2m2n128',
      'wgmma_w3m2n64',
      'wgmma_tma_w2m2n64',
      'wgmma_tma_w2m2n128',
      'wgmma_tma_ds_w2m2n64',
      'wgmma_tma_ds_w2m2n128',
    ].map((k) => `maxsim_${t}_${k}`),
  ),
];
const kernelSets: Record<string, ReadonlySet<string> | undefined> = {
  all: undefined,
  empty: new Set(),
  simtOnly: new Set(NAMES.filter((n) => n.includes('_simt_'))),
  noWgmma: new Set(NAMES.filter((n) => !n.includes('_wgmma_'))),
  noMma: new Set(NAMES.filter((n) => !n.includes('_mma_'))),
  none: new Set(['something_else']),
};

type Expected = [string, [number, number, number], [number, number, number], number, number?] | null;

// [what, GPU, problem (over the defaults), kernels in the fatbins, [variant, grid, block, smem, queryTile?]]
const DECISIONS: Array<[string, DeviceCaps, Partial<Problem>, string, Expected]> = [
  ['fp32 -> simt', h200, { dtype: 'float32' }, 'all', ['maxsim_simt_f32', [1000, 1, 1], [128, 1, 1], 0]],
  ['dim % 8 != 0 -> simt', h200, { dim: 100 }, 'all', ['maxsim_simt_f16', [1000, 1, 1], [128, 1, 1], 0]],
  ['dim 1 -> simt', a100, { dim: 1 }, 'all', ['maxsim_simt_f16', [1000, 1, 1], [128, 1, 1], 0]],
  [
    'dim > 128 -> ks (sm_90)',
    h200,
    { dim: 256, dtype: 'bfloat16' },
    'all',
    ['maxsim_mma_ks_bf16', [264, 1, 1], [256, 1, 1], 35072],
  ],
  [
    'dim > 128 -> ks (sm_80)',
    a100,
    { numQueries: 64, dim: 1024 },
    'all',
    ['maxsim_mma_ks_f16', [216, 1, 1], [256, 1, 1], 35072],
  ],
  [
    'one 32-token query -> g1t32 (sm_90: two CTAs of 105 KB per SM)',
    h200,
    {},
    'all',
    ['maxsim_mma_g1t32_f16', [264, 1, 1], [128, 1, 1], 104960],
  ],
  [
    'one 32-token query -> g1 (sm_80)',
    a100,
    {},
    'all',
    ['maxsim_mma_g1_f16', [432, 1, 1], [128, 1, 1], 52736],
  ],
  [
    'one 1-token query, no docs -> g1',
    rtx3090,
    { maxQueryLength: 1, numDocs: 0 },
    'all',
    ['maxsim_mma_g1_f16', [328, 1, 1], [128, 1, 1], 52736],
  ],
  [
    'sm_80: rows32 = 3 -> g4',
    a100,
    { numQueries: 3 },
    'all',
    ['maxsim_mma_g4_f16', [216, 1, 1], [256, 1, 1], 69888],
  ],
  [
    'sm_80: rows32 = 4 -> g4',
    a100,
    { numQueries: 4 },
    'all',
    ['maxsim_mma_g4_f16', [216, 1, 1], [256, 1, 1], 69888],
  ],
  [
    'sm_80: rows32 = 8 -> g8',
    a100,
    { numQueries: 4, maxQueryLength: 33 },
    'all',
    ['maxsim_mma_g8_f16', [216, 1, 1], [256, 1, 1], 52352],
  ],
  [
    'sm_80: 64 queries -> g8',
    a100,
    { numQueries: 64 },
    'all',
    ['maxsim_mma_g8_f16', [216, 1, 1], [256, 1, 1], 52352],
  ],
  [
    'sm_86: rows32 = 5 -> g8',
    rtx3090,
    { numQueries: 5, dtype: 'bfloat16' },
    'all',
    ['maxsim_mma_g8_bf16', [164, 1, 1], [256, 1, 1], 52352],
  ],
  [
    'sm_100 is sm_80-class: rows32 = 2 -> g4',
    b200,
    { numQueries: 2, dtype: 'bfloat16' },
    'all',
    ['maxsim_mma_g4_bf16', [296, 1, 1], [256, 1, 1], 69888],
  ],
  [
    'sm_120 is sm_80-class: 16 queries -> g8',
    rtx5090,
    { numQueries: 16 },
    'all',
    ['maxsim_mma_g8_f16', [340, 1, 1], [256, 1, 1], 52352],
  ],
  [
    'sm_90: one 100-token query -> ping-pong, 128 rows',
    h200,
    { maxQueryLength: 100 },
    'all',
    ['maxsim_wgmma_pp_m2n64_f16', [132, 1, 1], [384, 1, 1], 197632],
  ],
  [
    'sm_90: rows16 = 8 -> ping-pong, 128 rows',
    h200,
    { numQueries: 8, maxQueryLength: 16 },
    'all',
    ['maxsim_wgmma_pp_m2n64_f16', [132, 1, 1], [384, 1, 1], 197632],
  ],
  [
    'sm_90: one 64-token query -> ping-pong, 64 rows',
    h200,
    { maxQueryLength: 64, dtype: 'bfloat16' },
    'all',
    ['maxsim_wgmma_pp_m1n64_bf16', [132, 1, 1], [384, 1, 1], 197632],
  ],
  [
    'sm_90: 128 rows but fewer than 4 documents per SM -> n128',
    h200,
    { maxQueryLength: 128, numDocs: 527 },
    'all',
    ['maxsim_wgmma_n128_f16', [132, 1, 1], [384, 1, 1], 132096],
  ],
  [
    'sm_90: rows16 = 9 -> w2m2n64',
    h200,
    { numQueries: 9, maxQueryLength: 16 },
    'all',
    ['maxsim_wgmma_w2m2n64_f16', [132, 1, 1], [384, 1, 1], 132096],
  ],
  [
    'sm_90: one 1024-token query -> w2m2n64',
    h200,
    { maxQueryLength: 1024, dtype: 'bfloat16' },
    'all',
    ['maxsim_wgmma_w2m2n64_bf16', [132, 1, 1], [384, 1, 1], 132096],
  ],
  [
    'sm_90: 16 queries -> w2m2n64',
    h200,
    { numQueries: 16 },
    'all',
    ['maxsim_wgmma_w2m2n64_f16', [132, 1, 1], [384, 1, 1], 132096],
  ],
  [
    'sm_90: one 1024-token query, 1024-token documents (ColPali) -> w2m2n128',
    h200,
    { maxQueryLength: 1024, maxDocLength: 1024 },
    'all',
    ['maxsim_wgmma_w2m2n128_f16', [132, 1, 1], [384, 1, 1], 197632],
  ],
  [
    'sm_90: 512-token documents -> w2m2n128',
    h200,
    { numQueries: 16, maxDocLength: 512, docTokens: 512_000, dtype: 'bfloat16' },
    'all',
    ['maxsim_wgmma_w2m2n128_bf16', [132, 1, 1], [384, 1, 1], 197632],
  ],
  [
    'sm_90: longest 1024 but a mean under 512 -> w2m2n64',
    h200,
    { numQueries: 16, maxDocLength: 1024, docTokens: 400_000 },
    'all',
    ['maxsim_wgmma_w2m2n64_f16', [132, 1, 1], [384, 1, 1], 132096],
  ],
  [
    'sm_90: 700-token documents pad worse to 128 (768) than to 64 (704) -> w2m2n64',
    h200,
    { numQueries: 16, maxDocLength: 700 },
    'all',
    ['maxsim_wgmma_w2m2n64_f16', [132, 1, 1], [384, 1, 1], 132096],
  ],
  [
    'empty queries -> simt',
    h200,
    { numQueries: 3, maxQueryLength: 0 },
    'all',
    ['maxsim_simt_f16', [1000, 3, 1], [128, 1, 1], 0],
  ],
  [
    'no queries -> simt',
    a100,
    { numQueries: 0, maxQueryLength: 0 },
    'all',
    ['maxsim_simt_f16', [1000, 1, 1], [128, 1, 1], 0],
  ],
  [
    '70000 queries -> simt in tiles of 65535',
    h200,
    { numQueries: 70_000, numDocs: 12, dtype: 'float32' },
    'all',
    ['maxsim_simt_f32', [12, 65535, 1], [128, 1, 1], 0, 65535],
  ],
  [
    '200000 queries, no docs -> simt in tiles',
    a100,
    { numQueries: 200_000, maxQueryLength: 40, dim: 100, numDocs: 0 },
    'all',
    ['maxsim_simt_f16', [1, 65535, 1], [128, 1, 1], 0, 65535],
  ],
  [
    '70000 queries on tensor cores: persistent, no tiles',
    h200,
    { numQueries: 70_000 },
    'all',
    ['maxsim_wgmma_w2m2n64_f16', [132, 1, 1], [384, 1, 1], 132096],
  ],
  [
    'not enough shared memory for g4 -> simt',
    tiny,
    { numQueries: 3 },
    'all',
    ['maxsim_simt_f16', [1000, 3, 1], [128, 1, 1], 0],
  ],
  [
    'g1 fits 60000 bytes of shared memory',
    tiny,
    {},
    'all',
    ['maxsim_mma_g1_f16', [16, 1, 1], [128, 1, 1], 52736],
  ],
  [
    'wgmma missing from the fatbins -> simt',
    h200,
    { numQueries: 16 },
    'noWgmma',
    ['maxsim_simt_f16', [1000, 16, 1], [128, 1, 1], 0],
  ],
  [
    'mma missing from the fatbins -> simt',
    a100,
    {},
    'noMma',
    ['maxsim_simt_f16', [1000, 1, 1], [128, 1, 1], 0],
  ],
  [
    'only simt in the fatbins',
    h200,
    { maxQueryLength: 100, dtype: 'bfloat16' },
    'simtOnly',
    ['maxsim_simt_bf16', [1000, 1, 1], [128, 1, 1], 0],
  ],
  [
    'empty kernel list (driver cannot list them): no filter',
    h200,
    { maxQueryLength: 100 },
    'empty',
    ['maxsim_wgmma_pp_m2n64_f16', [132, 1, 1], [384, 1, 1], 197632],
  ],
  ['pre-sm_80 GPU: no variant', t4, {}, 'all', null],
  ['no kernel of the table in the fatbins: no variant', a100, { dim: 100 }, 'none', null],
];

describe('CUDA dispatcher', () => {
  test('variants.json loads: every kernel of the fatbins, structured contracts', () => {
    const t = dispatchTable();
    assert.equal(t.source, variantsPath);
    assert.deepEqual(t.variants.map((v) => v.name).sort(), [...NAMES].sort());
    const g1 = t.variants.find((v) => v.name === 'maxsim_mma_g1_bf16')!;
    assert.deepEqual(g1.grid, { kind: 'persistent', ctasPerSm: 4 });
    assert.deepEqual(g1.requires, { dimMultipleOf: 8, minDim: 8, maxDim: 128, minComputeCapability: [8, 0] });
    const wg = t.variants.find((v) => v.name === 'maxsim_wgmma_w4n64_f16')!;
    assert.deepEqual(wg.requires.computeCapabilities, [[9, 0]]);
    assert.equal(wg.family, 'wgmma');
    assert.equal(wg.module, 'maxsim_wgmma.fatbin');
  });

  for (const [what, caps, p, kernels, expected] of DECISIONS) {
    test(`decision: ${what}`, () => {
      const pr = problem(p);
      const pick = () => selectVariant(pr, caps, undefined, dispatchTable(), kernelSets[kernels]);
      if (expected === null) {
        assert.throws(
          pick,
          (e) => e instanceof InvalidArgumentError && /kernel variant supports/.test(e.message),
        );
        return;
      }
      const [name, grid, block, smem, queryTile] = expected;
      const v = pick();
      assert.equal(v.name, name);
      assert.deepEqual(launchFor(v, pr, caps), {
        kernel: name,
        grid,
        block,
        smem,
        dtype: pr.dtype,
        ...(queryTile !== undefined && { queryTile }),
        // wgmma launches carry their work-unit order (pass-inner; the kernel says where it applies)
        ...(v.family === 'wgmma' && { unitOrder: 1 }),
      });
    });
  }

  test('a forced variant must exist and fit the problem', () => {
    const t = dispatchTable();
    assert.equal(selectVariant(problem({}), h200, 'maxsim_simt_f16', t).name, 'maxsim_simt_f16');
    const w2n64 = selectVariant(problem({}), h200, 'maxsim_wgmma_w2n64_f16', t);
    assert.deepEqual(launchFor(w2n64, problem({}), h200).grid, [132, 1, 1]);
    const w4n64 = selectVariant(problem({}), h200, 'maxsim_wgmma_w4n64_f16', t);
    assert.deepEqual(launchFor(w4n64, problem({}), h200), {
      kernel: 'maxsim_wgmma_w4n64_f16',
      grid: [132, 1, 1],
      block: [640, 1, 1],
      smem: 132_096,
      dtype: 'float16',
      unitOrder: 1,
    });
    assert.throws(() => selectVariant(problem({}), h200, 'maxsim_nope', t), /one of maxsim_simt_f32, /);
    assert.throws(() => selectVariant(problem({ dim: 100 }), h200, 'maxsim_mma_g1_f16', t), /dim % 8 == 0/);
    assert.throws(() => selectVariant(problem({ dim: 256 }), h200, 'maxsim_mma_g1_f16', t), /dim <= 128/);
    assert.throws(
      () => selectVariant(problem({}), a100, 'maxsim_wgmma_n128_f16', t),
      /compute capability 9\.0 \(the GPU has 8\.0\)/,
    );
    assert.throws(() => selectVariant(problem({}), t4, 'maxsim_simt_f16', t), /compute capability >= 8\.0/);
    assert.throws(
      () => selectVariant(problem({ dtype: 'bfloat16' }), h200, 'maxsim_mma_g1_f16', t),
      /reads float16 tokens/,
    );
    assert.throws(
      () => selectVariant(problem({}), tiny, 'maxsim_mma_g4_f16', t),
      /69888 bytes of shared memory/,
    );
    assert.throws(
      () => selectVariant(problem({}), h200, 'maxsim_mma_g4_f16', t, kernelSets.noMma),
      (e) => e instanceof InvalidArgumentError && /not in the loaded fatbins/.test(e.message),
    );
  });

  test('a missing or unparsable variants.json is a broken install, named with its path', () => {
    const dir = mkdtempSync(join(tmpdir(), 'maxsim-dispatch-'));
    const missing = join(dir, 'variants.json');
    assert.throws(
      () => readDispatchTable(missing),
      (e) =>
        e instanceof BackendUnavailableError &&
        e.message.includes(missing) &&
        /build-native\.mjs/.test(e.message),
    );
    writeFileSync(missing, '[{');
    assert.throws(
      () => readDispatchTable(missing),
      (e) => e instanceof FormatError && /not valid JSON/.test(e.message),
    );
  });

  test('a malformed table is refused with the variant and field named', () => {
    // one entry per kernel (the file states the fp16 / bf16 twins once: expandVariantEntries)
    const shipped = expandVariantEntries(JSON.parse(readFileSync(variantsPath, 'utf8'))) as Array<
      Record<string, unknown>
    >;
    assert.equal(parseVariants(shipped).length, NAMES.length);
    const broken = (i: number, change: Record<string, unknown>) => {
      const copy = structuredClone(shipped);
      Object.assign(copy[i], change);
      for (const [k, v] of Object.entries(change)) if (v === undefined) delete copy[i][k];
      return () => parseVariants(copy, 'test.json');
    };
    const g4 = shipped.findIndex((v) => v.name === 'maxsim_mma_g4_f16');
    const refused = (f: () => unknown, re: RegExp) =>
      assert.throws(
        f,
        (e) => e instanceof FormatError && e.message.startsWith('test.json: ') && re.test(e.message),
      );
    refused(() => parseVariants({ variants: [] }, 'test.json'), /non-empty array/);
    refused(() => parseVariants([42], 'test.json'), /variant #0: the entry must be an object/);
    refused(broken(g4, { name: '' }), new RegExp(`variant #${g4}: name must be a non-empty string`));
    refused(
      broken(g4, { dtype: 'int4' }),
      /variant maxsim_mma_g4_f16: dtype must be float32, float16, bfloat16, int8 or fp8 \(got "int4"\)/,
    );
    refused(broken(g4, { family: 'tensor' }), /maxsim_mma_g4_f16: family/);
    refused(
      broken(g4, { module: undefined }),
      /maxsim_mma_g4_f16: module must be a \.fatbin file name \(got nothing\)/,
    );
    refused(broken(g4, { arch: 'sm_80+' }), /maxsim_mma_g4_f16: arch must be/);
    refused(broken(g4, { arch: { min: [8, 0], exact: [9, 0] } }), /maxsim_mma_g4_f16: arch/);
    refused(
      broken(g4, { dim: { multipleOf: 8, min: 256, max: 128 } }),
      /maxsim_mma_g4_f16: dim .*min <= max/,
    );
    refused(broken(g4, { dim: 'dim % 8 == 0' }), /maxsim_mma_g4_f16: dim/);
    refused(broken(g4, { block: [256, 1] }), /maxsim_mma_g4_f16: block must be \[x, y, z\]/);
    refused(broken(g4, { grid: '[num_sms * 2, 1, 1]' }), /maxsim_mma_g4_f16: grid must be/);
    refused(broken(g4, { grid: { kind: 'persistent', ctasPerSm: 0 } }), /maxsim_mma_g4_f16: grid/);
    refused(broken(g4, { grid: { kind: 'perPair', ctasPerSm: 2 } }), /maxsim_mma_g4_f16: grid/);
    refused(
      broken(g4, { smemBytes: '69888' }),
      /maxsim_mma_g4_f16: smemBytes must be a non-negative integer/,
    );
    refused(broken(g4, { regime: undefined }), /maxsim_mma_g4_f16: regime must be a string/);
    refused(broken(g4, { smem_bytes: 69888 }), /maxsim_mma_g4_f16: smem_bytes must be absent/);
    refused(broken(g4, { name: 'maxsim_mma_g1_f16' }), /variant maxsim_mma_g1_f16: name appears twice/);
    refused(
      () =>
        parseVariants(
          shipped.filter((v) => v.name !== 'maxsim_simt_bf16'),
          'test.json',
        ),
      /no simt \(any-dim fallback\) variant for bfloat16/,
    );
  });
});
