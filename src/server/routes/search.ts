// POST /v1/search: top-k documents of the resident corpus per query, through the batcher (a request of
// more than --max-batch queries goes as several passes); with `ids`, those documents only, scored
// exactly as a pass of its own.

import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Static } from 'typebox';
import { checkWork, workOf } from '../../admission.js';
import { InvalidArgumentError } from '../../errors.js';
import { type CorpusIndexOptions, indexSettings } from '../../ops/corpus-index-search.js';
import type { CorpusHit } from '../../ops/corpus-search.js';
import { asBatch, ranked, scoreObject, searchJson, tokensOf } from '../answers.js';
import { withStats } from '../answers-index.js';
import { AbandonedError, type PassToken, type RequestLimits } from '../batcher.js';
import { type EncodedTokens, itemCount, readEmbeddings, readNpy, toFloat32 } from '../codecs.js';
import { checkIds, type RouteContext, requestLimits, setBatch } from '../context.js';
import { type PassStats, passKey } from '../index-path.js';
import { READ_ERRORS, SearchBody, SearchQuery, SearchResponse } from '../schemas.js';
import { requestDeadline } from '../text.js';
import { isTextList } from './text-fields.js';

export const MAX_TOP_K = 10_000;

/** top_k from the query string (a string there: no type coercion anywhere). */
function topKOf(text: string | undefined): number {
  if (text === undefined) return 10;
  const k = Number(text);
  if (!/^(0|[1-9]\d*)$/.test(text) || k > MAX_TOP_K)
    throw new InvalidArgumentError(
      'top_k',
      `an integer in [0, ${MAX_TOP_K}]`,
      JSON.stringify(text.slice(0, 40)),
    );
  return k;
}

interface SearchRequest {
  /** Embeddings sent, or undefined when the queries came as text. */
  queries?: EncodedTokens;
  /** Query texts (admitted), and the field they came in. */
  texts?: { field: string; texts: string[] };
  k: number;
  prefilter?: 'int8';
  ids?: string[];
  /** The path asked for: exact (the full scan) or index settings (index-path.ts). */
  exact?: boolean;
  index?: false | CorpusIndexOptions;
}

/**
 * Checks the path a request asks for against the corpus as it is now (a 400 naming the field): index
 * settings need a corpus with an index, are checked as the search will check them, and go with
 * neither exact nor ids.
 */
function checkRoute(ctx: RouteContext, r: SearchRequest) {
  const ix = ctx.resident.heldInfo.index;
  if (ix?.tokens === 'dropped' && r.ids === undefined && (r.exact === true || r.index === false))
    throw new InvalidArgumentError(
      r.exact === true ? 'exact' : 'index',
      'a search through the index: the corpus keeps only its index (`corpus index --drop-tokens`), there are no tokens to scan',
      r.exact === true ? 'true' : 'false',
    );
  if (r.index === undefined || r.index === false) return;
  if (r.exact === true)
    throw new InvalidArgumentError('index', 'no index settings with exact: true (it scans)', 'both');
  if (r.ids !== undefined)
    throw new InvalidArgumentError('index', 'no index settings with ids (they are scored exactly)', 'both');
  if (r.prefilter !== undefined)
    throw new InvalidArgumentError('index', 'no index settings with prefilter (it scans)', 'both');
  if (!ix)
    throw new InvalidArgumentError(
      'index',
      'index settings only on a corpus with an index (`maxsim corpus index`)',
      'a corpus without one',
    );
  indexSettings(r.index, r.k, ix.centroids);
}

function readRequest(ctx: RouteContext, raw: unknown, query: Static<typeof SearchQuery>): SearchRequest {
  // a request's queries count against the queue: one larger than the queue can never be admitted
  const limit = { items: ctx.limits.maxQueue, why: 'queries of one request: the queue bound, --max-queue' };
  if (Buffer.isBuffer(raw))
    return {
      queries: readNpy(raw, 'body', 'many', ctx.dim(), limit),
      k: topKOf(query.top_k),
      prefilter: query.prefilter,
      exact: query.exact === 'true',
    };
  if (raw === undefined || raw === null || typeof raw !== 'object')
    throw new InvalidArgumentError(
      'body',
      'a JSON body {queries, top_k?} (application/json) or a .npy body (application/x-npy)',
      raw === undefined ? 'an empty body' : typeof raw,
    );
  if (query.top_k !== undefined || query.prefilter !== undefined || query.exact !== undefined)
    throw new InvalidArgumentError(
      query.top_k !== undefined ? 'top_k' : query.prefilter !== undefined ? 'prefilter' : 'exact',
      'top_k, prefilter and exact in the JSON body (the query string is for .npy bodies)',
      'the query string',
    );
  const body = raw as Static<typeof SearchBody>;
  const field = textField(body);
  if (field !== undefined)
    return {
      texts: { field, texts: ctx.text.readTexts(body[field], field, limit.items) },
      k: body.top_k ?? 10,
      prefilter: body.prefilter,
      ids: body.ids,
      exact: body.exact,
      index: body.index,
    };
  if (body.queries === undefined)
    throw new InvalidArgumentError('queries', 'queries (embeddings or texts) or query (a text)', 'neither');
  return {
    queries: readEmbeddings(body.queries, 'queries', 'many', ctx.dim(), limit),
    k: body.top_k ?? 10,
    prefilter: body.prefilter,
    ids: body.ids,
    exact: body.exact,
    index: body.index,
  };
}

/** Which field holds the query texts ('query', or 'queries' as strings), or undefined: embeddings. */
function textField(body: Static<typeof SearchBody>): 'query' | 'queries' | undefined {
  if (body.query !== undefined) {
    if (body.queries !== undefined)
      throw new InvalidArgumentError('query', 'either query (one text) or queries', 'both');
    return 'query';
  }
  return isTextList(body.queries, 'queries') ? 'queries' : undefined;
}

/** Scores the queries against the documents named by `ids` (a pass of its own, bounded by maxWork). */
async function searchIds(
  ctx: RouteContext,
  r: SearchRequest & { queries: EncodedTokens },
  ids: string[],
  deadlineMs: number,
  limits: RequestLimits,
) {
  if (r.prefilter !== undefined)
    throw new InvalidArgumentError(
      'prefilter',
      'no prefilter with ids (they are scored exactly)',
      r.prefilter,
    );
  checkIds(ids, 'ids');
  const n = itemCount(r.queries);
  const info = ctx.resident.info;
  // the documents' tokens from the corpus's mean (their exact count is known only to the snapshot)
  const docTokens = (ids.length * info.tokens) / Math.max(1, info.documents);
  checkWork(
    workOf(tokensOf(r.queries), n, docTokens, ids.length, info.dim),
    ctx.limits.maxWork,
    'ids',
    "the server's --max-work",
  );
  const indices = ctx.resident.resolveIds(ids, 'ids');
  const q = asBatch(toFloat32(r.queries));
  return ctx.batcher.solo(
    async (signal) => {
      const scores = await ctx.resident.scoreDocumentsAll(q, indices, signal);
      return Array.from({ length: n }, (_, row) =>
        ranked(scores.subarray(row * indices.length, (row + 1) * indices.length), r.k).map((h) => ({
          id: ids[h.index],
          index: indices[h.index],
          ...scoreObject('score', h.score, ctx.resident.isEmptyDocument(indices[h.index], ids[h.index])),
        })),
      );
    },
    deadlineMs,
    limits,
  );
}

export function searchRoute(app: FastifyInstance, ctx: RouteContext) {
  app.post(
    '/v1/search',
    {
      config: { access: 'read' },
      schema: {
        description:
          'Top-k documents of the resident corpus for each query. JSON, or a .npy body (application/x-npy or application/octet-stream, [L, d] or [n, L, d]) with top_k in the query string. A request of more queries than a pass takes is scored as several passes.',
        body: {
          content: {
            'application/json': { schema: SearchBody },
            'application/octet-stream': { schema: {} },
            'application/x-npy': { schema: {} },
          },
        },
        querystring: SearchQuery,
        response: { 200: SearchResponse, ...READ_ERRORS },
      },
    },
    async (request, reply) => {
      const parsed = performance.now();
      ctx.metrics.request.parse.observe(reply.elapsedTime / 1000);
      const r = readRequest(ctx, request.body, request.query as Static<typeof SearchQuery>);
      checkRoute(ctx, r);
      const deadline = r.texts ? requestDeadline(ctx.limits.timeoutMs, reply.elapsedTime) : undefined;
      const limits = requestLimits(ctx, reply);
      try {
        const queries =
          r.queries ??
          (await ctx.text.encodeTexts('query', r.texts!.texts, r.texts!.field, deadline!.signal));
        // counted from the request's arrival: its upload, parse and decode took their share
        const left = deadline?.left() ?? ctx.limits.timeoutMs - reply.elapsedTime;
        const n = itemCount(queries);
        if (n === 0) return { results: [] };
        if (r.ids !== undefined) {
          const generation = ctx.resident.info.generation;
          const rows = await searchIds(ctx, { ...r, queries }, r.ids, left, limits);
          setBatch(request, n);
          const stats: PassStats = { path: 'ids', scores: 'exact', generation };
          return { results: rows, stats };
        }
        ctx.metrics.request.decode.observe((performance.now() - parsed) / 1000);
        const key = passKey({ prefilter: r.prefilter, exact: r.exact, index: r.index });
        const { hits, batch, pass } = await ctx.batcher.search(queries, r.k, key, left, limits);
        // its client left while the pass ran: no answer built for nobody
        if (limits.gone?.aborted) throw new AbandonedError();
        return answer(request, reply, ctx, hits, batch, pass);
      } finally {
        deadline?.dispose();
      }
    },
  );
}

function answer(
  request: FastifyRequest,
  reply: FastifyReply,
  ctx: RouteContext,
  hits: CorpusHit[][],
  batch: number,
  pass: PassToken,
) {
  setBatch(request, batch);
  (request as unknown as { pass?: PassToken }).pass = pass;
  const t0 = performance.now();
  // the answer's JSON built here, in one string (no per-hit objects for the serializer to walk);
  // a string with a JSON content type is sent as it is
  const json = withStats(
    searchJson(hits, (index, id) => ctx.resident.isEmptyDocument(index, id)),
    pass.stats as PassStats | undefined,
  );
  ctx.metrics.request.encode.observe((performance.now() - t0) / 1000);
  reply.type('application/json; charset=utf-8');
  return json as unknown as Static<typeof SearchResponse>;
}
