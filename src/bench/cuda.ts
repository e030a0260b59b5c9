// The CUDA benchmark: per shape, fill a device corpus, check a sample of scores against the float64
// reference, time the kernel with device events (median after warm-up) and report time, TFLOP/s,
// GB/s, the share of the ceilings, and the peak device memory beyond the corpus.
//
// Corpora of several GB cannot be one JS typed array, so a pool of random unit tokens (larger than
// the 60 MB L2, so repeats are never cache hits) is generated once per shape and appended to the
// device corpus until it holds B documents. Every document's data is known, so any sampled document,
// the last ones past 2^31 elements included, can be checked against the reference.
import { type CudaDevice, cuda, type DeviceCorpus } from '../backends/cuda.js';
import { referenceMaxsim } from '../backends/reference.js';
import { Rng, randomUnitTokens } from '../demo/random.js';
import { encodeFloats, type FloatDType, raggedBatch, type TokenBatch } from '../tensor.js';

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
  dtype: FloatDType;
  /** Document lengths uniform in [min(32, Ld), hi] instead of all Ld; hi = Ld unless fill is set. */
  ragged: boolean;
  /** With ragged: the mean fill ratio sum(L_b) / (B * Ld), by choosing hi = 2 * fill * Ld - lo. */
  fill?: number;
  warmup: number;
  iters: number;
  variant?: string;
  device?: number;
  seed?: number;
  onProgress?: (message: string) => void;
}

export interface CudaBenchRow {
  shape: string;
  dtype: FloatDType;
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
  /** Document bytes read once / time. */
  gbps: number;
  /** Device bytes in use at the peak of the timed runs beyond the documents themselves. */
  peakExtraBytes: number;
  /** Largest |got - ref| / max(1, |ref|) over the sampled documents. */
  maxRelErr: number;
  sampledDocs: number;
  docTokens: number;
  device: string;
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
    await corpus.append(raggedBatch(pool, offsets, { dim: shape.d, dtype, checkFinite: false }));
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

export async function benchCudaShape(shape: BenchShape, options: CudaBenchOptions): Promise<CudaBenchRow> {
  const { dtype } = options;
  const rng = new Rng(options.seed ?? 20261129);
  const gpu = await cuda({ device: options.device });
  try {
    const lengths = docLengths(shape, options.ragged, options.fill, rng);
    let totalDocTokens = 0;
    for (const l of lengths) totalDocTokens += l;
    const bytesPerToken = shape.d * (dtype === 'float32' ? 4 : 2);
    options.onProgress?.('generating random tokens');
    const pool = tokenPool(shape.d, dtype, options.seed ?? 20261129, shape.ld);
    const poolTokens = pool.length / shape.d;
    const starts = poolStarts(lengths, poolTokens);
    const corpus = await fillCorpus(gpu, pool, starts, lengths, shape, dtype, options.onProgress);
    try {
      const qData = encodeFloats(randomUnitTokens(rng, shape.nq * shape.lq, shape.d), dtype);
      const qOffsets = Array.from({ length: shape.nq + 1 }, (_, i) => i * shape.lq);
      const queries = raggedBatch(qData, qOffsets, { dim: shape.d, dtype, checkFinite: false });

      // Correctness first: sampled documents (the first, the last, some between) vs float64.
      options.onProgress?.('checking against the float64 reference');
      const scores = (await corpus.score(queries, { variant: options.variant })).data;
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
      const ref = referenceMaxsim(qSample, pickedDocs(pool, starts, lengths, picks, shape.d, dtype));
      let maxRelErr = 0;
      for (let q = 0; q < sampleQueries; q++) {
        picks.forEach((doc, j) => {
          const r = ref[q * picks.length + j];
          const g = scores[q * shape.b + doc];
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

      options.onProgress?.('timing');
      const r = await gpu.bench(queries, corpus, {
        variant: options.variant,
        warmup: options.warmup,
        iters: options.iters,
      });
      const sorted = [...r.ms].sort((a, b) => a - b);
      const ms = sorted[sorted.length >> 1];
      const flops = 2 * shape.nq * shape.lq * totalDocTokens * shape.d;
      return {
        shape: `${shape.nq},${shape.lq},${shape.ld},${shape.d},${shape.b}`,
        dtype,
        backend: 'cuda',
        ragged: options.ragged,
        fillRatio: totalDocTokens / (shape.b * shape.ld),
        variant: r.variant,
        ms,
        msMin: sorted[0],
        msMax: sorted[sorted.length - 1],
        tflops: flops / ms / 1e9,
        gflops: flops / ms / 1e6,
        gbps: (totalDocTokens * bytesPerToken) / ms / 1e6,
        peakExtraBytes: Math.max(0, r.peakBytes - corpus.bytes),
        maxRelErr,
        sampledDocs: picks.length,
        docTokens: totalDocTokens,
        device: gpu.info.name,
      };
    } finally {
      corpus.dispose();
    }
  } finally {
    gpu.dispose();
  }
}
