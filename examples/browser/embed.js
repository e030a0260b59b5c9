// A toy token embedder for the demo (no model download): every word maps to a fixed pseudo-random
// unit vector, so a query token matches a document token exactly when they are the same word
// (dot product 1) and weakly otherwise. MaxSim then counts, per query word, its best match in the
// document: late interaction in miniature. Real use: embeddings from a ColBERT-style encoder.
export const DIM = 64;

/** Lower-cased words, with a plural 's' dropped so "cats" meets "cat". */
export function words(text) {
  return (text.toLowerCase().match(/[a-z0-9]+/g) ?? []).map((w) =>
    w.length > 3 && w.endsWith('s') ? w.slice(0, -1) : w,
  );
}

function wordVector(word, out, at) {
  let h = 2166136261;
  for (let i = 0; i < word.length; i++) h = Math.imul(h ^ word.charCodeAt(i), 16777619) >>> 0;
  let norm = 0;
  for (let k = 0; k < DIM; k++) {
    h = (Math.imul(h, 1664525) + 1013904223) >>> 0;
    const v = h / 2 ** 32 - 0.5;
    out[at + k] = v;
    norm += v * v;
  }
  const s = 1 / Math.sqrt(norm);
  for (let k = 0; k < DIM; k++) out[at + k] *= s;
}

/** Token embeddings [words, DIM] of a text, float32. */
export function embed(text) {
  const ws = words(text);
  const out = new Float32Array(ws.length * DIM);
  ws.forEach((w, i) => {
    wordVector(w, out, i * DIM);
  });
  return out;
}

export const DOCUMENTS = [
  'Cats sleep for most of the day and hunt at dawn and dusk.',
  'A kitten learns to hunt by watching its mother.',
  'Dogs need daily walks and enjoy playing fetch in the park.',
  'The GPU computes the similarity of every query token with every document token.',
  'Late interaction models keep one embedding per token instead of one per document.',
  'Bread rises because yeast turns sugar into carbon dioxide.',
  'WebAssembly runs compiled code in the browser at near native speed.',
  'Rerank the candidate documents on the client, and the query never leaves the device.',
];
