// POST /v1/rerank (one query against corpus documents by id, or inline documents) and POST /v1/score
// (inline queries x inline documents). Both run as passes of their own in the batcher's lane, their
// work (query tokens x document tokens x dim) admitted against --max-work before anything is scored,
// and stopped at the deadline (the CPU kernel stops at its next chunk).

import type { FastifyInstance } from 'fastify';
import { checkWork, workOf } from '../../admission.js';
import { InvalidArgumentError } from '../../errors.js';
import { maxsim } from '../../ops/maxsim.js';
import { tokenMatrix } from '../../tensor.js';
import { asBatch, decodeDocuments, isEmptyItem, jsonScore, ranked, tokensOf } from '../answers.js';
import { decodeEmbeddings, itemCount } from '../codecs.js';
import { checkIds, type RouteContext, setBatch } from '../context.js';
import {
  ErrorResponse,
  type InlineDocument,
  RerankBody,
  RerankResponse,
  ScoreBody,
  ScoreResponse,
} from '../schemas.js';

const errors = {
  400: ErrorResponse,
  404: ErrorResponse,
  413: ErrorResponse,
  429: ErrorResponse,
  504: ErrorResponse,
};
const LIMIT_NAME = "the server's --max-work";
/** Inline documents of one request at most (as the schemas' maxItems). */
export const MAX_INLINE_DOCUMENTS = 100_000;

export function rerankRoute(app: FastifyInstance, ctx: RouteContext) {
  app.post(
    '/v1/rerank',
    {
      config: { access: 'read' },
      schema: {
        description:
          'Scores one query against candidate documents, taken from the corpus by id (candidates) or sent inline (documents); results best first, index = position in the request.',
        body: RerankBody,
        response: { 200: RerankResponse, ...errors },
      },
    },
    async (request) => {
      const body = request.body as RerankBody;
      if ((body.candidates === undefined) === (body.documents === undefined))
        throw new InvalidArgumentError(
          'candidates',
          'either candidates (ids of the corpus) or documents (inline embeddings)',
          body.candidates === undefined ? 'neither' : 'both',
        );
      const fromCorpus = body.candidates !== undefined;
      const q = decodeEmbeddings(body.query, 'query', 'one', fromCorpus ? ctx.dim() : undefined);
      const query = tokenMatrix(q.data, q.offsets[1], q.dim, { checkFinite: false });
      let scores: Float32Array;
      let empty: (i: number) => boolean | undefined = () => undefined;
      const { maxWork, timeoutMs } = ctx.limits;
      if (fromCorpus) {
        const ids = body.candidates!;
        checkIds(ids, 'candidates');
        const info = ctx.resident.info;
        const docTokens = (ids.length * info.tokens) / Math.max(1, info.documents);
        checkWork(workOf(query.length, 1, docTokens, ids.length, q.dim), maxWork, 'candidates', LIMIT_NAME);
        const indices = ctx.resident.resolveIds(ids, 'candidates');
        scores = await ctx.batcher.solo(
          (signal) => ctx.resident.scoreDocuments(query, indices, signal),
          timeoutMs,
        );
      } else if (body.documents!.length === 0) scores = new Float32Array(0);
      else {
        const packed = decodeDocuments(body.documents!, 'documents', q.dim);
        checkWork(
          workOf(query.length, 1, tokensOf(packed), itemCount(packed), q.dim),
          maxWork,
          'documents',
          LIMIT_NAME,
        );
        const docs = asBatch(packed);
        empty = (i) => isEmptyItem(packed, i);
        scores = await ctx.batcher.solo(
          (signal) => maxsim(query, docs, { backend: ctx.backend, threads: ctx.threads, signal }),
          timeoutMs,
        );
      }
      setBatch(request, 1);
      const ids = body.candidates;
      return {
        results: ranked(scores, body.top_n ?? scores.length).map((h) => ({
          index: h.index,
          ...(ids ? { id: ids[h.index] } : {}),
          relevance_score: jsonScore(h.score, empty(h.index)),
        })),
      };
    },
  );
}

export function scoreRoute(app: FastifyInstance, ctx: RouteContext) {
  app.post(
    '/v1/score',
    {
      config: { access: 'read' },
      schema: {
        description: 'Raw MaxSim scores of inline queries x inline documents: scores[query][document].',
        body: ScoreBody,
        response: { 200: ScoreResponse, ...errors },
      },
    },
    async (request) => {
      const body = request.body as ScoreBody;
      const q = decodeEmbeddings(body.queries, 'queries', 'many', undefined, {
        items: ctx.limits.maxQueue,
        why: 'queries of one request: the queue bound, --max-queue',
      });
      const list = body.documents;
      const docLimit = { items: MAX_INLINE_DOCUMENTS, why: 'inline documents of one request' };
      // a list of document objects, or [n][tokens][dim] numbers, or a base64 tensor [n, L, d]
      const docs =
        Array.isArray(list) && list.length > 0 && !Array.isArray(list[0])
          ? decodeDocuments(list as InlineDocument[], 'documents', q.dim, docLimit)
          : decodeEmbeddings(list, 'documents', 'many', q.dim, docLimit);
      const nq = itemCount(q);
      const nd = itemCount(docs);
      checkWork(
        workOf(tokensOf(q), nq, tokensOf(docs), nd, q.dim),
        ctx.limits.maxWork,
        'documents',
        LIMIT_NAME,
      );
      if (nq === 0 || nd === 0) return { scores: Array.from({ length: nq }, () => []) };
      const m = await ctx.batcher.solo(
        (signal) => maxsim(asBatch(q), asBatch(docs), { backend: ctx.backend, threads: ctx.threads, signal }),
        ctx.limits.timeoutMs,
      );
      setBatch(request, nq);
      return {
        scores: Array.from({ length: nq }, (_, r) =>
          Array.from(m.data.subarray(r * nd, (r + 1) * nd), (s, j) => jsonScore(s, isEmptyItem(docs, j))),
        ),
      };
    },
  );
}
