// POST /v1/documents (append one segment) and DELETE /v1/documents (tombstones): writes, behind the
// API key (checked before the body is read, see auth.ts).

import type { FastifyInstance } from 'fastify';
import { InvalidArgumentError } from '../../errors.js';
import { decodeDocuments } from '../answers.js';
import { checkIds, type RouteContext } from '../context.js';
import {
  DeleteDocumentsBody,
  DeleteDocumentsResponse,
  DocumentsBody,
  DocumentsResponse,
  ErrorResponse,
} from '../schemas.js';

const errors = {
  400: ErrorResponse,
  401: ErrorResponse,
  413: ErrorResponse,
  503: ErrorResponse,
  507: ErrorResponse,
};

export function documentRoutes(app: FastifyInstance, ctx: RouteContext) {
  app.post(
    '/v1/documents',
    {
      config: { access: 'write' },
      schema: {
        description:
          'Appends documents to the corpus as one new segment (crash-safe); later searches see all of them, none before. Needs the API key when one is configured.',
        body: DocumentsBody,
        response: { 201: DocumentsResponse, ...errors, 409: ErrorResponse },
        security: [{ bearer: [] }],
      },
    },
    async (request, reply) => {
      const docs = (request.body as DocumentsBody).documents;
      const packed = decodeDocuments(docs, 'documents', ctx.dim());
      const withIds = docs.filter((d) => d.id !== undefined).length;
      if (withIds !== 0 && withIds !== docs.length)
        throw new InvalidArgumentError(
          'documents[].id',
          'an id on every document or on none',
          `${withIds} of ${docs.length}`,
        );
      const ids = withIds > 0 ? docs.map((d) => d.id!) : undefined;
      if (ids) checkIds(ids, 'documents[].id');
      const r = await ctx.resident.append(packed, ids);
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
