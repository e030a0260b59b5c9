// The backward pass under contention: every query token picks the same few document tokens, so
// the atomic dD scatter serializes on them while the CSR path reduces each row once. Device-resident
// inputs (uploaded once; the argmax and the gradients stay on the GPU), so the wall-clock backward is
// the kernels plus a launch round trip: medians of 5 per path, and the dD kernels alone (CUDA events,
// median of 3). 'auto' reports the path it chose. Run: node dist/bench/train-contention.js [B] [hotTokens]
import { cuda } from '../src/backends/cuda.js';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { maxsimTrain } from '../src/ops/train.js';
import { denseBatch, encodeFloats } from '../src/tensor.js';

const b = Number(process.argv[2] ?? 64);
const hot = Number(process.argv[3] ?? 2);
const [lq, ld, dim] = [1024, 1024, 128];
const rng = new Rng(9);
const q = randomUnitTokens(rng, b * lq, dim);
const d = randomUnitTokens(rng, b * ld, dim);
// Query tokens lean towards one shared direction, and the first `hot` tokens of every document point
// along it (scaled up), so they win nearly every max.
const mean = randomUnitTokens(rng, 1, dim);
const norm = 1;
for (let t = 0; t < b * lq; t++) {
  let ss = 0;
  for (let k = 0; k < dim; k++) {
    q[t * dim + k] = mean[k] + 0.5 * q[t * dim + k];
    ss += q[t * dim + k] ** 2;
  }
  for (let k = 0; k < dim; k++) q[t * dim + k] /= Math.sqrt(ss);
}
for (let doc = 0; doc < b; doc++) {
  for (let t = 0; t < hot; t++) {
    for (let k = 0; k < dim; k++)
      d[(doc * ld + t) * dim + k] = (4 * mean[k]) / norm + 0.01 * (rng.float() - 0.5);
  }
}
const batch = (x: Float32Array, length: number) =>
  denseBatch(encodeFloats(x, 'float16'), { count: b, length, dim, dtype: 'float16', checkFinite: false });
const gpu = await cuda();
const queries = await gpu.upload(batch(q, lq));
const docs = await gpu.upload(batch(d, ld));
const grad = new Float32Array(b * b).fill(1 / b);
const result: Record<string, number | string | undefined> = {};
for (const dDPath of ['csr', 'atomic', 'auto'] as const) {
  const fwd = await maxsimTrain(queries, docs, { dDPath });
  const argmax = await fwd.downloadArgmax();
  let hits = 0;
  for (const a of argmax) if (a >= 0 && a < hot) hits++;
  result.hotFraction = hits / argmax.length;
  const drop = (g: { dQ: { dispose(): void }; dD: { dispose(): void } }) => {
    g.dQ.dispose();
    g.dD.dispose();
  };
  const warm = await fwd.backward(grad, { retain: true }); // warm-up
  if (dDPath === 'auto') result.autoChose = warm.dDPath;
  drop(warm);
  const times: number[] = [];
  for (let r = 0; r < 5; r++) {
    const t = process.hrtime.bigint();
    drop(await fwd.backward(grad, { retain: true }));
    times.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  fwd.dispose();
  result[`${dDPath}Ms`] = times.sort((x, y) => x - y)[2];
  // the dD kernels alone (CUDA events), median of 3 profiled passes
  const prof = await maxsimTrain(queries, docs, { dDPath, cudaTuning: { profile: true } });
  const kernel: number[] = [];
  for (let r = 0; r < 3; r++) {
    const g = await prof.backward(grad, { retain: true });
    kernel.push(g.profileMs?.dD ?? Number.NaN);
    drop(g);
  }
  prof.dispose();
  result[`${dDPath}DdKernelMs`] = kernel.sort((x, y) => x - y)[1];
}
gpu.dispose();
result.atomicOverCsr = (result.atomicMs as number) / (result.csrMs as number);
result.atomicOverCsrDdKernel = (result.atomicDdKernelMs as number) / (result.csrDdKernelMs as number);
console.log(JSON.stringify({ shape: `${b},${lq},${ld},${dim},${b}`, hotTokens: hot, ...result }));
