// The training backward's kernels by phase (all pairs B x B, Lq = Ld = 1024, d = 128, float16, inputs
// on the device): dQ, the dD CSR build (count, scan, placement) and its gathers, CUDA events of a
// profiled pass, with the CSR counted and placed one CTA per (document, query block) (the default)
// and one warp per unit (cudaTuning.csrBlockWalk: false), interleaved rounds, medians; plus the
// backward's wall time without profiling (dQ then overlaps dD) and whether both walks give the same dD.
// Run on a GPU host: node dist/bench/train-backward.js [B = 128] [rounds = 5]
import { cuda, type DeviceCorpus } from '../src/backends/cuda.js';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { encodeFloats } from '../src/floats.js';
import { maxsimTrainTuned } from '../src/subpaths/internal.js';
import { denseBatch, type TokenBatch } from '../src/tensor.js';

const B = Number(process.argv[2] ?? 128);
const rounds = Number(process.argv[3] ?? 5);
const L = 1024;
const D = 128;
const rng = new Rng(3);
const batch = () =>
  denseBatch(encodeFloats(randomUnitTokens(rng, B * L, D), 'float16'), {
    count: B,
    length: L,
    dim: D,
    dtype: 'float16',
    checkFinite: false,
  });
const gpu = await cuda();
const queries = await gpu.upload(batch());
const docs = await gpu.upload(batch());
// a gradient per pair that is never zero (a zero skips the pair)
const grad = Float64Array.from({ length: B * B }, (_, i) => ((i * 7919) % 1000) / 1000 + 0.001);
const median = (x: number[]) => [...x].sort((a, b) => a - b)[x.length >> 1];
const phases: Record<string, Record<string, number[]>> = { block: {}, warp: {} };
const dd: Record<string, Uint8Array> = {};
const bytes = async (c: DeviceCorpus) => {
  const data = ((await c.download()) as TokenBatch).data;
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
};
for (let r = 0; r < rounds + 1; r++) {
  for (const walk of ['block', 'warp'] as const) {
    const cudaTuning = { csrBlockWalk: walk === 'block' };
    const plain = await maxsimTrainTuned(queries, docs, { backend: 'cuda', cudaTuning });
    const t0 = performance.now();
    const g0 = await plain.backward(grad);
    const wall = performance.now() - t0;
    if (r === 0) dd[walk] = await bytes(g0.dD);
    g0.dQ.dispose();
    g0.dD.dispose();
    const prof = await maxsimTrainTuned(queries, docs, {
      backend: 'cuda',
      cudaTuning: { ...cudaTuning, profile: true },
    });
    const g = await prof.backward(grad);
    g.dQ.dispose();
    g.dD.dispose();
    if (r === 0) continue; // warm-up
    for (const [k, v] of Object.entries({ ...g.profileMs, wall })) {
      phases[walk][k] ??= [];
      phases[walk][k].push(v);
    }
  }
}
const keys = ['dQ', 'dDBuild', 'dDGather', 'dD', 'wall'];
for (const walk of ['block', 'warp'] as const) {
  const row = keys.map((k) => `${k} ${median(phases[walk][k] ?? [Number.NaN]).toFixed(3)}`).join(', ');
  console.log(`B=${B} ${walk} walk (ms, medians of ${rounds}): ${row}`);
}
const same = dd.block.length === dd.warp.length && dd.block.every((x, i) => x === dd.warp[i]);
console.log(`dD bitwise equal between the walks: ${same}`);
queries.dispose();
docs.dispose();
gpu.dispose();
