// The WebAssembly engine's JavaScript side (no Node built-ins: shared by src/backends/wasm.ts in Node
// and src/browser in browsers). native/wasm/maxsim.wasm holds the CPU engine's kernels for SIMD128
// (maxsim-relaxed.wasm the same with relaxed SIMD's fused multiply-add, src/wasm/features.ts);
// this file copies a call's tokens into its memory (only the tokens the spans cover, compacted),
// lets it pack the queries, scores documents in slices and reads the scores back.
import { InvalidArgumentError } from '../errors.js';
import type { DType, TokenBatch } from '../tensor.js';
import type { WasmFlavor } from './features.js';

interface WasmExports {
  memory: WebAssembly.Memory;
  alloc(bytes: number): number;
  reset(): void;
  mark(): number;
  release(mark: number): void;
  prepare_float(...args: number[]): number;
  score_float(job: number, begin: number, end: number): void;
  prepare_int8(...args: number[]): number;
  score_int8(job: number, begin: number, end: number): void;
}

const FLOAT_CODE: Record<string, number> = { float32: 0, float16: 1, bfloat16: 2 };

// Everything of one call must fit the 32-bit address space (less the module's own few KB).
const MAX_BYTES = 2 ** 32 - 2 ** 20;

function elementBytes(dtype: DType): number {
  return dtype === 'float32' ? 4 : dtype === 'int8' ? 1 : 2;
}

/** A token set as it lies in wasm memory: addresses of its parts. */
interface Placed {
  data: number;
  scales: number;
  starts: number;
  lengths: number;
  count: number;
}

/** Options of an asynchronous call. */
export interface WasmScoreOptions {
  signal?: AbortSignal;
  /** Milliseconds of work between yields to the event loop (default 20). */
  sliceMs?: number;
}

// Node's setImmediate; else the Prioritized Task Scheduling API's scheduler.yield() (Chromium 129+),
// which browsers do not clamp; else setTimeout(0), which browsers clamp to 4 ms once nested.
const host = globalThis as {
  setImmediate?: (f: () => void) => void;
  scheduler?: { yield?: () => Promise<void> };
};
const yieldToLoop: () => Promise<void> =
  typeof host.setImmediate === 'function'
    ? () => new Promise((r) => host.setImmediate?.(r))
    : typeof host.scheduler?.yield === 'function'
      ? () => host.scheduler?.yield?.() ?? Promise.resolve()
      : () => new Promise((r) => setTimeout(r, 0));

/** Bytes a batch takes once compacted into wasm memory (tokens, scales, spans). */
function placedBytes(b: TokenBatch): number {
  let tokens = 0;
  for (let i = 0; i < b.count; i++) tokens += b.lengths[i];
  const scales = b.dtype === 'int8' ? tokens * 4 : 0;
  return tokens * b.dim * elementBytes(b.dtype) + scales + b.count * 12 + 256;
}

export class WasmEngine {
  readonly #x: WasmExports;
  // Every call allocates above the arena's current top and releases back to it when done, so a
  // synchronous call made while an asynchronous one yields stacks above it. Resident sets stack too.
  #inFlight = 0;
  readonly #residents: { below: number; freed: boolean }[] = [];

  /** Which build of native/wasm runs (as the caller loaded it: 'unknown' for bytes of its own). */
  readonly flavor: WasmFlavor | 'unknown';

  private constructor(instance: WebAssembly.Instance, flavor: WasmFlavor | 'unknown') {
    this.#x = instance.exports as unknown as WasmExports;
    this.#x.reset();
    this.flavor = flavor;
  }

  /** From a compiled module (synchronous instantiation: Node, workers, small modules). */
  static fromModule(module: WebAssembly.Module, flavor: WasmFlavor | 'unknown' = 'unknown'): WasmEngine {
    return new WasmEngine(new WebAssembly.Instance(module, {}), flavor);
  }

  /** From the module's bytes, compiled and instantiated asynchronously (browsers' main thread). */
  static async fromBytes(
    bytes: ArrayBufferView | ArrayBuffer,
    flavor: WasmFlavor | 'unknown' = 'unknown',
  ): Promise<WasmEngine> {
    const { instance } = await WebAssembly.instantiate(bytes, {});
    return new WasmEngine(instance, flavor);
  }

  /** Bytes of linear memory the module holds now (grows on demand, never shrinks). */
  get memoryBytes(): number {
    return this.#x.memory.buffer.byteLength;
  }

  #alloc(bytes: number, what: string): number {
    const p = this.#x.alloc(Math.max(bytes, 0));
    if (p === 0) {
      throw new InvalidArgumentError(
        what,
        `tokens that fit the wasm engine's 4 GiB memory (needed ${bytes} more bytes; score in smaller batches)`,
        `${this.memoryBytes} bytes in use`,
      );
    }
    return p;
  }

  /** Copies the tokens the spans cover, compacted, plus starts / lengths (and int8 scales). */
  #place(b: TokenBatch, name: string): Placed {
    if (placedBytes(b) > MAX_BYTES) {
      throw new InvalidArgumentError(
        name,
        'at most 4 GiB of tokens per wasm call',
        `${placedBytes(b)} bytes`,
      );
    }
    let tokens = 0;
    for (let i = 0; i < b.count; i++) tokens += b.lengths[i];
    const esize = elementBytes(b.dtype);
    const data = this.#alloc(tokens * b.dim * esize, name);
    const scales = b.dtype === 'int8' ? this.#alloc(tokens * 4, name) : 0;
    const starts = this.#alloc(b.count * 8, name);
    const lengths = this.#alloc(b.count * 4, name);
    // Views after every allocation: growing memory detaches earlier views.
    const buf = this.#x.memory.buffer;
    const src = new Uint8Array(b.data.buffer, b.data.byteOffset, b.data.byteLength);
    const dst = new Uint8Array(buf);
    const st = new Float64Array(buf, starts, b.count);
    const ln = new Int32Array(buf, lengths, b.count);
    const sc = b.dtype === 'int8' ? new Float32Array(buf, scales, tokens) : undefined;
    const row = b.dim * esize;
    let at = 0;
    for (let i = 0; i < b.count; i++) {
      const s = b.starts[i];
      const l = b.lengths[i];
      dst.set(src.subarray(s * row, (s + l) * row), data + at * row);
      if (sc && b.scales) sc.set(b.scales.subarray(s, s + l), at);
      st[i] = at;
      ln[i] = l;
      at += l;
    }
    return { data, scales, starts, lengths, count: b.count };
  }

  /** Places both sides and prepares the job; returns it and where the scores will be. */
  #prepare(
    queries: TokenBatch,
    docs: TokenBatch,
    residentDocs?: Placed,
  ): { job: number; scores: number; int8: boolean } {
    const int8 = queries.dtype === 'int8';
    const q = this.#place(queries, 'queries');
    const d = residentDocs ?? this.#place(docs, 'docs');
    const scores = this.#alloc(q.count * d.count * 4, 'queries');
    const job = int8
      ? this.#x.prepare_int8(
          q.data,
          q.scales,
          q.starts,
          q.lengths,
          q.count,
          d.data,
          d.scales,
          d.starts,
          d.lengths,
          d.count,
          docs.dim,
          scores,
        )
      : this.#x.prepare_float(
          q.data,
          FLOAT_CODE[queries.dtype],
          q.starts,
          q.lengths,
          q.count,
          d.data,
          FLOAT_CODE[docs.dtype],
          d.starts,
          d.lengths,
          d.count,
          docs.dim,
          scores,
        );
    if (job === 0) this.#alloc(2 ** 32, 'queries'); // throws the memory error
    return { job, scores, int8 };
  }

  #read(scores: number, n: number): Float32Array {
    return new Float32Array(this.#x.memory.buffer, scores, n).slice();
  }

  /** All-pairs scores [queries.count * docs.count], row-major, blocking until done. */
  scoreSync(queries: TokenBatch, docs: TokenBatch, resident?: ResidentDocs): Float32Array {
    if (queries.count === 0 || docs.count === 0) return new Float32Array(queries.count * docs.count);
    const mark = this.#x.mark();
    try {
      const { job, scores, int8 } = this.#prepare(queries, docs, resident?.placed);
      (int8 ? this.#x.score_int8 : this.#x.score_float)(job, 0, docs.count);
      return this.#read(scores, queries.count * docs.count);
    } finally {
      this.#x.release(mark);
    }
  }

  /**
   * As scoreSync, in slices of documents with the event loop served between them; the signal is
   * checked before each slice. One call at a time per engine: calls are queued.
   */
  async score(
    queries: TokenBatch,
    docs: TokenBatch,
    options: WasmScoreOptions = {},
    resident?: ResidentDocs,
  ): Promise<Float32Array> {
    const run = this.#queue.then(() => this.#scoreNow(queries, docs, options, resident));
    this.#queue = run.then(
      () => undefined,
      () => undefined,
    );
    return run;
  }

  #queue: Promise<void> = Promise.resolve();

  async #scoreNow(
    queries: TokenBatch,
    docs: TokenBatch,
    options: WasmScoreOptions,
    resident?: ResidentDocs,
  ): Promise<Float32Array> {
    const signal = options.signal;
    signal?.throwIfAborted();
    if (queries.count === 0 || docs.count === 0) return new Float32Array(queries.count * docs.count);
    const sliceMs = options.sliceMs ?? 20;
    const mark = this.#x.mark();
    this.#inFlight++;
    try {
      const { job, scores, int8 } = this.#prepare(queries, docs, resident?.placed);
      const scoreRange = int8 ? this.#x.score_int8 : this.#x.score_float;
      let step = 1;
      for (let begin = 0; begin < docs.count; ) {
        const end = Math.min(docs.count, begin + step);
        const t0 = performance.now();
        scoreRange(job, begin, end);
        const ms = performance.now() - t0;
        begin = end;
        // Grow the slice towards sliceMs of work (at most x4 per slice), never below one document.
        step = Math.max(1, Math.min(step * 4, Math.floor((step * sliceMs) / Math.max(ms, 0.01))));
        if (begin < docs.count && ms > 0) {
          await yieldToLoop();
          signal?.throwIfAborted();
        }
      }
      return this.#read(scores, queries.count * docs.count);
    } finally {
      this.#inFlight--;
      this.#x.release(mark);
    }
  }

  /**
   * Copies a document set into wasm memory once, for many calls (a corpus in a browser tab).
   * Resident sets stack: free() the last one made first (others are freed with it).
   */
  resident(docs: TokenBatch): ResidentDocs {
    if (this.#inFlight > 0) {
      throw new InvalidArgumentError(
        'docs',
        'no asynchronous scoring in flight while a corpus is loaded',
        'a running score()',
      );
    }
    const below = this.#x.mark();
    const placed = this.#place(docs, 'docs');
    const entry = { below, freed: false };
    this.#residents.push(entry);
    return {
      docs,
      placed,
      free: () => {
        if (entry.freed) return;
        entry.freed = true;
        // Memory comes back once every set placed after this one is freed too.
        while (this.#residents.length > 0 && this.#residents[this.#residents.length - 1].freed) {
          const top = this.#residents.pop() as { below: number };
          if (this.#inFlight === 0) this.#x.release(top.below);
        }
      },
    };
  }
}

/** A document set living in wasm memory (WasmEngine.resident). */
export interface ResidentDocs {
  readonly docs: TokenBatch;
  readonly placed: Placed;
  free(): void;
}
