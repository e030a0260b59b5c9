// Readers follow the corpus directory (src/io/corpus/reader.ts, handles.ts; src/ops/corpus-search.ts;
// src/server/resident.ts): a Corpus or a server opened before another writer deletes, compacts or
// appends answers from the newer generation on its next search, never from files that are gone, and
// every answer belongs to one generation. Documents are a pure function of their id, on a grid of
// values exact in float16, so every score is checked exactly against a float64 reference.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { CorpusFile, CorpusWriter, deleteDocuments, MissingIdsError } from '../src/io/corpus/index.js';
import { writeNpy } from '../src/io/npy.js';
import { type CorpusHit, openCorpus } from '../src/ops/corpus-search.js';
import { createServer } from '../src/server/index.js';
import { ResidentCorpus } from '../src/server/resident.js';
import { raggedBatch, type TokenBatch } from '../src/tensor.js';
import { rng } from './helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-corpus-follow-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));
let serial = 0;
const fresh = () => path.join(tmp, `c${serial++}.msx`);
const CLI = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
const run = promisify(execFile);
const cli = (...args: string[]) =>
  run(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 60_000 });

const DIM = 8;

/** The tokens of document `id` (`x<n>`): 1-4 rows of multiples of 1/8 in [-1, 1] (exact in float16). */
function tokensOf(id: string): number[][] {
  const n = Number(id.slice(1));
  const rand = rng(1000 + n);
  return Array.from({ length: 1 + (n % 4) }, () =>
    Array.from({ length: DIM }, () => Math.round(rand() * 16 - 8) / 8),
  );
}

function batchOf(ids: readonly string[]): TokenBatch {
  const rows = ids.map(tokensOf);
  const offsets = [0];
  for (const r of rows) offsets.push(offsets[offsets.length - 1] + r.length);
  return raggedBatch(Float32Array.from(rows.flat(2)), offsets, { dim: DIM });
}

const QUERIES = [0, 1, 2].map((i) => {
  const rand = rng(77 + i);
  return Array.from({ length: 3 }, () => Array.from({ length: DIM }, () => Math.round(rand() * 16 - 8) / 8));
});
const Q = raggedBatch(Float32Array.from(QUERIES.flat(2)), [0, 3, 6, 9], { dim: DIM });

/** MaxSim of query `q` and document `id` in float64 (exact here: every value is on a 1/64 grid). */
function reference(q: number, id: string): number {
  const d = tokensOf(id);
  let total = 0;
  for (const t of QUERIES[q]) {
    let best = Number.NEGATIVE_INFINITY;
    for (const r of d)
      best = Math.max(
        best,
        r.reduce((a, x, j) => a + x * t[j], 0),
      );
    total += best;
  }
  return total;
}

/** Checks hits against the live ids of their generation: live, exact scores, the true top-k scores. */
function checkHits(hits: CorpusHit[][], live: readonly string[], k: number, context: string) {
  hits.forEach((row, q) => {
    assert.equal(row.length, Math.min(k, live.length), `${context}: query ${q} hit count`);
    const alive = new Set(live);
    for (const h of row) {
      assert.ok(alive.has(h.id), `${context}: query ${q} returned ${h.id}, not live in its generation`);
      assert.equal(h.score, reference(q, h.id), `${context}: query ${q} score of ${h.id}`);
    }
    const best = live
      .map((id) => reference(q, id))
      .sort((a, b) => b - a)
      .slice(0, k);
    assert.deepEqual(
      row.map((h) => h.score),
      best,
      `${context}: query ${q} is not the top ${k} of its generation`,
    );
  });
}

function build(dir: string, ids: string[]) {
  const w = CorpusWriter.create(dir, { dim: DIM, dtype: 'float16', ids: true });
  w.add(batchOf(ids), ids);
  w.commit();
}

/** The .npy files and id list of documents to append with the CLI. */
function appendFiles(ids: string[]): string[] {
  const b = batchOf(ids);
  const base = path.join(tmp, `add${serial++}`);
  const offsets = new BigInt64Array(b.count + 1);
  for (let i = 0; i < b.count; i++) offsets[i + 1] = offsets[i] + BigInt(b.lengths[i]);
  writeNpy(`${base}.npy`, { dtype: 'float32', shape: [b.data.length / DIM, DIM], data: b.data });
  writeNpy(`${base}.off.npy`, { dtype: 'int64', shape: [b.count + 1], data: offsets });
  fs.writeFileSync(`${base}.ids`, `${ids.join('\n')}\n`);
  return ['--docs', `${base}.npy`, '--doc-offsets', `${base}.off.npy`, '--ids', `${base}.ids`];
}

function idFile(ids: string[]): string {
  const f = path.join(tmp, `ids${serial++}.txt`);
  fs.writeFileSync(f, `${ids.join('\n')}\n`);
  return f;
}

const names = (n: number, from = 0) => Array.from({ length: n }, (_, i) => `x${from + i}`);

describe('a library Corpus follows its directory', () => {
  test('documents deleted after the Corpus was opened never come back (search and get)', async () => {
    const dir = fresh();
    const ids = names(30);
    build(dir, ids);
    const corpus = openCorpus(dir);
    const before = await corpus.search(Q, { topK: 30, backend: 'cpu' });
    checkHits(before, ids, 30, 'before');
    const gone = ['x3', 'x17', 'x29'];
    CorpusWriter.delete(dir, gone);
    const live = ids.filter((id) => !gone.includes(id));
    const r = await corpus.searchWithStats(Q, { topK: 30, backend: 'cpu' });
    checkHits(r.hits, live, 30, 'after the delete');
    assert.equal(r.stats.generation, 2);
    assert.throws(() => corpus.get(['x17']), MissingIdsError);
    assert.equal(corpus.get(['x4']).count, 1);
    corpus.close();
  });

  test('a compaction by another process: the next search reads the new segment, a pinned snapshot the old files', async () => {
    const dir = fresh();
    const ids = names(40);
    build(dir, ids);
    const w = CorpusWriter.append(dir);
    w.add(batchOf(names(10, 40)), names(10, 40));
    w.commit();
    deleteDocuments(dir, ['x1', 'x41']);
    const corpus = openCorpus(dir);
    const held = corpus.file.retain();
    const oldSegments = held.segments.map((s) => s.file);
    await cli('corpus', 'compact', dir, '--json');
    for (const f of oldSegments) assert.equal(fs.existsSync(f), false, `${f} was removed by the compaction`);
    const live = names(50).filter((id) => id !== 'x1' && id !== 'x41');
    const r = await corpus.searchWithStats(Q, { topK: 7, backend: 'cpu' });
    checkHits(r.hits, live, 7, 'after the compaction');
    assert.equal(corpus.file.segments.length, 1);
    // the snapshot opened before still reads its (removed) files, through its descriptors
    const docs = held.readDocuments([0, 45]);
    assert.deepEqual(Array.from(docs.lengths), [tokensOf('x0').length, tokensOf('x45').length]);
    held.verify();
    held.close();
    corpus.close();
  });

  test('another process appends, deletes and compacts while a Corpus searches: every answer is one generation', async () => {
    const dir = fresh();
    let ids = names(40);
    build(dir, ids);
    const corpus = openCorpus(dir);
    const live = new Map<number, string[]>([[corpus.info.generation, ids]]);
    let generation = corpus.info.generation;
    let next = 40;
    const rand = rng(5);
    const ops = ['append', 'delete', 'compact', 'append', 'delete', 'delete', 'compact', 'append'];
    let done = false;
    const writer = (async () => {
      try {
        for (const op of ops) {
          let args: string[];
          if (op === 'append') {
            const added = names(6, next);
            next += 6;
            ids = [...ids, ...added];
            args = ['corpus', 'append', '--out', dir, ...appendFiles(added), '--json'];
          } else if (op === 'delete') {
            const gone = [0, 1, 2].map(() => ids[Math.floor(rand() * ids.length)]);
            ids = ids.filter((id) => !gone.includes(id));
            args = ['corpus', 'delete', dir, '--ids', idFile([...new Set(gone)]), '--json'];
          } else args = ['corpus', 'compact', dir, '--json'];
          // recorded before the write publishes it: a search may see it at once
          live.set(generation + 1, ids);
          const { stdout } = await cli(...args);
          generation = JSON.parse(stdout).generation;
          assert.equal(live.has(generation), true, `${op} published generation ${generation}`);
        }
      } finally {
        done = true;
      }
    })();
    const seen = new Set<number>();
    let searches = 0;
    while (!done) {
      const r = await corpus.searchWithStats(Q, { topK: 5, backend: 'cpu' });
      const g = r.stats.generation!;
      seen.add(g);
      checkHits(r.hits, live.get(g)!, 5, `search ${searches} on generation ${g}`);
      searches++;
      await new Promise((r) => setTimeout(r, 5));
    }
    await writer;
    const last = await corpus.searchWithStats(Q, { topK: 5, backend: 'cpu' });
    assert.equal(last.stats.generation, generation);
    checkHits(last.hits, live.get(generation)!, 5, 'the last search');
    assert.ok(
      seen.size >= 3,
      `searches saw ${seen.size} generations (${[...seen].join(', ')}) in ${searches}`,
    );
    corpus.close();
  });

  test('deletes with ignoreMissing skip ids that are not live and list them', () => {
    const dir = fresh();
    build(dir, names(10));
    const first = deleteDocuments(dir, ['x2', 'x5']);
    assert.deepEqual(first.deleted, [2, 5]);
    assert.throws(
      () => deleteDocuments(dir, ['x2', 'x6']),
      (e: unknown) => e instanceof MissingIdsError && e.missing.join() === 'x2',
    );
    assert.equal(CorpusFile.open(dir).info.deleted, 2, 'a failed delete deletes nothing');
    const again = deleteDocuments(dir, ['x2', 'x6', 'nope', 'x6'], { ignoreMissing: true });
    assert.deepEqual(again.deleted, [6]);
    assert.deepEqual(again.absent, ['x2', 'nope']);
    const none = deleteDocuments(dir, ['x2'], { ignoreMissing: true });
    assert.deepEqual(none.deleted, []);
    assert.equal(none.info.generation, again.info.generation, 'nothing to delete: nothing published');
  });
});

describe('a server follows its directory', () => {
  const servers: { close(): Promise<void> }[] = [];
  after(async () => {
    for (const s of servers) await s.close();
  });
  async function start(corpus: string) {
    const server = await createServer({ backend: 'cpu', port: 0, logger: false, corpus });
    servers.push(server);
    return (await server.listen()).url;
  }
  async function post(url: string, body: unknown, method = 'POST') {
    const r = await fetch(url, {
      method,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const text = await r.text();
    return { status: r.status, text, json: JSON.parse(text) };
  }

  test('after a CLI delete and a CLI compact: no deleted document, no 500, rerank by id on the new files', async () => {
    const dir = fresh();
    const ids = names(30);
    build(dir, ids);
    const url = await start(dir);
    const search = () => post(`${url}/v1/search`, { queries: QUERIES, top_k: 30 });
    let r = await search();
    assert.equal(r.status, 200, r.text);
    await cli('corpus', 'delete', dir, '--ids', idFile(['x7', 'x8']));
    const live = ids.filter((id) => id !== 'x7' && id !== 'x8');
    r = await search();
    assert.equal(r.status, 200, r.text);
    checkHits(r.json.results, live, 30, 'server after the CLI delete');
    const gone = await post(`${url}/v1/rerank`, { query: QUERIES[0], candidates: ['x7'] });
    assert.equal(gone.status, 404, gone.text);
    await cli('corpus', 'compact', dir);
    r = await search();
    assert.equal(r.status, 200, r.text);
    checkHits(r.json.results, live, 30, 'server after the CLI compact');
    const rr = await post(`${url}/v1/rerank`, { query: QUERIES[1], candidates: ['x9', 'x0', 'x29'] });
    assert.equal(rr.status, 200, rr.text);
    for (const h of rr.json.results) assert.equal(h.relevance_score, reference(1, h.id));
  });

  test('two servers on one corpus: first_index, 409 and 404 come from the corpus as the write found it', async () => {
    const dir = fresh();
    build(dir, names(20));
    const a = await start(dir);
    const b = await start(dir);
    const doc = (id: string) => ({ id, embeddings: tokensOf(id) });
    const one = await post(`${a}/v1/documents`, { documents: [doc('x20'), doc('x21')] });
    assert.equal(one.status, 201, one.text);
    assert.equal(one.json.first_index, 20);
    const dup = await post(`${b}/v1/documents`, { documents: [doc('x21')] });
    assert.equal(dup.status, 409, dup.text);
    const two = await post(`${b}/v1/documents`, { documents: [doc('x22')] });
    assert.equal(two.status, 201, two.text);
    assert.equal(two.json.first_index, 22, 'b appended after the documents a added');
    assert.equal(two.json.documents, 23);
    const del = await post(`${a}/v1/documents`, { ids: ['x5'] }, 'DELETE');
    assert.equal(del.status, 200, del.text);
    const again = await post(`${b}/v1/documents`, { ids: ['x5'] }, 'DELETE');
    assert.equal(again.status, 404, again.text);
    const r = await post(`${b}/v1/search`, { queries: QUERIES, top_k: 30 });
    const live = names(23).filter((id) => id !== 'x5');
    checkHits(r.json.results, live, 30, 'b after both wrote');
  });

  test('ResidentCorpus: ids resolved on one snapshot are scored on the snapshot that holds them', async () => {
    const dir = fresh();
    build(dir, names(20));
    const resident = await ResidentCorpus.open({ corpus: dir, backend: 'cpu' });
    try {
      const indices = resident.resolveIds(['x15', 'x16'], 'candidates');
      assert.deepEqual(indices, [15, 16]);
      // another process deletes documents before them and compacts: indices shift by two
      deleteDocuments(dir, ['x1', 'x2']);
      CorpusWriter.compact(dir);
      const scores = await resident.scoreDocumentsAll(Q, indices);
      for (let q = 0; q < 3; q++)
        assert.deepEqual(Array.from(scores.subarray(q * 2, q * 2 + 2)), [
          reference(q, 'x15'),
          reference(q, 'x16'),
        ]);
      const byId = await resident.scoreIds(Q, ['x16'], 'ids');
      assert.deepEqual(byId.indices, [14]);
      assert.equal(byId.scores[0], reference(0, 'x16'));
      assert.equal(resident.info.live, 18);
      const d = await resident.delete(['x16', 'x1', 'zz'], { ignoreMissing: true });
      assert.deepEqual([d.deleted, d.absent, d.info.deleted], [1, ['x1', 'zz'], 1]);
    } finally {
      await resident.close();
    }
  });
});
