// A child process for pinning.test.ts: starts one async native job, then mutates, reassigns or detaches
// its inputs before awaiting it, and prints whether the result equals the result on an untouched copy.
// Run as: node --expose-gc pin-child.js <operation> <mutation>. A crash shows as a signal in the parent.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  CorpusWriter,
  maxsim,
  maxsimTrain,
  openCorpus,
  quantize,
  raggedBatch,
  type TokenBatch,
  topK,
} from '../src/index.js';
import { maxsimSync } from '../src/subpaths/sync.js';

const [operation, mutation] = process.argv.slice(2);
const gc = (globalThis as { gc?: () => void }).gc ?? (() => {});

function batch(count: number, length: number, dim: number, seed: number): TokenBatch {
  const data = new Float32Array(count * length * dim);
  let x = seed;
  for (let i = 0; i < data.length; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    data[i] = x / 2 ** 31 - 1;
  }
  const offsets = Array.from({ length: count + 1 }, (_, b) => b * length);
  return raggedBatch(data, offsets, { dim, checkFinite: false });
}

function copy(b: TokenBatch): TokenBatch {
  return {
    ...b,
    data: b.data.slice(),
    starts: b.starts.slice(),
    lengths: b.lengths.slice(),
    scales: b.scales?.slice(),
  };
}

// Mutations of a batch after the job started: what the job read was validated before.
function mutate(b: TokenBatch, how: string): void {
  const w = b as { -readonly [K in keyof TokenBatch]: TokenBatch[K] };
  const last = b.count - 1;
  if (how === 'lengths') {
    w.lengths[last] = 2 ** 31 - 1;
    w.lengths[0] = 2 ** 31 - 1;
  } else if (how === 'starts') {
    w.starts[last] = 2 ** 40;
    w.starts[0] = -5;
  } else if (how === 'reassign') {
    w.data = new Float32Array(b.dim) as never;
    w.starts = new Float64Array(1);
    w.lengths = new Int32Array(1);
    if (w.scales) w.scales = new Float32Array(1);
    gc();
  } else if (how === 'detach') {
    for (const view of [b.data, b.starts, b.lengths, b.scales])
      if (view) structuredClone(view.buffer, { transfer: [view.buffer as ArrayBuffer] });
    gc();
  } else if (how === 'overwrite') {
    b.data.fill(0);
  } else throw new Error(`unknown mutation ${how}`);
}

function same(a: ArrayLike<number>, b: ArrayLike<number>): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) return false;
  return true;
}

const threads = 1;
const docs = batch(3000, 48, 64, 7);
const queries = batch(4, 32, 64, 11);
const query = {
  kind: 'matrix' as const,
  dtype: 'float32' as const,
  data: queries.data.slice(0, 32 * 64),
  length: 32,
  dim: 64,
};
const target = process.env.PIN_TARGET === 'queries' ? 'queries' : 'docs';

async function run(): Promise<boolean> {
  const opts = { backend: 'cpu' as const, threads };
  const victim = (q: TokenBatch, d: TokenBatch) => (target === 'queries' ? q : d);
  if (operation === 'maxsim' || operation === 'topK') {
    const ref = maxsimSync(queries, copy(docs), opts).data.slice(0, docs.count);
    const d = copy(docs);
    if (operation === 'topK') {
      const p = topK(query, d, 5, opts);
      mutate(d, mutation);
      const hits = await p;
      const best = [...ref].map((s, i) => ({ s, i })).sort((a, b) => b.s - a.s || a.i - b.i);
      return hits.every((h, r) => h.index === best[r].i && h.score === best[r].s);
    }
    const p = maxsim(query, d, opts);
    mutate(d, mutation);
    return same(await p, ref);
  }
  if (operation === 'maxsim-batch' || operation === 'int8') {
    const int8 = operation === 'int8';
    const q0 = int8 ? quantize(queries, 'int8') : queries;
    const d0 = int8 ? quantize(docs, 'int8') : docs;
    const ref = maxsimSync(copy(q0), copy(d0), opts).data;
    const q = copy(q0);
    const d = copy(d0);
    const p = maxsim(q, d, opts);
    mutate(victim(q, d), mutation);
    return same((await p).data, ref);
  }
  if (operation === 'train' || operation === 'backward') {
    const small = batch(600, 40, 64, 3);
    const ref = await maxsimTrain(copy(queries), copy(small), opts);
    const grad = new Float64Array(ref.scores.length).fill(1);
    const refGrad = await ref.backward(grad);
    const q = copy(queries);
    const d = copy(small);
    if (operation === 'train') {
      const p = maxsimTrain(q, d, opts);
      mutate(victim(q, d), mutation);
      const r = await p;
      return same(r.scores, ref.scores) && same(r.argmax, ref.argmax);
    }
    const r = await maxsimTrain(q, d, opts);
    const p = r.backward(grad);
    if (mutation === 'argmax') r.argmax.fill(2 ** 30);
    else mutate(victim(q, d), mutation);
    const g = await p;
    return same(g.dQ, refGrad.dQ) && same(g.dD, refGrad.dD);
  }
  if (operation === 'corpus') {
    // corpus.search scans block after block with awaits in between: the queries must be read as they
    // were at the call for every block (it threw std::bad_alloc on a mutated query batch)
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-pin-'));
    try {
      const w = CorpusWriter.create(path.join(dir, 'c'), { dtype: 'float32', dim: 64 });
      w.add(copy(docs));
      w.commit();
      const corpus = openCorpus(path.join(dir, 'c'));
      const options = { backend: 'cpu' as const, threads, topK: 5, blockBytes: 64 * 1024 };
      const ref = await corpus.search(copy(queries), options);
      const q = copy(queries);
      const p = corpus.search(q, options);
      mutate(q, mutation);
      const hits = await p;
      return JSON.stringify(hits) === JSON.stringify(ref) && ref.every((r) => r.length === 5);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }
  throw new Error(`unknown operation ${operation}`);
}

run().then(
  (equal) => {
    console.log(JSON.stringify({ ok: true, equal }));
  },
  (e: unknown) => {
    console.log(
      JSON.stringify({ ok: false, error: e instanceof Error ? `${e.name}: ${e.message}` : String(e) }),
    );
  },
);
