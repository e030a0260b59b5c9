// The training forward kernels side by side (all pairs B x B, ColPali's Lq = Ld = 1024 unless given,
// d = 128, float16, inputs on the device), interleaved rounds, kernel time by CUDA events (the
// profiled pass's forwardKernel), medians after one warm-up round: the wgmma forward with its TMA
// producer (the default on sm_90), its cp.async twin, and the mma.sync forward (sm_80's).
// Run on a GPU host: node dist/bench/train-forward.js [B = 128] [rounds = 7] [Lq = 1024] [Ld = 1024]
import { cuda } from '../src/backends/cuda.js';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { encodeFloats } from '../src/floats.js';
import type { TrainKernel } from '../src/ops/train.js';
import { maxsimTrainTuned } from '../src/subpaths/internal.js';
import { denseBatch } from '../src/tensor.js';

const B = Number(process.argv[2] ?? 128);
const rounds = Number(process.argv[3] ?? 7);
const Lq = Number(process.argv[4] ?? 1024);
const Ld = Number(process.argv[5] ?? 1024);
const D = 128;
const rng = new Rng(7);
const batch = (length: number) =>
  denseBatch(encodeFloats(randomUnitTokens(rng, B * length, D), 'float16'), {
    count: B,
    length,
    dim: D,
    dtype: 'float16',
  });
const gpu = await cuda();
const queries = await gpu.upload(batch(Lq));
const docs = await gpu.upload(batch(Ld));
const arms: [string, TrainKernel, boolean][] = [
  ['wgmma (TMA)', 'wgmma', true],
  ['wgmma (cp.async)', 'wgmma', false],
  ['mma', 'mma', false],
];
const times = new Map<string, number[]>(arms.map(([name]) => [name, []]));
for (let r = 0; r <= rounds; r++) {
  for (const [name, trainKernel, forwardTma] of arms) {
    const res = await maxsimTrainTuned(queries, docs, {
      backend: 'cuda',
      trainKernel,
      cudaTuning: { profile: true, forwardTma },
    });
    if (r > 0) times.get(name)?.push(res.profileMs?.forwardKernel ?? Number.NaN);
    res.dispose();
  }
}
const median = (x: number[]) => [...x].sort((a, b) => a - b)[x.length >> 1];
const flops = 2 * B * B * Lq * Ld * D;
for (const [name, t] of times) {
  const ms = median(t);
  console.log(
    `B=${B} Lq=${Lq} Ld=${Ld} ${name}: forward kernel ${ms.toFixed(3)} ms, ${(flops / (ms / 1e3) / 1e12).toFixed(0)} TFLOP/s (rounds: ${t.map((x) => x.toFixed(2)).join(' ')})`,
  );
}
gpu.dispose();
