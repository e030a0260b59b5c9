// POST /v1/encode and GET /v1/model: text in, token embeddings out, with the model `maxsim serve
// --model DIR` opened (or the one the corpus records). Requests are batched across callers by the
// server's encoder queue (text.ts: one encoder run serves every request that arrived meanwhile).

import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { batchItem, raggedBatch, type TokenBatch } from '../../tensor.js';
import type { EncodedTokens } from '../codecs.js';
import type { RouteContext } from '../context.js';
import { ErrorResponse } from '../schemas.js';
import { requestDeadline } from '../text.js';

const EncodeBody = Type.Object(
  {
    texts: Type.Array(Type.String(), { description: 'the texts, encoded in order' }),
    kind: Type.Optional(
      Type.Union([Type.Literal('query'), Type.Literal('document')], { default: 'document' }),
    ),
    format: Type.Optional(Type.Union([Type.Literal('json'), Type.Literal('b64')], { default: 'json' })),
  },
  { additionalProperties: false },
);

function toJson(batch: TokenBatch): number[][][] {
  return Array.from({ length: batch.count }, (_, b) => {
    const m = batchItem(batch, b);
    const data = m.data as Float32Array;
    return Array.from({ length: m.length }, (_, t) => Array.from(data.subarray(t * m.dim, (t + 1) * m.dim)));
  });
}

function toB64(batch: TokenBatch): { b64: string; shape: [number, number]; dtype: string } {
  let tokens = 0;
  for (const l of batch.lengths) tokens += l;
  const packed = new Float32Array(tokens * batch.dim);
  let at = 0;
  for (let b = 0; b < batch.count; b++) {
    const s = batch.starts[b] * batch.dim;
    const n = batch.lengths[b] * batch.dim;
    packed.set((batch.data as Float32Array).subarray(s, s + n), at);
    at += n;
  }
  return {
    b64: Buffer.from(packed.buffer, packed.byteOffset, packed.byteLength).toString('base64'),
    shape: [tokens, batch.dim],
    dtype: 'float32',
  };
}

/** POST /v1/encode and GET /v1/model on the server (a 400 / 404 when it has no model). */
export function encodeRoutes(app: FastifyInstance, ctx: RouteContext) {
  app.post(
    '/v1/encode',
    {
      config: { access: 'read' },
      schema: {
        description:
          "Token embeddings of texts with the server's ColBERT model (ColBERT's rules: prefixes, [MASK] " +
          'expansion of queries, truncation, the skiplist on documents, projection, L2 norm). ' +
          "format 'json': embeddings[text][token][dim]; 'b64': packed float32 [tokens, dim] with lengths.",
        body: EncodeBody,
        response: { 400: ErrorResponse, 413: ErrorResponse, 504: ErrorResponse },
      },
    },
    async (request, reply) => {
      const body = request.body as { texts: string[]; kind?: 'query' | 'document'; format?: 'json' | 'b64' };
      const texts = ctx.text.readTexts(body.texts, 'texts');
      const kind = body.kind ?? 'document';
      const deadline = requestDeadline(ctx.limits.timeoutMs, reply.elapsedTime);
      let packed: EncodedTokens;
      try {
        packed = await ctx.text.encodeTexts(kind, texts, 'texts', deadline.signal);
      } finally {
        deadline.dispose();
      }
      const batch = raggedBatch(packed.values, packed.offsets, { dim: packed.dim, checkFinite: false });
      const head = { kind, dim: batch.dim, count: batch.count, lengths: Array.from(batch.lengths) };
      return body.format === 'b64'
        ? { ...head, embeddings: toB64(batch) }
        : { ...head, embeddings: toJson(batch) };
    },
  );
  app.get(
    '/v1/model',
    {
      config: { access: 'read' },
      schema: {
        description: "The server's ColBERT model, its settings and its encoder queue's counters",
        response: { 404: ErrorResponse },
      },
    },
    async (_request, reply) => {
      const model = ctx.text.summary();
      if (!model)
        return reply.code(404).send({
          error: { code: 'no_model', message: 'the server has no model (start it with --model DIR)' },
        });
      const s = ctx.text.stats;
      return { ...model, encoding: { runs: s.runs, texts: s.texts, largest_run: s.largestRun } };
    },
  );
}
