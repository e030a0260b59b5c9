// The residual codec's per-dimension buckets: b-bit codes for the residual x - centroid of every
// token, with cutoffs at the sample's per-dimension quantiles j / 2^b and, as reconstruction weights,
// the mean residual of each bucket (the weight that minimizes the squared error for those cutoffs;
// ColBERTv2 uses the bucket's mid quantile, shared by all dimensions). A token decodes as
// centroid[cid] + weight[k][code_k].

/** Entries per dimension of the lookup table the kernels read (native/cpu/residual.h). */
export const TABLE = 16;

export interface Buckets {
  bits: 2 | 4;
  d: number;
  /** [d][2^b - 1] ascending: code = the number of cutoffs below the residual component. */
  cutoffs: Float32Array;
  /** [d][2^b]: the value a code decodes to (added to the centroid's component). */
  weights: Float32Array;
  /** [d][16]: entry e = weights[k][e mod 2^b], the kernels' lookup table. */
  tables: Float32Array;
}

/** Fits the buckets on residual rows ([n][d], n >= 1). */
export function fitBuckets(residuals: Float32Array, d: number, bits: 2 | 4): Buckets {
  const n = residuals.length / d;
  const levels = 1 << bits;
  const cutoffs = new Float32Array(d * (levels - 1));
  const weights = new Float32Array(d * levels);
  const col = new Float32Array(n);
  for (let k = 0; k < d; k++) {
    for (let i = 0; i < n; i++) col[i] = residuals[i * d + k];
    col.sort();
    for (let j = 1; j < levels; j++)
      cutoffs[k * (levels - 1) + j - 1] = col[Math.min(n - 1, Math.floor((n * j) / levels))];
    // bucket j holds (cut[j - 1], cut[j]]: the sorted column splits at the last index <= each cutoff
    let i = 0;
    for (let j = 0; j < levels; j++) {
      const hi = j < levels - 1 ? cutoffs[k * (levels - 1) + j] : Number.POSITIVE_INFINITY;
      let s = 0;
      let m = 0;
      for (; i < n && col[i] <= hi; i++, m++) s += col[i];
      // an empty bucket (tied quantiles) decodes to its upper cutoff (or the lower one, for the last)
      weights[k * levels + j] = m > 0 ? s / m : j < levels - 1 ? hi : cutoffs[k * (levels - 1) + j - 1];
    }
  }
  return { bits, d, cutoffs, weights, tables: tablesOf(weights, d, bits) };
}

export function tablesOf(weights: Float32Array, d: number, bits: 2 | 4): Float32Array {
  const levels = 1 << bits;
  const t = new Float32Array(d * TABLE);
  for (let k = 0; k < d; k++)
    for (let e = 0; e < TABLE; e++) t[k * TABLE + e] = weights[k * levels + (e % levels)];
  return t;
}

/** The code of residual component r in dimension k (the encode's rule, for references and tests). */
export function bucketOf(b: Buckets, k: number, r: number): number {
  const levels = 1 << b.bits;
  let c = 0;
  while (c < levels - 1 && b.cutoffs[k * (levels - 1) + c] < r) c++;
  return c;
}

/** Code of token t (stream index) in dimension k, read from the block layout. */
export function codeAt(codes: Uint8Array, bits: number, d: number, t: number, k: number): number {
  const block = Math.floor(t / 16);
  const bit = (t % 16) * bits;
  const byte = codes[block * d * 2 * bits + k * 2 * bits + (bit >> 3)];
  return (byte >> (bit & 7)) & ((1 << bits) - 1);
}

/** Decodes tokens [t0, t1) of the stream into float32 rows (the reference decode). */
export function decodeTokens(
  centroids: Float32Array,
  b: Buckets,
  cids: Int32Array,
  codes: Uint8Array,
  t0: number,
  t1: number,
): Float32Array {
  const d = b.d;
  const levels = 1 << b.bits;
  const out = new Float32Array((t1 - t0) * d);
  for (let t = t0; t < t1; t++) {
    const c = cids[t] * d;
    for (let k = 0; k < d; k++)
      out[(t - t0) * d + k] = centroids[c + k] + b.weights[k * levels + codeAt(codes, b.bits, d, t, k)];
  }
  return out;
}
