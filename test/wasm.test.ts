// The WebAssembly engine (native/wasm, src/wasm/engine.ts) in Node: its scores against the float64
// reference on random, ragged, tiny, empty and awkward shapes, bitwise against the native kernel set
// with the same products in the same order (portable for SIMD128, avx2 / neon for relaxed SIMD) and
// the native int8 sets, the committed .wasm against its sources, and 'auto' choosing it when the
// addon is hidden.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, test } from 'node:test';
import { gzipSync } from 'node:zlib';
import { type CpuIsa, cpuInfo } from '../src/backends/cpu.js';
import { referenceMaxsim } from '../src/backends/reference.js';
import { resolveBackend } from '../src/backends/select.js';
import { wasmEngine, wasmPath } from '../src/backends/wasm.js';
import { BackendUnavailableError, InvalidArgumentError } from '../src/errors.js';
import { encodeFloats } from '../src/floats.js';
import { nativeUnavailableReason, packageRoot } from '../src/native.js';
import { maxsim, maxsimSync, topK } from '../src/ops/maxsim.js';
import { cpuInt8Isas, quantize } from '../src/ops/quantize.js';
import { denseBatch, type FloatDType, raggedBatch } from '../src/tensor.js';
import {
  assertBitwise,
  assertScoresClose,
  awkwardLengths,
  randomDense,
  randomFloats,
  randomRagged,
  rng,
  runSeed,
  scoreErrorBounds,
} from './helpers.js';

const native = nativeUnavailableReason();
// The native set the loaded module matches bitwise: portable for SIMD128 (multiply, then add; on
// x86-64 only, where portable has no FMA contraction), the fused avx2 / neon set for relaxed SIMD
// (test/wasm-relaxed.test.ts); MAXSIM_WASM=simd128 runs these against the SIMD128 build anywhere.
function sameOrderIsa(): { isa?: CpuIsa; skip?: string } {
  if (native) return { skip: native };
  if (wasmEngine().flavor === 'relaxed-simd') {
    const isa = process.arch === 'x64' ? 'avx2' : process.arch === 'arm64' ? 'neon' : undefined;
    return isa && cpuInfo().isas.includes(isa)
      ? { isa }
      : { skip: 'no native set fuses like relaxed SIMD here' };
  }
  return process.arch === 'x64'
    ? { isa: 'portable' }
    : { skip: 'portable has no FMA contraction on x86-64 only' };
}
const dtypes: FloatDType[] = ['float32', 'float16', 'bfloat16'];

// Ragged lengths with empties, ones, lane remainders (W = 4) and tile remainders (NR = 6).
const PICK = [0, 1, 2, 3, 4, 5, 6, 7, 11, 13, 24, 25];
const awkward = (rand: () => number, n: number, max: number) => awkwardLengths(rand, n, max, PICK);

describe('wasm engine', () => {
  test('the committed module is built from native/wasm and is small', () => {
    const bytes = fs.readFileSync(wasmPath);
    const gz = gzipSync(bytes, { level: 9 }).length;
    assert.ok(gz <= 200 * 1024, `${gz} bytes gzipped`);
    assert.ok(WebAssembly.validate(bytes));
    const names = WebAssembly.Module.exports(new WebAssembly.Module(bytes)).map((e) => e.name);
    for (const n of ['memory', 'prepare_float', 'score_float', 'prepare_int8', 'score_int8'])
      assert.ok(names.includes(n), n);
    const r = spawnSync(process.execPath, [path.join(packageRoot, 'scripts', 'build-wasm.mjs'), '--check'], {
      encoding: 'utf8',
    });
    if (r.status === 3) return; // no clang / wasm-ld here: the committed module is used as is
    assert.equal(r.status, 0, r.stderr);
  });

  test('float dtypes: within the fp32 bound of the float64 reference on ragged and awkward shapes', () => {
    const rand = rng(runSeed);
    for (const dtype of dtypes) {
      for (const dim of [1, 3, 4, 8, 67, 128]) {
        const q = randomRagged(awkward(rand, 5, 40), dim, dtype, rand);
        const d = randomRagged(awkward(rand, 9, 70), dim, dtype, rand);
        const got = maxsimSync(q, d, { backend: 'wasm' }).data;
        assertScoresClose(got, referenceMaxsim(q, d), scoreErrorBounds(q, d), `${dtype} d=${dim}`);
      }
    }
  });

  test('dense batches with padding, one huge document, empty sides', async () => {
    const rand = rng(runSeed + 1);
    const q = randomDense(3, 16, 32, 'float32', rand, [16, 0, 9]);
    const d = randomDense(4, 40, 32, 'float32', rand, [40, 1, 0, 33]);
    const got = maxsimSync(q, d, { backend: 'wasm' }).data;
    const ref = referenceMaxsim(q, d);
    assertScoresClose(got, ref, scoreErrorBounds(q, d), 'dense');
    assert.equal(got[1 * 4 + 0], 0, 'an empty query scores 0');
    assert.equal(got[0 * 4 + 2], Number.NEGATIVE_INFINITY, 'an empty document scores -inf');
    const big = randomRagged([20000], 16, 'bfloat16', rand);
    const small = randomRagged([3], 16, 'bfloat16', rand);
    const s = (await maxsim(small, big, { backend: 'wasm' })).data;
    assertScoresClose(s, referenceMaxsim(small, big), scoreErrorBounds(small, big), 'one long document');
    const none = raggedBatch(new Float32Array(0), [0], { dim: 5 });
    assert.equal(
      maxsimSync(none, d.dim === 5 ? d : randomRagged([2], 5, 'float32', rand), { backend: 'wasm' }).data
        .length,
      0,
    );
  });

  test('values that stress the sum: large, tiny, signed zeros, infinities', () => {
    const dim = 6;
    const vals = [3e38, -3e38, 1e-40, -0, 0, 1, -1, 65504, Number.POSITIVE_INFINITY];
    const rand = rng(runSeed + 2);
    const data = Float32Array.from({ length: 12 * dim }, () => vals[Math.floor(rand() * vals.length)]);
    const q = raggedBatch(data.subarray(0, 4 * dim), [0, 1, 4], { dim, checkFinite: false });
    const d = raggedBatch(data.subarray(4 * dim), [0, 2, 3, 8], { dim, checkFinite: false });
    const { isa } = sameOrderIsa();
    if (!isa) return;
    assertBitwise(
      maxsimSync(q, d, { backend: 'wasm' }).data,
      maxsimSync(q, d, { backend: 'cpu', isa }).data,
      `awkward values vs ${isa}`,
    );
  });

  test('bitwise equal to the native kernel set with the same products and sums in the same order', {
    skip: sameOrderIsa().skip ?? false,
  }, () => {
    const isa = sameOrderIsa().isa as CpuIsa;
    const rand = rng(runSeed + 3);
    for (const dtype of dtypes) {
      for (const dim of [2, 5, 16, 96, 130]) {
        const q = randomRagged(awkward(rand, 4, 50), dim, dtype, rand);
        const d = randomRagged(awkward(rand, 7, 90), dim, dtype, rand);
        const wasm = maxsimSync(q, d, { backend: 'wasm' }).data;
        assertBitwise(wasm, maxsimSync(q, d, { backend: 'cpu', isa }).data, `${dtype} d=${dim} vs ${isa}`);
        assertScoresClose(wasm, referenceMaxsim(q, d), scoreErrorBounds(q, d), `${dtype} d=${dim}`);
      }
    }
  });

  test('int8: bitwise equal to every native int8 kernel set', {
    skip: native,
  }, () => {
    const rand = rng(runSeed + 4);
    for (const dim of [1, 7, 64, 100, 128]) {
      const qf = randomRagged(awkward(rand, 4, 40), dim, 'float32', rand);
      const df = randomRagged(awkward(rand, 6, 80), dim, 'float32', rand);
      const q = quantize(qf, 'int8');
      const d = quantize(df, 'int8');
      const wasm = maxsimSync(q, d, { backend: 'wasm' }).data;
      for (const isa of cpuInt8Isas()) {
        if (isa === 'amx' && dim % 64 !== 0) continue;
        assertBitwise(wasm, maxsimSync(q, d, { backend: 'cpu', isa }).data, `int8 d=${dim} vs ${isa}`);
      }
      // and the float64 MaxSim of the quantized values, within fp32 accumulation
      assertScoresClose(wasm, referenceMaxsim(q, d), scoreErrorBounds(q, d), `int8 d=${dim}`);
    }
  });

  test('async: slices, abort between slices, and a sync call made while it yields', async () => {
    const rand = rng(runSeed + 5);
    const q = randomRagged([32, 7], 64, 'float32', rand);
    const d = randomRagged(
      Array.from({ length: 400 }, () => 1 + Math.floor(rand() * 100)),
      64,
      'float32',
      rand,
    );
    const want = maxsimSync(q, d, { backend: 'wasm' }).data;
    const pending = wasmEngine().score(q, d, { sliceMs: 0.2 });
    const other = randomRagged([5], 64, 'float32', rand);
    const mid = maxsimSync(other, d, { backend: 'wasm' }).data; // runs while `pending` yields
    assertBitwise(await pending, want, 'async vs sync');
    assertScoresClose(mid, referenceMaxsim(other, d), scoreErrorBounds(other, d), 'interleaved');
    const ac = new AbortController();
    const aborted = wasmEngine().score(q, d, { signal: ac.signal, sliceMs: 0.2 });
    ac.abort();
    await assert.rejects(aborted, { name: 'AbortError' });
    assertBitwise((await maxsim(q, d, { backend: 'wasm' })).data, want, 'after an abort');
  });

  test('a resident document set scores like a copied one', () => {
    const rand = rng(runSeed + 6);
    const d = randomRagged([3, 0, 50, 9], 24, 'float16', rand);
    const q = randomRagged([4, 12], 24, 'float16', rand);
    const engine = wasmEngine();
    const r = engine.resident(d);
    try {
      assertBitwise(engine.scoreSync(q, d, r), engine.scoreSync(q, d), 'resident');
    } finally {
      r.free();
    }
  });

  test('arguments: isa refused, wasm refused where the operation has no wasm engine', () => {
    const rand = rng(runSeed + 7);
    const q = randomRagged([2], 8, 'float32', rand);
    assert.throws(() => maxsimSync(q, q, { backend: 'wasm', isa: 'avx2' }), InvalidArgumentError);
    assert.throws(() => resolveBackend('wasm'), /the wasm engine runs maxsim/);
    assert.throws(() => resolveBackend('bogus' as never, { wasm: true }), /'auto', 'cpu', 'cuda' or 'wasm'/);
    assert.equal(resolveBackend('wasm', { wasm: true }), 'wasm');
    const x = denseBatch(encodeFloats(randomFloats(16, rand), 'float32'), { count: 2, length: 1, dim: 8 });
    assert.equal(maxsimSync(x, x, { backend: 'wasm' }).data.length, 4);
  });

  test("'auto' takes the wasm engine when the addon is hidden (MAXSIM_NATIVE=off)", async () => {
    const script = `
      const root = ${JSON.stringify(path.join(packageRoot, 'dist', 'src'))};
      const { resolveBackend } = await import(root + '/backends/select.js');
      const { maxsim, maxsimSync, topK } = await import(root + '/ops/maxsim.js');
      const { raggedBatch } = await import(root + '/tensor.js');
      const { referenceMaxsim } = await import(root + '/backends/reference.js');
      const q = raggedBatch(Float32Array.from({ length: 5 * 4 }, (_, i) => Math.sin(i)), [0, 2, 5], { dim: 4 });
      const d = raggedBatch(Float32Array.from({ length: 9 * 4 }, (_, i) => Math.cos(i * 1.3)), [0, 4, 4, 9], { dim: 4 });
      let cpuError = '';
      try { maxsimSync(q, d, { backend: 'cpu' }); } catch (e) { cpuError = e.name + ': ' + e.message; }
      console.log(JSON.stringify({
        auto: resolveBackend('auto', { wasm: true }),
        plain: resolveBackend('auto'),
        sync: Array.from(maxsimSync(q, d).data),
        async: Array.from((await maxsim(q, d)).data),
        top: (await topK(q, d, 2)).map((h) => h.map((x) => x.index)),
        ref: Array.from(referenceMaxsim(q, d)),
        cpuError,
      }));`;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
      encoding: 'utf8',
      env: { ...process.env, MAXSIM_NATIVE: 'off' },
    });
    assert.equal(r.status, 0, r.stderr);
    const out = JSON.parse(r.stdout) as Record<string, unknown> & {
      sync: number[];
      async: number[];
      ref: (number | null)[];
    };
    assert.equal(out.auto, 'wasm');
    assert.equal(out.plain, 'cpu');
    assert.deepEqual(out.sync, out.async);
    for (let i = 0; i < out.ref.length; i++) {
      const ref = out.ref[i] ?? Number.NEGATIVE_INFINITY; // JSON writes -Infinity as null
      const got = out.sync[i] ?? Number.NEGATIVE_INFINITY;
      assert.ok(got === ref || Math.abs(got - ref) < 1e-5, `${i}: ${got} vs ${ref}`);
    }
    const refRow = (r: number) => out.ref.slice(r * 3, r * 3 + 3).map((s) => s ?? Number.NEGATIVE_INFINITY);
    const best2 = (row: number[]) =>
      row
        .map((s, i) => [s, i])
        .sort((a, b) => b[0] - a[0] || a[1] - b[1])
        .slice(0, 2)
        .map((x) => x[1]);
    assert.deepEqual(out.top, [best2(refRow(0)), best2(refRow(1))]);
    assert.match(String(out.cpuError), new RegExp(`${BackendUnavailableError.name}: .*MAXSIM_NATIVE=off`));
  });

  test('topK over wasm scores ranks like the reference', async () => {
    const rand = rng(runSeed + 8);
    const q = randomRagged([8, 3], 16, 'float32', rand);
    const d = randomRagged(awkward(rand, 30, 20), 16, 'float32', rand);
    const hits = await topK(q, d, 5, { backend: 'wasm' });
    const scores = maxsimSync(q, d, { backend: 'wasm' }).data;
    for (let r = 0; r < 2; r++) {
      const row = Array.from(scores.subarray(r * 30, r * 30 + 30));
      const order = row.map((s, i) => [s, i]).sort((a, b) => b[0] - a[0] || a[1] - b[1]);
      assert.deepEqual(
        hits[r].map((h) => h.index),
        order.slice(0, 5).map((x) => x[1]),
      );
    }
  });
});

describe('maxsim/browser in Node', () => {
  test('the subpath resolves through the exports map and scores on the wasm engine', async () => {
    const m = await import('maxsim/browser');
    for (const n of [
      'init',
      'maxsim',
      'maxsimSync',
      'topK',
      'corpusFromBuffers',
      'tokenMatrix',
      'raggedBatch',
    ])
      assert.equal(typeof (m as Record<string, unknown>)[n], 'function', n);
    await m.init(fs.readFileSync(wasmPath));
    const rand = rng(runSeed + 9);
    const d = randomRagged([4, 0, 9], 8, 'float32', rand);
    const q = randomRagged([3], 8, 'float32', rand);
    const qm = m.tokenMatrix(q.data, 3, 8);
    assertScoresClose(await m.maxsim(qm, d), referenceMaxsim(q, d), scoreErrorBounds(q, d), 'maxsim/browser');
  });
});
