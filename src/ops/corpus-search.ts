// Searching an on-disk corpus (src/io/corpus/) without loading it: the corpus is cut into blocks of
// consecutive documents, each block is scored against all queries at once (so a batch of queries
// reads the corpus once), and a running top-K per query is merged block after block.
//
// CPU: blocks are memory-mapped (native file.mapFile) and scored in place from the page cache.
// CUDA: the native stream scan (native/cuda/stream_scan.cc) brings blocks to pinned host memory (the
// files pinned ahead of the scan when they fit a host-memory budget, else O_DIRECT or page-cache reads
// into pinned buffers; see chooseTransfer), copies them on one stream while the previous block is
// scored on another, and keeps GPU memory flat whatever the corpus size. Results are identical to scoring the whole corpus
// in memory: same kernels, same tie rule (lower document index first).

import { constants as bufferConstants } from 'node:buffer';
import { checkSignal, throwIfAborted, withCancelFlag } from '../abort.js';
import { cpuMaxsim } from '../backends/cpu.js';
import {
  type CorpusPins,
  checkTransferOptions,
  cudaStreamSearch,
  pinCorpusFiles,
  pinnedBytesOf,
  type TransferOption,
  type TransferStats,
  unpinCorpusFiles,
} from '../backends/cuda-stream.js';
import { type BackendChoice, resolveBackend } from '../backends/select.js';
import { InvalidArgumentError } from '../errors.js';
import {
  type CorpusBlock,
  CorpusFile,
  type CorpusInfo,
  storedTokenBytes,
  typedView,
  type VerifyProgress,
} from '../io/corpus/index.js';
import { loadNative } from '../native.js';
import type { Hit, TokenBatch, TokenMatrix } from '../tensor.js';
import { optionsObject } from '../tensor-checks.js';
import { blockTopK, mergeHits, subBatch } from './corpus-hits.js';
import { type CorpusIndexOptions, type IndexSearchStats, searchIndexed } from './corpus-index-search.js';
import { asQueries, queriesFor, snapshotQueries } from './corpus-queries.js';
import { topK } from './maxsim.js';
import { cpuMaxsimInt8 } from './quantize.js';
import { checkK } from './topk.js';

export { blockTopK, mergeHits } from './corpus-hits.js';

export interface CorpusHit extends Hit {
  /** The document's id (its index as a string when the corpus has no ids). */
  id: string;
}

export interface SearchProgress {
  documents: number;
  totalDocuments: number;
  bytes: number;
  totalBytes: number;
  elapsedMs: number;
}

// the keys of CorpusSearchOptions (checked: an unknown one is an error)
const SEARCH_KEYS = new Set([
  'topK',
  'backend',
  'threads',
  'device',
  'devices',
  'gpuMemory',
  'transfer',
  'hostMemoryBudget',
  'pipelineDepth',
  'readers',
  'blockBytes',
  'verify',
  'onProgress',
  'signal',
  'ids',
  'index',
]);

export interface CorpusSearchOptions {
  /** Hits per query (default 10). */
  topK?: number;
  /** 'auto' (default): CUDA when a usable GPU is present, else CPU. */
  backend?: BackendChoice;
  /** CPU worker threads (default all cores). */
  threads?: number;
  /** CUDA device (default 0). */
  device?: number;
  /**
   * CUDA: several GPUs at once ('all' or device indices), each streaming a share of the blocks; the
   * results are those of one GPU. Overrides `device`.
   */
  devices?: 'all' | number[];
  /** CUDA: device memory the search may use, in bytes (default: 3/4 of the free memory, at most 8 GiB). */
  gpuMemory?: number;
  /**
   * CUDA: how blocks reach the GPU. 'auto' (default): the corpus.pin() pin if any; else the files
   * page-locked chunk by chunk ahead of the scan when they fit `hostMemoryBudget` (kept locked for the
   * next search); else O_DIRECT reads into pinned buffers (page-cache reads where the file system
   * refuses O_DIRECT). 'pin': pinned ahead whatever the budget; 'direct': O_DIRECT reads; 'copy':
   * reader threads pread through the page cache into pinned buffers (even over a pin); 'register':
   * each block's pages page-locked for its copy only. stats.transfer says what was done and why.
   */
  transfer?: TransferOption;
  /**
   * CUDA, transfer 'auto': host bytes the corpus files may keep page-locked (default: half of
   * MemAvailable in /proc/meminfo, less what this process has already pinned for other corpora).
   */
  hostMemoryBudget?: number;
  /** CUDA: blocks in flight (default 3; 4 direct, 6 register, where the GPU budget allows; 1..8). */
  pipelineDepth?: number;
  /** CUDA: reader threads (default: cores - 2, at most 12; direct: cores, 4..16). */
  readers?: number;
  /** Token bytes per block (default: 64 MiB on the CPU; on CUDA derived from gpuMemory). */
  blockBytes?: number;
  /**
   * CPU: check the CRC of every checksum chunk a search reads before scoring it, once per chunk per
   * process (default true): a corrupted segment is a FormatError naming it, never silent garbage.
   */
  verify?: boolean;
  /** Called after each block (CPU) or every ~100 ms (CUDA) with the progress so far. */
  onProgress?: (progress: SearchProgress) => void;
  /**
   * Cancels the search: it rejects with the signal's reason (an AbortError). The CPU scan stops
   * before the next block and its workers before their next chunk of documents; the CUDA scan stops
   * before its next block (its readers stop and its buffers are freed).
   */
  signal?: AbortSignal;
  /**
   * Score only these documents (ids; decimal indices for a corpus without ids); unknown or deleted
   * ones are an error. CPU: views of the mapped blocks, only those documents scored. CUDA: the
   * documents are read and scored in memory.
   */
  ids?: readonly string[];
  /**
   * A corpus with an index (`maxsim corpus index`) is searched through it by default (CPU; the
   * returned scores are exact MaxSim, re-scored from the tokens); these settings tune it, and
   * `false` forces the full scan. Ignored with `ids`.
   */
  index?: false | CorpusIndexOptions;
}

export interface SearchResult {
  hits: CorpusHit[][];
  /** What the scan did: for benchmarks and logs. */
  stats: ScanStats;
}

export interface ScanStats {
  backend: 'cpu' | 'cuda';
  /**
   * Which search ran: 'index' (through the corpus's index, see `index`), 'scan' (the full scan) or
   * 'ids' (the listed documents only).
   */
  path?: 'index' | 'scan' | 'ids';
  /**
   * 'exact': every returned score is exact MaxSim of the stored tokens; 'residual': MaxSim of the
   * decoded residuals (a corpus that keeps only its index: `corpus index --drop-tokens`).
   */
  scores?: 'exact' | 'residual';
  /** The MANIFEST generation the search ran on (every hit, id and score is from it). */
  generation?: number;
  blocks: number;
  bytes: number;
  documents: number;
  seconds: number;
  /** Seconds until the first block was scored. */
  firstBlockSeconds: number;
  /** CPU: bytes whose CRC this search checked (0 once every chunk was checked in this process). */
  verifiedBytes?: number;
  /** CPU: seconds spent checking CRCs. */
  verifySeconds?: number;
  /** CUDA: peak device memory the scan allocated, bytes. */
  devicePeakBytes?: number;
  /** CUDA: the kernel variant used for the blocks. */
  variant?: string;
  /** CUDA: the GPUs that scanned. */
  devices?: number[];
  /** CUDA streamed: how blocks reached the GPU and why. */
  transfer?: TransferStats;
  /** Through the index: the stages, their candidates and times (see corpus-index-search.ts). */
  index?: IndexSearchStats;
}

const CPU_BLOCK_BYTES = 64 * 1024 * 1024;

interface FileAddon {
  mapFile(path: string, offset: number, length: number): ArrayBuffer;
}

function fileAddon(): FileAddon {
  return (loadNative() as unknown as { file: FileAddon }).file;
}

/**
 * An on-disk corpus opened for search. It follows its directory: each search, get() and
 * readDocuments() first checks (one stat and a 16-byte read) whether a newer MANIFEST generation was
 * published, by this process or any other, and if so switches to it; a search then runs on that one
 * snapshot to its end (ids, scores and deletions all from it), whatever is published meanwhile, and
 * the files of older snapshots stay readable until the searches using them end. `follow: false`
 * keeps the snapshot it was opened on.
 */
export class Corpus {
  // Block mappings kept while their segment is in the corpus: a repeated search touches mapped pages
  // without faulting them in again. They cost address space and page tables only (the pages are the
  // page cache's).
  private readonly mapped = new Map<string, TokenBatch>();
  private current: CorpusFile;
  private readonly follow: boolean;

  constructor(file: CorpusFile, options: { follow?: boolean } = {}) {
    this.current = file;
    this.follow = options.follow ?? true;
  }

  // corpus.pin()'s pin and the one CUDA searches pin ahead (transfer 'auto' / 'pin')
  private readonly pins: CorpusPins = {};

  /** The snapshot the corpus answers from (see refresh()). */
  get file(): CorpusFile {
    return this.current;
  }

  /**
   * Switches to the newest published generation when it is newer than the current one (and the
   * corpus follows its directory); returns the snapshot answered from now on.
   */
  refresh(): CorpusFile {
    if (!this.follow) return this.current;
    const next = this.current.refresh();
    if (next === this.current) return next;
    const old = this.current;
    this.current = next;
    old.close();
    // mappings of segments the new snapshot no longer names go (searches using them hold their own)
    const live = new Set(next.segments.map((s) => s.file));
    for (const key of this.mapped.keys())
      if (!live.has(key.slice(0, key.lastIndexOf('@')))) this.mapped.delete(key);
    return next;
  }

  // The snapshot one operation runs on, from start to end: close() it after.
  private pinned(): CorpusFile {
    return this.refresh().retain();
  }

  /** Drops the cached mappings (they are unmapped once garbage-collected) and any GPU pin; closes the snapshot. */
  close(): void {
    this.mapped.clear();
    this.unpin();
    this.current.close();
  }
  /**
   * Page-locks the corpus files for GPU searches (the pin serves every GPU of the host; `device`,
   * default 0, registers it): later CUDA searches copy blocks from the page cache by DMA, with no CPU
   * copy. The pages stay resident until unpin().
   */
  async pin(options: { device?: number } = {}): Promise<void> {
    this.unpin();
    this.pins.explicit = await pinCorpusFiles(this.file, options.device ?? 0);
  }

  /** Releases the pins, pin()'s and what searches pinned ahead (pages unlock once no search uses them). */
  unpin(): void {
    if (this.pins.explicit) unpinCorpusFiles(this.pins.explicit);
    if (this.pins.ahead) unpinCorpusFiles(this.pins.ahead);
    this.pins.explicit = undefined;
    this.pins.ahead = undefined;
  }

  /** Bytes page-locked by pin() or pinned ahead by searches, or 0. */
  get pinnedBytes(): number {
    const { explicit, ahead } = this.pins;
    return (explicit ? pinnedBytesOf(explicit) : 0) + (ahead ? pinnedBytesOf(ahead) : 0);
  }

  get info(): CorpusInfo {
    return this.file.info;
  }

  /** The id of document `index`. */
  id(index: number): string {
    return this.file.id(index);
  }

  /** Re-reads every byte and checks the checksums (throws FormatError naming the damage). */
  verify(onProgress?: (p: VerifyProgress) => void): void {
    const file = this.pinned();
    try {
      file.verify(onProgress);
    } finally {
      file.close();
    }
  }

  /** Reads documents by index (a packed batch in the corpus dtype). */
  readDocuments(indices: ArrayLike<number>): TokenBatch {
    const file = this.pinned();
    try {
      return file.readDocuments(indices);
    } finally {
      file.close();
    }
  }

  /**
   * The documents' tokens by id (ids; decimal indices without ids), a packed ragged batch in the
   * corpus dtype in request order; unknown or deleted ids are an InvalidArgumentError listing a few.
   */
  get(ids: readonly string[]): TokenBatch {
    const file = this.pinned();
    try {
      return file.getDocuments(ids);
    } finally {
      file.close();
    }
  }

  /** The best `topK` documents of the corpus for each query, best first. */
  async search(queries: TokenMatrix | TokenBatch, options: CorpusSearchOptions = {}): Promise<CorpusHit[][]> {
    return (await this.searchWithStats(queries, options)).hits;
  }

  /** search() plus what the scan did (bytes, blocks, timings, device memory). */
  async searchWithStats(
    queries: TokenMatrix | TokenBatch,
    options: CorpusSearchOptions = {},
  ): Promise<SearchResult> {
    options = optionsObject(options, 'corpus.search options');
    const signal = checkSignal(options.signal);
    throwIfAborted(signal);
    const file = this.pinned();
    try {
      return await this.searchOn(file, queries, options, signal);
    } finally {
      file.close();
    }
  }

  private async searchOn(
    file: CorpusFile,
    queries: TokenMatrix | TokenBatch,
    options: CorpusSearchOptions,
    signal: AbortSignal | undefined,
  ): Promise<SearchResult> {
    // a misspelt option (topk, nProbe) would otherwise run a different search without a word
    for (const key of Object.keys(options))
      if (!SEARCH_KEYS.has(key))
        throw new InvalidArgumentError(
          `options.${key}`,
          `one of ${[...SEARCH_KEYS].join(', ')}`,
          'an unknown option',
        );
    const k = checkK(options.topK ?? 10, 'topK');
    const q = snapshotQueries(queriesFor(file.info.dtype, asQueries(queries)));
    if (q.dim !== file.info.dim)
      throw new InvalidArgumentError(
        'queries.dim',
        `${file.info.dim} (the dimension of the corpus)`,
        String(q.dim),
      );
    if (
      options.blockBytes !== undefined &&
      !(Number.isSafeInteger(options.blockBytes) && options.blockBytes >= 1)
    )
      throw new InvalidArgumentError(
        'blockBytes',
        'a positive integer number of bytes',
        String(options.blockBytes),
      );
    checkTransferOptions(options);
    if (options.index !== false && file.index && options.ids === undefined)
      return searchIndexed(file, asQueries(queries), q, k, options, signal, (one, n, cancel, subset) =>
        this.searchCpu(file, one, n, { ...options, onProgress: undefined }, cancel, subset),
      );
    const backend = resolveBackend(options.backend);
    const subset =
      options.ids === undefined
        ? undefined
        : [...new Set(file.indicesOf(options.ids, 'ids'))].sort((a, b) => a - b);
    const dropped = file.tokensDropped;
    if (dropped && !subset)
      throw new InvalidArgumentError(
        'index',
        'a search through the index: the corpus keeps only its index (`corpus index --drop-tokens`), there are no tokens to scan',
        'false',
      );
    const result = await withCancelFlag(signal, (cancel) =>
      subset
        ? backend === 'cuda' || dropped
          ? // the listed documents read (decoded from the residuals where the tokens were dropped)
            this.searchSubsetInMemory(file, dropped ? snapshotQueries(asQueries(queries)) : q, k, subset, {
              ...options,
              backend,
            })
          : this.searchCpu(file, q, k, options, cancel, subset)
        : backend === 'cuda'
          ? this.searchCuda(file, q, k, options, cancel)
          : this.searchCpu(file, q, k, options, cancel),
    );
    const hits = result.hits.map((row) =>
      row.map((h) => ({ index: h.index, score: h.score, id: file.id(h.index) })),
    );
    return {
      hits,
      stats: {
        ...result.stats,
        path: subset ? 'ids' : 'scan',
        scores: dropped ? 'residual' : 'exact',
        generation: file.info.generation,
      },
    };
  }

  // The stream scan knows nothing of deletions: ask for k + deleted, drop the deleted, cut to k.
  private async searchCuda(
    file: CorpusFile,
    q: TokenBatch,
    k: number,
    options: CorpusSearchOptions,
    cancel: Int32Array | undefined,
  ): Promise<{ hits: Hit[][]; stats: ScanStats }> {
    const mask = file.deletedMask;
    const extra = file.info.deleted;
    const result = await cudaStreamSearch(
      file,
      q,
      Math.min(k + extra, file.info.documents),
      options,
      this.pins,
      cancel,
    );
    if (!mask || extra === 0) return result;
    return {
      ...result,
      hits: result.hits.map((row) => row.filter((h) => mask[h.index] === 0).slice(0, k)),
    };
  }

  // A list of ids on CUDA, or on a corpus that keeps only its index: the documents are read (a copy;
  // decoded where the tokens were dropped) and scored in memory.
  private async searchSubsetInMemory(
    file: CorpusFile,
    q: TokenBatch,
    k: number,
    subset: number[],
    options: CorpusSearchOptions,
  ): Promise<{ hits: Hit[][]; stats: ScanStats }> {
    const started = performance.now();
    const backend = options.backend === 'cpu' ? 'cpu' : 'cuda';
    if (subset.length === 0 || k === 0)
      return {
        hits: Array.from({ length: q.count }, () => []),
        stats: { backend, blocks: 0, bytes: 0, documents: 0, seconds: 0, firstBlockSeconds: 0 },
      };
    const docs = file.readDocuments(subset);
    const hits = (
      await topK(q, docs, Math.min(k, subset.length), {
        backend,
        device: options.device,
        threads: options.threads,
        signal: options.signal,
      })
    ).map((row) => row.map((h) => ({ index: subset[h.index], score: h.score })));
    const seconds = (performance.now() - started) / 1000;
    return {
      hits,
      stats: {
        backend,
        blocks: 1,
        bytes: docs.data.byteLength + (docs.scales?.byteLength ?? 0),
        documents: subset.length,
        seconds,
        firstBlockSeconds: seconds,
      },
    };
  }

  private async searchCpu(
    file: CorpusFile,
    q: TokenBatch,
    k: number,
    options: CorpusSearchOptions,
    cancel: Int32Array | undefined,
    subset?: number[],
  ): Promise<{ hits: Hit[][]; stats: ScanStats }> {
    const started = performance.now();
    const info = file.info;
    // a block is mapped as one ArrayBuffer: never larger than this Node makes (Node 20: 4 GiB); only a
    // single document beyond that is refused (by mapFile, naming the segment)
    const blocks = file.planBlocks(
      Math.min(options.blockBytes ?? CPU_BLOCK_BYTES, bufferConstants.MAX_LENGTH),
    );
    let cursor = 0; // subset: the first selected document not yet scored
    const subsetBytes = subset
      ? subset.reduce((a, i) => a + file.lengths[i], 0) * storedTokenBytes(info.dtype, info.dim)
      : 0;
    let running: Hit[][] = Array.from({ length: q.count }, () => []);
    let documents = 0;
    let bytes = 0;
    let firstBlockSeconds = 0;
    const tokenBytes = storedTokenBytes(info.dtype, info.dim);
    const verify = options.verify ?? true;
    const map = fileAddon().mapFile;
    const mapped = (file: string, offset: number, length: number) =>
      new Uint8Array(map(file, offset, length));
    let verifiedBytes = 0;
    let verifyMs = 0;
    for (const block of blocks) {
      options.signal?.throwIfAborted();
      // subset: the selected documents of this block (a view of the same mapped rows), else all
      let selected: number[] | undefined;
      if (subset) {
        const end = block.firstDocument + block.documents;
        const from = cursor;
        while (cursor < subset.length && subset[cursor] < end) cursor++;
        if (cursor === from) continue;
        selected = subset.slice(from, cursor);
      }
      if (verify) {
        const t0 = performance.now();
        verifiedBytes += file.verifyBlock(block, mapped);
        verifyMs += performance.now() - t0;
      }
      let docs = this.mapBlock(file, block);
      if (selected)
        docs = subBatch(
          docs,
          selected.map((i) => i - block.firstDocument),
        );
      const scores =
        info.dtype === 'int8'
          ? await cpuMaxsimInt8(q, docs, { threads: options.threads }, cancel)
          : await cpuMaxsim(q, docs, { threads: options.threads }, cancel);
      const blockHits = selected
        ? blockTopK(scores, q.count, selected.length, k, 0).map((row) =>
            row.map((h) => ({ index: selected[h.index], score: h.score })),
          )
        : blockTopK(scores, q.count, block.documents, k, block.firstDocument, file.deletedMask);
      running = running.map((r, i) => mergeHits(r, blockHits[i], k));
      documents += selected ? selected.length : block.documents;
      bytes += selected
        ? selected.reduce((a, i) => a + file.lengths[i], 0) * tokenBytes
        : block.tokens * tokenBytes;
      if (firstBlockSeconds === 0) firstBlockSeconds = (performance.now() - started) / 1000;
      options.onProgress?.({
        documents,
        totalDocuments: subset ? subset.length : info.documents,
        bytes,
        totalBytes: subset ? subsetBytes : info.tokenBytes,
        elapsedMs: performance.now() - started,
      });
    }
    return {
      hits: running,
      stats: {
        backend: 'cpu',
        blocks: blocks.length,
        bytes,
        documents,
        seconds: (performance.now() - started) / 1000,
        firstBlockSeconds,
        verifiedBytes,
        verifySeconds: verifyMs / 1000,
      },
    };
  }

  // A block as a ragged batch over the mapped file (no copy).
  private mapBlock(file: CorpusFile, block: CorpusBlock): TokenBatch {
    // by segment file (a snapshot's segment numbers shift when a compaction rewrote the corpus)
    const seg = file.segments[block.segment];
    const key = `${seg.file}@${seg.header.tokensSection.bytes}:${block.firstToken}:${block.tokens}:${block.documents}`;
    const cached = this.mapped.get(key);
    if (cached) return cached;
    const info = file.info;
    const ranges = file.blockRanges(block);
    const { starts, lengths } = file.blockSpans(block);
    const map = fileAddon().mapFile;
    const data = typedView(
      info.dtype,
      map(ranges.file, ranges.tokens.offset, ranges.tokens.bytes),
      0,
      block.tokens * info.dim,
    );
    const scales = ranges.scales
      ? new Float32Array(map(ranges.file, ranges.scales.offset, ranges.scales.bytes), 0, block.tokens)
      : undefined;
    const batch: TokenBatch = {
      kind: 'batch',
      layout: 'ragged',
      dtype: info.dtype,
      data,
      dim: info.dim,
      count: block.documents,
      maxLength: block.maxLength,
      starts,
      lengths,
      scales,
    };
    this.mapped.set(key, batch);
    return batch;
  }
}

/**
 * Opens an on-disk corpus for search (checks its manifest, headers, offsets and ids). It follows its
 * directory (see Corpus) unless `follow: false`.
 */
export function openCorpus(path: string, options: { follow?: boolean } = {}): Corpus {
  return new Corpus(CorpusFile.open(path), options);
}
