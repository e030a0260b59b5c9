// The WebAssembly engine in Node: native/wasm/maxsim-relaxed.wasm where relaxed SIMD validates, else
// native/wasm/maxsim.wasm (the CPU kernels for SIMD128, one thread), compiled once on first use.
// `backend: 'wasm'` asks for it; 'auto' takes it when the native addon cannot load (no prebuilt
// package for this platform, MAXSIM_NATIVE=off). MAXSIM_WASM=simd128 (or relaxed-simd) picks a module.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BackendUnavailableError } from '../errors.js';
import { packageRoot } from '../native.js';
import { WasmEngine } from '../wasm/engine.js';
import { flavorFile, supportedFlavor, type WasmFlavor } from '../wasm/features.js';

/** Path of a flavor's module (the SIMD128 one by default). */
export function wasmModulePath(flavor: WasmFlavor = 'simd128'): string {
  return join(packageRoot, 'native', 'wasm', flavorFile(flavor));
}

export const wasmPath = wasmModulePath('simd128');

let cached: { engine?: WasmEngine; error?: string } | undefined;

function wantedFlavor(): { flavor?: WasmFlavor; error?: string } {
  const asked = process.env.MAXSIM_WASM;
  if (asked === undefined || asked === '') return { flavor: supportedFlavor() };
  if (asked !== 'simd128' && asked !== 'relaxed-simd') {
    return { error: `MAXSIM_WASM must be 'simd128' or 'relaxed-simd' (received ${JSON.stringify(asked)})` };
  }
  if (asked === 'relaxed-simd' && supportedFlavor() !== asked) {
    return { error: 'MAXSIM_WASM=relaxed-simd, but this runtime does not validate relaxed SIMD' };
  }
  return { flavor: asked };
}

function load(): { engine?: WasmEngine; error?: string } {
  try {
    if (typeof WebAssembly !== 'object') return { error: 'this runtime has no WebAssembly' };
    const { flavor, error } = wantedFlavor();
    if (!flavor) return { error };
    const path = wasmModulePath(flavor);
    const bytes = readFileSync(path);
    if (!WebAssembly.validate(bytes)) {
      return { error: `${path} does not validate (this runtime lacks WebAssembly SIMD128?)` };
    }
    return { engine: WasmEngine.fromModule(new WebAssembly.Module(bytes), flavor) };
  } catch (e) {
    return { error: `the wasm engine failed to load (${e instanceof Error ? e.message : String(e)})` };
  }
}

/**
 * A separate engine on one build (benchmarks and tests compare the two); throws a
 * BackendUnavailableError where this runtime does not validate it.
 */
export function wasmEngineFor(flavor: WasmFlavor): WasmEngine {
  const path = wasmModulePath(flavor);
  const bytes = readFileSync(path);
  if (!WebAssembly.validate(bytes)) {
    throw new BackendUnavailableError(`wasm backend unavailable: ${path} does not validate in this runtime`);
  }
  return WasmEngine.fromModule(new WebAssembly.Module(bytes), flavor);
}

/** The engine, or a BackendUnavailableError saying why it cannot run. */
export function wasmEngine(): WasmEngine {
  cached ??= load();
  if (!cached.engine) throw new BackendUnavailableError(`wasm backend unavailable: ${cached.error}`);
  return cached.engine;
}

/** Why the wasm engine cannot run here, or undefined. Never throws. */
export function wasmUnavailableReason(): string | undefined {
  cached ??= load();
  return cached.error;
}
