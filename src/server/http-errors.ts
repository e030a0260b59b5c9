// The service's one error shape, `{"error": {code, message, field?, expected?, received?, missing?}}`,
// for every error: ours, schema validation, Fastify's own (body, content type, length) and the HTTP
// parser's (bad header bytes, 408, 431, two Content-Length), which never reach a route.

import * as http from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyInstance, FastifyRequest } from 'fastify';
import { ItemLimitError, WorkLimitError } from '../admission.js';
import { InvalidArgumentError, MaxsimError } from '../errors.js';
import { AbandonedError, ClosingError, DeadlineError, QueueFullError } from './batcher.js';
import { ConflictError, CorpusBusyError, NotFoundError } from './resident-writes.js';
import { NoModelError, TextLengthError } from './text.js';

/** The API key is missing or wrong: HTTP 401. */
export class AuthError extends MaxsimError {
  override name = 'AuthError';
}

/**
 * The body cannot be read as sent (a content type, charset or encoding the server does not take):
 * HTTP 415 naming the header, what it takes and what came.
 */
export class MediaTypeError extends InvalidArgumentError {
  override name = 'MediaTypeError';
}

/** A score beyond float32 (the inputs' products overflowed): HTTP 422, never a null score. */
export class ScoreOverflowError extends MaxsimError {
  override name = 'ScoreOverflowError';
}

export interface HttpError {
  status: number;
  code: string;
  message: string;
  field?: string;
  expected?: string;
  received?: string;
  missing?: string[];
  headers?: Record<string, string>;
}

/** The content types a body may have (415 names them). */
export const BODY_TYPES =
  'application/json (UTF-8), application/x-npy or application/octet-stream (a .npy file)';

const plural = (n: number, what: string) => `${n} ${what}${n === 1 ? '' : 's'}`;

function describeValue(x: unknown): string {
  if (x === undefined) return 'nothing';
  if (Array.isArray(x)) return `an array of ${plural(x.length, 'item')}`;
  if (typeof x === 'string') return x.length > 40 ? `a string of ${x.length} characters` : JSON.stringify(x);
  if (x === null || typeof x !== 'object') return String(x);
  return 'an object';
}

function valueAt(root: unknown, pointer: string): unknown {
  let at = root;
  for (const part of pointer.split('/').slice(1)) {
    if (at === null || typeof at !== 'object') return undefined;
    at = (at as Record<string, unknown>)[part.replace(/~1/g, '/').replace(/~0/g, '~')];
  }
  return at;
}

// '/documents/0/id' -> 'documents[0].id'
function fieldOf(pointer: string): string {
  return pointer
    .split('/')
    .slice(1)
    .map((p, i) => (/^\d+$/.test(p) ? `[${p}]` : i === 0 ? p : `.${p}`))
    .join('');
}

interface AjvIssue {
  instancePath: string;
  keyword?: string;
  message?: string;
  params?: Record<string, unknown>;
}

const TYPE_WORDS: Record<string, string> = {
  array: 'an array',
  object: 'an object',
  string: 'a string',
  integer: 'an integer',
  number: 'a number',
  boolean: 'a boolean',
  null: 'null',
};

/** One complaint's expectation in plain words (ajv's own: 'must NOT have fewer than 1 items'). */
function wordsOf(v: AjvIssue): string[] {
  const p = v.params ?? {};
  switch (v.keyword) {
    case 'const':
      return [JSON.stringify(p.allowedValue)];
    case 'enum':
      return (p.allowedValues as unknown[]).map((a) => JSON.stringify(a));
    case 'type':
      return String(p.type)
        .split(',')
        .map((t) => TYPE_WORDS[t] ?? t);
    case 'minItems':
      return [`at least ${plural(p.limit as number, 'item')}`];
    case 'maxItems':
      return [`at most ${plural(p.limit as number, 'item')}`];
    case 'minLength':
      return [`at least ${plural(p.limit as number, 'character')}`];
    case 'maxLength':
      return [`at most ${plural(p.limit as number, 'character')}`];
    case 'minimum':
    case 'maximum':
    case 'exclusiveMinimum':
    case 'exclusiveMaximum':
      return [`a number ${p.comparison} ${p.limit}`];
    case 'pattern':
      return [`a string matching ${p.pattern}`];
    default:
      return [(v.message ?? 'a valid value').replace(/^must (be )?/, '')];
  }
}

/**
 * What a schema complaint expected, in words ('one of "float32", "float16"', not 'equal to
 * constant'; 'false or an object', not one branch of the union).
 */
function expectedOf(v: AjvIssue, siblings: readonly AjvIssue[]): string {
  if (v.params?.missingProperty !== undefined) return 'a value (it is required)';
  if (v.keyword === 'additionalProperties')
    return `no field ${JSON.stringify(v.params?.additionalProperty)} (unknown fields are refused)`;
  if (v.keyword === 'const' || v.keyword === 'enum' || v.keyword === 'type') {
    // a union reports one complaint per branch at the same path: all of them are what it takes
    const allowed = [
      ...new Set(
        siblings
          .filter(
            (s) =>
              s.instancePath === v.instancePath &&
              (s.keyword === 'const' || s.keyword === 'enum' || s.keyword === 'type'),
          )
          .flatMap(wordsOf),
      ),
    ];
    // a literal's own type complaint (TypeBox's Literal(false) is {type: boolean, const: false}) says less
    const literalTypes = siblings
      .filter((s) => s.instancePath === v.instancePath && s.keyword === 'const')
      .map((s) => TYPE_WORDS[typeof s.params?.allowedValue]);
    const words = allowed.filter((a) => !literalTypes.includes(a));
    if (words.length > 0 && words.length < allowed.length) allowed.splice(0, allowed.length, ...words);
    if (allowed.length === 1) return allowed[0];
    return v.keyword === 'type' ||
      siblings.some((s) => s.keyword === 'type' && s.instancePath === v.instancePath)
      ? `${allowed.slice(0, -1).join(', ')} or ${allowed[allowed.length - 1]}`
      : `one of ${allowed.join(', ')}`;
  }
  return wordsOf(v)[0];
}

/** What came, in the words of the complaint (an array's length, a string's). */
function receivedOf(v: AjvIssue, value: unknown): string {
  if (Array.isArray(value) && (v.keyword === 'minItems' || v.keyword === 'maxItems'))
    return plural(value.length, 'item');
  if (typeof value === 'string' && (v.keyword === 'minLength' || v.keyword === 'maxLength'))
    return plural(value.length, 'character');
  return describeValue(value);
}

function validationError(e: { validation: AjvIssue[]; validationContext?: string }, request: FastifyRequest) {
  // the deepest complaint says the most (a union reports its branches after the reason); an unknown
  // field is the most specific of all
  const sorted = [...e.validation].sort((a, b) => b.instancePath.length - a.instancePath.length);
  const v = sorted.find((x) => x.keyword === 'additionalProperties') ?? sorted[0];
  const extra = v.keyword === 'additionalProperties' ? (v.params?.additionalProperty as string) : undefined;
  const missing = v.params?.missingProperty as string | undefined;
  const pointer = missing || extra ? `${v.instancePath}/${missing ?? extra}` : v.instancePath;
  const source = e.validationContext === 'querystring' ? request.query : request.body;
  const field = fieldOf(pointer) || e.validationContext || 'body';
  const expected = expectedOf(v, e.validation);
  const received = receivedOf(v, valueAt(source, pointer));
  return {
    status: 400,
    code: 'invalid_argument',
    message: `Expected ${expected} for ${field} but received ${received}`,
    field,
    expected,
    received,
  };
}

/** Storage errors of a write: the corpus is intact, the disk is full or read-only. */
function storageError(error: unknown): HttpError | undefined {
  let e: unknown = error;
  for (let depth = 0; depth < 4 && e; depth++) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOSPC' || code === 'EDQUOT')
      return {
        status: 507,
        code: 'disk_full',
        message: 'the corpus disk is full: nothing was written (the corpus is unchanged)',
      };
    if (code === 'EROFS' || code === 'EACCES' || code === 'EPERM')
      return {
        status: 503,
        code: 'read_only',
        message: 'the corpus directory is not writable: nothing was written (the corpus is unchanged)',
      };
    e = (e as { cause?: unknown }).cause;
  }
  const m = /\b(ENOSPC|EDQUOT|EROFS)\b/.exec((error as Error)?.message ?? '');
  if (m) return storageError({ code: m[1] });
  return undefined;
}

const FASTIFY_CODES: Record<string, string> = {
  FST_ERR_CTP_BODY_TOO_LARGE: 'body_too_large',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'unsupported_media_type',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'bad_content_length',
};

/** Fastify's own refusals of a body (its size, its content type) in our words, naming the header. */
function fastifyError(e: FastifyError, request: FastifyRequest): HttpError | undefined {
  const one = (status: number, code: string, field: string, expected: string, received: string) => ({
    status,
    code,
    message: `Expected ${expected} for ${field} but received ${received}`,
    field,
    expected,
    received,
  });
  if (e?.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    const length = request.headers['content-length'];
    return one(
      413,
      'body_too_large',
      'body',
      `at most ${request.routeOptions.bodyLimit} bytes (the server's --body-limit)`,
      length === undefined ? 'more (a chunked body)' : `${length} bytes`,
    );
  }
  if (e?.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE')
    return one(
      415,
      'unsupported_media_type',
      'content-type',
      BODY_TYPES,
      JSON.stringify(String(request.headers['content-type'] ?? '').slice(0, 100)),
    );
  return undefined;
}

// an argument error's body: its field, what was expected and what was received
function argumentError(status: number, code: string, e: InvalidArgumentError): HttpError {
  return { status, code, message: e.message, field: e.argument, expected: e.expected, received: e.received };
}

export function toHttpError(error: unknown, request: FastifyRequest): HttpError {
  const e = error as FastifyError & { validation?: AjvIssue[] };
  if (e?.validation && e.validation.length > 0)
    return validationError(e as { validation: AjvIssue[]; validationContext?: string }, request);
  const argumentCode =
    error instanceof WorkLimitError
      ? 'too_much_work'
      : error instanceof ItemLimitError
        ? 'too_many_items'
        : error instanceof TextLengthError
          ? 'text_too_long'
          : undefined;
  if (argumentCode) return argumentError(413, argumentCode, error as InvalidArgumentError);
  if (error instanceof MediaTypeError) return argumentError(415, 'unsupported_media_type', error);
  if (error instanceof NoModelError)
    return { status: 400, code: 'no_model', message: error.message, field: error.field };
  if (error instanceof InvalidArgumentError) return argumentError(400, 'invalid_argument', error);
  if (error instanceof NotFoundError)
    return {
      status: 404,
      code: 'unknown_id',
      message: error.message,
      field: error.field,
      missing: error.missing,
    };
  if (error instanceof ConflictError)
    return {
      status: 409,
      code: 'conflict',
      message: error.message,
      field: error.field,
      expected: error.expected,
      received: error.received,
    };
  if (error instanceof AuthError)
    return {
      status: 401,
      code: 'unauthorized',
      message: error.message,
      headers: { 'www-authenticate': 'Bearer' },
    };
  if (error instanceof QueueFullError)
    return {
      status: 429,
      code: 'overloaded',
      message: error.message,
      headers: { 'retry-after': String(error.retryAfterSeconds) },
    };
  if (error instanceof DeadlineError)
    return { status: 504, code: 'deadline_exceeded', message: error.message };
  // nobody reads it: the status is for the log line and the request counts (nginx's 499)
  if (error instanceof AbandonedError)
    return { status: 499, code: 'client_closed_request', message: error.message };
  if (error instanceof ClosingError) return { status: 503, code: 'shutting_down', message: error.message };
  if (error instanceof CorpusBusyError)
    return { status: 503, code: 'corpus_locked', message: error.message, headers: { 'retry-after': '1' } };
  if (error instanceof ScoreOverflowError)
    return { status: 422, code: 'score_overflow', message: error.message };
  const storage = storageError(error);
  if (storage) return storage;
  const status = typeof e?.statusCode === 'number' ? e.statusCode : 500;
  if (e?.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || e?.code === 'FST_ERR_CTP_EMPTY_JSON_BODY') {
    const received = e.code === 'FST_ERR_CTP_EMPTY_JSON_BODY' ? 'an empty body' : 'invalid JSON';
    return {
      status: 400,
      code: 'invalid_json',
      message: `Expected a JSON document for body but received ${received}`,
      field: 'body',
      expected: 'a JSON document',
      received,
    };
  }
  const fastify = fastifyError(e, request);
  if (fastify) return fastify;
  if (status >= 400 && status < 500)
    return { status, code: FASTIFY_CODES[e.code] ?? 'bad_request', message: e.message };
  return {
    status: 500,
    code: 'internal',
    message: error instanceof MaxsimError ? error.message : 'internal error',
  };
}

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'] as const;

/** The error handler and the 404 / 405 handler: every answer in the one shape. */
export function registerErrorHandlers(app: FastifyInstance) {
  app.setErrorHandler((error, request, reply) => {
    const h = toHttpError(error, request);
    if (h.status >= 500 && h.status !== 503 && h.status !== 504 && h.status !== 507)
      request.log.error({ err: error }, 'request failed');
    // its socket is closed: no response finishes, so the request's one log line is written here
    if (h.status === 499)
      request.log.info(
        {
          method: request.method,
          route: request.routeOptions.url ?? 'unmatched',
          status: 499,
          ms: Math.round(reply.elapsedTime * 1000) / 1000,
        },
        'request',
      );
    const { status, headers, ...body } = h;
    reply.code(status);
    if (headers) reply.headers(headers);
    return reply.send({ error: body });
  });
  app.setNotFoundHandler((request, reply) => {
    const url = request.url.split('?')[0];
    // a known route asked with another method: 405 with what it takes (RFC 9110 15.5.6)
    const allowed = METHODS.filter((method) => app.hasRoute({ method, url }));
    if (allowed.length > 0) {
      const expected = allowed.length === 1 ? allowed[0] : `one of ${allowed.join(', ')}`;
      return reply
        .code(405)
        .header('allow', allowed.join(', '))
        .send({
          error: {
            code: 'method_not_allowed',
            message: `Expected ${expected} for method but received ${request.method.slice(0, 20)}`,
            field: 'method',
            expected,
            received: request.method.slice(0, 20),
          },
        });
    }
    return reply.code(404).send({
      error: {
        code: 'not_found',
        message: `no route ${request.method} ${url.slice(0, 200)}`,
      },
    });
  });
}

/**
 * The HTTP parser's errors (they never reach a route): answered in the same shape, then the socket is
 * closed, as Node does by default.
 */
export function clientErrorHandler(this: FastifyInstance, err: NodeJS.ErrnoException, socket: Socket) {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  let status = 400;
  let code = 'bad_request';
  let message = `the request could not be parsed (${err.code ?? 'a malformed request'})`;
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    status = 408;
    code = 'request_timeout';
    message = 'the request was not received in time';
  } else if (err.code === 'HPE_HEADER_OVERFLOW') {
    status = 431;
    code = 'headers_too_large';
    message = 'the request headers are larger than the server accepts';
  }
  const body = JSON.stringify({ error: { code, message } });
  if (socket.writable)
    socket.write(
      `HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\n\r\n${body}`,
    );
  socket.destroy(err);
}
