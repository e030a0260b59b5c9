// POST /v1/score (queries x documents; POST /v1/rerank is in rerank.ts): the documents inline, or
// documents of the corpus by id ({id} objects). A pass of its own in the batcher's lane, its work
// (query tokens x document tokens x dim) admitted against --max-work before anything is scored, and
// stopped at the deadline (the CPU kernel stops at its next chunk).

import type { FastifyInstance, FastifyReply } from 'fastify';
import { checkWork, workOf } from '../../admission.js';
import { InvalidArgumentError } from '../../errors.js';
import { maxsim } from '../../ops/maxsim.js';
import { asBatch, decodeDocuments, isEmptyItem, jsonScore, tokensOf } from '../answers.js';
import { decodeEmbeddings, itemCount, type PackedTokens } from '../codecs.js';
import { checkIds, type RouteContext, requestLimits, setBatch } from '../context.js';
import { type InlineDocument, READ_ERRORS, ScoreBody, ScoreResponse } from '../schemas.js';
import { MAX_INLINE_DOCUMENTS } from './rerank.js';

const LIMIT_NAME = "the server's --max-work";

/** Whether a document of the list is one of the corpus ({id}). */
function isById(d: unknown): boolean {
  return typeof d === 'object' && d !== null && !Array.isArray(d) && (d as InlineDocument).id !== undefined;
}

/**
 * The ids of a score of documents of the corpus ({id} objects only), or undefined: inline documents.
 * One kind per request (as documents[0]); an {id} with anything else is refused, naming the field.
 */
function idsOf(list: ScoreBody['documents']): string[] | undefined {
  if (!Array.isArray(list) || list.length === 0) return undefined;
  const byId = isById(list[0]);
  list.forEach((d, i) => {
    if (isById(d) !== byId)
      throw new InvalidArgumentError(
        `documents[${i}]`,
        byId ? 'a document of the corpus ({id}), as documents[0]' : 'an inline document, as documents[0]',
        byId ? 'an inline document' : 'a document by id',
      );
    const other = byId ? Object.keys(d as object).find((key) => key !== 'id') : undefined;
    if (other !== undefined)
      throw new InvalidArgumentError(
        `documents[${i}].${other}`,
        'nothing beside id (a document of the corpus is scored as stored)',
        'a value beside id',
      );
  });
  return byId ? list.map((d) => (d as InlineDocument).id!) : undefined;
}

/** The queries against documents of the corpus by id: scores[query][document]. */
async function scoreIds(ctx: RouteContext, reply: FastifyReply, q: PackedTokens, ids: string[]) {
  checkIds(ids, 'documents');
  const nq = itemCount(q);
  const info = ctx.resident.info;
  // the documents' tokens from the corpus's mean (their exact count is known only to the snapshot)
  const docTokens = (ids.length * info.tokens) / Math.max(1, info.documents);
  checkWork(
    workOf(tokensOf(q), nq, docTokens, ids.length, q.dim),
    ctx.limits.maxWork,
    'documents',
    LIMIT_NAME,
  );
  const indices = ctx.resident.resolveIds(ids, 'documents');
  if (nq === 0) return { scores: [] };
  const m = await ctx.batcher.solo(
    (signal) => ctx.resident.scoreDocumentsAll(asBatch(q), indices, signal),
    ctx.limits.timeoutMs - reply.elapsedTime,
    requestLimits(ctx, reply),
  );
  const nd = ids.length;
  return {
    scores: Array.from({ length: nq }, (_, r) =>
      Array.from(m.subarray(r * nd, (r + 1) * nd), (s, j) =>
        jsonScore(s, ctx.resident.isEmptyDocument(indices[j], ids[j])),
      ),
    ),
  };
}

export function scoreRoute(app: FastifyInstance, ctx: RouteContext) {
  app.post(
    '/v1/score',
    {
      config: { access: 'read' },
      schema: {
        description:
          'Raw MaxSim scores of queries x documents: scores[query][document]. The documents inline, or documents of the corpus by id ([{id}, ...]).',
        body: ScoreBody,
        response: { 200: ScoreResponse, ...READ_ERRORS },
      },
    },
    async (request, reply) => {
      const body = request.body as ScoreBody;
      const ids = idsOf(body.documents);
      const q = decodeEmbeddings(body.queries, 'queries', 'many', ids ? ctx.dim() : undefined, {
        items: ctx.limits.maxQueue,
        why: 'queries of one request: the queue bound, --max-queue',
      });
      if (ids) {
        const answer = await scoreIds(ctx, reply, q, ids);
        setBatch(request, itemCount(q));
        return answer;
      }
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
