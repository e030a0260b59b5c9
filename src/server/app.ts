// `maxsim serve`: an HTTP search / rerank / score service over a resident corpus (Fastify 5, TypeBox
// schemas, OpenAPI from the same schemas, Prometheus metrics). Searches from concurrent requests are
// gathered into one pass by the batcher; every scoring call runs off the JS thread (native workers).

import { createHash, timingSafeEqual } from 'node:crypto';
import swagger from '@fastify/swagger';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, {
  type FastifyError,
  type FastifyInstance,
  type FastifyRequest,
  type FastifyServerOptions,
  LogController,
} from 'fastify';
import * as prom from 'prom-client';
import type { Static } from 'typebox';
import { cpuInfo } from '../backends/cpu.js';
import { InvalidArgumentError, MaxsimError } from '../errors.js';
import type { CorpusHit } from '../ops/corpus-search.js';
import { maxsim, maxsimAll } from '../ops/maxsim.js';
import { topKOfRow } from '../ops/topk.js';
import { raggedBatch, type TokenBatch, tokenMatrix } from '../tensor.js';
import { version } from '../version.js';
import { Batcher, ClosingError, DeadlineError, type PassToken, QueueFullError } from './batcher.js';
import {
  concatPacked,
  decodeEmbeddings,
  type EncodedTokens,
  itemCount,
  type PackedTokens,
  readEmbeddings,
  readNpy,
  toFloat32,
} from './codecs.js';
import {
  ConflictError,
  CorpusBusyError,
  NotFoundError,
  ResidentCorpus,
  type ResidentOptions,
} from './resident.js';
import {
  DeleteDocumentsBody,
  DeleteDocumentsResponse,
  DocumentsBody,
  DocumentsResponse,
  ErrorResponse,
  InfoResponse,
  type InlineDocument,
  RerankBody,
  RerankResponse,
  ScoreBody,
  ScoreResponse,
  SearchBody,
  SearchQuery,
  SearchResponse,
} from './schemas.js';

/** The corpus directory (maxsim corpus build), its backend, pin, threads, device and GPU budget. */
export interface ServerOptions extends ResidentOptions {
  /** Default 127.0.0.1 (loopback only). */
  host?: string;
  /** Default 8080; 0 picks a free port. */
  port?: number;
  /**
   * Queries per scoring pass (default 128: on the H200 a pass of 128 queries of 32 tokens over 100,000
   * documents of 128 takes 25 ms of kernel, 256 take 51 ms; shorter passes pipeline and answer
   * sooner). 1 turns cross-request batching off.
   */
  maxBatch?: number;
  /** Longest wait for company before a pass starts, ms, or 'auto' (default): a tenth of the pass time, 1-50 ms. */
  maxWaitMs?: number | 'auto';
  /** Passes handed to the backend at once: default 2 on a GPU-resident corpus (pipelined), else 1. */
  passesInFlight?: number;
  /** Queries queued at most before requests get 429 (default 16 x maxBatch, at least 1024). */
  maxQueue?: number;
  /** Largest request body, bytes (default 64 MiB): 413 beyond. */
  bodyLimit?: number;
  /** Per-request deadline, ms (default 30000): 504 beyond. */
  timeoutMs?: number;
  /** Bearer token required for writes (and for reads with authReads). */
  apiKey?: string;
  authReads?: boolean;
  /** Fastify's logger option (pino): default on at level info. */
  logger?: FastifyServerOptions['logger'];
}

export interface MaxsimServer {
  readonly app: FastifyInstance;
  readonly resident: ResidentCorpus;
  /** Starts listening; resolves with the address. */
  listen(): Promise<{ host: string; port: number; url: string }>;
  /** Stops accepting, finishes the requests in flight, releases the corpus (and GPU memory). */
  close(): Promise<void>;
}

class AuthError extends MaxsimError {
  override name = 'AuthError';
}

interface HttpError {
  status: number;
  code: string;
  message: string;
  field?: string;
  expected?: string;
  received?: string;
  missing?: string[];
  headers?: Record<string, string>;
}

function describeValue(x: unknown): string {
  if (x === undefined) return 'nothing';
  if (Array.isArray(x)) return `an array of ${x.length}`;
  if (typeof x === 'string') return x.length > 40 ? `a string of ${x.length} characters` : JSON.stringify(x);
  if (x === null || typeof x !== 'object') return String(x);
  return 'an object';
}

function valueAt(root: unknown, pointer: string): unknown {
  let at = root;
  for (const part of pointer.split('/').slice(1)) {
    if (at === null || typeof at !== 'object') return undefined;
    at = (at as Record<string, unknown>)[part.replace(/~1/g, '/').replace(/~0/g, '~')];
  }
  return at;
}

// '/documents/0/id' -> 'documents[0].id'
function fieldOf(pointer: string): string {
  return pointer
    .split('/')
    .slice(1)
    .map((p, i) => (/^\d+$/.test(p) ? `[${p}]` : i === 0 ? p : `.${p}`))
    .join('');
}

function toHttpError(error: unknown, request: FastifyRequest): HttpError {
  const e = error as FastifyError & {
    validation?: { instancePath: string; message?: string; params?: Record<string, unknown> }[];
  };
  if (e?.validation && e.validation.length > 0) {
    // the deepest complaint says the most (a union reports its branches after the reason)
    const v = [...e.validation].sort((a, b) => b.instancePath.length - a.instancePath.length)[0];
    const missing = v.params?.missingProperty as string | undefined;
    const pointer = missing ? `${v.instancePath}/${missing}` : v.instancePath;
    const source = e.validationContext === 'querystring' ? request.query : request.body;
    const field = fieldOf(pointer) || e.validationContext || 'body';
    const expected = missing
      ? 'a value (it is required)'
      : (v.message ?? 'a valid value').replace(/^must (be )?/, '');
    const received = describeValue(valueAt(source, pointer));
    return {
      status: 400,
      code: 'invalid_argument',
      message: `Expected ${expected} for ${field} but received ${received}`,
      field,
      expected,
      received,
    };
  }
  if (error instanceof InvalidArgumentError)
    return {
      status: 400,
      code: 'invalid_argument',
      message: error.message,
      field: error.argument,
      expected: error.expected,
      received: error.received,
    };
  if (error instanceof NotFoundError)
    return {
      status: 404,
      code: 'unknown_id',
      message: error.message,
      field: error.field,
      missing: error.missing,
    };
  if (error instanceof ConflictError) return { status: 409, code: 'conflict', message: error.message };
  if (error instanceof AuthError)
    return {
      status: 401,
      code: 'unauthorized',
      message: error.message,
      headers: { 'www-authenticate': 'Bearer' },
    };
  if (error instanceof QueueFullError)
    return {
      status: 429,
      code: 'overloaded',
      message: error.message,
      headers: { 'retry-after': String(error.retryAfterSeconds) },
    };
  if (error instanceof DeadlineError)
    return { status: 504, code: 'deadline_exceeded', message: error.message };
  if (error instanceof ClosingError) return { status: 503, code: 'shutting_down', message: error.message };
  if (error instanceof CorpusBusyError)
    return { status: 503, code: 'corpus_locked', message: error.message, headers: { 'retry-after': '1' } };
  const status = typeof e?.statusCode === 'number' ? e.statusCode : 500;
  if (e?.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || e?.code === 'FST_ERR_CTP_EMPTY_JSON_BODY')
    return {
      status: 400,
      code: 'invalid_json',
      message: `Expected a JSON document for body but received ${e.code === 'FST_ERR_CTP_EMPTY_JSON_BODY' ? 'an empty body' : 'invalid JSON'}`,
      field: 'body',
      expected: 'a JSON document',
      received: e.code === 'FST_ERR_CTP_EMPTY_JSON_BODY' ? 'an empty body' : 'invalid JSON',
    };
  if (status >= 400 && status < 500)
    return { status, code: FASTIFY_CODES[e.code] ?? 'bad_request', message: e.message };
  return {
    status: 500,
    code: 'internal',
    message: error instanceof MaxsimError ? error.message : 'internal error',
  };
}

const FASTIFY_CODES: Record<string, string> = {
  FST_ERR_CTP_BODY_TOO_LARGE: 'body_too_large',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'unsupported_media_type',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'bad_content_length',
};

function jsonScore(s: number): number | null {
  return Number.isFinite(s) ? s : null;
}

/** `{"results": [[{id, index, score}, ...], ...]}` as JSON.stringify writes it, built directly. */
export function searchJson(hits: readonly (readonly CorpusHit[])[]): string {
  let out = '{"results":[';
  for (let r = 0; r < hits.length; r++) {
    if (r > 0) out += ',';
    out += '[';
    const row = hits[r];
    for (let i = 0; i < row.length; i++) {
      const h = row[i];
      if (i > 0) out += ',';
      // ids are arbitrary strings: JSON.stringify escapes them; a non-finite score is null
      out += `{"id":${JSON.stringify(h.id)},"index":${h.index},"score":${Number.isFinite(h.score) ? h.score : 'null'}}`;
    }
    out += ']';
  }
  return `${out}]}`;
}

function digest(s: string): Buffer {
  return createHash('sha256').update(s, 'utf8').digest();
}

/** Packed float32 items as a batch for the kernels (values were checked when decoded). */
function asBatch(p: PackedTokens): TokenBatch {
  return raggedBatch(p.data, p.offsets, { dim: p.dim, checkFinite: false });
}

/** A pass's queries (float32, or float16 / bfloat16 bits) as a batch for the kernels. */
function encodedBatch(p: EncodedTokens): TokenBatch {
  return raggedBatch(p.values, p.offsets, { dim: p.dim, dtype: p.dtype, checkFinite: false });
}

function decodeDocuments(
  docs: readonly InlineDocument[],
  field: string,
  dim: number | undefined,
): PackedTokens {
  const parts: PackedTokens[] = [];
  let d = dim;
  docs.forEach((doc, i) => {
    const f = `${field}[${i}]`;
    if ((doc.embeddings === undefined) === (doc.embeddings_b64 === undefined))
      throw new InvalidArgumentError(
        `${f}.embeddings`,
        'either embeddings or embeddings_b64 (with shape and dtype)',
        doc.embeddings === undefined ? 'neither' : 'both',
      );
    const value = doc.embeddings ?? { b64: doc.embeddings_b64!, dtype: doc.dtype, shape: doc.shape ?? [] };
    const p = decodeEmbeddings(
      value,
      `${f}.${doc.embeddings === undefined ? 'embeddings_b64' : 'embeddings'}`,
      'one',
      d,
    );
    d = p.dim;
    parts.push(p);
  });
  if (d === undefined) throw new InvalidArgumentError(field, 'at least one document with tokens', 'none');
  return concatPacked(parts, d);
}

/** Ranks scores best first (ties: the earlier position), the first n. */
function ranked(scores: Float32Array, n: number): { index: number; score: number }[] {
  return topKOfRow(scores, Math.min(n, scores.length));
}

export async function createServer(options: ServerOptions): Promise<MaxsimServer> {
  const maxBatch = options.maxBatch ?? 128;
  const maxWaitMs = options.maxWaitMs ?? 'auto';
  const maxQueue = options.maxQueue ?? Math.max(1024, 16 * maxBatch);
  const timeoutMs = options.timeoutMs ?? 30_000;
  const bodyLimit = options.bodyLimit ?? 64 * 1024 * 1024;
  const check = (name: string, v: number, min: number) => {
    if (!(Number.isFinite(v) && v >= min))
      throw new InvalidArgumentError(name, `a number >= ${min}`, String(v));
  };
  check('maxBatch', maxBatch, 1);
  if (maxWaitMs !== 'auto') check('maxWaitMs', maxWaitMs, 0);
  if (options.passesInFlight !== undefined) check('passesInFlight', options.passesInFlight, 1);
  check('maxQueue', maxQueue, 1);
  check('timeoutMs', timeoutMs, 1);
  check('bodyLimit', bodyLimit, 1024);
  if (options.apiKey !== undefined && options.apiKey.length < 8)
    throw new InvalidArgumentError(
      'apiKey',
      'a key of at least 8 characters',
      `${options.apiKey.length} characters`,
    );

  const resident = await ResidentCorpus.open(options);
  const dim = () => resident.info.dim;
  const backend = resident.backend;

  // ---- metrics (a registry of our own: several servers may live in one process) ----
  const registry = new prom.Registry();
  prom.collectDefaultMetrics({ register: registry, prefix: 'maxsim_' });
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
  // where the time goes (a GPU run is read from these): the host work of a pass around its kernel,
  // and of a request around its pass (means from _sum / _count; bench/serve.ts prints them)
  const phaseBuckets = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];
  const passPhase = new prom.Histogram({
    name: 'maxsim_pass_phase_seconds',
    help: 'time of a search pass by phase: gather (decode into the batch), wait (queued behind the pass ahead), backend (the search call, kernel included), merge (its JS part: segments merged, ids), split (rows per request), answer (its requests answered: handlers and serialisation, up to the last one handed to the socket)',
    labelNames: ['phase'] as const,
    buckets: phaseBuckets,
    registers: [registry],
  });
  const requestPhase = new prom.Histogram({
    name: 'maxsim_request_phase_seconds',
    help: 'time of a search request by phase: parse (body read, JSON parse, validation), decode (embeddings checked), queue (waiting for its pass), encode (the JSON answer built)',
    labelNames: ['phase'] as const,
    buckets: phaseBuckets,
    registers: [registry],
  });
  // label children resolved once: a labelled observe hashes its labels on every call
  const passPhaseOf = Object.fromEntries(
    ['gather', 'wait', 'backend', 'merge', 'split', 'answer'].map((phase) => [
      phase,
      passPhase.labels({ phase }),
    ]),
  );
  const parsePhase = requestPhase.labels({ phase: 'parse' });
  const decodePhase = requestPhase.labels({ phase: 'decode' });
  const queuePhase = requestPhase.labels({ phase: 'queue' });
  const encodePhase = requestPhase.labels({ phase: 'encode' });
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
  const batcher = new Batcher(
    (queries, k, key, timing) =>
      resident.search(encodedBatch(queries), k, key === 'int8' ? 'int8' : undefined, timing),
    {
      maxBatch,
      maxWaitMs,
      maxQueue,
      // a resident corpus's GPU runs passes one after the other on its worker thread: the next is
      // handed over early; a streamed scan holds staging buffers per search, and the CPU pool is the
      // JS thread's neighbour on few cores: one pass at a time there
      passesInFlight: options.passesInFlight ?? (resident.mode === 'resident' ? 2 : 1),
      // a GPU-resident float16 / bfloat16 corpus takes float16 / bfloat16 queries as they are (the
      // same bits as float32 queries rounded there); the int8 prefilter, the CPU and a streamed scan
      // get float32
      keepBits: (key) =>
        resident.mode === 'resident' &&
        key === '' &&
        (resident.info.dtype === 'float16' || resident.info.dtype === 'bfloat16')
          ? resident.info.dtype
          : undefined,
    },
    (p) => {
      batchSizes.observe(p.queries);
      passSeconds.observe(p.seconds);
      if (p.phases) {
        for (const [phase, seconds] of Object.entries(p.phases)) passPhaseOf[phase].observe(seconds);
        for (const q of p.queued) queuePhase.observe(q);
      }
    },
  );
  new prom.Gauge({
    name: 'maxsim_queue_depth',
    help: 'queries waiting for a pass',
    registers: [registry],
    collect() {
      this.set(batcher.depth);
    },
  });
  new prom.Gauge({
    name: 'maxsim_corpus_documents',
    help: 'documents in the resident corpus',
    registers: [registry],
    collect() {
      this.set(resident.info.documents);
    },
  });
  if (backend === 'cuda')
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

  // ---- the app ----
  const app = Fastify({
    logger: options.logger ?? true,
    bodyLimit,
    // one line per request, written by the onResponse hook below
    logController: new LogController({ disableRequestLogging: true }),
    requestIdHeader: 'x-request-id',
    requestTimeout: timeoutMs + 10_000,
    return503OnClosing: true,
  }).withTypeProvider<TypeBoxTypeProvider>();
  app.decorateRequest('batchSize', 0);
  app.decorateRequest('pass', undefined);
  // JSON and .npy only: a text body is a 415, not a string that fails validation
  app.removeContentTypeParser('text/plain');
  // JSON: Fastify's parser scans every body with two regexes for a __proto__ / constructor key (a few
  // % of the JS thread on 11 KB search bodies); that scan now runs only where such a key can be (the
  // words, or a \u escape that could spell them), else plain JSON.parse; failures take its path too,
  // so the errors are Fastify's
  const secureJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const text = body as string;
    if (
      text.length > 0 &&
      !text.includes('__proto__') &&
      !text.includes('constructor') &&
      !text.includes('\\u')
    ) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        return secureJson(request, text, done);
      }
      return done(null, parsed);
    }
    return secureJson(request, text, done);
  });
  for (const type of ['application/octet-stream', 'application/x-npy'])
    app.addContentTypeParser(type, { parseAs: 'buffer' }, (_req, body, done) => done(null, body));

  let closing = false;
  const keyDigest = options.apiKey === undefined ? undefined : digest(options.apiKey);
  const authorize = (request: FastifyRequest) => {
    if (!keyDigest) return;
    const header = request.headers.authorization ?? '';
    const m = /^Bearer +(\S+) *$/i.exec(header);
    // digests of equal length: the comparison time does not depend on where the strings differ
    if (!m || !timingSafeEqual(digest(m[1]), keyDigest))
      throw new AuthError(
        m ? 'the API key is not valid' : 'this endpoint needs an API key: Authorization: Bearer <key>',
      );
  };
  // reads: a preHandler only where reads need the key (a hook is a promise per request)
  const readHook = options.authReads
    ? { preHandler: async (request: FastifyRequest) => authorize(request) }
    : {};

  app.setErrorHandler((error, request, reply) => {
    const h = toHttpError(error, request);
    if (h.status >= 500 && h.status !== 503 && h.status !== 504)
      request.log.error({ err: error }, 'request failed');
    const { status, headers, ...body } = h;
    reply.code(status);
    if (headers) reply.headers(headers);
    return reply.send({ error: body });
  });
  app.setNotFoundHandler((request, reply) =>
    reply.code(404).send({
      error: { code: 'not_found', message: `no route ${request.method} ${request.url.split('?')[0]}` },
    }),
  );
  // callback hooks, not async ones: a promise less per request and hook
  app.addHook('onSend', (request, reply, payload, done) => {
    // the last answer of a search pass serialised: the pass's answering time (its requests' handlers
    // and serialisation run one after the other once the pass resolves them)
    const pass = (request as unknown as { pass?: PassToken }).pass;
    if (pass && --pass.pending === 0)
      passPhaseOf.answer.observe((performance.now() - pass.resolvedAt) / 1000);
    reply.header('x-request-id', request.id);
    const batch = (request as unknown as { batchSize: number }).batchSize;
    if (batch > 0) reply.header('x-maxsim-batch', String(batch)); // queries in the pass that answered
    // shutting down: no keep-alive, so the connections of the requests in flight end with them
    if (closing) reply.header('connection', 'close');
    done(null, payload);
  });
  app.addHook('onResponse', (request, reply, done) => {
    const route = request.routeOptions.url ?? 'unmatched';
    const status = reply.statusCode;
    const key = `${route} ${request.method} ${status}`;
    let counter = requestCounters.get(key);
    if (!counter) {
      counter = requests.labels({ route, method: request.method, status: String(status) });
      requestCounters.set(key, counter);
    }
    counter.inc();
    let histogram = latencyOf.get(route);
    if (!histogram) {
      histogram = latency.labels({ route });
      latencyOf.set(route, histogram);
    }
    histogram.observe(reply.elapsedTime / 1000);
    const batch = (request as unknown as { batchSize: number }).batchSize;
    // (pino's isLevelEnabled; a logger without it logs)
    if ((request.log as { isLevelEnabled?: (l: string) => boolean }).isLevelEnabled?.('info') !== false)
      request.log.info(
        { method: request.method, route, status, ms: Math.round(reply.elapsedTime * 1000) / 1000, batch },
        'request',
      );
    done();
  });

  await app.register(swagger, {
    openapi: {
      info: {
        title: 'maxsim serve',
        version,
        description: 'MaxSim search, rerank and scoring over a resident corpus',
      },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
    },
  });

  const errors = { 400: ErrorResponse, 404: ErrorResponse, 429: ErrorResponse, 504: ErrorResponse };
  const setBatch = (request: FastifyRequest, n: number) => {
    (request as unknown as { batchSize: number }).batchSize = n;
  };

  app.post(
    '/v1/search',
    {
      schema: {
        description:
          'Top-k documents of the resident corpus for each query. JSON, or a .npy body (application/x-npy or application/octet-stream, [L, d] or [n, L, d]) with top_k in the query string.',
        body: {
          content: {
            'application/json': { schema: SearchBody },
            'application/octet-stream': { schema: {} },
            'application/x-npy': { schema: {} },
          },
        } as unknown as typeof SearchBody,
        querystring: SearchQuery,
        response: { 200: SearchResponse, ...errors },
      },
      ...readHook,
    },
    async (request, reply) => {
      let queries: EncodedTokens;
      let k: number;
      let prefilter: 'int8' | undefined;
      let ids: string[] | undefined;
      const parsed = performance.now();
      parsePhase.observe(reply.elapsedTime / 1000);
      const raw = request.body as unknown;
      if (Buffer.isBuffer(raw)) {
        queries = readNpy(raw, 'body', 'many', dim());
        k = request.query.top_k ?? 10;
        prefilter = request.query.prefilter;
      } else {
        const body = request.body;
        queries = readEmbeddings(body.queries, 'queries', 'many', dim());
        k = body.top_k ?? 10;
        prefilter = body.prefilter;
        ids = body.ids;
      }
      const n = itemCount(queries);
      if (n === 0) return { results: [] };
      if (ids !== undefined) {
        if (prefilter !== undefined)
          throw new InvalidArgumentError(
            'prefilter',
            'no prefilter with ids (they are scored exactly)',
            prefilter,
          );
        const indices = resident.resolveIds(ids, 'ids');
        const q = asBatch(toFloat32(queries));
        const rows = await batcher.solo(async () => {
          const scores = await resident.scoreDocumentsAll(q, indices);
          return Array.from({ length: n }, (_, r) =>
            ranked(scores.subarray(r * indices.length, (r + 1) * indices.length), k).map((h) => ({
              id: ids[h.index],
              index: indices[h.index],
              score: jsonScore(h.score),
            })),
          );
        }, timeoutMs);
        setBatch(request, n);
        return { results: rows };
      }
      decodePhase.observe((performance.now() - parsed) / 1000);
      const { hits, batch, pass } = await batcher.search(queries, k, prefilter ?? '', timeoutMs);
      setBatch(request, batch);
      (request as unknown as { pass?: PassToken }).pass = pass;
      const t0 = performance.now();
      // the answer's JSON built here, in one string (no per-hit objects for the serializer to walk);
      // a string with a JSON content type is sent as it is
      const json = searchJson(hits);
      encodePhase.observe((performance.now() - t0) / 1000);
      reply.type('application/json; charset=utf-8');
      return json as unknown as Static<typeof SearchResponse>;
    },
  );

  app.post(
    '/v1/rerank',
    {
      schema: {
        description:
          'Scores one query against candidate documents, taken from the corpus by id (candidates) or sent inline (documents); results best first, index = position in the request.',
        body: RerankBody,
        response: { 200: RerankResponse, ...errors },
      },
      ...readHook,
    },
    async (request) => {
      const body = request.body;
      if ((body.candidates === undefined) === (body.documents === undefined))
        throw new InvalidArgumentError(
          'candidates',
          'either candidates (ids of the corpus) or documents (inline embeddings)',
          body.candidates === undefined ? 'neither' : 'both',
        );
      const fromCorpus = body.candidates !== undefined;
      const q = decodeEmbeddings(body.query, 'query', 'one', fromCorpus ? dim() : undefined);
      const query = tokenMatrix(q.data, q.offsets[1], q.dim, { checkFinite: false });
      let scores: Float32Array;
      if (fromCorpus) {
        const indices = resident.resolveIds(body.candidates!, 'candidates');
        scores = await batcher.solo(() => resident.scoreDocuments(query, indices), timeoutMs);
      } else {
        const docs =
          body.documents!.length === 0
            ? undefined
            : asBatch(decodeDocuments(body.documents!, 'documents', q.dim));
        scores = docs
          ? await batcher.solo(() => maxsim(query, docs, { backend, threads: options.threads }), timeoutMs)
          : new Float32Array(0);
      }
      setBatch(request, 1);
      const ids = body.candidates;
      return {
        results: ranked(scores, body.top_n ?? scores.length).map((h) => ({
          index: h.index,
          ...(ids ? { id: ids[h.index] } : {}),
          relevance_score: jsonScore(h.score),
        })),
      };
    },
  );

  app.post(
    '/v1/score',
    {
      schema: {
        description: 'Raw MaxSim scores of inline queries x inline documents: scores[query][document].',
        body: ScoreBody,
        response: { 200: ScoreResponse, ...errors },
      },
      ...readHook,
    },
    async (request) => {
      const body = request.body;
      const q = decodeEmbeddings(body.queries, 'queries', 'many');
      const list = body.documents;
      // a list of document objects, or [n][tokens][dim] numbers, or a base64 tensor [n, L, d]
      const packedDocs =
        Array.isArray(list) && list.length > 0 && !Array.isArray(list[0])
          ? decodeDocuments(list as InlineDocument[], 'documents', q.dim)
          : decodeEmbeddings(list, 'documents', 'many', q.dim);
      const nq = itemCount(q);
      const nd = itemCount(packedDocs);
      if (nq === 0 || nd === 0) return { scores: Array.from({ length: nq }, () => []) };
      const m = await batcher.solo(
        () => maxsimAll(asBatch(q), asBatch(packedDocs), { backend, threads: options.threads }),
        timeoutMs,
      );
      setBatch(request, nq);
      return {
        scores: Array.from({ length: nq }, (_, r) =>
          Array.from(m.data.subarray(r * nd, (r + 1) * nd), jsonScore),
        ),
      };
    },
  );

  app.post(
    '/v1/documents',
    {
      schema: {
        description:
          'Appends documents to the corpus as one new segment (crash-safe); later searches see all of them, none before. Needs the API key when one is configured.',
        body: DocumentsBody,
        response: { 201: DocumentsResponse, ...errors, 401: ErrorResponse, 409: ErrorResponse },
        security: [{ bearer: [] }],
      },
      preHandler: async (request) => authorize(request),
    },
    async (request, reply) => {
      const docs = request.body.documents;
      const packed = decodeDocuments(docs, 'documents', dim());
      const withIds = docs.filter((d) => d.id !== undefined).length;
      if (withIds !== 0 && withIds !== docs.length)
        throw new InvalidArgumentError(
          'documents[].id',
          'an id on every document or on none',
          `${withIds} of ${docs.length}`,
        );
      const ids = withIds > 0 ? docs.map((d) => d.id!) : undefined;
      const r = await resident.append(packed, ids);
      reply.code(201);
      return {
        added: r.added,
        first_index: r.first,
        documents: r.info.documents,
        generation: r.info.generation,
      };
    },
  );

  app.delete(
    '/v1/documents',
    {
      schema: {
        description:
          'Deletes documents by id (tombstones, crash-safe, published atomically): later searches and lookups never see them, earlier ones all of them. Unknown ids: 404 and nothing is deleted. Needs the API key when one is configured.',
        body: DeleteDocumentsBody,
        response: { 200: DeleteDocumentsResponse, ...errors, 401: ErrorResponse, 404: ErrorResponse },
        security: [{ bearer: [] }],
      },
      preHandler: async (request) => authorize(request),
    },
    async (request) => {
      const r = await resident.delete(request.body.ids);
      return { deleted: r.deleted, live: r.info.live, generation: r.info.generation };
    },
  );

  app.get('/healthz', { schema: { description: 'the process is alive' } }, async () => ({ status: 'ok' }));
  app.get(
    '/readyz',
    { schema: { description: 'the corpus is loaded (and the GPU answers)' } },
    async (_request, reply) => {
      if (closing) return reply.code(503).send({ status: 'shutting down' });
      if (backend === 'cuda' && (await resident.memory().catch(() => undefined)) === undefined)
        return reply.code(503).send({ status: 'the GPU does not answer' });
      return { status: 'ready', documents: resident.info.documents };
    },
  );
  app.get(
    '/metrics',
    { schema: { description: 'Prometheus metrics', hide: false } },
    async (_request, reply) => {
      reply.header('content-type', registry.contentType);
      return registry.metrics();
    },
  );
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  app.get('/v1/info', { schema: { response: { 200: InfoResponse } }, ...readHook }, async () => {
    const i = resident.info;
    return {
      version,
      backend,
      mode: resident.mode,
      kernels: { cpu: cpuInfo().isa, ...(resident.deviceName ? { gpu: resident.deviceName } : {}) },
      corpus: {
        path: i.path,
        dtype: i.dtype,
        dim: i.dim,
        documents: i.documents,
        live: i.live,
        deleted: i.deleted,
        tokens: i.tokens,
        segments: i.segments,
        generation: i.generation,
        ids: i.hasIds,
      },
      batching: {
        max_batch: maxBatch,
        max_wait_ms: maxWaitMs,
        wait_ms: batcher.waitMs,
        max_queue: maxQueue,
        passes_in_flight: batcher.passesInFlight,
      },
    };
  });

  await app.ready();
  let closed: Promise<void> | undefined;
  return {
    app,
    resident,
    async listen() {
      await app.listen({ host: options.host ?? '127.0.0.1', port: options.port ?? 8080 });
      const a = app.server.address();
      if (a === null || typeof a === 'string')
        throw new MaxsimError(`unexpected listen address ${String(a)}`);
      const host = a.family === 'IPv6' ? `[${a.address}]` : a.address;
      return { host: a.address, port: a.port, url: `http://${host}:${a.port}` };
    },
    close() {
      closed ??= (async () => {
        closing = true;
        await app.close(); // stops accepting; resolves once the requests in flight are answered
        await batcher.drain();
        await resident.close();
      })();
      return closed;
    },
  };
}
