// bench/serve.ts's servers and corpus: the corpus built (or reused) for a run, `maxsim serve` spawned on
// loopback and stopped, and an 8-bit server's answers checked against an exact one's.
import { type ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Rng, randomUnitTokens } from '../src/demo/random.js';
import { encodeFloats } from '../src/floats.js';
import { CorpusWriter } from '../src/io/corpus/index.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { raggedBatch } from '../src/tensor.js';
import type { Args } from './serve-args.js';

const CLI = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));

/** Whether `dir` holds the corpus these arguments build (a previous run's --corpus-dir). */
export function builtAlready(a: Args, dir: string): boolean {
  if (!fs.existsSync(dir)) return false;
  try {
    const c = openCorpus(dir);
    try {
      const i = c.info;
      return (
        i.documents === a.docs &&
        i.dim === a.dim &&
        i.dtype === a.dtype &&
        i.deleted === 0 &&
        i.tokens === a.docs * a.docLen
      );
    } finally {
      c.close();
    }
  } catch {
    return false;
  }
}

/** Distinct random unit tokens the float corpora's documents draw their rows from. */
const POOL_TOKENS = 1 << 16;

/** The pool of POOL_TOKENS random unit tokens of `dim`, encoded in `dtype`, as bytes. */
export function rowPool(rng: Rng, dim: number, dtype: 'float32' | 'float16' | 'bfloat16') {
  const floats = randomUnitTokens(rng, POOL_TOKENS, dim);
  const encoded = dtype === 'float32' ? floats : encodeFloats(floats, dtype);
  const bytes = Buffer.from(encoded.buffer, encoded.byteOffset, encoded.byteLength);
  return { bytes, rowBytes: bytes.length / POOL_TOKENS };
}

/** Fills the first `rows` rows of `into` with rows of the pool drawn at random. */
export function copyPoolRows(rng: Rng, pool: ReturnType<typeof rowPool>, into: Buffer, rows: number) {
  for (let r = 0; r < rows; r++) {
    const t = rng.int(POOL_TOKENS);
    pool.bytes.copy(into, r * pool.rowBytes, t * pool.rowBytes, (t + 1) * pool.rowBytes);
  }
}

export function buildCorpus(a: Args, dir: string) {
  const rng = new Rng(11);
  const w = CorpusWriter.create(dir, { dim: a.dim, dtype: a.dtype });
  // chunks of ~16 MiB of rows, written with one call each
  const chunk = Math.max(1, Math.floor((1 << 23) / (a.docLen * a.dim)));
  if (a.dtype === 'int8') {
    // quantized per token by the writer (the CPU's AMX / VNNI int8 kernels score it); CPU-sized corpora
    for (let at = 0; at < a.docs; at += chunk) {
      const n = Math.min(chunk, a.docs - at);
      const floats = randomUnitTokens(rng, n * a.docLen, a.dim);
      w.add(
        raggedBatch(
          floats,
          Array.from({ length: n + 1 }, (_, i) => i * a.docLen),
          { dim: a.dim },
        ),
      );
    }
    w.commit();
    return;
  }
  // Float corpora: every row a copy of one of 65,536 random unit tokens (drawing 1.6 G normal values for
  // 100,000 x 128 x 128 took 37-50 s of the GPU host's time on every run; copying rows takes ~1 s). The
  // kernels' work does not depend on the values; documents still differ (128 of 65,536 rows each), so
  // the top-k is a real ranking.
  const pool = rowPool(rng, a.dim, a.dtype);
  // its own ArrayBuffer (offset 0: aligned for the typed views below)
  const bytes = Buffer.allocUnsafeSlow(chunk * a.docLen * pool.rowBytes);
  for (let at = 0; at < a.docs; at += chunk) {
    const n = Math.min(chunk, a.docs - at);
    const rows = n * a.docLen;
    copyPoolRows(rng, pool, bytes, rows);
    const data =
      a.dtype === 'float32'
        ? new Float32Array(bytes.buffer, bytes.byteOffset, rows * a.dim)
        : new Uint16Array(bytes.buffer, bytes.byteOffset, rows * a.dim);
    w.addEncoded({ data, lengths: new Int32Array(n).fill(a.docLen) });
  }
  w.commit();
}

export function startServer(
  a: Args,
  corpus: string,
  maxBatch: number,
  passDtype = a.passDtype,
): Promise<{ child: ChildProcess; url: string }> {
  const args = [
    CLI,
    'serve',
    '--corpus',
    corpus,
    '--port',
    '0',
    '--backend',
    a.backend,
    '--max-batch',
    String(maxBatch),
    '--max-wait-ms',
    String(a.maxWaitMs),
    '--log-level',
    'warn',
    // the queue holds every connection's request: the bench measures throughput, not refusals
    '--max-queue',
    String(Math.max(1024, 4 * a.connections)),
    ...(a.threads ? ['--threads', String(a.threads)] : []),
    ...(a.passesInFlight ? ['--passes-in-flight', String(a.passesInFlight)] : []),
    ...(passDtype ? ['--dtype', passDtype] : []),
  ];
  const child = spawn(
    process.execPath,
    [...(process.env.MAXSIM_SERVER_NODE_ARGS?.split(' ').filter(Boolean) ?? []), ...args],
    { stdio: ['ignore', 'inherit', 'pipe'] },
  );
  return new Promise((resolve, reject) => {
    let err = '';
    const timer = setTimeout(() => reject(new Error(`the server did not start in 120 s: ${err}`)), 120_000);
    child.stderr!.on('data', (d) => {
      err += String(d);
      const m = /listening on (http:\/\/\S+)/.exec(err);
      if (m) {
        clearTimeout(timer);
        resolve({ child, url: m[1] });
      }
    });
    child.on('exit', (code) => reject(new Error(`the server exited with ${code}: ${err}`)));
  });
}

export interface Agreement {
  queries: number;
  /** Top-k lists equal to the exact server's (same documents in order; near ties may swap). */
  equal: number;
  /** Exact top-k documents absent from the 8-bit answer, over all queries. */
  missed: number;
  maxScoreDiff: number;
}

/** The 8-bit server's answers to `bodies` against an exact server's (started here on the same corpus). */
export async function againstExact(
  a: Args,
  corpus: string,
  url: string,
  bodies: string[],
): Promise<Agreement> {
  const exact = await startServer(a, corpus, a.maxBatch, undefined);
  type Row = { id: string; score: number }[];
  const ask = async (at: string, body: string): Promise<Row> => {
    const r = await fetch(`${at}/v1/search`, { method: 'POST', headers: HEADERS, body });
    if (r.status !== 200) throw new Error(`search: ${r.status} ${await r.text()}`);
    return ((await r.json()) as { results: Row[] }).results[0];
  };
  const out: Agreement = { queries: bodies.length, equal: 0, missed: 0, maxScoreDiff: 0 };
  try {
    for (const body of bodies) {
      const [want, got] = await Promise.all([ask(exact.url, body), ask(url, body)]);
      const ids = new Set(got.map((h) => h.id));
      out.missed += want.filter((h) => !ids.has(h.id)).length;
      let same = got.length === want.length;
      for (let i = 0; same && i < want.length; i++) {
        const d = Math.abs(got[i].score - want[i].score);
        out.maxScoreDiff = Math.max(out.maxScoreDiff, d);
        const tol = 1e-4 * Math.max(1, Math.abs(want[i].score));
        same =
          d <= tol &&
          (got[i].id === want[i].id ||
            want.some((h) => h.id === got[i].id && Math.abs(h.score - got[i].score) <= tol));
      }
      if (same) out.equal++;
    }
  } finally {
    await stopServer(exact.child);
  }
  return out;
}

export async function stopServer(child: ChildProcess): Promise<number | null> {
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  child.kill('SIGTERM');
  return exited;
}

export interface Server {
  child: ChildProcess;
  url: string;
  maxBatch: number;
}

export const HEADERS = { 'content-type': 'application/json' };
