// A simulation of `maxsim serve`'s batching policy: the real Batcher, a serial backend that takes
// `fixed + perQuery x queries` ms per pass (the H200 kernel: 1 + 0.195, i.e. 25 ms for 128 queries)
// plus `host` ms of the backend's own host work, and closed-loop clients that each cost the real JS
// thread `jsIn` ms when their request arrives (HTTP, JSON, decode) and `jsOut` ms when it is answered
// (serialisation, write), busy-waited, so the JS thread's load delays the passes' completions as on the
// server. Answers: requests/s, p50 / p99 latency, queries per pass. Policy questions (max-batch,
// passes in flight, the wait) are asked here first, then measured on the GPU.
//
// Run: node dist/bench/serve-sim.js [--clients 256] [--max-batch 128] [--in-flight 2] [--wait auto|MS]
//        [--fixed 1] [--per-query 0.195] [--host 2] [--js-in 0.1] [--js-out 0.03] [--duration 5]
//        [--lead 0.25 (the hand-over, as a share of the pass before the running one ends)]
import { Batcher } from '../src/server/batcher.js';
import type { EncodedTokens } from '../src/server/codecs.js';

interface Args {
  clients: number;
  maxBatch: number;
  inFlight: number;
  wait: number | 'auto';
  fixed: number;
  perQuery: number;
  host: number;
  jsIn: number;
  jsOut: number;
  duration: number;
  lead: number;
}

function parseArgs(argv: string[]): Args {
  const a: Args = {
    clients: 256,
    maxBatch: 128,
    inFlight: 2,
    wait: 'auto',
    fixed: 1,
    perQuery: 0.195,
    host: 2,
    jsIn: 0.1,
    jsOut: 0.03,
    duration: 5,
    lead: 0.25,
  };
  const keys: Record<string, keyof Args> = {
    '--clients': 'clients',
    '--max-batch': 'maxBatch',
    '--in-flight': 'inFlight',
    '--fixed': 'fixed',
    '--per-query': 'perQuery',
    '--host': 'host',
    '--js-in': 'jsIn',
    '--js-out': 'jsOut',
    '--duration': 'duration',
    '--lead': 'lead',
  };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (flag === '--wait') a.wait = value === 'auto' ? 'auto' : Number(value);
    else if (flag in keys) (a as unknown as Record<string, number>)[keys[flag]] = Number(value);
    else throw new Error(`unknown argument ${flag}`);
    const v = flag === '--wait' ? a.wait : a[keys[flag]];
    if (!(v === 'auto' || (typeof v === 'number' && v >= 0 && v <= 1e6)))
      throw new Error(`${flag}: expected a number >= 0, received ${value}`);
  }
  return a;
}

function spin(ms: number) {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

const a = parseArgs(process.argv.slice(2));
const latencies: number[] = [];
const started = performance.now();
const warmUntil = started + 1000;
const end = warmUntil + a.duration * 1000;
// the backend: one pass at a time, in the order handed over
let freeAt = 0;
let busy = 0;
const passes: number[] = [];
const batcher = new Batcher(
  (q) => {
    const n = q.offsets.length - 1;
    passes.push(n);
    const now = performance.now();
    const start = Math.max(now, freeAt);
    freeAt = start + a.host + a.fixed + a.perQuery * n;
    if (start >= warmUntil && freeAt <= end) busy += freeAt - start;
    return new Promise((resolve) =>
      setTimeout(
        () => resolve(Array.from({ length: n }, () => [{ index: 0, score: 0, id: '0' }])),
        freeAt - now,
      ),
    );
  },
  {
    maxBatch: a.maxBatch,
    maxWaitMs: a.wait,
    maxQueue: 1 << 20,
    passesInFlight: a.inFlight,
    handOverLead: a.lead,
  },
);
const query: EncodedTokens = { dtype: 'float32', values: new Float32Array(4), offsets: [0, 1], dim: 4 };
let timedFrom = 0;
async function client() {
  while (performance.now() < end) {
    // the request's bytes reach the server a moment later (loopback), then cost the JS thread
    await new Promise((r) => setImmediate(r));
    const t0 = performance.now();
    spin(a.jsIn);
    await batcher.search(query, 10, '', 60_000);
    spin(a.jsOut);
    const t1 = performance.now();
    if (t0 >= warmUntil && t1 <= end) latencies.push(t1 - t0);
  }
}
setTimeout(() => {
  timedFrom = passes.length;
}, warmUntil - started);
const elu0 = performance.eventLoopUtilization();
await Promise.all(Array.from({ length: a.clients }, client));
const elu = performance.eventLoopUtilization(elu0);
await batcher.drain();
latencies.sort((x, y) => x - y);
const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))];
const timed = passes.slice(timedFrom);
console.log(
  `clients ${a.clients} max-batch ${a.maxBatch} in-flight ${a.inFlight} lead ${a.lead} wait ${a.wait} backend ${a.host} + ${a.fixed} + ${a.perQuery} x q ms, JS ${a.jsIn} + ${a.jsOut} ms per request: ${(latencies.length / a.duration).toFixed(0)} requests/s, p50 ${pct(0.5).toFixed(1)} ms, p99 ${pct(0.99).toFixed(1)} ms, max ${latencies[latencies.length - 1].toFixed(1)} ms, ${(timed.reduce((x, y) => x + y, 0) / timed.length).toFixed(1)} queries per pass, backend busy ${((100 * busy) / (a.duration * 1000)).toFixed(0)}%, JS thread busy ${(100 * elu.utilization).toFixed(0)}%`,
);
