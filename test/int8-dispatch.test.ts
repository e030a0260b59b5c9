// The CUDA dispatcher's int8 / fp8 rules and the 8-bit launch contracts of variants.json, checked
// against the registry rows the kernel sources instantiate (native/cuda/kernels/maxsim_registry.h). Pure TypeScript:
// runs without a GPU.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, test } from 'node:test';
import {
  type DeviceCaps,
  dispatchTable,
  launchFor,
  type Problem,
  selectVariant,
  variantsPath,
} from '../src/backends/cuda-dispatch.js';
import { InvalidArgumentError } from '../src/errors.js';

const h200: DeviceCaps = { computeCapability: [9, 0], sms: 132, smemOptin: 232_448 };
const a100: DeviceCaps = { computeCapability: [8, 0], sms: 108, smemOptin: 166_912 };
const rtx3090: DeviceCaps = { computeCapability: [8, 6], sms: 82, smemOptin: 101_376 };
const t4: DeviceCaps = { computeCapability: [7, 5], sms: 40, smemOptin: 65_536 };

const problem = (p: Partial<Problem>): Problem => ({
  numQueries: 1,
  maxQueryLength: 32,
  maxDocLength: 128,
  dim: 128,
  numDocs: 100_000,
  dtype: 'int8',
  ...p,
});

describe('CUDA dispatcher: int8', () => {
  const cases: Array<[string, Partial<Problem>, string]> = [
    ['one query of 32 tokens (memory-bound)', {}, 'maxsim_int8_mma_g1'],
    ['Lq = 1', { maxQueryLength: 1 }, 'maxsim_int8_mma_g1'],
    ['Lq = 33: two slices', { maxQueryLength: 33 }, 'maxsim_int8_mma_g4'],
    ['4 queries of 32', { numQueries: 4 }, 'maxsim_int8_mma_g4'],
    ['one query of 1024 (compute-bound)', { maxQueryLength: 1024, maxDocLength: 1024 }, 'maxsim_int8_mma_g8'],
    ['32 queries of 32 (all pairs)', { numQueries: 32 }, 'maxsim_int8_mma_g8'],
    ['32 queries of 32, documents of 300', { numQueries: 32, maxDocLength: 300 }, 'maxsim_int8_mma_g8'],
    ['d = 256: K split', { dim: 256 }, 'maxsim_int8_mma_ks'],
    ['d = 48: 16-byte rows are enough', { dim: 48 }, 'maxsim_int8_mma_g1'],
    ['d = 100: SIMT fallback', { dim: 100 }, 'maxsim_int8_simt'],
    ['d = 8: SIMT fallback', { dim: 8 }, 'maxsim_int8_simt'],
    ['empty queries: SIMT', { maxQueryLength: 0 }, 'maxsim_int8_simt'],
  ];
  // compute capability 9.0 takes wgmma where mma would run g8 (many query rows): 128-token tiles for
  // documents of 512 tokens or more (a multiple of 128), 64 otherwise
  // (shorter documents: three consumer warpgroups, for these cases' 64 slices of 16 rows)
  const wgmmaKind = (p: Partial<Problem>) =>
    (p.maxDocLength ?? 128) >= 512 ? 'wgmma_w2m2n128' : 'wgmma_w3m2n64';
  for (const [what, p, want] of cases) {
    const onH200 = want.replace('mma_g8', wgmmaKind(p));
    test(`${what} -> ${want} (A100, RTX 3090), ${onH200} (H200)`, () => {
      for (const caps of [a100, rtx3090]) assert.equal(selectVariant(problem(p), caps).name, want);
      assert.equal(selectVariant(problem(p), h200).name, onH200);
    });
  }

  test('fp8: the same rules on compute capability 9.0; elsewhere only the SIMT fallback', () => {
    for (const [what, p, want] of cases) {
      const fp8 = problem({ ...p, dtype: 'fp8' });
      assert.equal(
        selectVariant(fp8, h200).name,
        want.replace('int8', 'fp8').replace('mma_g8', wgmmaKind(p)),
        what,
      );
      assert.equal(selectVariant(fp8, a100).name, 'maxsim_fp8_simt', what);
    }
    assert.throws(
      () => selectVariant(problem({ dtype: 'fp8' }), a100, 'maxsim_fp8_mma_g1'),
      /runs only on compute capability 9.0 \(the GPU has 8.0\)/,
    );
  });

  test('float problems never get an 8-bit kernel, and 8-bit problems never a float one', () => {
    for (const v of dispatchTable().variants) {
      const p = problem({ dtype: v.dtype === 'int8' || v.dtype === 'fp8' ? 'float16' : 'int8' });
      assert.throws(
        () => selectVariant(p, h200, v.name),
        (e) => e instanceof InvalidArgumentError && /cannot: it reads/.test(e.message),
        v.name,
      );
    }
    for (const dtype of ['float16', 'bfloat16', 'float32'] as const)
      assert.ok(!/int8|fp8/.test(selectVariant(problem({ dtype }), h200).name));
    assert.throws(
      () => selectVariant(problem({ dtype: 'fp8' }), h200, 'maxsim_int8_mma_g1'),
      /reads int8 tokens, not fp8/,
    );
  });

  test('a forced variant is checked against its dim and arch', () => {
    assert.throws(
      () => selectVariant(problem({ dim: 100 }), h200, 'maxsim_int8_mma_g1'),
      /needs dim % 16 == 0 \(dim is 100\)/,
    );
    assert.throws(
      () => selectVariant(problem({ dim: 256 }), h200, 'maxsim_int8_mma_g8'),
      /needs dim <= 128 \(dim is 256\)/,
    );
    assert.throws(() => selectVariant(problem({}), t4, 'maxsim_int8_mma_g1'), /compute capability >= 8.0/);
    // below sm_80 only the SIMT fallback's arch check fails too: nothing runs
    assert.throws(() => selectVariant(problem({}), t4), InvalidArgumentError);
    assert.equal(selectVariant(problem({ dim: 256 }), h200, 'maxsim_int8_simt').name, 'maxsim_int8_simt');
  });

  test('launches: persistent grids scale with the SMs, the SIMT grid is one CTA per pair', () => {
    const p = problem({});
    const g1 = launchFor(selectVariant(p, h200), p, h200);
    assert.deepEqual(g1.grid, [132 * 3, 1, 1]);
    assert.deepEqual(g1.block, [128, 1, 1]);
    assert.equal(g1.dtype, 'int8');
    const q = problem({ dim: 100, numQueries: 70_000, numDocs: 5 });
    const simt = launchFor(selectVariant(q, a100), q, a100);
    assert.deepEqual(simt.grid, [5, 65_535, 1]);
    assert.equal(simt.queryTile, 65_535);
  });

  for (const t of ['int8', 'fp8'] as const) {
    test(`variants.json agrees with the 8-bit registry rows maxsim_${t}.cu instantiates (block, CTAs per SM, shared memory)`, () => {
      // maxsim_${t}.cu instantiates the family's rows (MAXSIM_8BIT_KERNELS in maxsim_8bit.cuh expands
      // MAXSIM_8BIT_*_VARIANTS of maxsim_registry.h); variants.json is generated from the same rows,
      // and this restates the formulas of the header comments to check the generator's arithmetic
      const fam = readFileSync(join(dirname(variantsPath), `maxsim_${t}.cu`), 'utf8');
      const inst = /^MAXSIM_8BIT_KERNELS\(maxsim_(\w+),\s*\w+,\s*MAXSIM_(\w+)_KS_CTAS\)/m.exec(fam);
      assert.ok(
        inst && inst[1] === t && inst[2] === t.toUpperCase(),
        `maxsim_${t}.cu instantiates MAXSIM_8BIT_KERNELS(maxsim_${t}, ..., MAXSIM_${t.toUpperCase()}_KS_CTAS)`,
      );
      const src = readFileSync(join(dirname(variantsPath), 'maxsim_registry.h'), 'utf8');
      const ks = new RegExp(`^#define MAXSIM_${t.toUpperCase()}_KS_CTAS (\\d+)$`, 'm').exec(src);
      assert.ok(ks, `maxsim_registry.h defines MAXSIM_${t.toUpperCase()}_KS_CTAS`);
      const ksCtas = Number(ks[1]);
      const entries = [
        ...src.matchAll(
          /^\s*X\(P, E, (\w+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(true|false),\s*(\d+|KS_CTAS)\)/gm,
        ),
      ];
      assert.equal(entries.length, 4, 'four mma rows');
      const table = dispatchTable().variants;
      for (const m of entries) {
        const [name, g, ngrp, tn, s, kd] = [`maxsim_${t}_mma_${m[1]}`, ...m.slice(2, 7).map(Number)];
        const ctas = m[8] === 'KS_CTAS' ? ksCtas : Number(m[8]);
        const v = table.find((x) => x.name === name);
        assert.ok(v, `${name} is in variants.json`);
        assert.equal(v.dtype, t);
        assert.equal(v.module, `maxsim_${t}.fatbin`);
        assert.deepEqual(v.block, [32 * g * ngrp, 1, 1], `${name}: block`);
        assert.deepEqual(v.grid, { kind: 'persistent', ctasPerSm: ctas }, `${name}: grid`);
        // NGRP * (S * (TN * (KD + 16) + TN * 4) + 128), the header comment's formula
        assert.equal(v.smem, ngrp * (s * (tn * (kd + 16) + tn * 4) + 128), `${name}: smemBytes`);
        assert.equal(v.requires.dimMultipleOf, 16, `${name}: 16-byte rows`);
        if (m[7] === 'false') assert.equal(v.requires.maxDim, kd, `${name}: dim <= KD`);
      }
      // the wgmma rows: block 128 * (NCONS + 1), 1 CTA per SM, smem S * TN * 132 + 1024
      const wg = [
        ...src.matchAll(
          /^\s*X\(P, E, (\w+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(true|false),\s*(true|false)\)/gm,
        ),
      ];
      assert.equal(wg.length, 4, 'four wgmma rows');
      for (const m of wg) {
        const [name, ncons, , tn, s] = [`maxsim_${t}_wgmma_${m[1]}`, ...m.slice(2, 6).map(Number)];
        const v = table.find((x) => x.name === name);
        assert.ok(v, `${name} is in variants.json`);
        assert.equal(v.family, 'wgmma');
        assert.deepEqual(v.requires.computeCapabilities, [[9, 0]]);
        assert.deepEqual(v.block, [128 * (ncons + 1), 1, 1], `${name}: block`);
        assert.deepEqual(v.grid, { kind: 'persistent', ctasPerSm: 1 }, `${name}: grid`);
        assert.equal(v.smem, s * tn * 132 + 1024, `${name}: smemBytes`);
        // forced by name it runs on an H200; never on an A100
        assert.equal(selectVariant(problem({ dtype: t }), h200, name).name, name);
        assert.throws(() => selectVariant(problem({ dtype: t }), a100, name), /compute capability 9.0/);
      }
      // the rules pick wgmma only for many query rows (measured faster than mma g8), with 128-token
      // tiles only for long documents (a mean of 512 tokens or more)
      assert.ok(!selectVariant(problem({ dtype: t }), h200).name.includes('wgmma'));
      // shorter documents: three consumer warpgroups where they pad the query rows by at most 15% more
      // than two (64 and 128 slices of 16 rows: 72 / 144 padded)
      const short = 'wgmma_w3m2n64';
      for (const p of [{ maxQueryLength: 1024 }, { numQueries: 64 }, { numQueries: 32, maxDocLength: 300 }])
        assert.equal(selectVariant(problem({ ...p, dtype: t }), h200).name, `maxsim_${t}_${short}`);
      // 16 slices: one pass either way, but 24 rows of 16 padded against 16 -> two warpgroups
      for (const p of [{ maxQueryLength: 256 }, { numQueries: 8, maxQueryLength: 32 }, { numQueries: 16 }])
        assert.equal(selectVariant(problem({ ...p, dtype: t }), h200).name, `maxsim_${t}_wgmma_w2m2n64`);
      const colpali = { maxQueryLength: 1024, maxDocLength: 1024, dtype: t };
      assert.equal(selectVariant(problem(colpali), h200).name, `maxsim_${t}_wgmma_w2m2n128`);
      assert.equal(
        selectVariant(problem({ ...colpali, docTokens: 100_000 * 300 }), h200).name,
        `maxsim_${t}_${short}`,
        'a mean of 300 tokens keeps 64-token tiles',
      );
      // H200: the memory-bound variant's CTAs fit one SM together (228 KiB, 1 KiB reserved per CTA)
      const g1 = table.find((x) => x.name === `maxsim_${t}_mma_g1`);
      assert.ok(g1 && g1.grid.kind === 'persistent' && g1.grid.ctasPerSm * (g1.smem + 1024) <= 233_472);
      // the SIMT fallback: the registry's block, which maxsim_8bit.cuh launches with
      const cuh = readFileSync(join(dirname(variantsPath), 'maxsim_8bit.cuh'), 'utf8');
      assert.ok(
        cuh.includes('extern "C" __global__ void __launch_bounds__(MAXSIM_SIMT_BLOCK) PREFIX##_simt('),
      );
      assert.ok(src.includes('#define MAXSIM_SIMT_BLOCK 128'));
      assert.deepEqual(table.find((x) => x.name === `maxsim_${t}_simt`)?.block, [128, 1, 1]);
    });
  }
});
