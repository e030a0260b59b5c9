// POST /v1/encode and GET /v1/model: text in, token embeddings out, with the model `maxsim serve
// --model DIR` opened. Requests are batched across callers by an EncodeQueue (one encoder run serves
// every request that arrived meanwhile). Registered on the server's Fastify app before it listens,
// so the app's error handler, auth hooks and logging apply.

import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import type { ColbertEncoder } from '../../encode/colbert.js';
import { EncodeQueue, type EncodeQueueOptions } from '../../encode/queue.js';
import { InvalidArgumentError } from '../../errors.js';
import { batchItem, type TokenBatch } from '../../tensor.js';

export interface EncodeRoutesOptions extends EncodeQueueOptions {
  /** Most texts in one request (default 1024). */
  maxRequestTexts?: number;
}

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

/** Adds the encode routes to `app` (before it listens) and returns the queue they share. */
export function registerEncodeRoutes(
  app: FastifyInstance,
  encoder: ColbertEncoder,
  options: EncodeRoutesOptions = {},
): EncodeQueue {
  if (encoder.info.dtype !== 'float32')
    throw new InvalidArgumentError('encoder', "an encoder opened with dtype 'float32'", encoder.info.dtype);
  const queue = new EncodeQueue(encoder, options);
  const maxTexts = options.maxRequestTexts ?? 1024;
  app.post(
    '/v1/encode',
    {
      schema: {
        description:
          "Token embeddings of texts with the server's ColBERT model (ColBERT's rules: prefixes, [MASK] " +
          'expansion of queries, truncation, the skiplist on documents, projection, L2 norm). ' +
          "format 'json': embeddings[text][token][dim]; 'b64': packed float32 [tokens, dim] with lengths.",
        body: EncodeBody,
      },
    },
    async (request) => {
      const body = request.body as { texts: string[]; kind?: 'query' | 'document'; format?: 'json' | 'b64' };
      if (body.texts.length > maxTexts)
        throw new InvalidArgumentError('texts', `at most ${maxTexts} texts`, `${body.texts.length}`);
      const kind = body.kind ?? 'document';
      const batch = await queue.encode(kind, body.texts);
      const head = { kind, dim: batch.dim, count: batch.count, lengths: Array.from(batch.lengths) };
      return body.format === 'b64'
        ? { ...head, embeddings: toB64(batch) }
        : { ...head, embeddings: toJson(batch) };
    },
  );
  app.get(
    '/v1/model',
    { schema: { description: "The server's ColBERT model and its settings" } },
    async () => ({
      ...encoder.info,
      queue: queue.stats,
    }),
  );
  return queue;
}
