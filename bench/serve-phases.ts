// The JS thread's share of a `maxsim serve` search pass, phase by phase, without HTTP or a backend:
// what bench/serve.ts reports as decode (per request), gather, merge and answer (per pass), timed here
// on the real code with the bench's bodies (base64 float16 queries of --query-len x --dim, one query
// per request, top --top-k), so a change to the codecs is measured on any machine before a GPU run.
// The backend's answer is modelled as the GPU's: per query a heap of k (scores, indices) from native
// code, ranked by sortedHits (hitsOfHeaps), over one segment of --docs documents.
//
// Run: node dist/bench/serve-phases.js [--queries 120] [--query-len 32] [--dim 128] [--top-k 10]
//        [--docs 100000] [--repeats 200]
// Prints the median and min ms of each phase over --repeats passes (after as many warm-up passes).
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { encodeFloats, f16BitsToFloat } from '../src/floats.js';
import type { CorpusFile } from '../src/io/corpus/index.js';
import { sortedHits } from '../src/ops/topk.js';
import { searchJson } from '../src/server/answers.js';
import { concatBits, concatEncoded, type EncodedTokens, readEmbeddings } from '../src/server/codecs.js';
import { searchSegments } from '../src/server/segment-search.js';
import type { Hit } from '../src/tensor.js';

function parseArgs(argv: string[]) {
  const a = { queries: 120, queryLen: 32, dim: 128, topK: 10, docs: 100_000, repeats: 200 };
  const keys: Record<string, keyof typeof a> = {
    '--queries': 'queries',
    '--query-len': 'queryLen',
    '--dim': 'dim',
    '--top-k': 'topK',
    '--docs': 'docs',
    '--repeats': 'repeats',
  };
  for (let i = 0; i < argv.length; i += 2) {
    const key = keys[argv[i]];
    const n = Number(argv[i + 1]);
    if (key === undefined) throw new Error(`unknown argument ${argv[i]}`);
    if (!Number.isInteger(n) || n < 1)
      throw new Error(`${argv[i]}: a positive integer, received ${argv[i + 1]}`);
    a[key] = n;
  }
  return a;
}

const a = parseArgs(process.argv.slice(2));
const rng = new Rng(3);
// the same queries as nested JSON numbers (what a client without base64 sends): decode timed too
const jsonBodies: string[] = [];
const bodies = Array.from({ length: a.queries }, () => {
  const bits = encodeFloats(randomUnitTokens(rng, a.queryLen, a.dim), 'float16') as Uint16Array;
  const b64 = Buffer.from(bits.buffer, bits.byteOffset, bits.byteLength).toString('base64');
  const rows = Array.from({ length: a.queryLen }, (_, t) =>
    Array.from(bits.subarray(t * a.dim, (t + 1) * a.dim), (b) => f16BitsToFloat(b)),
  );
  jsonBodies.push(JSON.stringify({ queries: [rows], top_k: a.topK }));
  return JSON.stringify({ queries: { b64, dtype: 'float16', shape: [1, a.queryLen, a.dim] }, top_k: a.topK });
});
// the backend's heaps: k random (score, index) per query, unsorted as the native heaps are
const heapScores = Float32Array.from({ length: a.queries * a.topK }, () => rng.normal());
const heapIndices = Int32Array.from({ length: a.queries * a.topK }, () => rng.int(a.docs));
// a corpus file as the merge sees it: one segment, no deletions, ids the indices
const file = {
  deletedMask: undefined,
  isDeleted: () => false,
  id: (i: number) => String(i),
} as unknown as CorpusFile;

let parts: EncodedTokens[] = [];
let hits: Hit[][] = [];
let named: Awaited<ReturnType<typeof searchSegments>>['hits'] = [];
const phases: Record<string, () => unknown> = {
  'JSON.parse (all requests)': () => bodies.map((b) => JSON.parse(b)),
  'decode (all requests)': () => {
    parts = bodies.map((b) => readEmbeddings(JSON.parse(b).queries, 'queries', 'many', a.dim));
  },
  'JSON.parse (JSON numbers)': () => jsonBodies.map((b) => JSON.parse(b)),
  'decode (JSON numbers)': () =>
    jsonBodies.map((b) => readEmbeddings(JSON.parse(b).queries, 'queries', 'many', a.dim)),
  'gather float32': () => concatEncoded(parts, a.dim),
  'gather float16 bits': () => concatBits(parts, a.dim),
  'heaps -> hits': () => {
    hits = [];
    for (let r = 0; r < a.queries; r++) hits.push(sortedHits(heapScores, heapIndices, a.topK, r * a.topK));
  },
  'merge + ids': async () => {
    const run = async () => hits;
    named = (await searchSegments(file, a.queries, a.topK, [{ firstDocument: 0, documents: a.docs, run }]))
      .hits;
  },
  'split + answer JSON': () => {
    for (let r = 0; r < a.queries; r++) searchJson([named[r].slice(0, a.topK)], () => false);
  },
};
// (a decode row includes its JSON.parse, timed alone in the row above it)
const times: Record<string, number[]> = {};
for (let rep = 0; rep < 2 * a.repeats; rep++)
  for (const [name, f] of Object.entries(phases)) {
    const t0 = performance.now();
    await f();
    const t = performance.now() - t0;
    if (rep >= a.repeats) {
      times[name] ??= [];
      times[name].push(t);
    }
  }
const med = (x: number[]) => [...x].sort((p, q) => p - q)[x.length >> 1];
console.log(
  `serve-phases: ${a.queries} requests of 1 query (${a.queryLen} x ${a.dim} float16 base64), top-${a.topK}, medians of ${a.repeats} passes`,
);
for (const [name, t] of Object.entries(times))
  console.log(`${name.padEnd(28)} ${med(t).toFixed(3).padStart(8)} ms  (min ${Math.min(...t).toFixed(3)})`);
