// The API key, checked first: an onRequest hook runs before the body is read, so an unauthenticated
// write (up to the body limit) is refused without being received, parsed or validated. Each route
// says what it is (config.access): 'write' needs the key when one is set; 'read' too with
// authReads (the searches, /metrics, /openapi.json, /v1/info); 'open' never (/healthz, /readyz).

import { createHash, randomUUID, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { AuthError } from './http-errors.js';

export type Access = 'write' | 'read' | 'open';

function digest(s: string): Buffer {
  return createHash('sha256').update(s, 'utf8').digest();
}

/** Adds the hook; routes without config.access count as 'read'. */
export function registerAuth(app: FastifyInstance, apiKey: string | undefined, authReads: boolean) {
  if (apiKey === undefined) return;
  const keyDigest = digest(apiKey);
  app.addHook('onRequest', (request, _reply, done) => {
    const access = (request.routeOptions.config as { access?: Access } | undefined)?.access ?? 'read';
    // an unmatched route is a 404 for everyone (nothing behind it to protect)
    const matched = request.routeOptions.url !== undefined;
    if (!matched || access === 'open' || (access === 'read' && !authReads)) return done();
    const header = request.headers.authorization ?? '';
    const m = /^Bearer +(\S+) *$/i.exec(header);
    // digests of equal length: the comparison time does not depend on where the strings differ
    if (m && timingSafeEqual(digest(m[1]), keyDigest)) return done();
    done(
      new AuthError(
        m ? 'the API key is not valid' : 'this endpoint needs an API key: Authorization: Bearer <key>',
      ),
    );
  });
}

/** Longest client request id kept (a longer or odd one is replaced). */
export const MAX_REQUEST_ID = 128;
const REQUEST_ID = /^[A-Za-z0-9._:@/+=-]{1,128}$/;

/**
 * The request id: the client's x-request-id when it is short and plain (letters, digits, . _ : @ / +
 * = -), else a fresh one; it goes into the logs and back in the answer's x-request-id.
 */
export function requestIdOf(request: { headers: FastifyRequest['headers'] }): string {
  const given = request.headers['x-request-id'];
  if (typeof given === 'string' && REQUEST_ID.test(given)) return given;
  return randomUUID();
}

function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || /^127\./.test(h) || h === '::ffff:127.0.0.1';
}

/** The warning to print when the server binds beyond loopback with writes open, or undefined. */
export function exposureWarning(host: string, apiKey: string | undefined): string | undefined {
  if (apiKey !== undefined || isLoopback(host)) return undefined;
  return `listening on ${host} without an API key: anyone who can reach this address can append and delete documents (set --api-key-file / apiKey)`;
}
