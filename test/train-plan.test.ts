// The CUDA training plan (src/backends/cuda-train-plan.ts): what TypeScript chooses for given shapes,
// and the native side's refusal of a malformed plan (cuda_train_binding.cc / train_plan.cc), which
// happens before any device is touched, so both run without a GPU. The launch constants come from the
// addon (cuda.trainKernelInfo, stated once in native/cuda/kernels/maxsim_train_params.h).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { setSelectPlacement } from '../src/backends/cuda-select-placement.js';
import { type CsrBlockLimits, planDocBlocks } from '../src/backends/cuda-train-blocks.js';
import {
  AUTO_ATOMIC_DISTINCT,
  CELL_CAP,
  CSR_CHUNK,
  FWD_SCRATCH_BYTES,
  planBackward,
  planForward,
  SOURCE_CAP,
  type TrainBackwardPlan,
  type TrainForwardPlan,
  type TrainKernelInfo,
  type TrainShape,
  WALK_WARPS,
} from '../src/backends/cuda-train-plan.js';
import { InvalidArgumentError } from '../src/errors.js';
import { encodeFloats } from '../src/floats.js';
import { loadNative, packageRoot } from '../src/native.js';
import { denseBatch, type TokenBatch } from '../src/tensor.js';

type CudaTrainEntries = {
  trainKernelInfo: TrainKernelInfo;
  trainForward(device: number, q: TokenBatch, d: TokenBatch, options: object): Promise<unknown>;
  trainBackward(
    device: number,
    q: TokenBatch,
    d: TokenBatch,
    argmax: Int32Array,
    grad: Float64Array,
    options: object,
  ): Promise<unknown>;
  trainBackwardState(device: number, state: unknown, grad: Float64Array, options: object): Promise<unknown>;
  status(): { available: boolean };
};
const cuda = (loadNative() as unknown as { cuda: CudaTrainEntries }).cuda;
const info = cuda.trainKernelInfo;

/** Devices of compute capability cc (132 SMs, an H100 / H200's count). */
const gpu = (cc: number) => ({ ccMajor: cc, sms: 132 });
const sm90 = gpu(9);
const sm80 = gpu(8);

/** The shape fields planBackward reads: all pairs, documents of at most this many tokens. */
const docsUpTo = (maxDocLength: number) => ({ pairs: 'all' as const, maxDocLength });
const none = { queries: [], docs: [] };

const shape = (over: Partial<TrainShape> = {}): TrainShape => ({
  queryDtype: 'float16',
  docDtype: 'float16',
  dim: 128,
  queries: 3,
  docs: 4,
  pairs: 'all',
  stride: 32,
  maxDocLength: 300,
  ...over,
});

describe('CUDA training plan (TypeScript decides)', () => {
  test('the addon reports the launch constants the plan must match', () => {
    for (const key of [
      'fwdThreads',
      'fwdMmaSmem',
      'fwdWgmmaThreads',
      'fwdWgmmaSmem',
      'wgmmaSlabRows',
      'wgmmaCc',
      'mmaDimMultiple',
      'mmaMaxDim',
      'mmaMinCc',
      'maxGrid',
    ] as const) {
      assert.ok(Number.isInteger(info[key]) && info[key] > 0, `trainKernelInfo.${key} = ${info[key]}`);
    }
    assert.ok(info.fwdMmaSmem > 48 * 1024, 'the mma forward needs more than the default 48 KiB');
    assert.equal(info.wgmmaSlabRows % 16, 0, 'slabs are whole 16-row query slices');
    assert.ok(Object.isFrozen(info));
  });

  test('forward kernel: the tensor-core forward exactly where it applies', () => {
    const mma = planForward(shape(), 'auto', {}, sm80, info);
    assert.deepEqual(mma, {
      kernel: 'mma',
      threads: info.fwdThreads,
      smem: info.fwdMmaSmem,
      grid: 12,
      argmax16: true,
      queryChunk: 0,
      docGroups: 0,
      tma: false,
    });
    assert.equal(
      planForward(shape({ queryDtype: 'bfloat16', docDtype: 'bfloat16' }), 'auto', {}, sm80, info).kernel,
      'mma',
    );
    assert.equal(planForward(shape({ dim: info.mmaDimMultiple }), 'auto', {}, sm80, info).kernel, 'mma');
    assert.equal(planForward(shape({ pairs: 'diagonal', docs: 3 }), 'auto', {}, sm90, info).kernel, 'mma');
    assert.equal(planForward(shape(), 'mma', {}, sm90, info).kernel, 'mma');
    const simtShapes: [string, TrainShape, number][] = [
      ['float32', shape({ queryDtype: 'float32', docDtype: 'float32' }), 9],
      ['mixed dtypes', shape({ queryDtype: 'bfloat16', docDtype: 'float16' }), 9],
      ['float32 queries', shape({ queryDtype: 'float32' }), 9],
      ['dim past the max', shape({ dim: info.mmaMaxDim + info.mmaDimMultiple }), 9],
      ['dim not a multiple', shape({ dim: info.mmaDimMultiple + 4 }), 9],
      ['dim below the multiple', shape({ dim: 4 }), 9],
      ['old device', shape(), info.mmaMinCc - 1],
    ];
    for (const [name, s, cc] of simtShapes) {
      const p = planForward(s, 'auto', {}, gpu(cc), info);
      assert.equal(p.kernel, 'simt', name);
      assert.equal(p.smem, 0, `${name}: the CUDA-core forward takes no dynamic shared memory`);
      assert.equal(p.threads, info.fwdThreads);
      assert.throws(
        () => planForward(s, 'mma', {}, gpu(cc), info),
        (e: unknown) =>
          e instanceof InvalidArgumentError && e.argument === 'trainKernel' && /'mma' with/.test(e.message),
        name,
      );
      assert.throws(
        () => planForward(s, 'wgmma', {}, gpu(cc), info),
        (e: unknown) =>
          e instanceof InvalidArgumentError && e.argument === 'trainKernel' && /'wgmma' with/.test(e.message),
        name,
      );
    }
    assert.equal(planForward(shape(), 'simt', {}, sm90, info).kernel, 'simt');
    assert.equal(planForward(shape(), 'mma', {}, sm80, info).kernel, 'mma');
  });

  test('forward kernel: wgmma for all pairs on compute capability 9.x, chunked by the scratch budget', () => {
    // ColPali B = 128: one launch, 512 slabs of 256 rows, one document group, one CTA per SM
    const b128 = planForward(shape({ queries: 128, docs: 128, stride: 1024 }), 'auto', {}, sm90, info);
    assert.deepEqual(b128, {
      kernel: 'wgmma',
      threads: info.fwdWgmmaThreads,
      smem: info.fwdWgmmaSmem,
      grid: 132,
      argmax16: true,
      queryChunk: 128,
      docGroups: 1,
      tma: true,
    });
    assert.equal(
      planForward(shape({ queries: 128, docs: 128, stride: 1024 }), 'auto', { forwardTma: false }, sm90, info)
        .tma,
      false,
    );
    // B = 256: a query's slots take 1 MB, so 64 queries per launch; their 256 slabs get 2 groups
    const b256 = planForward(shape({ queries: 256, docs: 256, stride: 1024 }), 'auto', {}, sm90, info);
    assert.equal(b256.queryChunk, FWD_SCRATCH_BYTES / (256 * 1024 * 4));
    assert.equal(b256.docGroups, 2);
    assert.equal(b256.grid, 132);
    assert.ok(b256.queryChunk * 256 * 1024 * 4 <= FWD_SCRATCH_BYTES);
    // few slabs: documents dealt into groups so that every SM has items, never more groups than documents
    const small = planForward(shape(), 'auto', {}, sm90, info);
    assert.equal(small.kernel, 'wgmma');
    assert.equal(small.docGroups, 4);
    assert.equal(small.grid, 4);
    const few = planForward(shape({ queries: 8, docs: 10_000, stride: 32 }), 'auto', {}, sm90, info);
    assert.equal(few.docGroups, 528);
    assert.equal(few.grid, 132);
    assert.equal(planForward(shape(), 'auto', { forwardGrid: 3 }, sm90, info).grid, 3);
    // where it does not apply: 'auto' falls back, 'wgmma' is refused
    const refused: [string, TrainShape, { ccMajor: number; sms: number }][] = [
      ['diagonal', shape({ pairs: 'diagonal', docs: 3 }), sm90],
      ['sm_80', shape(), sm80],
      ['sm_100', shape(), gpu(10)],
      ['a query past the scratch', shape({ docs: 100_000, stride: 1024 }), sm90],
    ];
    for (const [name, s, dev] of refused) {
      assert.notEqual(planForward(s, 'auto', {}, dev, info).kernel, 'wgmma', name);
      assert.throws(
        () => planForward(s, 'wgmma', {}, dev, info),
        (e: unknown) =>
          e instanceof InvalidArgumentError && e.argument === 'trainKernel' && /'wgmma' with/.test(e.message),
        name,
      );
    }
  });

  test('forward grid: the pairs, capped by the scratch budget (at least 1024 CTAs), the grid limit and forwardGrid', () => {
    const grid = (s: Partial<TrainShape>, forwardGrid?: number) =>
      planForward(shape(s), 'auto', { forwardGrid }, sm80, info).grid;
    assert.equal(grid({ queries: 0 }), 0);
    assert.equal(grid({ docs: 0 }), 0);
    assert.equal(grid({ queries: 5, docs: 5, pairs: 'diagonal' }), 5);
    assert.equal(grid({ queries: 256, docs: 256, stride: 1024 }), FWD_SCRATCH_BYTES / (1024 * 4));
    assert.equal(grid({ queries: 256, docs: 256, stride: 100_000 }), 1024);
    assert.equal(grid({ queries: 256, docs: 256, stride: 0 }), 256 * 256);
    assert.equal(grid({ queries: 4096, docs: 4096, stride: 1 }), info.maxGrid);
    assert.equal(grid({ queries: 256, docs: 256 }, 5), 5);
    assert.equal(grid({ queries: 2, docs: 2 }, 5), 4);
    assert.equal(grid({ queries: 2, docs: 2 }, 0), 4, 'forwardGrid 0 is automatic');
  });

  test('argmax width: int16 while every document is shorter than 32768 tokens, else int32; argmaxBits forces', () => {
    const bits = (maxDocLength: number, argmaxBits?: 0 | 16 | 32) =>
      planForward(shape({ maxDocLength }), 'auto', { argmaxBits }, sm90, info).argmax16;
    assert.equal(bits(0), true);
    assert.equal(bits(32767), true);
    assert.equal(bits(32768), false);
    assert.equal(bits(100, 32), false);
    assert.equal(bits(100, 16), true);
    assert.equal(bits(100, 0), true);
    assert.equal(bits(40_000, 32), false);
    assert.throws(
      () => bits(40_000, 16),
      (e: unknown) =>
        e instanceof InvalidArgumentError &&
        e.argument === 'cudaTuning.argmaxBits' &&
        /16 with a document of 40000 tokens/.test(e.message),
    );
    assert.equal(planBackward('csr', {}, docsUpTo(32768), none).argmax16, false);
    assert.equal(planBackward('csr', { argmaxBits: 32 }, docsUpTo(10), none).argmax16, false);
  });

  test('backward: dD method, CSR chunking and budget', () => {
    const lengths = { queries: [3, 5], docs: [4, 0, 7] };
    assert.deepEqual(planBackward('csr', {}, docsUpTo(50), lengths), {
      dD: 'csr',
      autoAtomicDistinct: AUTO_ATOMIC_DISTINCT,
      csrChunk: CSR_CHUNK,
      // one block of the 3 documents, block-wide walk, 2 query blocks of 1 query each
      blocks: Int32Array.from([3, 1, 2, 1]),
      argmax16: true,
    });
    const p = planBackward('auto', { csrChunk: 33, docBlock: 2, queryBlock: 3 }, docsUpTo(50), lengths);
    assert.equal(p.dD, 'auto');
    assert.equal(p.csrChunk, 33);
    // docBlock 2: documents [0, 2) and [2, 3); queryBlock 3: one query block of both queries
    assert.deepEqual(p.blocks, Int32Array.from([2, 1, 1, 2, 3, 1, 1, 2]));
    const atomic = planBackward('atomic', { csrChunk: 0 }, docsUpTo(50), lengths);
    assert.equal(atomic.csrChunk, CSR_CHUNK);
    assert.equal(atomic.blocks.length, 0, "'atomic' builds no CSR");
    // the split rows' fp64 partials stay within 64 MB at the default chunk and the source cap
    assert.ok(((2 * SOURCE_CAP) / CSR_CHUNK + 1) * 128 * 8 <= 64 * 2 ** 20 + 1024);
  });

  test('backward: the CSR blocks are the ones the C++ planner cut (table of main bc33815)', () => {
    // test/fixtures/plans/train-doc-blocks.json: PlanDocBlocks of native/cuda/train_engine.cc at
    // main bc33815 compiled into a host program, over 434 shapes (0 to 130 queries and documents,
    // empty and 40,000-token documents, both pairs, default and tiny budgets); each block is
    // [docBegin, docEnd, rowBegin, rowEnd, bound, longest, byBlock, qblocks, qblockSize].
    const file = path.join(packageRoot, 'test', 'fixtures', 'plans', 'train-doc-blocks.json');
    const table = JSON.parse(readFileSync(file, 'utf8')) as {
      pairs: 'all' | 'diagonal';
      queryLengths: number[];
      docLengths: number[];
      tuning: CsrBlockLimits;
      blocks: number[][];
    }[];
    assert.ok(table.length > 400);
    let split = 0;
    for (const [k, c] of table.entries()) {
      const blocks = planDocBlocks(c.queryLengths, c.docLengths, c.pairs, c.tuning).map((b) => [
        b.docBegin,
        b.docEnd,
        b.rowBegin,
        b.rowEnd,
        b.bound,
        b.longest,
        b.byBlock ? 1 : 0,
        b.qblocks,
        b.qblockSize,
      ]);
      assert.deepEqual(blocks, c.blocks, `case ${k}`);
      if (blocks.length > 1) split++;
    }
    assert.ok(split > 100, 'the table has shapes cut into several blocks');
    // the defaults of planBackward are the table's first budget row
    assert.deepEqual(table[0].tuning, {
      docBlock: 0,
      queryBlock: 0,
      walkWarps: WALK_WARPS,
      blockWalk: true,
      sourceCap: SOURCE_CAP,
      cellCap: CELL_CAP,
    });
  });
});

describe('CUDA training plan: the native side refuses a malformed plan before touching a device', () => {
  const q = denseBatch(encodeFloats(new Float32Array(2 * 3 * 16).fill(0.25), 'float16'), {
    count: 2,
    length: 3,
    dim: 16,
    dtype: 'float16',
  });
  const d = denseBatch(encodeFloats(new Float32Array(3 * 4 * 16).fill(0.5), 'float16'), {
    count: 3,
    length: 4,
    dim: 16,
    dtype: 'float16',
  });
  const shapeOf = shape({ dim: 16, queries: 2, docs: 3, stride: 3, maxDocLength: 4 });
  const goodForward = planForward(shapeOf, 'auto', {}, sm80, info);
  const goodWgmma = planForward(shapeOf, 'auto', {}, sm90, info);
  const goodBackward = planBackward('csr', {}, docsUpTo(4), { queries: q.lengths, docs: d.lengths });
  const forward = (plan: unknown) => cuda.trainForward(0, q, d, { pairs: 'all', stride: 3, plan });
  const backward = (plan: unknown) =>
    cuda.trainBackward(0, q, d, new Int32Array(18), new Float64Array(6), { pairs: 'all', stride: 3, plan });
  const state = (plan: unknown) => cuda.trainBackwardState(0, {}, new Float64Array(6), { plan });

  test('bad forward plans name the field', () => {
    const bad: [Partial<TrainForwardPlan> | Record<string, unknown> | undefined, RegExp][] = [
      [undefined, /options\.plan/],
      [{ ...goodForward, kernel: 'tensor' as 'mma' }, /plan\.kernel/],
      [{ ...goodForward, queryChunk: 2 }, /plan\.queryChunk/],
      [{ ...goodForward, docGroups: 1 }, /plan\.docGroups/],
      [{ ...goodWgmma, queryChunk: 0 }, /plan\.queryChunk/],
      [{ ...goodWgmma, docGroups: 0 }, /plan\.docGroups/],
      [{ ...goodWgmma, smem: info.fwdMmaSmem }, /plan\.smem/],
      [{ ...goodWgmma, threads: info.fwdThreads }, /plan\.threads/],
      [{ ...goodWgmma, queryChunk: undefined }, /plan\.queryChunk/],
      [{ ...goodForward, tma: true }, /plan\.tma/],
      [{ ...goodWgmma, tma: undefined }, /plan\.tma/],
      [{ ...goodForward, smem: info.fwdMmaSmem - 1024 }, /plan\.smem/],
      [{ ...goodForward, kernel: 'simt' }, /plan\.smem/], // the mma forward's smem on the CUDA-core one
      [{ ...goodForward, kernel: 'simt', smem: 0, threads: info.fwdThreads * 2 }, /plan\.threads/],
      [{ ...goodForward, grid: -1 }, /plan\.grid/],
      [{ ...goodForward, grid: 1.5 }, /plan\.grid/],
      [{ ...goodForward, grid: info.maxGrid + 1 }, /plan\.grid/],
      [{ ...goodForward, argmax16: 1 as unknown as boolean }, /plan\.argmax16/],
    ];
    for (const [plan, re] of bad) {
      assert.throws(() => forward(plan), re, JSON.stringify(plan));
    }
  });

  test('bad backward plans name the field (both backward entry points)', () => {
    const bad: [Partial<TrainBackwardPlan> | Record<string, unknown> | undefined, RegExp][] = [
      [undefined, /options\.plan/],
      [{ ...goodBackward, dD: 'sorted' as 'csr' }, /plan\.dD/],
      [{ ...goodBackward, csrChunk: 0 }, /plan\.csrChunk/],
      [{ ...goodBackward, autoAtomicDistinct: Number.NaN }, /plan\.autoAtomicDistinct/],
      [{ ...goodBackward, autoAtomicDistinct: -1 }, /plan\.autoAtomicDistinct/],
      [{ ...goodBackward, blocks: [3, 1, 2, 1] as unknown as Int32Array }, /plan\.blocks/],
      [{ ...goodBackward, blocks: Int32Array.from([3, 1, 2]) }, /plan\.blocks/],
      [{ ...goodBackward, blocks: Int32Array.from([3, 2, 2, 1]) }, /plan\.blocks\[0\]\.byBlock/],
      [{ ...goodBackward, dD: 'atomic' }, /plan\.blocks/], // 'atomic' with blocks
      [{ ...goodBackward, argmax16: undefined }, /plan\.argmax16/],
    ];
    for (const [plan, re] of bad) {
      assert.throws(() => backward(plan), re, `trainBackward ${JSON.stringify(plan)}`);
      assert.throws(() => state(plan), re, `trainBackwardState ${JSON.stringify(plan)}`);
    }
  });

  test("the planner's own plans pass the native check", async () => {
    if (cuda.status().available) {
      // a GPU: the passes run (their results are checked by test/gpu/train.test.ts)
      const f = (await forward(goodForward)) as { scores: Float32Array; argmax: Int32Array };
      assert.equal(f.scores.length, 6);
      const w = (await forward(goodWgmma).catch((e: Error) => e)) as { scores?: Float32Array } | Error;
      // on compute capability 9.x the wgmma plan runs with the same scores; elsewhere the device check refuses it
      if (w instanceof Error) assert.match(w.message, /plan\.kernel|'wgmma'/);
      else assert.deepEqual(w.scores, f.scores);
      await backward(goodBackward);
      return;
    }
    // no GPU: the call gets past the plan and fails on the device instead
    for (const run of [() => forward(goodForward), () => forward(goodWgmma), () => backward(goodBackward)]) {
      assert.throws(run, (e: unknown) => e instanceof Error && !/plan/.test(e.message));
    }
  });

  test('with a GPU: plans the problem or the device cannot run are refused by the native check', {
    skip: cuda.status().available ? false : 'no CUDA device',
  }, () => {
    const f32q = denseBatch(new Float32Array(2 * 3 * 16).fill(0.25), { count: 2, length: 3, dim: 16 });
    const f32d = denseBatch(new Float32Array(3 * 4 * 16).fill(0.5), { count: 3, length: 4, dim: 16 });
    assert.throws(
      () => cuda.trainForward(0, f32q, f32d, { pairs: 'all', stride: 3, plan: goodForward }),
      /plan\.kernel.*float32 queries/,
    );
    const simt = { ...goodForward, kernel: 'simt', smem: 0 };
    assert.throws(() => forward({ ...simt, grid: 7 }), /plan\.grid/); // more CTAs than the 6 pairs
    const long = denseBatch(new Float32Array(32768 * 16), { count: 1, length: 32768, dim: 16 });
    assert.throws(
      () => cuda.trainForward(0, f32q, long, { pairs: 'all', stride: 3, plan: { ...simt, grid: 2 } }),
      /plan\.argmax16/,
    );
    assert.throws(
      () =>
        cuda.trainBackward(0, f32q, long, new Int32Array(6), new Float64Array(2), {
          pairs: 'all',
          stride: 3,
          plan: goodBackward,
        }),
      /plan\.argmax16/,
    );
    // the CSR blocks against the problem's lengths: every document, every query, the walk's limit
    const blocks = (b: number[], docs = d, plan = goodBackward) =>
      cuda.trainBackward(0, q, docs, new Int32Array(2 * docs.count * 3), new Float64Array(2 * docs.count), {
        pairs: 'all',
        stride: 3,
        plan: { ...plan, blocks: Int32Array.from(b) },
      });
    assert.throws(() => blocks([2, 1, 2, 1]), /equal to the document count.*plan\.blocks\[0\]/);
    assert.throws(() => blocks([2, 1, 2, 1, 1, 1, 2, 1]), /plan\.blocks\[1\]/); // going back
    assert.throws(() => blocks([3, 1, 3, 1]), /query blocks.*plan\.blocks\[0\]/); // 3 blocks of 1 for 2 queries
    assert.throws(() => blocks([]), /plan\.blocks/);
    const longHalf = denseBatch(encodeFloats(new Float32Array(4000 * 16), 'float16'), {
      count: 1,
      length: 4000,
      dim: 16,
      dtype: 'float16',
    });
    assert.throws(() => blocks([1, 1, 2, 1], longHalf), /byBlock false.*plan\.blocks\[0\]/);
  });
});

describe('selection placement (an explicit internal option, not an environment variable)', () => {
  test('takes auto or host, refuses anything else', () => {
    assert.throws(
      () => setSelectPlacement('device' as 'auto'),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'placement',
    );
    setSelectPlacement('host');
    setSelectPlacement('auto');
  });
});
