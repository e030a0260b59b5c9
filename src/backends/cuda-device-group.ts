// Several GPUs opened together (cuda({ devices })): a batch uploaded as contiguous runs of documents
// balanced by token count (balancedCuts), or an empty corpus allocated evenly for appends; both
// become a ShardedCorpus (cuda-sharded.ts).

import { BackendUnavailableError, InvalidArgumentError } from '../errors.js';
import { type DType, isTokenBatch, type TokenBatch } from '../tensor.js';
import { type CudaDevice, type CudaMemory, cuda, cudaStatus } from './cuda.js';
import { describe, deviceError, onAll, range, Sharded, type ShardedCorpus } from './cuda-sharded.js';

/** Several GPUs opened together (cuda({ devices })). */
export interface CudaDeviceGroup {
  readonly devices: readonly CudaDevice[];
  /** Copies a batch to the GPUs, each a contiguous run of documents, balanced by token count. */
  upload(batch: TokenBatch, options?: { shard?: 'balanced' }): Promise<ShardedCorpus>;
  /** An empty corpus with room for `tokens` / `items` split evenly over the GPUs, filled by append(). */
  alloc(spec: { dtype: DType; dim: number; tokens: number; items: number }): Promise<ShardedCorpus>;
  memory(): Promise<CudaMemory[]>;
  /** Disposes every corpus of every device of the group. */
  dispose(): void;
}

/**
 * Cut points of `parts` contiguous runs of items whose token counts are as even as the items allow:
 * run i ends at the first item where the running total reaches (i + 1) / parts of all tokens.
 */
export function balancedCuts(lengths: ArrayLike<number>, parts: number): number[] {
  let total = 0;
  for (let i = 0; i < lengths.length; i++) total += lengths[i];
  const cuts = [0];
  let acc = 0;
  let item = 0;
  for (let p = 1; p < parts; p++) {
    const target = (total * p) / parts;
    while (item < lengths.length && acc + lengths[item] / 2 < target) acc += lengths[item++];
    cuts.push(item);
  }
  cuts.push(lengths.length);
  return cuts;
}

/** Items [a, b) of a batch, over the same buffer. */
function sliceItems(batch: TokenBatch, a: number, b: number): TokenBatch {
  const lengths = batch.lengths.subarray(a, b);
  let maxLength = 0;
  for (const l of lengths) if (l > maxLength) maxLength = l;
  return {
    ...batch,
    layout: 'ragged',
    count: b - a,
    maxLength,
    starts: batch.starts.subarray(a, b),
    lengths,
  };
}

class Group implements CudaDeviceGroup {
  constructor(readonly devices: readonly CudaDevice[]) {}

  async upload(batch: TokenBatch, options: { shard?: 'balanced' } = {}): Promise<ShardedCorpus> {
    if (!isTokenBatch(batch))
      throw new InvalidArgumentError('batch', 'a TokenBatch (denseBatch or raggedBatch)', describe(batch));
    const shard = options?.shard ?? 'balanced';
    if (shard !== 'balanced') throw new InvalidArgumentError('options.shard', "'balanced'", describe(shard));
    const cuts = balancedCuts(batch.lengths, this.devices.length);
    const settled = await Promise.allSettled(
      this.devices.map((d, i) => d.upload(sliceItems(batch, cuts[i], cuts[i + 1]))),
    );
    const made = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
    const bad = settled.findIndex((s) => s.status === 'rejected');
    if (bad >= 0) {
      for (const c of made) c.dispose();
      throw deviceError(this.devices[bad], (settled[bad] as PromiseRejectedResult).reason);
    }
    const parts = this.devices.map((dev, i) => ({
      dev,
      corpus: made[i],
      positions: range(cuts[i], cuts[i + 1] - cuts[i]),
    }));
    return new Sharded(parts, false, { dim: batch.dim, dtype: made[0].dtype });
  }

  async alloc(spec: { dtype: DType; dim: number; tokens: number; items: number }): Promise<ShardedCorpus> {
    if (spec === null || typeof spec !== 'object')
      throw new InvalidArgumentError('spec', '{ dtype, dim, tokens, items }', describe(spec));
    const n = this.devices.length;
    const share = { tokens: Math.ceil(spec.tokens / n), items: Math.ceil(spec.items / n) };
    const made = await onAll(
      this.devices,
      (d) => d,
      (d) => d.alloc({ ...spec, ...share }),
    );
    const parts = this.devices.map((dev, i) => ({
      dev,
      corpus: made[i],
      positions: new Float64Array(0),
      room: { ...share },
    }));
    return new Sharded(parts, false, { dim: spec.dim, dtype: made[0].dtype });
  }

  memory(): Promise<CudaMemory[]> {
    return onAll(
      this.devices,
      (d) => d,
      (d) => d.memory(),
    );
  }

  dispose(): void {
    for (const d of this.devices) d.dispose();
  }
}

/**
 * Opens several GPUs: 'all', or device indices (an index may repeat: several shards on one GPU,
 * which tests use on one-GPU hosts).
 */
export async function openDeviceGroup(devices: 'all' | readonly number[]): Promise<CudaDeviceGroup> {
  const status = cudaStatus();
  if (!status.available)
    throw new BackendUnavailableError(`CUDA backend unavailable: ${status.reason ?? 'unknown reason'}`);
  const n = status.devices?.length ?? 0;
  let list: number[];
  if (devices === 'all') list = Array.from({ length: n }, (_, i) => i);
  else if (Array.isArray(devices) && devices.length > 0) {
    list = devices.map((d, i) => {
      if (!Number.isInteger(d) || d < 0 || d >= n)
        throw new InvalidArgumentError(`devices[${i}]`, `a CUDA device index in [0, ${n})`, describe(d));
      return d;
    });
  } else
    throw new InvalidArgumentError(
      'devices',
      "'all' or a non-empty array of device indices",
      describe(devices),
    );
  return new Group(await Promise.all(list.map((device) => cuda({ device }))));
}
