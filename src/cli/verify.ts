// `maxsim verify`: every available backend (and every CPU kernel set) against the float64 reference on
// fresh random inputs chosen to hit the edge cases: empty documents, awkward dimensions, one-token and
// long queries, padded dense batches, all three float dtypes.
import { Command, Option } from 'commander';
import { cpuInfo } from '../backends/cpu.js';
import { referenceMaxsim } from '../backends/reference.js';
import { type BackendChoice, cudaUnavailableReason, resolveBackend } from '../backends/select.js';
import { Rng, randomUnitTokens } from '../demo/random.js';
import { MaxsimError } from '../errors.js';
import { encodeFloats } from '../floats.js';
import { maxsim, type ScoreOptions } from '../ops/maxsim.js';
import {
  denseBatch,
  type FloatDType,
  raggedBatch,
  type TokenBatch,
  type TokenMatrix,
  tokenMatrix,
} from '../tensor.js';
import { BACKEND_CHOICES, integerOption, printTable } from './common.js';
import { Progress } from './progress.js';

interface Case {
  name: string;
  /** Queries; 0 means one query as a TokenMatrix (maxsim's one-query path) instead of a batch. */
  nq: number;
  lq: number;
  d: number;
  b: number;
  /** Document lengths are uniform in [minLd, maxLd]. */
  minLd: number;
  maxLd: number;
  /** Dense [B, maxLd, d] with per-document lengths instead of packed ragged. */
  dense?: boolean;
  /** Force these documents to be empty. */
  empty?: number[];
}

const CASES: Case[] = [
  { name: 'ragged, empty docs', nq: 3, lq: 32, d: 128, b: 40, minLd: 0, maxLd: 60, empty: [0, 7, 39] },
  ...[1, 7, 96, 100, 128, 257].map((d) => ({
    name: `d=${d}`,
    nq: 2,
    lq: 16,
    d,
    b: 24,
    minLd: 0,
    maxLd: 40,
    empty: [3],
  })),
  { name: 'Lq=1', nq: 4, lq: 1, d: 128, b: 50, minLd: 1, maxLd: 64 },
  { name: 'Lq=300', nq: 2, lq: 300, d: 128, b: 12, minLd: 1, maxLd: 100 },
  { name: 'dense padded', nq: 2, lq: 24, d: 96, b: 20, minLd: 0, maxLd: 48, dense: true, empty: [5] },
  { name: 'one query (maxsim)', nq: 0, lq: 20, d: 128, b: 30, minLd: 1, maxLd: 80 },
  { name: 'many short docs', nq: 2, lq: 8, d: 64, b: 600, minLd: 0, maxLd: 24 },
];
const DTYPES: readonly FloatDType[] = ['float32', 'float16', 'bfloat16'];

// fp32 accumulation error grows about like the square root of the number of terms summed: d products per
// dot product, then Lq maxima per score.
const BASE_TOLERANCE = 2e-5;
function tolerance(c: Case): number {
  return BASE_TOLERANCE * Math.max(1, Math.sqrt(c.d / 128)) * Math.max(1, Math.sqrt(c.lq / 32));
}

function makeCase(
  c: Case,
  dtype: FloatDType,
  rng: Rng,
): { queries: TokenMatrix | TokenBatch; docs: TokenBatch } {
  const trusted = { dtype, checkFinite: false } as const;
  const lengths = Array.from({ length: c.b }, (_, i) =>
    c.empty?.includes(i) ? 0 : rng.intBetween(c.minLd, c.maxLd),
  );
  const queryData = encodeFloats(randomUnitTokens(rng, Math.max(1, c.nq) * c.lq, c.d), dtype);
  const queries =
    c.nq === 0
      ? tokenMatrix(queryData, c.lq, c.d, trusted)
      : denseBatch(queryData, { ...trusted, count: c.nq, length: c.lq, dim: c.d });
  if (c.dense) {
    const data = encodeFloats(randomUnitTokens(rng, c.b * c.maxLd, c.d), dtype);
    return {
      queries,
      docs: denseBatch(data, { ...trusted, count: c.b, length: c.maxLd, dim: c.d, lengths }),
    };
  }
  const offsets = [0];
  for (const l of lengths) offsets.push(offsets[offsets.length - 1] + l);
  const data = encodeFloats(randomUnitTokens(rng, offsets[c.b], c.d), dtype);
  return { queries, docs: raggedBatch(data, offsets, { ...trusted, dim: c.d }) };
}

/** Largest |got - ref| / max(1, |ref|); -Infinity (empty documents) must match exactly. */
function maxRelativeError(got: Float32Array, ref: Float64Array): number {
  let worst = 0;
  for (let i = 0; i < ref.length; i++) {
    const r = ref[i];
    const g = got[i];
    const err =
      r === g
        ? 0
        : Number.isFinite(r)
          ? Math.abs(g - r) / Math.max(1, Math.abs(r))
          : Number.POSITIVE_INFINITY;
    // NaN compares false: a NaN score is reported as an infinite error.
    if (!(err <= worst)) worst = Number.isNaN(err) ? Number.POSITIVE_INFINITY : err;
  }
  return worst;
}

interface Engine {
  label: string;
  options: ScoreOptions;
}

function engines(choice: BackendChoice): Engine[] {
  const out: Engine[] = [];
  if (choice !== 'cuda') {
    for (const isa of cpuInfo().isas) out.push({ label: `cpu/${isa}`, options: { backend: 'cpu', isa } });
  }
  // 'cuda' fails here with the reason when it is unavailable; 'auto' includes it only when usable.
  if (choice === 'cuda' || (choice === 'auto' && cudaUnavailableReason() === undefined)) {
    resolveBackend('cuda');
    out.push({ label: 'cuda', options: { backend: 'cuda' } });
  }
  return out;
}

interface Check {
  case: string;
  dtype: FloatDType;
  backend: string;
  maxRelError: number;
  tolerance: number;
  pass: boolean;
}

export function verifyCommand(): Command {
  return new Command('verify')
    .description('check every available backend and CPU kernel set against the float64 reference')
    .addOption(
      new Option('--backend <name>', 'auto = every available backend')
        .choices(BACKEND_CHOICES)
        .default('auto'),
    )
    .option('--seed <s>', 'PRNG seed (default: random, printed for replay)', integerOption(0, 2 ** 32 - 1))
    .option('--json', 'print JSON')
    .action(async (opts: { backend: BackendChoice; seed?: number; json?: boolean }) => {
      const seed = opts.seed ?? Math.floor(Math.random() * 2 ** 32);
      const rng = new Rng(seed);
      const targets = engines(opts.backend);
      const checks: Check[] = [];
      const progress = new Progress('verify', CASES.length * DTYPES.length);
      for (const c of CASES) {
        for (const dtype of DTYPES) {
          const { queries, docs } = makeCase(c, dtype, rng);
          // The reference decodes the same fp16 / bf16 bits the kernels read: only accumulation error remains.
          const ref = referenceMaxsim(queries, docs);
          for (const engine of targets) {
            const got =
              queries.kind === 'matrix'
                ? await maxsim(queries, docs, engine.options)
                : (await maxsim(queries, docs, engine.options)).data;
            const err = maxRelativeError(got, ref);
            const tol = tolerance(c);
            checks.push({
              case: c.name,
              dtype,
              backend: engine.label,
              maxRelError: err,
              tolerance: tol,
              pass: err <= tol,
            });
          }
          progress.update(checks.length / targets.length);
        }
      }
      progress.finish();
      const failed = checks.filter((check) => !check.pass).length;
      if (opts.json) {
        const safe = checks.map((check) => ({
          ...check,
          maxRelError: Number.isFinite(check.maxRelError) ? check.maxRelError : null,
        }));
        console.log(JSON.stringify({ seed, ok: failed === 0, checks: safe }));
      } else {
        console.log(`seed ${seed} (replay with --seed ${seed})`);
        printTable(
          ['case', 'dtype', 'backend', 'max rel err', 'tolerance', 'pass'],
          checks.map((check) => [
            check.case,
            check.dtype,
            check.backend,
            check.maxRelError.toExponential(2),
            check.tolerance.toExponential(2),
            check.pass ? 'yes' : 'NO',
          ]),
        );
        console.log(`${checks.length - failed} of ${checks.length} checks passed`);
      }
      if (failed > 0)
        throw new MaxsimError(
          `verify: ${failed} of ${checks.length} checks exceeded their tolerance (seed ${seed})`,
        );
    });
}
