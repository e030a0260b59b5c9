// Scoring and top-K in memory: a ColBERT-like demo corpus with planted relevant documents, searched
// exactly, then through an int8 scan with exact rescoring (the same hits, fewer bytes scanned).
//
// Run: npm run build && node dist/examples/search.js [--docs N] [--backend auto|cpu|cuda]
import { type BackendName, quantize, topK, twoStageTopK } from 'maxsim';
import { demoCorpus } from 'maxsim/internal';

const arg = (name: string, fallback: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
};
const backend = arg('backend', 'auto') as BackendName | 'auto';

// docs: a ragged batch (packed tokens + offsets); queries: a dense [4, 32, 128] batch
const { docs, queries, relevant } = demoCorpus({ docs: Number(arg('docs', '2000')), queries: 4 });
console.log(
  `${docs.count} documents, ${queries.count} queries of ${queries.maxLength} tokens, d = ${docs.dim}`,
);

let t = performance.now();
const hits = await topK(queries, docs, 10, { backend });
const exactMs = performance.now() - t;
hits.forEach((list, q) => {
  const found = relevant[q].filter((b) => list.some((h) => h.index === b)).length;
  console.log(
    `query ${q}: top hits ${list
      .slice(0, 3)
      .map((h) => `${h.index} (${h.score.toFixed(2)})`)
      .join(', ')}; ` + `${found}/${relevant[q].length} planted documents in the top 10`,
  );
});

// int8 documents (one float32 scale per token) for the scan, the float32 ones for the rescoring
const docs8 = quantize(docs, 'int8');
t = performance.now();
const twoStage = await twoStageTopK(queries, docs, docs8, 10, { backend });
const twoStageMs = performance.now() - t;
const same = twoStage.every((list, q) => list.every((h, i) => h.index === hits[q][i].index));
console.log(
  `exact top-10 ${exactMs.toFixed(0)} ms; int8 scan + exact rescoring ${twoStageMs.toFixed(0)} ms, ` +
    `${same ? 'the same' : 'different'} hits`,
);
