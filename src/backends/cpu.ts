// Typed face of the native CPU engine (native/cpu via native/binding/cpu_binding.cc).

import { InvalidArgumentError } from '../errors.js';
import { loadNative, nativeUnavailableReason } from '../native.js';
import type { TokenBatch } from '../tensor.js';
import { MAX_THREADS } from './constants.js';

export type CpuIsa = 'amx' | 'avx512' | 'avx512bf16' | 'avx2' | 'neon' | 'portable';

export interface CpuInfo {
  /** The kernel set used by default (the best this CPU runs). */
  isa: CpuIsa;
  /** Every kernel set this build has and this CPU runs, best first. */
  isas: CpuIsa[];
  /** fp32 lanes per vector of the default kernel set. */
  lanes: number;
  /** bf16 x bf16 runs on native bf16 products (AMX tiles) rather than fp32 conversion. */
  bf16Native: boolean;
  features: string;
  threads: number;
}

export interface CpuOptions {
  /** Worker threads (default: all cores, or MAXSIM_THREADS). */
  threads?: number;
  /** Force a kernel set (tests and benchmarks); default: the best available. */
  isa?: CpuIsa;
}

/** One row of the CPU admission table (native/cpu/cpu_features.cc). */
export interface CpuAdmission {
  /** 'fp' (float kernels), 'int8' or 'chamfer'. */
  family: string;
  /** The kernel set's name, as `isa` takes it. */
  set: string;
  /** The binding.gyp target it is compiled in ('maxsim_native': baseline flags). */
  target: string;
  /** Features (GCC -m names) the CPU and OS must have before the set may run. */
  needs: string[];
  /** This CPU has every one of them (MAXSIM_CPU_DISABLE counts as absent). */
  admitted: boolean;
}

interface CpuAddon {
  info(): CpuInfo;
  admission(): CpuAdmission[];
  maxsimSync(queries: TokenBatch, docs: TokenBatch, options: CpuOptions): Float32Array;
  maxsimAsync(
    queries: TokenBatch,
    docs: TokenBatch,
    options: CpuOptions & { cancel?: Int32Array },
  ): Promise<Float32Array>;
}

function addon(): CpuAddon {
  return loadNative().cpu as unknown as CpuAddon;
}

/** Why the CPU engine cannot run here, or undefined. Never throws. */
export function cpuUnavailableReason(): string | undefined {
  return nativeUnavailableReason();
}

export function cpuInfo(): CpuInfo {
  return addon().info();
}

/** Every kernel set of this build's architecture, what it needs and whether this CPU admits it. */
export function cpuAdmission(): CpuAdmission[] {
  return addon().admission();
}

function checkOptions(options: CpuOptions): CpuOptions {
  const out: CpuOptions = {};
  if (options.threads !== undefined) {
    if (!Number.isInteger(options.threads) || options.threads < 0 || options.threads > MAX_THREADS) {
      throw new InvalidArgumentError(
        'threads',
        `an integer in [0, ${MAX_THREADS}] (0 = all cores)`,
        String(options.threads),
      );
    }
    out.threads = options.threads;
  }
  if (options.isa !== undefined) out.isa = options.isa;
  return out;
}

/** All-pairs MaxSim on the CPU, blocking the calling thread: [nq * B] row-major. */
export function cpuMaxsimSync(queries: TokenBatch, docs: TokenBatch, options: CpuOptions = {}): Float32Array {
  return addon().maxsimSync(queries, docs, checkOptions(options));
}

/**
 * All-pairs MaxSim on the CPU thread pool, off the JS thread. `cancel` (src/abort.ts): the workers
 * stop before their next chunk of documents once [0] is set, and the promise rejects ("aborted").
 */
export function cpuMaxsim(
  queries: TokenBatch,
  docs: TokenBatch,
  options: CpuOptions = {},
  cancel?: Int32Array,
): Promise<Float32Array> {
  const checked = checkOptions(options);
  return addon().maxsimAsync(queries, docs, cancel ? { ...checked, cancel } : checked);
}
