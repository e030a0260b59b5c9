// Prometheus metrics of one server (a registry of its own: several servers may live in one process).
// The runtime's default metrics keep their standard names (process_*, nodejs_*) so stock dashboards
// read them; ours carry the maxsim_ prefix.

import type { FastifyInstance } from 'fastify';
import * as prom from 'prom-client';
import { version } from '../version.js';
import { AbandonedError, type PassInfo, type PassToken } from './batcher.js';
import type { PassStats } from './index-path.js';
import { createSearchMetrics } from './metrics-index.js';
import type { ResidentCorpus } from './resident.js';

const PASS_PHASES = ['gather', 'wait', 'backend', 'merge', 'split', 'answer'] as const;

export interface ServerMetrics {
  readonly registry: prom.Registry;
  /** Time of a search request by phase (the search route observes them). */
  readonly request: Record<'parse' | 'decode' | 'queue' | 'encode', prom.Histogram.Internal<'phase'>>;
  /** The text model's observations: encoder runs, and a text request's tokenize and embed phases. */
  readonly text: {
    onRun(kind: 'query' | 'document', texts: number, seconds: number): void;
    tokenize(seconds: number): void;
    embed(seconds: number): void;
  };
  /** What the batcher reports of each pass. */
  onPass(p: PassInfo): void;
  /** A request whose client closed its connection before the answer (the batcher's onAbandoned). */
  onAbandoned(stage: 'queued' | 'running'): void;
  /** Which path a search pass took, and its index stages (metrics-index.ts). */
  onSearch(s: PassStats): void;
  /** Gauges read from the batcher at scrape time. */
  watchQueue(depth: () => number): void;
  /** The onSend / onResponse hooks: request counts, latency, the pass's answering time, one log line. */
  register(app: FastifyInstance, closing: () => boolean): void;
}

export function createMetrics(resident: ResidentCorpus): ServerMetrics {
  const registry = new prom.Registry();
  prom.collectDefaultMetrics({ register: registry });
  new prom.Gauge({
    name: 'maxsim_build_info',
    help: 'the maxsim version serving (always 1)',
    labelNames: ['version'] as const,
    registers: [registry],
  }).set({ version }, 1);
  const phases = phaseMetrics(registry);
  const text = textMetrics(registry, phases.requestPhase);
  const passes = passMetrics(registry, phases);
  corpusGauges(registry, resident);
  const register = httpHooks(registry, phases.passPhaseOf.answer);
  const abandoned = new prom.Counter({
    name: 'maxsim_abandoned_requests_total',
    help: 'requests whose client closed the connection before the answer: queued (dropped from the queue, never scored) or running (their pass went on for the others; no answer sent)',
    labelNames: ['stage'] as const,
    registers: [registry],
  });
  return {
    registry,
    request: phases.request,
    text,
    onPass: passes.onPass,
    onAbandoned: (stage) => abandoned.inc({ stage }),
    onSearch: createSearchMetrics(registry),
    watchQueue(depth) {
      new prom.Gauge({
        name: 'maxsim_queue_depth',
        help: 'queries waiting for a pass',
        registers: [registry],
        collect() {
          this.set(depth());
        },
      });
    },
    register,
  };
}

const phaseBuckets = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];

// Where the time goes (a GPU run is read from these): the host work of a pass around its kernel, and
// of a request around its pass (means from _sum / _count; bench/serve.ts prints them).
function phaseMetrics(registry: prom.Registry) {
  const passPhase = new prom.Histogram({
    name: 'maxsim_pass_phase_seconds',
    help: 'time of a search pass by phase: gather (decode into the batch), wait (queued behind the pass ahead), backend (the search call, kernel included), merge (its JS part: segments merged, ids), split (rows per request), answer (its requests answered: handlers and serialisation, up to the last one handed to the socket)',
    labelNames: ['phase'] as const,
    buckets: phaseBuckets,
    registers: [registry],
  });
  const requestPhase = new prom.Histogram({
    name: 'maxsim_request_phase_seconds',
    help: 'time of a search request by phase: parse (body read, JSON parse, validation), decode (embeddings checked), queue (waiting for its pass), encode (the JSON answer built); of a text request (any route): tokenize (its texts, on the JS thread), embed (waiting for and running its encoder run)',
    labelNames: ['phase'] as const,
    buckets: phaseBuckets,
    registers: [registry],
  });
  // label children resolved once: a labelled observe hashes its labels on every call
  const passPhaseOf = Object.fromEntries(PASS_PHASES.map((phase) => [phase, passPhase.labels({ phase })]));
  const request = {
    parse: requestPhase.labels({ phase: 'parse' }),
    decode: requestPhase.labels({ phase: 'decode' }),
    queue: requestPhase.labels({ phase: 'queue' }),
    encode: requestPhase.labels({ phase: 'encode' }),
  };
  return { passPhaseOf, request, requestPhase };
}

// Each pass: its size, its time, and its phases (and the queueing of its requests).
function passMetrics(
  registry: prom.Registry,
  phases: ReturnType<typeof phaseMetrics>,
): Pick<ServerMetrics, 'onPass'> {
  const batchSizes = new prom.Histogram({
    name: 'maxsim_batch_queries',
    help: 'queries scored per pass',
    buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
    registers: [registry],
  });
  const passSeconds = new prom.Histogram({
    name: 'maxsim_pass_duration_seconds',
    help: 'time of one scoring pass',
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10],
    registers: [registry],
  });
  const { passPhaseOf, request } = phases;
  return {
    onPass(p) {
      batchSizes.observe(p.queries);
      passSeconds.observe(p.seconds);
      if (p.phases) {
        for (const [phase, seconds] of Object.entries(p.phases)) passPhaseOf[phase].observe(seconds);
        for (const q of p.queued) request.queue.observe(q);
      }
    },
  };
}

// The text model: encoder runs by kind (time, texts), and a text request's tokenize and embed phases.
function textMetrics(registry: prom.Registry, requestPhase: prom.Histogram<'phase'>): ServerMetrics['text'] {
  const tokenizePhase = requestPhase.labels({ phase: 'tokenize' });
  const embedPhase = requestPhase.labels({ phase: 'embed' });
  const encodeRuns = new prom.Histogram({
    name: 'maxsim_encode_run_seconds',
    help: 'time of one encoder run (the texts of every request that queued meanwhile) by kind',
    labelNames: ['kind'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10],
    registers: [registry],
  });
  const encodeTexts = new prom.Histogram({
    name: 'maxsim_encode_run_texts',
    help: 'texts encoded per encoder run by kind',
    labelNames: ['kind'] as const,
    buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256],
    registers: [registry],
  });
  const runOf = {
    query: { seconds: encodeRuns.labels({ kind: 'query' }), texts: encodeTexts.labels({ kind: 'query' }) },
    document: {
      seconds: encodeRuns.labels({ kind: 'document' }),
      texts: encodeTexts.labels({ kind: 'document' }),
    },
  };
  return {
    onRun(kind, texts, seconds) {
      runOf[kind].seconds.observe(seconds);
      runOf[kind].texts.observe(texts);
    },
    tokenize: (seconds) => tokenizePhase.observe(seconds),
    embed: (seconds) => embedPhase.observe(seconds),
  };
}

// Gauges read at scrape time: the JS thread's load, the corpus's documents, the GPU's memory.
function corpusGauges(registry: prom.Registry, resident: ResidentCorpus): void {
  let elu = performance.eventLoopUtilization();
  new prom.Gauge({
    name: 'maxsim_event_loop_utilization',
    help: 'share of the time the JS thread was busy since the previous scrape (1: saturated)',
    registers: [registry],
    collect() {
      const now = performance.eventLoopUtilization();
      this.set(performance.eventLoopUtilization(now, elu).utilization);
      elu = now;
    },
  });
  new prom.Gauge({
    name: 'maxsim_corpus_documents',
    help: 'documents searches see (live: stored minus deleted)',
    registers: [registry],
    collect() {
      this.set(resident.info.live);
    },
  });
  new prom.Gauge({
    name: 'maxsim_corpus_deleted_documents',
    help: 'deleted documents not yet compacted away',
    registers: [registry],
    collect() {
      this.set(resident.info.deleted);
    },
  });
  if (resident.backend === 'cuda')
    new prom.Gauge({
      name: 'maxsim_gpu_memory_bytes',
      help: 'GPU memory: in use by maxsim, cached by its allocator, free on the device',
      labelNames: ['kind'] as const,
      registers: [registry],
      async collect() {
        const m = await resident.memory().catch(() => undefined);
        if (!m) return;
        this.set({ kind: 'in_use' }, m.inUse);
        this.set({ kind: 'cached' }, m.cached);
        this.set({ kind: 'free' }, m.free);
      },
    });
}

// Request counts and latency by route, the pass's answering time, the response headers, one log line.
function httpHooks(
  registry: prom.Registry,
  answerPhase: prom.Histogram.Internal<'phase'>,
): ServerMetrics['register'] {
  const requests = new prom.Counter({
    name: 'maxsim_http_requests_total',
    help: 'HTTP requests by route, method and status',
    labelNames: ['route', 'method', 'status'] as const,
    registers: [registry],
  });
  const latency = new prom.Histogram({
    name: 'maxsim_http_request_duration_seconds',
    help: 'HTTP request latency by route',
    labelNames: ['route'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry],
  });
  // label children by key (routes x methods x statuses: a few dozen at most)
  const requestCounters = new Map<string, prom.Counter.Internal>();
  const latencyOf = new Map<string, prom.Histogram.Internal<'route'>>();
  return (app, closing) => {
    // callback hooks, not async ones: a promise less per request and hook
    app.addHook('onSend', (req, reply, payload, done) => {
      // the last answer of a search pass serialised: the pass's answering time (its requests'
      // handlers and serialisation run one after the other once the pass resolves them)
      const pass = (req as unknown as { pass?: PassToken }).pass;
      if (pass && --pass.pending === 0) answerPhase.observe((performance.now() - pass.resolvedAt) / 1000);
      reply.header('x-request-id', req.id);
      const batch = (req as unknown as { batchSize: number }).batchSize;
      if (batch > 0) reply.header('x-maxsim-batch', String(batch)); // queries in the pass that answered
      // shutting down: no keep-alive, so the connections of the requests in flight end with them
      if (closing()) reply.header('connection', 'close');
      done(null, payload);
    });
    const count = (route: string, method: string, status: number) => {
      const key = `${route} ${method} ${status}`;
      let counter = requestCounters.get(key);
      if (!counter) {
        counter = requests.labels({ route, method, status: String(status) });
        requestCounters.set(key, counter);
      }
      counter.inc();
    };
    // a request dropped because its client left (AbandonedError): its socket is gone, so no
    // response finishes and onResponse never runs; counted here as nginx's 499
    app.addHook('onError', (req, _reply, error, done) => {
      if (error instanceof AbandonedError && req.raw.socket?.destroyed !== false)
        count(req.routeOptions.url ?? 'unmatched', req.method, 499);
      done();
    });
    app.addHook('onResponse', (req, reply, done) => {
      const route = req.routeOptions.url ?? 'unmatched';
      const status = reply.statusCode;
      count(route, req.method, status);
      let histogram = latencyOf.get(route);
      if (!histogram) {
        histogram = latency.labels({ route });
        latencyOf.set(route, histogram);
      }
      histogram.observe(reply.elapsedTime / 1000);
      const batch = (req as unknown as { batchSize: number }).batchSize;
      // (pino's isLevelEnabled; a logger without it logs)
      if ((req.log as { isLevelEnabled?: (l: string) => boolean }).isLevelEnabled?.('info') !== false)
        req.log.info(
          { method: req.method, route, status, ms: Math.round(reply.elapsedTime * 1000) / 1000, batch },
          'request',
        );
      done();
    });
  };
}
