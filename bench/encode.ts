// Encoding throughput of a ColBERT model directory (default: the tiny test model) on this CPU:
//   node dist/bench/encode.js [MODEL_DIR] [--docs N] [--threads T]
// Seeded synthetic texts: N documents of 40-200 words, N queries of 3-10 words. One warm-up batch,
// then one timed pass each; prints one JSON line.
import * as path from 'node:path';
import { loadColbert } from '../src/encode/colbert.js';
import { packageRoot } from '../src/native.js';
import { seededText } from './texts.js';

const args = process.argv.slice(2);
const flag = (name: string, fallback: number) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const model =
  args[0] && !args[0].startsWith('--') ? args[0] : path.join(packageRoot, 'test', 'fixtures', 'tiny-colbert');
const n = flag('--docs', 2000);
const threads = args.includes('--threads') ? flag('--threads', 1) : undefined;

const { rand, text } = seededText(1);
const docs = Array.from({ length: n }, () => text(40 + Math.floor(rand() * 161)));
const queries = Array.from({ length: n }, () => text(3 + Math.floor(rand() * 8)));

const encoder = await loadColbert(model, { threads });
await encoder.encodeDocuments(docs.slice(0, 32));
let t = performance.now();
const d = await encoder.encodeDocuments(docs);
const docSeconds = (performance.now() - t) / 1000;
t = performance.now();
await encoder.encodeQueries(queries);
const querySeconds = (performance.now() - t) / 1000;
t = performance.now();
let tokens = 0;
for (const x of docs) tokens += encoder.tokenizer.document(x).ids.length;
const tokenizeSeconds = (performance.now() - t) / 1000;
await encoder.close();
console.log(
  JSON.stringify({
    model,
    texts: n,
    documentsPerSecond: Math.round(n / docSeconds),
    documentTokensPerSecond: Math.round(tokens / docSeconds),
    keptDocumentTokens: d.lengths.reduce((a, b) => a + b, 0),
    queriesPerSecond: Math.round(n / querySeconds),
    tokenizeTokensPerSecond: Math.round(tokens / tokenizeSeconds),
  }),
);
