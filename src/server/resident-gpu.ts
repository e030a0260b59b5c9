// The GPU side of a server's corpus: the devices it runs on (one, or a group that shards each
// segment) and the segments uploaded to them.

import { type CudaMemory, cuda } from '../backends/cuda.js';
import type { CorpusFile } from '../io/corpus/index.js';
import type { Corpus } from '../ops/corpus-search.js';
import type { Hit, ScoreMatrix, TokenBatch } from '../tensor.js';
import { type PassDtype, PREFILTER_FACTOR, type SegmentRun } from './segment-search.js';

/** What the server needs of a corpus on the GPU: one device's, or sharded over several. */
export interface GpuCorpus {
  topK(
    queries: TokenBatch,
    k: number,
    options?: { rescore?: { docs: GpuCorpus; candidates: number } },
  ): Promise<Hit[][]>;
  quantize(mode: 'int8' | 'fp8', options?: { scales?: 'token' | 'document' }): Promise<GpuCorpus>;
  select(indices: ArrayLike<number>): Promise<GpuCorpus>;
  score(queries: TokenBatch): Promise<ScoreMatrix>;
  dispose(): void;
}

/** The GPUs a server runs on: one device, or a group whose uploads shard each segment. */
export interface Gpus {
  name: string;
  /** Free bytes the resident corpus may count on (the least free GPU's, times the GPUs). */
  free(): Promise<number>;
  upload(batch: TokenBatch): Promise<GpuCorpus>;
  memory(): Promise<CudaMemory>;
  dispose(): void;
}

export async function openGpus(options: { device?: number; devices?: 'all' | number[] }): Promise<Gpus> {
  if (options.devices === undefined) {
    const d = await cuda({ device: options.device });
    return {
      name: d.info.name,
      free: async () => (await d.memory()).free,
      upload: (b) => d.upload(b),
      memory: () => d.memory(),
      dispose: () => d.dispose(),
    };
  }
  const g = await cuda({ devices: options.devices });
  const all = async () => Promise.all(g.devices.map((d) => d.memory()));
  return {
    name: `${g.devices.length} x ${g.devices[0].info.name}`,
    free: async () => Math.min(...(await all()).map((m) => m.free)) * g.devices.length,
    upload: (b) => g.upload(b),
    // the group's memory, every GPU added up
    memory: async () =>
      (await all()).reduce((s, m) => ({
        inUse: s.inUse + m.inUse,
        cached: s.cached + m.cached,
        peak: s.peak + m.peak,
        total: s.total + m.total,
        free: s.free + m.free,
      })),
    dispose: () => g.dispose(),
  };
}

export interface DeviceSegment {
  /** The segment file it was uploaded from (segments are immutable: same file, same documents). */
  file: string;
  firstDocument: number;
  docs: GpuCorpus;
  /** The int8 copy a request's `prefilter: 'int8'` scans, made on first use. */
  int8?: Promise<GpuCorpus>;
  /** The server's 8-bit copy (`dtype`), made with the upload: every search pass scans it. */
  eight?: GpuCorpus;
}

/** Releases a segment's device corpora. */
export function disposeSegment(seg: DeviceSegment) {
  seg.docs.dispose();
  seg.eight?.dispose();
  seg.int8?.then((d) => d.dispose()).catch(() => undefined);
}

/**
 * Device bytes of an 8-bit copy of `tokens` tokens of `dim`: the codes and at most one float32 scale
 * per token (a bound: the server's copies keep one per document).
 */
export function eightBitBytes(tokens: number, dim: number): number {
  return tokens * dim + 4 * tokens;
}

/**
 * Uploads the segments of `corpus` from number `from` on, one device corpus each, and with `eight`
 * its 8-bit copy (quantized on the GPU from the upload).
 */
export async function uploadSegments(
  gpu: Gpus,
  corpus: Corpus,
  from: number,
  to = corpus.file.segments.length,
  eight?: 'int8' | 'fp8',
): Promise<DeviceSegment[]> {
  const out: DeviceSegment[] = [];
  for (let g = from; g < to; g++) {
    const seg = corpus.file.segments[g];
    const n = seg.header.documents;
    if (n === 0) continue;
    const indices = Array.from({ length: n }, (_, i) => seg.firstDocument + i);
    const docs = await gpu.upload(corpus.readDocuments(indices));
    try {
      out.push({
        file: seg.file,
        firstDocument: seg.firstDocument,
        docs,
        // one scale per document: the pass's scan runs its faster document-scale kernels, and the
        // exact rescore of the candidates makes up the ranking fidelity it gives up
        eight: eight === undefined ? undefined : await docs.quantize(eight, { scales: 'document' }),
      });
    } catch (e) {
      docs.dispose();
      for (const made of out) disposeSegment(made);
      throw e;
    }
  }
  return out;
}

/**
 * Each device segment's part of a search: scanned exactly, or (8-bit) its copy scanned and the
 * candidates rescored from the float segment in the same job.
 */
export function deviceRuns(
  file: CorpusFile,
  segments: readonly DeviceSegment[],
  queries: TokenBatch,
  eight: PassDtype | 'int8' | undefined,
): SegmentRun[] {
  return segments.map((seg) => ({
    firstDocument: seg.firstDocument,
    documents: file.segments[file.segmentOf(seg.firstDocument)].header.documents,
    run: async (kk: number) => {
      if (eight === undefined) return seg.docs.topK(queries, kk);
      // the server's own copy, or a request's int8 prefilter on an exact server (made on first use)
      if (!seg.eight) seg.int8 ??= seg.docs.quantize('int8');
      const scan = seg.eight ?? (await seg.int8!);
      return scan.topK(queries, kk, { rescore: { docs: seg.docs, candidates: PREFILTER_FACTOR * kk } });
    },
  }));
}
