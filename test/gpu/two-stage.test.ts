// Device-resident top-K (DeviceCorpus.topK: the selection runs on the GPU worker), the fused two-stage
// top-K (src/ops/two-stage.ts: int8 scan, candidates, exact rescoring through a view of the float
// corpus, all in one job) and the views themselves (corpus.select, spans from the host mirror).
// Skipped with the reason where no GPU runs.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  type DeviceCorpus,
  hitsOfHeaps,
  type JobTimes,
  nativeCuda,
  onJobTimes,
} from '../../src/backends/cuda.js';
import { planSelect } from '../../src/backends/cuda-select-plan.js';
import { referenceMaxsim, referenceTopK } from '../../src/backends/reference.js';
import { encodeFloats } from '../../src/floats.js';
import { topKOfRow } from '../../src/ops/topk.js';
import { twoStageTopK } from '../../src/ops/two-stage.js';
import { setExactGroup, setJobPhases, setSelectPlacement } from '../../src/subpaths/internal.js';
import {
  type FloatDType,
  type Hit,
  matrixAsBatch,
  raggedBatch,
  type TokenBatch,
  tokenMatrix,
} from '../../src/tensor.js';
import { awkwardRow, randomFloats, randomRagged, rng, runSeed, scoreErrorBounds } from '../helpers.js';
import { gpu, nativeHandle, skip } from './helpers.js';

// Lengths with an empty document every `every` items.
function lengthsWithEmpty(rand: () => number, count: number, every: number, max: number): number[] {
  return Array.from({ length: count }, (_, i) => (i % every === 3 ? 0 : 1 + Math.floor(rand() * max)));
}

// The same documents in the same order, scores within `relative` of the expected ones.
function sameHitsWithin(got: Hit[][], want: Hit[][], relative: number, context: string) {
  assert.equal(got.length, want.length, context);
  got.forEach((row, q) => {
    assert.deepStrictEqual(
      row.map((h) => h.index),
      want[q].map((h) => h.index),
      `${context}, query ${q}`,
    );
    row.forEach((h, i) => {
      const w = want[q][i].score;
      assert.ok(
        Math.abs(h.score - w) <= relative * Math.max(1, Math.abs(w)),
        `${context}, query ${q}: ${h.score} vs ${w}`,
      );
    });
  });
}

// The two stages composed from the public pieces (no fused job): the int8 top-c·k per query, the union
// of the candidates through select(), score(), and the top k of each query's candidates in ascending
// document order (exact ties to the lower index).
async function unfusedTwoStage(
  queries: TokenBatch,
  docs: DeviceCorpus,
  docsInt8: DeviceCorpus,
  k: number,
  c: number,
): Promise<Hit[][]> {
  const keep = Math.min(docs.count, Math.ceil(c * k));
  const perQuery = (await docsInt8.topK(queries, keep)).map((hits) => hits.map((h) => h.index));
  const union = [...new Set(perQuery.flat())].sort((a, b) => a - b);
  const column = new Map(union.map((d, i) => [d, i]));
  const view = await docs.select(union);
  try {
    const exact = await view.score(queries);
    return perQuery.map((candidates, i) => {
      const sorted = [...candidates].sort((a, b) => a - b);
      const scores = Float32Array.from(sorted, (d) => exact.data[i * exact.cols + (column.get(d) as number)]);
      return topKOfRow(scores, k).map((h) => ({ index: sorted[h.index], score: h.score }));
    });
  } finally {
    view.dispose();
  }
}

describe('CUDA top-K, two-stage top-K and corpus views', { skip }, () => {
  test('select(): a view scores exactly like the corpus, keeps its memory alive, refuses writes', async () => {
    const rand = rng(runSeed + 201);
    const dev = await gpu();
    const lengths = Array.from({ length: 300 }, (_, i) => (i % 17 === 4 ? 0 : 1 + Math.floor(rand() * 120)));
    const corpus = await dev.upload(randomRagged(lengths, 128, 'float16', rand));
    const queries = randomRagged([32, 9], 128, 'float32', rand);
    const full = await corpus.score(queries);
    const picks = [5, 2, 2, 299, 4, 0];
    const view = await corpus.select(picks);
    assert.equal(view.count, picks.length);
    assert.equal(view.maxLength, Math.max(...picks.map((p) => lengths[p])));
    corpus.dispose(); // the view keeps the tokens alive
    const part = await view.score(queries);
    for (let q = 0; q < 2; q++) {
      picks.forEach((p, j) => {
        assert.ok(
          Object.is(part.data[q * picks.length + j], full.data[q * full.cols + p]),
          `query ${q} pick ${j}`,
        );
      });
    }
    await assert.rejects(view.append(randomRagged([3], 128, 'float16', rand)), /view/);
    await assert.rejects(view.download(), /view/);
    await assert.rejects(view.quantize('int8'), /view/);
    view.dispose();
    const other = await dev.upload(randomRagged([4, 5], 128, 'float16', rand));
    await assert.rejects(other.select([0, 2]), /indices\[1\]/);
    const empty = await other.select([]);
    assert.equal(empty.count, 0);
    empty.dispose();
    other.dispose();
  });

  test('select() spans from the host mirror: appended corpora, quantized corpora, views of views', async () => {
    const rand = rng(runSeed + 203);
    const dev = await gpu();
    const lengths = lengthsWithEmpty(rand, 90, 11, 60);
    const host = randomRagged(lengths, 64, 'float16', rand);
    const tokens = lengths.reduce((a, b) => a + b, 0);
    // three appends, so the mirror grows in pieces
    const grown = await dev.alloc({ dtype: 'float16', dim: 64, tokens: tokens + 10, items: 100 });
    const parts = [
      [0, 30],
      [30, 31],
      [31, 90],
    ];
    for (const [a, b] of parts) {
      const piece = Array.from({ length: b - a }, (_, i) => a + i);
      await grown.append(
        raggedBatch(
          host.data.slice(host.starts[a] * 64, (host.starts[b - 1] + host.lengths[b - 1]) * 64),
          [0, ...piece.map((i) => host.starts[i] + host.lengths[i] - host.starts[a])],
          { dim: 64, dtype: 'float16' },
        ),
      );
    }
    const i8 = await grown.quantize('int8');
    const queries = randomRagged([17, 3], 64, 'float32', rand);
    const picks = [89, 0, 3, 45, 30, 30, 14, 88];
    for (const [name, corpus] of [
      ['appended', grown],
      ['quantized', i8],
    ] as const) {
      const full = await corpus.score(queries);
      const view = await corpus.select(picks);
      const viewOfView = await view.select([7, 0, 2]); // picks[7], picks[0], picks[2]
      const part = await view.score(queries);
      const part2 = await viewOfView.score(queries);
      const inner = [7, 0, 2];
      for (let q = 0; q < 2; q++) {
        for (let j = 0; j < picks.length; j++)
          assert.ok(
            Object.is(part.data[q * picks.length + j], full.data[q * full.cols + picks[j]]),
            `${name} ${q} ${j}`,
          );
        for (let m = 0; m < inner.length; m++)
          assert.ok(
            Object.is(part2.data[q * 3 + m], full.data[q * full.cols + picks[inner[m]]]),
            `${name} view ${q} ${m}`,
          );
      }
      assert.equal(view.maxLength, Math.max(...picks.map((p) => lengths[p])));
      viewOfView.dispose();
      view.dispose();
    }
    i8.dispose();
    grown.dispose();
  });

  test('topK (selected on the GPU worker) equals topKOfRow over score(), any k, empty documents', async () => {
    const rand = rng(runSeed + 204);
    const dev = await gpu();
    const lengths = lengthsWithEmpty(rand, 700, 13, 90);
    const f16 = await dev.upload(randomRagged(lengths, 128, 'float16', rand));
    const i8 = await f16.quantize('int8');
    try {
      const queries = randomRagged([32, 9, 1, 0, 40], 128, 'float32', rand);
      for (const [name, corpus] of [
        ['float16', f16],
        ['int8', i8],
      ] as const) {
        const s = await corpus.score(queries);
        for (const k of [0, 1, 10, 64, 699, 700, 705]) {
          const want = Array.from({ length: s.rows }, (_, q) => topKOfRow(s.data, k, q * s.cols, s.cols));
          assert.deepStrictEqual(await corpus.topK(queries, k), want, `${name} k ${k}`);
        }
      }
      const one = tokenMatrix(encodeFloats(randomFloats(32 * 128, rand), 'float32'), 32, 128);
      const row = await f16.score(one);
      // one query (a matrix): one list, as the root topK; the same query as a batch of one: one row
      assert.deepStrictEqual(await f16.topK(one, 10), topKOfRow(row, 10));
      assert.deepStrictEqual(await f16.topK(matrixAsBatch(one), 10), [topKOfRow(row, 10)]);
      assert.deepStrictEqual(await i8.topK(one, 10), (await i8.topK(matrixAsBatch(one), 10))[0]);
      assert.deepStrictEqual(
        await i8.topK(one, 5, { rescore: { docs: f16, candidates: 20 } }),
        (await i8.topK(matrixAsBatch(one), 5, { rescore: { docs: f16, candidates: 20 } }))[0],
      );
      assert.deepStrictEqual(await f16.topK(one, 0), []);
      const none = await dev.alloc({ dtype: 'float16', dim: 128, tokens: 0, items: 0 });
      assert.deepStrictEqual(await none.topK(queries, 3), [[], [], [], [], []]);
      none.dispose();
      await assert.rejects(f16.topK(queries, -1), /k/);
    } finally {
      i8.dispose();
      f16.dispose();
    }
  });

  test('two-stage top-10 on device corpora equals the exact top-10 of the float corpus', async () => {
    const rand = rng(runSeed + 202);
    const dev = await gpu();
    const lengths = Array.from({ length: 3000 }, (_, i) => (i % 29 === 7 ? 0 : 8 + Math.floor(rand() * 200)));
    const f16 = await dev.upload(randomRagged(lengths, 128, 'float16', rand));
    const i8 = await f16.quantize('int8');
    try {
      const queries = randomRagged([32, 32, 5, 1], 128, 'float32', rand);
      const exact = await f16.topK(queries, 10);
      const two = await twoStageTopK(queries, f16, i8, 10);
      assert.deepEqual(
        two.map((r) => r.map((h) => [h.index, h.score])),
        exact.map((r) => r.map((h) => [h.index, h.score])),
      );
      await assert.rejects(twoStageTopK(queries, i8, f16, 10), /docsInt8\.dtype/);
    } finally {
      i8.dispose();
      f16.dispose();
    }
  });

  test('the fused two-stage job returns the hits of the unfused composition (every float dtype, k > corpus)', async () => {
    const rand = rng(runSeed + 205);
    const dev = await gpu();
    for (const dtype of ['float16', 'bfloat16', 'float32'] as FloatDType[]) {
      for (const [count, cases] of [
        [
          1500,
          [
            [10, 4],
            [1, 1],
            [25, 2.5],
          ],
        ],
        [
          40,
          [
            [50, 4],
            [40, 1],
            [7, 10],
          ],
        ],
      ] as Array<[number, Array<[number, number]>]>) {
        const lengths = lengthsWithEmpty(rand, count, 7, 150);
        const docs = await dev.upload(randomRagged(lengths, 128, dtype, rand));
        const docsInt8 = await docs.quantize('int8');
        try {
          const queries = randomRagged([32, 9, 1, 0, 32, 64], 128, 'float32', rand);
          for (const [k, c] of cases) {
            const context = `${dtype}, ${count} documents, k ${k}, c ${c}`;
            const fused = await twoStageTopK(queries, docs, docsInt8, k, { candidateFactor: c });
            const unfused = await unfusedTwoStage(queries, docs, docsInt8, k, c);
            assert.deepStrictEqual(fused, unfused, context);
            const n = Math.min(k, count, Math.ceil(c * k));
            for (const row of fused) assert.equal(row.length, n, context);
          }
          assert.deepStrictEqual(await twoStageTopK(queries, docs, docsInt8, 0), [[], [], [], [], [], []]);
        } finally {
          docsInt8.dispose();
          docs.dispose();
        }
      }
    }
  });

  test('the fused two-stage job agrees with the float64 reference where the top k is well separated', async () => {
    const rand = rng(runSeed + 206);
    const dev = await gpu();
    const d = 128;
    const count = 2000;
    const queryLengths = [32, 9, 1];
    const queries32 = randomFloats(queryLengths.reduce((a, b) => a + b, 0) * d, rand);
    const qOffsets = [0];
    for (const l of queryLengths) qOffsets.push(qOffsets[qOffsets.length - 1] + l);
    // Query q's planted documents hold its tokens scaled by 1 - 0.03 j (j = 0..11) among random ones:
    // they score s_j * sum |q_i|^2, far above each other and above every random document, so the
    // exact top 10 has no near-ties and the int8 scan ranks them first too.
    const lengths = lengthsWithEmpty(rand, count, 23, 100);
    const planted = new Map<number, [number, number]>();
    for (let q = 0; q < queryLengths.length; q++) {
      for (let j = 0; j < 12; j++) {
        let b: number;
        do b = Math.floor(rand() * count);
        while (planted.has(b) || lengths[b] === 0);
        planted.set(b, [q, j]);
        lengths[b] = Math.max(lengths[b], queryLengths[q] + 5);
      }
    }
    const offsets = [0];
    for (const l of lengths) offsets.push(offsets[offsets.length - 1] + l);
    const values = randomFloats(offsets[count] * d, rand);
    for (const [b, [q, j]] of planted) {
      const s = 1 - 0.03 * j;
      for (let i = 0; i < queryLengths[q]; i++)
        for (let x = 0; x < d; x++)
          values[(offsets[b] + 2 + i) * d + x] = s * queries32[(qOffsets[q] + i) * d + x];
    }
    const host = raggedBatch(encodeFloats(values, 'float16'), offsets, { dim: d, dtype: 'float16' });
    const queries = raggedBatch(queries32, qOffsets, { dim: d });
    // the GPU scores float16 queries: the reference takes the same rounded values
    const queries16 = raggedBatch(encodeFloats(queries32, 'float16'), qOffsets, { dim: d, dtype: 'float16' });
    const ref = referenceMaxsim(queries16, host);
    const bounds = scoreErrorBounds(queries16, host).map((b) => b * 4); // tensor-core accumulation
    const f16 = await dev.upload(host);
    const i8 = await f16.quantize('int8');
    try {
      for (const k of [10, 3]) {
        const got = await twoStageTopK(queries, f16, i8, k);
        for (let q = 0; q < queryLengths.length; q++) {
          const row = ref.subarray(q * count, (q + 1) * count);
          const want = referenceTopK(row, k + 1);
          for (let j = 0; j < k; j++) {
            // the precondition of the test: the reference ranks are far apart
            assert.ok(
              want[j].score - want[j + 1].score > 4 * bounds[q * count + want[j].index],
              `gap ${q} ${j}`,
            );
          }
          assert.deepStrictEqual(
            got[q].map((h) => h.index),
            want.slice(0, k).map((h) => h.index),
            `query ${q}, k ${k}`,
          );
          got[q].forEach((h, j) => {
            const b = bounds[q * count + h.index] + Math.abs(want[j].score) * 2 ** -23;
            assert.ok(
              Math.abs(h.score - want[j].score) <= b,
              `query ${q} hit ${j}: ${h.score} vs ${want[j].score}`,
            );
          });
        }
      }
      // k above the corpus: every document, exact scores within the bound, -Infinity last by index
      const small = await dev.upload(
        raggedBatch(host.data.slice(0, offsets[30] * d), offsets.slice(0, 31), { dim: d, dtype: 'float16' }),
      );
      const small8 = await small.quantize('int8');
      try {
        const all = await twoStageTopK(queries, small, small8, 45);
        const smallRef = referenceMaxsim(
          queries16,
          raggedBatch(host.data.slice(0, offsets[30] * d), offsets.slice(0, 31), {
            dim: d,
            dtype: 'float16',
          }),
        );
        for (let q = 0; q < queryLengths.length; q++) {
          assert.deepStrictEqual(
            [...all[q].map((h) => h.index)].sort((a, b) => a - b),
            Array.from({ length: 30 }, (_, i) => i),
          );
          for (let j = 0; j < all[q].length; j++) {
            const h = all[q][j];
            const r = smallRef[q * 30 + h.index];
            if (r === Number.NEGATIVE_INFINITY) assert.equal(h.score, r);
            else
              assert.ok(
                Math.abs(h.score - r) <= bounds[q * count + h.index] + Math.abs(r) * 2 ** -23,
                `small ${q} ${j}`,
              );
            if (j > 0) {
              const p = all[q][j - 1];
              assert.ok(p.score > h.score || (p.score === h.score && p.index < h.index), `order ${q} ${j}`);
            }
          }
        }
      } finally {
        small8.dispose();
        small.dispose();
      }
    } finally {
      i8.dispose();
      f16.dispose();
    }
  });

  test('topK with rescore: argument errors name the argument', async () => {
    const rand = rng(runSeed + 207);
    const dev = await gpu();
    const a = await dev.upload(randomRagged([5, 6, 7], 32, 'float16', rand));
    const b = await dev.upload(randomRagged([5, 6], 32, 'float16', rand));
    const a8 = await a.quantize('int8');
    const q = randomRagged([4], 32, 'float32', rand);
    try {
      await assert.rejects(a8.topK(q, 2, { rescore: { docs: b, candidates: 2 } }), /options\.rescore\.docs/);
      await assert.rejects(
        a8.topK(q, 2, { rescore: { docs: {} as DeviceCorpus, candidates: 2 } }),
        /options\.rescore\.docs/,
      );
      await assert.rejects(
        a8.topK(q, 2, { rescore: { docs: a, candidates: 1.5 } }),
        /options\.rescore\.candidates/,
      );
      const hits = await a8.topK(q, 2, { rescore: { docs: a, candidates: 3 } });
      assert.deepStrictEqual(hits, await a.topK(q, 2));
    } finally {
      a8.dispose();
      b.dispose();
      a.dispose();
    }
  });

  test('the device selection ranks like topKOfRow: ties, -0, -Infinity, NaN rows, every level, keep past its limit', async () => {
    const rand = rng(runSeed + 208);
    const dev = nativeHandle(await gpu());
    const native = nativeCuda();
    // [rows, cols, k]: one chunk, the chunk edge, two levels, three levels (keep 256 of 300,000), and
    // keeps past the device limit of 256 (host heaps)
    const shapes: Array<[number, number, number]> = [
      [1, 1, 1],
      [3, 5, 5],
      [2, 2048, 10],
      [2, 2049, 10],
      [4, 4096, 1],
      [3, 100_000, 40],
      // the streaming first level (rows past one chunk): its span edge (a last span of one score,
      // shorter than keep), the widest keep of each entry point, many rows
      [3, 4097, 10],
      [2, 8193, 64],
      [2, 20_000, 64],
      [2, 9000, 65],
      [130, 12_000, 10],
      [2, 300_000, 256],
      [1, 300_000, 257],
      [2, 5000, 1024],
    ];
    for (let trial = 0; trial < 60; trial++) {
      const cols = 1 + Math.floor(rand() * (trial < 30 ? 300 : 6000));
      shapes.push([1 + Math.floor(rand() * 3), cols, Math.floor(rand() * Math.min(cols + 5, 300))]);
    }
    for (const [i, [rows, cols, k]] of shapes.entries()) {
      const data = new Float32Array(rows * cols);
      // a NaN in every other row on odd shapes: those rows go through the host heap
      for (let r = 0; r < rows; r++) data.set(awkwardRow(rand, cols, i % 2 === 1 && r % 2 === 0), r * cols);
      const n = Math.min(k, cols);
      // the plan the jobs go by (cuda-select-plan.ts), then the host heaps for the same rows
      const where = planSelect({ rows, cols, keep: n }, native.selectKernelInfo);
      const context = `${rows} x ${cols}, k ${k}`;
      assert.equal(where, n >= 1 && n <= 256 ? 'device' : 'host', `${context}: planned on the device`);
      const want = Array.from({ length: rows }, (_, r) => topKOfRow(data, k, r * cols, cols));
      for (const select of new Set([where, 'host' as const])) {
        const got = await native.internal.deviceTopK(dev, data, cols, k, select);
        assert.deepStrictEqual(hitsOfHeaps(got, rows), want, `${context}, ${select}`);
        assert.equal(got.onDevice, select === 'device', `${context}: selected on the device`);
      }
    }
    assert.throws(() => native.internal.deviceTopK(dev, new Float32Array(10), 3, 1, 'host'), /cols/);
    assert.throws(
      () => native.internal.deviceTopK(dev, new Float32Array(10), 5, 1, 'gpu' as never),
      /select/,
    );
    // a 'device' choice past the limits (keep 257) is refused by the job, naming the argument
    await assert.rejects(
      native.internal.deviceTopK(dev, new Float32Array(300), 300, 257, 'device'),
      /select/,
    );
  });

  test('the fused two-stage job past one selection chunk, with the whole corpus rescored, past the device keep limit', async () => {
    const rand = rng(runSeed + 209);
    const dev = await gpu();
    // duplicated documents make exact ties in both stages, across selection chunks
    const base = randomRagged(lengthsWithEmpty(rand, 700, 11, 40), 64, 'float16', rand);
    const order = Array.from({ length: 3000 }, () => Math.floor(rand() * base.count));
    const lengths = order.map((b) => base.lengths[b]);
    const data = new Uint16Array(lengths.reduce((a, l) => a + l, 0) * 64);
    let at = 0;
    for (const b of order) {
      const from = base.starts[b] * 64;
      data.set((base.data as Uint16Array).subarray(from, from + base.lengths[b] * 64), at);
      at += base.lengths[b] * 64;
    }
    const offsets = [0];
    for (const l of lengths) offsets.push(offsets[offsets.length - 1] + l);
    const docs = await dev.upload(raggedBatch(data, offsets, { dim: 64, dtype: 'float16' }));
    const docsInt8 = await docs.quantize('int8');
    try {
      const queries = randomRagged(
        [32, 9, 1, 32, 20, 3, 32, 8, 1, 5, 32, 32, 7, 2, 16, 32],
        64,
        'float32',
        rand,
      );
      // [k, c] over 3,000 documents (two selection chunks): 16 queries x 40 candidates (a view of each
      // query's candidates), 16 x 256 >= 3,000 (the whole corpus rescored), 400 candidates (past the
      // device limit: host selection, the union rescored)
      // and the exact stage in groups of queries (the plan's, one launch, 1, 3 and 7: a short last
      // group), each against its own queries' candidates or the whole corpus
      for (const [k, c, group] of [
        [10, 4, 'auto'],
        [64, 4, 'auto'],
        [100, 4, 'auto'],
        [1, 1, 'auto'],
        [10, 4, 1],
        [10, 4, 3],
        [10, 4, 7],
        [10, 4, 16],
        [64, 4, 3],
        [100, 4, 5],
        [3, 2, 7],
      ] as const) {
        const context = `k ${k}, c ${c}, exact group ${group}`;
        setExactGroup(group);
        try {
          const fused = await twoStageTopK(queries, docs, docsInt8, k, { candidateFactor: c });
          const unfused = await unfusedTwoStage(queries, docs, docsInt8, k, c);
          // a group's launch is planned for fewer queries than the unfused score() of all of them: another
          // variant may sum in another order (the same hits, scores within a few ulps)
          if (group === 'auto') assert.deepStrictEqual(fused, unfused, context);
          else sameHitsWithin(fused, unfused, 1e-5, context);
          // every selection planned on the host (setSelectPlacement): the same hits, for topK too
          const planned = await docs.topK(queries, k);
          setSelectPlacement('host');
          try {
            const host = await twoStageTopK(queries, docs, docsInt8, k, { candidateFactor: c });
            assert.deepStrictEqual(host, fused, `${context}, host selection`);
            assert.deepStrictEqual(await docs.topK(queries, k), planned, `${context}: topK, host selection`);
          } finally {
            setSelectPlacement('auto');
          }
        } finally {
          setExactGroup('auto');
        }
      }
    } finally {
      docsInt8.dispose();
      docs.dispose();
    }
  });

  test('onJobTimes: score, topK and twoStage jobs report their handoff (in, run, out), the results unchanged', async () => {
    const rand = rng(runSeed + 211);
    const dev = await gpu();
    const docs = await dev.upload(randomRagged(lengthsWithEmpty(rand, 300, 9, 50), 64, 'float16', rand));
    const docsInt8 = await docs.quantize('int8');
    const queries = randomRagged([20, 7, 32], 64, 'float32', rand);
    const seen: Array<[string, JobTimes]> = [];
    const calls = async () => [
      await docs.score(queries),
      await docs.topK(queries, 10),
      await twoStageTopK(queries, docs, docsInt8, 10),
    ];
    try {
      const plain = await calls();
      onJobTimes((job, times) => seen.push([job, times]));
      assert.deepStrictEqual(await calls(), plain);
    } finally {
      onJobTimes(undefined);
      docsInt8.dispose();
      docs.dispose();
    }
    assert.deepStrictEqual(
      seen.map(([job]) => job),
      ['score', 'topK', 'twoStage'],
    );
    for (const [job, times] of seen) {
      for (const part of ['inUs', 'runUs', 'outUs'] as const) {
        const us = times.handoff?.[part];
        assert.ok(typeof us === 'number' && us >= 0 && us < 60e6, `${job} ${part}: ${us}`);
      }
      assert.equal(times.phases, undefined, `${job}: no phases unless setJobPhases`);
    }
  });

  test('setJobPhases (maxsim/internal): the same hits with each phase timed, and the phases printed', async () => {
    const rand = rng(runSeed + 210);
    const dev = await gpu();
    const docs = await dev.upload(randomRagged(lengthsWithEmpty(rand, 400, 9, 50), 64, 'float16', rand));
    const docsInt8 = await docs.quantize('int8');
    const queries = randomRagged([20, 7, 32], 64, 'float32', rand);
    const printed: string[] = [];
    const error = console.error;
    try {
      const plainTopK = await docs.topK(queries, 10);
      const plainTwoStage = await twoStageTopK(queries, docs, docsInt8, 10);
      setJobPhases(true);
      console.error = (line: unknown) => printed.push(String(line));
      assert.deepStrictEqual(await docs.topK(queries, 10), plainTopK);
      assert.deepStrictEqual(await twoStageTopK(queries, docs, docsInt8, 10), plainTwoStage);
    } finally {
      console.error = error;
      setJobPhases(false);
      docsInt8.dispose();
      docs.dispose();
    }
    assert.equal(printed.length, 2, printed.join('\n'));
    // the device selection reports its kernel and the read-back apart, the host heaps as one phase
    assert.match(
      printed[0],
      /^topK phases ms: queries [0-9.]+ fill [0-9.]+ scan [0-9.]+ (select|selectKernel [0-9.]+ readBack) [0-9.]+$/,
    );
    assert.match(printed[1], /^twoStage phases ms: queries [0-9.]+ scan [0-9.]+ scanSelect [0-9.]+ /);
  });
});
