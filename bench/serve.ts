// `maxsim serve` under load: two spawned servers on loopback, one with cross-request batching
// (--max-batch B) and one without (--max-batch 1), driven in turn by autocannon with base64 float16
// search bodies, in the same run. Reports requests/s, p50 / p99 latency, the mean queries per pass and the scoring time
// per pass and the event-loop delay (from the server's /metrics), and the batched / unbatched ratio.
//
// Run: node dist/bench/serve.js [--docs 4000] [--doc-len 64] [--dim 128] [--query-len 32] [--top-k 10]
//        [--connections 32] [--duration 5] [--rounds 3] [--amount N] [--backend cpu|cuda|auto] [--max-batch 128]
//        [--max-wait-ms auto|MS] [--passes-in-flight N] [--threads T] [--soak S [--sample-every S]]
//        [--rerank [--candidates 1000]] [--dtype float16|bfloat16|float32|int8] [--corpus DIR]
//        [--corpus-dir DIR] [--client-workers N] [--pass-dtype int8|fp8] [--json]
// The corpus (rows drawn from 65,536 random unit tokens, float16) is built in a temporary directory
// unless --corpus names one; --corpus-dir DIR builds it there and keeps it, and a later run with the
// same --docs / --doc-len / --dim / --dtype reuses it.
// --soak S: the batched server alone under full load for S seconds, its RSS, JS heap and GPU memory
// (the backend's memory info, through /metrics) sampled every --sample-every seconds (default S / 30):
// is memory flat?
// --rerank: POST /v1/rerank by ids (one query of --query-len tokens x --candidates documents of the
// resident corpus, base64 float16) on one server, against the kernel time for those documents (the
// same documents uploaded to the device once / mapped on the CPU, scored in-process before the server
// starts); the target is HTTP p50 <= 1.5 x kernel + 1 ms. ColPali shape: --doc-len 1024 --connections 1.
// --client-workers N: autocannon's worker threads (default 4 on machines of 8+ cores, else 1): one
// client thread at ~4,000 requests/s of base64 bodies queues its own requests, which its latencies
// then include (the server's own p99 is printed beside them).
// --pass-dtype int8|fp8: both servers run 8-bit passes (serve --dtype); after the rounds an exact
// server answers the same 64 queries and the run reports how many 8-bit answers equal its top-k.
// Nothing is downloaded: autocannon is a dev dependency; the GPU host runs the same script with
// --backend cuda --docs 100000 --doc-len 128 --connections 256.
// The modules: serve-args.ts (options), serve-servers.ts (corpus, servers), serve-load.ts (autocannon,
// soak, closed loop), serve-metrics.ts (/metrics), serve-rerank.ts (--rerank).
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { encodeFloats } from '../src/floats.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { parseArgs } from './serve-args.js';
import { measure, type RunResult, row, soak, warm } from './serve-load.js';
import { median, PASS_PHASES, REQUEST_PHASES } from './serve-metrics.js';
import { rerankBench } from './serve-rerank.js';
import {
  type Agreement,
  againstExact,
  buildCorpus,
  builtAlready,
  type Server,
  startServer,
  stopServer,
} from './serve-servers.js';

const a = parseArgs(process.argv.slice(2));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-bench-serve-'));
try {
  let corpus = a.corpus;
  if (!corpus) {
    corpus = a.corpusDir ?? path.join(tmp, 'docs.msx');
    if (a.corpusDir && builtAlready(a, a.corpusDir))
      console.error(`bench/serve: reusing the corpus in ${a.corpusDir}`);
    else {
      if (a.corpusDir) fs.rmSync(a.corpusDir, { recursive: true, force: true });
      const t = performance.now();
      buildCorpus(a, corpus);
      console.error(
        `bench/serve: built ${a.docs} documents x ${a.docLen} tokens, d = ${a.dim}, ${a.dtype} in ${((performance.now() - t) / 1000).toFixed(1)} s`,
      );
    }
  }
  // 64 distinct queries of queryLen tokens as base64 float16 bodies, cycled by every connection
  const rng = new Rng(7);
  const bodies = Array.from({ length: 64 }, () => {
    const bits = encodeFloats(randomUnitTokens(rng, a.queryLen, a.dim), 'float16') as Uint16Array;
    const b64 = Buffer.from(bits.buffer, bits.byteOffset, bits.byteLength).toString('base64');
    return JSON.stringify({
      queries: { b64, dtype: 'float16', shape: [1, a.queryLen, a.dim] },
      top_k: a.topK,
    });
  });
  const requests = bodies.map((body) => ({ method: 'POST', path: '/v1/search', body }));
  if (a.soak) {
    await soak(a, corpus, requests);
    process.exit(0);
  }
  if (a.rerank) {
    await rerankBench(a, corpus);
    process.exit(0);
  }
  // both servers stay up; the rounds alternate between them (ABBA), so a change in the machine's
  // load hits both alike
  const loadBefore = os.loadavg()[0];
  const servers: Server[] = [];
  for (const maxBatch of [a.maxBatch, 1])
    servers.push({ ...(await startServer(a, corpus, maxBatch)), maxBatch });
  const results: RunResult[][] = [[], []];
  let agreement: Agreement | undefined;
  try {
    for (const s of servers) await warm(s, a, requests);
    // what a pass runs (the index or the scan, and why): said once, from the first body's answer
    const probe = (await (
      await fetch(`${servers[0].url}/v1/search`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: bodies[0],
      })
    ).json()) as {
      stats?: { path?: string; reason?: string; index?: { backend?: string; precision?: string } };
    };
    const st = probe.stats;
    console.error(
      `bench/serve: passes take the ${st?.path ?? '?'} path${st?.reason ? ` (${st.reason})` : ''}` +
        (st?.index ? ` (index stages on ${st.index.backend}, ${st.index.precision})` : ''),
    );
    for (let round = 0; round < a.rounds; round++) {
      const order = round % 2 === 0 ? [0, 1] : [1, 0];
      for (const i of order) results[i].push(await measure(servers[i], a, requests));
    }
    if (a.passDtype) agreement = await againstExact(a, corpus, servers[0].url, bodies);
  } finally {
    for (const s of servers) {
      const code = await stopServer(s.child);
      if (code !== 0)
        console.error(`bench/serve: the server (max-batch ${s.maxBatch}) exited with ${code} after SIGTERM`);
    }
  }
  const ratios = results[0].map((r, i) => r.requestsPerSecond / results[1][i].requestsPerSecond);
  const ratio = median(ratios);
  // unbatched CPU time per request / batched: the throughput ratio of a CPU-bound server on a quiet machine
  const cpuRatios = results[0].map((r, i) => results[1][i].cpuMsPerRequest / r.cpuMsPerRequest);
  const cpuRatio = median(cpuRatios);
  const setup = {
    docs: a.docs,
    docLen: a.docLen,
    dim: a.dim,
    queryLen: a.queryLen,
    topK: a.topK,
    connections: a.connections,
    duration: a.duration,
    rounds: a.rounds,
    backend: a.backend,
    dtype: a.corpus ? 'given' : a.dtype,
    maxWaitMs: a.maxWaitMs,
    passesInFlight: a.passesInFlight ?? 'default',
    threads: a.threads ?? 'all',
    cpus: os.cpus().length,
    loadBefore: loadBefore,
    loadAfter: os.loadavg()[0],
  };
  if (a.json)
    console.log(
      JSON.stringify({
        setup,
        batched: results[0],
        unbatched: results[1],
        ratios,
        ratio,
        cpuRatios,
        cpuRatio,
        agreement,
      }),
    );
  else {
    // a given corpus is described by its MANIFEST (mean tokens per document), not by the flags
    let what = `${a.docs} docs x ${a.docLen} tokens, d = ${a.dim} ${a.dtype}`;
    if (a.corpus) {
      const c = openCorpus(a.corpus, { follow: false });
      const { documents, tokens, dim, dtype, index } = c.info;
      what = `${documents} docs x ${(tokens / Math.max(1, documents)).toFixed(1)} tokens (mean), d = ${dim} ${dtype} (given corpus${index ? `, indexed: K ${index.centroids}, ${index.bits}-bit` : ''})`;
      c.close();
    }
    console.log(
      `maxsim serve: ${what}, float16 base64 queries of ${a.queryLen} tokens, top-${a.topK}, ${a.backend}, ${a.connections} connections (${a.clientWorkers} client thread${a.clientWorkers > 1 ? 's' : ''}), ${a.rounds} rounds of ${a.duration} s each, ${os.cpus().length} cores`,
    );
    console.log(
      'round      max-batch    req/s   p50 ms   p99 ms  queries/pass   ms/pass  non-2xx  errors  loop p99  loop max  cpu ms/req',
    );
    for (let r = 0; r < a.rounds; r++) for (const i of [0, 1]) console.log(row(String(r + 1), results[i][r]));
    console.log(
      'where the time goes (mean ms per search pass: gather wait backend merge split answer | per request: parse decode queue encode | JS thread busy | server-side p99 ms, share over 100 ms)',
    );
    const ms = (m: Record<string, number>, keys: readonly string[]) =>
      keys.map((key) => (Number.isFinite(m[key]) ? m[key].toFixed(3) : '-').padStart(9)).join('');
    for (let r = 0; r < a.rounds; r++)
      for (const i of [0, 1]) {
        const x = results[i][r];
        console.log(
          `${String(r + 1).padEnd(10)} ${String(x.maxBatch).padStart(9)} ${ms(x.passPhasesMs, PASS_PHASES)} | ${ms(x.requestPhasesMs, REQUEST_PHASES)} | ${(100 * x.eventLoopUtilization).toFixed(0).padStart(3)}% | ${x.serverP99Ms.toFixed(1).padStart(7)} ${(100 * x.serverOver100).toFixed(2).padStart(6)}%`,
        );
      }
    console.log(
      `batched / unbatched throughput by round: ${ratios.map((x) => `${x.toFixed(2)}x`).join(' ')}; median ${ratio.toFixed(2)}x`,
    );
    if (agreement)
      console.log(
        `${a.passDtype} passes against an exact server, the same ${agreement.queries} queries: ${agreement.equal} top-${a.topK} lists equal (scores within 1e-4, near ties aside), ${agreement.missed} true hits missed in all, largest score difference ${agreement.maxScoreDiff.toExponential(2)}`,
      );
    console.log(
      `unbatched / batched server CPU time per request by round: ${cpuRatios.map((x) => `${x.toFixed(2)}x`).join(' ')}; median ${cpuRatio.toFixed(2)}x (load average ${loadBefore.toFixed(1)} before, ${os.loadavg()[0].toFixed(1)} after, ${os.cpus().length} cores)`,
    );
  }
} finally {
  fs.rmSync(tmp, { recursive: true, force: true });
}
