// How much 8-bit scoring changes rankings, measured against fp32 on the same corpus: per-query
// Spearman rho of the scores, top-10 / top-20 overlap, recall@10 against planted truth (when the
// corpus has it), and how often the two-stage top-10 equals the exact top-10. int8 runs on the CPU;
// fp8 e4m3 exists only on the GPU and is reported when one is usable. Both formats are also measured
// with one scale per document (quantize(..., { scales: 'document' }); queries keep per-token scales),
// the format of the GPU's document-scale kernels. Every format is measured plain and centered (the
// documents less their token mean, src/ops/center.ts), whose scores add each query's shift back.

import { cuda } from '../backends/cuda.js';
import { cudaScoreFp8Host } from '../backends/cuda-host.js';
import { cudaUnavailableReason } from '../backends/select.js';
import { maxsim } from '../ops/maxsim.js';
import { quantize, type ScaleGranularity } from '../ops/quantize.js';
import { rankRows } from '../ops/shape.js';
import { twoStageTopK } from '../ops/two-stage.js';
import { type ScoreMatrix, selectItems, type TokenBatch } from '../tensor.js';

/** One 8-bit format against fp32 on the same corpus. */
export interface FormatFidelity {
  spearmanMean: number;
  spearmanMin: number;
  top10Overlap: number;
  top20Overlap: number;
  /**
   * Near-ties set aside: the fraction of queries whose fp32 gap between ranks 20 and 21 exceeds twice
   * their largest 8-bit score error (their top-20 is decided whatever the rounding), and the top-20
   * overlap over those queries (1 unless an 8-bit error exceeded the measured bound; NaN when no
   * query is decided).
   */
  top20Decided: number;
  top20OverlapDecided: number;
  /** recall@10 against the planted relevant documents; absent without planted truth. */
  recall10?: number;
}

export interface FidelityReport {
  name: string;
  /** Queries measured: all of them, or fewer when the time limit ran out (queriesRequested). */
  queries: number;
  queriesRequested: number;
  docs: number;
  spearmanMean: number;
  spearmanMin: number;
  top10Overlap: number;
  top20Overlap: number;
  top20Decided: number;
  top20OverlapDecided: number;
  /** recall@10 against the planted relevant documents, per method; absent without planted truth. */
  recall10?: { fp32: number; int8: number; twoStage: number };
  /** Fraction of queries whose two-stage top-10 equals the exact top-10 (indices, in order). */
  twoStageExact: number;
  /** fp8 e4m3 (scored on the GPU); `unavailable` says why when it could not run. */
  fp8: FormatFidelity | { unavailable: string };
  /** The documents with one scale per document (queries per token). */
  documentScales: { int8: FormatFidelity; fp8: FormatFidelity | { unavailable: string } };
  /** The same four formats with the documents centered (quantize(..., { center: true })). */
  centered: CenteredFidelity;
}

export interface CenteredFidelity {
  int8: FormatFidelity;
  fp8: FormatFidelity | { unavailable: string };
  documentScales: { int8: FormatFidelity; fp8: FormatFidelity | { unavailable: string } };
}

/** Ranks with ties averaged (Spearman needs them), for one row of finite or -Infinity scores. */
function ranks(row: Float32Array): Float64Array {
  const idx = Array.from(row.keys()).sort((a, b) => (row[a] < row[b] ? -1 : row[a] > row[b] ? 1 : a - b));
  const r = new Float64Array(row.length);
  for (let i = 0; i < idx.length; ) {
    let j = i;
    while (j + 1 < idx.length && row[idx[j + 1]] === row[idx[i]]) j++;
    for (let t = i; t <= j; t++) r[idx[t]] = (i + j) / 2;
    i = j + 1;
  }
  return r;
}

export function spearman(a: Float32Array, b: Float32Array): number {
  const ra = ranks(a);
  const rb = ranks(b);
  const n = ra.length;
  const mean = (n - 1) / 2;
  let num = 0;
  let da = 0;
  let db = 0;
  for (let i = 0; i < n; i++) {
    num += (ra[i] - mean) * (rb[i] - mean);
    da += (ra[i] - mean) ** 2;
    db += (rb[i] - mean) ** 2;
  }
  return da === 0 || db === 0 ? 1 : num / Math.sqrt(da * db);
}

function row(m: ScoreMatrix, i: number): Float32Array {
  return m.data.subarray(i * m.cols, (i + 1) * m.cols);
}

function overlap(a: number[], b: number[]): number {
  const s = new Set(a);
  return b.filter((x) => s.has(x)).length / Math.max(1, a.length);
}

function recallAt10(top: number[][], relevant: number[][]): number {
  let found = 0;
  let total = 0;
  top.forEach((hits, q) => {
    found += relevant[q].filter((r) => hits.includes(r)).length;
    total += relevant[q].length;
  });
  return total === 0 ? 1 : found / total;
}

/** fp8 scores of every query against every document: the corpus quantized to e4m3 on the GPU. */
async function fp8Scores(
  queries: TokenBatch,
  docs: TokenBatch,
  scales: ScaleGranularity,
  center: boolean,
): Promise<ScoreMatrix | string> {
  const why = cudaUnavailableReason();
  if (why) return `needs a GPU (${why})`;
  const gpu = await cuda();
  if (gpu.info.computeCapability[0] < 9) return 'fp8 e4m3 tensor cores need compute capability 9.0';
  return cudaScoreFp8Host(queries, docs, { scales, center });
}

const top = (m: ScoreMatrix, k: number) => rankRows(m, k).map((hits) => hits.map((h) => h.index));
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);

/**
 * Whether a query's top-k is decided under 8-bit rounding: its exact gap between ranks k and k + 1
 * exceeds twice the query's largest |8-bit - exact| score (then no document can cross the cut).
 */
function decided(exact: Float32Array, approx: Float32Array, k: number): boolean {
  if (exact.length <= k) return true;
  let err = 0;
  for (let b = 0; b < exact.length; b++)
    if (exact[b] !== approx[b]) err = Math.max(err, Math.abs(approx[b] - exact[b]));
  const sorted = Float32Array.from(exact).sort().reverse();
  return sorted[k - 1] - sorted[k] > 2 * err;
}

/** An 8-bit format's scores against the exact ones. */
function formatFidelity(exact: ScoreMatrix, approx: ScoreMatrix, relevant?: number[][]): FormatFidelity {
  const rhos = Array.from({ length: exact.rows }, (_, i) => spearman(row(exact, i), row(approx, i)));
  const [a10, a20] = [top(approx, 10), top(approx, 20)];
  const overlaps20 = top(exact, 20).map((e, i) => overlap(e, a20[i]));
  const kept = overlaps20.filter((_, i) => decided(row(exact, i), row(approx, i), 20));
  return {
    spearmanMean: mean(rhos),
    spearmanMin: Math.min(...rhos),
    top10Overlap: mean(top(exact, 10).map((e, i) => overlap(e, a10[i]))),
    top20Overlap: mean(overlaps20),
    top20Decided: kept.length / Math.max(1, exact.rows),
    top20OverlapDecided: kept.length > 0 ? mean(kept) : Number.NaN,
    recall10: relevant ? recallAt10(a10, relevant) : undefined,
  };
}

/** formatFidelity of the GPU's fp8 scores, or why they could not be had. */
async function fp8Fidelity(
  queries: TokenBatch,
  docs: TokenBatch,
  exact: ScoreMatrix,
  scales: ScaleGranularity,
  relevant?: number[][],
  center = false,
): Promise<FormatFidelity | { unavailable: string }> {
  const fp8 = await fp8Scores(queries, docs, scales, center);
  return typeof fp8 === 'string' ? { unavailable: fp8 } : formatFidelity(exact, fp8, relevant);
}

export interface FidelityRunOptions {
  /** After each batch of queries: how many are done of how many. */
  onProgress?: (done: number, total: number) => void;
  /** No new batch starts after this many ms (the first always runs); the report counts what ran. */
  timeLimitMs?: number;
  /** Queries per batch (default 16). */
  batch?: number;
}

/**
 * The report for one corpus (float documents and queries; int8 copies are made here), measured on
 * batches of queries until all are done or the time limit passes; the means are over the queries
 * that ran.
 */
export async function fidelity(
  name: string,
  queries: TokenBatch,
  docs: TokenBatch,
  relevant?: number[][],
  run: FidelityRunOptions = {},
): Promise<FidelityReport> {
  const docsInt8 = quantize(docs, 'int8');
  const docsInt8PerDoc = quantize(docs, 'int8', { scales: 'document' });
  const centered = {
    token: quantize(docs, 'int8', { center: true }),
    document: quantize(docs, 'int8', { scales: 'document', center: true }),
  };
  const batch = run.batch ?? 16;
  const start = Date.now();
  const parts: Array<{ report: FidelityReport; relevantCount: number }> = [];
  for (let i0 = 0; i0 < queries.count; i0 += batch) {
    const ids = Array.from({ length: Math.min(batch, queries.count - i0) }, (_, i) => i0 + i);
    const rel = relevant?.slice(i0, i0 + ids.length);
    const report = await fidelityOfBatch(
      name,
      selectItems(queries, ids),
      docs,
      docsInt8,
      docsInt8PerDoc,
      centered,
      rel,
    );
    parts.push({ report, relevantCount: rel ? rel.reduce((a, r) => a + r.length, 0) : 0 });
    run.onProgress?.(i0 + ids.length, queries.count);
    if (run.timeLimitMs !== undefined && Date.now() - start >= run.timeLimitMs) break;
  }
  return mergeReports(name, parts, queries.count, docs.count, relevant !== undefined);
}

/** Weighted mean of f over the parts (weights w). */
function weighted<T>(parts: T[], w: (p: T) => number, f: (p: T) => number): number {
  const total = parts.reduce((a, p) => a + w(p), 0);
  return total === 0 ? 1 : parts.reduce((a, p) => a + w(p) * f(p), 0) / total;
}

function mergeFormat(
  parts: Array<{ f: FormatFidelity | { unavailable: string }; n: number; rel: number }>,
): FormatFidelity | { unavailable: string } {
  const missing = parts.find((p) => 'unavailable' in p.f);
  if (missing) return missing.f;
  const ok = parts as Array<{ f: FormatFidelity; n: number; rel: number }>;
  return {
    spearmanMean: weighted(
      ok,
      (p) => p.n,
      (p) => p.f.spearmanMean,
    ),
    spearmanMin: Math.min(...ok.map((p) => p.f.spearmanMin)),
    top10Overlap: weighted(
      ok,
      (p) => p.n,
      (p) => p.f.top10Overlap,
    ),
    top20Overlap: weighted(
      ok,
      (p) => p.n,
      (p) => p.f.top20Overlap,
    ),
    top20Decided: weighted(
      ok,
      (p) => p.n,
      (p) => p.f.top20Decided,
    ),
    top20OverlapDecided: ok.some((p) => p.f.top20Decided > 0)
      ? weighted(
          ok.filter((p) => p.f.top20Decided > 0),
          (p) => p.n * p.f.top20Decided,
          (p) => p.f.top20OverlapDecided,
        )
      : Number.NaN,
    recall10:
      ok[0].f.recall10 === undefined
        ? undefined
        : weighted(
            ok,
            (p) => p.rel,
            (p) => p.f.recall10 as number,
          ),
  };
}

// Per-query means of the batches' reports (recall weighted by each batch's planted documents).
function mergeReports(
  name: string,
  parts: Array<{ report: FidelityReport; relevantCount: number }>,
  requested: number,
  docs: number,
  withRecall: boolean,
): FidelityReport {
  const n = (p: (typeof parts)[number]) => p.report.queries;
  const rel = (p: (typeof parts)[number]) => p.relevantCount;
  const of = (f: (r: FidelityReport) => FormatFidelity | { unavailable: string }) =>
    mergeFormat(parts.map((p) => ({ f: f(p.report), n: n(p), rel: rel(p) })));
  const ok = of((r) => ({
    spearmanMean: r.spearmanMean,
    spearmanMin: r.spearmanMin,
    top10Overlap: r.top10Overlap,
    top20Overlap: r.top20Overlap,
    top20Decided: r.top20Decided,
    top20OverlapDecided: r.top20OverlapDecided,
    recall10: r.recall10?.int8,
  })) as FormatFidelity; // the CPU's int8 always runs
  return {
    name,
    queries: parts.reduce((a, p) => a + n(p), 0),
    queriesRequested: requested,
    docs,
    spearmanMean: ok.spearmanMean,
    spearmanMin: ok.spearmanMin,
    top10Overlap: ok.top10Overlap,
    top20Overlap: ok.top20Overlap,
    top20Decided: ok.top20Decided,
    top20OverlapDecided: ok.top20OverlapDecided,
    recall10: withRecall
      ? {
          fp32: weighted(parts, rel, (p) => p.report.recall10?.fp32 as number),
          int8: weighted(parts, rel, (p) => p.report.recall10?.int8 as number),
          twoStage: weighted(parts, rel, (p) => p.report.recall10?.twoStage as number),
        }
      : undefined,
    twoStageExact: weighted(parts, n, (p) => p.report.twoStageExact),
    fp8: of((r) => r.fp8),
    documentScales: {
      int8: of((r) => r.documentScales.int8) as FormatFidelity,
      fp8: of((r) => r.documentScales.fp8),
    },
    centered: {
      int8: of((r) => r.centered.int8) as FormatFidelity,
      fp8: of((r) => r.centered.fp8),
      documentScales: {
        int8: of((r) => r.centered.documentScales.int8) as FormatFidelity,
        fp8: of((r) => r.centered.documentScales.fp8),
      },
    },
  };
}

/** The report for one batch of queries. */
async function fidelityOfBatch(
  name: string,
  queries: TokenBatch,
  docs: TokenBatch,
  docsInt8: TokenBatch,
  docsInt8PerDoc: TokenBatch,
  centered: { token: TokenBatch; document: TokenBatch },
  relevant?: number[][],
): Promise<FidelityReport> {
  const queriesInt8 = quantize(queries, 'int8');
  const exact = await maxsim(queries, docs, { backend: 'cpu' });
  const approx = await maxsim(queriesInt8, docsInt8, { backend: 'cpu' });
  const exact10 = top(exact, 10);
  // the scan runs even where int8 is slower than float32 here: its fidelity is what is measured
  const two10 = (
    await twoStageTopK(queries, docs, docsInt8, 10, { backend: 'cpu', prefilter: 'always' })
  ).map((h) => h.map((x) => x.index));
  const int8 = formatFidelity(exact, approx, relevant);
  const approxPerDoc = await maxsim(queriesInt8, docsInt8PerDoc, { backend: 'cpu' });
  const approxCentered = await maxsim(queriesInt8, centered.token, { backend: 'cpu' });
  const approxCenteredPerDoc = await maxsim(queriesInt8, centered.document, { backend: 'cpu' });
  return {
    name,
    queries: queries.count,
    queriesRequested: queries.count,
    docs: docs.count,
    spearmanMean: int8.spearmanMean,
    spearmanMin: int8.spearmanMin,
    top10Overlap: int8.top10Overlap,
    top20Overlap: int8.top20Overlap,
    top20Decided: int8.top20Decided,
    top20OverlapDecided: int8.top20OverlapDecided,
    recall10: relevant
      ? {
          fp32: recallAt10(exact10, relevant),
          int8: int8.recall10 as number,
          twoStage: recallAt10(two10, relevant),
        }
      : undefined,
    twoStageExact: mean(
      two10.map((t, i) => (t.length === exact10[i].length && t.every((x, j) => x === exact10[i][j]) ? 1 : 0)),
    ),
    fp8: await fp8Fidelity(queries, docs, exact, 'token', relevant),
    documentScales: {
      int8: formatFidelity(exact, approxPerDoc, relevant),
      fp8: await fp8Fidelity(queries, docs, exact, 'document', relevant),
    },
    centered: {
      int8: formatFidelity(exact, approxCentered, relevant),
      fp8: await fp8Fidelity(queries, docs, exact, 'token', relevant, true),
      documentScales: {
        int8: formatFidelity(exact, approxCenteredPerDoc, relevant),
        fp8: await fp8Fidelity(queries, docs, exact, 'document', relevant, true),
      },
    },
  };
}

/** The near-tie set of `maxsim fidelity`. */
export const nearTieOptions = { clusters: 100, perCluster: 20, docLength: 64, queryLength: 32, dim: 128 };

/**
 * An adversarial near-tie set: clusters of documents that are tiny perturbations of one base
 * document, and queries drawn from a base document's tokens, so each query's top-10 is a race
 * between near-identical scores.
 */
export function nearTieCorpus(
  rand: () => number,
  options: { clusters: number; perCluster: number; docLength: number; queryLength: number; dim: number },
): { queries: TokenBatch; docs: TokenBatch } {
  const { clusters, perCluster, docLength, queryLength, dim } = options;
  const unit = (v: Float32Array, o: number) => {
    let ss = 0;
    for (let k = 0; k < dim; k++) ss += v[o + k] ** 2;
    const inv = 1 / Math.sqrt(ss);
    for (let k = 0; k < dim; k++) v[o + k] *= inv;
  };
  const docTokens = clusters * perCluster * docLength;
  const docs = new Float32Array(docTokens * dim);
  const queries = new Float32Array(clusters * queryLength * dim);
  const base = new Float32Array(docLength * dim);
  for (let c = 0; c < clusters; c++) {
    for (let i = 0; i < base.length; i++) base[i] = rand() * 2 - 1;
    for (let t = 0; t < docLength; t++) unit(base, t * dim);
    for (let m = 0; m < perCluster; m++) {
      const o = (c * perCluster + m) * docLength * dim;
      for (let i = 0; i < base.length; i++) docs[o + i] = base[i] + 0.004 * (rand() * 2 - 1);
      for (let t = 0; t < docLength; t++) unit(docs, o + t * dim);
    }
    for (let t = 0; t < queryLength; t++) {
      const src = Math.floor(rand() * docLength) * dim;
      const o = (c * queryLength + t) * dim;
      for (let k = 0; k < dim; k++) queries[o + k] = base[src + k] + 0.3 * (rand() * 2 - 1);
      unit(queries, o);
    }
  }
  const dense = (data: Float32Array, count: number, length: number): TokenBatch => ({
    kind: 'batch',
    layout: 'dense',
    dtype: 'float32',
    data,
    dim,
    count,
    maxLength: length,
    starts: Float64Array.from({ length: count }, (_, i) => i * length),
    lengths: new Int32Array(count).fill(length),
  });
  return {
    queries: dense(queries, clusters, queryLength),
    docs: dense(docs, clusters * perCluster, docLength),
  };
}
