// fp32 MaxSim single-threaded: the wasm engine (native/wasm) against the native kernel sets with one
// thread, and, when MAXSIM_WEB_DIR points at a copy of joe32140/maxsim-web's wasm-bindgen output
// (maxsim_web_wasm.js + maxsim_web_wasm_bg.wasm), its maxsim_batch on the same inputs.
//   node dist/bench/wasm.js [Nq,Lq,Ld,d,B ...]
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { cpuInfo } from '../src/backends/cpu.js';
import { wasmEngine } from '../src/backends/wasm.js';
import { maxsimSync } from '../src/ops/maxsim.js';
import { raggedBatch, type TokenBatch } from '../src/tensor.js';

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

/** Median milliseconds of `run` over enough repeats to fill ~1 s (at least 3). */
function time(run: () => void): number {
  run();
  const samples: number[] = [];
  const t0 = performance.now();
  while (samples.length < 3 || (performance.now() - t0 < 1000 && samples.length < 50)) {
    const t = performance.now();
    run();
    samples.push(performance.now() - t);
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
const isas = cpuInfo().isas.filter((i) => i === 'avx2' || i === 'avx512' || i === 'neon' || i === 'portable');
console.log(`cpu: ${cpuInfo().features}`);
for (const s of shapes) {
  const q = batch(s.nq, s.lq, s.d, 1);
  const docs = batch(s.b, s.ld, s.d, 2);
  const gflop = (2 * s.nq * s.lq * s.ld * s.d * s.b) / 1e9;
  const row: Record<string, string> = {};
  const wasm = time(() => maxsimSync(q, docs, { backend: 'wasm' }));
  const engine = wasmEngine();
  const resident = engine.resident(docs);
  const wasmResident = time(() => engine.scoreSync(q, docs, resident));
  resident.free();
  row.wasm = `${wasm.toFixed(2)} ms (${((gflop / wasm) * 1e3).toFixed(1)} GFLOP/s)`;
  row['wasm resident docs'] = `${wasmResident.toFixed(2)} ms`;
  const native: Record<string, number> = {};
  for (const isa of isas) {
    native[isa] = time(() => maxsimSync(q, docs, { backend: 'cpu', isa, threads: 1 }));
    row[`${isa} 1 thread`] =
      `${native[isa].toFixed(2)} ms (wasm at ${((native[isa] / wasm) * 100).toFixed(0)}%)`;
  }
  if (web) {
    const dl = new Uint32Array(s.b).fill(s.ld);
    const qd = q.data as Float32Array;
    const dd = docs.data as Float32Array;
    const ms = time(() => {
      for (let i = 0; i < s.nq; i++)
        web.maxsim_batch(qd.subarray(i * s.lq * s.d, (i + 1) * s.lq * s.d), s.lq, dd, dl, s.d);
    });
    row['maxsim-web'] = `${ms.toFixed(2)} ms (ours ${(ms / wasm).toFixed(2)}x faster)`;
  }
  console.log(`\n${s.nq},${s.lq},${s.ld},${s.d},${s.b} (${gflop.toFixed(2)} GFLOP)`);
  for (const [k, v] of Object.entries(row)) console.log(`  ${k.padEnd(20)} ${v}`);
}
