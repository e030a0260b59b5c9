// The TMA wgmma variants' launch contract: variants.json's "tmaBox" against the kernel source
// (native/cuda/kernels/maxsim_wgmma.cu), the launch the dispatcher hands the runtime, and the
// table's validation. Pure TypeScript: runs without a GPU.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import {
  type DeviceCaps,
  dispatchTable,
  launchFor,
  parseVariants,
  selectVariant,
  variantsPath,
} from '../src/backends/cuda-dispatch.js';

const h200: DeviceCaps = { computeCapability: [9, 0], sms: 132, smemOptin: 232_448 };
const src = readFileSync(join(dirname(variantsPath), 'maxsim_wgmma.cu'), 'utf8');

test('TMA variants: box [64, TN] as in the kernel source, passed on in the launch', () => {
  const entries = [
    ...src.matchAll(/^MAXSIM_WGMMA_TMA_ENTRY\((\w+),\s*\w+,\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),/gm),
  ];
  assert.ok(entries.length >= 4, 'the source declares TMA entry points');
  const table = dispatchTable().variants;
  for (const [, name, ncons, , tn, stages] of entries) {
    const v = table.find((x) => x.name === name);
    assert.ok(v, `${name} is in variants.json`);
    assert.deepEqual(v.tmaBox, [64, Number(tn)], `${name}: tmaBox`);
    assert.deepEqual(v.block, [128 * (Number(ncons) + 1), 1, 1], `${name}: block`);
    assert.equal(v.smem, Number(stages) * Number(tn) * 256 + 1024, `${name}: smemBytes`);
    const p = {
      numQueries: 1,
      maxQueryLength: 128,
      maxDocLength: 300,
      dim: 128,
      numDocs: 100_000,
      dtype: v.dtype,
    };
    assert.deepEqual(launchFor(v, p, h200).tmaBox, [64, Number(tn)]);
  }
  // every variant with a box is a TMA entry point, and the others launch without one
  for (const v of table) {
    const isTma = entries.some((e) => e[1] === v.name);
    assert.equal(v.tmaBox !== undefined, isTma, v.name);
  }
});

test('TMA variants are not chosen by the rules until measured; forced by name they run on cc 9.0 only', () => {
  const p = { numQueries: 1, maxQueryLength: 128, maxDocLength: 300, dim: 128, numDocs: 100_000 } as const;
  for (const dtype of ['float16', 'bfloat16'] as const) {
    assert.ok(!selectVariant({ ...p, dtype }, h200).name.includes('tma'));
    const colpali = { ...p, maxQueryLength: 1024, maxDocLength: 1024, dtype };
    assert.ok(!selectVariant(colpali, h200).name.includes('tma'));
    const name = `maxsim_wgmma_tma_pp_m2n64_${dtype === 'float16' ? 'f16' : 'bf16'}`;
    assert.equal(selectVariant({ ...p, dtype }, h200, name).name, name);
  }
});

test('variants.json: a malformed tmaBox is refused with the variant named', () => {
  const base = JSON.parse(readFileSync(variantsPath, 'utf8')) as Array<Record<string, unknown>>;
  const tma = base.find((e) => e.name === 'maxsim_wgmma_tma_pp_m2n64_f16');
  assert.ok(tma);
  for (const box of [[64], [0, 64], [64, 512], 'x']) {
    const bad = base.map((e) => (e === tma ? { ...e, tmaBox: box } : e));
    assert.throws(
      () => parseVariants(bad),
      /maxsim_wgmma_tma_pp_m2n64_f16: tmaBox must be \[elements, tokens\]/,
    );
  }
});
