// The demo page's script: embeds the documents once into a corpus held in wasm memory, then ranks
// them for each query typed. Served from the package root: ../../dist/src/browser/index.js.
import { corpusFromBuffers, init, tokenMatrix } from '../../dist/src/browser/index.js';
import { DIM, DOCUMENTS, embed } from './embed.js';

const status = document.getElementById('status');
const results = document.getElementById('results');
const input = document.getElementById('query');

await init();
const vectors = DOCUMENTS.map(embed);
const offsets = [0];
for (const v of vectors) offsets.push(offsets[offsets.length - 1] + v.length / DIM);
const data = new Float32Array(offsets[offsets.length - 1] * DIM);
vectors.forEach((v, i) => {
  data.set(v, offsets[i] * DIM);
});
const corpus = corpusFromBuffers({
  data: data.buffer,
  offsets,
  dim: DIM,
  ids: DOCUMENTS.map((_, i) => `doc${i}`),
});

async function rerank() {
  const q = embed(input.value);
  const t0 = performance.now();
  const hits = await corpus.search(tokenMatrix(q, q.length / DIM, DIM), DOCUMENTS.length);
  const ms = performance.now() - t0;
  results.replaceChildren(
    ...hits.map((h) => {
      const li = document.createElement('li');
      li.dataset.id = h.id;
      const score = document.createElement('span');
      score.className = 'score';
      score.textContent = h.score.toFixed(3);
      li.append(score, DOCUMENTS[h.index]);
      return li;
    }),
  );
  status.textContent = `${DOCUMENTS.length} documents ranked in ${ms.toFixed(2)} ms`;
  document.body.dataset.ranked = String(Number(document.body.dataset.ranked ?? 0) + 1);
}

document.getElementById('form').addEventListener('submit', (e) => {
  e.preventDefault();
  rerank();
});
await rerank();
