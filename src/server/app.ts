// `maxsim serve`: an HTTP search / rerank / score service over a resident corpus (Fastify 5, TypeBox
// schemas, OpenAPI from the same schemas, Prometheus metrics). This file assembles it: the options
// checked, the corpus opened, the batcher (batcher.ts), the plugins (auth.ts: the key first;
// http-errors.ts: one error shape; metrics.ts) and the routes (routes/). Searches from concurrent
// requests are gathered into one pass by the batcher; every scoring call runs off the JS thread.

import swagger from '@fastify/swagger';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, { type FastifyInstance, type FastifyServerOptions, LogController } from 'fastify';
import { checkWorkLimit, DEFAULT_MAX_WORK } from '../admission.js';
import { InvalidArgumentError, MaxsimError } from '../errors.js';
import { version } from '../version.js';
import { encodedBatch } from './answers.js';
import { exposureWarning, registerAuth, requestIdOf } from './auth.js';
import { Batcher, type PassInfo } from './batcher.js';
import type { Limits, RouteContext } from './context.js';
import { clientErrorHandler, MediaTypeError, registerErrorHandlers } from './http-errors.js';
import { type PassStats, routeOf, scanReason } from './index-path.js';
import { mayPoison, parseLifted, poisonedKey } from './json-body.js';
import { createMetrics } from './metrics.js';
import { ResidentCorpus, type ResidentOptions } from './resident.js';
import { documentRoutes } from './routes/documents.js';
import { encodeRoutes } from './routes/encode.js';
import { scoreRoute } from './routes/inline.js';
import { rerankRoute } from './routes/rerank.js';
import { searchRoute } from './routes/search.js';
import { statusRoutes } from './routes/status.js';
import { type ModelSummary, TextModel, type TextOptions } from './text.js';

/** The corpus directory (maxsim corpus build), its backend, pin, threads, device and GPU budget. */
export interface ServerOptions extends ResidentOptions, TextOptions {
  /** Default 127.0.0.1 (loopback only). */
  host?: string;
  /** Default 8080; 0 picks a free port. */
  port?: number;
  /**
   * Queries per scoring pass (default 128: on the H200 a pass of 128 queries of 32 tokens over 100,000
   * documents of 128 takes 25 ms of kernel, 256 take 51 ms; shorter passes pipeline and answer
   * sooner). 1 turns cross-request batching off. A request of more queries goes as several passes.
   */
  maxBatch?: number;
  /** Longest wait for company before a pass starts, ms, or 'auto' (default): a tenth of the pass time, 1-50 ms. */
  maxWaitMs?: number | 'auto';
  /** Passes handed to the backend at once: default 2 on a GPU-resident corpus (pipelined), else 1. */
  passesInFlight?: number;
  /**
   * Queries queued at most before requests get 429 (default 16 x maxBatch, at least 1024); a single
   * request of more queries is refused with 413.
   */
  maxQueue?: number;
  /**
   * Work one rerank, score or id-restricted search may ask for: query tokens x document tokens x dim
   * (plus one per score), 413 beyond. Default DEFAULT_MAX_WORK (2.5e11, about 3 s on two CPU cores);
   * Infinity turns it off.
   */
  maxWork?: number;
  /** Largest request body, bytes (default 64 MiB): 413 beyond. */
  bodyLimit?: number;
  /** Per-request deadline, ms (default 30000): 504 beyond, and the pass's work stops. */
  timeoutMs?: number;
  /** On close: how long requests in flight get to finish before their connections are closed, ms (default 10000). */
  closeGraceMs?: number;
  /** Bearer token required for writes (and for reads with authReads). */
  apiKey?: string;
  /** The key for searches, reranks, scores, /metrics, /openapi.json and /v1/info too. */
  authReads?: boolean;
  /**
   * Fastify's logger option (pino options, e.g. { level: 'warn', stream }): default on at level info.
   * (Typed loosely here: Fastify's own types need TypeScript >= 5.4, ours compile with 5.0.)
   */
  logger?: boolean | { level?: string; stream?: { write(line: string): unknown }; [option: string]: unknown };
}

/** The HTTP side of a server: its Node server (Fastify runs it; its types are not part of ours). */
export interface ServerApp {
  readonly server: import('node:http').Server;
}

export interface MaxsimServer {
  readonly app: ServerApp;
  /** @internal The corpus the server holds (the CLI's start-up line, tests). */
  readonly resident: ResidentCorpus;
  /** The model text fields are encoded with (/v1/info's model), or null: embeddings only. */
  readonly model: ModelSummary | null;
  /** What start-up chose and noticed (the model, or why there is none), a line each. */
  readonly notes: readonly string[];
  /** Starts listening; resolves with the address. */
  listen(): Promise<{ host: string; port: number; url: string }>;
  /**
   * Stops accepting, finishes the requests in flight (closeGraceMs at most: then their connections,
   * idle and half-sent ones too, are closed), releases the corpus (and GPU memory).
   */
  close(): Promise<void>;
}

function checkOptions(options: ServerOptions) {
  const maxBatch = options.maxBatch ?? 128;
  const limits: Limits = {
    maxBatch,
    maxWaitMs: options.maxWaitMs ?? 'auto',
    maxQueue: options.maxQueue ?? Math.max(1024, 16 * maxBatch),
    maxWork: options.maxWork === undefined ? DEFAULT_MAX_WORK : checkWorkLimit(options.maxWork, 'maxWork'),
    timeoutMs: options.timeoutMs ?? 30_000,
  };
  const bodyLimit = options.bodyLimit ?? 64 * 1024 * 1024;
  const closeGraceMs = options.closeGraceMs ?? 10_000;
  const check = (name: string, v: number, min: number) => {
    if (!(Number.isFinite(v) && v >= min))
      throw new InvalidArgumentError(name, `a number >= ${min}`, String(v));
  };
  check('maxBatch', maxBatch, 1);
  if (limits.maxWaitMs !== 'auto') check('maxWaitMs', limits.maxWaitMs, 0);
  if (options.passesInFlight !== undefined) check('passesInFlight', options.passesInFlight, 1);
  check('maxQueue', limits.maxQueue, 1);
  check('timeoutMs', limits.timeoutMs, 1);
  check('bodyLimit', bodyLimit, 1024);
  check('closeGraceMs', closeGraceMs, 0);
  if (options.apiKey !== undefined && options.apiKey.length < 8)
    throw new InvalidArgumentError(
      'apiKey',
      'a key of at least 8 characters',
      `${options.apiKey.length} characters`,
    );
  // read before anything opens: a refusal leaves nothing to close
  return { limits, bodyLimit, closeGraceMs, handOverLead: handOverLeadFromEnv() };
}

/** MAXSIM_HAND_OVER_LEAD (a share of the pass in (0, 1]): the pipelined hand-over, for A/B runs. */
function handOverLeadFromEnv(): number | undefined {
  const v = process.env.MAXSIM_HAND_OVER_LEAD;
  if (v === undefined || v === '') return undefined;
  const lead = Number(v);
  if (!(lead > 0 && lead <= 1))
    throw new InvalidArgumentError('MAXSIM_HAND_OVER_LEAD', 'a share of the pass in (0, 1]', v);
  return lead;
}

function createBatcher(
  resident: ResidentCorpus,
  limits: Limits,
  options: ServerOptions & { handOverLead?: number },
  onPass: (p: PassInfo) => void,
  observeStats: (s: PassStats) => void,
  onAbandoned: (stage: 'queued' | 'running') => void,
) {
  return new Batcher(
    async (queries, k, key, timing, signal) => {
      const t: { merge: number; stats?: PassStats } = { merge: 0 };
      const hits = await resident.search(encodedBatch(queries), k, routeOf(key), t, signal);
      timing.merge = t.merge;
      timing.stats = t.stats;
      if (t.stats) observeStats(t.stats);
      return hits;
    },
    {
      maxBatch: limits.maxBatch,
      maxWaitMs: limits.maxWaitMs,
      maxQueue: limits.maxQueue,
      // a resident corpus's GPU runs passes one after the other on its worker thread: the next is
      // handed over early; a streamed scan holds staging buffers per search, and the CPU pool is the
      // JS thread's neighbour on few cores: one pass at a time there
      passesInFlight: options.passesInFlight ?? (resident.mode === 'resident' ? 2 : 1),
      handOverLead: options.handOverLead,
      onAbandoned,
      // a GPU-resident float16 / bfloat16 corpus takes float16 / bfloat16 queries as they are (the
      // same bits as float32 queries rounded there), 8-bit passes too: their scan quantizes the bits
      // on the device (exact in float32 first: the same codes as from the decoded values) and the
      // rescore takes them as they are; the CPU and a streamed scan get float32
      // (not for passes through the index: its stages take float32 queries, as the library's search)
      keepBits: (key) => {
        const dtype = resident.heldInfo.dtype;
        if (resident.mode !== 'resident' || (dtype !== 'float16' && dtype !== 'bfloat16')) return undefined;
        return resident.searchPath.path === 'index' && scanReason(routeOf(key)) === undefined
          ? undefined
          : dtype;
      },
    },
    onPass,
  );
}

/**
 * A JSON body the parser must not read: a charset other than UTF-8, or a .npy file sent as JSON (415,
 * naming the header and what would be taken).
 */
function jsonRefusal(contentType: string | undefined, body: Buffer): MediaTypeError | undefined {
  const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(contentType ?? '')?.[1];
  if (charset !== undefined && !/^utf-?8$/i.test(charset))
    return new MediaTypeError(
      'content-type',
      'application/json with charset=utf-8 (or none): JSON bodies are read as UTF-8',
      `charset=${charset.slice(0, 40)}`,
    );
  if (body.length >= 6 && body[0] === 0x93 && body.toString('latin1', 1, 6) === 'NUMPY')
    return new MediaTypeError(
      'content-type',
      'application/x-npy or application/octet-stream for a .npy body',
      'application/json with a .npy body',
    );
  return undefined;
}

/** The guarded parser refused the text: a 400 naming a prototype-poisoning key, when that was why. */
function poisonError(text: string): InvalidArgumentError | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined; // invalid JSON: Fastify's error says so
  }
  const key = poisonedKey(value);
  if (key === undefined) return undefined;
  return new InvalidArgumentError(
    key,
    'no __proto__ or constructor.prototype key (refused: they could poison prototypes)',
    key.endsWith('__proto__') ? 'a "__proto__" key' : 'a "constructor" key holding "prototype"',
  );
}

/** Fastify with our parsers: no type coercion, unknown fields refused, JSON and .npy bodies only. */
function createApp(options: ServerOptions, bodyLimit: number, timeoutMs: number) {
  const app = Fastify({
    logger: (options.logger ?? true) as FastifyServerOptions['logger'],
    bodyLimit,
    // one line per request, written by the metrics' onResponse hook
    logController: new LogController({ disableRequestLogging: true }),
    // the client's x-request-id only when short and plain (it goes into the logs)
    genReqId: (req) => requestIdOf(req),
    requestIdHeader: false,
    requestTimeout: timeoutMs + 10_000,
    return503OnClosing: true,
    clientErrorHandler,
    // a wrong type is a 400 naming the field ({"ids": 0} must not delete document 0), and an unknown
    // field a 400 too (not dropped: a misspelt filter would silently search everything)
    ajv: { customOptions: { coerceTypes: false, removeAdditional: false, allErrors: false } },
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
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    const refused = jsonRefusal(request.headers['content-type'], body as Buffer);
    if (refused) return done(refused, undefined);
    // long base64 values lifted out of the bytes, the rest parsed (json-body.ts)
    const lifted = parseLifted(body as Buffer);
    if (lifted) return done(null, lifted.value);
    const text = (body as Buffer).toString('utf8');
    if (text.length > 0 && !mayPoison(text)) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        return secureJson(request, text, done);
      }
      return done(null, parsed);
    }
    return secureJson(request, text, (error, value) => done(error && (poisonError(text) ?? error), value));
  });
  // a compressed body would reach the JSON parser as bytes it calls invalid: said at the door instead
  app.addHook('preParsing', (request, _reply, payload, done) => {
    const encoding = request.headers['content-encoding'];
    if (encoding === undefined || /^\s*identity\s*$/i.test(encoding)) return done(null, payload);
    done(
      new MediaTypeError(
        'content-encoding',
        'no content-encoding (identity): the server takes bodies uncompressed',
        JSON.stringify(encoding.slice(0, 100)),
      ),
      payload,
    );
  });
  for (const type of ['application/octet-stream', 'application/x-npy'])
    app.addContentTypeParser(type, { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
  return app;
}

export async function createServer(options: ServerOptions): Promise<MaxsimServer> {
  const { limits, bodyLimit, closeGraceMs, handOverLead } = checkOptions(options);
  const resident = await ResidentCorpus.open(options);
  const notes: string[] = [];
  let text: TextModel;
  try {
    text = await TextModel.open(options, resident.info.path, resident.info.dim, (line) => notes.push(line));
  } catch (error) {
    await resident.close();
    throw error;
  }
  const metrics = createMetrics(resident);
  text.setMetrics(metrics.text);
  const batcher = createBatcher(
    resident,
    limits,
    { ...options, handOverLead },
    (p) => metrics.onPass(p),
    (s) => metrics.onSearch(s),
    (stage) => metrics.onAbandoned(stage),
  );
  metrics.watchQueue(() => batcher.depth);
  let closing = false;
  const ctx: RouteContext = {
    resident,
    backend: resident.backend,
    threads: options.threads,
    batcher,
    limits,
    metrics,
    text,
    dim: () => resident.dim,
    closing: () => closing,
  };

  const app = createApp(options, bodyLimit, limits.timeoutMs);
  registerAuth(app as unknown as FastifyInstance, options.apiKey, options.authReads === true);
  registerErrorHandlers(app as unknown as FastifyInstance);
  metrics.register(app as unknown as FastifyInstance, () => closing);
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
  const routes = app as unknown as FastifyInstance;
  searchRoute(routes, ctx);
  rerankRoute(routes, ctx);
  scoreRoute(routes, ctx);
  documentRoutes(routes, ctx);
  encodeRoutes(routes, ctx);
  statusRoutes(routes, ctx);
  await app.ready();
  for (const line of notes) app.log.info(line);

  let closed: Promise<void> | undefined;
  return {
    app: routes,
    resident,
    model: text.summary(),
    notes,
    async listen() {
      const host = options.host ?? '127.0.0.1';
      await app.listen({ host, port: options.port ?? 8080 });
      const warning = exposureWarning(host, options.apiKey);
      if (warning) app.log.warn(warning);
      const a = app.server.address();
      if (a === null || typeof a === 'string')
        throw new MaxsimError(`unexpected listen address ${String(a)}`);
      const shown = a.family === 'IPv6' ? `[${a.address}]` : a.address;
      return { host: a.address, port: a.port, url: `http://${shown}:${a.port}` };
    },
    close() {
      closed ??= (async () => {
        closing = true;
        // idle keep-alive connections now; after the grace period every connection left (a request
        // still running, or one whose client never finished sending it) is closed
        const grace = setTimeout(() => app.server.closeAllConnections?.(), closeGraceMs);
        grace.unref();
        app.server.closeIdleConnections?.();
        try {
          await app.close(); // stops accepting; resolves once the requests in flight are answered
        } finally {
          clearTimeout(grace);
        }
        await batcher.drain();
        await text.close();
        await resident.close();
      })();
      return closed;
    },
  };
}
