// The CUDA benchmark: per shape, fill a device corpus, check a sample of scores against the float64
// reference, time the kernel with device events (median after warm-up) and report time, TFLOP/s,
// GB/s, the share of the ceilings, and the peak device memory beyond the corpus.
//
// int8 / fp8: the float16 corpus is timed first, then quantized on the GPU (corpus.quantize) and the
// 8-bit kernel timed on the same documents and queries in the same run, so the 8-bit row carries the
// float16 time and the ratio. The int8 reference check runs on the host-quantized sample (bitwise
// what the device quantizer makes); the fp8 one on the sample quantized by the GPU and copied back.
//
// Corpora of several GB cannot be one JS typed array, so a pool of random unit tokens (larger than
// the 60 MB L2, so repeats are never cache hits) is generated once per shape and appended to the
// device corpus until it holds B documents. Every document's data is known, so any sampled document,
// the last ones past 2^31 elements included, can be checked against the reference.
import { benchKernel, type CudaDevice, cuda, type DeviceCorpus } from '../backends/cuda.js';
import type { DeviceDType } from '../backends/cuda-dispatch.js';
import { referenceMaxsim } from '../backends/reference.js';
import { type Fp8Tokens, referenceMaxsimFp8 } from '../backends/reference-fp8.js';
import { Rng, randomUnitTokens } from '../demo/random.js';
import { encodeFloats } from '../floats.js';
import { quantize, type ScaleGranularity } from '../ops/quantize.js';
import { type FloatDType, raggedBatch, type TokenBatch } from '../tensor.js';

/** A benchmark shape `Nq,Lq,Ld,d,B`. */
export interface BenchShape {
  /** Queries. */
  nq: number;
  /** Tokens per query. */
  lq: number;
  /** Tokens per document (the longest, with ragged documents). */
  ld: number;
  /** Embedding dimension. */
  d: number;
  /** Documents. */
  b: number;
}

export interface CudaBenchOptions {
  /** int8 / fp8: also times float16 on the same data in the same run (the baseline of the row). */
  dtype: DeviceDType;
  /** int8 / fp8: the documents' scales, one per token (default) or one per document. */
  scales?: ScaleGranularity;
  /** Document lengths uniform in [min(32, Ld), hi] instead of all Ld; hi = Ld unless fill is set. */
  ragged: boolean;
  /** With ragged: the mean fill ratio sum(L_b) / (B * Ld), by choosing hi = 2 * fill * Ld - lo. */
  fill?: number;
  warmup: number;
  /** Untimed device time before each timing (ms); 1000 measures the sustained (power-capped) regime. */
  warmupMs?: number;
  iters: number;
  variant?: string;
  device?: number;
  seed?: number;
  onProgress?: (message: string) => void;
}

/** The float16 timing an int8 row is compared with (same documents, queries and run). */
export interface CudaBaseline {
  dtype: FloatDType;
  variant: string;
  ms: number;
  tflops: number;
  gbps: number;
  maxRelErr: number;
}

export interface CudaBenchRow {
  shape: string;
  dtype: DeviceDType;
  /** int8 / fp8 with one scale per document (absent: per token). */
  scales?: 'document';
  backend: 'cuda';
  ragged: boolean;
  /** Real tokens / (B * Ld). */
  fillRatio: number;
  variant: string;
  ms: number;
  msMin: number;
  msMax: number;
  /** 2 * Nq * sum(Lq * Ld_b) * d / time. */
  tflops: number;
  gflops: number;
  /** Document bytes read once / time (int8 / fp8: d bytes + a 4-byte scale per token). */
  gbps: number;
  /** int8 / fp8 rows: the float16 kernel on the same data, and baseline.ms / ms. */
  baseline?: CudaBaseline;
  speedupVsBaseline?: number;
  /** Device bytes in use at the peak of the timed runs beyond the documents themselves. */
  peakExtraBytes: number;
  /** Largest |got - ref| / max(1, |ref|) over the sampled documents. */
  maxRelErr: number;
  sampledDocs: number;
  docTokens: number;
  device: string;
}

/**
 * The sampled error a correct kernel stays under. Every float dtype and int8 accumulate exact
 * products in fp32 (~1e-7 relative measured); Hopper's fp8 MMA accumulates with fewer mantissa
 * bits (~1e-4 measured). Far above both: a row past it comes from a wrong kernel, not from rounding.
 */
export function benchErrorBound(dtype: DeviceDType): number {
  return dtype === 'fp8' ? 1e-2 : 1e-3;
}

/** One message per row (or its float16 baseline) whose sampled error says the kernel is wrong. */
export function wrongRows(rows: readonly CudaBenchRow[]): string[] {
  const out: string[] = [];
  for (const r of rows) {
    const checks: [DeviceDType, string, number][] = [[r.dtype, r.variant, r.maxRelErr]];
    if (r.baseline) checks.push([r.baseline.dtype, r.baseline.variant, r.baseline.maxRelErr]);
    for (const [dtype, variant, err] of checks) {
      const bound = benchErrorBound(dtype);
      if (!(err <= bound))
        out.push(
          `${r.shape} ${dtype} (${variant}): sampled relative error ${err.toExponential(2)} exceeds ${bound}: ` +
            'the kernel returned wrong scores, so its timing means nothing',
        );
    }
  }
  return out;
}

// Larger than the H200's 60 MB L2, so the pool's repeats in a corpus are never served from cache.
const POOL_BYTES = 96 * 1024 * 1024;
const pools = new Map<string, Float32Array | Uint16Array>();

/** The random unit-token pool for (d, dtype), generated once per process. */
function tokenPool(
  d: number,
  dtype: FloatDType,
  seed: number,
  minTokens: number,
): Float32Array | Uint16Array {
  const key = `${d}:${dtype}:${seed}`;
  let pool = pools.get(key);
  const tokens = Math.max(minTokens, Math.floor(POOL_BYTES / (d * (dtype === 'float32' ? 4 : 2))));
  if (!pool || pool.length < tokens * d) {
    pool = encodeFloats(randomUnitTokens(new Rng(seed ^ d), tokens, d), dtype);
    pools.set(key, pool);
  }
  return pool;
}

function docLengths(shape: BenchShape, ragged: boolean, fill: number | undefined, rng: Rng): Int32Array {
  const lengths = new Int32Array(shape.b);
  const lo = Math.min(32, shape.ld);
  const hi =
    fill === undefined ? shape.ld : Math.max(lo, Math.min(shape.ld, Math.round(2 * fill * shape.ld - lo)));
  for (let i = 0; i < shape.b; i++) lengths[i] = ragged ? lo + (rng.uint32() % (hi - lo + 1)) : shape.ld;
  return lengths;
}

/**
 * Where each document's tokens sit in the pool: documents are laid out back to back and wrap to the
 * pool's start when the next one would not fit. fillCorpus uploads exactly this layout.
 */
function poolStarts(lengths: Int32Array, poolTokens: number): Float64Array {
  const starts = new Float64Array(lengths.length);
  let pos = 0;
  for (let i = 0; i < lengths.length; i++) {
    if (pos + lengths[i] > poolTokens) pos = 0;
    starts[i] = pos;
    pos += lengths[i];
  }
  return starts;
}

/** A device corpus of B documents laid out over the pool as poolStarts() says. */
async function fillCorpus(
  gpu: CudaDevice,
  pool: Float32Array | Uint16Array,
  starts: Float64Array,
  lengths: Int32Array,
  shape: BenchShape,
  dtype: FloatDType,
  onProgress?: (message: string) => void,
): Promise<DeviceCorpus> {
  let tokens = 0;
  for (const l of lengths) tokens += l;
  const corpus = await gpu.alloc({ dtype, dim: shape.d, tokens, items: shape.b });
  // One append per pass over the pool: a ragged view of consecutive documents.
  let doc = 0;
  while (doc < shape.b) {
    const offsets = [starts[doc]];
    do {
      offsets.push(starts[doc] + lengths[doc]);
      doc++;
    } while (doc < shape.b && starts[doc] !== 0);
    await corpus.append(raggedBatch(pool, offsets, { dim: shape.d, dtype, checkFinite: false, view: true }));
    onProgress?.(`filling ${doc}/${shape.b} documents`);
  }
  return corpus;
}

/** Host copies of the picked documents, as the corpus holds them (for the reference check). */
function pickedDocs(
  pool: Float32Array | Uint16Array,
  starts: Float64Array,
  lengths: Int32Array,
  picks: number[],
  dim: number,
  dtype: FloatDType,
): TokenBatch {
  const total = picks.reduce((s, i) => s + lengths[i], 0) * dim;
  const data = dtype === 'float32' ? new Float32Array(total) : new Uint16Array(total);
  const offsets = [0];
  let o = 0;
  for (const i of picks) {
    data.set(pool.subarray(starts[i] * dim, (starts[i] + lengths[i]) * dim) as never, o * dim);
    o += lengths[i];
    offsets.push(o);
  }
  return raggedBatch(data, offsets, { dim, dtype, checkFinite: false });
}

/** Median, min and max of device-event times. */
function stats(ms: number[]): { ms: number; msMin: number; msMax: number } {
  const sorted = [...ms].sort((a, b) => a - b);
  return { ms: sorted[sorted.length >> 1], msMin: sorted[0], msMax: sorted[sorted.length - 1] };
}

/** Largest |got - ref| / max(1, |ref|) over the sampled (query, document) pairs; -Inf must match. */
function sampleError(
  scores: Float32Array,
  ref: Float64Array,
  sampleQueries: number,
  picks: number[],
  numDocs: number,
): number {
  let maxRelErr = 0;
  for (let q = 0; q < sampleQueries; q++) {
    picks.forEach((doc, j) => {
      const r = ref[q * picks.length + j];
      const g = scores[q * numDocs + doc];
      const err =
        r === Number.NEGATIVE_INFINITY
          ? g === r
            ? 0
            : Number.POSITIVE_INFINITY
          : Math.abs(g - r) / Math.max(1, Math.abs(r));
      if (!(err <= maxRelErr))
        maxRelErr = Number.isNaN(err) ? Number.POSITIVE_INFINITY : Math.max(maxRelErr, err);
    });
  }
  return maxRelErr;
}

export async function benchCudaShape(shape: BenchShape, options: CudaBenchOptions): Promise<CudaBenchRow> {
  const eightBit = options.dtype === 'int8' || options.dtype === 'fp8';
  // 8-bit corpora are made on the GPU from the float16 one
  const dtype: FloatDType = options.dtype === 'int8' || options.dtype === 'fp8' ? 'float16' : options.dtype;
  const rng = new Rng(options.seed ?? 20261129);
  const gpu = await cuda({ device: options.device });
  try {
    const lengths = docLengths(shape, options.ragged, options.fill, rng);
    let totalDocTokens = 0;
    for (const l of lengths) totalDocTokens += l;
    options.onProgress?.('generating random tokens');
    const pool = tokenPool(shape.d, dtype, options.seed ?? 20261129, shape.ld);
    const poolTokens = pool.length / shape.d;
    const starts = poolStarts(lengths, poolTokens);
    let corpus: DeviceCorpus | undefined = await fillCorpus(
      gpu,
      pool,
      starts,
      lengths,
      shape,
      dtype,
      options.onProgress,
    );
    let qcorpus: DeviceCorpus | undefined;
    try {
      const qData = encodeFloats(randomUnitTokens(rng, shape.nq * shape.lq, shape.d), dtype);
      const qOffsets = Array.from({ length: shape.nq + 1 }, (_, i) => i * shape.lq);
      const queries = raggedBatch(qData, qOffsets, { dim: shape.d, dtype, checkFinite: false });
      const picks = [
        ...new Set(
          [0, 1, 2, Math.floor(shape.b / 2), shape.b - 2, shape.b - 1].filter((i) => i >= 0 && i < shape.b),
        ),
      ];
      const sampleQueries = Math.min(shape.nq, 4);
      const qSample = raggedBatch(
        qData.subarray(0, sampleQueries * shape.lq * shape.d),
        qOffsets.slice(0, sampleQueries + 1),
        { dim: shape.d, dtype, checkFinite: false },
      );
      const dSample = pickedDocs(pool, starts, lengths, picks, shape.d, dtype);
      const flops = 2 * shape.nq * shape.lq * totalDocTokens * shape.d;
      const run: Run = { gpu, options, shape, picks, sampleQueries, flops, totalDocTokens };

      // 8-bit: the float16 baseline runs with the dispatcher's choice (--variant names the 8-bit kernel)
      const base = await measure(
        run,
        corpus,
        queries,
        referenceMaxsim(qSample, dSample),
        eightBit ? undefined : options.variant,
      );
      let main = base;
      let baseline: CudaBaseline | undefined;
      if (options.dtype === 'int8' || options.dtype === 'fp8') {
        const mode = options.dtype;
        // what quantize() takes by default: per token for int8, per document for fp8
        const scales = options.scales ?? (mode === 'fp8' ? 'document' : 'token');
        const ref8 = await eightBitReference(gpu, mode, qSample, dSample, scales);
        options.onProgress?.(`quantizing the corpus to ${mode} on the GPU`);
        qcorpus = await corpus.quantize(mode, { scales });
        corpus.dispose();
        corpus = undefined;
        // int8: queries quantized on the host (as score() would); fp8: on the GPU by the scoring job
        main = await measure(
          run,
          qcorpus,
          mode === 'int8' ? quantize(queries, 'int8') : queries,
          ref8,
          options.variant,
        );
        baseline = {
          dtype,
          variant: base.variant,
          ms: base.ms,
          tflops: base.tflops,
          gbps: base.gbps,
          maxRelErr: base.maxRelErr,
        };
      }
      return {
        shape: `${shape.nq},${shape.lq},${shape.ld},${shape.d},${shape.b}`,
        dtype: options.dtype,
        ...((options.scales === 'document' || (options.scales === undefined && options.dtype === 'fp8')) && {
          scales: 'document' as const,
        }),
        backend: 'cuda',
        ragged: options.ragged,
        fillRatio: totalDocTokens / (shape.b * shape.ld),
        variant: main.variant,
        ms: main.ms,
        msMin: main.msMin,
        msMax: main.msMax,
        tflops: main.tflops,
        gflops: main.gflops,
        gbps: main.gbps,
        ...(baseline && { baseline, speedupVsBaseline: baseline.ms / main.ms }),
        peakExtraBytes: main.peakExtraBytes,
        maxRelErr: main.maxRelErr,
        sampledDocs: picks.length,
        docTokens: totalDocTokens,
        device: gpu.info.name,
      };
    } finally {
      corpus?.dispose();
      qcorpus?.dispose();
    }
  } finally {
    gpu.dispose();
  }
}

/** What every measurement of one shape shares. */
interface Run {
  gpu: CudaDevice;
  options: CudaBenchOptions;
  shape: BenchShape;
  picks: number[];
  sampleQueries: number;
  flops: number;
  totalDocTokens: number;
}

// Correctness first (sampled documents, the first, the last, some between, vs float64), then time.
async function measure(run: Run, c: DeviceCorpus, q: TokenBatch, ref: Float64Array, variant?: string) {
  const { gpu, options, flops, totalDocTokens, shape } = run;
  options.onProgress?.(`checking ${c.dtype} against the float64 reference`);
  const scores = (await c.score(q, { variant })).data;
  const maxRelErr = sampleError(scores, ref, run.sampleQueries, run.picks, shape.b);
  options.onProgress?.(`timing ${c.dtype}`);
  const r = await benchKernel(gpu, q, c, {
    variant,
    warmup: options.warmup,
    warmupMs: options.warmupMs,
    iters: options.iters,
  });
  const t = stats(r.ms);
  const eight = c.dtype === 'int8' || c.dtype === 'fp8';
  const bytesPerToken = eight ? shape.d + 4 : shape.d * (c.dtype === 'float32' ? 4 : 2);
  return {
    ...t,
    variant: r.variant,
    maxRelErr,
    tflops: flops / t.ms / 1e9,
    gflops: flops / t.ms / 1e6,
    gbps: (totalDocTokens * bytesPerToken) / t.ms / 1e6,
    peakExtraBytes: Math.max(0, r.peakBytes - c.bytes),
  };
}

// The float64 reference of the 8-bit sample: int8 quantized on the host (bitwise the device
// quantizer's), fp8 the GPU's e4m3 codes copied back (queries per token, as the scoring job does).
async function eightBitReference(
  gpu: CudaDevice,
  mode: 'int8' | 'fp8',
  qSample: TokenBatch,
  dSample: TokenBatch,
  scales: ScaleGranularity,
): Promise<Float64Array> {
  if (mode === 'int8')
    return referenceMaxsim(quantize(qSample, 'int8'), quantize(dSample, 'int8', { scales }));
  const codes = async (b: TokenBatch, s?: ScaleGranularity) => {
    const f = await gpu.upload(b);
    try {
      const e = await f.quantize('fp8', { scales: s });
      try {
        return (await e.download()) as Fp8Tokens;
      } finally {
        e.dispose();
      }
    } finally {
      f.dispose();
    }
  };
  return referenceMaxsimFp8(await codes(qSample, 'token'), await codes(dSample, scales));
}
