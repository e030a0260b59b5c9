// Whether an 8-bit pass of `maxsim serve --dtype int8` can keep its answers exact with coarser scales:
// the server scans the int8 copy, keeps 4 x k candidates per query and rescores them exactly, so its
// top-k equals the exact one when every true hit is among the candidates. This measures that recall
// on the CPU for per-token and per-document scales, centered or not, on an anisotropic corpus (every
// token alpha * mu + noise, normalised to a norm in [0.8, 1.2]: the shared direction mu gives a mean
// cosine of ~0.82 at alpha 3 and ~0.93 at alpha 5, like real ColBERT tokens), with pseudo-queries
// drawn from documents' tokens plus noise.
//
// Run: node dist/bench/eight-bit-candidates.js [--alpha 5] [--docs 4000] [--doc-len 48] [--dim 64]
//        [--queries 64] [--query-len 32] [--k 10] [--factor 4] [--seed 1]
import { Rng } from '../src/demo/random.js';
import { topK } from '../src/ops/maxsim.js';
import { quantize } from '../src/ops/quantize.js';
import { denseBatch } from '../src/tensor.js';

const a = { alpha: 5, docs: 4000, docLen: 48, dim: 64, queries: 64, queryLen: 32, k: 10, factor: 4, seed: 1 };
const flags: Record<string, keyof typeof a> = {
  '--alpha': 'alpha',
  '--docs': 'docs',
  '--doc-len': 'docLen',
  '--dim': 'dim',
  '--queries': 'queries',
  '--query-len': 'queryLen',
  '--k': 'k',
  '--factor': 'factor',
  '--seed': 'seed',
};
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) {
  const key = flags[argv[i]];
  const v = Number(argv[i + 1]);
  if (key === undefined || !(v >= 0))
    throw new Error(`${argv[i]}: expected a number >= 0, received ${argv[i + 1]}`);
  a[key] = v;
}

const rng = new Rng(a.seed);
const D = a.dim;
const mu = Float32Array.from({ length: D }, () => rng.normal());
const muNorm = Math.hypot(...mu);
for (let k = 0; k < D; k++) mu[k] /= muNorm;

function token(out: Float32Array, at: number) {
  let s = 0;
  for (let k = 0; k < D; k++) {
    const v = a.alpha * mu[k] + (rng.normal() / Math.sqrt(D)) * (1 + 0.5 * Math.abs(rng.normal()));
    out[at + k] = v;
    s += v * v;
  }
  const norm = Math.sqrt(s) / (0.8 + 0.4 * (rng.int(1000) / 1000));
  for (let k = 0; k < D; k++) out[at + k] /= norm;
}

const docs = new Float32Array(a.docs * a.docLen * D);
for (let t = 0; t < a.docs * a.docLen; t++) token(docs, t * D);
const queries = new Float32Array(a.queries * a.queryLen * D);
for (let q = 0; q < a.queries; q++) {
  const d = rng.int(a.docs);
  for (let t = 0; t < a.queryLen; t++) {
    const src = (d * a.docLen + rng.int(a.docLen)) * D;
    for (let k = 0; k < D; k++) queries[(q * a.queryLen + t) * D + k] = docs[src + k] + 0.05 * rng.normal();
  }
}
let cos = 0;
for (let i = 0; i < 2000; i++) {
  const x = rng.int(a.docs * a.docLen) * D;
  const y = rng.int(a.docs * a.docLen) * D;
  let dot = 0;
  let nx = 0;
  let ny = 0;
  for (let k = 0; k < D; k++) {
    dot += docs[x + k] * docs[y + k];
    nx += docs[x + k] ** 2;
    ny += docs[y + k] ** 2;
  }
  cos += dot / Math.sqrt(nx * ny);
}
const db = denseBatch(docs, { count: a.docs, length: a.docLen, dim: D });
const qb = denseBatch(queries, { count: a.queries, length: a.queryLen, dim: D });
const exact = await topK(qb, db, a.k, { backend: 'cpu' });
console.log(
  `eight-bit-candidates: ${a.docs} x ${a.docLen} x ${D}, mean token cosine ${(cos / 2000).toFixed(3)} (alpha ${a.alpha}), ${a.queries} queries of ${a.queryLen}, top-${a.k}, ${a.factor} x k candidates`,
);
for (const scales of ['token', 'document'] as const)
  for (const center of [false, true]) {
    const qi = quantize(qb, 'int8');
    const di = quantize(db, 'int8', { scales, center });
    const cand = await topK(qi, di, a.factor * a.k, { backend: 'cpu' });
    let found = 0;
    let whole = 0;
    for (let q = 0; q < a.queries; q++) {
      const ids = new Set(cand[q].map((h) => h.index));
      const n = exact[q].filter((h) => ids.has(h.index)).length;
      found += n;
      if (n === exact[q].length) whole++;
    }
    console.log(
      `scales ${scales.padEnd(8)} centered ${String(center).padEnd(5)}: true top-${a.k} among the candidates ${(found / (a.queries * a.k)).toFixed(4)}, exact answers ${whole} / ${a.queries}`,
    );
  }
