// What sharing one int8 scale across a document (or the whole corpus) would cost in ranking fidelity,
// against the per-token scales that maxsim uses. The H200 measured that uniform document scales would
// let the 8-bit ColPali kernels skip the per-value scale multiply (int8 1.95 ms against 2.80, fp8 2.1
// against 2.45; bench/NOTES.md, 'Document scales'); this prints the other side of that trade. Documents are
// quantized three ways (per token, per document, per corpus: scale = max|x| / 127 over the group,
// values rounded half to even), queries per token in all three, scored by the CPU int8 engine and
// compared with fp32 on the same corpora as `maxsim fidelity` (the demo corpus, 10,000 documents and
// 64 queries, seed 42; the near-tie set). fp8 e4m3 the same way (scale max|x| / 448), emulated on the
// host: the values rounded to e4m3 and scored in fp32.
// Run: node dist/bench/scale-granularity.js

import { e4m3ToFloat } from '../src/backends/reference-fp8.js';
import { nearTieCorpus, nearTieOptions, spearman } from '../src/bench/fidelity.js';
import { demoCorpus } from '../src/demo/corpus.js';
import { Rng } from '../src/demo/random.js';
import { decodeToFloat32 } from '../src/floats.js';
import { maxsim } from '../src/ops/maxsim.js';
import { quantize, roundHalfEven } from '../src/ops/quantize.js';
import { rankRows } from '../src/ops/shape.js';
import type { ScoreMatrix, TokenBatch } from '../src/tensor.js';

type Granularity = 'token' | 'document' | 'corpus';

/** int8 documents whose scale is shared by each document's tokens, or by all of them. */
function quantizeShared(docs: TokenBatch, by: 'document' | 'corpus'): TokenBatch {
  const d = docs.dim;
  const x = decodeToFloat32(docs.data, docs.dtype, d);
  const data = new Int8Array(x.length);
  const scales = new Float32Array(x.length / d);
  const absmax = (b: number) => {
    let m = 0;
    for (let i = docs.starts[b] * d; i < (docs.starts[b] + docs.lengths[b]) * d; i++)
      m = Math.max(m, Math.abs(x[i]));
    return m;
  };
  const docMax = Array.from({ length: docs.count }, (_, b) => absmax(b));
  const corpusMax = Math.max(0, ...docMax);
  for (let b = 0; b < docs.count; b++) {
    const m = by === 'corpus' ? corpusMax : docMax[b];
    if (m === 0) continue;
    const scale = Math.fround(m / 127);
    for (let t = docs.starts[b]; t < docs.starts[b] + docs.lengths[b]; t++) {
      scales[t] = scale;
      for (let k = t * d; k < (t + 1) * d; k++)
        data[k] = Math.min(127, Math.max(-127, roundHalfEven(x[k] / scale)));
    }
  }
  return {
    ...docs,
    dtype: 'int8',
    data,
    scales,
    starts: Float64Array.from(docs.starts),
    lengths: Int32Array.from(docs.lengths),
  };
}

// e4m3's finite non-negative values in code order (0 .. 448), for rounding on the host
const e4m3 = Float64Array.from({ length: 127 }, (_, c) => e4m3ToFloat(c));

/** The nearest e4m3 value (ties to the even code, saturating at 448), as the GPU quantizer rounds. */
function roundE4m3(v: number): number {
  const a = Math.min(Math.abs(v), 448);
  let lo = 0;
  let hi = 126;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (e4m3[mid] <= a) lo = mid;
    else hi = mid;
  }
  const below = a - e4m3[lo];
  const above = e4m3[hi] - a;
  const c = below < above ? lo : above < below ? hi : lo % 2 === 0 ? lo : hi;
  return Math.sign(v) * e4m3[c];
}

/**
 * fp8 e4m3 emulated on the host: float32 tokens replaced by code x scale, the scale max|x| / 448 per
 * token, per item or over all items (x / scale in fp32, as the GPU quantizer computes it).
 */
function fp8Dequantized(batch: TokenBatch, by: Granularity): TokenBatch {
  const d = batch.dim;
  const x = decodeToFloat32(batch.data, batch.dtype, d);
  const out = new Float32Array(x.length);
  const absmax = (from: number, to: number) => {
    let m = 0;
    for (let i = from * d; i < to * d; i++) m = Math.max(m, Math.abs(x[i]));
    return m;
  };
  const quant = (from: number, to: number, m: number) => {
    if (m === 0) return;
    const scale = Math.fround(m / 448);
    for (let i = from * d; i < to * d; i++) out[i] = roundE4m3(Math.fround(x[i] / scale)) * scale;
  };
  const itemMax = Array.from({ length: batch.count }, (_, b) =>
    absmax(batch.starts[b], batch.starts[b] + batch.lengths[b]),
  );
  const all = Math.max(0, ...itemMax);
  for (let b = 0; b < batch.count; b++) {
    const [from, to] = [batch.starts[b], batch.starts[b] + batch.lengths[b]];
    if (by === 'token') for (let t = from; t < to; t++) quant(t, t + 1, absmax(t, t + 1));
    else quant(from, to, by === 'corpus' ? all : itemMax[b]);
  }
  return { ...batch, dtype: 'float32', data: out };
}

async function report(name: string, queries: TokenBatch, docs: TokenBatch, relevant?: number[][]) {
  const exact = await maxsim(queries, docs, { backend: 'cpu' });
  const q8 = quantize(queries, 'int8');
  const top = (m: ScoreMatrix, k: number) => rankRows(m, k).map((h) => h.map((x) => x.index));
  const [e10, e20] = [top(exact, 10), top(exact, 20)];
  const qf8 = fp8Dequantized(queries, 'token');
  const runs: [string, Granularity, () => Promise<ScoreMatrix>][] = [];
  for (const g of ['token', 'document', 'corpus'] as Granularity[])
    runs.push([
      'int8',
      g,
      () => maxsim(q8, g === 'token' ? quantize(docs, 'int8') : quantizeShared(docs, g), { backend: 'cpu' }),
    ]);
  for (const g of ['token', 'document', 'corpus'] as Granularity[])
    runs.push(['fp8 (host emulation)', g, () => maxsim(qf8, fp8Dequantized(docs, g), { backend: 'cpu' })]);
  for (const [format, g, score] of runs) {
    const approx = await score();
    const [a10, a20] = [top(approx, 10), top(approx, 20)];
    const rows = exact.rows;
    const rhos = Array.from({ length: rows }, (_, i) =>
      spearman(
        exact.data.subarray(i * exact.cols, (i + 1) * exact.cols),
        approx.data.subarray(i * exact.cols, (i + 1) * exact.cols),
      ),
    );
    const overlap = (x: number[][], y: number[][]) =>
      x.reduce((s, xs, i) => s + xs.filter((v) => y[i].includes(v)).length / xs.length, 0) / rows;
    let recall = '';
    if (relevant) {
      let found = 0;
      let total = 0;
      relevant.forEach((r, i) => {
        found += r.filter((v) => a10[i].includes(v)).length;
        total += r.length;
      });
      recall = ` recall@10 ${(found / total).toFixed(3)}`;
    }
    console.log(
      `${name}, ${format} document scale per ${g}: Spearman mean ${(rhos.reduce((s, r) => s + r, 0) / rows).toFixed(5)} min ${Math.min(...rhos).toFixed(5)}, top-10 overlap ${overlap(e10, a10).toFixed(4)}, top-20 overlap ${overlap(e20, a20).toFixed(4)}${recall}`,
    );
  }
}

const demo = demoCorpus({ docs: 10_000, queries: 64, seed: 42 });
await report('demo corpus', demo.queries, demo.docs, demo.relevant);
const rng = new Rng(42);
const ties = nearTieCorpus(() => rng.float(), nearTieOptions);
await report('near-tie set', ties.queries, ties.docs);
