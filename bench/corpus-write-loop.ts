// /healthz latency while a server appends to and deletes from a large corpus (issue 32, item 6):
// the writes' O(corpus) work runs in a worker, so the event loop should keep answering. Builds a
// corpus of DOCS one-token documents with ids (d = 8: the cost is in the ids and the document count,
// not the tokens), starts the server on the CPU, and polls /healthz every 10 ms while it runs ROUNDS
// appends (10 documents) and deletes (2 ids) through the HTTP API.
// Run: node dist/bench/corpus-write-loop.js [documents=1000000] [rounds=10]
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { CorpusWriter } from '../src/io/corpus/index.js';
import { createServer } from '../src/server/index.js';

const DOCS = Number(process.argv[2] ?? 1_000_000);
const ROUNDS = Number(process.argv[3] ?? 10);
const DIM = 8;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-write-loop-'));
const dir = path.join(tmp, 'c.msx');
let t = performance.now();
const w = CorpusWriter.create(dir, { dim: DIM, dtype: 'float16', ids: true });
const per = 100_000;
for (let a = 0; a < DOCS; a += per) {
  const n = Math.min(per, DOCS - a);
  const data = new Uint16Array(n * DIM).fill(0x3c00);
  w.addEncoded(
    { data, lengths: new Int32Array(n).fill(1) },
    Array.from({ length: n }, (_, i) => `document-${a + i}`),
  );
}
w.commit();
console.log(`built ${DOCS} documents in ${((performance.now() - t) / 1000).toFixed(1)} s`);

t = performance.now();
const server = await createServer({ backend: 'cpu', port: 0, logger: false, corpus: dir });
const { url } = await server.listen();
console.log(`server up in ${((performance.now() - t) / 1000).toFixed(1)} s`);

const latencies: number[] = [];
let polling = true;
const poller = (async () => {
  while (polling) {
    const t0 = performance.now();
    const r = await fetch(`${url}/healthz`);
    await r.text();
    latencies.push(performance.now() - t0);
    await new Promise((r) => setTimeout(r, 10));
  }
})();

const json = { 'content-type': 'application/json' };
const writeMs: number[] = [];
for (let round = 0; round < ROUNDS; round++) {
  const documents = Array.from({ length: 10 }, (_, i) => ({
    id: `new-${round}-${i}`,
    embeddings: [Array.from({ length: DIM }, () => 0.5)],
  }));
  let t0 = performance.now();
  const add = await fetch(`${url}/v1/documents`, {
    method: 'POST',
    headers: json,
    body: JSON.stringify({ documents }),
  });
  if (add.status !== 201) throw new Error(`append: ${add.status} ${await add.text()}`);
  writeMs.push(performance.now() - t0);
  t0 = performance.now();
  const del = await fetch(`${url}/v1/documents`, {
    method: 'DELETE',
    headers: json,
    body: JSON.stringify({ ids: [`document-${round * 7919}`, `new-${round}-0`] }),
  });
  if (del.status !== 200) throw new Error(`delete: ${del.status} ${await del.text()}`);
  writeMs.push(performance.now() - t0);
}
polling = false;
await poller;
await server.close();
fs.rmSync(tmp, { recursive: true, force: true });

const sorted = latencies.sort((a, b) => a - b);
const q = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
console.log(
  `/healthz during ${ROUNDS} appends + ${ROUNDS} deletes on ${DOCS} documents: ${sorted.length} polls, p50 ${q(0.5).toFixed(1)} ms, p99 ${q(0.99).toFixed(1)} ms, max ${sorted[sorted.length - 1].toFixed(1)} ms`,
);
console.log(
  `writes: mean ${(writeMs.reduce((a, b) => a + b, 0) / writeMs.length).toFixed(0)} ms, max ${Math.max(...writeMs).toFixed(0)} ms`,
);
