// The relaxed-SIMD build of the wasm engine (native/wasm/maxsim-relaxed.wasm) and how a runtime picks
// between it and the SIMD128 build. Node 20 validates relaxed SIMD only behind
// --experimental-wasm-relaxed-simd, so this file turns the flag on before it compiles the module
// (Node 22 and Chromium need none). Its fp32 products are fused where V8 has FMA: bitwise equal to
// the native avx2 (x86-64) or neon (arm64) set, which fuse in the same k order; within the fp32
// bound of the float64 reference everywhere.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, test } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { gzipSync } from 'node:zlib';
import { cpuInfo } from '../src/backends/cpu.js';
import { referenceMaxsim } from '../src/backends/reference.js';
import { wasmModulePath } from '../src/backends/wasm.js';
import { nativeUnavailableReason, packageRoot } from '../src/native.js';
import { maxsimSync } from '../src/ops/maxsim.js';
import { cpuInt8Isas, quantize } from '../src/ops/quantize.js';
import type { FloatDType, TokenBatch } from '../src/tensor.js';
import { WasmEngine } from '../src/wasm/engine.js';
import { supportedFlavor } from '../src/wasm/features.js';
import {
  assertBitwise,
  assertScoresClose,
  awkwardLengths,
  randomRagged,
  rng,
  runSeed,
  scoreErrorBounds,
} from './helpers.js';

const native = nativeUnavailableReason();
const nodeSupports = supportedFlavor();
if (nodeSupports !== 'relaxed-simd') setFlagsFromString('--experimental-wasm-relaxed-simd');
// the flag that turns relaxed SIMD on for Node 20 (Node 22 has it on and rejects the flag)
const relaxedFlag = nodeSupports === 'relaxed-simd' ? [] : ['--experimental-wasm-relaxed-simd'];
const relaxedBytes = fs.readFileSync(wasmModulePath('relaxed-simd'));
const relaxed = WasmEngine.fromModule(new WebAssembly.Module(relaxedBytes), 'relaxed-simd');
const simd128 = WasmEngine.fromModule(
  new WebAssembly.Module(fs.readFileSync(wasmModulePath('simd128'))),
  'simd128',
);

// The native set whose products fuse in the wasm module's k order, when this CPU has it.
function fusedIsa(): 'avx2' | 'neon' | undefined {
  if (native) return undefined;
  const isas = cpuInfo().isas;
  if (process.arch === 'x64' && isas.includes('avx2')) return 'avx2';
  if (process.arch === 'arm64' && isas.includes('neon')) return 'neon';
  return undefined;
}

// Empties, ones, lane remainders (W = 4), tile remainders (MR = 4 lane blocks, NR = 2) and longer.
const PICK = [0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 17, 33];
const lengths = (rand: () => number, n: number, max: number) => awkwardLengths(rand, n, max, PICK);

function scores(e: WasmEngine, q: TokenBatch, d: TokenBatch): Float32Array {
  return e.scoreSync(q, d);
}

describe('wasm engine, relaxed SIMD build', () => {
  test('validates with relaxed SIMD only, exports the same functions, stays small', () => {
    assert.ok(WebAssembly.validate(relaxedBytes));
    const names = (m: string) =>
      WebAssembly.Module.exports(new WebAssembly.Module(fs.readFileSync(m)))
        .map((e) => e.name)
        .sort();
    assert.deepEqual(names(wasmModulePath('relaxed-simd')), names(wasmModulePath('simd128')));
    const gz = gzipSync(relaxedBytes, { level: 9 }).length;
    assert.ok(gz <= 200 * 1024, `${gz} bytes gzipped`);
    // the probe agrees with the module: a runtime without the flag rejects both
    const r = spawnSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `import { readFileSync } from 'node:fs';
         const { supportedFlavor } = await import(${JSON.stringify(path.join(packageRoot, 'dist', 'src', 'wasm', 'features.js'))});
         console.log(supportedFlavor(), WebAssembly.validate(readFileSync(${JSON.stringify(wasmModulePath('relaxed-simd'))})));`,
      ],
      { encoding: 'utf8' },
    );
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout.trim(), nodeSupports === 'relaxed-simd' ? 'relaxed-simd true' : 'simd128 false');
  });

  test('float dtypes: within the fp32 bound of float64, bitwise equal to the fused native set', () => {
    const rand = rng(runSeed + 20);
    const isa = fusedIsa();
    const dtypes: FloatDType[] = ['float32', 'float16', 'bfloat16'];
    for (const dtype of dtypes) {
      for (const dim of [1, 3, 4, 8, 67, 128, 130]) {
        const q = randomRagged(lengths(rand, 6, 40), dim, dtype, rand);
        const d = randomRagged(lengths(rand, 9, 80), dim, dtype, rand);
        const got = scores(relaxed, q, d);
        assertScoresClose(got, referenceMaxsim(q, d), scoreErrorBounds(q, d), `${dtype} d=${dim}`);
        if (isa)
          assertBitwise(got, maxsimSync(q, d, { backend: 'cpu', isa }).data, `${dtype} d=${dim} vs ${isa}`);
      }
    }
  });

  test('one long document, many queries, empty sides', () => {
    const rand = rng(runSeed + 21);
    const q = randomRagged([32, 0, 5, 31, 1, 12, 16, 3, 9], 48, 'float32', rand);
    const d = randomRagged([5000, 0, 1, 2, 3], 48, 'float32', rand);
    const got = scores(relaxed, q, d);
    assertScoresClose(got, referenceMaxsim(q, d), scoreErrorBounds(q, d), 'long');
    assert.equal(got[1 * 5 + 0], 0, 'an empty query scores 0');
    assert.equal(got[0 * 5 + 1], Number.NEGATIVE_INFINITY, 'an empty document scores -inf');
    const isa = fusedIsa();
    if (isa) assertBitwise(got, maxsimSync(q, d, { backend: 'cpu', isa }).data, `long vs ${isa}`);
  });

  test('int8 is the same code in both builds: bitwise equal to each other and to the native sets', () => {
    const rand = rng(runSeed + 22);
    for (const dim of [1, 7, 64, 128]) {
      const q = quantize(randomRagged(lengths(rand, 4, 40), dim, 'float32', rand), 'int8');
      const d = quantize(randomRagged(lengths(rand, 6, 80), dim, 'float32', rand), 'int8');
      const got = scores(relaxed, q, d);
      assertBitwise(got, scores(simd128, q, d), `int8 d=${dim} relaxed vs simd128`);
      if (native) continue;
      for (const isa of cpuInt8Isas()) {
        if (isa === 'amx' && dim % 64 !== 0) continue;
        assertBitwise(got, maxsimSync(q, d, { backend: 'cpu', isa }).data, `int8 d=${dim} vs ${isa}`);
      }
    }
  });
});

describe('which wasm build a runtime loads', () => {
  function flavorIn(
    env: Record<string, string>,
    flags: string[] = [],
  ): { status: number | null; out: string } {
    const script = `
      const { wasmEngine, wasmUnavailableReason } = await import(${JSON.stringify(path.join(packageRoot, 'dist', 'src', 'backends', 'wasm.js'))});
      const why = wasmUnavailableReason();
      console.log(why ? 'error: ' + why : wasmEngine().flavor);`;
    const r = spawnSync(process.execPath, [...flags, '--input-type=module', '-e', script], {
      encoding: 'utf8',
      env: { ...process.env, ...env },
    });
    return { status: r.status, out: r.stdout.trim() + r.stderr };
  }

  test('relaxed SIMD where it validates, SIMD128 otherwise; MAXSIM_WASM picks one', () => {
    assert.equal(flavorIn({ MAXSIM_WASM: '' }).out, nodeSupports);
    assert.equal(flavorIn({ MAXSIM_WASM: '' }, relaxedFlag).out, 'relaxed-simd');
    assert.equal(flavorIn({ MAXSIM_WASM: 'simd128' }, relaxedFlag).out, 'simd128');
    assert.match(
      flavorIn({ MAXSIM_WASM: 'fast' }).out,
      /MAXSIM_WASM must be 'simd128' or 'relaxed-simd' \(received "fast"\)/,
    );
    if (nodeSupports !== 'relaxed-simd') {
      assert.match(flavorIn({ MAXSIM_WASM: 'relaxed-simd' }).out, /does not validate relaxed SIMD/);
    }
  });
});
