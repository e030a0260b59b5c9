// `maxsim bench --train`: the training operator at ColPali shape (all pairs B x B), one fresh process
// per shape so each peak-memory figure is that shape's own, then the dD methods under contention and
// the PyTorch autograd baseline measured in the same run (src/bench/train.ts, bench/baselines).
import { spawnSync } from 'node:child_process';
import { runTorchTrainBaseline } from '../bench/torch.js';
import {
  type ContentionRow,
  measureContention,
  measureTrainStep,
  type TrainStepRow,
} from '../bench/train.js';
import { InvalidArgumentError } from '../errors.js';
import type { TrainDDPath, TrainKernel } from '../ops/train.js';
import type { FloatDType } from '../tensor.js';
import { type BenchShape, fixed, formatShape, parseShape, printTable } from './common.js';
import { Progress } from './progress.js';

export const DEFAULT_TRAIN_SHAPES = ['128,1024,1024,128,128', '256,1024,1024,128,256'].map(parseShape);
/** B:hot pairs timed by default on CUDA (every query token picks one of `hot` tokens per document). */
export const DEFAULT_CONTENTION = ['64:2', '128:2'];

export interface TrainBenchOptions {
  backend: 'cpu' | 'cuda';
  shape?: BenchShape[];
  dtype?: FloatDType;
  repeats: number;
  device?: number;
  json?: boolean;
  torch: boolean;
  ddPath?: TrainDDPath;
  trainKernel?: TrainKernel;
  inputs?: 'host' | 'device';
  contention?: string[] | false;
  trainChild?: string;
}

/** B:hot, both positive integers. */
export function parseContention(value: string): string {
  const m = /^(\d+):(\d+)$/.exec(value.trim());
  if (!m || Number(m[1]) < 1 || Number(m[2]) < 1)
    throw new InvalidArgumentError(
      '--contention',
      'B:hot with positive integers (e.g. 64:2)',
      JSON.stringify(value),
    );
  return `${Number(m[1])}:${Number(m[2])}`;
}

function checkTrainShape(s: BenchShape): BenchShape {
  if (s.nq !== s.b)
    throw new InvalidArgumentError(
      '--shape',
      'B,Lq,Ld,d,B for --train (all pairs: as many queries as documents)',
      formatShape(s),
    );
  return s;
}

function settings(opts: TrainBenchOptions) {
  const dtype = opts.dtype ?? (opts.backend === 'cuda' ? 'float16' : 'float32');
  const inputs = opts.inputs ?? (opts.backend === 'cuda' ? 'device' : 'host');
  if (inputs === 'device' && opts.backend !== 'cuda')
    throw new InvalidArgumentError('--inputs', "'host' on the CPU", "'device'");
  return { dtype, inputs, dDPath: opts.ddPath ?? 'csr', trainKernel: opts.trainKernel ?? 'auto' } as const;
}

/** The hidden child of one shape: prints its TrainStepRow as one JSON line. */
async function trainChild(opts: TrainBenchOptions): Promise<void> {
  const s = checkTrainShape(parseShape(opts.trainChild ?? ''));
  const { dtype, inputs, dDPath, trainKernel } = settings(opts);
  const row = await measureTrainStep(
    { batch: s.b, queryLength: s.lq, docLength: s.ld, dim: s.d, dtype },
    { backend: opts.backend, inputs, dDPath, trainKernel, repeats: opts.repeats, device: opts.device },
  );
  console.log(JSON.stringify(row));
}

function runChild(shape: BenchShape, opts: TrainBenchOptions): TrainStepRow {
  const { dtype, inputs, dDPath, trainKernel } = settings(opts);
  const args = [
    ...process.execArgv,
    process.argv[1],
    'bench',
    '--train',
    '--train-child',
    formatShape(shape),
    '--backend',
    opts.backend,
    '--dtype',
    dtype,
    '--inputs',
    inputs,
    '--dd-path',
    dDPath,
    '--train-kernel',
    trainKernel,
    '--repeats',
    String(opts.repeats),
    '--device',
    String(opts.device ?? 0),
  ];
  const r = spawnSync(process.execPath, args, { encoding: 'utf8', maxBuffer: 16 * 1024 * 1024 });
  const line = (r.stdout ?? '').trim().split('\n').pop() ?? '';
  if (r.status !== 0 || !line.startsWith('{')) {
    const why = (r.stderr || r.error?.message || 'no output').trim().split('\n').slice(-3).join(' | ');
    throw new Error(`maxsim bench --train: the process for ${formatShape(shape)} failed: ${why}`);
  }
  return JSON.parse(line) as TrainStepRow;
}

export async function benchTrain(opts: TrainBenchOptions): Promise<void> {
  if (opts.trainChild !== undefined) return trainChild(opts);
  const shapes = (opts.shape ?? DEFAULT_TRAIN_SHAPES).map(checkTrainShape);
  settings(opts); // validates before any process starts
  const pairs =
    opts.contention === false ? [] : (opts.contention ?? (opts.backend === 'cuda' ? DEFAULT_CONTENTION : []));
  if (pairs.length > 0 && opts.backend !== 'cuda')
    throw new InvalidArgumentError(
      '--contention',
      'the CUDA backend (it compares the GPU dD methods)',
      'cpu',
    );
  const rows: TrainStepRow[] = [];
  for (const shape of shapes) {
    const progress = new Progress(`bench --train ${formatShape(shape)}`, 1);
    progress.update(0);
    const row = runChild(shape, opts);
    progress.finish();
    rows.push(row);
    if (!opts.json)
      console.error(
        `${row.shape}: forward ${fixed(row.forwardMs, 2)} ms, backward ${fixed(row.backwardMs, 2)} ms, step ${fixed(row.stepMs, 2)} ms`,
      );
  }
  const contention: ContentionRow[] = [];
  for (const pair of pairs) {
    const [b, hot] = pair.split(':').map(Number);
    const progress = new Progress(`bench --train contention ${pair}`, 1);
    progress.update(0);
    contention.push(await measureContention(b, hot, { device: opts.device }));
    progress.finish();
  }
  const torch =
    opts.torch && opts.backend === 'cuda'
      ? runTorchTrainBaseline(
          rows.map((r) => Number(r.shape.split(',')[0])),
          { queryLength: shapes[0].lq, docLength: shapes[0].ld, dim: shapes[0].d },
        )
      : { unavailable: opts.backend === 'cuda' ? '--no-torch' : 'CPU run' };
  const torchRows = torch instanceof Map ? torch : undefined;
  const out = rows.map((r) => {
    const t = torchRows?.get(Number(r.shape.split(',')[0]));
    const sameShape = t?.shape === r.shape;
    return {
      ...r,
      torchStatus: sameShape ? t?.status : undefined,
      torchMs: sameShape && t?.status === 'ok' ? t.ms : undefined,
      torchPeakExtraBytes: sameShape ? t?.peak_extra_bytes : undefined,
      speedupVsTorch: sameShape && t?.status === 'ok' && t.ms ? t.ms / r.stepMs : undefined,
    };
  });
  if (opts.json) {
    for (const o of out) console.log(JSON.stringify({ kind: 'trainStep', ...o }));
    for (const c of contention) console.log(JSON.stringify({ kind: 'contention', ...c }));
    return;
  }
  printTrain(out, torchRows ? undefined : 'unavailable' in torch ? torch.unavailable : '', contention);
}

// The step table (with the PyTorch baseline where it ran) and the contention table.
function printTrain(
  out: (TrainStepRow & {
    torchStatus?: string;
    torchMs?: number;
    torchPeakExtraBytes?: number;
    speedupVsTorch?: number;
  })[],
  noTorch: string | undefined,
  contention: ContentionRow[],
): void {
  const mb = (bytes: number | undefined) => (bytes === undefined ? '-' : fixed(bytes / 1e6, 1));
  printTable(
    [
      'shape B,Lq,Ld,d,B',
      'dtype',
      'inputs',
      'dD',
      'forward ms',
      'TFLOP/s',
      'backward ms',
      'bwd/fwd',
      'step ms',
      'step/fwd',
      'extra MB',
      'torch step ms',
      'torch extra MB',
      'vs torch',
    ],
    out.map((o) => [
      o.shape,
      o.dtype,
      o.inputs,
      o.dDPathUsed ?? o.dDPath,
      fixed(o.forwardMs, 2),
      fixed(o.forwardTflops, 0),
      fixed(o.backwardMs, 2),
      fixed(o.backwardOverForward, 2),
      fixed(o.stepMs, 2),
      fixed(o.stepOverForward, 2),
      mb(o.peakExtraBytes),
      o.torchMs === undefined ? (o.torchStatus ?? '-') : fixed(o.torchMs, 2),
      mb(o.torchPeakExtraBytes),
      o.speedupVsTorch === undefined ? '-' : `${fixed(o.speedupVsTorch, 2)}x`,
    ]),
  );
  if (noTorch !== undefined) console.log(`(no PyTorch baseline: ${noTorch})`);
  if (contention.length > 0) {
    console.log('');
    printTable(
      [
        'contention B,Lq,Ld,d,B',
        'hot',
        'on hot',
        'csr ms',
        'atomic ms',
        'atomic/csr',
        'dD csr ms',
        'dD atomic ms',
        'dD ratio',
        'auto',
      ],
      contention.map((c) => [
        c.shape,
        String(c.hotTokens),
        fixed(c.hotFraction, 3),
        fixed(c.csrMs, 3),
        fixed(c.atomicMs, 3),
        `${fixed(c.atomicOverCsr, 2)}x`,
        fixed(c.csrDdKernelMs, 3),
        fixed(c.atomicDdKernelMs, 3),
        `${fixed(c.atomicOverCsrDdKernel, 2)}x`,
        c.autoChose,
      ]),
    );
  }
}
