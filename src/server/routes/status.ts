// GET /healthz (alive), /readyz (the corpus answers, the lane is not stuck past a deadline, not
// shutting down), /metrics, /openapi.json and /v1/info (the last three behind the key with authReads).

import type { FastifyInstance } from 'fastify';
import { cpuInfo } from '../../backends/cpu.js';
import { version } from '../../version.js';
import { indexInfo } from '../answers-index.js';
import type { RouteContext } from '../context.js';
import { InfoResponse } from '../schemas.js';

export function statusRoutes(app: FastifyInstance, ctx: RouteContext) {
  const { resident, batcher } = ctx;
  app.get(
    '/healthz',
    { config: { access: 'open' }, schema: { description: 'the process is alive' } },
    async () => ({
      status: 'ok',
    }),
  );
  app.get(
    '/readyz',
    {
      config: { access: 'open' },
      schema: {
        description:
          'ready: the corpus is loaded, the GPU answers and the scoring lane is not busy past the deadline of every request it is running',
      },
    },
    async (_request, reply) => {
      if (ctx.closing()) return reply.code(503).send({ status: 'shutting down' });
      const overdue = batcher.overdueMs();
      if (overdue > 0)
        return reply.code(503).send({
          status: `busy: a pass has run ${Math.round(overdue)} ms past the deadline of all its requests`,
        });
      if (ctx.backend === 'cuda' && (await resident.memory().catch(() => undefined)) === undefined)
        return reply.code(503).send({ status: 'the GPU does not answer' });
      // the documents searches see (deleted ones are not counted)
      return { status: 'ready', documents: resident.info.live };
    },
  );
  app.get(
    '/metrics',
    { config: { access: 'read' }, schema: { description: 'Prometheus metrics', hide: false } },
    async (_request, reply) => {
      reply.header('content-type', ctx.metrics.registry.contentType);
      return ctx.metrics.registry.metrics();
    },
  );
  app.get('/openapi.json', { config: { access: 'read' }, schema: { hide: true } }, async () => app.swagger());
  app.get(
    '/v1/info',
    { config: { access: 'read' }, schema: { response: { 200: InfoResponse } } },
    async () => {
      const i = resident.info;
      return {
        version,
        backend: ctx.backend,
        mode: resident.mode,
        kernels: { cpu: cpuInfo().isa, ...(resident.deviceName ? { gpu: resident.deviceName } : {}) },
        corpus: {
          path: i.path,
          dtype: i.dtype,
          dim: i.dim,
          documents: i.documents,
          live: i.live,
          deleted: i.deleted,
          tokens: i.tokens,
          segments: i.segments,
          generation: i.generation,
          ids: i.hasIds,
        },
        index: indexInfo(i, resident.searchPath),
        batching: {
          max_batch: ctx.limits.maxBatch,
          max_wait_ms: ctx.limits.maxWaitMs,
          wait_ms: batcher.waitMs,
          max_queue: ctx.limits.maxQueue,
          passes_in_flight: batcher.passesInFlight,
          max_work: ctx.limits.maxWork,
          dtype: resident.dtype ?? null,
        },
        model: ctx.text.summary(),
      };
    },
  );
}
