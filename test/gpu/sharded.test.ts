// A corpus sharded across GPUs (cuda({ devices })) against the same corpus on one GPU: scores and
// top-K bitwise, two-stage hits, uneven and empty shards, appends, dispose, and a failed GPU. On a
// one-GPU host the shards share device 0 (the merge logic is the same); MAXSIM_TEST_DEVICES=0,1 picks.
// Skipped with the reason where no GPU runs.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { cuda } from '../../src/backends/cuda.js';
import { balancedCuts, type CudaDeviceGroup } from '../../src/backends/cuda-device-group.js';
import { type Hit, raggedBatch, type TokenBatch } from '../../src/tensor.js';
import { randomRagged, rng, runSeed } from '../helpers.js';
import { gpu, skip, status } from './helpers.js';

const deviceCount = status.devices?.length ?? 0;
const devices: number[] = process.env.MAXSIM_TEST_DEVICES
  ? process.env.MAXSIM_TEST_DEVICES.split(',').map(Number)
  : deviceCount >= 2
    ? Array.from({ length: deviceCount }, (_, i) => i)
    : [0, 0];

function sameBits(got: Float32Array, want: Float32Array, what: string) {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < got.length; i++)
    if (!Object.is(got[i], want[i])) assert.fail(`${what}[${i}]: ${got[i]} vs one GPU ${want[i]}`);
}

function sameHits(got: Hit[][], want: Hit[][], what: string) {
  assert.equal(got.length, want.length);
  got.forEach((hits, q) => {
    assert.deepEqual(
      hits.map((h) => h.index),
      want[q].map((h) => h.index),
      `${what}: query ${q} indices`,
    );
    hits.forEach((h, j) => {
      assert.ok(
        Object.is(h.score, want[q][j].score),
        `${what}: query ${q} hit ${j}: ${h.score} vs ${want[q][j].score}`,
      );
    });
  });
}

function lengthsOf(rand: () => number, n: number, max: number): number[] {
  return Array.from({ length: n }, (_, i) => (i % 23 === 7 ? 0 : 1 + Math.floor(rand() * max)));
}

describe('balancedCuts', () => {
  test('contiguous runs with even token counts; empty runs where items are few', () => {
    assert.deepEqual(balancedCuts([10, 10, 10, 10], 2), [0, 2, 4]);
    assert.deepEqual(balancedCuts([100, 1, 1, 1], 2), [0, 1, 4]);
    assert.deepEqual(balancedCuts([5], 3), [0, 0, 1, 1]);
    assert.deepEqual(balancedCuts([], 2), [0, 0, 0]);
  });
});

describe(`CUDA sharded corpus (devices ${devices.join(',')})`, { skip }, () => {
  let group: CudaDeviceGroup;
  const open = async () => {
    group ??= await cuda({ devices });
    return group;
  };

  for (const dtype of ['float16', 'bfloat16'] as const) {
    test(`${dtype}: scores, single-query scores and top-K equal one GPU bitwise (ragged, empty documents)`, async () => {
      const rand = rng(runSeed + 11);
      const one = await gpu();
      const g = await open();
      const docs = randomRagged(lengthsOf(rand, 700, 300), 128, dtype, rand);
      const single = await one.upload(docs);
      const sharded = await g.upload(docs);
      assert.equal(sharded.count, docs.count);
      assert.equal(sharded.shards.length, devices.length);
      assert.equal(
        sharded.shards.reduce((s, x) => s + x.count, 0),
        docs.count,
      );
      for (const [nq, lq] of [
        [1, 32],
        [7, 19],
        [40, 32],
      ]) {
        const queries = randomRagged(
          Array.from({ length: nq }, () => 1 + Math.floor(rand() * lq)),
          128,
          'float32',
          rand,
        );
        sameBits(
          (await sharded.score(queries)).data,
          (await single.score(queries)).data,
          `scores ${nq}x${lq}`,
        );
        for (const k of [1, 10, 1000])
          sameHits(await sharded.topK(queries, k), await single.topK(queries, k), `top-${k}`);
      }
      const q1 = randomRagged([32], 128, 'float32', rand);
      const m = { kind: 'matrix' as const, dtype: 'float32' as const, data: q1.data, length: 32, dim: 128 };
      sameBits(await sharded.score(m), await single.score(m), 'one query');
      // one query (a matrix): one list, as the root topK; a batch of one: a list of one list
      const oneHits = await sharded.topK(m, 7);
      assert.ok(!Array.isArray(oneHits[0]), 'a matrix gives one list of hits');
      sameHits([oneHits], [await single.topK(m, 7)], 'one query, top-7');
      sameHits([oneHits], await sharded.topK(q1, 7), 'one query = a batch of one');
      single.dispose();
      sharded.dispose();
    });
  }

  test('two-stage (sharded int8 scan + sharded float16 rescoring) gives one GPU its hits', async () => {
    const rand = rng(runSeed + 12);
    const one = await gpu();
    const g = await open();
    const docs = randomRagged(lengthsOf(rand, 900, 128), 128, 'float16', rand);
    const single = await one.upload(docs);
    const singleInt8 = await single.quantize('int8');
    const sharded = await g.upload(docs);
    const shardedInt8 = await sharded.quantize('int8');
    const queries = randomRagged([32, 32, 17, 32], 128, 'float32', rand);
    for (const [k, c] of [
      [10, 40],
      [5, 5],
      [20, 2000],
    ]) {
      const want = await singleInt8.topK(queries, k, { rescore: { docs: single, candidates: c } });
      const got = await shardedInt8.topK(queries, k, { rescore: { docs: sharded, candidates: c } });
      got.forEach((hits, q) => {
        assert.deepEqual(
          hits.map((h) => h.index),
          want[q].map((h) => h.index),
          `k ${k} c ${c} query ${q}`,
        );
        hits.forEach((h, j) => {
          assert.ok(
            Math.abs(h.score - want[q][j].score) <= 1e-5 * Math.abs(want[q][j].score) + 1e-6,
            `score ${j}`,
          );
        });
      });
    }
    await assert.rejects(
      shardedInt8.topK(queries, 3, { rescore: { docs: single as never, candidates: 10 } }),
      /ShardedCorpus of the same documents/,
    );
    for (const c of [single, singleInt8, sharded, shardedInt8]) c.dispose();
  });

  test('uneven shards: one document, none, and a GPU without documents', async () => {
    const rand = rng(runSeed + 13);
    const one = await gpu();
    const g = await open();
    const queries = randomRagged([32, 5], 64, 'float32', rand);
    for (const lengths of [[40], [], [0, 0, 3]]) {
      const docs = randomRagged(lengths, 64, 'float16', rand);
      const sharded = await g.upload(docs);
      const single = await one.upload(docs);
      assert.ok(sharded.shards.some((s) => s.count === 0) || lengths.length >= devices.length);
      sameBits((await sharded.score(queries)).data, (await single.score(queries)).data, `lengths ${lengths}`);
      sameHits(await sharded.topK(queries, 4), await single.topK(queries, 4), `lengths ${lengths}`);
      sharded.dispose();
      single.dispose();
    }
  });

  test('appends land on every GPU and score like one GPU; views select across shards', async () => {
    const rand = rng(runSeed + 14);
    const one = await gpu();
    const g = await open();
    const sharded = await g.alloc({ dtype: 'float16', dim: 128, tokens: 40_000, items: 400 });
    const batches: TokenBatch[] = [];
    for (let i = 0; i < 2 * devices.length; i++) {
      const b = randomRagged(lengthsOf(rand, 50, 100), 128, 'float16', rand);
      batches.push(b);
      await sharded.append(b);
    }
    assert.ok(
      sharded.shards.every((s) => s.count > 0),
      `every GPU got documents: ${JSON.stringify(sharded.shards)}`,
    );
    // the same documents, in append order, on one GPU
    const lengths = batches.flatMap((b) => Array.from(b.lengths));
    const data = new Uint16Array(lengths.reduce((s, l) => s + l, 0) * 128);
    let at = 0;
    for (const b of batches)
      for (let i = 0; i < b.count; i++) {
        const n = b.lengths[i] * 128;
        data.set((b.data as Uint16Array).subarray(b.starts[i] * 128, b.starts[i] * 128 + n), at);
        at += n;
      }
    const offsets = [0];
    for (const l of lengths) offsets.push(offsets[offsets.length - 1] + l);
    const single = await one.upload(raggedBatch(data, offsets, { dim: 128, dtype: 'float16' }));
    const queries = randomRagged([32, 11, 32], 128, 'float32', rand);
    sameBits((await sharded.score(queries)).data, (await single.score(queries)).data, 'appended');
    sameHits(await sharded.topK(queries, 25), await single.topK(queries, 25), 'appended');
    const picks = [199, 3, 3, 0, 150, 77, 101];
    const view = await sharded.select(picks);
    const singleView = await single.select(picks);
    sameBits((await view.score(queries)).data, (await singleView.score(queries)).data, 'view');
    sameHits(await view.topK(queries, 4), await singleView.topK(queries, 4), 'view');
    await assert.rejects(view.append(batches[0]), /select/);
    await assert.rejects(sharded.select([sharded.count]), /indices\[0\]/);
    const big = randomRagged([30_000], 128, 'float16', rand);
    await assert.rejects(sharded.append(big), /remaining room/);
    for (const c of [view, singleView, sharded, single]) c.dispose();
  });

  test('dispose frees memory on every GPU', async () => {
    const rand = rng(runSeed + 15);
    const g = await open();
    const before = await g.memory();
    const sharded = await g.upload(randomRagged(lengthsOf(rand, 2000, 256), 128, 'float16', rand));
    const during = await g.memory();
    assert.ok(during.every((m, i) => m.inUse > before[i].inUse));
    sharded.dispose();
    assert.ok(sharded.disposed);
    const after = await g.memory();
    after.forEach((m, i) => {
      assert.equal(m.inUse, before[i].inUse, `GPU ${devices[i]}`);
    });
    await assert.rejects(sharded.score(randomRagged([4], 128, 'float32', rand)), /disposed/);
  });

  test('a failed GPU fails the call with the device named', async () => {
    const rand = rng(runSeed + 16);
    const g = await cuda({ devices });
    const sharded = await g.upload(randomRagged(lengthsOf(rand, 200, 64), 128, 'float16', rand));
    const last = g.devices[g.devices.length - 1];
    last.dispose(); // its shard goes with it
    await assert.rejects(
      sharded.score(randomRagged([4], 128, 'float32', rand)),
      new RegExp(`GPU ${last.info.index} \\(`),
    );
    g.dispose();
  });

  test('bad arguments: devices, dims, k', async () => {
    await assert.rejects(cuda({ devices: [deviceCount] }), /devices\[0\]/);
    await assert.rejects(cuda({ devices: [] }), /devices/);
    const g = await open();
    const sharded = await g.upload(randomRagged([3, 4], 16, 'float16', rng(runSeed + 17)));
    await assert.rejects(sharded.score(randomRagged([2], 8, 'float32', rng(1))), /queries\.dim/);
    await assert.rejects(sharded.topK(randomRagged([2], 16, 'float32', rng(1)), -1), /k/);
    assert.equal(sharded.failure, undefined, 'argument errors do not fail a GPU');
    sharded.dispose();
  });
});
