// Device memory life cycle and error handling of the CUDA engine: dispose / finalizers / caching
// allocator accounting, use after dispose, bad launches rejected with named messages, bench timing,
// appending to a preallocated corpus. Without a GPU every test skips with the reason.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { benchKernel, nativeCuda } from '../../src/backends/cuda.js';
import { InvalidArgumentError } from '../../src/errors.js';
import { quantize } from '../../src/ops/quantize.js';
import { randomRagged, rng, runSeed } from '../helpers.js';
import { checkScores, gpu, skip } from './helpers.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe(`CUDA device memory and errors (seed ${runSeed})`, { skip }, () => {
  test('device info names the GPU, its limits and the loaded kernels', async () => {
    const dev = await gpu();
    const info = dev.info;
    assert.ok(info.name.length > 0);
    assert.ok(info.sms > 0 && info.totalMemory > 0 && info.freeMemory > 0 && info.smemOptin >= 48 * 1024);
    assert.deepEqual(info.moduleErrors, [], `fatbins that failed to load: ${info.moduleErrors.join('; ')}`);
    if (info.kernels.length > 0)
      assert.ok(
        info.kernels.some((k) => k.startsWith('maxsim_simt_')),
        `kernels: ${info.kernels.join(', ')}`,
      );
  });

  test('dispose returns memory to the cache, emptyCache to the driver; double dispose is a no-op', async () => {
    const dev = await gpu();
    const rand = rng(runSeed + 1);
    const before = await dev.memory();
    const corpus = await dev.upload(randomRagged([1000, 2000, 0, 3000], 256, 'float16', rand));
    const during = await dev.memory();
    assert.ok(
      during.inUse >= before.inUse + 6000 * 256 * 2,
      `inUse ${during.inUse} after a 3 MB upload (was ${before.inUse})`,
    );
    assert.ok(during.peak >= during.inUse);
    corpus.dispose();
    corpus.dispose();
    assert.equal(corpus.disposed, true);
    const after = await dev.memory();
    assert.equal(after.inUse, before.inUse);
    assert.ok(after.cached >= during.inUse - before.inUse);
    const emptied = await dev.emptyCache();
    assert.equal(emptied.cached, 0);
  });

  test('a corpus dropped without dispose is freed by its finalizer', async (t) => {
    const gc = (globalThis as { gc?: () => void }).gc;
    if (!gc) {
      t.skip('needs node --expose-gc (scripts/gpu.sh check passes it)');
      return;
    }
    const dev = await gpu();
    const before = await dev.memory();
    await (async () => {
      await dev.upload(randomRagged([4096], 1024, 'float32', rng(runSeed + 2)));
    })();
    let now = await dev.memory();
    for (let i = 0; i < 50 && now.inUse > before.inUse; i++) {
      gc();
      await sleep(20);
      now = await dev.memory();
    }
    assert.equal(now.inUse, before.inUse, 'the finalizer returned the 16 MB corpus');
  });

  test('use after dispose throws a clear error; dispose while a score is queued is safe', async () => {
    const dev = await gpu();
    const rand = rng(runSeed + 3);
    const docs = randomRagged([50, 60, 70], 64, 'float16', rand);
    const queries = randomRagged([32], 64, 'float16', rand);
    const corpus = await dev.upload(docs);
    const pending = corpus.score(queries);
    corpus.dispose();
    checkScores((await pending).data, queries, docs, 4, 'score queued before dispose');
    await assert.rejects(
      corpus.score(queries),
      (e: Error) => e instanceof InvalidArgumentError && /disposed/.test(e.message),
    );
    const native = nativeCuda();
    const handle = native.open(dev.info.index);
    assert.throws(
      () =>
        native.score(handle, queries, corpus.native, {
          kernel: 'maxsim_simt_f16',
          grid: [3, 1, 1],
          block: [128, 1, 1],
          smem: 0,
        }),
      (e: Error) => e instanceof TypeError && /disposed/.test(e.message),
    );
  });

  test('bad launches are rejected with the argument named, never crash', async () => {
    const dev = await gpu();
    const native = nativeCuda();
    const handle = native.open(dev.info.index);
    const rand = rng(runSeed + 4);
    const docs = await dev.upload(randomRagged([10, 20], 64, 'float16', rand));
    const queries = randomRagged([8], 64, 'float16', rand);
    const ok = {
      kernel: 'maxsim_simt_f16',
      grid: [2, 1, 1] as [number, number, number],
      block: [128, 1, 1] as [number, number, number],
      smem: 0,
    };
    try {
      assert.equal((await native.score(handle, queries, docs.native, ok)).length, 2);
      await assert.rejects(
        native.score(handle, queries, docs.native, { ...ok, kernel: 'no_such_kernel' }),
        /Expected the name of a kernel .* but received 'no_such_kernel'/,
      );
      await assert.rejects(
        native.score(handle, queries, docs.native, { ...ok, block: [2048, 1, 1] }),
        /launch\.block\.x|threads per block/,
      );
      await assert.rejects(
        native.score(handle, queries, docs.native, { ...ok, smem: 1 << 29 }),
        /launch\.smem/,
      );
      assert.throws(
        () => native.score(handle, queries, docs.native, { ...ok, grid: [0, 1, 1] }),
        /Expected an integer in \[1, 2147483647\] for launch\.grid\[0\] but received 0/,
      );
      assert.throws(
        () => native.score(handle, queries, docs.native, { ...ok, dtype: 'bfloat16' }),
        /for docs\.dtype but received 'float16'/,
      );
      assert.throws(
        () => native.score(handle, randomRagged([8], 32, 'float16', rand), docs.native, ok),
        /for queries\.dim but received 32/,
      );
      // (float32 host queries are taken: the job converts them to the corpus's float16 on the GPU)
      assert.throws(
        () => native.score(handle, quantize(randomRagged([8], 64, 'float32', rand), 'int8'), docs.native, ok),
        /for queries\.dtype but received 'int8'/,
      );
      assert.throws(() => native.score(handle, queries, queries as never, ok), /Expected a device token set/);
      assert.throws(() => native.open(1 << 16), /Expected a CUDA device index/);
      // a tensor-core variant forced onto a dim it does not support is refused before any launch
      const odd = await dev.upload(randomRagged([10], 100, 'float16', rand));
      try {
        await assert.rejects(
          odd.score(randomRagged([4], 100, 'float16', rand), { variant: 'maxsim_mma_g1_f16' }),
          InvalidArgumentError,
        );
      } finally {
        odd.dispose();
      }
      // the TMA launch contract: a tensor-map kernel without its box (it would read through an
      // undefined map and lose the context), or a plain kernel given one, is refused (drivers 12.4+
      // say how many parameters a kernel takes; a listed kernel implies one)
      const tma = 'maxsim_wgmma_tma_pp_m2n64_f16';
      if (dev.info.kernels.includes(tma)) {
        await assert.rejects(
          native.score(handle, queries, docs.native, { ...ok, tmaBox: [64, 64] }),
          /Expected no launch\.tmaBox for kernel maxsim_simt_f16 \(it takes no tensor map\) but received \[64, 64\]/,
        );
        await assert.rejects(
          native.score(handle, queries, docs.native, {
            kernel: tma,
            grid: [2, 1, 1],
            block: [384, 1, 1],
            smem: 197_632,
          }),
          /Expected launch\.tmaBox for kernel maxsim_wgmma_tma_pp_m2n64_f16 .* but received none/,
        );
      }
      // the device still works after every rejection
      assert.equal((await native.score(handle, queries, docs.native, ok)).length, 2);
    } finally {
      docs.dispose();
    }
  });

  test('alloc + append builds a corpus in pieces that scores like one upload', async () => {
    const dev = await gpu();
    const rand = rng(runSeed + 5);
    const a = randomRagged([5, 0, 9], 32, 'bfloat16', rand);
    const b = randomRagged([17, 3], 32, 'bfloat16', rand);
    const corpus = await dev.alloc({ dtype: 'bfloat16', dim: 32, tokens: 34, items: 5 });
    try {
      assert.equal(corpus.count, 0);
      await corpus.append(a);
      await corpus.append(b);
      assert.equal(corpus.count, 5);
      assert.equal(corpus.tokens, 34);
      await assert.rejects(corpus.append(a), /fits the device token set/);
      const whole = randomRagged([5, 0, 9, 17, 3], 32, 'bfloat16', () => 0);
      const data = new Uint16Array(34 * 32);
      data.set(a.data as Uint16Array, 0);
      data.set(b.data as Uint16Array, 14 * 32);
      const docs = { ...whole, data };
      const queries = randomRagged([6, 2], 32, 'bfloat16', rand);
      checkScores((await corpus.score(queries)).data, queries, docs, 4, 'appended corpus');
    } finally {
      corpus.dispose();
    }
  });

  test('bench times each launch with device events and reports peak memory', async () => {
    const dev = await gpu();
    const rand = rng(runSeed + 6);
    const docs = await dev.upload(
      randomRagged(
        Array.from({ length: 256 }, () => 64),
        128,
        'float16',
        rand,
      ),
    );
    const other = await dev.upload(
      randomRagged(
        Array.from({ length: 256 }, () => 64),
        128,
        'float16',
        rand,
      ),
    );
    try {
      const r = await benchKernel(dev, randomRagged([32], 128, 'float16', rand), docs, {
        warmup: 2,
        iters: 5,
        rotate: [other],
      });
      assert.equal(r.ms.length, 5);
      assert.ok(
        r.ms.every((ms) => ms > 0 && ms < 10_000),
        `ms: ${r.ms.join(', ')}`,
      );
      assert.ok(r.peakBytes >= docs.bytes + other.bytes);
      assert.ok(r.variant.length > 0);
    } finally {
      docs.dispose();
      other.dispose();
    }
  });
});
