// Deforms a point cloud onto a target shape by gradient descent on the Chamfer distance: the source
// starts as points scattered in a cube, the target is a torus; every step runs chamferTrain (forward
// in both directions, argmin saved), backward for d loss / d P, and an Adam update of the points,
// printing the loss. The loss falls by orders of magnitude as the cube collapses onto the surface.
//
// Run: npm run build && npm run chamfer:example [-- --steps 200 --points 4000 --backend cpu|cuda]
// (CUDA when a usable GPU is present, else the CPU)

import { type BackendName, chamferTrain, info, raggedBatch } from 'maxsim';
import { Rng } from 'maxsim/internal';

function argValue(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

const steps = Number(argValue('steps', '150'));
const points = Number(argValue('points', '3000'));
const backend = argValue('backend', info().cuda.available ? 'cuda' : 'cpu') as BackendName;
const rng = new Rng(11);

// Target: a torus (ring radius 1, tube radius 0.35), sampled uniformly in its two angles.
const target = new Float32Array(points * 3);
for (let i = 0; i < points; i++) {
  const u = rng.float() * 2 * Math.PI;
  const v = rng.float() * 2 * Math.PI;
  const r = 1 + 0.35 * Math.cos(v);
  target.set([r * Math.cos(u), r * Math.sin(u), 0.35 * Math.sin(v)], i * 3);
}
// Source: the cube [-1.5, 1.5]^3.
const source = new Float32Array(points * 3);
for (let i = 0; i < source.length; i++) source[i] = (rng.float() * 2 - 1) * 1.5;

const Q = raggedBatch(target, [0, points], { dim: 3 });
const offsets = [0, points];
// Adam on the point coordinates.
const lr = 0.02;
const [beta1, beta2, eps] = [0.9, 0.999, 1e-8];
const m = new Float64Array(source.length);
const v = new Float64Array(source.length);
const grad = new Float64Array([1]);
let first = 0;
let last = 0;
for (let step = 1; step <= steps; step++) {
  const P = raggedBatch(source, offsets, { dim: 3 });
  const fwd = await chamferTrain(P, Q, { backend, reduction: 'mean' });
  const loss = fwd.distances[0];
  if (step === 1) first = loss;
  last = loss;
  const { dP } = await fwd.backward(grad);
  for (let e = 0; e < source.length; e++) {
    m[e] = beta1 * m[e] + (1 - beta1) * dP[e];
    v[e] = beta2 * v[e] + (1 - beta2) * dP[e] * dP[e];
    const mh = m[e] / (1 - beta1 ** step);
    const vh = v[e] / (1 - beta2 ** step);
    source[e] -= (lr * mh) / (Math.sqrt(vh) + eps);
  }
  console.log(
    `step ${String(step).padStart(4)}  chamfer ${loss.toFixed(6)}  (P->Q ${fwd.forward[0].toFixed(6)}, Q->P ${fwd.reverse[0].toFixed(6)})`,
  );
}
console.log(
  `loss ${first.toFixed(6)} -> ${last.toFixed(6)} after ${steps} steps on ${points} points (backend ${backend})`,
);
