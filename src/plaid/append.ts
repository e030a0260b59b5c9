// Growing an index without retraining: documents encoded against an existing index's centroids and
// buckets (the codec), and the drift measure that says when the codec no longer fits the documents
// (the share of tokens whose nearest centroid is farther than the build's sample mostly was).
import { InvalidArgumentError } from '../errors.js';
import { decodeToFloat32 } from '../floats.js';
import { isTokenBatch, type TokenBatch, totalTokens } from '../tensor.js';
import { type CodecBackend, codecFor } from './cuda-codec.js';
import { sampleIndices, seededRandom } from './kmeans.js';
import { type KernelOptions, type NativeIndex, residualAddon } from './native.js';
import { type BuildStats, buildLists, PlaidIndex } from './plaid.js';

/** A new index over `docs` with the codec's centroids and buckets (no k-means; no source tokens kept). */
export async function encodeWith(
  codec: PlaidIndex,
  docs: TokenBatch,
  kern: KernelOptions & { backend?: CodecBackend } = {},
): Promise<PlaidIndex> {
  if (!isTokenBatch(docs)) throw new InvalidArgumentError('docs', 'a TokenBatch', typeof docs);
  if (docs.dtype === 'int8')
    throw new InvalidArgumentError('docs.dtype', "'float32', 'float16' or 'bfloat16'", "'int8'");
  if (docs.dim !== codec.dim)
    throw new InvalidArgumentError('docs.dim', `${codec.dim} (the index's dim)`, String(docs.dim));
  const { native: c, buckets } = codec;
  const t0 = performance.now();
  // the codec's two-level groups, when it has them: the ids its own build would give (CPU and GPU alike)
  const groups = codec.assignGroups;
  const gpu = codecFor(kern.backend, c.d);
  const tokens = totalTokens(docs);
  const enc = gpu
    ? await gpu
        .encodeParts([docs], tokens, c.centroids, buckets, groups, () => {})
        .then((r) => ({ ...r, sqError: [r.sqError] }))
    : await residualAddon().encode(docs, c.centroids, buckets.cutoffs, buckets.tables, c.bits, {
        threads: kern.threads,
        isa: kern.isa,
        groups,
      });
  const t1 = performance.now();
  const lists = buildLists(docs.lengths, enc.cids, c.k);
  const stats: BuildStats = {
    ...codec.buildStats,
    tokens,
    bytesPerToken: tokens > 0 ? (enc.codes.length + 4 * enc.cids.length) / tokens : 0,
    meanSquaredError: tokens > 0 ? enc.sqError[0] / tokens : 0,
    msKmeans: 0,
    msEncode: t1 - t0,
    msLists: performance.now() - t1,
    backend: gpu ? 'cuda' : 'cpu',
  };
  const native: NativeIndex = {
    k: c.k,
    d: c.d,
    docs: docs.count,
    bits: c.bits,
    centroids: c.centroids,
    tables: c.tables,
    cids: enc.cids,
    codes: enc.codes,
    ...lists,
  };
  return new PlaidIndex(native, buckets, undefined, stats, groups);
}

/** Up to `n` tokens of the documents (seeded, without repeats) as float32 rows. */
export function sampleTokens(docs: TokenBatch, n: number, seed: number): Float32Array {
  const total = totalTokens(docs);
  const at = sampleIndices(total, Math.min(n, total), seededRandom(seed));
  const d = docs.dim;
  const out = new Float32Array(at.length * d);
  let doc = 0;
  let first = 0;
  for (let i = 0; i < at.length; i++) {
    while (at[i] >= first + docs.lengths[doc]) first += docs.lengths[doc++];
    const t = docs.starts[doc] + (at[i] - first);
    const row = docs.data.subarray(t * d, t * d + d);
    if (docs.dtype === 'int8') {
      const s = docs.scales![t];
      for (let j = 0; j < d; j++) out[i * d + j] = row[j] * s;
    } else out.set(decodeToFloat32(row as Float32Array | Uint16Array, docs.dtype, d), i * d);
  }
  return out;
}

/** Squared L2 distance of each row of x ([n][d]) to its nearest centroid of the codec. */
export async function nearestDistances(
  codec: PlaidIndex,
  x: Float32Array,
  kern: KernelOptions = {},
): Promise<Float32Array> {
  const d = codec.dim;
  // the kernel's L2 score is x.c - |c|^2 / 2, so |x - c|^2 = |x|^2 - 2 score
  const { scores } = await residualAddon().assign(x, codec.native.centroids, d, true, kern);
  const out = new Float32Array(scores.length);
  for (let i = 0; i < scores.length; i++) {
    let sq = 0;
    for (let j = 0; j < d; j++) sq += x[i * d + j] * x[i * d + j];
    out[i] = Math.max(0, sq - 2 * scores[i]);
  }
  return out;
}

/** The q-quantile (0..1) of values (a sorted copy; 0 for none). */
export function quantile(values: Float32Array, q: number): number {
  if (values.length === 0) return 0;
  const s = Float32Array.from(values).sort();
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
}

/** Share of distances above the threshold (0 for none). */
export function shareAbove(distances: Float32Array, threshold: number): number {
  if (distances.length === 0) return 0;
  let n = 0;
  for (const x of distances) if (x > threshold) n++;
  return n / distances.length;
}
