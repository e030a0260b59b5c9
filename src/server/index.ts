// The entry to the HTTP service that the package index re-exports: Fastify, its plugins and
// prom-client load on the first createServer() call, not with every `import 'maxsim'`.
import type { MaxsimServer, ServerOptions } from './app.js';

export type { MaxsimServer, ServerOptions } from './app.js';

/** Starts `maxsim serve` in this process: the resident corpus, the batcher and the routes (see app.ts). */
export async function createServer(options: ServerOptions): Promise<MaxsimServer> {
  return (await import('./app.js')).createServer(options);
}
