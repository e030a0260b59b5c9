// bench/serve.ts --rerank: POST /v1/rerank by ids against the in-process kernel time of the same documents.
import { cuda } from '../src/backends/cuda.js';
import { type BackendChoice, resolveBackend } from '../src/backends/select.js';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { decodeToFloat32, encodeFloats } from '../src/floats.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { maxsim } from '../src/ops/maxsim.js';
import { tokenMatrix } from '../src/tensor.js';
import type { Args } from './serve-args.js';
import { closedLoop, timeIt } from './serve-load.js';
import { histogram, median } from './serve-metrics.js';
import { type Server, startServer, stopServer } from './serve-servers.js';

/**
 * Rerank by ids: the kernel time for the candidates of each body (in this process, before the server
 * starts: on CUDA the documents uploaded once and scored on the device, as the server scores a view of
 * its resident corpus; on the CPU the mapped documents), then the HTTP latency of the same bodies.
 */
export async function rerankBench(a: Args, corpus: string) {
  const rng = new Rng(5);
  const bodies: { query: Float32Array; indices: number[]; body: string }[] = [];
  for (let b = 0; b < 8; b++) {
    const query = randomUnitTokens(rng, a.queryLen, a.dim);
    const bits = encodeFloats(query, 'float16') as Uint16Array;
    // distinct random documents, as a first stage would propose them
    const picked = new Set<number>();
    while (picked.size < a.candidates) picked.add(rng.int(a.docs));
    const indices = [...picked];
    bodies.push({
      query: decodeToFloat32(bits, 'float16', a.dim), // what the server scores
      indices,
      body: JSON.stringify({
        query: {
          b64: Buffer.from(bits.buffer, bits.byteOffset, bits.byteLength).toString('base64'),
          dtype: 'float16',
          shape: [a.queryLen, a.dim],
        },
        candidates: indices.map(String),
        top_n: a.topK,
      }),
    });
  }
  const c = openCorpus(corpus);
  const kernel: number[] = [];
  const kernelMin: number[] = [];
  try {
    const backend = resolveBackend(a.backend as BackendChoice);
    const device = backend === 'cuda' ? await cuda() : undefined;
    try {
      for (const b of bodies) {
        const q = tokenMatrix(b.query, a.queryLen, a.dim);
        const docs = c.readDocuments(b.indices);
        if (device) {
          const onDevice = await device.upload(docs);
          try {
            const t = await timeIt(() => onDevice.score(q), 20);
            kernel.push(t.median);
            kernelMin.push(t.min);
          } finally {
            onDevice.dispose();
          }
        } else {
          const t = await timeIt(() => maxsim(q, docs, { backend: 'cpu', threads: a.threads }), 10);
          kernel.push(t.median);
          kernelMin.push(t.min);
        }
      }
    } finally {
      device?.dispose();
    }
  } finally {
    c.close();
  }
  const server: Server = { ...(await startServer(a, corpus, a.maxBatch)), maxBatch: a.maxBatch };
  let r: { latencies: number[]; seconds: number; non2xx: number; errors: number };
  let passMs: number;
  try {
    // warm (JIT, page cache), then the timed run: microsecond timings (autocannon's are whole ms,
    // coarse next to a target of about a millisecond)
    await closedLoop(
      server.url,
      bodies.map((b) => b.body),
      1,
      2,
    );
    const before = await (await fetch(`${server.url}/metrics`)).text();
    r = await closedLoop(
      server.url,
      bodies.map((b) => b.body),
      a.connections,
      a.duration * a.rounds,
      a.amount,
    );
    const after = await (await fetch(`${server.url}/metrics`)).text();
    const t0 = histogram(before, 'maxsim_pass_duration_seconds');
    const t1 = histogram(after, 'maxsim_pass_duration_seconds');
    passMs = ((t1.sum - t0.sum) / (t1.count - t0.count)) * 1000;
  } finally {
    const code = await stopServer(server.child);
    if (code !== 0) console.error(`bench/serve: the server exited with ${code} after SIGTERM`);
  }
  const sorted = [...r.latencies].sort((x, y) => x - y);
  const pct = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? Number.NaN;
  const k = median(kernel);
  const target = 1.5 * k + 1;
  const result = {
    kernelMs: k,
    kernelMinMs: Math.min(...kernelMin),
    passMs,
    requestsPerSecond: r.latencies.length / r.seconds,
    p50Ms: pct(0.5),
    p99Ms: pct(0.99),
    non2xx: r.non2xx,
    errors: r.errors,
    targetMs: target,
    met: pct(0.5) <= target,
  };
  if (a.json) console.log(JSON.stringify({ mode: 'rerank', ...result }));
  else {
    console.log(
      `maxsim serve rerank: 1 query of ${a.queryLen} tokens x ${a.candidates} candidates by id of ${a.docs} docs x ${a.docLen} tokens, d = ${a.dim} ${a.corpus ? '(given corpus)' : a.dtype}, ${a.backend}, ${a.connections} connection(s), ${a.duration * a.rounds} s`,
    );
    console.log(
      `kernel (in-process, those documents): median ${k.toFixed(2)} ms (min ${result.kernelMinMs.toFixed(2)}); server pass ${passMs.toFixed(2)} ms; HTTP p50 ${result.p50Ms.toFixed(2)} ms, p99 ${result.p99Ms.toFixed(2)} ms, ${result.requestsPerSecond.toFixed(1)} requests/s, non-2xx ${r.non2xx}, errors ${result.errors}`,
    );
    console.log(
      `target p50 <= 1.5 x kernel + 1 ms = ${target.toFixed(2)} ms: ${result.met ? 'met' : 'not met'}`,
    );
  }
}
