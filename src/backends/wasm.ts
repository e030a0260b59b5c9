// The WebAssembly engine in Node: native/wasm/maxsim.wasm (the CPU kernels for SIMD128, one thread),
// compiled once on first use. `backend: 'wasm'` asks for it; 'auto' takes it when the native addon
// cannot load (no prebuilt package for this platform, MAXSIM_NATIVE=off).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BackendUnavailableError } from '../errors.js';
import { packageRoot } from '../native.js';
import { WasmEngine } from '../wasm/engine.js';

export const wasmPath = join(packageRoot, 'native', 'wasm', 'maxsim.wasm');

let cached: { engine?: WasmEngine; error?: string } | undefined;

function load(): { engine?: WasmEngine; error?: string } {
  try {
    if (typeof WebAssembly !== 'object') return { error: 'this runtime has no WebAssembly' };
    const bytes = readFileSync(wasmPath);
    if (!WebAssembly.validate(bytes)) {
      return { error: `${wasmPath} does not validate (this runtime lacks WebAssembly SIMD128?)` };
    }
    return { engine: WasmEngine.fromModule(new WebAssembly.Module(bytes)) };
  } catch (e) {
    return { error: `the wasm engine failed to load (${e instanceof Error ? e.message : String(e)})` };
  }
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
