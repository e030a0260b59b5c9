// The CPU ratios the foundation issue asks for, measured interleaved in one process so that the
// VM's minute-to-minute drift hits every case alike: fp32 one query, bf16 one query (AMX where
// present), fp32 all pairs and int8 one query (the fp32 case's data quantized per token: AMX-INT8
// where present), 5 rounds each, medians. Run: node dist/bench/cpu-ratios.js
import { cpuInfo } from '../src/backends/cpu.js';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { encodeFloats } from '../src/floats.js';
import { maxsimSync } from '../src/ops/maxsim.js';
import { cpuInt8Isas, quantize } from '../src/ops/quantize.js';
import { denseBatch, type FloatDType, type TokenBatch } from '../src/tensor.js';

const rng = new Rng(7);
function batch(count: number, length: number, dim: number, dtype: FloatDType): TokenBatch {
  const data = encodeFloats(randomUnitTokens(rng, count * length, dim), dtype);
  return denseBatch(data, { count, length, dim, dtype, checkFinite: false });
}

const f32q = batch(1, 32, 128, 'float32');
const f32d = batch(20000, 128, 128, 'float32');
const cases = [
  { name: '1,32,128,128,20000 f32', q: f32q, d: f32d },
  {
    name: '1,32,128,128,20000 bf16',
    q: batch(1, 32, 128, 'bfloat16'),
    d: batch(20000, 128, 128, 'bfloat16'),
  },
  { name: '32,32,300,128,2000 f32', q: batch(32, 32, 128, 'float32'), d: batch(2000, 300, 128, 'float32') },
  { name: '1,32,128,128,20000 int8', q: quantize(f32q, 'int8'), d: quantize(f32d, 'int8') },
];
const rates = cases.map(() => [] as number[]);
for (const c of cases) maxsimSync(c.q, c.d); // warm-up
for (let round = 0; round < 5; round++) {
  cases.forEach((c, i) => {
    const t = process.hrtime.bigint();
    maxsimSync(c.q, c.d);
    const ms = Number(process.hrtime.bigint() - t) / 1e6;
    const flops = 2 * c.q.count * c.q.maxLength * c.d.count * c.d.maxLength * c.d.dim;
    rates[i].push(flops / ms / 1e6);
  });
}
const info = cpuInfo();
console.log(
  `cpu: ${info.isa} (${info.isas.join(', ')}; int8: ${cpuInt8Isas().join(', ')}), ${info.threads} threads`,
);
const medians = rates.map((r) => [...r].sort((a, b) => a - b)[r.length >> 1]);
cases.forEach((c, i) => {
  console.log(
    `${c.name.padEnd(26)} median ${medians[i].toFixed(0)} GFLOP/s   (${rates[i].map((r) => r.toFixed(0)).join(' ')})`,
  );
});
console.log(
  `bf16 / fp32: ${(medians[1] / medians[0]).toFixed(2)}x   all pairs / one query (per FLOP): ${(medians[2] / medians[0]).toFixed(2)}x`,
);
console.log(`int8 / fp32 (one query): ${(medians[3] / medians[0]).toFixed(2)}x`);
