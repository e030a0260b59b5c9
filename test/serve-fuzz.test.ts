// A property-based HTTP fuzzer for `maxsim serve` (issue 32, done means): random bodies for every route
// (shapes with zero axes and huge counts, dtypes, base64 of wrong lengths, lengths, nested arrays of
// odd values, ids with lone surrogates, wrong types, extra fields) and header abuse (content types,
// request ids, lengths). Every answer is a 200 of the route's shape or a 4xx in the error shape,
// within a time bound; /healthz answers fast throughout; the corpus verifies after.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import { openCorpus } from '../src/ops/corpus-search.js';
import type { MaxsimServer } from '../src/server/app.js';
import { rng, runSeed } from './helpers.js';
import { buildCorpus, call, DIM, KEY, raw, start } from './serve-helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-fuzz-'));
const servers: MaxsimServer[] = [];
const dir = path.join(tmp, 'docs.msx');
let url: string;
let port: number;

before(async () => {
  buildCorpus(dir, 120, rng(runSeed ^ 0xf022));
  ({ url, port } = await start(servers, { corpus: dir, apiKey: KEY, maxWaitMs: 1, timeoutMs: 5000 }));
});
after(async () => {
  await Promise.all(servers.map((s) => s.close()));
  fs.rmSync(tmp, { recursive: true, force: true });
});

// ---- generators ----

const count = fc.oneof(
  fc.constantFrom(0, 1, 2, 3, DIM, 65_537, 100_000_000, 2 ** 31, 2 ** 53, -1, 1.5),
  fc.integer({ min: 0, max: 40 }),
);
const shape = fc.oneof(
  fc.array(count, { maxLength: 4 }),
  fc.tuple(count, count, fc.constantFrom(DIM, 0, 1, 8)).map((s) => [...s]),
  fc.tuple(count, fc.constantFrom(DIM, 0)).map((s) => [...s]),
);
const number = fc.oneof(
  fc.double({ noNaN: true, noDefaultInfinity: true, min: -2, max: 2 }),
  fc.constantFrom(1e39, -1e300, 3.5e38, 3.4e38, 65_520, 0, -0, 1e-45),
);
const odd = fc.oneof(fc.constant(null), fc.boolean(), fc.string({ maxLength: 4 }), fc.constant({}));
const tokenRow = fc.oneof(
  { weight: 4, arbitrary: fc.array(number, { minLength: DIM, maxLength: DIM }) },
  { weight: 1, arbitrary: fc.array(fc.oneof(number, odd), { maxLength: DIM + 2 }) },
);
const item = fc.array(tokenRow, { maxLength: 4 });
const nested = fc.oneof(fc.array(item, { maxLength: 4 }), item, odd, fc.constant([]), fc.constant([[]]));
const b64 = fc.oneof(
  fc.uint8Array({ maxLength: 4 * DIM * 3 }).map((b) => Buffer.from(b).toString('base64')),
  fc.string({ maxLength: 12 }),
  fc.constant(''),
);
const dtype = fc.constantFrom(
  undefined,
  'float32',
  'float16',
  'bfloat16',
  'fp16',
  'bf16',
  'int8',
  'float64',
  '',
  7,
);
const tensor = fc.record(
  {
    b64,
    shape,
    dtype,
    lengths: fc.array(count, { maxLength: 4 }),
    extra: fc.constant(1),
  },
  { requiredKeys: ['b64', 'shape'] },
);
const embeddings = fc.oneof(nested, tensor);
// ids: plain, empty, long, with lone or paired surrogates, not strings
const id = fc.oneof(
  fc.constantFrom('doc1', 'doc7', 'nope', '', '\ud800', '\udc00', 'a\ud83dz', '😀', 'x'.repeat(2000)),
  fc.string({ maxLength: 6, unit: 'binary' }),
  fc.integer(),
);
const ids = fc.oneof(fc.array(id, { maxLength: 4 }), id, fc.constant(null));
const topK = fc.oneof(fc.constantFrom(0, 1, 3, 10_001, -1, 2.5, '3', null), fc.integer({ min: 0, max: 20 }));
const extras = fc.dictionary(fc.constantFrom('filter', 'top_n', 'foo', 'top_k', 'queries'), odd, {
  maxKeys: 2,
});

// a well-formed search now and then (the rest of the space is mostly refusals)
const goodQueries = fc.array(
  fc.array(fc.array(fc.double({ noNaN: true, min: -1, max: 1 }), { minLength: DIM, maxLength: DIM }), {
    minLength: 1,
    maxLength: 3,
  }),
  { minLength: 1, maxLength: 3 },
);
const searchBody = fc.oneof(
  fc.record({ queries: goodQueries, top_k: fc.integer({ min: 0, max: 20 }) }),
  fc
    .record(
      { queries: embeddings, top_k: topK, ids, prefilter: fc.constantFrom('int8', 'int4') },
      { requiredKeys: [] },
    )
    .chain((b) =>
      fc.oneof(
        fc.constant(b),
        extras.map((e) => ({ ...e, ...b })),
      ),
    ),
);
const rerankBody = fc.record(
  {
    query: embeddings,
    candidates: ids,
    documents: fc.array(fc.record({ id, embeddings, extra: odd }, { requiredKeys: [] }), { maxLength: 3 }),
    top_n: topK,
  },
  { requiredKeys: [] },
);
const scoreBody = fc.record({ queries: embeddings, documents: embeddings }, { requiredKeys: [] });
const documentsBody = fc.record(
  {
    documents: fc.oneof(fc.array(fc.record({ id, embeddings }, { requiredKeys: [] }), { maxLength: 3 }), odd),
  },
  { requiredKeys: [] },
);
const deleteBody = fc.record({ ids }, { requiredKeys: [] });

const request = fc.oneof(
  fc.record({ method: fc.constant('POST'), route: fc.constant('/v1/search'), body: searchBody }),
  fc.record({ method: fc.constant('POST'), route: fc.constant('/v1/rerank'), body: rerankBody }),
  fc.record({ method: fc.constant('POST'), route: fc.constant('/v1/score'), body: scoreBody }),
  fc.record({ method: fc.constant('POST'), route: fc.constant('/v1/documents'), body: documentsBody }),
  fc.record({ method: fc.constant('DELETE'), route: fc.constant('/v1/documents'), body: deleteBody }),
);
const headers = fc.record(
  {
    'content-type': fc.oneof(
      { weight: 12, arbitrary: fc.constant('application/json') },
      {
        weight: 1,
        arbitrary: fc.constantFrom(
          'application/x-npy',
          'text/plain',
          'application/json; charset=latin1',
          'multipart/form-data',
        ),
      },
    ),
    'x-request-id': fc.oneof(
      fc.string({ maxLength: 8 }),
      fc.constant('r'.repeat(5000)),
      fc.constant('a b\tc'),
    ),
    authorization: fc.oneof(
      { weight: 8, arbitrary: fc.constant(`Bearer ${KEY}`) },
      { weight: 1, arbitrary: fc.constantFrom('Bearer wrong-key-000', 'Basic abc', '') },
    ),
  },
  { requiredKeys: ['content-type', 'authorization'] },
);

// ---- the properties ----

const REQUEST_MS = 5000;
const healthMs: number[] = [];

/** The error shape: {error: {code, message}}, no stack. */
function isErrorShape(json: unknown, text: string): boolean {
  const e = (json as { error?: { code?: unknown; message?: unknown } } | undefined)?.error;
  return typeof e?.code === 'string' && typeof e?.message === 'string' && !/\bat .*\.(js|ts):\d+/.test(text);
}

async function probeHealth() {
  const r = await call(`${url}/healthz`, 'GET');
  assert.equal(r.status, 200);
  healthMs.push(r.ms);
}

describe('the HTTP fuzzer', () => {
  test('random requests: a 200 or a 4xx in the error shape, in time; healthz fast throughout; the corpus verifies', {
    timeout: 120_000,
  }, async () => {
    const started = performance.now();
    let statuses = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(request, headers, async (req, h) => {
        const hdrs: Record<string, string> = {};
        for (const [k, v] of Object.entries(h)) if (v !== undefined) hdrs[k] = v;
        const r = await call(`${url}${req.route}`, req.method, JSON.stringify(req.body), hdrs);
        statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
        assert.ok(r.ms < REQUEST_MS, `${r.ms} ms`);
        if (r.status >= 200 && r.status < 300) assert.equal(typeof r.json, 'object', r.text);
        else {
          assert.ok(r.status >= 400 && r.status < 500, `${r.status}: ${r.text}`);
          assert.ok(isErrorShape(r.json, r.text), r.text);
        }
        await probeHealth();
      }),
      { numRuns: 400, seed: runSeed, interruptAfterTimeLimit: 40_000 },
    );
    // header abuse at the socket: bad bytes, two lengths, huge headers, a lying length
    const rawCases = [
      'GET /healthz HTTP/1.1\r\nHost: x\r\nX: \u0000\r\n\r\n',
      'POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}',
      `GET /v1/info HTTP/1.1\r\nHost: x\r\nX: ${'y'.repeat(17_000)}\r\n\r\n`,
      'POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: -5\r\n\r\n{}',
      'POST /v1/search HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n',
      'BREW /v1/search HTTP/1.1\r\nHost: x\r\n\r\n',
    ];
    for (const bytes of rawCases) {
      const r = await raw(port, bytes, 3000);
      assert.ok(
        r.status !== undefined && r.status >= 400 && r.status < 500,
        `${r.status}: ${bytes.slice(0, 60)}`,
      );
      assert.ok(isErrorShape(r.json, r.text), `${bytes.slice(0, 60)}: ${r.text}`);
      await probeHealth();
    }
    healthMs.sort((a, b) => a - b);
    const p50 = healthMs[Math.floor(healthMs.length / 2)];
    const p99 = healthMs[Math.floor(healthMs.length * 0.99)];
    assert.ok(p50 < 50 && p99 < 250, `healthz p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms`);
    assert.ok(performance.now() - started < 60_000);
    // whatever was appended or deleted, the corpus on disk is whole
    await servers[0].close();
    const c = openCorpus(dir);
    c.verify();
    c.close();
    statuses = new Map([...statuses].sort((a, b) => a[0] - b[0]));
    console.log(
      `fuzz: ${[...statuses].map(([s, n]) => `${s} x${n}`).join(', ')}; healthz p50 ${p50.toFixed(1)} ms p99 ${p99.toFixed(1)} ms`,
    );
  });
});
