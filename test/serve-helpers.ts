// Shared by the service's tests (serve, door, fuzz, 8-bit): a small float16 corpus with ids, a server on an
// ephemeral loopback port, HTTP calls that return status + JSON, raw socket requests, and the error
// contract; a search asked of two servers (the 8-bit tests).
import assert from 'node:assert/strict';
import * as net from 'node:net';
import { CorpusWriter } from '../src/io/corpus/index.js';
import type { MaxsimServer, ServerOptions } from '../src/server/app.js';
import { createServer } from '../src/server/index.js';
import { raggedBatch, type TokenBatch } from '../src/tensor.js';

export const DIM = 16;
export const KEY = 'test-key-0123456789';

export function randomTokens(tokens: number, rand: () => number, dim = DIM): number[][] {
  return Array.from({ length: tokens }, () => Array.from({ length: dim }, () => rand() * 2 - 1));
}

/** Documents as nested arrays ([tokens][dim] each) packed into one ragged float32 batch. */
export function packed(items: number[][][], dim = DIM): TokenBatch {
  const offsets = [0];
  for (const it of items) offsets.push(offsets[offsets.length - 1] + it.length);
  return raggedBatch(Float32Array.from(items.flat(2)), offsets, { dim });
}

/** A corpus of `n` random documents (1..24 tokens, float16, ids doc0..) at `dir`. */
export function buildCorpus(dir: string, n: number, rand: () => number): number[][][] {
  const docs = Array.from({ length: n }, () => randomTokens(1 + Math.floor(rand() * 24), rand));
  const w = CorpusWriter.create(dir, { dim: DIM, dtype: 'float16', ids: true });
  w.add(
    packed(docs),
    docs.map((_, i) => `doc${i}`),
  );
  w.commit();
  return docs;
}

export async function start(
  servers: MaxsimServer[],
  options: Partial<ServerOptions> & { corpus: string },
): Promise<{ server: MaxsimServer; url: string; port: number }> {
  const server = await createServer({ backend: 'cpu', port: 0, logger: false, ...options });
  servers.push(server);
  const { url, port } = await server.listen();
  return { server, url, port };
}

export interface Reply {
  status: number;
  headers: Headers;
  text: string;
  // biome-ignore lint/suspicious/noExplicitAny: JSON answers, checked field by field
  json: any;
  ms: number;
}

export async function call(
  url: string,
  method: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<Reply> {
  const init: RequestInit = { method, headers: { ...headers } };
  if (body !== undefined) {
    if (typeof body === 'string' || body instanceof Uint8Array) init.body = body;
    else {
      init.body = JSON.stringify(body);
      (init.headers as Record<string, string>)['content-type'] ??= 'application/json';
    }
  }
  const t0 = performance.now();
  const r = await fetch(url, init);
  const text = await r.text();
  // biome-ignore lint/suspicious/noExplicitAny: as above
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: r.status, headers: r.headers, text, json, ms: performance.now() - t0 };
}

export const post = (url: string, body: unknown, headers?: Record<string, string>) =>
  call(url, 'POST', body, headers);

export function b64Of(bytes: ArrayBufferView): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
}

/** The error contract: status, JSON {error: {code, message}}, the field named, no stack trace. */
export function expectError(
  r: { status: number; text: string; json?: unknown },
  status: number,
  field?: string | RegExp,
) {
  const json = r.json as { error?: { code?: unknown; message?: unknown; field?: string } } | undefined;
  assert.equal(r.status, status, r.text);
  assert.equal(typeof json?.error?.code, 'string', r.text);
  assert.equal(typeof json?.error?.message, 'string', r.text);
  assert.doesNotMatch(r.text, /\bat .*\.(js|ts):\d+/, 'a stack trace in the response');
  if (field instanceof RegExp) assert.match(json!.error!.field ?? '', field, r.text);
  else if (field !== undefined) assert.equal(json!.error!.field, field, r.text);
}

/**
 * Writes raw bytes to the server and reads until it closes the connection or `ms` pass: the status
 * and the JSON body of the first answer (undefined when none came).
 */
export function raw(
  port: number,
  bytes: string | Buffer,
  ms = 3000,
): Promise<{ status?: number; text: string; json?: unknown; closed: boolean }> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    let data = '';
    let closed = false;
    const finish = () => {
      clearTimeout(timer);
      socket.destroy();
      const m = /^HTTP\/1\.1 (\d{3})/.exec(data);
      const body = data.split('\r\n\r\n').slice(1).join('\r\n\r\n');
      let json: unknown;
      try {
        json = JSON.parse(body);
      } catch {
        json = undefined;
      }
      resolve({ status: m ? Number(m[1]) : undefined, text: body, json, closed });
    };
    const timer = setTimeout(finish, ms);
    socket.on('data', (d) => {
      data += d.toString('latin1');
      // one whole answer (headers and its Content-Length of body) is enough
      const end = data.indexOf('\r\n\r\n');
      const length = /\r\ncontent-length: *(\d+)/i.exec(data.slice(0, end));
      if (end >= 0 && length && data.length >= end + 4 + Number(length[1])) finish();
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      closed = true;
      finish();
    });
    socket.write(bytes);
  });
}

export interface SearchHit {
  id: string;
  index: number;
  score: number;
}

/** A JSON call that must be answered 200 or 201 (with `key` as the bearer token): its JSON. */
// biome-ignore lint/suspicious/noExplicitAny: as above
export async function callJson(url: string, method: string, body?: unknown, key?: string): Promise<any> {
  const r = await call(url, method, body, key ? { authorization: `Bearer ${key}` } : {});
  assert.ok(r.status === 200 || r.status === 201, `${method} ${url}: ${r.status}: ${r.text}`);
  return r.json;
}

/** The same search asked of two servers at once: [the reference's rows, the other's]. */
export async function searchBoth(
  reference: string,
  other: string,
  queries: number[][][],
  k: number,
): Promise<[SearchHit[][], SearchHit[][]]> {
  const body = { queries, top_k: k };
  const [a, b] = await Promise.all([
    callJson(`${reference}/v1/search`, 'POST', body),
    callJson(`${other}/v1/search`, 'POST', body),
  ]);
  return [a.results, b.results];
}
