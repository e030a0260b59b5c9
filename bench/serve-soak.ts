// Soak of `maxsim serve` against CLI writers (issue 32, not CI): one server process on a corpus while
// this script appends, deletes and compacts it with the `maxsim corpus` CLI in a loop. After every
// write, the reference is the corpus opened afresh in this process (the snapshot the write produced);
// a burst of searches and reranks to the server must give exactly the reference's answer (ids and
// scores) within a settle time, and no answer may be a 5xx, during or after the write.
// Run: node dist/bench/serve-soak.js [minutes=5]
// Prints one JSON line per minute and a summary; exit 1 on any wrong answer or 5xx.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { CorpusWriter, raggedBatch } from '../src/index.js';
import { openCorpus } from '../src/ops/corpus-search.js';
import { writeNpy } from '../src/subpaths/io.js';

const minutes = Number(process.argv[2] ?? 5);
const DIM = 16;
const CLI = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-serve-soak-'));
const dir = path.join(tmp, 'soak.msx');
// how long the server may take to follow a write made by another process (a stat per request)
const SETTLE_MS = 2000;

let seed = 12345;
function rand(): number {
  seed = (seed * 1103515245 + 12345) % 2 ** 31;
  return seed / 2 ** 31;
}
const tokens = (n: number) => Float32Array.from({ length: n * DIM }, () => rand() * 2 - 1);

function cli(...args: string[]): { status: number | null; stderr: string } {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 60_000 });
  return { status: r.status, stderr: r.stderr };
}

/** `corpus append DIR` where DIR is positional, else the older `--out DIR`. */
function append(ids: string[]) {
  const lengths = ids.map(() => 1 + Math.floor(rand() * 12));
  const total = lengths.reduce((a, b) => a + b, 0);
  const docs = path.join(tmp, 'append.npy');
  const lens = path.join(tmp, 'lengths.npy');
  const idFile = path.join(tmp, 'ids.txt');
  writeNpy(docs, { dtype: 'float32', shape: [total, DIM], data: tokens(total) });
  writeNpy(lens, { dtype: 'int64', shape: [lengths.length], data: BigInt64Array.from(lengths.map(BigInt)) });
  fs.writeFileSync(idFile, `${ids.join('\n')}\n`);
  const common = ['--docs', docs, '--doc-lengths', lens, '--ids', idFile, '--wait', '30'];
  let r = cli('corpus', 'append', dir, ...common);
  if (r.status === 2) r = cli('corpus', 'append', '--out', dir, ...common);
  return r;
}

function remove(ids: string[]) {
  const idFile = path.join(tmp, 'delete.txt');
  fs.writeFileSync(idFile, `${ids.join('\n')}\n`);
  return cli('corpus', 'delete', dir, '--ids', idFile, '--wait', '30');
}

async function startServer(): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(
    process.execPath,
    [CLI, 'serve', '--corpus', dir, '--port', '0', '--backend', 'cpu', '--log-level', 'warn'],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  const url = await new Promise<string>((resolve, reject) => {
    let err = '';
    child.stderr!.on('data', (d) => {
      err += String(d);
      const m = /listening on (http:\/\/\S+)/.exec(err);
      if (m) resolve(m[1]);
    });
    child.on('exit', (code) => reject(new Error(`server exited ${code}: ${err}`)));
  });
  return { child, url };
}

interface Hit {
  id: string;
  score: number | null;
}

const probes = Array.from({ length: 4 }, () => Array.from({ length: 3 }, () => Array.from(tokens(1))));

/** The reference: the corpus as the last write left it, opened afresh. */
async function reference(): Promise<{ search: Hit[][]; live: string[] }> {
  const c = openCorpus(dir);
  try {
    const q = raggedBatch(Float32Array.from(probes.flat(2)), [0, 3, 6, 9, 12], { dim: DIM });
    const hits = await c.search(q, { topK: 5, backend: 'cpu' });
    const live: string[] = [];
    for (let i = 0; i < c.info.documents; i++) if (!c.file.isDeleted(i)) live.push(c.id(i));
    return {
      search: hits.map((row) =>
        row.map((h) => ({ id: h.id, score: Number.isFinite(h.score) ? h.score : null })),
      ),
      live,
    };
  } finally {
    c.close();
  }
}

const stats = { writes: 0, checks: 0, wrong: 0, stale: 0, fivexx: 0, other: 0, writeFailures: 0 };

async function serverSearch(url: string): Promise<{ status: number; hits?: Hit[][] }> {
  const r = await fetch(`${url}/v1/search`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ queries: probes, top_k: 5 }),
  });
  const json = (await r.json()) as { results?: Hit[][] };
  return {
    status: r.status,
    hits: json.results?.map((row) => row.map((h) => ({ id: h.id, score: h.score }))),
  };
}

/** Searches until the server gives the reference (counted stale meanwhile) or SETTLE_MS pass (wrong). */
async function check(url: string, want: Hit[][]) {
  const until = performance.now() + SETTLE_MS;
  const expected = JSON.stringify(want);
  for (;;) {
    const r = await serverSearch(url);
    stats.checks++;
    if (r.status >= 500) stats.fivexx++;
    else if (r.status !== 200) stats.other++;
    else if (JSON.stringify(r.hits) === expected) return;
    if (performance.now() > until) {
      stats.wrong++;
      console.error(`wrong answer: status ${r.status}, got ${JSON.stringify(r.hits)?.slice(0, 200)}`);
      return;
    }
    stats.stale++;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function main() {
  const w = CorpusWriter.create(dir, { dim: DIM, dtype: 'float16', ids: true });
  const n0 = 200;
  const lengths = Array.from({ length: n0 }, () => 1 + Math.floor(rand() * 12));
  const offsets = [0];
  for (const l of lengths) offsets.push(offsets[offsets.length - 1] + l);
  w.add(
    raggedBatch(tokens(offsets[n0]), offsets, { dim: DIM }),
    Array.from({ length: n0 }, (_, i) => `d${i}`),
  );
  w.commit();
  const { child, url } = await startServer();
  const t0 = Date.now();
  let next = n0;
  let minute = 0;
  // searches racing the writes: none may be a 5xx
  let racing = true;
  const racer = (async () => {
    while (racing) {
      const r = await serverSearch(url).catch(() => ({ status: 599 }));
      if (r.status >= 500) stats.fivexx++;
    }
  })();
  try {
    while (Date.now() - t0 < minutes * 60_000) {
      const { live } = await reference();
      const pick = rand();
      let r: { status: number | null; stderr: string };
      if (pick < 0.5) r = append(Array.from({ length: 1 + Math.floor(rand() * 4) }, () => `d${next++}`));
      else if (pick < 0.9 && live.length > 20) r = remove([live[Math.floor(rand() * live.length)]]);
      else r = cli('corpus', 'compact', dir, '--wait', '30');
      stats.writes++;
      if (r.status !== 0) {
        stats.writeFailures++;
        console.error(`write failed: ${r.stderr.trim()}`);
      }
      await check(url, (await reference()).search);
      if (Date.now() - t0 > (minute + 1) * 60_000)
        console.log(JSON.stringify({ minute: ++minute, ...stats }));
    }
  } finally {
    racing = false;
    await racer;
    child.kill('SIGTERM');
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  console.log(JSON.stringify({ done: true, minutes, ...stats }));
  if (stats.wrong > 0 || stats.fivexx > 0) process.exitCode = 1;
}

await main();
