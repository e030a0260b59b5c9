// Nearest neighbours and Chamfer distance between point clouds on host arrays.
//
// CD(P, Q) = (1/N) sum_p min_q |p - q|^2 + (1/M) sum_q min_p |q - p|^2, for B pairs of clouds at once
// (cloud b of P with cloud b of Q). Clouds are token batches of float32 points with d in [1, 8]
// (raggedBatch: packed [T, d] + offsets [B+1]; denseBatch; or a tokenMatrix for one cloud).
// backend 'cuda' runs the same algorithm on the GPU (native/cuda/kernels/maxsim_chamfer.cu).
// The native CPU engine (native/cpu/chamfer.cc) searches in the expanded form on centred coordinates,
// never materializing the [N, M] distance matrix, saves the argmin (ties to the lowest index) and
// reports the chosen neighbour's distance recomputed as sum (p - q*)^2; the backward pass routes
// gradients through the saved argmin and a CSR inverse of it, deterministically.
//
// Empty clouds: a directed term over an empty source cloud is 0; a point whose target cloud is empty
// gets index -1 and distance +Infinity (so that pair's directed term is +Infinity) and no gradient.
//
// Per-point results are compact: pair by pair, point by point (for a raggedBatch packed from offset
// 0 this is the input's own order). Gradients come back in the layout of the input buffers.

import { CHAMFER_MAX_DIM } from '../backends/constants.js';
import { type ChamferPlan, planChamfer } from '../backends/cuda-chamfer-plan.js';
import type { ChamferReduction } from '../backends/reference-chamfer.js';
import { type BackendChoice, resolveBackend } from '../backends/select.js';
import { InvalidArgumentError } from '../errors.js';
import { loadNative } from '../native.js';
import { isTokenBatch, isTokenMatrix, matrixAsBatch, type TokenBatch, type TokenMatrix } from '../tensor.js';

export type { ChamferReduction } from '../backends/reference-chamfer.js';

/** CPU kernel sets of the Chamfer engine. */
export type ChamferIsa = 'avx512' | 'avx2' | 'portable';

/** One cloud (a TokenMatrix) or B clouds (a TokenBatch) of float32 points, d in [1, 8]. */
export type PointClouds = TokenMatrix | TokenBatch;

export interface NearestOptions {
  /**
   * 'auto' (default): the GPU where one is usable, else the CPU engine; 'cpu'; 'cuda' (native/cuda/
   * kernels/maxsim_chamfer.cu: the same argmin and distances as the CPU's AVX2 / AVX-512 kernel sets,
   * bit for bit).
   */
  backend?: BackendChoice;
  /** CUDA device index (default 0). */
  device?: number;
  /** CPU worker threads (default all cores). */
  threads?: number;
  /** CPU kernel set override, for tests and benchmarks. */
  isa?: ChamferIsa;
  /**
   * backend 'cuda': skip the runs of targets that provably hold no nearer point (default true). The
   * results are the same either way; false visits every target (the brute-force cost, for comparison).
   */
  prune?: boolean;
}

export interface NearestResult {
  /** Per source point (compact order): the nearest target's index within its cloud; -1: empty target. */
  index: Int32Array;
  /** Its squared distance sum_k (p_k - q_k)^2 (computed in double, rounded once); +Infinity: empty target. */
  distance: Float32Array;
}

export interface ChamferOptions extends NearestOptions {
  /**
   * Over each cloud's points: 'mean' (default, the usual Chamfer distance), 'sum', or 'none' (the
   * loss is per point: backward takes per-point gradients; the per-pair arrays then hold the sums).
   */
  reduction?: ChamferReduction;
  /** Both directions (default true); false: only P -> Q. */
  bidirectional?: boolean;
  /**
   * backend 'cuda', backward: 'csr' (default: a CSR inverse of the argmin, fixed order, bitwise the CPU
   * engine's gradients) or 'atomic' (float atomics, order-dependent rounding; for comparison).
   */
  gradientPath?: 'csr' | 'atomic';
}

export interface ChamferResult {
  /** Per pair: forward + reverse. */
  distances: Float64Array;
  /** Per pair: the P -> Q term (mean or sum of pToQ.distance over the cloud of P). */
  forward: Float64Array;
  /** Per pair: the Q -> P term (zeros when not bidirectional). */
  reverse: Float64Array;
  pToQ: NearestResult;
  /** Absent when not bidirectional. */
  qToP?: NearestResult;
  /** The CPU kernel set that ran ('cuda' on the GPU). */
  isa: string;
  /** backend 'cuda': device time of the pass's kernels (CUDA events), milliseconds. */
  deviceMs?: number;
}

export interface ChamferGradients {
  /** d loss / d P, in the layout of P's buffer (rows outside every cloud are 0). */
  dP: Float32Array;
  dQ: Float32Array;
  /** backend 'cuda': device time of the backward kernels (CUDA events), milliseconds. */
  deviceMs?: number;
}

export interface ChamferTrainResult extends ChamferResult {
  /**
   * Gradients given d loss / d distances: one value per pair ('mean' / 'sum'), or one per point
   * ('none': the P points' then the Q points', compact order). The argmin of the forward pass is held
   * fixed (the subgradient of the min). Deterministic: bitwise identical for any thread count. On
   * CUDA the points and the argmin stay on the device from the forward pass until this result is
   * collected, and the backward uses those points; keep P and Q unchanged in between (the CPU
   * engine reads them again).
   */
  backward(grad: Float32Array | Float64Array | readonly number[]): Promise<ChamferGradients>;
}

interface ChamferAddon {
  forwardAsync(
    P: TokenBatch,
    Q: TokenBatch,
    options: { bidirectional: boolean; threads?: number; isa?: string },
  ): Promise<{
    indexPQ: Int32Array;
    distPQ: Float32Array;
    indexQP?: Int32Array;
    distQP?: Float32Array;
    isa: string;
  }>;
  backwardAsync(
    P: TokenBatch,
    Q: TokenBatch,
    indexPQ: Int32Array,
    weightP: Float64Array,
    indexQP: Int32Array | null,
    weightQ: Float64Array | null,
    options: { threads?: number },
  ): Promise<ChamferGradients>;
  isas(): string[];
}

/** The clouds and the argmin of a CUDA forward pass, kept on the device for its backward pass. */
type CudaChamferSession = { readonly __brand: 'CudaChamferSession' };

interface CudaChamferAddon {
  chamferForward(
    device: number,
    P: TokenBatch,
    Q: TokenBatch,
    options: { bidirectional: boolean; prune: boolean; plan: ChamferPlan },
  ): Promise<
    Awaited<ReturnType<ChamferAddon['forwardAsync']>> & { kernelMs: number; session: CudaChamferSession }
  >;
  chamferBackward(
    device: number,
    P: TokenBatch,
    Q: TokenBatch,
    session: CudaChamferSession,
    weightP: Float64Array,
    weightQ: Float64Array | null,
    options: { path: 'csr' | 'atomic' },
  ): Promise<ChamferGradients & { kernelMs: number }>;
}

function addon(): ChamferAddon {
  return (loadNative() as unknown as { chamfer: ChamferAddon }).chamfer;
}

function cudaAddon(): CudaChamferAddon {
  return loadNative().cuda as unknown as CudaChamferAddon;
}

/**
 * Whether the call runs on the GPU: 'cuda', or 'auto' where a usable GPU is present (the kernels are
 * verified bitwise against the CPU engine on the H200) unless a CPU kernel set is forced with `isa`.
 */
function onCuda(options: NearestOptions): boolean {
  if (options.backend !== 'cuda' && options.isa !== undefined) return false;
  return resolveBackend(options.backend) === 'cuda';
}

async function forwardNative(
  p: TokenBatch,
  q: TokenBatch,
  options: NearestOptions,
  bidirectional: boolean,
): Promise<
  Awaited<ReturnType<ChamferAddon['forwardAsync']>> & { kernelMs?: number; session?: CudaChamferSession }
> {
  if (options.prune !== undefined && typeof options.prune !== 'boolean') {
    throw new InvalidArgumentError('prune', 'true or false', JSON.stringify(options.prune));
  }
  if (onCuda(options)) {
    return cudaAddon().chamferForward(options.device ?? 0, p, q, {
      bidirectional,
      prune: options.prune ?? true,
      plan: planChamfer(p.lengths, q.lengths, p.dim, bidirectional),
    });
  }
  return addon().forwardAsync(p, q, { ...nativeOptions(options), bidirectional });
}

/** The Chamfer kernel sets this build has and this CPU runs, best first. */
export function chamferIsas(): ChamferIsa[] {
  return addon().isas() as ChamferIsa[];
}

function asClouds(x: unknown, name: string): TokenBatch {
  if (!isTokenMatrix(x) && !isTokenBatch(x)) {
    throw new InvalidArgumentError(
      name,
      'a TokenMatrix (one cloud) or TokenBatch (B clouds) of points',
      typeof x,
    );
  }
  if (x.dtype !== 'float32')
    throw new InvalidArgumentError(`${name}.dtype`, "'float32' coordinates", `'${x.dtype}'`);
  if (!Number.isInteger(x.dim) || x.dim < 1 || x.dim > CHAMFER_MAX_DIM) {
    throw new InvalidArgumentError(
      `${name}.dim`,
      `a point dimension in [1, ${CHAMFER_MAX_DIM}]`,
      String(x.dim),
    );
  }
  return isTokenMatrix(x) ? matrixAsBatch(x) : x;
}

function pointsOf(c: TokenBatch): number {
  let n = 0;
  for (let b = 0; b < c.count; b++) n += c.lengths[b];
  return n;
}

function prepare(P: unknown, Q: unknown, options: NearestOptions): [TokenBatch, TokenBatch] {
  const p = asClouds(P, 'P');
  const q = asClouds(Q, 'Q');
  if (q.dim !== p.dim)
    throw new InvalidArgumentError('Q.dim', `${p.dim} (the dimension of P)`, String(q.dim));
  if (q.count !== p.count) {
    throw new InvalidArgumentError('Q.count', `${p.count} clouds (one per cloud of P)`, String(q.count));
  }
  resolveBackend(options.backend); // validates the name; 'cuda' without a usable GPU throws the reason
  if (options.device !== undefined && (!Number.isInteger(options.device) || options.device < 0)) {
    throw new InvalidArgumentError('device', 'a CUDA device index >= 0', String(options.device));
  }
  if (options.threads !== undefined && (!Number.isInteger(options.threads) || options.threads < 0)) {
    throw new InvalidArgumentError('threads', 'an integer >= 0 (0 = all cores)', String(options.threads));
  }
  if (options.isa !== undefined && !['avx512', 'avx2', 'portable'].includes(options.isa)) {
    throw new InvalidArgumentError('isa', "'avx512', 'avx2' or 'portable'", JSON.stringify(options.isa));
  }
  return [p, q];
}

function nativeOptions(options: NearestOptions): { threads?: number; isa?: string } {
  const out: { threads?: number; isa?: string } = {};
  if (options.threads !== undefined) out.threads = options.threads;
  if (options.isa !== undefined) out.isa = options.isa;
  return out;
}

/** For every point of P, its nearest point in the paired cloud of Q (index, squared distance). */
export async function nearest(
  P: PointClouds,
  Q: PointClouds,
  options: NearestOptions = {},
): Promise<NearestResult> {
  const [p, q] = prepare(P, Q, options);
  const r = await forwardNative(p, q, options, false);
  return { index: r.indexPQ, distance: r.distPQ };
}

function checkReduction(r: unknown): ChamferReduction {
  if (r === undefined) return 'mean';
  if (r !== 'mean' && r !== 'sum' && r !== 'none') {
    throw new InvalidArgumentError('reduction', "'mean', 'sum' or 'none'", JSON.stringify(r));
  }
  return r;
}

/** Per pair: the sum (or mean) of the per-point distances of each source cloud, in float64. */
function directed(src: TokenBatch, dist: Float32Array, reduction: ChamferReduction): Float64Array {
  const out = new Float64Array(src.count);
  let o = 0;
  for (let b = 0; b < src.count; b++) {
    const n = src.lengths[b];
    let s = 0;
    for (let i = 0; i < n; i++) s += dist[o++];
    out[b] = reduction === 'mean' && n > 0 ? s / n : s;
  }
  return out;
}

/** Per-point weights of the directed term: d loss / d dist for every source point. */
function pointWeights(
  src: TokenBatch,
  grad: ArrayLike<number>,
  gradOffset: number,
  reduction: ChamferReduction,
) {
  const w = new Float64Array(pointsOf(src));
  if (reduction === 'none') {
    for (let i = 0; i < w.length; i++) w[i] = grad[gradOffset + i];
    return w;
  }
  let o = 0;
  for (let b = 0; b < src.count; b++) {
    const n = src.lengths[b];
    const g = reduction === 'mean' ? grad[b] / n : grad[b];
    for (let i = 0; i < n; i++) w[o++] = g;
  }
  return w;
}

async function forwardPass(p: TokenBatch, q: TokenBatch, options: ChamferOptions) {
  const reduction = checkReduction(options.reduction);
  const bidirectional = options.bidirectional ?? true;
  if (
    options.gradientPath !== undefined &&
    options.gradientPath !== 'csr' &&
    options.gradientPath !== 'atomic'
  ) {
    throw new InvalidArgumentError('gradientPath', "'csr' or 'atomic'", JSON.stringify(options.gradientPath));
  }
  if (typeof bidirectional !== 'boolean') {
    throw new InvalidArgumentError('bidirectional', 'true or false', JSON.stringify(bidirectional));
  }
  const r = await forwardNative(p, q, options, bidirectional);
  const pToQ = { index: r.indexPQ, distance: r.distPQ };
  const qToP = bidirectional && r.indexQP && r.distQP ? { index: r.indexQP, distance: r.distQP } : undefined;
  const forward = directed(p, pToQ.distance, reduction);
  const reverse = qToP ? directed(q, qToP.distance, reduction) : new Float64Array(p.count);
  const distances = new Float64Array(p.count);
  for (let b = 0; b < p.count; b++) distances[b] = forward[b] + reverse[b];
  const result: ChamferResult = { distances, forward, reverse, pToQ, isa: r.isa };
  if (qToP) result.qToP = qToP;
  if (r.kernelMs !== undefined) result.deviceMs = r.kernelMs;
  return { result, reduction, session: r.session };
}

/** Chamfer distance of every pair of clouds (and both directed terms). */
export async function chamfer(
  P: PointClouds,
  Q: PointClouds,
  options: ChamferOptions = {},
): Promise<ChamferResult> {
  const [p, q] = prepare(P, Q, options);
  return (await forwardPass(p, q, options)).result;
}

/** Forward pass that keeps the argmin, with the matching backward pass (see ChamferTrainResult). */
export async function chamferTrain(
  P: PointClouds,
  Q: PointClouds,
  options: ChamferOptions = {},
): Promise<ChamferTrainResult> {
  const [p, q] = prepare(P, Q, options);
  const { result, reduction, session } = await forwardPass(p, q, options);
  const np = result.pToQ.index.length;
  const nq = result.qToP ? result.qToP.index.length : 0;
  const threads = options.threads;
  return {
    ...result,
    async backward(grad) {
      const expected = reduction === 'none' ? np + nq : p.count;
      if (
        !(ArrayBuffer.isView(grad) || Array.isArray(grad)) ||
        (grad as ArrayLike<number>).length !== expected
      ) {
        const what =
          reduction === 'none'
            ? `${expected} per-point gradients (P's points, then Q's)`
            : `${expected} per-pair gradients`;
        const got =
          ArrayBuffer.isView(grad) || Array.isArray(grad)
            ? `${(grad as ArrayLike<number>).length} values`
            : typeof grad;
        throw new InvalidArgumentError('grad', what, got);
      }
      const g = grad as ArrayLike<number>;
      for (let i = 0; i < g.length; i++) {
        if (!Number.isFinite(g[i]))
          throw new InvalidArgumentError(`grad[${i}]`, 'a finite number', String(g[i]));
      }
      const wP = pointWeights(p, g, 0, reduction);
      const wQ = result.qToP ? pointWeights(q, g, np, reduction) : null;
      if (session) {
        // The clouds and the argmin are still on the device (the session): only the weights go up.
        const path = options.gradientPath ?? 'csr';
        const r = await cudaAddon().chamferBackward(options.device ?? 0, p, q, session, wP, wQ, { path });
        return { dP: r.dP, dQ: r.dQ, deviceMs: r.kernelMs };
      }
      // Private copies of the argmin: the caller may edit the result's arrays.
      const iPQ = result.pToQ.index.slice();
      const iQP = result.qToP ? result.qToP.index.slice() : null;
      return addon().backwardAsync(p, q, iPQ, wP, iQP, wQ, threads === undefined ? {} : { threads });
    },
  };
}
