// The compressed index on the GPU (issue 33's GPU target): the streamed synthetic corpus (default 1M
// documents x 64 tokens x d = 128, float16) generated on this host by worker threads, the exhaustive
// float16 scan on the GPU (our top-K kernels) as the recall reference and the baseline, the index
// built with backend 'cuda' (k-means assignment and encode on the GPU), then for a grid of
// nprobe x candidates x rescore: queries/s with every query in one batched call, and one-query p50,
// with recall@10 / @100 against the exhaustive scan. --torch times PyTorch's exhaustive scan (a
// random corpus of the same shape, fp16 matmul + max + sum + topk) in the same run.
//
// Run: node dist/bench/plaid-gpu.js [--docs 1000000] [--length 64] [--dim 128] [--topics 2000]
//        [--queries 1000] [--lq 32] [--single 200] [--centroids K] [--bits 2] [--torch]
//        [--grid NPROBExCANDIDATESxRESCORE,...] [--precision default,float32] [--json FILE]
// --precision: the product stages' arithmetic of every grid row (StagePrecision, or 'default': the
// option left out, as users call it), each in turn.
// 10M documents (--docs 10000000 --length 32: 82 GB of tokens, ~91 GiB RSS) need Node 22: the index's
// codes are one typed array past Node 20's 4 GiB.
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import os from 'node:os';
import { Worker } from 'node:worker_threads';
import { cuda } from '../src/backends/cuda.js';
import type { StagePrecision } from '../src/plaid/cuda-plan.js';
import { cudaSearchBatch, deviceIndex } from '../src/plaid/cuda-search.js';
import { buildIndex } from '../src/plaid/plaid.js';
import { streamedQueries, streamedSynthetic } from '../src/plaid/synthetic.js';
import { denseBatch, raggedBatch, type TokenBatch } from '../src/tensor.js';
import { arg, pct } from './plaid-common.js';

const DOCS = Number(arg('docs', '1000000'));
const LEN = Number(arg('length', '64'));
const DIM = Number(arg('dim', '128'));
const TOPICS = Number(arg('topics', '2000'));
const NQ = Number(arg('queries', '1000'));
const LQ = Number(arg('lq', '32'));
const SINGLE = Number(arg('single', '200'));
const K = arg('centroids', '');
const BITS = Number(arg('bits', '2')) as 2 | 4;
const GRID = arg('grid', '8x1024x64,16x1024x64,16x2048x128,24x2048x128,32x2048x128,32x4096x256');
const JSON_OUT = arg('json', '');
const PRECISIONS = arg('precision', 'default,float32').split(',') as (StagePrecision | 'default')[];
const load = () => `load ${os.loadavg()[0].toFixed(1)}`;
const log = (m: string) =>
  console.log(`${m} [${load()}, RSS ${(process.memoryUsage().rss / 2 ** 30).toFixed(1)} GiB]`);
const out: Record<string, unknown> = {
  docs: DOCS,
  length: LEN,
  dim: DIM,
  topics: TOPICS,
  queries: NQ,
  lq: LQ,
};

// ---- corpus: parts of at most 65,536 documents, generated in parallel -------------------------
const o = { docs: DOCS, length: LEN, dim: DIM, topics: TOPICS, seed: 1 };
const PART = Math.min(65536, Math.ceil(DOCS / os.cpus().length));
let t0 = performance.now();
const ranges: [number, number][] = [];
for (let b = 0; b < DOCS; b += PART) ranges.push([b, Math.min(DOCS, b + PART)]);
const parts: TokenBatch[] = new Array(ranges.length);
let nextRange = 0;
await Promise.all(
  Array.from({ length: Math.min(os.cpus().length, ranges.length) }, async () => {
    while (nextRange < ranges.length) {
      const i = nextRange++;
      const [b0, b1] = ranges[i];
      const r = await new Promise<{ half: Uint16Array; lengths: Int32Array }>((res, rej) => {
        const w = new Worker(new URL('./plaid-gen-worker.js', import.meta.url), {
          workerData: { o, b0, b1 },
        });
        w.once('message', res);
        w.once('error', rej);
      });
      const offsets = new Float64Array(r.lengths.length + 1);
      for (let j = 0; j < r.lengths.length; j++) offsets[j + 1] = offsets[j] + r.lengths[j];
      parts[i] = raggedBatch(r.half, offsets, { dim: DIM, dtype: 'float16' });
    }
  }),
);
out.genMs = performance.now() - t0;
log(
  `corpus: ${DOCS} docs x ${LEN} x d ${DIM}, ${TOPICS} topics, float16, ${parts.length} parts, generated in ${(Number(out.genMs) / 1000).toFixed(1)} s`,
);
const gen = streamedSynthetic(o);
const qs = streamedQueries(gen, NQ, LQ, 2);
const qbatch = denseBatch(qs.data, { count: NQ, length: LQ, dim: DIM });

// ---- exhaustive float16 scan on the GPU: the reference and the baseline -----------------------
const dev = await cuda();
const top: { id: number; s: number }[][] = Array.from({ length: NQ }, () => []);
let scanMs = 0;
let first = 0;
for (const p of parts) {
  const dc = await dev.upload(p);
  await dc.topK(denseBatch(qs.data.subarray(0, LQ * DIM), { count: 1, length: LQ, dim: DIM }), 10); // warm
  const t = performance.now();
  const hits = await dc.topK(qbatch, 100);
  scanMs += performance.now() - t;
  hits.forEach((hs, q) => {
    for (const h of hs) top[q].push({ id: first + h.index, s: h.score });
    top[q].sort((a, b) => b.s - a.s || a.id - b.id);
    top[q].length = Math.min(100, top[q].length);
  });
  first += p.count;
  dc.dispose();
}
const exact = top.map((c) => c.map((e) => e.id));
out.scanQps = NQ / (scanMs / 1000);
log(
  `exhaustive float16 scan (GPU, topK 100, ${NQ} queries batched per part): ${(scanMs / 1000).toFixed(2)} s, ${Number(out.scanQps).toFixed(0)} queries/s`,
);

// ---- PyTorch exhaustive scan (same shapes, random fp16 data) ------------------------------------
if (process.argv.includes('--torch')) {
  const py = `
import torch, time
N, L, D, Q, LQ = ${DOCS}, ${LEN}, ${DIM}, ${NQ}, ${LQ}
g = torch.Generator(device='cuda').manual_seed(0)
docs = torch.randn(N, L, D, device='cuda', dtype=torch.float16, generator=g)
docs = docs / docs.norm(dim=-1, keepdim=True)
q = torch.randn(Q, LQ, D, device='cuda', dtype=torch.float16, generator=g)
q = q / q.norm(dim=-1, keepdim=True)
def scan():
    out = torch.empty(Q, N, device='cuda', dtype=torch.float32)
    qc, dc = 100, 16384
    for a in range(0, Q, qc):
        qa = q[a:a+qc].reshape(-1, D)
        for b in range(0, N, dc):
            s = qa @ docs[b:b+dc].reshape(-1, D).T
            n = min(dc, N - b)
            out[a:a+qc, b:b+n] = s.view(qa.shape[0] // LQ, LQ, n, L).amax(-1).float().sum(1)
    return torch.topk(out, 100, dim=1)
scan(); torch.cuda.synchronize()
t = time.perf_counter(); scan(); torch.cuda.synchronize(); dt = time.perf_counter() - t
print(f"torch {torch.__version__} exhaustive fp16 scan: {dt:.3f} s, {Q / dt:.0f} queries/s")
`;
  const r = spawnSync('python3', ['-c', py], { encoding: 'utf8' });
  const line = (r.stdout || r.stderr || '').trim().split('\n').at(-1);
  out.torch = line;
  log(`PyTorch: ${line}`);
}

// ---- the index ------------------------------------------------------------------------------
t0 = performance.now();
const index = await buildIndex(parts, {
  bits: BITS,
  centroids: K ? Number(K) : undefined,
  backend: 'cuda',
  onProgress: (p) => {
    if (p.stage === 'kmeans') log(`  build kmeans ${p.done}/${p.total} at ${(p.ms / 1000).toFixed(1)} s`);
  },
});
const bs = index.buildStats;
out.build = { ms: performance.now() - t0, ...bs };
log(
  `build (backend ${bs.backend}): ${((performance.now() - t0) / 1000).toFixed(1)} s (k-means + buckets ${(bs.msKmeans / 1000).toFixed(1)} s, encode ${(bs.msEncode / 1000).toFixed(1)} s, lists ${(bs.msLists / 1000).toFixed(1)} s); K = ${bs.centroids}, ${bs.assignment} (${bs.groups} groups, probe ${bs.probe}), ${bs.bytesPerToken.toFixed(2)} bytes/token, relative squared error ${(bs.meanSquaredError / bs.meanSquaredNorm).toFixed(4)}`,
);
t0 = performance.now();
const up = await deviceIndex(index);
out.uploadMs = performance.now() - t0;
log(
  `device index: ${(up.bytes / 2 ** 30).toFixed(2)} GiB (codes, ids, lists, centroids + float16 tokens) uploaded in ${(Number(out.uploadMs) / 1000).toFixed(1)} s`,
);

// ---- the grid --------------------------------------------------------------------------------
const rows: unknown[] = [];
const slice = (q0: number, n: number) =>
  denseBatch(qs.data.subarray(q0 * LQ * DIM, (q0 + n) * LQ * DIM), { count: n, length: LQ, dim: DIM });
console.log(
  'precision nprobe candidates rescore | recall@10 q/s (k 10) | recall@100 q/s (k 100) | 1-query p50 p90 ms | top-10 found in: generated kept final | generated/query | k 10 batch ms: centroids lists interaction residual rescore (probe of centroids) native-total wall-median-of-3',
);
for (const g of GRID.split(',').flatMap((g) => PRECISIONS.map((p) => [g, p] as const))) {
  const [spec, named] = g;
  const precision = named === 'default' ? undefined : named;
  // NPROBExCANDIDATESxRESCORE, optionally tTHRESHOLD (PLAID's centroid pruning)
  const [head, th] = spec.split('t');
  const [nprobe, candidates, rescore] = head.split('x').map(Number);
  const threshold = th === undefined ? Number.NEGATIVE_INFINITY : Number(th);
  const runs: Record<number, { recall: number; qps: number; stages: number[]; generated: number }> = {};
  for (const k of [10, 100]) {
    const o = { k, nprobe, candidates, rescore: Math.max(k, rescore), threshold, precision };
    await cudaSearchBatch(index, slice(0, 50), o);
    // the median of three batched calls (the host's share moves between calls)
    const walls: number[] = [];
    let r = await cudaSearchBatch(index, slice(0, 1), o);
    for (let rep = 0; rep < 3; rep++) {
      const t = performance.now();
      r = await cudaSearchBatch(index, qbatch, o);
      walls.push(performance.now() - t);
    }
    const wall = pct(walls, 0.5);
    let found = 0;
    r.results.forEach((res, q) => {
      const truth = new Set(exact[q].slice(0, k));
      for (const h of res.hits) if (truth.has(h.index)) found++;
    });
    const b = r.batch;
    runs[k] = {
      recall: found / (k * NQ),
      qps: NQ / (wall / 1000),
      stages: [
        b.msCentroids,
        b.msCandidates,
        b.msInteraction,
        b.msResidual,
        b.msRescore,
        b.msProbe,
        b.msTotal,
        wall,
      ],
      generated: b.generated / NQ,
    };
  }
  // where the true top 10 are lost: the first 20 queries' stage outputs
  const diag = await cudaSearchBatch(index, slice(0, 20), {
    k: rescore,
    nprobe,
    candidates,
    rescore,
    stages: true,
    precision,
  });
  const lost = [0, 0, 0];
  diag.stages?.forEach((st, q) => {
    const sets = [
      new Set(st.candidates),
      new Set(st.kept),
      new Set(diag.results[q].hits.map((h) => h.index)),
    ];
    for (const id of exact[q].slice(0, 10))
      sets.forEach((set, j) => {
        if (set.has(id)) lost[j]++;
      });
  });
  const lat: number[] = [];
  const o10 = { k: 10, nprobe, candidates, rescore, threshold, precision };
  for (let i = 0; i < Math.min(SINGLE, NQ); i++) {
    const ts = performance.now();
    await cudaSearchBatch(index, slice(i, 1), o10);
    lat.push(performance.now() - ts);
  }
  const row = {
    precision: named === 'default' ? `default (${diag.precision})` : named,
    nprobe,
    candidates,
    rescore,
    threshold,
    recall10: runs[10].recall,
    qps10: runs[10].qps,
    recall100: runs[100].recall,
    qps100: runs[100].qps,
    p50: pct(lat, 0.5),
    p90: pct(lat, 0.9),
    foundIn: lost.map((f) => f / 200),
    generated: runs[10].generated,
    stages10: runs[10].stages,
  };
  rows.push(row);
  console.log(
    `${row.precision} ${nprobe} ${candidates} ${rescore}${th === undefined ? '' : ` t${th}`} | ${row.recall10.toFixed(3)} ${row.qps10.toFixed(0)} | ${row.recall100.toFixed(3)} ${row.qps100.toFixed(0)} | ${row.p50.toFixed(2)} ${row.p90.toFixed(2)} | ${row.foundIn.map((v) => v.toFixed(3)).join(' ')} | ${row.generated.toFixed(0)} | ${row.stages10.map((v) => v.toFixed(1)).join(' ')} | ${load()}`,
  );
}
out.grid = rows;
if (JSON_OUT) writeFileSync(JSON_OUT, JSON.stringify(out, null, 1));
log('done');
process.exit(0);
