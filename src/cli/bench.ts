// `maxsim bench`: time MaxSim on random L2-normalized inputs, one shape at a time (median of repeats).
import { Command, Option } from 'commander';
import { MAX_THREADS } from '../backends/constants.js';
import { type CpuInfo, type CpuIsa, cpuInfo } from '../backends/cpu.js';
import { type NativeBackend, resolveBackend } from '../backends/select.js';
import { benchCudaShape, type CudaBenchRow, wrongRows } from '../bench/cuda.js';
import { runTorchBaseline } from '../bench/torch.js';
import { Rng, randomUnitTokens } from '../demo/random.js';
import { InvalidArgumentError } from '../errors.js';
import { encodeFloats } from '../floats.js';
import { maxsim, type ScoreOptions, topK } from '../ops/maxsim.js';
import {
  cpuInt8IsaFor,
  cpuInt8Isas,
  float32Counterpart,
  type Int8Isa,
  quantize,
  type ScaleGranularity,
  warnIfInt8Slower,
} from '../ops/quantize.js';
import { twoStageTopK } from '../ops/two-stage.js';
import {
  denseBatch,
  dtypeSize,
  type FloatDType,
  matrixAsBatch,
  raggedBatch,
  type TokenBatch,
  type TokenMatrix,
  tokenMatrix,
} from '../tensor.js';
import { benchChamfer, type ChamferShape, parseChamferShape } from './bench-chamfer.js';
import { benchTrain, DEFAULT_TRAIN_SHAPES, parseContention } from './bench-train.js';
import {
  type BenchShape,
  collect,
  fixed,
  formatShape,
  integerOption,
  parseDtype,
  parseShape,
  printTable,
} from './common.js';
import { Progress } from './progress.js';

const DEFAULT_SHAPES = [
  '1,32,128,128,20000',
  '1,32,300,128,10000',
  '32,32,300,128,2000',
  '1,1024,1024,128,100',
  '1,32,128,96,20000',
].map(parseShape);
// The H200 target grid of the CUDA engine (see bench/results/h200.md).
const DEFAULT_CUDA_SHAPES = [
  '1,32,128,128,100000',
  '1,32,300,128,100000',
  '1,32,512,128,100000',
  '1,128,300,128,100000',
  '1,256,256,128,10000',
  '1,32,128,96,100000',
  '1,1024,1024,128,1000',
  '1,1024,1024,128,10000',
  '32,32,300,128,10000',
].map(parseShape);
const SEED = 1;

interface BenchOptions {
  backend: NativeBackend;
  shape?: BenchShape[];
  dtype?: FloatDType | 'int8' | 'fp8';
  scales?: ScaleGranularity;
  ragged?: boolean;
  repeats: number;
  warmup: number;
  warmupMs: number;
  threads?: number;
  isa?: string;
  baselineIsa?: CpuIsa;
  topK?: number;
  json?: boolean;
  variant?: string;
  device?: number;
  torch: boolean;
  fill?: number;
  train?: boolean;
  ddPath?: 'csr' | 'atomic' | 'auto';
  trainKernel?: 'auto' | 'wgmma' | 'mma' | 'simt';
  inputs?: 'host' | 'device';
  contention?: string[] | false;
  trainChild?: string;
}

/** The options as parsed: --shape holds B,N,M,d shapes with --op chamfer. */
type RawBenchOptions = Omit<BenchOptions, 'shape'> & {
  op: 'maxsim' | 'chamfer';
  cloud?: 'cube' | 'sphere' | 'apart';
  shape?: (BenchShape | ChamferShape)[];
};

/** Nq,Lq,Ld,d,B (MaxSim) or, with four fields, B,N,M,d (--op chamfer). */
function parseAnyShape(value: string): BenchShape | ChamferShape {
  return value.split(',').length === 4 ? parseChamferShape(value) : parseShape(value);
}

interface BenchInputs {
  queries: TokenMatrix | TokenBatch;
  docs: TokenBatch;
  docTokens: number;
}

/** Random unit-norm inputs; with `ragged`, document lengths are uniform in [ceil(Ld/2), Ld]. */
function makeInputs(shape: BenchShape, dtype: FloatDType, ragged: boolean, rng: Rng): BenchInputs {
  const { nq, lq, ld, d, b } = shape;
  const trusted = { dtype, checkFinite: false } as const;
  const queryData = encodeFloats(randomUnitTokens(rng, nq * lq, d), dtype);
  const queries =
    nq === 1
      ? tokenMatrix(queryData, lq, d, trusted)
      : denseBatch(queryData, { ...trusted, count: nq, length: lq, dim: d });
  if (!ragged) {
    const docs = denseBatch(encodeFloats(randomUnitTokens(rng, b * ld, d), dtype), {
      ...trusted,
      count: b,
      length: ld,
      dim: d,
    });
    return { queries, docs, docTokens: b * ld };
  }
  const offsets = new Float64Array(b + 1);
  for (let i = 0; i < b; i++) offsets[i + 1] = offsets[i] + rng.intBetween(Math.ceil(ld / 2), ld);
  const docTokens = offsets[b];
  const docs = raggedBatch(encodeFloats(randomUnitTokens(rng, docTokens, d), dtype), offsets, {
    ...trusted,
    dim: d,
  });
  return { queries, docs, docTokens };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

export function benchCommand(): Command {
  return new Command('bench')
    .description('time MaxSim on random L2-normalized inputs (median of --repeats runs after --warmup runs)')
    .addOption(new Option('--backend <name>', 'engine to time').choices(['cpu', 'cuda']).default('cpu'))
    .addOption(
      new Option('--op <name>', 'operator to time: maxsim, or chamfer (point clouds; --shape B,N,M,d)')
        .choices(['maxsim', 'chamfer'])
        .default('maxsim'),
    )
    .option(
      '--shape <Nq,Lq,Ld,d,B>',
      `shape to time (repeatable; B,N,M,d with --op chamfer); default: ${DEFAULT_SHAPES.map(formatShape).join(' ')}`,
      collect(parseAnyShape),
    )
    .option(
      '--dtype <type>',
      'f32, f16, bf16, int8, or fp8 on cuda (default f32 on cpu, f16 on cuda; cuda int8 / fp8 also time f16 in the same run)',
      (value: string) => {
        const v = value.toLowerCase();
        if (v === 'int8' || v === 'i8') return 'int8';
        if (v === 'fp8' || v === 'e4m3') return 'fp8';
        return parseDtype(value);
      },
    )
    .addOption(
      new Option(
        '--scales <who>',
        "int8 / fp8: one scale per token (the default) or one per document (the documents' tokens share it)",
      ).choices(['token', 'document']),
    )
    .option('--ragged', 'ragged documents, lengths uniform in [Ld/2, Ld] (default: dense [B, Ld, d])')
    .option('--repeats <n>', 'timed runs per shape', integerOption(1), 5)
    .option('--warmup <n>', 'untimed runs per shape first', integerOption(0), 1)
    .option(
      '--warmup-ms <ms>',
      "CUDA: untimed device time before each timing; 1000 measures the sustained regime (the H200 then runs heavy kernels at its 700 W cap), 0 the anchors' burst method (5 warm-ups, 20 runs)",
      integerOption(0, 600000),
      0,
    )
    .option('--threads <n>', 'CPU worker threads (0 = all cores)', integerOption(0, MAX_THREADS))
    .option(
      '--isa <name>',
      "CPU kernel set, one of `maxsim info`'s usable list (int8: its int8 list; default: the fastest)",
    )
    .option(
      '--baseline-isa <name>',
      "cpu --dtype int8: the float32 kernel set timed on the same data in the same run (default: the one of the int8 set's vector width)",
    )
    .option(
      '--top-k <k>',
      'cpu --dtype int8: also time the two-stage top-k (int8 scan, exact rescoring) against float32 top-k',
      integerOption(1),
    )
    .option('--json', 'print one JSON object per shape')
    .option(
      '--fill <ratio>',
      'CUDA, with --ragged: mean fill ratio of the documents (lengths uniform from 32)',
      Number,
    )
    .option('--variant <name>', 'CUDA kernel variant (default: the dispatcher picks)')
    .option('--device <n>', 'CUDA device index', integerOption(0), 0)
    .option('--no-torch', 'CUDA: skip the PyTorch baseline and the ceilings')
    .option(
      '--train',
      `time training instead (all pairs B x B: forward, backward, contrastive step, peak memory; one process per shape; default shapes ${DEFAULT_TRAIN_SHAPES.map(formatShape).join(' ')})`,
    )
    .addOption(
      new Option('--dd-path <method>', 'with --train: the dD method')
        .choices(['csr', 'atomic', 'auto'])
        .default('csr'),
    )
    .addOption(
      new Option('--train-kernel <kernel>', 'with --train on CUDA: the forward kernel')
        .choices(['auto', 'wgmma', 'mma', 'simt'])
        .default('auto'),
    )
    .addOption(
      new Option(
        '--inputs <where>',
        "with --train: 'device' (uploaded once, gradients stay on the GPU; CUDA default) or 'host' arrays",
      ).choices(['host', 'device']),
    )
    .option(
      '--contention <B:hot>',
      'with --train on CUDA: time the dD methods when every query token picks one of hot tokens per document (repeatable; default 64:2 128:2)',
      collect(parseContention),
    )
    .option('--no-contention', 'with --train: skip the contention rows')
    .addOption(
      new Option(
        '--cloud <kind>',
        "--op chamfer: the clouds, 'cube' (uniform), 'sphere' (a surface) or 'apart'",
      )
        .choices(['cube', 'sphere', 'apart'])
        .default('cube'),
    )
    .addOption(new Option('--train-child <shape>').hideHelp())
    .action(runBench);
}

/** Checks the options of a run and hands it to the bench of its operator and backend. */
async function runBench(raw: RawBenchOptions): Promise<void> {
  const chamferShapes = raw.shape?.filter((s): s is ChamferShape => 'kind' in s);
  const maxsimShapes = raw.shape?.filter((s): s is BenchShape => !('kind' in s));
  if (raw.op === 'chamfer') {
    if (maxsimShapes?.length)
      throw new InvalidArgumentError('--shape', 'B,N,M,d with --op chamfer', formatShape(maxsimShapes[0]));
    resolveBackend(raw.backend); // 'cuda' without a usable GPU fails here with the reason
    return benchChamfer({ ...raw, shape: chamferShapes, backend: raw.backend });
  }
  if (chamferShapes?.length)
    throw new InvalidArgumentError(
      '--shape',
      'Nq,Lq,Ld,d,B (B,N,M,d needs --op chamfer)',
      `${chamferShapes[0].b},${chamferShapes[0].n},${chamferShapes[0].m},${chamferShapes[0].d}`,
    );
  const opts: BenchOptions = { ...raw, shape: maxsimShapes };
  // Fails here, with the reason, when CUDA is unavailable.
  const backend = resolveBackend(opts.backend);
  if (opts.scales !== undefined && opts.dtype !== 'int8' && opts.dtype !== 'fp8')
    throw new InvalidArgumentError(
      '--scales',
      'used with --dtype int8 or fp8',
      `--dtype ${opts.dtype ?? 'default'}`,
    );
  if (opts.train) {
    if (opts.dtype === 'int8' || opts.dtype === 'fp8')
      throw new InvalidArgumentError('--dtype', 'f32, f16 or bf16 with --train', `'${opts.dtype}'`);
    return benchTrain({ ...opts, backend, dtype: opts.dtype, repeats: opts.repeats });
  }
  // cuda int8 / fp8: the float16 kernel is timed on the same data first (the ratio is printed)
  if (backend === 'cuda') return benchCuda(opts, opts.dtype ?? 'float16');
  return benchCpu(opts, backend);
}

/** What every CPU shape of one run shares. */
interface CpuBenchContext {
  opts: BenchOptions;
  backend: NativeBackend;
  dtype: FloatDType | 'int8';
  cpu: CpuInfo | undefined;
  threads: number | null;
  rng: Rng;
  printRow: (cells: string[]) => void;
}

/** CPU (or the auto backend): the option checks, the header, then one row per shape as it finishes. */
async function benchCpu(opts: BenchOptions, backend: NativeBackend): Promise<void> {
  if (opts.dtype === 'fp8')
    throw new InvalidArgumentError(
      '--dtype',
      'f32, f16, bf16 or int8 on cpu (fp8 runs on cuda only)',
      "'fp8'",
    );
  const dtype = opts.dtype ?? 'float32';
  const cpu = backend === 'cpu' ? cpuInfo() : undefined;
  const int8 = dtype === 'int8';
  if (cpu && opts.isa !== undefined) {
    const usable: string[] = int8 ? cpuInt8Isas() : cpu.isas;
    if (!usable.includes(opts.isa))
      throw new InvalidArgumentError(
        '--isa',
        `one of ${usable.join(', ')} (the ${int8 ? 'int8 ' : ''}kernel sets usable here)`,
        JSON.stringify(opts.isa),
      );
  }
  if ((opts.baselineIsa !== undefined || opts.topK !== undefined) && !(cpu && int8))
    throw new InvalidArgumentError(
      opts.topK !== undefined ? '--top-k' : '--baseline-isa',
      'used with --backend cpu --dtype int8',
      `--backend ${backend} --dtype ${dtype}`,
    );
  if (cpu && opts.baselineIsa !== undefined && !cpu.isas.includes(opts.baselineIsa))
    throw new InvalidArgumentError(
      '--baseline-isa',
      `one of ${cpu.isas.join(', ')} (the float kernel sets usable here)`,
      JSON.stringify(opts.baselineIsa),
    );
  const threads = cpu ? opts.threads || cpu.threads : null;
  const rng = new Rng(SEED);
  const columns = [
    'shape Nq,Lq,Ld,d,B',
    'dtype',
    'layout',
    'backend',
    'threads',
    'ms',
    'GFLOP/s',
    'GB/s docs',
    ...(cpu && int8 ? ['fp32 kernel', 'fp32 ms', 'vs fp32'] : []),
    ...(cpu && int8 && opts.topK !== undefined ? ['2-stage ms', 'fp32 top-k', 'vs fp32'] : []),
  ];
  const widths = [20, 8, 6, 20, 7, 10, 9, 9, 15, 10, 7, 10, 10, 7];
  // Rows print as each shape finishes (fixed widths), since a whole grid can take minutes.
  const printRow = (cells: string[]) =>
    console.log(
      cells.map((c, i) => (i >= 4 && i !== 8 ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join('  '),
    );
  if (!opts.json) printRow(columns);
  for (const shape of opts.shape ?? DEFAULT_SHAPES)
    await benchCpuShape(shape, { opts, backend, dtype, cpu, threads, rng, printRow });
}

/** Times one shape (interleaved cases, see below) and prints its row or JSON object. */
async function benchCpuShape(shape: BenchShape, ctx: CpuBenchContext): Promise<void> {
  const { opts, backend, dtype, cpu, threads, rng, printRow } = ctx;
  const int8 = dtype === 'int8';
  // the kernel sets that run this shape: int8 on the CPU names its own (AMX needs d % 64 == 0)
  const int8Isa: Int8Isa | undefined =
    cpu && int8 ? ((opts.isa as Int8Isa | undefined) ?? cpuInt8IsaFor(shape.d)) : undefined;
  const isa = cpu ? (int8Isa ?? opts.isa ?? cpu.isa) : null;
  const baselineIsa: CpuIsa | undefined = int8Isa
    ? (opts.baselineIsa ??
      (cpu?.isas.includes(float32Counterpart(int8Isa)) ? float32Counterpart(int8Isa) : cpu?.isa))
    : undefined;
  const warnings: string[] = [];
  // said once on stderr (a process warning shared with the two-stage search), and in --json rows
  const slower = int8Isa ? warnIfInt8Slower(shape.d, 'maxsim bench', int8Isa, baselineIsa) : undefined;
  if (slower) warnings.push(`int8 is slower than float32 here: ${slower}`);
  const steps = (opts.warmup + opts.repeats) * (1 + (int8Isa ? 1 : 0) + (opts.topK !== undefined ? 2 : 0));
  const progress = new Progress(`bench ${formatShape(shape)}`, steps);
  let done = 0;
  progress.update(0);
  // int8: the float32 inputs quantized per token (queries; documents per --scales).
  const inputs = makeInputs(shape, int8 ? 'float32' : dtype, opts.ragged === true, rng);
  const { docTokens } = inputs;
  const queries = int8 ? quantize(inputs.queries, 'int8') : inputs.queries;
  const docs = int8 ? quantize(inputs.docs, 'int8', { scales: opts.scales }) : inputs.docs;
  const options: ScoreOptions = {
    backend,
    threads: opts.threads,
    isa: (isa ?? undefined) as ScoreOptions['isa'],
  };
  const score = (q: TokenMatrix | TokenBatch, d: TokenBatch, o: ScoreOptions) => () => maxsim(q, d, o);
  // cpu int8: float32 on the same (unquantized) data, and with --top-k the two-stage top-k;
  // the cases run interleaved, round after round, so this VM's drift and its neighbours' load
  // hit them alike (bench/interleave.ts); median and min of --repeats rounds after --warmup
  const fp32Options = { backend, threads: opts.threads, isa: baselineIsa };
  const qBatch = inputs.queries.kind === 'matrix' ? matrixAsBatch(inputs.queries) : inputs.queries;
  const k = opts.topK ?? 0;
  const cases: Array<() => Promise<unknown>> = [score(queries, docs, options)];
  if (int8Isa) cases.push(score(inputs.queries, inputs.docs, fp32Options));
  if (int8Isa && opts.topK !== undefined)
    cases.push(
      () => twoStageTopK(qBatch, inputs.docs, docs, k, { ...fp32Options, int8Isa }),
      () => topK(qBatch, inputs.docs, k, fp32Options),
    );
  const times = cases.map(() => [] as number[]);
  for (let i = 0; i < opts.warmup + opts.repeats; i++) {
    for (const [c, run] of cases.entries()) {
      const start = process.hrtime.bigint();
      await run();
      const ms = Number(process.hrtime.bigint() - start) / 1e6;
      if (i >= opts.warmup) times[c].push(ms);
      progress.update(++done);
    }
  }
  const stats = times.map((t) => ({ ms: median(t), minMs: Math.min(...t) }));
  const main = stats[0];
  const fp32 = int8Isa ? stats[1] : undefined;
  const topKStats =
    int8Isa && opts.topK !== undefined ? { k, twoStage: stats[2], fp32: stats[3] } : undefined;
  progress.finish();
  const ms = main.ms;
  const flops = 2 * shape.nq * shape.lq * docTokens * shape.d;
  const docBytes = docTokens * shape.d * dtypeSize(dtype);
  const result = {
    shape: formatShape(shape),
    dtype: dtype,
    layout: opts.ragged ? 'ragged' : 'dense',
    backend,
    isa,
    threads,
    docTokens,
    repeats: opts.repeats,
    ms,
    minMs: main.minMs,
    gflops: flops / (ms / 1e3) / 1e9,
    gbps: docBytes / (ms / 1e3) / 1e9,
    ...(fp32 ? { fp32: { isa: baselineIsa, ...fp32 }, speedupVsFp32: fp32.ms / ms } : {}),
    ...(topKStats
      ? {
          topK: {
            k: topKStats.k,
            // 'auto' prefilter: no scan where int8 is slower (the warning), exact float32 instead
            scanned: slower === undefined,
            twoStageMs: topKStats.twoStage.ms,
            fp32Ms: topKStats.fp32.ms,
            speedupVsFp32: topKStats.fp32.ms / topKStats.twoStage.ms,
          },
        }
      : {}),
    ...(int8 && cpu ? { warnings } : {}),
  };
  if (opts.json) {
    console.log(JSON.stringify(result));
  } else {
    printRow([
      result.shape,
      result.dtype,
      result.layout,
      `${backend}${isa ? `/${isa}` : ''}`,
      String(threads ?? '-'),
      fixed(ms, 3),
      fixed(result.gflops, 1),
      fixed(result.gbps, 2),
      ...(fp32 ? [`cpu/${baselineIsa}`, fixed(fp32.ms, 3), `${fixed(fp32.ms / ms, 2)}x`] : []),
      ...(topKStats
        ? [
            fixed(topKStats.twoStage.ms, 3),
            fixed(topKStats.fp32.ms, 3),
            `${fixed(topKStats.fp32.ms / topKStats.twoStage.ms, 2)}x`,
          ]
        : []),
    ]);
  }
}

/**
 * CUDA: device-event medians per shape (src/bench/cuda.ts), then the PyTorch baseline and the GPU's
 * ceilings measured in the same run, so speedups and percentages are side-by-side ratios.
 */
async function benchCuda(opts: BenchOptions, dtype: FloatDType | 'int8' | 'fp8'): Promise<void> {
  const shapes = opts.shape ?? DEFAULT_CUDA_SHAPES;
  const rows: CudaBenchRow[] = [];
  for (const shape of shapes) {
    const progress = new Progress(`bench cuda ${formatShape(shape)}`, 1);
    const row = await benchCudaShape(shape, {
      dtype,
      scales: opts.scales,
      ragged: opts.ragged === true,
      fill: opts.fill,
      warmup: Math.max(opts.warmup, 5),
      warmupMs: opts.warmupMs,
      iters: Math.max(opts.repeats, 20),
      variant: opts.variant,
      device: opts.device,
      onProgress: (m) => progress.note(m),
    });
    progress.finish();
    rows.push(row);
    if (!opts.json)
      console.error(
        `${row.shape}: ${fixed(row.ms, 3)} ms (${row.variant})` +
          (row.baseline
            ? `; ${row.baseline.dtype} ${fixed(row.baseline.ms, 3)} ms (${row.baseline.variant}): ${fixed(row.speedupVsBaseline ?? 0, 2)}x`
            : ''),
      );
  }
  const torch = opts.torch ? runTorchBaseline(shapes.map(formatShape), true) : { unavailable: '--no-torch' };
  const baseline = 'rows' in torch ? torch : undefined;
  const out = rows.map((r) => {
    const t = baseline?.rows.get(r.shape);
    const c = baseline?.ceilings;
    return {
      ...r,
      pctCopyBandwidth: c ? (100 * r.gbps) / c.copy_gbps : undefined,
      pctGemm: c ? (100 * r.tflops) / c.fp16_gemm_tflops : undefined,
      pctGemmSustained: c?.fp16_gemm_sustained_tflops
        ? (100 * r.tflops) / c.fp16_gemm_sustained_tflops
        : undefined,
      torchMs: t?.status === 'ok' ? t.ms : undefined,
      torchStatus: t?.status,
      torchPeakExtraBytes: t?.peak_extra_bytes,
      speedupVsTorch: t?.status === 'ok' && t.ms ? t.ms / r.ms : undefined,
      ceilings: c,
    };
  });
  // a wrong kernel's timing must not pass for a result: say so and fail the command
  const wrong = wrongRows(rows);
  for (const w of wrong) console.error(`maxsim bench: ${w}`);
  if (wrong.length > 0) process.exitCode = 1;
  if (opts.json) {
    for (const o of out) console.log(JSON.stringify(o));
    return;
  }
  if (!baseline) console.log(`(no PyTorch baseline: ${'unavailable' in torch ? torch.unavailable : ''})`);
  else if (baseline.ceilings) {
    console.log(
      `ceilings measured now on ${baseline.ceilings.device}: copy ${fixed(baseline.ceilings.copy_gbps, 0)} GB/s, ` +
        `fp16 GEMM ${fixed(baseline.ceilings.fp16_gemm_tflops, 0)} TFLOP/s burst` +
        (baseline.ceilings.fp16_gemm_sustained_tflops
          ? `, ${fixed(baseline.ceilings.fp16_gemm_sustained_tflops, 0)} sustained`
          : ''),
    );
  }
  const withBaseline = out.some((o) => o.baseline);
  const headers = [
    'shape',
    'dtype',
    'fill',
    'variant',
    'ms',
    'TFLOP/s',
    'GB/s',
    '% copy',
    '% GEMM',
    '% sust.',
    'extra MB',
    'torch ms',
    'speedup',
    'max rel err',
    ...(withBaseline ? ['base variant', 'base ms', 'vs base'] : []),
  ];
  printTable(
    headers,
    out.map((o) => [
      o.shape,
      o.dtype,
      fixed(o.fillRatio, 2),
      o.variant,
      fixed(o.ms, 3),
      fixed(o.tflops, 1),
      fixed(o.gbps, 0),
      o.pctCopyBandwidth === undefined ? '-' : fixed(o.pctCopyBandwidth, 0),
      o.pctGemm === undefined ? '-' : fixed(o.pctGemm, 0),
      o.pctGemmSustained === undefined ? '-' : fixed(o.pctGemmSustained, 0),
      fixed(o.peakExtraBytes / 1e6, 1),
      o.torchMs === undefined ? (o.torchStatus ?? '-') : fixed(o.torchMs, 3),
      o.speedupVsTorch === undefined ? '-' : `${fixed(o.speedupVsTorch, 2)}x`,
      o.maxRelErr.toExponential(1),
      ...(withBaseline
        ? [
            o.baseline?.variant ?? '-',
            o.baseline ? fixed(o.baseline.ms, 3) : '-',
            o.speedupVsBaseline === undefined ? '-' : `${fixed(o.speedupVsBaseline, 2)}x`,
          ]
        : []),
    ]),
  );
}
