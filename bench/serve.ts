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
import { type ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as http from 'node:http';
import { createRequire } from 'node:module';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { cuda } from '../src/backends/cuda.js';
import { type BackendChoice, resolveBackend } from '../src/backends/select.js';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { decodeToFloat32, encodeFloats } from '../src/floats.js';
import { CorpusWriter } from '../src/io/corpus/index.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { maxsim } from '../src/ops/maxsim.js';
import { raggedBatch, tokenMatrix } from '../src/tensor.js';

interface Args {
  docs: number;
  docLen: number;
  dim: number;
  queryLen: number;
  topK: number;
  connections: number;
  duration: number;
  rounds: number;
  amount?: number;
  threads?: number;
  soak?: number;
  sampleEvery?: number;
  rerank: boolean;
  candidates: number;
  passesInFlight?: number;
  backend: string;
  maxBatch: number;
  maxWaitMs: number | 'auto';
  corpus?: string;
  /** Where the generated corpus is kept (reused by a later run with the same arguments). */
  corpusDir?: string;
  clientWorkers: number;
  dtype: 'float16' | 'bfloat16' | 'float32' | 'int8';
  /** serve --dtype: 8-bit search passes. */
  passDtype?: 'int8' | 'fp8';
  json: boolean;
}

function parseArgs(argv: string[]): Args {
  const a: Args = {
    docs: 4000,
    docLen: 64,
    dim: 128,
    queryLen: 32,
    topK: 10,
    connections: 32,
    duration: 5,
    rounds: 3,
    backend: 'cpu',
    maxBatch: 128,
    maxWaitMs: 'auto',
    rerank: false,
    candidates: 1000,
    clientWorkers: os.cpus().length >= 8 ? 4 : 1,
    dtype: 'float16',
    json: false,
  };
  const ints: Record<string, keyof Args> = {
    '--docs': 'docs',
    '--doc-len': 'docLen',
    '--dim': 'dim',
    '--query-len': 'queryLen',
    '--top-k': 'topK',
    '--connections': 'connections',
    '--duration': 'duration',
    '--rounds': 'rounds',
    '--amount': 'amount',
    '--threads': 'threads',
    '--soak': 'soak',
    '--sample-every': 'sampleEvery',
    '--candidates': 'candidates',
    '--passes-in-flight': 'passesInFlight',
    '--max-batch': 'maxBatch',
    '--client-workers': 'clientWorkers',
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = argv[i + 1];
    if (flag === '--json') a.json = true;
    else if (flag === '--rerank') a.rerank = true;
    else if (flag in ints) {
      const n = Number(value);
      if (!Number.isInteger(n) || n < 1)
        throw new Error(`${flag}: expected a positive integer, received ${value}`);
      (a as unknown as Record<string, number>)[ints[flag]] = n;
      i++;
    } else if (flag === '--max-wait-ms') {
      a.maxWaitMs = value === 'auto' ? 'auto' : Number(value);
      if (!(a.maxWaitMs === 'auto' || a.maxWaitMs >= 0))
        throw new Error(`--max-wait-ms: expected auto or a number >= 0, received ${value}`);
      i++;
    } else if (flag === '--backend') {
      if (!['cpu', 'cuda', 'auto'].includes(value))
        throw new Error(`--backend: cpu, cuda or auto, received ${value}`);
      a.backend = value;
      i++;
    } else if (flag === '--dtype') {
      if (!['float16', 'bfloat16', 'float32', 'int8'].includes(value))
        throw new Error(`--dtype: float16, bfloat16, float32 or int8, received ${value}`);
      a.dtype = value as Args['dtype'];
      i++;
    } else if (flag === '--pass-dtype') {
      if (value !== 'int8' && value !== 'fp8')
        throw new Error(`--pass-dtype: int8 or fp8, received ${value}`);
      a.passDtype = value;
      i++;
    } else if (flag === '--corpus') {
      a.corpus = value;
      i++;
    } else if (flag === '--corpus-dir') {
      a.corpusDir = value;
      i++;
    } else throw new Error(`unknown argument ${flag}`);
  }
  if ((a.soak ?? 0) > 1800) throw new Error('--soak: at most 1800 s');
  if (a.rerank && a.candidates > a.docs)
    throw new Error(`--candidates: at most --docs (${a.docs}), received ${a.candidates}`);
  if (a.duration * a.rounds * 2 > 1800) throw new Error('--duration x --rounds x 2: at most 1800 s');
  return a;
}

interface Cannon {
  requests: { average: number };
  latency: { p50: number; p99: number; average: number };
  non2xx: number;
  errors: number;
  timeouts: number;
  duration: number;
  '2xx': number;
}
type AutocannonFn = (opts: Record<string, unknown>) => Promise<Cannon>;
const autocannon = createRequire(import.meta.url)('autocannon') as AutocannonFn;

const CLI = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));

/** Whether `dir` holds the corpus these arguments build (a previous run's --corpus-dir). */
function builtAlready(a: Args, dir: string): boolean {
  if (!fs.existsSync(dir)) return false;
  try {
    const c = openCorpus(dir);
    try {
      const i = c.info;
      return (
        i.documents === a.docs &&
        i.dim === a.dim &&
        i.dtype === a.dtype &&
        i.deleted === 0 &&
        i.tokens === a.docs * a.docLen
      );
    } finally {
      c.close();
    }
  } catch {
    return false;
  }
}

/** Distinct random unit tokens the float corpora's documents draw their rows from. */
const POOL_TOKENS = 1 << 16;

function buildCorpus(a: Args, dir: string) {
  const rng = new Rng(11);
  const w = CorpusWriter.create(dir, { dim: a.dim, dtype: a.dtype });
  // chunks of ~16 MiB of rows, written with one call each
  const chunk = Math.max(1, Math.floor((1 << 23) / (a.docLen * a.dim)));
  if (a.dtype === 'int8') {
    // quantized per token by the writer (the CPU's AMX / VNNI int8 kernels score it); CPU-sized corpora
    for (let at = 0; at < a.docs; at += chunk) {
      const n = Math.min(chunk, a.docs - at);
      const floats = randomUnitTokens(rng, n * a.docLen, a.dim);
      w.add(
        raggedBatch(
          floats,
          Array.from({ length: n + 1 }, (_, i) => i * a.docLen),
          { dim: a.dim },
        ),
      );
    }
    w.commit();
    return;
  }
  // Float corpora: every row a copy of one of 65,536 random unit tokens (drawing 1.6 G normal values for
  // 100,000 x 128 x 128 took 37-50 s of the GPU host's time on every run; copying rows takes ~1 s). The
  // kernels' work does not depend on the values; documents still differ (128 of 65,536 rows each), so
  // the top-k is a real ranking.
  const floats = randomUnitTokens(rng, POOL_TOKENS, a.dim);
  const encoded = a.dtype === 'float32' ? floats : encodeFloats(floats, a.dtype);
  const pool = Buffer.from(encoded.buffer, encoded.byteOffset, encoded.byteLength);
  const rowBytes = pool.length / POOL_TOKENS;
  // its own ArrayBuffer (offset 0: aligned for the typed views below)
  const bytes = Buffer.allocUnsafeSlow(chunk * a.docLen * rowBytes);
  for (let at = 0; at < a.docs; at += chunk) {
    const n = Math.min(chunk, a.docs - at);
    const rows = n * a.docLen;
    for (let r = 0; r < rows; r++) {
      const t = rng.int(POOL_TOKENS);
      pool.copy(bytes, r * rowBytes, t * rowBytes, (t + 1) * rowBytes);
    }
    const data =
      a.dtype === 'float32'
        ? new Float32Array(bytes.buffer, bytes.byteOffset, rows * a.dim)
        : new Uint16Array(bytes.buffer, bytes.byteOffset, rows * a.dim);
    w.addEncoded({ data, lengths: new Int32Array(n).fill(a.docLen) });
  }
  w.commit();
}

function startServer(
  a: Args,
  corpus: string,
  maxBatch: number,
  passDtype = a.passDtype,
): Promise<{ child: ChildProcess; url: string }> {
  const args = [
    CLI,
    'serve',
    '--corpus',
    corpus,
    '--port',
    '0',
    '--backend',
    a.backend,
    '--max-batch',
    String(maxBatch),
    '--max-wait-ms',
    String(a.maxWaitMs),
    '--log-level',
    'warn',
    // the queue holds every connection's request: the bench measures throughput, not refusals
    '--max-queue',
    String(Math.max(1024, 4 * a.connections)),
    ...(a.threads ? ['--threads', String(a.threads)] : []),
    ...(a.passesInFlight ? ['--passes-in-flight', String(a.passesInFlight)] : []),
    ...(passDtype ? ['--dtype', passDtype] : []),
  ];
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'inherit', 'pipe'] });
  return new Promise((resolve, reject) => {
    let err = '';
    const timer = setTimeout(() => reject(new Error(`the server did not start in 120 s: ${err}`)), 120_000);
    child.stderr!.on('data', (d) => {
      err += String(d);
      const m = /listening on (http:\/\/\S+)/.exec(err);
      if (m) {
        clearTimeout(timer);
        resolve({ child, url: m[1] });
      }
    });
    child.on('exit', (code) => reject(new Error(`the server exited with ${code}: ${err}`)));
  });
}

interface Agreement {
  queries: number;
  /** Top-k lists equal to the exact server's (same documents in order; near ties may swap). */
  equal: number;
  /** Exact top-k documents absent from the 8-bit answer, over all queries. */
  missed: number;
  maxScoreDiff: number;
}

/** The 8-bit server's answers to `bodies` against an exact server's (started here on the same corpus). */
async function againstExact(a: Args, corpus: string, url: string, bodies: string[]): Promise<Agreement> {
  const exact = await startServer(a, corpus, a.maxBatch, undefined);
  type Row = { id: string; score: number }[];
  const ask = async (at: string, body: string): Promise<Row> => {
    const r = await fetch(`${at}/v1/search`, { method: 'POST', headers: HEADERS, body });
    if (r.status !== 200) throw new Error(`search: ${r.status} ${await r.text()}`);
    return ((await r.json()) as { results: Row[] }).results[0];
  };
  const out: Agreement = { queries: bodies.length, equal: 0, missed: 0, maxScoreDiff: 0 };
  try {
    for (const body of bodies) {
      const [want, got] = await Promise.all([ask(exact.url, body), ask(url, body)]);
      const ids = new Set(got.map((h) => h.id));
      out.missed += want.filter((h) => !ids.has(h.id)).length;
      let same = got.length === want.length;
      for (let i = 0; same && i < want.length; i++) {
        const d = Math.abs(got[i].score - want[i].score);
        out.maxScoreDiff = Math.max(out.maxScoreDiff, d);
        const tol = 1e-4 * Math.max(1, Math.abs(want[i].score));
        same =
          d <= tol &&
          (got[i].id === want[i].id ||
            want.some((h) => h.id === got[i].id && Math.abs(h.score - got[i].score) <= tol));
      }
      if (same) out.equal++;
    }
  } finally {
    await stopServer(exact.child);
  }
  return out;
}

async function stopServer(child: ChildProcess): Promise<number | null> {
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  child.kill('SIGTERM');
  return exited;
}

/** Sum and count of a Prometheus histogram in /metrics text. */
function histogram(text: string, name: string): { sum: number; count: number } {
  const sum = Number(new RegExp(`^${name}_sum (\\S+)`, 'm').exec(text)?.[1] ?? Number.NaN);
  const count = Number(new RegExp(`^${name}_count (\\S+)`, 'm').exec(text)?.[1] ?? Number.NaN);
  return { sum, count };
}

/** Sum and count of a Prometheus histogram's series with label phase="<phase>". */
function phaseHistogram(text: string, name: string, phase: string): { sum: number; count: number } {
  const get = (suffix: string) =>
    Number(new RegExp(`^${name}_${suffix}\\{phase="${phase}"\\} (\\S+)`, 'm').exec(text)?.[1] ?? 0);
  return { sum: get('sum'), count: get('count') };
}

/** The search route's latency buckets (cumulative counts by upper bound) of a /metrics text. */
function searchBuckets(text: string): { le: number; count: number }[] {
  const out: { le: number; count: number }[] = [];
  for (const m of text.matchAll(
    /^maxsim_http_request_duration_seconds_bucket\{le="([^"]+)",route="\/v1\/search"\} (\S+)/gm,
  ))
    out.push({ le: m[1] === '+Inf' ? Number.POSITIVE_INFINITY : Number(m[1]), count: Number(m[2]) });
  return out.sort((x, y) => x.le - y.le);
}

/**
 * The server's own view of the search latency between two scrapes (onRequest to the response's end):
 * the q-quantile interpolated in its histogram's buckets (as Prometheus' histogram_quantile), ms, and
 * the share of requests over 100 ms (the p99 target). Tells the server's tail from the client's.
 */
function serverLatency(before: string, after: string, q: number): { quantileMs: number; over100: number } {
  const b = new Map(searchBuckets(before).map((x) => [x.le, x.count]));
  const rows = searchBuckets(after).map((x) => ({ le: x.le, count: x.count - (b.get(x.le) ?? 0) }));
  const total = rows[rows.length - 1]?.count ?? 0;
  if (total === 0) return { quantileMs: Number.NaN, over100: Number.NaN };
  const within100 = rows.find((x) => x.le === 0.1)?.count ?? Number.NaN;
  const rank = q * total;
  let lower = 0;
  let below = 0;
  let quantile = Number.NaN;
  for (const x of rows) {
    if (x.count >= rank) {
      quantile = Number.isFinite(x.le)
        ? lower + ((x.le - lower) * (rank - below)) / (x.count - below || 1)
        : lower;
      break;
    }
    lower = x.le;
    below = x.count;
  }
  return { quantileMs: quantile * 1000, over100: 1 - within100 / total };
}

const PASS_PHASES = ['gather', 'wait', 'backend', 'merge', 'split', 'answer'] as const;
const REQUEST_PHASES = ['parse', 'decode', 'queue', 'encode'] as const;

/** Mean ms per pass (or request) of each phase between two scrapes of /metrics. */
function phaseMeans(before: string, after: string, name: string, phases: readonly string[]) {
  const out: Record<string, number> = {};
  for (const phase of phases) {
    const b = phaseHistogram(before, name, phase);
    const e = phaseHistogram(after, name, phase);
    out[phase] = e.count > b.count ? ((e.sum - b.sum) / (e.count - b.count)) * 1000 : Number.NaN;
  }
  return out;
}

interface RunResult {
  maxBatch: number;
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  ok: number;
  non2xx: number;
  errors: number;
  queriesPerPass: number;
  msPerPass: number;
  passes: number;
  /** The server's event-loop delay during the run, p99 and max (prom-client's monitor, reset per scrape). */
  loopP99Ms: number;
  loopMaxMs: number;
  /**
   * The server process's CPU time (user + system, all its threads) per answered request, ms: what a
   * request costs whatever else the machine runs (the shared development VM's load swings the
   * requests/s several-fold between rounds; this figure much less).
   */
  cpuMsPerRequest: number;
  /** Mean ms per search pass of each phase (see PassPhases in src/server/batcher.ts). */
  passPhasesMs: Record<string, number>;
  /** Mean ms per search request of each phase. */
  requestPhasesMs: Record<string, number>;
  /** Share of the run the server's JS thread was busy (1: saturated). */
  eventLoopUtilization: number;
  /** The server's own p99 of the search latency (its histogram, interpolated), ms. */
  serverP99Ms: number;
  /** Share of searches the server took over 100 ms for. */
  serverOver100: number;
}

interface Server {
  child: ChildProcess;
  url: string;
  maxBatch: number;
}

const HEADERS = { 'content-type': 'application/json' };

async function warm(server: Server, a: Args, requests: object[]) {
  // page cache, kernels, JIT (bounded), then a second at full load: the passes of the timed run
  // (up to max-batch queries, two in flight) have then run once, with their buffers and compiled code
  await autocannon({
    url: server.url,
    connections: Math.min(4, a.connections),
    amount: 40,
    headers: HEADERS,
    requests,
    timeout: 60,
  });
  await autocannon({
    url: server.url,
    connections: a.connections,
    duration: 1,
    headers: HEADERS,
    requests,
    timeout: 60,
  });
}

async function measure(server: Server, a: Args, requests: object[]): Promise<RunResult> {
  const { url } = server;
  const before = await (await fetch(`${url}/metrics`)).text();
  // (this scrape also restarts the server's event-loop utilisation window)
  const r = await autocannon({
    url,
    connections: a.connections,
    ...(a.clientWorkers > 1 ? { workers: a.clientWorkers } : {}),
    duration: a.duration,
    ...(a.amount ? { amount: a.amount } : {}),
    headers: HEADERS,
    requests,
    timeout: 60,
  });
  const after = await (await fetch(`${url}/metrics`)).text();
  const b0 = histogram(before, 'maxsim_batch_queries');
  const b1 = histogram(after, 'maxsim_batch_queries');
  const t0 = histogram(before, 'maxsim_pass_duration_seconds');
  const t1 = histogram(after, 'maxsim_pass_duration_seconds');
  const passes = b1.count - b0.count;
  return {
    maxBatch: server.maxBatch,
    requestsPerSecond: r['2xx'] / r.duration,
    p50Ms: r.latency.p50,
    p99Ms: r.latency.p99,
    ok: r['2xx'],
    non2xx: r.non2xx,
    errors: r.errors + r.timeouts,
    queriesPerPass: (b1.sum - b0.sum) / passes,
    msPerPass: ((t1.sum - t0.sum) / passes) * 1000,
    passes,
    cpuMsPerRequest:
      ((gauge(after, 'process_cpu_seconds_total') - gauge(before, 'process_cpu_seconds_total')) / r['2xx']) *
      1000,
    passPhasesMs: phaseMeans(before, after, 'maxsim_pass_phase_seconds', PASS_PHASES),
    requestPhasesMs: phaseMeans(before, after, 'maxsim_request_phase_seconds', REQUEST_PHASES),
    eventLoopUtilization: gauge(after, 'maxsim_event_loop_utilization'),
    serverP99Ms: serverLatency(before, after, 0.99).quantileMs,
    serverOver100: serverLatency(before, after, 0.99).over100,
    loopP99Ms: gauge(after, 'nodejs_eventloop_lag_p99_seconds') * 1000,
    loopMaxMs: gauge(after, 'nodejs_eventloop_lag_max_seconds') * 1000,
  };
}

function gauge(text: string, name: string): number {
  return Number(new RegExp(`^${name} (\\S+)`, 'm').exec(text)?.[1] ?? Number.NaN);
}

function median(xs: number[]): number {
  const s = [...xs].sort((x, y) => x - y);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

function row(label: string, r: RunResult): string {
  return `${label.padEnd(10)} ${String(r.maxBatch).padStart(9)}  ${r.requestsPerSecond.toFixed(1).padStart(7)}  ${r.p50Ms.toFixed(1).padStart(7)}  ${r.p99Ms.toFixed(1).padStart(7)}  ${r.queriesPerPass.toFixed(1).padStart(12)}  ${r.msPerPass.toFixed(2).padStart(8)}  ${String(r.non2xx).padStart(7)}  ${String(r.errors).padStart(6)}  ${r.loopP99Ms.toFixed(1).padStart(7)}  ${r.loopMaxMs.toFixed(1).padStart(7)}  ${r.cpuMsPerRequest.toFixed(2).padStart(10)}`;
}

async function soak(a: Args, corpus: string, requests: object[]) {
  const server: Server = { ...(await startServer(a, corpus, a.maxBatch)), maxBatch: a.maxBatch };
  try {
    await warm(server, a, requests);
    const load = autocannon({
      url: server.url,
      connections: a.connections,
      ...(a.clientWorkers > 1 ? { workers: a.clientWorkers } : {}),
      duration: a.soak,
      headers: HEADERS,
      requests,
      timeout: 60,
    });
    const every = (a.sampleEvery ?? Math.max(1, a.soak! / 30)) * 1000;
    const started = performance.now();
    const mib = (x: number) => (Number.isFinite(x) ? (x / 2 ** 20).toFixed(1) : '-');
    const gpu = (text: string, kind: string) =>
      Number(new RegExp(`^maxsim_gpu_memory_bytes\\{kind="${kind}"\\} (\\S+)`, 'm').exec(text)?.[1]);
    console.log('seconds   rss MiB   heap MiB   gpu in use MiB   gpu cached MiB   served');
    const curve: { t: number; rss: number; gpu: number }[] = [];
    let done = false;
    void load.then(() => {
      done = true;
    });
    while (!done) {
      const text = await (await fetch(`${server.url}/metrics`)).text();
      const served = [
        ...text.matchAll(/^maxsim_http_requests_total\{route="\/v1\/search"[^}]*status="200"\} (\S+)/gm),
      ].reduce((x, m) => x + Number(m[1]), 0);
      const t = (performance.now() - started) / 1000;
      const rss = gauge(text, 'process_resident_memory_bytes');
      curve.push({ t, rss, gpu: gpu(text, 'in_use') });
      console.log(
        `${t.toFixed(0).padStart(7)}  ${mib(rss).padStart(8)}  ${mib(gauge(text, 'nodejs_heap_size_used_bytes')).padStart(9)}  ${mib(gpu(text, 'in_use')).padStart(15)}  ${mib(gpu(text, 'cached')).padStart(15)}  ${String(served).padStart(7)}`,
      );
      await new Promise((r) => setTimeout(r, every));
    }
    const r = await load;
    console.log(
      `soak: ${(r['2xx'] / r.duration).toFixed(1)} requests/s, p50 ${r.latency.p50} ms, p99 ${r.latency.p99} ms, non-2xx ${r.non2xx}, errors ${r.errors + r.timeouts}`,
    );
    // flat? the second half of the curve against the first (warm-up and first allocations excluded)
    const half = curve.filter((c) => c.t >= (curve[curve.length - 1]?.t ?? 0) / 2);
    const span = (xs: number[]) => {
      const ok = xs.filter(Number.isFinite);
      return ok.length ? `${mib(Math.min(...ok))}-${mib(Math.max(...ok))} MiB` : '-';
    };
    if (half.length > 1) {
      const minutes = (half[half.length - 1].t - half[0].t) / 60;
      const drift = (half[half.length - 1].rss - half[0].rss) / 2 ** 20 / Math.max(minutes, 1e-9);
      console.log(
        `second half (${half.length} samples from ${half[0].t.toFixed(0)} s): RSS ${span(half.map((c) => c.rss))} (${drift >= 0 ? '+' : ''}${drift.toFixed(2)} MiB/min end to end), GPU in use ${span(half.map((c) => c.gpu))}`,
      );
    }
  } finally {
    const code = await stopServer(server.child);
    if (code !== 0) console.error(`bench/serve: the server exited with ${code} after SIGTERM`);
  }
}

/** Median and min of `runs` timed calls of `f` after `warmup` untimed ones, ms. */
async function timeIt(
  f: () => Promise<unknown>,
  runs: number,
  warmup = 3,
): Promise<{ median: number; min: number }> {
  for (let i = 0; i < warmup; i++) await f();
  const t: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    await f();
    t.push(performance.now() - t0);
  }
  return { median: median(t), min: Math.min(...t) };
}

/**
 * `connections` clients, each posting the bodies in turn to /v1/rerank over one keep-alive connection
 * for `seconds` (or `amount` requests in all), timing each request from send to last byte.
 */
async function closedLoop(
  url: string,
  bodies: string[],
  connections: number,
  seconds: number,
  amount?: number,
): Promise<{ latencies: number[]; seconds: number; non2xx: number; errors: number }> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: connections });
  const target = new URL('/v1/rerank', url);
  const latencies: number[] = [];
  let non2xx = 0;
  let errors = 0;
  let sent = 0;
  const started = performance.now();
  const end = started + seconds * 1000;
  const one = (body: string) =>
    new Promise<number>((resolve, reject) => {
      const req = http.request(
        target,
        {
          method: 'POST',
          agent,
          headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
        },
        (res) => {
          res.on('data', () => {});
          res.on('end', () => resolve(res.statusCode ?? 0));
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  await Promise.all(
    Array.from({ length: connections }, async (_, c) => {
      for (let i = c; performance.now() < end && (amount === undefined || sent < amount); i++) {
        sent++;
        const t0 = performance.now();
        try {
          const status = await one(bodies[i % bodies.length]);
          if (status >= 200 && status < 300) latencies.push(performance.now() - t0);
          else non2xx++;
        } catch {
          errors++;
        }
      }
    }),
  );
  agent.destroy();
  return { latencies, seconds: (performance.now() - started) / 1000, non2xx, errors };
}

/**
 * Rerank by ids: the kernel time for the candidates of each body (in this process, before the server
 * starts: on CUDA the documents uploaded once and scored on the device, as the server scores a view of
 * its resident corpus; on the CPU the mapped documents), then the HTTP latency of the same bodies.
 */
async function rerankBench(a: Args, corpus: string) {
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
    console.log(
      `maxsim serve: ${a.docs} docs x ${a.docLen} tokens, d = ${a.dim} ${a.corpus ? '(given corpus)' : a.dtype}, float16 base64 queries of ${a.queryLen} tokens, top-${a.topK}, ${a.backend}, ${a.connections} connections (${a.clientWorkers} client thread${a.clientWorkers > 1 ? 's' : ''}), ${a.rounds} rounds of ${a.duration} s each, ${os.cpus().length} cores`,
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
