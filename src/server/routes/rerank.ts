// POST /v1/rerank: one query against candidate documents, taken from the corpus by id (candidates) or
// sent inline (documents), each of them as embeddings or as text (Cohere / Jina-shaped: results with
// index and relevance_score, top_n, return_documents). A pass of its own in the batcher's lane, its
// work (query tokens x document tokens x dim) admitted against --max-work before anything is encoded
// or scored, and stopped at the deadline (encoding at its next batch, the CPU kernel at its next chunk).

import type { FastifyInstance } from 'fastify';
import { checkWork, workOf } from '../../admission.js';
import { InvalidArgumentError } from '../../errors.js';
import { maxsim } from '../../ops/maxsim.js';
import { type TokenMatrix, tokenMatrix } from '../../tensor.js';
import { asBatch, decodeDocuments, isEmptyItem, ranked, scoreObject, tokensOf } from '../answers.js';
import type { RequestLimits } from '../batcher.js';
import { decodeEmbeddings, itemCount, type PackedTokens, toFloat32 } from '../codecs.js';
import { checkIds, type RouteContext, requestLimits, setBatch } from '../context.js';
import { type InlineDocument, READ_ERRORS, RerankBody, RerankResponse } from '../schemas.js';
import { requestDeadline } from '../text.js';
import { isTextList } from './text-fields.js';

const LIMIT_NAME = "the server's --max-work";
/** Inline documents of one request at most (as the schemas' maxItems). */
export const MAX_INLINE_DOCUMENTS = 100_000;

interface Inputs {
  query: TokenMatrix;
  /** Inline documents (undefined: candidates of the corpus). */
  docs?: PackedTokens;
  /** The texts of the documents, when they came as text. */
  texts?: string[];
  /** The ids inline embedding documents carry, echoed in the results. */
  ids?: (string | undefined)[];
}

/** The query and inline documents as embeddings: decoded, or admitted, tokenized, checked and encoded. */
async function readInputs(ctx: RouteContext, body: RerankBody, signal: AbortSignal): Promise<Inputs> {
  const fromCorpus = body.candidates !== undefined;
  const docTexts = !fromCorpus && isTextList(body.documents, 'documents');
  const queryText = typeof body.query === 'string';
  if (body.return_documents === true && !docTexts && !(body.documents?.length === 0))
    throw new InvalidArgumentError(
      'return_documents',
      'documents sent as texts (the service keeps no text of its own)',
      fromCorpus ? 'candidates (ids)' : 'documents as embeddings',
    );
  const ids = fromCorpus || docTexts ? undefined : inlineIds(body.documents);
  // everything admitted before anything is tokenized, tokenized before anything is encoded
  const qText = queryText ? ctx.text.readTexts(body.query, 'query', 1) : undefined;
  const dTexts = docTexts ? ctx.text.readTexts(body.documents, 'documents', MAX_INLINE_DOCUMENTS) : undefined;
  const dim = fromCorpus || docTexts ? ctx.dim() : undefined;
  const qEmb = qText ? undefined : decodeEmbeddings(body.query, 'query', 'one', dim);
  const qTok = qText ? await ctx.text.tokenize('query', qText, 'query', signal) : undefined;
  const dTok = dTexts ? await ctx.text.tokenize('document', dTexts, 'documents', signal) : undefined;
  const inlineDocs =
    fromCorpus || dTexts || body.documents!.length === 0
      ? undefined
      : decodeDocuments(body.documents as InlineDocument[], 'documents', qEmb?.dim ?? ctx.dim());
  if (dTok) {
    const queryTokens = qTok ? qTok.tokens[0] : tokensOf(qEmb!);
    const docTokens = dTok.tokens.reduce((a, b) => a + b, 0);
    checkWork(
      workOf(queryTokens, 1, docTokens, dTok.tokens.length, ctx.dim()),
      ctx.limits.maxWork,
      'documents',
      LIMIT_NAME,
    );
  }
  const [q, d] = await Promise.all([
    qTok ? ctx.text.embed('query', qTok.items, 'query', signal).then(toFloat32) : qEmb!,
    dTok ? ctx.text.embed('document', dTok.items, 'documents', signal).then(toFloat32) : inlineDocs,
  ]);
  return {
    query: tokenMatrix(q.data, q.offsets[1], q.dim, { checkFinite: false }),
    docs: d ?? (fromCorpus ? undefined : emptyDocs(q.dim)),
    texts: dTexts,
    ids,
  };
}

function emptyDocs(dim: number): PackedTokens {
  return { data: new Float32Array(0), offsets: [0], dim };
}

async function scoreInputs(
  ctx: RouteContext,
  body: RerankBody,
  inputs: Inputs,
  deadlineMs: number,
  limits: RequestLimits,
) {
  const { query, docs } = inputs;
  const { maxWork } = ctx.limits;
  if (!docs) {
    const ids = body.candidates!;
    checkIds(ids, 'candidates');
    const info = ctx.resident.info;
    const docTokens = (ids.length * info.tokens) / Math.max(1, info.documents);
    checkWork(workOf(query.length, 1, docTokens, ids.length, query.dim), maxWork, 'candidates', LIMIT_NAME);
    const indices = ctx.resident.resolveIds(ids, 'candidates');
    const scores = await ctx.batcher.solo(
      (signal) => ctx.resident.scoreDocuments(query, indices, signal),
      deadlineMs,
      limits,
    );
    return {
      scores,
      empty: (i: number): boolean | undefined => ctx.resident.isEmptyDocument(indices[i], ids[i]),
    };
  }
  if (itemCount(docs) === 0) return { scores: new Float32Array(0), empty: () => undefined };
  checkWork(
    workOf(query.length, 1, tokensOf(docs), itemCount(docs), docs.dim),
    maxWork,
    'documents',
    LIMIT_NAME,
  );
  const batch = asBatch(docs);
  const scores = await ctx.batcher.solo(
    (signal) => maxsim(query, batch, { backend: ctx.backend, threads: ctx.threads, signal }),
    deadlineMs,
    limits,
  );
  return { scores, empty: (i: number): boolean | undefined => isEmptyItem(docs, i) };
}

export function rerankRoute(app: FastifyInstance, ctx: RouteContext) {
  app.post(
    '/v1/rerank',
    {
      config: { access: 'read' },
      schema: {
        description:
          "Scores one query against candidate documents, taken from the corpus by id (candidates) or sent inline (documents: embeddings, or texts with the server's model); results best first, index = position in the request; return_documents adds each text document.",
        body: RerankBody,
        response: { 200: RerankResponse, ...READ_ERRORS },
      },
    },
    async (request, reply) => {
      const body = request.body as RerankBody;
      if ((body.candidates === undefined) === (body.documents === undefined))
        throw new InvalidArgumentError(
          'candidates',
          'either candidates (ids of the corpus) or documents (inline embeddings or texts)',
          body.candidates === undefined ? 'neither' : 'both',
        );
      const deadline = requestDeadline(ctx.limits.timeoutMs, reply.elapsedTime);
      try {
        const inputs = await readInputs(ctx, body, deadline.signal);
        const { scores, empty } = await scoreInputs(
          ctx,
          body,
          inputs,
          deadline.left(),
          requestLimits(ctx, reply),
        );
        setBatch(request, 1);
        // the corpus ids of the candidates, or the ids inline documents carry (echoed, not looked up)
        const ids = body.candidates ?? inputs.ids;
        const texts = body.return_documents === true ? inputs.texts : undefined;
        return {
          results: ranked(scores, body.top_n ?? scores.length).map((h) => ({
            index: h.index,
            ...(ids?.[h.index] !== undefined ? { id: ids[h.index] } : {}),
            ...scoreObject('relevance_score', h.score, empty(h.index)),
            ...(texts ? { document: { text: texts[h.index] } } : {}),
          })),
        };
      } finally {
        deadline.dispose();
      }
    },
  );
}

/** The ids of inline embedding documents, checked as corpus ids are (undefined: none has one). */
function inlineIds(docs: RerankBody['documents']): (string | undefined)[] | undefined {
  if (!docs?.some((d) => typeof d === 'object' && d.id !== undefined)) return undefined;
  const ids = docs.map((d) => (typeof d === 'object' ? d.id : undefined));
  checkIds(ids, (i) => `documents[${i}].id`);
  return ids;
}
