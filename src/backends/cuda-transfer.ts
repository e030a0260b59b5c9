// How blocks of an on-disk corpus reach the GPU: the transfer options, the chooser between
// corpus.pin()'s pin, pinning ahead within a host-memory budget, O_DIRECT reads and copies
// (chooseTransfer), the default host-memory budget, and the corpus pins themselves (page-locked
// segment files, native/cuda/pinned_host.cc holds them).

import * as fs from 'node:fs';
import * as os from 'node:os';
import { InvalidArgumentError } from '../errors.js';
import type { CorpusFile } from '../io/corpus/index.js';
import { cuda, nativeCuda } from './cuda.js';

/**
 * How a search asks blocks to reach the GPU: 'auto' (default) picks one of the others (see
 * chooseTransfer); 'pin' page-locks the corpus files chunk by chunk ahead of the scan and keeps them
 * locked; 'direct' reads with O_DIRECT into pinned buffers; 'copy' preads through the page cache into
 * pinned buffers; 'register' page-locks each block for its copy only.
 */
export type TransferOption = 'auto' | 'pin' | 'direct' | 'copy' | 'register';
export const TRANSFER_OPTIONS: readonly TransferOption[] = ['auto', 'pin', 'direct', 'copy', 'register'];
/**
 * What a scan did: 'pinned' (the files pinned whole by corpus.pin()), 'pinned-ahead' (registered chunk
 * by chunk as the scan reached them, kept), 'direct' (O_DIRECT into pinned buffers), 'copy', 'register'.
 */
export type TransferMode = 'pinned' | 'pinned-ahead' | 'direct' | 'copy' | 'register';

/** The transfer a CUDA search used, and why (ScanStats.transfer). */
export interface TransferStats {
  /** The option asked for. */
  requested: TransferOption;
  mode: TransferMode;
  /** Why this mode, in words (a fallback says what was refused). */
  reason: string;
  /** The host-memory budget the choice was made against, bytes. */
  hostMemoryBudget: number;
  /** The corpus's segment files, bytes. */
  corpusBytes: number;
  /** Bytes of this corpus page-locked after the search (kept for the next one). */
  pinnedBytes: number;
  /** Bytes this search page-locked (pin-ahead: 0 once every chunk is). */
  registeredBytes: number;
  /** Seconds spent before the scan on the transfer (mapping the files to pin ahead; else 0). */
  setupSeconds: number;
  depth: number;
  readers: number;
}

/** The default host-memory budget is this fraction of MemAvailable, less what is already pinned. */
export const HOST_MEMORY_FRACTION = 0.5;
/** Pin-ahead registers the files in chunks of this size (a copy never spans two). */
export const PIN_CHUNK_BYTES = 32 * 1024 * 1024;

/** The native pin calls (cuda_stream_binding.cc). */
export interface PinAddon {
  pinFiles(device: number, files: string[], chunkBytes?: number): Promise<unknown>;
  unpinFiles(handle: unknown): void;
  pinnedBytes(handle: unknown): number;
}

/** Segment files page-locked for one device (see pinCorpusFiles). */
export interface CorpusPin {
  readonly device: number;
  /** The files' bytes. */
  readonly bytes: number;
  readonly handle: unknown;
  /** The segment files, in order. */
  readonly files: readonly string[];
  /** true: registered chunk by chunk by the scans (pin-ahead); false: whole at once. */
  readonly ahead: boolean;
}

/** The pins a corpus holds: corpus.pin()'s, and the one 'auto' / 'pin' searches fill and keep. */
export interface CorpusPins {
  explicit?: CorpusPin;
  ahead?: CorpusPin;
  /** The ahead pin being made (concurrent searches share it). */
  pending?: Promise<CorpusPin>;
}

// Every pin of this process, so that the default budget leaves out what is already locked. Weak: a
// corpus dropped without close() still lets its pin be collected (the native side then unpins).
const livePins = new Set<WeakRef<CorpusPin>>();

/** Bytes a pin holds page-locked now. */
export function pinnedBytesOf(pin: CorpusPin): number {
  return (nativeCuda() as unknown as PinAddon).pinnedBytes(pin.handle);
}

/** Bytes page-locked by every live corpus pin of this process. */
export function pinnedByProcess(): number {
  let n = 0;
  for (const ref of livePins) {
    const p = ref.deref();
    if (p) n += pinnedBytesOf(p);
    else livePins.delete(ref);
  }
  return n;
}

/**
 * Maps and page-locks every segment file of a corpus, so later GPU searches copy blocks straight
 * from the page cache by DMA: no CPU copy, no per-block registration. Costs host memory (the pages
 * stay resident) and the time to lock them once. `ahead`: maps them only; the scans register each
 * chunk just before its first block needs it, and the chunks stay registered.
 */
export async function pinCorpusFiles(
  file: CorpusFile,
  device = 0,
  options: { ahead?: boolean } = {},
): Promise<CorpusPin> {
  await cuda({ device });
  const files = file.segments.map((s) => s.file);
  const ahead = options.ahead ?? false;
  // read through the snapshot's paths (they stay valid after a writer removes the files)
  const handle = await (nativeCuda() as unknown as PinAddon)
    .pinFiles(
      device,
      file.segments.map((s) => s.path),
      ahead ? PIN_CHUNK_BYTES : undefined,
    )
    .catch((e: unknown) => {
      throw namedAfterSegments(e, file);
    });
  const pin = { device, bytes: file.info.bytes, handle, files, ahead };
  livePins.add(new WeakRef(pin));
  return pin;
}

export function unpinCorpusFiles(pin: CorpusPin): void {
  for (const ref of livePins) if (ref.deref() === pin) livePins.delete(ref);
  (nativeCuda() as unknown as PinAddon).unpinFiles(pin.handle);
}

/** MemAvailable of /proc/meminfo text, bytes (undefined when absent). */
export function parseMemAvailable(meminfo: string): number | undefined {
  const m = /^MemAvailable:\s+(\d+)\s*kB/m.exec(meminfo);
  return m ? Number(m[1]) * 1024 : undefined;
}

/**
 * The default host-memory budget for pinning a corpus: HOST_MEMORY_FRACTION (half) of MemAvailable
 * (os.freemem() where /proc/meminfo is missing), less `pinnedElsewhere` (bytes already page-locked
 * by this process for other corpora), never below 0.
 */
export function defaultHostMemoryBudget(pinnedElsewhere: number, meminfo?: string): number {
  let text = meminfo;
  if (text === undefined) {
    try {
      text = fs.readFileSync('/proc/meminfo', 'utf8');
    } catch {
      text = '';
    }
  }
  const available = parseMemAvailable(text) ?? os.freemem();
  return Math.max(0, Math.floor(available * HOST_MEMORY_FRACTION) - pinnedElsewhere);
}

/** Checks the transfer options of a search (any backend, before anything runs). */
export function checkTransferOptions(options: { transfer?: unknown; hostMemoryBudget?: unknown }): void {
  const t = options.transfer;
  if (t !== undefined && !TRANSFER_OPTIONS.includes(t as TransferOption))
    throw new InvalidArgumentError(
      'transfer',
      TRANSFER_OPTIONS.map((x) => `'${x}'`).join(', '),
      JSON.stringify(t),
    );
  const b = options.hostMemoryBudget;
  if (b !== undefined && !(typeof b === 'number' && Number.isSafeInteger(b) && b >= 0))
    throw new InvalidArgumentError('hostMemoryBudget', 'a non-negative integer number of bytes', String(b));
}

const gbText = (b: number) => `${(b / 1e9).toFixed(2)} GB`;

/**
 * The transfer of a search: an explicit choice is obeyed ('copy' and 'register' even over a
 * corpus.pin() pin); 'auto' uses corpus.pin()'s pin when there is one, else pins the files ahead of
 * the scan when they fit the host-memory budget (the pages stay locked for the next search), else
 * reads with O_DIRECT into pinned buffers (the scan reads through the page cache instead, saying why,
 * where the file system refuses O_DIRECT or, under 'auto', where the page cache holds most of the files).
 */
export function chooseTransfer(input: {
  requested: TransferOption;
  /** corpus.pin() holds the files */
  explicitPin: boolean;
  corpusBytes: number;
  budget: number;
}): { mode: TransferMode; reason: string } {
  const { requested, explicitPin, corpusBytes, budget } = input;
  const ignored = explicitPin ? ' (the corpus.pin() pin is not used)' : '';
  switch (requested) {
    case 'copy':
    case 'register':
    case 'direct':
      return { mode: requested, reason: `transfer '${requested}' asked for${ignored}` };
    case 'pin':
      return explicitPin
        ? { mode: 'pinned', reason: 'the files are pinned whole (corpus.pin() / --pin)' }
        : { mode: 'pinned-ahead', reason: "transfer 'pin' asked for" };
    case 'auto':
      if (explicitPin) return { mode: 'pinned', reason: 'the files are pinned whole (corpus.pin() / --pin)' };
      if (corpusBytes <= budget)
        return {
          mode: 'pinned-ahead',
          reason: `the corpus files (${gbText(corpusBytes)}) fit the host-memory budget (${gbText(budget)})`,
        };
      return {
        mode: 'direct',
        reason: `the corpus files (${gbText(corpusBytes)}) exceed the host-memory budget (${gbText(budget)})`,
      };
  }
}

// The scan reads the snapshot's files through their /proc/self/fd paths; a message names the segment.
export function namedAfterSegments(e: unknown, file: CorpusFile): unknown {
  if (!(e instanceof Error)) return e;
  let message = e.message;
  for (const s of file.segments) if (s.path !== s.file) message = message.split(s.path).join(s.file);
  if (message !== e.message) e.message = message;
  return e;
}
