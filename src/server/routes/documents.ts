// POST /v1/documents (append one segment) and DELETE /v1/documents (tombstones): writes, behind the
// API key (checked before the body is read, see auth.ts).

import type { FastifyInstance } from 'fastify';
import { InvalidArgumentError } from '../../errors.js';
import { findOverflow, OVERFLOW_AT } from '../../floats.js';
import { decodeDocuments } from '../answers.js';
import type { PackedTokens } from '../codecs.js';
import { checkIds, type RouteContext } from '../context.js';
import { ConflictError } from '../resident-writes.js';
import {
  DeleteDocumentsBody,
  DeleteDocumentsResponse,
  DocumentsBody,
  DocumentsResponse,
  ErrorResponse,
  type InlineDocument,
} from '../schemas.js';
import { requestDeadline } from '../text.js';
import { encodeField } from './text-fields.js';

const errors = {
  400: ErrorResponse,
  401: ErrorResponse,
  413: ErrorResponse,
  503: ErrorResponse,
  507: ErrorResponse,
};

/**
 * Values the corpus's 16-bit dtype cannot hold (they would be stored as +-Infinity), refused naming
 * the request's own element (the writer's check names its batch, and a --clamp the server has not).
 */
function refuseOverflow(ctx: RouteContext, docs: readonly InlineDocument[], packed: PackedTokens) {
  const dtype = ctx.resident.heldInfo.dtype;
  if (dtype !== 'float16' && dtype !== 'bfloat16') return;
  const found = findOverflow(packed.data, dtype);
  if (!found) return;
  const { dim, offsets } = packed;
  const row = Math.floor(found.first / dim);
  let i = 0;
  while (offsets[i + 1] <= row) i++;
  const token = row - offsets[i];
  const field =
    docs[i].embeddings_b64 !== undefined
      ? `documents[${i}].embeddings_b64`
      : `documents[${i}].embeddings[${token}][${found.first % dim}]`;
  throw new InvalidArgumentError(
    field,
    `finite values within the corpus's ${dtype} range (|x| < ${OVERFLOW_AT[dtype]}; beyond it they would be stored as +-Infinity)`,
    `${found.value}${docs[i].embeddings_b64 !== undefined ? ` at token ${token}, component ${found.first % dim}` : ''}${found.count > 1 ? ` (${found.count} values beyond it in all)` : ''}`,
  );
}

/** The documents of an append: embeddings (with their ids), or texts (with `ids`) encoded. */
async function readDocuments(
  ctx: RouteContext,
  body: DocumentsBody,
  elapsedMs: number,
): Promise<{ packed: PackedTokens; ids: string[] | undefined }> {
  if ((body.documents === undefined) === (body.texts === undefined))
    throw new InvalidArgumentError(
      'documents',
      'either documents (embeddings) or texts',
      body.documents === undefined ? 'neither' : 'both',
    );
  if (body.texts !== undefined) {
    const texts = ctx.text.readTexts(body.texts, 'texts');
    if (texts.length === 0) throw new InvalidArgumentError('texts', 'at least one text', 'none');
    const ids = body.ids;
    if (ids !== undefined && ids.length !== texts.length)
      throw new InvalidArgumentError('ids', `${texts.length} ids (one per text)`, `${ids.length}`);
    if (ids) checkIds(ids, 'ids');
    const deadline = requestDeadline(ctx.limits.timeoutMs, elapsedMs);
    try {
      return { packed: await encodeField(ctx, 'document', texts, 'texts', deadline.signal), ids };
    } finally {
      deadline.dispose();
    }
  }
  if (body.ids !== undefined)
    throw new InvalidArgumentError(
      'ids',
      'ids with texts (documents carry their own id)',
      'ids with documents',
    );
  const docs = body.documents!;
  const packed = decodeDocuments(docs, 'documents', ctx.dim());
  refuseOverflow(ctx, docs, packed);
  const withIds = docs.filter((d) => d.id !== undefined).length;
  if (withIds !== 0 && withIds !== docs.length)
    throw new InvalidArgumentError(
      'documents[].id',
      'an id on every document or on none',
      `${withIds} of ${docs.length}`,
    );
  const ids = withIds > 0 ? docs.map((d) => d.id!) : undefined;
  if (ids) checkIds(ids, (i) => `documents[${i}].id`);
  return { packed, ids };
}

export function documentRoutes(app: FastifyInstance, ctx: RouteContext) {
  app.post(
    '/v1/documents',
    {
      config: { access: 'write' },
      schema: {
        description:
          "Appends documents to the corpus as one new segment (crash-safe); later searches see all of them, none before. documents: embeddings (each with its id); or texts (with ids), encoded with the server's model. Needs the API key when one is configured.",
        body: DocumentsBody,
        response: { 201: DocumentsResponse, ...errors, 409: ErrorResponse },
        security: [{ bearer: [] }],
      },
    },
    async (request, reply) => {
      const { packed, ids } = await readDocuments(ctx, request.body as DocumentsBody, reply.elapsedTime);
      const r = await ctx.resident.append(packed, ids).catch((e) => {
        // the request's own field of the ids
        if (
          e instanceof ConflictError &&
          e.field === 'ids' &&
          (request.body as DocumentsBody).texts === undefined
        )
          throw new ConflictError(e.received, 'documents[].id');
        throw e;
      });
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
      config: { access: 'write' },
      schema: {
        description:
          'Deletes documents by id (tombstones, crash-safe, published atomically): later searches and lookups never see them, earlier ones all of them. Unknown ids: 404 and nothing is deleted. Needs the API key when one is configured.',
        body: DeleteDocumentsBody,
        response: { 200: DeleteDocumentsResponse, ...errors, 404: ErrorResponse },
        security: [{ bearer: [] }],
      },
    },
    async (request) => {
      const ids = (request.body as DeleteDocumentsBody).ids;
      checkIds(ids, 'ids');
      const r = await ctx.resident.delete(ids);
      return { deleted: r.deleted, live: r.info.live, generation: r.info.generation };
    },
  );
}
