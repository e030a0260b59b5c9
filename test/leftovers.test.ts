// Issue 21, the remaining defects: mapFile of 4 GiB or more (it aborted the process with a double
// free), dispose() on CPU training results, and silent +-Infinity from float16 / bfloat16 conversions.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, test } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { InvalidArgumentError } from '../src/errors.js';
import { checkEncodable, encodeFloats, encodeFloatsClamped, floatToF16Bits } from '../src/floats.js';
import { CorpusWriter } from '../src/io/corpus/index.js';
import { writeNpy } from '../src/io/npy.js';
import { addonPath, nativeUnavailableReason } from '../src/native.js';
import { maxsimSync } from '../src/ops/maxsim.js';
import { quantize } from '../src/ops/quantize.js';
import { maxsimTrain } from '../src/ops/train.js';
import { mapLimit, ResidentCorpus } from '../src/server/resident.js';
import { denseBatch, raggedBatch, tokenMatrix } from '../src/tensor.js';
import { randomFloats, rng, runSeed } from './helpers.js';

const skip = nativeUnavailableReason();
const nativeJs = new URL('../src/native.js', import.meta.url).href;

/** Runs an ES module snippet in a fresh node: a crash is an exit code / signal here. */
function child(source: string) {
  return spawnSync(process.execPath, ['--input-type=module', '-e', source], {
    encoding: 'utf8',
    timeout: 60_000,
  });
}

describe('mapFile of 4 GiB or more', { skip }, () => {
  // sparse: truncate makes the size without writing (or reserving) the bytes
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-map-'));
  const big = path.join(dir, 'big.bin');
  fs.writeFileSync(big, '');
  fs.truncateSync(big, 2 ** 32 + (2 << 20));
  test.after(() => fs.rmSync(dir, { recursive: true, force: true }));

  for (const [label, load] of [
    // through src/native.ts, which tells the addon this Node's limit
    ['loaded by the library', `(await import(${JSON.stringify(nativeJs)})).loadNative()`],
    // the bare addon: its own default (Node 20's 4 GiB)
    [
      'the bare addon',
      `(await import('node:module')).createRequire(import.meta.url)(${JSON.stringify(addonPath)})`,
    ],
  ] as const) {
    test(`${label}: refuses 2^32 + 8 bytes with an error naming the file, no crash; 1 MiB still maps`, () => {
      const r = child(`
        const addon = ${load};
        const small = addon.file.mapFile(${JSON.stringify(big)}, 2 ** 32, 1 << 20);
        if (small.byteLength !== 1 << 20 || new Uint8Array(small)[5] !== 0) throw new Error('bad small map');
        try {
          addon.file.mapFile(${JSON.stringify(big)}, 0, 2 ** 32 + 8);
          console.log('mapped');
        } catch (e) {
          console.log(e.name + ': ' + e.message);
        }
      `);
      const detail = `status ${r.status}, signal ${r.signal}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`;
      assert.equal(r.signal, null, detail);
      assert.equal(r.status, 0, detail);
      assert.match(
        r.stdout,
        /^RangeError: .*big\.bin: cannot map bytes \[0, 4294967304\) \(4294967304 bytes\) as one buffer: this Node\.js holds at most 4294967296 bytes in one ArrayBuffer\n$/,
        detail,
      );
    });
  }
});

describe('dispose() on CPU training results', { skip }, () => {
  const rand = rng(runSeed ^ 0x2101);
  const make = () => ({
    queries: denseBatch(randomFloats(3 * 5 * 16, rand), { count: 3, length: 5, dim: 16 }),
    docs: raggedBatch(randomFloats(40 * 16, rand), [0, 7, 7, 20, 40], { dim: 16 }),
  });

  test('backward() after dispose() rejects with a clear error; dispose() twice is harmless', async () => {
    const { queries, docs } = make();
    const r = await maxsimTrain(queries, docs, { backend: 'cpu' });
    const g = new Float32Array(r.scores.length).fill(1);
    const before = await r.backward(g);
    assert.equal(r.released, false);
    r.dispose();
    r.dispose();
    assert.equal(r.released, true);
    assert.equal(r.argmax.length, 0);
    await assert.rejects(
      r.backward(g),
      (e: unknown) =>
        e instanceof InvalidArgumentError && e.argument === 'training state' && /dispose\(\)/.test(e.message),
    );
    // a fresh forward still gives the same gradients
    const again = await (await maxsimTrain(queries, docs, { backend: 'cpu' })).backward(g);
    assert.deepEqual(again.dQ, before.dQ);
    assert.deepEqual(again.dD, before.dD);
  });

  test('dispose() lets the batches and the argmax be collected while the result is kept', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const collected = async (refs: WeakRef<object>[]) => {
      for (let i = 0; i < 5; i++) {
        await new Promise((r) => setImmediate(r));
        gc();
      }
      return refs.map((w) => w.deref() === undefined);
    };
    const start = async () => {
      const { queries, docs } = make();
      const r = await maxsimTrain(queries, docs, { backend: 'cpu' });
      return { r, refs: [new WeakRef(queries.data), new WeakRef(docs.data), new WeakRef(r.argmax)] };
    };
    const kept = await start();
    assert.deepEqual(
      await collected(kept.refs),
      [false, false, false],
      'held for backward() before dispose()',
    );
    kept.r.dispose();
    assert.deepEqual(await collected(kept.refs), [true, true, true], 'freed after dispose()');
    assert.equal(kept.r.scores.length, 12);
  });
});

describe('float16 / bfloat16 conversions refuse finite values that would become +-Infinity', () => {
  test('encodeFloats: the argument, the count and the first position; the largest finite values pass', () => {
    const values = new Float32Array([1, 65504, -65519, 65520, 2, -1e6, Number.POSITIVE_INFINITY, Number.NaN]);
    assert.throws(
      () => encodeFloats(values, 'float16', { name: 'docs.data', dim: 4 }),
      (e: unknown) =>
        e instanceof InvalidArgumentError &&
        e.argument === 'docs.data' &&
        e.received === '2 values beyond it (the first, 65520, at token 0, component 3)',
    );
    assert.throws(
      () => encodeFloats(values, 'float16'),
      /for values but received 2 values beyond it .* at index 3\)/,
    );
    // 65519 rounds down to 65504; +-Infinity and NaN are not finite values lost by the conversion
    const ok = encodeFloats(values.subarray(0, 3), 'float16');
    assert.deepEqual([...ok], [floatToF16Bits(1), 0x7bff, 0xfbff]);
    assert.deepEqual([...encodeFloats(new Float32Array([Infinity, -Infinity]), 'float16')], [0x7c00, 0xfc00]);
    assert.throws(
      () => encodeFloats(new Float32Array([0, 3.4e38]), 'bfloat16', { name: 'q' }),
      /Expected finite values within the bfloat16 range .* for q but received 1 value beyond it \(the first, 3\.4e\+38, at index 1\)/,
    );
    // the clamping variant (corpus writer's --clamp) still clamps
    const clamped = encodeFloatsClamped(values, 'float16');
    assert.equal(clamped.clamped, 2);
    assert.equal(clamped.data[3], 0x7bff);
  });

  test('tokenMatrix / raggedBatch from number[] or Float64Array with dtype float16 name the argument', () => {
    const rand = rng(runSeed ^ 0x2103);
    const data = Array.from(randomFloats(6 * 4, rand));
    data[9] = 70000;
    assert.throws(
      () => tokenMatrix(data, 6, 4, { dtype: 'float16' }),
      (e: unknown) =>
        e instanceof InvalidArgumentError &&
        /1 value beyond it \(the first, 70000, at index 9\)/.test(e.message),
    );
    assert.throws(
      () => raggedBatch(Float64Array.from(data), [0, 2, 6], { dim: 4, dtype: 'float16' }),
      /float16 range/,
    );
    // float64 values beyond float32 are refused too (they became Infinity)
    assert.throws(() => tokenMatrix([1, 2, 1e39, 0], 1, 4), /float32 range .* at index 2\)/);
    data[9] = 60000;
    assert.equal(tokenMatrix(data, 6, 4, { dtype: 'float16' }).data[9], floatToF16Bits(60000));
  });

  test("maxsimTrain outputDtype 'input': float16 gradients beyond the range are refused, naming dQ", {
    skip,
  }, async () => {
    const rand = rng(runSeed ^ 0x2104);
    const q = encodeFloats(randomFloats(2 * 3 * 8, rand), 'float16');
    const d = encodeFloats(randomFloats(10 * 8, rand), 'float16');
    const queries = denseBatch(q, { count: 2, length: 3, dim: 8, dtype: 'float16' });
    const docs = raggedBatch(d, [0, 4, 10], { dim: 8, dtype: 'float16' });
    const r = await maxsimTrain(queries, docs, { backend: 'cpu', outputDtype: 'input' });
    const fine = await r.backward(new Float32Array(r.scores.length).fill(1));
    assert.ok(fine.dD instanceof Uint16Array);
    // dQ sums |d| < 1 components times 1e5 per pair; dD likewise: both beyond 65504
    await assert.rejects(
      r.backward(new Float32Array(r.scores.length).fill(1e6)),
      (e: unknown) =>
        e instanceof InvalidArgumentError &&
        e.argument === "dQ (outputDtype 'input')" &&
        /values? beyond it \(the first, .*, at token \d+, component \d+\)/.test(e.received),
    );
  });

  test('encodeFloats refuses what it cannot convert (it converted a number[] or an unknown dtype to garbage)', () => {
    assert.throws(
      () => encodeFloats([1, 2] as unknown as Float32Array, 'float16'),
      (e: unknown) =>
        e instanceof InvalidArgumentError && e.argument === 'values' && e.expected === 'a Float32Array',
    );
    assert.throws(
      () => encodeFloats(new Float32Array(2), 'float8' as 'float16'),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'dtype',
    );
  });

  test('checkEncodable: the check GPU-side conversions share', () => {
    assert.doesNotThrow(() => checkEncodable(new Float32Array([65504, -3]), 'float16'));
    assert.throws(
      () => checkEncodable(new Float32Array([65504, -65536]), 'float16', { name: 'queries.data' }),
      /queries\.data/,
    );
    assert.doesNotThrow(() => checkEncodable(new Float32Array([1e38]), 'bfloat16'));
    assert.doesNotThrow(() => checkEncodable(new Int8Array([127]), 'int8'));
  });
});

describe('CLI: paths that are not regular files get one clear line naming them (never a hang)', () => {
  const CLI = new URL('../src/cli/main.js', import.meta.url).pathname;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-paths-'));
  test.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const at = (name: string) => path.join(dir, name);
  const cli = (...args: string[]) =>
    spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 20_000, cwd: dir });
  /** Exit 1, one stderr line `maxsim: ...` matching `pattern`, no stack, no signal (a hang is SIGTERM). */
  const expectLine = (r: ReturnType<typeof cli>, pattern: RegExp) => {
    const detail = `status ${r.status}, signal ${r.signal}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`;
    assert.equal(r.signal, null, detail);
    assert.equal(r.status, 1, detail);
    const lines = r.stderr.trimEnd().split('\n');
    assert.equal(lines.length, 1, detail);
    assert.match(lines[0], /^maxsim: /, detail);
    assert.match(lines[0], pattern, detail);
  };
  fs.writeFileSync(at('afile'), 'hi\n');
  fs.mkdirSync(at('adir'));
  fs.symlinkSync(at('nowhere'), at('dangling'));
  spawnSync('mkfifo', [at('fifo')]);
  const q = Array.from({ length: 4 * 8 }, (_, i) => Math.sin(i));
  const d = Array.from({ length: 3 * 5 * 8 }, (_, i) => Math.cos(i));
  writeNpy(at('q.npy'), { dtype: 'float32', shape: [4, 8], data: Float32Array.from(q) });
  writeNpy(at('d.npy'), { dtype: 'float32', shape: [3, 5, 8], data: Float32Array.from(d) });

  test('corpus info on a file, a FIFO and a dangling symlink', () => {
    expectLine(cli('corpus', 'info', at('afile')), /afile: not a maxsim corpus \(a corpus is a directory\)/);
    expectLine(cli('corpus', 'info', at('fifo')), /fifo: not a maxsim corpus \(a corpus is a directory\)/);
    expectLine(
      cli('corpus', 'info', at('dangling')),
      /dangling: no such corpus \(a symbolic link to .*nowhere, which does not exist\)$/,
    );
  });

  test('score --docs a directory, a FIFO, a dangling symlink, a device', () => {
    const base = ['score', '--queries', at('q.npy'), '--docs'];
    expectLine(cli(...base, at('adir')), /for --docs but received ".*adir" \(a directory\)$/);
    expectLine(cli(...base, at('fifo')), /for --docs but received ".*fifo" \(a FIFO \(named pipe\)\)$/);
    expectLine(
      cli(...base, at('dangling')),
      /for --docs but received ".*dangling" \(a symbolic link to .*nowhere, which does not exist\)$/,
    );
    expectLine(cli(...base, '/dev/null'), /for --docs but received "\/dev\/null" \(a character device\)$/);
  });

  test('a safetensors header length beyond the file', () => {
    const header = Buffer.from(JSON.stringify({ x: { dtype: 'F32', shape: [2, 4], data_offsets: [0, 32] } }));
    const size = Buffer.alloc(8);
    size.writeBigUInt64LE(1_000_000n);
    fs.writeFileSync(at('long.safetensors'), Buffer.concat([size, header, Buffer.alloc(32)]));
    expectLine(
      cli('score', '--queries', at('q.npy'), '--docs', `${at('long.safetensors')}:x`),
      /long\.safetensors: the safetensors header length is 1000000 bytes but only \d+ follow/,
    );
  });

  test('corpus build --ids a FIFO or a directory; a MANIFEST or a segment that is a FIFO', () => {
    const build = (out: string, ids: string) =>
      cli('corpus', 'build', '--docs', at('d.npy'), '--out', at(out), '--ids', ids);
    expectLine(build('c1', at('fifo')), /for --ids but received .*fifo \(a FIFO \(named pipe\)\)$/);
    expectLine(build('c2', at('adir')), /for --ids but received .*adir \(a directory\)$/);
    const built = cli('corpus', 'build', '--docs', at('d.npy'), '--out', at('c3'));
    assert.equal(built.status, 0, built.stderr);
    const manifest = path.join(at('c3'), 'MANIFEST');
    fs.renameSync(manifest, at('MANIFEST.kept'));
    spawnSync('mkfifo', [manifest]);
    expectLine(
      cli('corpus', 'info', at('c3')),
      /MANIFEST: the MANIFEST is a FIFO \(named pipe\), not a regular file$/,
    );
    fs.rmSync(manifest);
    fs.renameSync(at('MANIFEST.kept'), manifest);
    const segment = path.join(at('c3'), 'seg-000001.msxs');
    fs.rmSync(segment);
    spawnSync('mkfifo', [segment]);
    expectLine(
      cli('search', '--queries', at('q.npy'), '--corpus', at('c3')),
      /seg-000001\.msxs: a segment named by the MANIFEST is not a regular file$/,
    );
  });

  test('--out a FIFO, a directory, a missing directory or a full device (quantize, score)', () => {
    const quantize = (out: string) => cli('quantize', '--docs', at('d.npy'), '--out', out);
    expectLine(quantize(at('fifo')), /cannot write .*fifo \(a FIFO \(named pipe\) with no reader\)$/);
    expectLine(quantize(at('adir')), /cannot write .*adir \(a directory\)$/);
    expectLine(
      quantize(at('none/x.safetensors')),
      /cannot write .*none\/x\.safetensors \(the directory ".*none" does not exist\)$/,
    );
    if (fs.existsSync('/dev/full'))
      expectLine(quantize('/dev/full'), /cannot write \/dev\/full \(no space left on the device\)$/);
    expectLine(
      cli('score', '--queries', at('q.npy'), '--docs', at('d.npy'), '--out', at('fifo')),
      /cannot write .*fifo \(a FIFO \(named pipe\) with no reader\)$/,
    );
  });

  test('corpus build --out under a file, or where no directory can be made (it hung under /proc)', () => {
    const build = (out: string) => cli('corpus', 'build', '--docs', at('d.npy'), '--out', out);
    expectLine(
      build(at('afile/sub/c')),
      /received .*afile\/sub\/c \(a path through something that is not a directory\)$/,
    );
    if (fs.existsSync('/proc/self'))
      expectLine(
        build('/proc/maxsim-x/y/z'),
        /received \/proc\/maxsim-x\/y\/z \(the file system does not let a directory be made there\)$/,
      );
    const made = build(at('new/a/b'));
    assert.equal(made.status, 0, made.stderr);
    assert.ok(fs.existsSync(path.join(at('new/a/b'), 'MANIFEST')));
  });
});

describe('serve: segments too large to map whole', { skip }, () => {
  test('rerank/score reads the candidates of a segment beyond the mapping limit: the same scores', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-resident-'));
    const rand = rng(runSeed ^ 0x2105);
    try {
      for (const dtype of ['float32', 'int8'] as const) {
        const out = path.join(dir, dtype);
        const docs = raggedBatch(randomFloats(50 * 16, rand), [0, 5, 5, 20, 33, 50], { dim: 16 });
        const w = CorpusWriter.create(out, { dtype, dim: 16 });
        w.add(dtype === 'int8' ? quantize(docs, 'int8') : docs);
        w.commit();
        const r = await ResidentCorpus.open({ corpus: out, backend: 'cpu', threads: 1 });
        const queries = denseBatch(randomFloats(2 * 3 * 16, rand), { count: 2, length: 3, dim: 16 });
        const indices = [4, 0, 2, 3];
        const mapped = await r.scoreDocumentsAll(queries, indices);
        const saved = mapLimit.bytes;
        mapLimit.bytes = 64; // every segment is now "too large": the read path
        try {
          const read = await r.scoreDocumentsAll(queries, indices);
          assert.deepEqual(read, mapped);
        } finally {
          mapLimit.bytes = saved;
          await r.close();
        }
        if (dtype === 'float32') {
          const ref = maxsimSync(queries, docs, { backend: 'cpu' }).data;
          const expect = Float32Array.from([0, 1].flatMap((i) => indices.map((b) => ref[i * 5 + b])));
          assert.deepEqual(mapped, expect);
        }
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
