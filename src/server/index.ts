// The entry to the HTTP service that the package index re-exports: Fastify, its plugins and
// prom-client load on the first createServer() call, not with every `import 'maxsim'`. They are
// optional peer dependencies: a library-only install does not pull them, and a server without them
// says which to install.
import { MaxsimError } from '../errors.js';
import type { MaxsimServer, ServerOptions } from './app.js';

export type { MaxsimServer, ServerOptions } from './app.js';

/** The server stack (package.json peerDependencies); `npm install` these for `maxsim serve`. */
export const SERVER_PACKAGES = [
  'fastify@^5.12.8',
  '@fastify/swagger@^9.9.3',
  '@fastify/type-provider-typebox@^6.3.0',
  'typebox@^1.4.3',
  'prom-client@^15.1.3',
];

/** Starts `maxsim serve` in this process: the resident corpus, the batcher and the routes (see app.ts). */
export async function createServer(options: ServerOptions): Promise<MaxsimServer> {
  let app: typeof import('./app.js');
  try {
    app = await import('./app.js');
  } catch (e) {
    const code = (e as { code?: string }).code;
    const missing = SERVER_PACKAGES.map((p) => p.slice(0, p.lastIndexOf('@'))).find((name) =>
      String((e as Error).message).includes(`'${name}'`),
    );
    if (code !== 'ERR_MODULE_NOT_FOUND' || !missing) throw e;
    throw new MaxsimError(
      `the HTTP server needs ${missing} and the rest of the server stack, which a library install leaves out: npm install ${SERVER_PACKAGES.join(' ')}`,
    );
  }
  return app.createServer(options);
}
