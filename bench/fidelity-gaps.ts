// Why int8 top-20 overlap on the demo corpus stays below 99%: for each query, the fp32 score gap
// between ranks 20 and 21 against the largest |int8 - fp32| score error of that query (both sides
// quantized per token, scored on the CPU), and how many top-20 slots change. Same corpus as
// `maxsim fidelity` (10,000 documents, 64 queries, seed 42).
// Run: node dist/bench/fidelity-gaps.js
import { demoCorpus } from '../src/demo/corpus.js';
import { maxsim } from '../src/ops/maxsim.js';
import { quantize } from '../src/ops/quantize.js';

const corpus = demoCorpus({ docs: 10_000, queries: 64, seed: 42 });
const exact = await maxsim(corpus.queries, corpus.docs, { backend: 'cpu' });
const approx = await maxsim(quantize(corpus.queries, 'int8'), quantize(corpus.docs, 'int8'), {
  backend: 'cpu',
});
const gaps: number[] = [];
const errors: number[] = [];
let changed = 0;
let tiedAt20 = 0;
for (let q = 0; q < exact.rows; q++) {
  const e = exact.data.subarray(q * exact.cols, (q + 1) * exact.cols);
  const a = approx.data.subarray(q * exact.cols, (q + 1) * exact.cols);
  const byExact = [...e.keys()].sort((x, y) => e[y] - e[x] || x - y);
  const byApprox = [...a.keys()].sort((x, y) => a[y] - a[x] || x - y);
  let err = 0;
  for (let i = 0; i < e.length; i++) err = Math.max(err, Math.abs(e[i] - a[i]));
  const gap = e[byExact[19]] - e[byExact[20]];
  gaps.push(gap);
  errors.push(err);
  if (gap < 2 * err) tiedAt20++;
  const top = new Set(byExact.slice(0, 20));
  changed += byApprox.slice(0, 20).filter((d) => !top.has(d)).length;
}
const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[xs.length >> 1];
console.log(`queries ${exact.rows}, documents ${exact.cols}`);
console.log(
  `fp32 gap between ranks 20 and 21: median ${median(gaps).toFixed(4)}, min ${Math.min(...gaps).toFixed(4)}`,
);
console.log(`largest |int8 - fp32| score error per query: median ${median(errors).toFixed(4)}`);
console.log(`queries whose rank-20 gap is under twice that error: ${tiedAt20} of ${exact.rows}`);
console.log(
  `top-20 slots that change: ${changed} of ${exact.rows * 20} (overlap ${(1 - changed / (exact.rows * 20)).toFixed(4)})`,
);
