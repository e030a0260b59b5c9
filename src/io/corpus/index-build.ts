// Building and growing the index of a corpus (`maxsim corpus index`, and after `corpus append` /
// `compact`), under the writer lock. A build samples live documents, fits the codec (k-means and the
// residual buckets: buildIndex over the sample) and the drift threshold (the 99th percentile of the
// sample's squared distance to its nearest centroid), then encodes every token segment against it.
// Growing encodes only the segments the index does not list yet, against the existing codec, and
// measures their drift. Each index file is written durably; one MANIFEST publish makes them visible.
import * as path from 'node:path';
import { cudaUnavailableReason } from '../../backends/select.js';
import { InvalidArgumentError, MaxsimError } from '../../errors.js';
import { loadNative } from '../../native.js';
import { dequantize } from '../../ops/quantize.js';
import { encodeWith, nearestDistances, quantile, sampleTokens, shareAbove } from '../../plaid/append.js';
import { plaidCudaReason } from '../../plaid/cuda-native.js';
import { seededRandom } from '../../plaid/kmeans.js';
import { buildIndex, defaultCentroids, PlaidIndex } from '../../plaid/plaid.js';
import { expectInteger, type TokenBatch } from '../../tensor.js';
import { removeFile, syncDir } from './files.js';
import { typedView } from './format.js';
import { writeMerged } from './index-drop.js';
import { indexName, writeIndexFile } from './index-segments.js';
import { CorpusLock, type LockOptions } from './lock.js';
import {
  type CorpusInfo,
  describeManifest,
  describeValue,
  indexFilesOf,
  type Manifest,
  publishManifest,
  REBUILD_DRIFT,
  readManifest,
  removeLeftovers,
} from './manifest.js';
import type { ManifestIndex, ManifestIndexSegment } from './manifest-index.js';
import { CorpusFile } from './reader.js';

export interface IndexProgress {
  stage: 'sample' | 'train' | 'encode' | 'drop' | 'publish';
  /** encode: segments done and to do. */
  done: number;
  total: number;
}

export interface CorpusIndexOptions extends LockOptions {
  /** Bits per residual dimension, 2 (default) or 4. */
  bits?: 2 | 4;
  /** Centroids K (default: PLAID's 2^floor(log2(16 sqrt(live tokens)))). */
  centroids?: number;
  /** Tokens sampled (whole live documents) to fit the codec (default min(live tokens, 64 K)). */
  sample?: number;
  /** Seed of the sample and k-means (default 1). */
  seed?: number;
  /** k-means iterations (default 8). */
  iterations?: number;
  /** Fit a new codec and re-encode every segment even when the corpus has an index. */
  rebuild?: boolean;
  /**
   * Keep only the index: the token segments are replaced by token-less ones (index-drop.ts) and
   * searches score on the decoded residuals. Once dropped, every later index step drops too.
   */
  dropTokens?: boolean;
  /**
   * Where the codec is fitted and the tokens encoded: 'cpu', 'cuda' (the CUDA index build, where
   * the addon has the CUDA codec: src/plaid/cuda-codec.ts, bitwise the CPU's encode) or 'auto'
   * (default: CUDA when it is available, else CPU).
   */
  backend?: 'auto' | 'cpu' | 'cuda';
  threads?: number;
  onProgress?: (p: IndexProgress) => void;
}

export interface CorpusIndexResult {
  info: CorpusInfo;
  /** Whether a new codec was fitted (a build or rebuild), else only new segments were encoded. */
  trained: boolean;
  /** Token segments encoded by this call. */
  encoded: number;
  /** Token-weighted drift of the segments this call encoded (0 when none). */
  drift: number;
  /** Whether the corpus's drift now calls for `corpus index --rebuild`. */
  rebuildAdvised: boolean;
  /** Where the build ran, and why not on the GPU under 'auto'. */
  backend: 'cpu' | 'cuda';
  backendNote?: string;
  /** The codec's mean squared reconstruction error over its sample, and the sample's mean |x|^2. */
  meanSquaredError: number;
  meanSquaredNorm: number;
}

const DRIFT_SAMPLE = 65536;

/** The backend an index build runs on: 'cuda' needs a GPU and the CUDA build; 'auto' falls back to the CPU. */
export function indexBackend(choice: unknown): { backend: 'cpu' | 'cuda'; note?: string } {
  if (choice === undefined || choice === 'auto' || choice === 'cpu' || choice === 'cuda') {
    const gpu = cudaUnavailableReason();
    const build = plaidCudaReason();
    const why = gpu ? `no usable GPU (${gpu})` : build ? `no CUDA index build (${build})` : undefined;
    if (choice === 'cuda' && why)
      throw new InvalidArgumentError('backend', `'cpu' or 'auto' here (${why})`, "'cuda'");
    if (choice === 'cpu') return { backend: 'cpu' };
    if (!why) return { backend: 'cuda' };
    // said where a GPU is there but not used (without one, the CPU is the only choice: no note)
    return gpu ? { backend: 'cpu' } : { backend: 'cpu', note: `the CPU builds the index: ${why}` };
  }
  throw new InvalidArgumentError('backend', "'auto', 'cpu' or 'cuda'", describeValue(choice));
}

/** Builds the index of a corpus, or encodes the segments appended since (see the module comment). */
export async function indexCorpus(dir: string, options: CorpusIndexOptions = {}): Promise<CorpusIndexResult> {
  const bits = options.bits ?? 2;
  if (bits !== 2 && bits !== 4) throw new InvalidArgumentError('bits', '2 or 4', String(bits));
  const { backend, note } = indexBackend(options.backend);
  // the GPU codec (src/plaid/cuda-codec.ts) is bitwise the CPU's; 'auto' lets it keep the CPU for
  // tokens wider than it takes
  const kern = {
    threads: options.threads,
    backend: backend === 'cuda' ? (options.backend ?? 'auto') : ('cpu' as const),
  };
  readManifest(dir);
  const lock = CorpusLock.acquire(dir, options);
  let file: CorpusFile | undefined;
  const written: string[] = [];
  let published = false;
  try {
    const m = readManifest(dir);
    removeLeftovers(dir, m);
    file = CorpusFile.open(dir);
    const train = !m.index || options.rebuild === true;
    if (!train) refuseOtherSettings(m.index!, options);
    if (train && m.index?.dropped)
      throw new InvalidArgumentError(
        'rebuild',
        'false: the corpus keeps only its index (--drop-tokens), so there are no tokens to fit new centroids on',
        'true',
      );
    const generation = m.generation + 1;
    let codec: PlaidIndex;
    let head: Omit<ManifestIndex, 'segments'>;
    if (train) {
      const fitted = await fitCodec(file, bits, options, kern);
      codec = fitted.codec;
      head = writeCodec(dir, lock.token, generation, bits, fitted, written);
    } else {
      codec = file.index!.codec();
      const { segments: _, ...rest } = m.index!;
      head = rest;
    }
    const kept = train ? [] : m.index!.segments;
    const drop = options.dropTokens === true || m.index?.dropped === true;
    // dropping: the segments that still hold tokens (the trailing ones) become one token-less segment
    const from = drop ? firstWithTokens(file) : m.segments.length;
    const place = { codec: head.file, crcs: new Map(m.segments.map((s) => [s.file, s.headerCrc])) };
    const enc = await encodeSegments(
      dir,
      lock.token,
      file,
      codec,
      head.threshold,
      kept,
      generation,
      from,
      kern,
      options,
      written,
      place,
    );
    const order = new Map(m.segments.map((s, i) => [s.file, i]));
    let segments = [...kept, ...enc.added]
      .filter((e) => order.get(e.segment)! < from)
      .sort((a, b) => order.get(a.segment)! - order.get(b.segment)!);
    let tokenSegments = m.segments;
    if (from < m.segments.length) {
      options.onProgress?.({ stage: 'drop', done: 0, total: m.segments.length - from });
      const { plaids, drifts } = trailingParts(file, m, from, enc, kept);
      const slot = kept.length + enc.added.length + 1;
      const r = writeMerged(
        dir,
        lock.token,
        file,
        generation,
        codec,
        head.file,
        from,
        plaids,
        drifts,
        slot,
        false,
        written,
      );
      segments = [...segments, r.entry];
      tokenSegments = [...m.segments.slice(0, from), r.segment];
    }
    options.onProgress?.({ stage: 'publish', done: enc.todo, total: enc.todo });
    const index: ManifestIndex = { ...head, ...(drop ? { dropped: true as const } : {}), segments };
    const next: Manifest = { ...m, generation, segments: tokenSegments, index };
    publishIndex(dir, lock, m, next, () => {
      published = true;
    });
    const { todo, drifted, tokens } = enc;
    const info = describeManifest(dir, next);
    const stats = codec.buildStats;
    return {
      info,
      trained: train,
      encoded: todo,
      drift: tokens > 0 ? drifted / tokens : 0,
      rebuildAdvised: info.index!.rebuildAdvised,
      backend,
      ...(note ? { backendNote: note } : {}),
      meanSquaredError: stats.meanSquaredError,
      meanSquaredNorm: stats.meanSquaredNorm,
    };
  } finally {
    if (!published) for (const name of written) removeQuietly(dir, name);
    file?.close();
    lock.release();
  }
}

/** Writes a fitted codec's file (generation's slot 0); returns the MANIFEST's index head for it. */
function writeCodec(
  dir: string,
  token: string,
  generation: number,
  bits: 2 | 4,
  fitted: { codec: PlaidIndex; sample: number; threshold: number },
  written: string[],
): Omit<ManifestIndex, 'segments'> {
  const settings = {
    bits,
    centroids: fitted.codec.centroids,
    sample: fitted.sample,
    threshold: fitted.threshold,
  };
  const name = indexName(generation, 0);
  const w = writeIndexFile(dir, name, token, codecOnly(fitted.codec).parts(), { role: 'codec', ...settings });
  written.push(name);
  return { file: name, bytes: w.bytes, crc: w.headerCrc, ...settings };
}

/**
 * The codec as its file stores it: centroids, buckets and assignment groups, no documents (the
 * sample's codes and lists were ~10 MB of a 60 MB index at 1.3M tokens; nothing reads them).
 */
function codecOnly(codec: PlaidIndex): PlaidIndex {
  const n = codec.native;
  const native = {
    ...n,
    docs: 0,
    cids: new Int32Array(0),
    codes: new Uint8Array(0),
    docOffsets: new Float64Array(1),
    bagOffsets: new Float64Array(1),
    bags: new Int32Array(0),
    ivfOffsets: new Float64Array(n.k + 1),
    ivf: new Int32Array(0),
  };
  return new PlaidIndex(native, codec.buckets, undefined, codec.buildStats, codec.assignGroups);
}

/**
 * Publishes the index's MANIFEST, then removes the files of `m` that `next` no longer names (a
 * rebuild's or a drop's: readers hold theirs open). `onRenamed`: from then on the rename may have
 * happened even if a later step fails, so the new files must stay (a later writer removes what no
 * MANIFEST names).
 */
function publishIndex(dir: string, lock: CorpusLock, m: Manifest, next: Manifest, onRenamed: () => void) {
  publishManifest(dir, lock.token, next, () => {
    lock.check();
    if (readManifest(dir).generation !== m.generation)
      throw new MaxsimError(`${dir}: the corpus changed while its index was built; nothing was published`);
    onRenamed();
  });
  const now = new Set([...indexFilesOf(next), ...next.segments.map((x) => x.file)]);
  const old = [...indexFilesOf(m), ...m.segments.map((x) => x.file)].filter((n) => !now.has(n));
  for (const name of old) removeFile(dir, name);
  if (old.length > 0) syncDir(dir);
}

/** The indexes and drifts of segments [from, end) (just encoded, or listed by the index already). */
function trailingParts(
  file: CorpusFile,
  m: Manifest,
  from: number,
  enc: { plaids: Map<number, PlaidIndex>; drifts: Map<number, number> },
  kept: readonly ManifestIndexSegment[],
) {
  const plaids: PlaidIndex[] = [];
  const drifts: number[] = [];
  for (let si = from; si < m.segments.length; si++) {
    plaids.push(enc.plaids.get(si) ?? file.index!.segment(si)!);
    drifts.push(enc.drifts.get(si) ?? kept.find((e) => e.segment === m.segments[si].file)!.drift);
  }
  return { plaids, drifts };
}

/** The first of the trailing segments that hold tokens (the length when none does). */
function firstWithTokens(file: CorpusFile): number {
  let from = file.segments.length;
  while (from > 0 && !file.segments[from - 1].header.tokensDropped) from--;
  const stray = file.segments.slice(0, from).findIndex((x) => !x.header.tokensDropped);
  if (stray >= 0 && from > 0)
    throw new MaxsimError(
      `${file.dir}: segment ${file.segments[stray].file} holds tokens before a token-less one (not a corpus this build wrote)`,
    );
  return from;
}

/**
 * Encodes the segments the index does not list against the codec and measures their drift; their
 * index files are written, except for segments from `from` on (to be merged by a drop: kept in
 * memory).
 */
async function encodeSegments(
  dir: string,
  token: string,
  file: CorpusFile,
  codec: PlaidIndex,
  threshold: number,
  kept: readonly ManifestIndexSegment[],
  generation: number,
  from: number,
  kern: object,
  options: CorpusIndexOptions,
  written: string[],
  /** The codec file and each token segment's header CRC, recorded in the index files (recovery). */
  place: { codec: string; crcs: ReadonlyMap<string, number> },
) {
  const listed = new Set(kept.map((s) => s.segment));
  const segs = file.segments;
  // (by name: CorpusSegment.file is the path)
  const names = file.segments.map((s) => path.basename(s.file));
  const todo = segs.map((_, i) => i).filter((i) => !listed.has(names[i]));
  const added: ManifestIndexSegment[] = [];
  const plaids = new Map<number, PlaidIndex>();
  const drifts = new Map<number, number>();
  let drifted = 0;
  let tokens = 0;
  for (const [done, si] of todo.entries()) {
    options.onProgress?.({ stage: 'encode', done, total: todo.length });
    if (segs[si].header.tokensDropped)
      throw new MaxsimError(`${segs[si].file}: the segment keeps no tokens and is not indexed`);
    const docs = segmentBatch(file, si);
    const plaid = await encodeWith(codec, docs, kern);
    const d = await nearestDistances(codec, sampleTokens(docs, DRIFT_SAMPLE, si + 1), {
      threads: options.threads,
    });
    const drift = shareAbove(d, threshold);
    drifts.set(si, drift);
    drifted += drift * segs[si].header.tokens;
    tokens += segs[si].header.tokens;
    if (si >= from) {
      plaids.set(si, plaid);
      continue;
    }
    const name = indexName(generation, kept.length + added.length + 1);
    const w = writeIndexFile(dir, name, token, plaid.parts(), {
      role: 'segment',
      codec: place.codec,
      segment: names[si],
      segmentCrc: place.crcs.get(names[si]) ?? 0,
      drift,
    });
    written.push(name);
    added.push({ file: name, segment: names[si], bytes: w.bytes, crc: w.headerCrc, drift });
  }
  return { todo: todo.length, added, plaids, drifts, drifted, tokens };
}

function removeQuietly(dir: string, name: string) {
  try {
    removeFile(dir, name);
  } catch {
    // the next writer removes files no MANIFEST names
  }
}

function refuseOtherSettings(ix: ManifestIndex, o: CorpusIndexOptions) {
  const differs =
    (o.bits !== undefined && o.bits !== ix.bits) ||
    (o.centroids !== undefined && o.centroids !== ix.centroids) ||
    (o.sample !== undefined && o.sample !== ix.sample);
  if (differs)
    throw new InvalidArgumentError(
      'rebuild',
      `true to build with other settings (the index has ${ix.bits} bits, ${ix.centroids} centroids, a ${ix.sample}-token sample)`,
      'false',
    );
}

// Whole live documents drawn at random until `sample` tokens; the codec is the index of those.
async function fitCodec(file: CorpusFile, bits: 2 | 4, o: CorpusIndexOptions, kern: object) {
  let live = 0;
  for (let i = 0; i < file.info.documents; i++) if (!file.isDeleted(i)) live += file.lengths[i];
  if (live < 1) throw new InvalidArgumentError('corpus', 'at least one live token to index', '0 tokens');
  const k = expectInteger('centroids', o.centroids ?? defaultCentroids(live), 1, live);
  const want = expectInteger('sample', o.sample ?? Math.min(live, 64 * k), k, live);
  const seed = expectInteger('seed', o.seed ?? 1, 0, 2 ** 32 - 1);
  o.onProgress?.({ stage: 'sample', done: 0, total: want });
  const order: number[] = [];
  for (let i = 0; i < file.info.documents; i++) if (!file.isDeleted(i) && file.lengths[i] > 0) order.push(i);
  const rand = seededRandom(seed ^ 0x5bd1e995);
  const picked: number[] = [];
  let got = 0;
  for (let i = 0; i < order.length && got < want; i++) {
    const j = i + Math.floor(rand() * (order.length - i));
    [order[i], order[j]] = [order[j], order[i]];
    picked.push(order[i]);
    got += file.lengths[order[i]];
  }
  picked.sort((a, b) => a - b);
  let docs = file.readDocuments(picked);
  if (docs.dtype === 'int8') docs = dequantize(docs);
  o.onProgress?.({ stage: 'train', done: 0, total: got });
  const codec = await buildIndex(docs, {
    bits,
    centroids: k,
    sample: got,
    seed,
    iterations: o.iterations,
    keepTokens: false,
    ...kern,
  });
  const d = await nearestDistances(codec, sampleTokens(docs, DRIFT_SAMPLE, seed), { threads: o.threads });
  return { codec, sample: got, threshold: quantile(d, 0.99) };
}

/** Token segment `si` of a snapshot as a batch over its mapped tokens (CRC-checked; int8 dequantized). */
export function segmentBatch(file: CorpusFile, si: number): TokenBatch {
  const s = file.segments[si];
  const h = s.header;
  const n = h.documents;
  let maxLength = 0;
  const lengths = file.lengths.slice(s.firstDocument, s.firstDocument + n);
  for (const l of lengths) maxLength = Math.max(maxLength, l);
  const block = {
    segment: si,
    firstDocument: s.firstDocument,
    documents: n,
    firstToken: 0,
    tokens: h.tokens,
    maxLength,
  };
  file.verifyBlock(block);
  const ranges = file.blockRanges(block);
  const map = (loadNative() as unknown as { file: { mapFile(p: string, o: number, l: number): ArrayBuffer } })
    .file.mapFile;
  const batch: TokenBatch = {
    kind: 'batch',
    layout: 'ragged',
    dtype: h.dtype,
    data: typedView(
      h.dtype,
      map(ranges.file, ranges.tokens.offset, ranges.tokens.bytes),
      0,
      h.tokens * h.dim,
    ),
    dim: h.dim,
    count: n,
    maxLength,
    starts: s.offsets.slice(0, n),
    lengths,
    scales: ranges.scales
      ? new Float32Array(map(ranges.file, ranges.scales.offset, ranges.scales.bytes), 0, h.tokens)
      : undefined,
  };
  return h.dtype === 'int8' ? dequantize(batch) : batch;
}

export { REBUILD_DRIFT };
