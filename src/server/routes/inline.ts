// POST /v1/score (inline queries x inline documents; POST /v1/rerank is in rerank.ts): a pass of its
// own in the batcher's lane, its work (query tokens x document tokens x dim) admitted against
// --max-work before anything is scored, and stopped at the deadline (the CPU kernel stops at its next
// chunk).

import type { FastifyInstance } from 'fastify';
import { checkWork, workOf } from '../../admission.js';
import { maxsim } from '../../ops/maxsim.js';
import { asBatch, decodeDocuments, isEmptyItem, jsonScore, tokensOf } from '../answers.js';
import { decodeEmbeddings, itemCount } from '../codecs.js';
import { type RouteContext, requestLimits, setBatch } from '../context.js';
import { type InlineDocument, READ_ERRORS, ScoreBody, ScoreResponse } from '../schemas.js';
import { MAX_INLINE_DOCUMENTS } from './rerank.js';

const LIMIT_NAME = "the server's --max-work";

export function scoreRoute(app: FastifyInstance, ctx: RouteContext) {
  app.post(
    '/v1/score',
    {
      config: { access: 'read' },
      schema: {
        description: 'Raw MaxSim scores of inline queries x inline documents: scores[query][document].',
        body: ScoreBody,
        response: { 200: ScoreResponse, ...READ_ERRORS },
      },
    },
    async (request, reply) => {
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
        // counted from the request's arrival: its upload, parse and decode took their share
        ctx.limits.timeoutMs - reply.elapsedTime,
        requestLimits(ctx, reply),
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
