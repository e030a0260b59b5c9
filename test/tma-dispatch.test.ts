// The TMA wgmma variants' launch contract: variants.json's "tmaBox" against the registry rows the
// kernel sources instantiate (native/cuda/kernels/maxsim_registry.h), the launch the dispatcher hands the runtime, the rules that
// prefer them where the driver encodes tensor maps, and the table's validation. Pure TypeScript: runs
// without a GPU.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import {
  type DeviceCaps,
  dispatchTable,
  expandVariantEntries,
  launchFor,
  type Problem,
  parseVariants,
  selectVariant,
  variantsPath,
} from '../src/backends/cuda-dispatch.js';

const h200: DeviceCaps = { computeCapability: [9, 0], sms: 132, smemOptin: 232_448 };
const base: Problem = {
  numQueries: 1,
  maxQueryLength: 32,
  maxDocLength: 300,
  dim: 128,
  numDocs: 100_000,
  dtype: 'float16',
};
const src = readFileSync(join(dirname(variantsPath), 'maxsim_registry.h'), 'utf8');

test('TMA variants: box [64, TN] as in the registry rows, passed on in the launch', () => {
  // rows X(SFX, NCONS, MB, TN, S, PP, TMA) of MAXSIM_WGMMA_VARIANTS; TMA true: maxsim_wgmma_tma_SFX_{f16,bf16}
  const entries = [
    ...src.matchAll(/^\s*X\((\w+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(?:true|false),\s*true\)/gm),
  ].flatMap((m) =>
    ['f16', 'bf16'].map((dt) => [m[0], `maxsim_wgmma_tma_${m[1]}_${dt}`, m[2], m[3], m[4], m[5]]),
  );
  assert.ok(entries.length >= 4, 'the registry declares TMA entry points');
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
  // the 8-bit twins (maxsim_int8.cu, maxsim_fp8.cu): 128-byte rows, smem S * TN * 132 + 1024 (one
  // table for both, MAXSIM_8BIT_WGMMA_VARIANTS: rows X(P, E, SFX, NCONS, MB, TN, S, TMA, DS); TMA true:
  // PREFIX_wgmma_tma_SFX, DS true: PREFIX_wgmma_tma_ds_SFX)
  const rows8 = [
    ...src.matchAll(
      /^\s*X\(P, E, (\w+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(true|false),\s*(true|false)\)/gm,
    ),
  ];
  const entries8 = ['int8', 'fp8'].flatMap((t) =>
    rows8.flatMap((m) =>
      [m[6] === 'true' && 'tma_', m[7] === 'true' && 'tma_ds_']
        .filter((k) => k !== false)
        .map((k) => [m[0], `maxsim_${t}_wgmma_${k}${m[1]}`, m[2], m[3], m[4], m[5]]),
    ),
  );
  assert.ok(entries8.length >= 2, 'the 8-bit sources declare TMA entry points');
  for (const [, name, ncons, , tn, stages] of entries8) {
    const v = table.find((x) => x.name === name);
    assert.ok(v, `${name} is in variants.json`);
    assert.deepEqual(v.tmaBox, [128, Number(tn)], `${name}: tmaBox`);
    assert.deepEqual(v.block, [128 * (Number(ncons) + 1), 1, 1], `${name}: block`);
    assert.equal(v.smem, Number(stages) * Number(tn) * 132 + 1024, `${name}: smemBytes`);
  }
  // every variant with a box is a TMA entry point, and the others launch without one
  for (const v of table) {
    const isTma = [...entries, ...entries8].some((e) => e[1] === v.name);
    assert.equal(v.tmaBox !== undefined, isTma, v.name);
  }
});

test('the rules take the TMA twin of each dispatched wgmma kind where the driver encodes tensor maps', () => {
  const withMaps: DeviceCaps = { ...h200, tensorMaps: true };
  const cases: Array<[string, Partial<Problem>, string]> = [
    ['1,128,300 x 100000 (ping-pong, two m-blocks)', { maxQueryLength: 128 }, 'pp_m2n64'],
    ['1,64,300 x 100000 (ping-pong, one m-block)', { maxQueryLength: 64 }, 'pp_m1n64'],
    ['1,128,300 x 100 (few documents per SM)', { maxQueryLength: 128, numDocs: 100 }, 'n128'],
    ['32,32,300 (all pairs)', { numQueries: 32 }, 'w2m2n64'],
    ['1,1024,1024 (ColPali)', { maxQueryLength: 1024, maxDocLength: 1024 }, 'w2m2n128'],
  ];
  for (const dtype of ['float16', 'bfloat16'] as const) {
    const sfx = dtype === 'float16' ? 'f16' : 'bf16';
    for (const [what, shape, kind] of cases) {
      const p: Problem = { ...base, ...shape, dtype };
      const tma = selectVariant(p, withMaps);
      assert.equal(tma.name, `maxsim_wgmma_tma_${kind}_${sfx}`, `${what}, ${dtype}`);
      assert.deepEqual(launchFor(tma, p, withMaps).tmaBox, tma.tmaBox);
      // without tensor maps (an old driver, or caps that do not say) the cp.async kernel serves
      assert.equal(selectVariant(p, h200).name, `maxsim_wgmma_${kind}_${sfx}`, `${what}, ${dtype}, no maps`);
      assert.equal(launchFor(selectVariant(p, h200), p, h200).tmaBox, undefined);
      // and a fatbin without the TMA entry points falls back the same way
      const plainOnly = new Set(
        dispatchTable()
          .variants.filter((v) => !v.tmaBox)
          .map((v) => v.kernel),
      );
      assert.equal(
        selectVariant(p, withMaps, undefined, dispatchTable(), plainOnly).name,
        `maxsim_wgmma_${kind}_${sfx}`,
      );
    }
    // forced by name, a TMA variant needs the driver's tensor maps and compute capability 9.0
    const p: Problem = { ...base, maxQueryLength: 128, dtype };
    const name = `maxsim_wgmma_tma_pp_m2n64_${sfx}`;
    assert.equal(selectVariant(p, withMaps, name).name, name);
    assert.throws(
      () => selectVariant(p, h200, name),
      /TMA tensor map, and the driver lacks cuTensorMapEncodeTiled/,
    );
    assert.throws(
      () => selectVariant(p, { ...withMaps, computeCapability: [8, 0] }, name),
      /compute capability 9\.0/,
    );
  }
});

test('the 8-bit rules take the TMA twins where the driver encodes tensor maps', () => {
  const withMaps: DeviceCaps = { ...h200, tensorMaps: true };
  const cases: Array<[string, Partial<Problem>, string, string]> = [
    // [what, shape, with maps, without: w3m2n64 where its 384-row passes pad the query rows within 15%]
    ['32,32,300 (all pairs)', { numQueries: 32 }, 'tma_w2m2n64', 'w3m2n64'],
    ['1,256,256 (one long query)', { maxQueryLength: 256, maxDocLength: 256 }, 'tma_w2m2n64', 'w2m2n64'],
    ['1,1024,1024 (ColPali)', { maxQueryLength: 1024, maxDocLength: 1024 }, 'tma_w2m2n128', 'w2m2n128'],
  ];
  for (const dtype of ['int8', 'fp8'] as const) {
    for (const [what, shape, tmaKind, plainKind] of cases) {
      const p: Problem = { ...base, ...shape, dtype };
      const tma = selectVariant(p, withMaps);
      assert.equal(tma.name, `maxsim_${dtype}_wgmma_${tmaKind}`, `${what}, ${dtype}`);
      assert.deepEqual(launchFor(tma, p, withMaps).tmaBox, tma.tmaBox);
      assert.equal(
        selectVariant(p, h200).name,
        `maxsim_${dtype}_wgmma_${plainKind}`,
        `${what}, ${dtype}, no maps`,
      );
      assert.equal(launchFor(selectVariant(p, h200), p, h200).tmaBox, undefined);
    }
    // few query rows stay on mma.sync, maps or not
    assert.equal(selectVariant({ ...base, dtype }, withMaps).name, `maxsim_${dtype}_mma_g1`);
  }
});

test('variants.json: a malformed tmaBox is refused with the variant named', () => {
  const base = expandVariantEntries(JSON.parse(readFileSync(variantsPath, 'utf8'))) as Array<
    Record<string, unknown>
  >;
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

test('8-bit corpora with one scale per document take the document-scale twins first', () => {
  const withMaps: DeviceCaps = { ...h200, tensorMaps: true };
  const cases: Array<[string, Partial<Problem>, string, string]> = [
    ['32,32,300 (all pairs)', { numQueries: 32 }, 'tma_ds_w2m2n64', 'tma_w2m2n64'],
    [
      '1,256,256 (one long query)',
      { maxQueryLength: 256, maxDocLength: 256 },
      'tma_ds_w2m2n64',
      'tma_w2m2n64',
    ],
    [
      '1,1024,1024 (ColPali)',
      { maxQueryLength: 1024, maxDocLength: 1024 },
      'tma_ds_w2m2n128',
      'tma_w2m2n128',
    ],
  ];
  for (const dtype of ['int8', 'fp8'] as const) {
    for (const [what, shape, dsKind, tokenKind] of cases) {
      const p: Problem = { ...base, ...shape, dtype, documentScales: true };
      const v = selectVariant(p, withMaps);
      assert.equal(v.name, `maxsim_${dtype}_wgmma_${dsKind}`, `${what}, ${dtype}`);
      assert.equal(v.requires.documentScales, true);
      assert.deepEqual(launchFor(v, p, withMaps).tmaBox, v.tmaBox);
      // per-token corpora never take them; without tensor maps (the twins are TMA kernels) neither
      assert.equal(
        selectVariant({ ...p, documentScales: false }, withMaps).name,
        `maxsim_${dtype}_wgmma_${tokenKind}`,
      );
      assert.doesNotMatch(selectVariant(p, h200).name, /_ds_/, `${what}, ${dtype}, no maps`);
      // a fatbin without them falls back to the per-token twin
      const without = new Set(
        dispatchTable()
          .variants.filter((x) => !x.requires.documentScales)
          .map((x) => x.kernel),
      );
      assert.equal(
        selectVariant(p, withMaps, undefined, dispatchTable(), without).name,
        `maxsim_${dtype}_wgmma_${tokenKind}`,
      );
      // forced by name on a per-token corpus: refused with the reason
      assert.throws(
        () => selectVariant({ ...p, documentScales: undefined }, withMaps, v.name),
        /cannot: it needs one scale per document \(quantize with \{ scales: 'document' \}\)/,
      );
    }
    // few query rows stay on mma.sync, whose per-token kernels are correct for any scales
    assert.equal(
      selectVariant({ ...base, dtype, documentScales: true }, withMaps).name,
      `maxsim_${dtype}_mma_g1`,
    );
  }
});

test('variants.json: "scales" is "document" on an 8-bit variant, or absent', () => {
  const table = expandVariantEntries(JSON.parse(readFileSync(variantsPath, 'utf8'))) as Array<
    Record<string, unknown>
  >;
  const ds = table.filter((e) => e.scales !== undefined);
  assert.equal(ds.length, 4, 'int8 and fp8, w2m2n64 and w2m2n128');
  for (const e of ds) {
    const twin = table.find((x) => x.name === String(e.name).replace('_tma_ds_', '_tma_'));
    assert.ok(twin, `${e.name}: a per-token twin`);
    for (const k of ['block', 'smemBytes', 'tmaBox', 'grid', 'dim', 'arch'])
      assert.deepEqual(e[k], twin[k], `${e.name}: ${k} as its twin's`);
  }
  const fp16 = table.find((e) => e.name === 'maxsim_wgmma_tma_pp_m2n64_f16');
  for (const [entry, value] of [
    [fp16, 'document'],
    [ds[0], 'token'],
  ] as const) {
    const bad = table.map((e) => (e === entry ? { ...e, scales: value } : e));
    assert.throws(() => parseVariants(bad), /scales must be "document", on an int8 or fp8 variant/);
  }
});

test('wgmma launches take pass-inner work units (unitOrder 1; MAXSIM_UNIT_ORDER=0 restores 0), others none', () => {
  const p: Problem = { ...base, numQueries: 128, maxDocLength: 128 };
  const table = dispatchTable().variants;
  const saved = process.env.MAXSIM_UNIT_ORDER;
  try {
    delete process.env.MAXSIM_UNIT_ORDER;
    const picked = selectVariant(p, h200);
    assert.equal(picked.family, 'wgmma', `128 x 32 query rows take a wgmma variant (${picked.name})`);
    for (const v of table) {
      const l = launchFor(v, { ...p, dtype: v.dtype }, h200);
      assert.equal(l.unitOrder, v.family === 'wgmma' ? 1 : undefined, v.name);
    }
    process.env.MAXSIM_UNIT_ORDER = '0';
    assert.equal(launchFor(picked, p, h200).unitOrder, 0);
  } finally {
    if (saved === undefined) delete process.env.MAXSIM_UNIT_ORDER;
    else process.env.MAXSIM_UNIT_ORDER = saved;
  }
});
