// The naive PyTorch baseline (bench/baselines/torch_maxsim.py) run in the same session as our
// kernels, so every speedup is a ratio measured side by side; it also measures the GPU's ceilings.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../native.js';

export interface TorchRow {
  shape: string;
  status: 'ok' | 'oom';
  ms?: number;
  peak_extra_bytes?: number;
  max_rel_err?: number;
}

export interface Ceilings {
  device: string;
  copy_gbps: number;
  /** Each 8192^3 GEMM timed alone (~30 ms of load: boost clocks). */
  fp16_gemm_tflops: number;
  /** Back to back after 2 s of them (the clocks the power cap leaves); absent from older scripts. */
  fp16_gemm_sustained_tflops?: number;
}

export interface TorchBaseline {
  ceilings?: Ceilings;
  rows: Map<string, TorchRow>;
}

/** Runs the baseline for the shapes; returns the reason instead when python3 + torch + CUDA are not there. */
export function runTorchBaseline(
  shapes: string[],
  withCeilings: boolean,
): TorchBaseline | { unavailable: string } {
  const script = join(packageRoot, 'bench', 'baselines', 'torch_maxsim.py');
  if (!existsSync(script)) return { unavailable: `${script} is missing` };
  const args = [script, ...shapes.flatMap((s) => ['--shape', s]), ...(withCeilings ? ['--ceilings'] : [])];
  const r = spawnSync('python3', args, { encoding: 'utf8', maxBuffer: 16 * 1024 * 1024 });
  if (r.error) return { unavailable: `python3 could not run (${r.error.message})` };
  const out: TorchBaseline = { rows: new Map() };
  for (const line of r.stdout.split('\n')) {
    if (!line.trim().startsWith('{')) continue;
    const o = JSON.parse(line) as Record<string, unknown>;
    if (o.status === 'unavailable') return { unavailable: String(o.reason) };
    if (o.ceilings) out.ceilings = o as unknown as Ceilings;
    else if (typeof o.shape === 'string') out.rows.set(o.shape, o as unknown as TorchRow);
  }
  if (r.status !== 0 && out.rows.size === 0 && !out.ceilings) {
    return {
      unavailable: `the baseline failed: ${(r.stderr || '').trim().split('\n').pop() ?? 'no output'}`,
    };
  }
  return out;
}

export interface TorchTrainRow {
  B: number;
  shape: string;
  method: string;
  status: 'ok' | 'oom';
  ms?: number;
  peak_extra_bytes?: number;
}

/** The PyTorch autograd training baseline (bench/baselines/torch_train.py) per batch size, or why not. */
export function runTorchTrainBaseline(
  batches: number[],
  shape: { queryLength: number; docLength: number; dim: number },
): Map<number, TorchTrainRow> | { unavailable: string } {
  const script = join(packageRoot, 'bench', 'baselines', 'torch_train.py');
  if (!existsSync(script)) return { unavailable: `${script} is missing` };
  const probe = spawnSync(
    'python3',
    ['-c', 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)'],
    {
      encoding: 'utf8',
    },
  );
  if (probe.error) return { unavailable: `python3 could not run (${probe.error.message})` };
  if (probe.status !== 0)
    return {
      unavailable: probe.status === 3 ? 'torch has no CUDA device here' : 'python3 has no torch here',
    };
  const args = [
    script,
    ...batches.flatMap((b) => ['--batch', String(b)]),
    '--lq',
    String(shape.queryLength),
    '--ld',
    String(shape.docLength),
    '--dim',
    String(shape.dim),
  ];
  const r = spawnSync('python3', args, { encoding: 'utf8', maxBuffer: 16 * 1024 * 1024 });
  if (r.error) return { unavailable: `python3 could not run (${r.error.message})` };
  const rows = new Map<number, TorchTrainRow>();
  for (const line of r.stdout.split('\n')) {
    if (!line.trim().startsWith('{')) continue;
    const o = JSON.parse(line) as TorchTrainRow;
    rows.set(o.B, o);
  }
  if (rows.size === 0) {
    return {
      unavailable: `the baseline failed: ${(r.stderr || '').trim().split('\n').pop() ?? 'no output'}`,
    };
  }
  return rows;
}
