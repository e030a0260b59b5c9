// What centering (quantize(..., { center: true }): the documents less their token mean, the shift
// added back to the scores) does to 8-bit ranking fidelity, against plain 8-bit, on corpora whose
// tokens share a strong common direction and on isotropic ones (docs/eight-bit.md). int8 is scored by
// the CPU int8 engine; fp8 e4m3 (scale max|x| / 448, round to nearest even, queries per token) is
// emulated on the host: the values rounded to e4m3 and scored in fp32, the mean added back to the
// dequantized documents. Pseudo-queries: 32 tokens drawn from a random document, 0.1 relative noise.
// Run: node dist/bench/center-fidelity.js [--quick]

import { e4m3ToFloat } from '../src/backends/reference-fp8.js';
import { anisotropicCorpus, anisotropy, pseudoQueries } from '../src/bench/corpora.js';
import { spearman } from '../src/bench/fidelity.js';
import { demoCorpus } from '../src/demo/corpus.js';
import { decodeToFloat32 } from '../src/floats.js';
import { tokenMean } from '../src/ops/center.js';
import { maxsim } from '../src/ops/maxsim.js';
import { quantize, type ScaleGranularity } from '../src/ops/quantize.js';
import { rankRows } from '../src/ops/shape.js';
import type { ScoreMatrix, TokenBatch } from '../src/tensor.js';

// the non-negative finite e4m3 values, ascending (codes 0..126)
const E4M3 = Float64Array.from({ length: 127 }, (_, c) => e4m3ToFloat(c));

/** x rounded to the nearest e4m3 value (ties to the even code), saturating at 448. */
function toE4m3(x: number): number {
  const a = Math.min(Math.abs(x), 448);
  let lo = 0;
  let hi = 126;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (E4M3[mid] <= a) lo = mid;
    else hi = mid;
  }
  const dl = a - E4M3[lo];
  const dh = E4M3[hi] - a;
  const v = dl < dh || (dl === dh && lo % 2 === 0) ? E4M3[lo] : E4M3[hi];
  return x < 0 ? -v : v;
}

/** fp8 e4m3 round trip of a float batch (less mean when given, which is added back). */
function fp8RoundTrip(x: TokenBatch, scales: ScaleGranularity, mean?: Float32Array): TokenBatch {
  const d = x.dim;
  const v = decodeToFloat32(x.data, x.dtype, d);
  const out = new Float32Array(v.length);
  const mu = mean ?? new Float32Array(d);
  const tokenMax = (t: number) => {
    let m = 0;
    for (let k = 0; k < d; k++) m = Math.max(m, Math.abs(v[t * d + k] - mu[k]));
    return m;
  };
  for (let b = 0; b < x.count; b++) {
    const s0 = x.starts[b];
    const end = s0 + x.lengths[b];
    let docMax = 0;
    if (scales === 'document') for (let t = s0; t < end; t++) docMax = Math.max(docMax, tokenMax(t));
    for (let t = s0; t < end; t++) {
      const m = scales === 'document' ? docMax : tokenMax(t);
      const s = Math.fround(m / 448);
      for (let k = 0; k < d; k++) {
        const r = v[t * d + k] - mu[k];
        out[t * d + k] = (s > 0 ? toE4m3(r / s) * s : 0) + mu[k];
      }
    }
  }
  return { ...x, dtype: 'float32', data: out, scales: undefined };
}

interface Row {
  rho: number;
  rhoMin: number;
  top10: number;
  top20: number;
}

function compare(exact: ScoreMatrix, approx: ScoreMatrix): Row {
  const rhos: number[] = [];
  for (let i = 0; i < exact.rows; i++)
    rhos.push(
      spearman(
        exact.data.subarray(i * exact.cols, (i + 1) * exact.cols),
        approx.data.subarray(i * approx.cols, (i + 1) * approx.cols),
      ),
    );
  const overlap = (k: number) => {
    const e = rankRows(exact, k);
    const a = rankRows(approx, k);
    let s = 0;
    e.forEach((row, i) => {
      const set = new Set(row.map((h) => h.index));
      s += a[i].filter((h) => set.has(h.index)).length / Math.max(1, row.length);
    });
    return s / e.length;
  };
  return {
    rho: rhos.reduce((a, b) => a + b, 0) / rhos.length,
    rhoMin: Math.min(...rhos),
    top10: overlap(10),
    top20: overlap(20),
  };
}

async function measure(name: string, docs: TokenBatch, queries: TokenBatch): Promise<void> {
  const a = anisotropy(docs);
  console.log(
    `\n${name}: ${docs.count} documents, d = ${docs.dim}, ${queries.count} queries; mean token cosine ${a.meanCosine.toFixed(3)}, mean unit token norm ${a.meanNorm.toFixed(3)}`,
  );
  console.log('format                  | centered | rho mean  | rho min   | top-10 | top-20');
  const exact = await maxsim(queries, docs, { backend: 'cpu' });
  const q8 = quantize(queries, 'int8');
  const qf8 = fp8RoundTrip(queries, 'token');
  const mean = tokenMean(
    decodeToFloat32(docs.data, docs.dtype, docs.dim),
    docs.dim,
    docs.starts,
    docs.lengths,
  );
  for (const format of ['int8', 'fp8'] as const)
    for (const scales of ['token', 'document'] as const)
      for (const center of [false, true]) {
        const approx =
          format === 'int8'
            ? await maxsim(q8, quantize(docs, 'int8', { scales, center }), { backend: 'cpu' })
            : await maxsim(qf8, fp8RoundTrip(docs, scales, center ? mean : undefined), { backend: 'cpu' });
        const r = compare(exact, approx);
        console.log(
          `${`${format}, ${scales} scales`.padEnd(23)} | ${(center ? 'yes' : 'no').padEnd(8)} | ${r.rho.toFixed(6)} | ${r.rhoMin.toFixed(6)} | ${r.top10.toFixed(4)} | ${r.top20.toFixed(4)}`,
        );
      }
}

const quick = process.argv.includes('--quick');
const nq = quick ? 32 : 200;
const drawn = (docs: TokenBatch, n: number) =>
  pseudoQueries(docs, { queries: n, length: 32, noise: 0.1, seed: 7 }).queries;
const aniso48 = anisotropicCorpus();
await measure('anisotropic (defaults, like mxbai-edge-colbert-v0-17m)', aniso48, drawn(aniso48, nq));
const aniso128 = anisotropicCorpus({ docs: quick ? 500 : 2000, dim: 128, seed: 43 });
await measure('anisotropic, d = 128', aniso128, drawn(aniso128, quick ? 32 : 100));
const iso = anisotropicCorpus({ docs: quick ? 500 : 2000, dim: 128, common: 0, seed: 44 });
await measure('isotropic (the generator with common = 0)', iso, drawn(iso, quick ? 32 : 100));
const demo = demoCorpus({ docs: quick ? 1000 : 5000, queries: quick ? 16 : 64, seed: 42 });
await measure('demo corpus (isotropic prototypes)', demo.docs, demo.queries);
