// `maxsim fidelity`: what int8 and fp8 scoring do to rankings, on the demo corpus and on an
// adversarial near-tie set (src/bench/fidelity.ts). int8 on the CPU, fp8 on the GPU when present.
import { Command } from 'commander';
import { type FormatFidelity, fidelity, nearTieCorpus, nearTieOptions } from '../bench/fidelity.js';
import { demoCorpus } from '../demo/corpus.js';
import { Rng } from '../demo/random.js';
import { warnIfInt8Slower } from '../ops/quantize.js';
import type { TokenBatch } from '../tensor.js';
import { fixed, integerOption, printTable } from './common.js';
import { Progress } from './progress.js';

interface FidelityOptions {
  docs: number;
  queries: number;
  seed: number;
  timeLimit: number;
  json?: boolean;
}

export function fidelityCommand(): Command {
  return new Command('fidelity')
    .description(
      'int8 / fp8 vs fp32 ranking fidelity (Spearman, top-k overlap, recall, two-stage exactness), with per-token and per-document scales',
    )
    .option('--docs <n>', 'demo corpus documents', integerOption(1), 10_000)
    .option('--queries <n>', 'demo corpus queries (3 planted relevant documents each)', integerOption(1), 64)
    .option('--seed <s>', 'generator seed', integerOption(0, 2 ** 32 - 1), 42)
    .option(
      '--time-limit <s>',
      'seconds per corpus after which no new batch of queries starts (0: no limit); the report says how many ran',
      integerOption(0),
      60,
    )
    .option('--json', 'print JSON')
    .action(async (opts: FidelityOptions) => {
      const demo = demoCorpus({ docs: opts.docs, queries: opts.queries, seed: opts.seed });
      // int8 runs on the CPU here: where it is slower than float32 that is said first (once, stderr)
      const slower = warnIfInt8Slower(demo.docs.dim, 'maxsim fidelity');
      const rng = new Rng(opts.seed);
      const ties = nearTieCorpus(() => rng.float(), nearTieOptions);
      // batches of queries with a progress bar, until all ran or --time-limit passed
      const measure = async (name: string, queries: TokenBatch, docs: TokenBatch, relevant?: number[][]) => {
        const bar = new Progress(`fidelity ${name}`, queries.count);
        bar.update(0);
        const r = await fidelity(name, queries, docs, relevant, {
          timeLimitMs: opts.timeLimit > 0 ? opts.timeLimit * 1000 : undefined,
          onProgress: (done) => bar.update(done),
        });
        bar.finish();
        return r;
      };
      const reports = [
        await measure('demo corpus', demo.queries, demo.docs, demo.relevant),
        await measure('near-tie set', ties.queries, ties.docs),
      ];
      const cut = reports.filter((r) => r.queries < r.queriesRequested);
      for (const r of cut)
        console.error(
          `maxsim fidelity: ${r.name}: ${r.queries} of ${r.queriesRequested} queries within --time-limit ${opts.timeLimit} s (raise it, or 0, for all)`,
        );
      if (opts.json) {
        console.log(
          JSON.stringify({
            reports,
            warnings: slower ? [`int8 is slower than float32 here: ${slower}`] : [],
          }),
        );
        return;
      }
      // One row per corpus and 8-bit format (documents with one scale per token, then per document);
      // fp8 may not have run.
      const row = (
        r: (typeof reports)[number],
        format: string,
        f: Pick<
          FormatFidelity,
          | 'spearmanMean'
          | 'spearmanMin'
          | 'top10Overlap'
          | 'top20Overlap'
          | 'top20Decided'
          | 'top20OverlapDecided'
        >,
        recall: string,
        two: string,
      ) => [
        r.name,
        format,
        String(r.queries),
        String(r.docs),
        fixed(f.spearmanMean, 5),
        fixed(f.spearmanMin, 5),
        fixed(f.top10Overlap, 4),
        fixed(f.top20Overlap, 4),
        `${Number.isNaN(f.top20OverlapDecided) ? '-' : fixed(f.top20OverlapDecided, 4)} (${fixed(f.top20Decided * 100, 1)}%)`,
        recall,
        two,
      ];
      const rowsOf = (r: (typeof reports)[number]): string[][] => {
        const fp32 = r.recall10 ? fixed(r.recall10.fp32, 3) : undefined;
        const int8Recall = r.recall10
          ? `${fp32}/${fixed(r.recall10.int8, 3)}/${fixed(r.recall10.twoStage, 3)}`
          : '-';
        // fp8 and the document-scale rows: no two-stage search of their own (it is exact either way)
        const other = (format: string, f: FormatFidelity | { unavailable: string }) =>
          'unavailable' in f
            ? [r.name, format, '-', '-', '-', '-', '-', '-', '-', 'not run (below)', '-']
            : row(
                r,
                format,
                f,
                f.recall10 !== undefined && fp32 ? `${fp32}/${fixed(f.recall10, 3)}/-` : '-',
                '-',
              );
        return [
          row(r, 'int8', r, int8Recall, fixed(r.twoStageExact, 4)),
          other('fp8', r.fp8),
          other('int8, doc scales', r.documentScales.int8),
          other('fp8, doc scales', r.documentScales.fp8),
        ];
      };
      printTable(
        [
          'corpus',
          'format',
          'queries',
          'docs',
          'rho mean',
          'rho min',
          'top-10 overlap',
          'top-20 overlap',
          'top-20, near-ties aside (queries decided)',
          'recall@10 fp32/8-bit/2-stage',
          '2-stage = exact',
        ],
        reports.flatMap(rowsOf),
      );
      const missing = reports.map((r) => r.fp8).find((f) => 'unavailable' in f);
      if (missing && 'unavailable' in missing) console.log(`fp8: ${missing.unavailable}`);
    });
}
