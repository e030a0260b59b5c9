// fp32 MaxSim single-threaded: both builds of the wasm engine (native/wasm: SIMD128, relaxed SIMD)
// against the native kernel sets with one thread, and, when MAXSIM_WEB_DIR points at a copy of
// joe32140/maxsim-web's wasm-bindgen output (maxsim_web_wasm.js + maxsim_web_wasm_bg.wasm), its
// maxsim_batch on the same inputs. Times are the process's CPU time per call (median), so other
// load on a shared machine inflates them less than wall time; all engines run on the calling thread.
// Node 20 validates relaxed SIMD only behind V8's flag: this script sets it (Node 22 has it on).
//   node dist/bench/wasm.js [Nq,Lq,Ld,d,B ...]
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { cpuInfo } from '../src/backends/cpu.js';
import { wasmEngineFor } from '../src/backends/wasm.js';
import { maxsimSync } from '../src/ops/maxsim.js';
import { raggedBatch, type TokenBatch } from '../src/tensor.js';
import type { WasmEngine } from '../src/wasm/engine.js';
import { supportedFlavor, type WasmFlavor } from '../src/wasm/features.js';

interface Shape {
  nq: number;
  lq: number;
  ld: number;
  d: number;
  b: number;
}

function batch(count: number, len: number, d: number, seed: number): TokenBatch {
  let s = seed >>> 0;
  const data = new Float32Array(count * len * d);
  for (let i = 0; i < data.length; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    data[i] = s / 2 ** 32 - 0.5;
  }
  return raggedBatch(
    data,
    Array.from({ length: count + 1 }, (_, i) => i * len),
    { dim: d },
  );
}

/** Median CPU milliseconds of `run` over enough repeats to fill ~1 s of CPU (at least 5). */
function time(run: () => void): number {
  run();
  const samples: number[] = [];
  const cpuMs = (c: NodeJS.CpuUsage) => (c.user + c.system) / 1000;
  const t0 = process.cpuUsage();
  while (samples.length < 5 || (cpuMs(process.cpuUsage(t0)) < 1000 && samples.length < 50)) {
    const t = process.cpuUsage();
    run();
    samples.push(cpuMs(process.cpuUsage(t)));
  }
  samples.sort((a, b) => a - b);
  return samples[samples.length >> 1];
}

interface MaxsimWeb {
  maxsim_batch(q: Float32Array, lq: number, docs: Float32Array, lens: Uint32Array, d: number): Float32Array;
}

async function loadMaxsimWeb(): Promise<MaxsimWeb | undefined> {
  const dir = process.env.MAXSIM_WEB_DIR;
  if (!dir) return undefined;
  const glue = (await import(pathToFileURL(join(dir, 'maxsim_web_wasm.js')).href)) as {
    initSync(o: { module: Uint8Array }): void;
    MaxSimWasm: new () => MaxsimWeb;
  };
  glue.initSync({ module: readFileSync(join(dir, 'maxsim_web_wasm_bg.wasm')) });
  return new glue.MaxSimWasm();
}

const shapes: Shape[] = (
  process.argv.slice(2).length
    ? process.argv.slice(2)
    : ['1,32,300,128,1000', '1,32,128,128,5000', '8,32,300,128,500']
)
  .map((s) => s.split(',').map(Number))
  .map(([nq, lq, ld, d, b]) => ({ nq, lq, ld, d, b }));

const web = await loadMaxsimWeb();
if (supportedFlavor() !== 'relaxed-simd') setFlagsFromString('--experimental-wasm-relaxed-simd');
const flavors: WasmFlavor[] = ['simd128', 'relaxed-simd'];
const engines = new Map<WasmFlavor, WasmEngine>(flavors.map((f) => [f, wasmEngineFor(f)]));
const isas = cpuInfo().isas.filter((i) => i === 'avx2' || i === 'avx512' || i === 'neon' || i === 'portable');
console.log(`cpu: ${cpuInfo().features}`);
for (const s of shapes) {
  const q = batch(s.nq, s.lq, s.d, 1);
  const docs = batch(s.b, s.ld, s.d, 2);
  const gflop = (2 * s.nq * s.lq * s.ld * s.d * s.b) / 1e9;
  const row: Record<string, string> = {};
  const wasm = new Map<WasmFlavor, number>();
  for (const [flavor, engine] of engines) {
    // documents resident in wasm memory, as a corpus is: the per-call copy is not the kernel
    const resident = engine.resident(docs);
    const ms = time(() => engine.scoreSync(q, docs, resident));
    resident.free();
    wasm.set(flavor, ms);
    row[`wasm ${flavor}`] = `${ms.toFixed(2)} ms (${((gflop / ms) * 1e3).toFixed(1)} GFLOP/s)`;
  }
  for (const isa of isas) {
    const ms = time(() => maxsimSync(q, docs, { backend: 'cpu', isa, threads: 1 }));
    const ratios = flavors.map((f) => `${f} at ${((ms / (wasm.get(f) as number)) * 100).toFixed(0)}%`);
    row[`${isa} 1 thread`] = `${ms.toFixed(2)} ms (wasm ${ratios.join(', ')})`;
  }
  if (web) {
    const dl = new Uint32Array(s.b).fill(s.ld);
    const qd = q.data as Float32Array;
    const dd = docs.data as Float32Array;
    const ms = time(() => {
      for (let i = 0; i < s.nq; i++)
        web.maxsim_batch(qd.subarray(i * s.lq * s.d, (i + 1) * s.lq * s.d), s.lq, dd, dl, s.d);
    });
    const faster = flavors.map((f) => `${f} ${(ms / (wasm.get(f) as number)).toFixed(2)}x`);
    row['maxsim-web'] = `${ms.toFixed(2)} ms (ours faster: ${faster.join(', ')})`;
  }
  console.log(`\n${s.nq},${s.lq},${s.ld},${s.d},${s.b} (${gflop.toFixed(2)} GFLOP)`);
  for (const [k, v] of Object.entries(row)) console.log(`  ${k.padEnd(22)} ${v}`);
}
