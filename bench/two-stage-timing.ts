// Two-stage top-10 (int8 scan + exact rescoring of 40 candidates) against the int8 scan alone and
// the exact fp32 top-10, one query of 32 tokens over 20,000 documents of 128 tokens, d = 128, CPU.
// Medians of 5 interleaved rounds. Run: node dist/bench/two-stage-timing.js
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { maxsim, topK } from '../src/ops/maxsim.js';
import { quantize } from '../src/ops/quantize.js';
import { twoStageTopK } from '../src/ops/two-stage.js';
import { denseBatch, tokenMatrix } from '../src/tensor.js';
import { interleavedMedians } from './interleave.js';

const rng = new Rng(11);
const docs = denseBatch(randomUnitTokens(rng, 20000 * 128, 128), {
  count: 20000,
  length: 128,
  dim: 128,
  checkFinite: false,
});
const docsInt8 = quantize(docs, 'int8');
const q = tokenMatrix(randomUnitTokens(rng, 32, 128), 32, 128);
const qInt8 = quantize(q, 'int8');
const cases: Record<string, () => Promise<unknown>> = {
  'int8 scan': () => maxsim(qInt8, docsInt8, { backend: 'cpu' }),
  'two-stage top-10': () => twoStageTopK(q, docs, docsInt8, 10, { backend: 'cpu' }),
  'exact fp32 top-10': () => topK(q, docs, 10, { backend: 'cpu' }),
};
const times = await interleavedMedians(cases, 5);
for (const [name, t] of Object.entries(times)) console.log(`${name.padEnd(18)} ${t.median.toFixed(1)} ms`);
const exact = await topK(q, docs, 10, { backend: 'cpu' });
const two = await twoStageTopK(q, docs, docsInt8, 10, { backend: 'cpu' });
console.log(`two-stage top-10 equals exact: ${JSON.stringify(two) === JSON.stringify(exact)}`);
