// Seeded, deterministic k-means over a sample of token vectors (the codec's centroids). The
// assignment (every sample row against every centroid, nearest in L2) runs in the native SIMD
// kernel; the centroid update is float64 TypeScript (O(sample x d) per iteration, once per build).
import { type KernelOptions, residualAddon } from './native.js';

/** mulberry32: a small seeded generator; the same seed gives the same stream everywhere. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** n distinct indices of [0, total), ascending (Knuth's selection sampling: one pass, seeded). */
export function sampleIndices(total: number, n: number, rand: () => number): Float64Array {
  const out = new Float64Array(Math.min(n, total));
  let got = 0;
  for (let t = 0; t < total && got < out.length; t++) {
    if ((total - t) * rand() < out.length - got) out[got++] = t;
  }
  return out;
}

export interface KMeansOptions extends KernelOptions {
  seed: number;
  iterations: number;
  /** Two-level assignment in every iteration (groups of the current centroids): the coarse count and probe. */
  grouped?: { groups: number; probe: number };
  /** Called after each iteration with (iterations done, iterations). */
  onIteration?: (done: number, total: number) => void;
  /** Another engine's assignment with the same rule (the GPU codec, src/plaid/cuda-codec.ts). */
  assign?: (
    x: Float32Array,
    centroids: Float32Array,
    d: number,
    groups?: AssignGroups,
  ) => Promise<Int32Array>;
}

/**
 * The groups of a two-level assignment (native/cpu/residual.h, ResidualGroups): `coarse` centroids
 * ([g][d]) from k-means over the fine centroids, each fine centroid a member of its nearest coarse one
 * (members ascending within each group); a row takes the `probe` best groups' members as candidates.
 */
export interface AssignGroups {
  coarse: Float32Array;
  offsets: Int32Array;
  members: Int32Array;
  probe: number;
}

/** The default assignment is grouped from this many centroids up: measured 4.7x faster than exact at 8192 (probe 4 of 128: 0.28% of tokens differ, squared distance +0.95%) but no faster at 2048 (bench/plaid-assign.ts, bench/results/plaid-cpu.md). */
export const GROUPED_FROM = 8192;

/** Groups for k centroids: 2^round(log2(sqrt(k))) (64 for k = 2048, 256 for 65,536). */
export function defaultGroupCount(k: number): number {
  return Math.max(1, Math.min(k, 2 ** Math.round(Math.log2(Math.sqrt(k)))));
}

/**
 * Groups the k fine centroids ([k][d]) under g coarse ones (seeded k-means over the centroids, each
 * fine centroid a member of its nearest coarse one). The groups are uneven: dense regions hold many
 * centroids and most tokens (K = 2048, g = 64 on the synthetic corpus: largest 667, a token's group
 * 253 on average against a mean of 32), so the work per token follows the big groups. Balancing the
 * membership by capacity was measured and rejected: 30% of tokens then land on another centroid.
 */
export async function buildGroups(
  centroids: Float32Array,
  d: number,
  g: number,
  probe: number,
  o: KernelOptions & { seed: number },
): Promise<AssignGroups> {
  const k = centroids.length / d;
  const km = await kmeans(centroids, d, Math.min(g, k), {
    seed: o.seed,
    iterations: 6,
    threads: o.threads,
    isa: o.isa,
  });
  const gn = km.centroids.length / d;
  const offsets = new Int32Array(gn + 1);
  for (let c = 0; c < k; c++) offsets[km.assignment[c] + 1]++;
  for (let j = 0; j < gn; j++) offsets[j + 1] += offsets[j];
  const members = new Int32Array(k);
  const cursor = offsets.slice(0, gn);
  for (let c = 0; c < k; c++) members[cursor[km.assignment[c]]++] = c;
  return { coarse: km.centroids, offsets, members, probe: Math.min(probe, gn) };
}

export interface KMeansResult {
  centroids: Float32Array;
  /** Nearest centroid of each sample row after the last update. */
  assignment: Int32Array;
}

/**
 * k centroids of the rows of `x` ([n][d]); k <= n. Initial centroids are k distinct rows chosen by
 * the seed; an emptied cluster takes the row farthest from its centroid that no other empty cluster
 * took, so no centroid is lost and the result depends only on (x, k, seed, iterations).
 */
export async function kmeans(x: Float32Array, d: number, k: number, o: KMeansOptions): Promise<KMeansResult> {
  const n = x.length / d;
  const rand = seededRandom(o.seed);
  const perm = new Int32Array(n);
  for (let i = 0; i < n; i++) perm[i] = i;
  for (let i = 0; i < k; i++) {
    const j = i + Math.floor(rand() * (n - i));
    const t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  const centroids = new Float32Array(k * d);
  for (let c = 0; c < k; c++) centroids.set(x.subarray(perm[c] * d, perm[c] * d + d), c * d);
  const addon = residualAddon();
  const kern = { threads: o.threads, isa: o.isa };
  const assignNow = async () => {
    const grouped = o.grouped;
    if (!grouped || grouped.groups >= k)
      return o.assign ? o.assign(x, centroids, d) : (await addon.assign(x, centroids, d, true, kern)).ids;
    const groups = await buildGroups(centroids, d, grouped.groups, grouped.probe, { ...kern, seed: o.seed });
    if (o.assign) return o.assign(x, centroids, d, groups);
    return (await addon.assign(x, centroids, d, true, { ...kern, groups })).ids;
  };
  let assign = await assignNow();
  const sums = new Float64Array(k * d);
  const counts = new Float64Array(k);
  for (let it = 0; it < o.iterations; it++) {
    sums.fill(0);
    counts.fill(0);
    for (let i = 0; i < n; i++) {
      const c = assign[i];
      counts[c]++;
      const o1 = c * d;
      const o2 = i * d;
      for (let j = 0; j < d; j++) sums[o1 + j] += x[o2 + j];
    }
    const empty: number[] = [];
    for (let c = 0; c < k; c++) {
      if (counts[c] === 0) {
        empty.push(c);
        continue;
      }
      for (let j = 0; j < d; j++) centroids[c * d + j] = sums[c * d + j] / counts[c];
    }
    if (empty.length > 0) reseed(x, d, centroids, assign, empty);
    assign = await assignNow();
    o.onIteration?.(it + 1, o.iterations);
  }
  return { centroids, assignment: assign };
}

// Empty clusters take the rows farthest from their centroids (distinct rows, farthest first).
function reseed(x: Float32Array, d: number, centroids: Float32Array, assign: Int32Array, empty: number[]) {
  const n = assign.length;
  const dist = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    let s = 0;
    const c = assign[i] * d;
    for (let j = 0; j < d; j++) {
      const t = x[i * d + j] - centroids[c + j];
      s += t * t;
    }
    dist[i] = s;
  }
  const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => dist[b] - dist[a] || a - b);
  empty.forEach((c, e) => {
    const row = order[e % n];
    centroids.set(x.subarray(row * d, row * d + d), c * d);
  });
}
