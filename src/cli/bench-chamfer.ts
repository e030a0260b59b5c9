// `maxsim bench --op chamfer --shape B,N,M,d [--backend cpu|cuda]`: the Chamfer operator on random
// points (uniform in the cube [-1, 1]^d), forward in both directions and the backward pass, median of
// repeats (on the CPU wall time; on CUDA the kernels' device time by CUDA events, the wall time of the
// host-array calls beside it); on the CPU it reports GFLOP/s and the share of the cores' nominal FMA
// peak; it runs the naive PyTorch baseline
// (bench/baselines/torch_chamfer.py: cdist + min + autograd, on the same backend) in the same run
// where torch is installed.
//
// FLOPs: 3d per (point, point) pair and direction (difference, square, add: the direct form's count,
// whatever form the kernel evaluates), so a forward over both directions is 2 * B * N * M * 3d.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import * as os from 'node:os';
import { join } from 'node:path';
import { InvalidArgumentError as UsageError } from 'commander';
import { Rng } from '../demo/random.js';
import { InvalidArgumentError } from '../errors.js';
import { packageRoot } from '../native.js';
import { type ChamferIsa, chamferIsas, chamferTrain } from '../ops/chamfer.js';
import { raggedBatch } from '../tensor.js';
import { fixed, printTable } from './common.js';
import { Progress } from './progress.js';

export interface ChamferShape {
  kind: 'chamfer';
  b: number;
  n: number;
  m: number;
  d: number;
}

export const DEFAULT_CHAMFER_SHAPES: ChamferShape[] = ['32,8192,8192,3', '1,100000,100000,3'].map(
  parseChamferShape,
);

/** 'B,N,M,d': B pairs of clouds of N and M points of dimension d <= 8. */
export function parseChamferShape(value: string): ChamferShape {
  const parts = value.split(',').map((p) => p.trim());
  const n = parts.map(Number);
  if (
    parts.length !== 4 ||
    !n.every((x, i) => /^\d+$/.test(parts[i]) && Number.isSafeInteger(x) && x >= 1) ||
    n[3] > 8
  ) {
    throw new UsageError(
      'expected B,N,M,d for --op chamfer: four integers >= 1, d <= 8, e.g. 32,8192,8192,3',
    );
  }
  return { kind: 'chamfer', b: n[0], n: n[1], m: n[2], d: n[3] };
}

export function formatChamferShape(s: ChamferShape): string {
  return `${s.b},${s.n},${s.m},${s.d}`;
}

export interface ChamferBenchOptions {
  backend: 'cpu' | 'cuda';
  shape?: ChamferShape[];
  repeats: number;
  warmup: number;
  threads?: number;
  isa?: string;
  json?: boolean;
  torch: boolean;
  /**
   * The clouds: 'cube' (default: uniform in [-1, 1]^d), 'sphere' (uniform on the unit sphere's surface,
   * a scanned shape), 'apart' (Q's cloud shifted 3 along the first axis: no neighbour close, the
   * pruned search's worst case).
   */
  cloud?: 'cube' | 'sphere' | 'apart';
}

/** The clock the OS reports (os.cpus(), else /proc/cpuinfo's 'cpu MHz'); 0 when unknown. */
function clockGhz(): number {
  const speed = os.cpus()[0]?.speed ?? 0;
  if (speed > 0) return speed / 1000;
  try {
    const m = /^cpu MHz\s*:\s*([\d.]+)/m.exec(readFileSync('/proc/cpuinfo', 'utf8'));
    return m ? Number(m[1]) / 1000 : 0;
  } catch {
    return 0;
  }
}

/** Nominal FMA peak of `threads` cores at the clock the OS reports, and how it was derived. */
export function fmaPeak(isa: ChamferIsa, threads: number): { gflops: number; basis: string } {
  const ghz = clockGhz();
  // Two FMA pipes per core (the common server core); AVX-512: 16 lanes, AVX2: 8, portable: SSE's 4.
  const lanes = isa === 'avx512' ? 16 : isa === 'avx2' ? 8 : 4;
  const perCycle = 2 * lanes * 2;
  return {
    gflops: threads * ghz * perCycle,
    basis: `${threads} cores x ${ghz.toFixed(2)} GHz (reported clock) x 2 FMA pipes x ${lanes} lanes x 2 FLOPs`,
  };
}

function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

interface TorchChamferRow {
  shape: string;
  status: 'ok' | 'oom' | 'unavailable';
  ms?: number;
  forward_ms?: number;
  peak_extra_bytes?: number;
  reason?: string;
}

/** The naive PyTorch baseline for the shapes, or why it cannot run. */
export function runTorchChamfer(
  shapes: string[],
  device: 'cpu' | 'cuda',
): Map<string, TorchChamferRow> | string {
  const script = join(packageRoot, 'bench', 'baselines', 'torch_chamfer.py');
  if (!existsSync(script)) return `${script} is missing`;
  const args = [script, '--device', device, '--iters', '3', ...shapes.flatMap((s) => ['--shape', s])];
  const r = spawnSync('python3', args, { encoding: 'utf8', maxBuffer: 16 * 1024 * 1024 });
  if (r.error) return `python3 could not run (${r.error.message})`;
  const rows = new Map<string, TorchChamferRow>();
  for (const line of r.stdout.split('\n')) {
    if (!line.trim().startsWith('{')) continue;
    const o = JSON.parse(line) as TorchChamferRow;
    if (o.status === 'unavailable') return o.reason ?? 'unavailable';
    rows.set(o.shape, o);
  }
  if (rows.size === 0)
    return `the baseline failed: ${(r.stderr || '').trim().split('\n').pop() ?? 'no output'}`;
  return rows;
}

export async function benchChamfer(opts: ChamferBenchOptions): Promise<void> {
  const cuda = opts.backend === 'cuda';
  const isas = chamferIsas();
  if (opts.isa !== undefined && !isas.includes(opts.isa as ChamferIsa)) {
    throw new InvalidArgumentError(
      '--isa',
      `one of ${isas.join(', ')} (Chamfer kernel sets usable here)`,
      JSON.stringify(opts.isa),
    );
  }
  const isa = (opts.isa as ChamferIsa | undefined) ?? isas[0];
  const threads = opts.threads || os.availableParallelism();
  // The GPU has no FMA-peak line here: GFLOP/s only (and the baseline's time).
  const peak = cuda ? { gflops: 0, basis: 'n/a (cuda)' } : fmaPeak(isa, threads);
  const rng = new Rng(1);
  const kind = opts.cloud ?? 'cube';
  const rows: ChamferRow[] = [];
  for (const shape of opts.shape ?? DEFAULT_CHAMFER_SHAPES) {
    const P = cloud(rng, kind, shape.b, shape.n, shape.d, 0);
    const Q = cloud(rng, kind, shape.b, shape.m, shape.d, kind === 'apart' ? 3 : 0);
    const t = await timeShape(opts, shape, P, Q, isa);
    const ms = t.device ? median(t.fwdDevice) : median(t.fwd);
    const flops = 2 * shape.b * shape.n * shape.m * 3 * shape.d;
    const gflops = flops / (ms / 1e3) / 1e9;
    rows.push({
      op: 'chamfer',
      shape: formatChamferShape(shape),
      backend: opts.backend,
      isa: cuda ? 'cuda' : isa,
      threads: cuda ? 0 : threads,
      repeats: opts.repeats,
      forwardMs: ms,
      forwardMinMs: Math.min(...(t.device ? t.fwdDevice : t.fwd)),
      forwardAllTargetsMs: t.allDevice.length > 0 ? median(t.allDevice) : undefined,
      cloud: kind,
      backwardMs: t.device ? median(t.bwdDevice) : median(t.bwd),
      timing: t.device ? 'device (CUDA events)' : 'wall',
      forwardWallMs: median(t.fwd),
      backwardWallMs: median(t.bwd),
      gflops,
      peakGflops: peak.gflops,
      pctFmaPeak: peak.gflops > 0 ? (100 * gflops) / peak.gflops : undefined,
      peakBasis: peak.basis,
      flopBasis: '2 directions x B x N x M x 3d',
    });
  }
  const torch = opts.torch
    ? runTorchChamfer(
        rows.map((r) => r.shape),
        // the baseline runs where ours does: its CPU cdist of a CUDA-sized shape would take minutes
        cuda ? 'cuda' : 'cpu',
      )
    : '--no-torch';
  const out = rows.map((r) => {
    const t = typeof torch === 'string' ? undefined : torch.get(r.shape);
    return {
      ...r,
      torchStatus: t?.status,
      torchMs: t?.ms,
      torchForwardMs: t?.forward_ms,
      speedupVsTorch: t?.status === 'ok' && t.ms ? t.ms / (r.forwardMs + r.backwardMs) : undefined,
      speedupWallVsTorch:
        t?.status === 'ok' && t.ms ? t.ms / (r.forwardWallMs + r.backwardWallMs) : undefined,
    };
  });
  if (opts.json) {
    for (const o of out) console.log(JSON.stringify(o));
    return;
  }
  printChamfer(out, { peak, torch, cuda, kind });
}

/** One shape's figures (on CUDA the device times; `timing` says which). */
interface ChamferRow {
  op: 'chamfer';
  shape: string;
  backend: 'cpu' | 'cuda';
  isa: string;
  threads: number;
  repeats: number;
  forwardMs: number;
  forwardMinMs: number;
  forwardAllTargetsMs: number | undefined;
  cloud: string;
  backwardMs: number;
  timing: string;
  forwardWallMs: number;
  backwardWallMs: number;
  gflops: number;
  peakGflops: number;
  pctFmaPeak: number | undefined;
  peakBasis: string;
  flopBasis: string;
}

// B clouds of n random points of dimension d (see ChamferBenchOptions.cloud), shifted along the first axis.
function cloud(rng: Rng, kind: string, b: number, n: number, d: number, shift: number) {
  const data = new Float32Array(b * n * d);
  for (let i = 0; i < data.length; i++) data[i] = rng.float() * 2 - 1;
  if (kind === 'sphere') {
    for (let i = 0; i < b * n; i++) {
      let s = 0;
      for (let k = 0; k < d; k++) s += data[i * d + k] ** 2;
      const r = Math.sqrt(s) || 1;
      for (let k = 0; k < d; k++) data[i * d + k] /= r;
    }
  }
  for (let i = 0; i < b * n; i++) data[i * d] += shift;
  return raggedBatch(
    data,
    Float64Array.from({ length: b + 1 }, (_, i) => i * n),
    { dim: d, checkFinite: false },
  );
}

// The repeats of one shape after the warmup: wall times, and on CUDA the kernels' device times.
async function timeShape(
  opts: ChamferBenchOptions,
  shape: ChamferShape,
  P: ReturnType<typeof cloud>,
  Q: ReturnType<typeof cloud>,
  isa: ChamferIsa,
) {
  const cuda = opts.backend === 'cuda';
  const run = cuda ? { backend: 'cuda' as const } : { threads: opts.threads, isa };
  const progress = new Progress(`bench chamfer ${formatChamferShape(shape)}`, opts.warmup + opts.repeats);
  const grad = new Float64Array(shape.b).fill(1);
  const fwd: number[] = [];
  const bwd: number[] = [];
  const fwdDevice: number[] = [];
  const bwdDevice: number[] = [];
  const allDevice: number[] = []; // CUDA: the forward visiting every target (prune: false)
  for (let i = 0; i < opts.warmup + opts.repeats; i++) {
    const t0 = process.hrtime.bigint();
    const t = await chamferTrain(P, Q, run);
    const t1 = process.hrtime.bigint();
    const g = await t.backward(grad);
    const t2 = process.hrtime.bigint();
    const all = cuda ? await chamferTrain(P, Q, { ...run, prune: false }) : undefined;
    if (i >= opts.warmup) {
      fwd.push(Number(t1 - t0) / 1e6);
      bwd.push(Number(t2 - t1) / 1e6);
      if (t.deviceMs !== undefined && g.deviceMs !== undefined) {
        fwdDevice.push(t.deviceMs);
        bwdDevice.push(g.deviceMs);
        if (all?.deviceMs !== undefined) allDevice.push(all.deviceMs);
      }
    }
    progress.update(i + 1);
  }
  progress.finish();
  return { fwd, bwd, fwdDevice, bwdDevice, allDevice, device: fwdDevice.length > 0 };
}

// The table, with what its columns measure.
function printChamfer(
  out: (ChamferRow & { torchStatus?: string; torchMs?: number; speedupVsTorch?: number })[],
  how: { peak: { gflops: number; basis: string }; torch: unknown; cuda: boolean; kind: string },
): void {
  const { peak, torch, cuda, kind } = how;
  console.log(
    `FMA peak: ${fixed(peak.gflops, 1)} GFLOP/s nominal (${peak.basis}); FLOPs: 3d per pair and direction`,
  );
  if (typeof torch === 'string') console.log(`(no PyTorch baseline: ${torch})`);
  if (cuda) {
    console.log(
      'forward / backward: device time of the kernels (CUDA events, like the baseline); wall: host arrays in and out',
    );
    console.log(
      `clouds: ${kind}; forward: the pruned search; every target: the same forward visiting every target (prune: false)`,
    );
  }
  printTable(
    [
      'shape B,N,M,d',
      'isa',
      'threads',
      'forward ms',
      'every target ms',
      'backward ms',
      'wall fwd+bwd ms',
      'GFLOP/s',
      '% FMA peak',
      'torch ms',
      'speedup',
    ],
    out.map((o) => [
      o.shape,
      o.isa,
      String(o.threads),
      fixed(o.forwardMs, 3),
      o.forwardAllTargetsMs === undefined ? '-' : fixed(o.forwardAllTargetsMs, 3),
      fixed(o.backwardMs, 3),
      fixed(o.forwardWallMs + o.backwardWallMs, 2),
      fixed(o.gflops, 1),
      o.pctFmaPeak === undefined ? '-' : fixed(o.pctFmaPeak, 1),
      o.torchMs === undefined ? (o.torchStatus ?? '-') : fixed(o.torchMs, 2),
      o.speedupVsTorch === undefined ? '-' : `${fixed(o.speedupVsTorch, 1)}x`,
    ]),
  );
}
