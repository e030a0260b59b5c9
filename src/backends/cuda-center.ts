// Centered 8-bit corpora on the GPU (src/ops/center.ts has the idea): the float documents come back
// to the host once, their mean mu is taken there in float64, and the residuals x - mu are quantized:
// int8 on the host (bitwise what quantize(docs, 'int8', { center }) gives) and uploaded, fp8 by the
// device quantizer from an uploaded float32 copy of the residuals. No kernel changes: the scoring
// kernels see an ordinary 8-bit corpus; the corpus keeps mu and adds each query's shift to its
// scores. The cost is one download of the float corpus and one upload (fp8: of a float32 copy).

import { decodeToFloat32 } from '../floats.js';
import { addShifts, combineMeans, queryShifts, tokenMean } from '../ops/center.js';
import { quantize, type ScaleGranularity } from '../ops/quantize.js';
import type { Hit, TokenBatch } from '../tensor.js';
import type { DeviceCorpus, NativeTokenSet, QuantizeMode8 } from './cuda.js';

/** The items of a downloaded float corpus packed as float32 (a download may hold spare tokens). */
function packedFloat32(batch: TokenBatch): TokenBatch {
  const d = batch.dim;
  const values = decodeToFloat32(batch.data, batch.dtype, d);
  let tokens = 0;
  for (let b = 0; b < batch.count; b++) tokens += batch.lengths[b];
  const data = new Float32Array(tokens * d);
  const starts = new Float64Array(batch.count);
  let t = 0;
  for (let b = 0; b < batch.count; b++) {
    starts[b] = t;
    const from = batch.starts[b] * d;
    data.set(values.subarray(from, from + batch.lengths[b] * d), t * d);
    t += batch.lengths[b];
  }
  return { ...batch, layout: 'ragged', dtype: 'float32', data, starts, scales: undefined };
}

/** The corpus's float documents, packed float32 (the corpus must be a float one). */
export async function floatDocuments(corpus: DeviceCorpus): Promise<TokenBatch> {
  const batch = await corpus.download();
  if (!('layout' in batch) || batch.dtype === 'int8')
    throw new Error('floatDocuments: a float corpus was expected (the caller checks the dtype)');
  return packedFloat32(batch);
}

/** The mean of a float corpus's document tokens (float64 sums, rounded to float32). */
export async function deviceTokenMean(corpus: DeviceCorpus): Promise<{ mean: Float32Array; tokens: number }> {
  const docs = await floatDocuments(corpus);
  const data = docs.data as Float32Array;
  return { mean: tokenMean(data, docs.dim, docs.starts, docs.lengths), tokens: data.length / docs.dim };
}

/** The mean of several float corpora's tokens together (a sharded corpus's shards). */
export async function combinedTokenMean(corpora: readonly DeviceCorpus[]): Promise<Float32Array> {
  return combineMeans(await Promise.all(corpora.map(deviceTokenMean)));
}

/**
 * The native 8-bit token set of `corpus`'s documents less the mean (the given one, or theirs), and
 * that mean. `upload` makes a token set on the corpus's device; `quantizeOnDevice` runs the device
 * quantizer on one.
 */
export async function quantizeCentered(
  corpus: DeviceCorpus,
  mode: QuantizeMode8,
  scales: ScaleGranularity,
  center: true | Float32Array,
  device: {
    upload(batch: TokenBatch): Promise<NativeTokenSet>;
    quantize(set: NativeTokenSet, mode: QuantizeMode8, scales: ScaleGranularity): Promise<NativeTokenSet>;
  },
): Promise<{ native: NativeTokenSet; mean: Float32Array }> {
  const docs = await floatDocuments(corpus);
  const data = docs.data as Float32Array;
  const d = docs.dim;
  const mean = center === true ? tokenMean(data, d, docs.starts, docs.lengths) : center;
  if (mode === 'int8')
    return { native: await device.upload(quantize(docs, 'int8', { scales, center: mean })), mean };
  // fp8: the residuals rounded once to float32 (2^-24 relative, far below e4m3's 2^-4 step)
  for (let i = 0; i < data.length; i++) data[i] -= mean[i % d];
  const residuals = await device.upload(docs);
  try {
    return { native: await device.quantize(residuals, 'fp8', scales), mean };
  } finally {
    residuals.dispose();
  }
}

/** Scores [queries, cols] of a centered corpus with each query's shift added back (in place). */
export function shiftScores(queries: TokenBatch, mean: Float32Array, scores: Float32Array): Float32Array {
  if (queries.count === 0) return scores;
  return addShifts(scores, queryShifts(queries, mean), scores.length / queries.count);
}

/** Top-k hits of a centered corpus with each query's shift added back (in place). */
export function shiftHits(queries: TokenBatch, mean: Float32Array, hits: Hit[][]): Hit[][] {
  const shifts = queryShifts(queries, mean);
  hits.forEach((row, q) => {
    for (const h of row) h.score = Math.fround(h.score + shifts[q]);
  });
  return hits;
}
