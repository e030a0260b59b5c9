// `maxsim score`: MaxSim scores of queries against documents read from .npy / .safetensors files.
import { Command, Option } from 'commander';
import type { BackendChoice } from '../backends/select.js';
import { writeNpy } from '../io/npy.js';
import type { ScaleGranularity } from '../ops/quantize.js';
import {
  addInputOptions,
  checkScalesUse,
  FORMAT_CHOICES,
  fixed,
  formatOf,
  type InputOptions,
  jsonScore,
  loadInputs,
  printTable,
  scalesOption,
  scoreInBlocks,
} from './common.js';
import { refuseInsideCorpus } from './out-path.js';

interface ScoreCommandOptions extends InputOptions {
  dtype?: string;
  backend: BackendChoice;
  threads?: number;
  scales?: ScaleGranularity;
  out?: string;
  json?: boolean;
}

export function scoreCommand(): Command {
  return addInputOptions(
    new Command('score').description(
      'score queries against documents: float32 [B] for one [L, d] query, [Nq, B] for [Nq, L, d] queries ' +
        '(an empty document scores -Infinity, null in JSON)',
    ),
  )
    .addOption(
      new Option(
        '--dtype <format>',
        'score in this format: f32 (the inputs as given), int8 (both sides quantized per token), fp8 (GPU)',
      )
        .choices(FORMAT_CHOICES)
        .default('f32'),
    )
    .addOption(scalesOption())
    .option('--out <file.npy>', 'write the scores as a float32 .npy file instead of printing them')
    .option('--json', 'print JSON: {"scores": [...]} for one query, {"scores": [[...], ...]} for several')
    .action(async (opts: ScoreCommandOptions) => {
      checkScalesUse(opts.scales, formatOf(opts.dtype) !== 'float');
      // before any work: a file written there could replace a segment or the MANIFEST
      if (opts.out !== undefined) refuseInsideCorpus(opts.out, '--out');
      const { queries, docs } = loadInputs(opts);
      const options = { backend: opts.backend, threads: opts.threads, scales: opts.scales };
      const m = await scoreInBlocks(queries, docs, formatOf(opts.dtype), options);
      const rows = Array.from({ length: m.rows }, (_, q) => m.data.subarray(q * m.cols, (q + 1) * m.cols));
      const shape = queries.kind === 'matrix' ? [docs.count] : [m.rows, m.cols];
      if (opts.out !== undefined) {
        const data = rows.length === 1 ? rows[0] : concatRows(rows, docs.count);
        writeNpy(opts.out, { dtype: 'float32', shape, data });
        if (opts.json) console.log(JSON.stringify({ out: opts.out, shape }));
        else console.log(`wrote float32 [${shape.join(', ')}] scores to ${opts.out}`);
        return;
      }
      if (opts.json) {
        const asJson = (row: Float32Array) => Array.from(row, jsonScore);
        console.log(
          JSON.stringify({ scores: queries.kind === 'matrix' ? asJson(rows[0]) : rows.map(asJson) }),
        );
        return;
      }
      const headers =
        queries.kind === 'matrix' ? ['doc', 'score'] : ['doc', ...rows.map((_, q) => `query ${q}`)];
      printTable(
        headers,
        Array.from({ length: docs.count }, (_, b) => [String(b), ...rows.map((row) => fixed(row[b], 6))]),
      );
    });
}

function concatRows(rows: Float32Array[], cols: number): Float32Array {
  const out = new Float32Array(rows.length * cols);
  rows.forEach((row, q) => {
    out.set(row, q * cols);
  });
  return out;
}
