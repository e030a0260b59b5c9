// The HTTP service in-process: a corpus on disk, createServer on a free port, then the routes a
// client calls (search, rerank, append, delete) with fetch, and a clean shutdown.
//
// Run: npm run build && node dist/examples/server.js
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { CorpusWriter, createServer } from 'maxsim';
import { demoCorpus } from 'maxsim/internal';

const dir = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-example-')), 'docs.msx');
const { docs, queries } = demoCorpus({ docs: 500, queries: 2 });
const w = CorpusWriter.create(dir, { dim: docs.dim, dtype: 'float16', ids: true });
w.add(
  docs,
  Array.from({ length: docs.count }, (_, b) => `doc-${b}`),
);
w.commit();

const server = await createServer({ corpus: dir, port: 0, logger: false });
const { url } = await server.listen();
const post = async <T = unknown>(route: string, body: unknown, method = 'POST'): Promise<T> => {
  const res = await fetch(`${url}${route}`, {
    method,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const json = await res.json();
  if (!res.ok) throw new Error(`${route}: ${res.status} ${JSON.stringify(json)}`);
  return json as T;
};

// the queries as one little-endian float32 tensor in base64 (nested JSON arrays work too)
const q = queries.data as Float32Array;
const b64 = Buffer.from(q.buffer, q.byteOffset, q.byteLength).toString('base64');
const shape = [queries.count, queries.maxLength, queries.dim];
const { results } = await post<{ results: { id: string }[][] }>('/v1/search', {
  queries: { b64, dtype: 'float32', shape },
  top_k: 3,
});
console.log('search:', JSON.stringify(results));

const first = {
  b64: Buffer.from(q.buffer, q.byteOffset, queries.maxLength * queries.dim * 4).toString('base64'),
  shape: shape.slice(1),
};
const rerank = await post<{ results: unknown[] }>('/v1/rerank', {
  query: first,
  candidates: ['doc-1', results[0][0].id, 'doc-2'],
});
console.log('rerank:', JSON.stringify(rerank.results));

const added = await post('/v1/documents', {
  documents: [{ id: 'new-0', embeddings: [Array(docs.dim).fill(0.1)] }],
});
console.log('append:', JSON.stringify(added));
console.log('delete:', JSON.stringify(await post('/v1/documents', { ids: ['new-0'] }, 'DELETE')));
await server.close();
