// bench/serve.ts's load generators: autocannon runs against a server (warm, measure: one round's
// figures; soak: memory under load over time) and closedLoop, a microsecond-timed rerank client.
import * as http from 'node:http';
import { createRequire } from 'node:module';
import type { Args } from './serve-args.js';
import {
  gauge,
  histogram,
  median,
  PASS_PHASES,
  phaseMeans,
  REQUEST_PHASES,
  serverLatency,
} from './serve-metrics.js';
import { HEADERS, type Server, startServer, stopServer } from './serve-servers.js';

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

export interface RunResult {
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

export async function warm(server: Server, a: Args, requests: object[]) {
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

export async function measure(server: Server, a: Args, requests: object[]): Promise<RunResult> {
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

export function row(label: string, r: RunResult): string {
  return `${label.padEnd(10)} ${String(r.maxBatch).padStart(9)}  ${r.requestsPerSecond.toFixed(1).padStart(7)}  ${r.p50Ms.toFixed(1).padStart(7)}  ${r.p99Ms.toFixed(1).padStart(7)}  ${r.queriesPerPass.toFixed(1).padStart(12)}  ${r.msPerPass.toFixed(2).padStart(8)}  ${String(r.non2xx).padStart(7)}  ${String(r.errors).padStart(6)}  ${r.loopP99Ms.toFixed(1).padStart(7)}  ${r.loopMaxMs.toFixed(1).padStart(7)}  ${r.cpuMsPerRequest.toFixed(2).padStart(10)}`;
}

export async function soak(a: Args, corpus: string, requests: object[]) {
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
export async function timeIt(
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
export async function closedLoop(
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
