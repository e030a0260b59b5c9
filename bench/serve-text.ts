// `maxsim serve` with text in: the server's text-search latency split into encode and search, and its
// requests/s under concurrent text searches (encoding batched across requests).
//   node dist/bench/serve-text.js [MODEL_DIR] [--docs 400] [--requests 60] [--connections 16]
//        [--duration 8] [--backend cpu|cuda|auto] [--json]
// A corpus of --docs seeded texts (40-200 words) is encoded with the model (default: the tiny test
// model) and built in a temporary directory; a server is spawned on it (the corpus's recorded model).
// Sequentially, --requests times each: POST /v1/encode of one query (the encode), POST /v1/search
// with that query's embeddings (the search), POST /v1/search with the query text (both); p50 of
// each. Then --connections clients send text searches for --duration seconds: requests/s, p50 / p99,
// and from /metrics the texts per encoder run and the server's mean tokenize / embed / pass times.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { loadColbert } from '../src/encode/colbert.js';
import { buildCorpusFromTexts } from '../src/encode/corpus-texts.js';
import { packageRoot } from '../src/native.js';
import { seededText } from './texts.js';

const args = process.argv.slice(2);
const flag = (name: string, fallback: string) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const model =
  args[0] && !args[0].startsWith('--') ? args[0] : path.join(packageRoot, 'test', 'fixtures', 'tiny-colbert');
const nDocs = Number(flag('--docs', '400'));
const nRequests = Number(flag('--requests', '60'));
const connections = Number(flag('--connections', '16'));
const duration = Number(flag('--duration', '8'));
const backend = flag('--backend', 'cpu');

const { rand, text } = seededText(11);

const p = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
};
const round = (x: number) => Math.round(x * 100) / 100;

async function postJson(url: string, body: unknown): Promise<{ ms: number; json: unknown }> {
  const t0 = performance.now();
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const json = await r.json();
  if (r.status !== 200) throw new Error(`${url}: ${r.status} ${JSON.stringify(json)}`);
  return { ms: performance.now() - t0, json };
}

/** Mean of a Prometheus histogram (its _sum / _count for the label set `labels`). */
function mean(metrics: string, name: string, labels: string): number {
  const read = (suffix: string) => {
    const set = labels === '' ? '' : `\\{${labels}\\}`;
    const m = new RegExp(`^${name}_${suffix}${set} ([0-9.e+-]+)$`, 'm').exec(metrics);
    return m ? Number(m[1]) : Number.NaN;
  };
  return read('sum') / read('count');
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-serve-text-'));
const corpus = path.join(dir, 'c.msx');
const encoder = await loadColbert(model);
const docs = Array.from({ length: nDocs }, () => text(40 + Math.floor(rand() * 161)));
const queries = Array.from({ length: 200 }, () => text(3 + Math.floor(rand() * 8)));
const built = await buildCorpusFromTexts({ out: corpus, model: encoder, texts: docs });
await encoder.close();

const cli = path.join(packageRoot, 'dist', 'src', 'cli', 'main.js');
const server = spawn(
  process.execPath,
  [cli, 'serve', '--corpus', corpus, '--port', '0', '--backend', backend, '--log-level', 'warn'],
  { stdio: ['ignore', 'ignore', 'pipe'] },
);
const url = await new Promise<string>((resolve, reject) => {
  let err = '';
  server.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
    const m = /listening on (\S+)/.exec(err);
    if (m) resolve(m[1]);
  });
  server.on('exit', (code) => reject(new Error(`the server exited (${code}): ${err}`)));
});

try {
  // warm-up, then sequential: encode, search by embeddings, search by text
  for (const q of queries.slice(0, 5)) await postJson(`${url}/v1/search`, { query: q });
  const encodeMs: number[] = [];
  const searchMs: number[] = [];
  const textMs: number[] = [];
  for (let i = 0; i < nRequests; i++) {
    const q = queries[i % queries.length];
    const e = await postJson(`${url}/v1/encode`, { texts: [q], kind: 'query', format: 'b64' });
    encodeMs.push(e.ms);
    const emb = (e.json as { embeddings: { b64: string; shape: number[] } }).embeddings;
    const s = await postJson(`${url}/v1/search`, {
      queries: { b64: emb.b64, dtype: 'float32', shape: [1, ...emb.shape] },
    });
    searchMs.push(s.ms);
    textMs.push((await postJson(`${url}/v1/search`, { query: q })).ms);
  }
  const before = await (await fetch(`${url}/metrics`)).text();
  // concurrent text searches
  const latencies: number[] = [];
  const end = performance.now() + duration * 1000;
  let next = 0;
  await Promise.all(
    Array.from({ length: connections }, async () => {
      while (performance.now() < end) {
        const q = queries[next++ % queries.length];
        latencies.push((await postJson(`${url}/v1/search`, { query: q })).ms);
      }
    }),
  );
  const metrics = await (await fetch(`${url}/metrics`)).text();
  const runs = (m: string) =>
    Number(/^maxsim_encode_run_texts_count\{kind="query"\} (\d+)/m.exec(m)?.[1] ?? 0);
  const texts = (m: string) =>
    Number(/^maxsim_encode_run_texts_sum\{kind="query"\} (\d+)/m.exec(m)?.[1] ?? 0);
  const result = {
    model: path.basename(model),
    backend,
    documents: nDocs,
    corpusTokens: built.tokens,
    sequential: {
      requests: nRequests,
      encodeP50Ms: round(p(encodeMs, 0.5)),
      searchP50Ms: round(p(searchMs, 0.5)),
      textSearchP50Ms: round(p(textMs, 0.5)),
    },
    concurrent: {
      connections,
      seconds: duration,
      requestsPerSecond: round(latencies.length / duration),
      p50Ms: round(p(latencies, 0.5)),
      p99Ms: round(p(latencies, 0.99)),
      textsPerEncoderRun: round((texts(metrics) - texts(before)) / Math.max(1, runs(metrics) - runs(before))),
      // the server's means over the whole run (sequential part included)
      serverTokenizeMs: round(1000 * mean(metrics, 'maxsim_request_phase_seconds', 'phase="tokenize"')),
      serverEmbedMs: round(1000 * mean(metrics, 'maxsim_request_phase_seconds', 'phase="embed"')),
      serverEncoderRunMs: round(1000 * mean(metrics, 'maxsim_encode_run_seconds', 'kind="query"')),
      serverPassMs: round(1000 * mean(metrics, 'maxsim_pass_duration_seconds', '')),
    },
  };
  if (args.includes('--json')) console.log(JSON.stringify(result));
  else console.log(JSON.stringify(result, null, 2));
} finally {
  server.kill('SIGTERM');
  await new Promise((resolve) => server.once('exit', resolve));
  fs.rmSync(dir, { recursive: true, force: true });
}
