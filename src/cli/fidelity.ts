// `maxsim fidelity`: what int8 and fp8 scoring do to rankings, plain and centered (docs/eight-bit.md),
// on the demo corpus, an anisotropic corpus and an adversarial near-tie set, or on a corpus directory
// (--corpus) with pseudo-queries drawn from its documents or given ones (--queries FILE)
// (src/bench/fidelity.ts). int8 on the CPU, fp8 on the GPU when present.
import { Command } from 'commander';
import { anisotropicCorpus, anisotropy, pseudoQueries } from '../bench/corpora.js';
import {
  type FidelityReport,
  type FormatFidelity,
  fidelity,
  nearTieCorpus,
  nearTieOptions,
} from '../bench/fidelity.js';
import { demoCorpus } from '../demo/corpus.js';
import { Rng } from '../demo/random.js';
import { InvalidArgumentError } from '../errors.js';
import { openCorpusFile } from '../io/corpus/index.js';
import { warnIfInt8Slower } from '../ops/quantize.js';
import { isTokenMatrix, matrixAsBatch, type TokenBatch } from '../tensor.js';
import { fixed, integerOption, loadQueries, printTable } from './common.js';
import { Progress } from './progress.js';

interface FidelityOptions {
  docs?: number;
  queries: string;
  corpus?: string;
  queryLength: number;
  queryNoise: number;
  seed: number;
  timeLimit: number;
  json?: boolean;
}

/** --queries: a count (pseudo-queries or demo queries) or a file of float queries. */
function queriesArg(value: string): number | string {
  return /^[0-9]+$/.test(value) && Number(value) >= 1 ? Number(value) : value;
}

/** The float documents of a corpus directory (the first `limit` live ones). */
function corpusDocs(dir: string, limit: number | undefined): TokenBatch {
  const file = openCorpusFile(dir);
  if (file.info.dtype === 'int8')
    throw new InvalidArgumentError(
      '--corpus',
      'a float corpus (fp32 scores are the reference)',
      `an int8 corpus (${dir})`,
    );
  const live: number[] = [];
  for (let i = 0; i < file.info.documents && live.length < (limit ?? Number.MAX_SAFE_INTEGER); i++)
    if (!file.isDeleted(i)) live.push(i);
  return file.readDocuments(live);
}

/** The corpora to measure: --corpus's, or the demo corpus, the anisotropic set and the near-tie set. */
function corporaOf(
  opts: FidelityOptions,
): Array<{ name: string; queries: TokenBatch; docs: TokenBatch; relevant?: number[][] }> {
  const q = queriesArg(opts.queries);
  const given = (): TokenBatch => {
    const x = loadQueries({ queries: q as string, checkFinite: true });
    return isTokenMatrix(x) ? matrixAsBatch(x) : x;
  };
  const drawn = (docs: TokenBatch, count: number) =>
    pseudoQueries(docs, { queries: count, length: opts.queryLength, noise: opts.queryNoise, seed: opts.seed })
      .queries;
  if (opts.corpus !== undefined) {
    const docs = corpusDocs(opts.corpus, opts.docs);
    return [{ name: opts.corpus, queries: typeof q === 'number' ? drawn(docs, q) : given(), docs }];
  }
  if (typeof q === 'string')
    throw new InvalidArgumentError('--queries', 'a count (a query file needs --corpus)', JSON.stringify(q));
  const demo = demoCorpus({ docs: opts.docs ?? 10_000, queries: q, seed: opts.seed });
  const rng = new Rng(opts.seed);
  const ties = nearTieCorpus(() => rng.float(), nearTieOptions);
  const aniso = anisotropicCorpus({ seed: opts.seed });
  return [
    { name: 'demo corpus', queries: demo.queries, docs: demo.docs, relevant: demo.relevant },
    { name: 'anisotropic set', queries: drawn(aniso, q), docs: aniso },
    { name: 'near-tie set', queries: ties.queries, docs: ties.docs },
  ];
}

export function fidelityCommand(): Command {
  return new Command('fidelity')
    .description(
      'int8 / fp8 vs fp32 ranking fidelity (Spearman, top-k overlap, recall, two-stage exactness), with per-token and per-document scales, plain and centered',
    )
    .option(
      '--corpus <dir>',
      'measure this float corpus directory (else: demo, anisotropic and near-tie sets)',
    )
    .option(
      '--docs <n>',
      'demo corpus documents (10,000), or the first n live documents of --corpus (all)',
      integerOption(1),
    )
    .option(
      '--queries <n|file>',
      'queries: a count (demo queries with 3 planted relevant documents each; pseudo-queries drawn from the documents of --corpus and the anisotropic set), or a .npy / .safetensors file of float queries [Nq, L, d] (with --corpus)',
      '64',
    )
    .option('--query-length <n>', 'tokens per pseudo-query', integerOption(1), 32)
    .option(
      '--query-noise <x>',
      'noise added to each pseudo-query token, relative to its norm',
      (v: string) => {
        const x = Number(v);
        if (!(Number.isFinite(x) && x >= 0))
          throw new InvalidArgumentError('--query-noise', 'a number >= 0', v);
        return x;
      },
      0.1,
    )
    .option('--seed <s>', 'generator seed', integerOption(0, 2 ** 32 - 1), 42)
    .option(
      '--time-limit <s>',
      'seconds per corpus after which no new batch of queries starts (0: no limit); the report says how many ran',
      integerOption(0),
      60,
    )
    .option('--json', 'print JSON')
    .action(async (opts: FidelityOptions) => {
      const reports = await measureAll(opts);
      if (!opts.json) printReports(reports);
    });
}

type CorpusReport = FidelityReport & { anisotropy: ReturnType<typeof anisotropy> };

// Every corpus measured (a progress bar each), a note per corpus that --time-limit cut short; with
// --json the reports are printed here.
async function measureAll(opts: FidelityOptions): Promise<CorpusReport[]> {
  const corpora = corporaOf(opts);
  // int8 runs on the CPU here: where it is slower than float32 that is said first (once, stderr)
  const slower = warnIfInt8Slower(corpora[0].docs.dim, 'maxsim fidelity');
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
  const reports: CorpusReport[] = [];
  for (const c of corpora)
    reports.push({
      ...(await measure(c.name, c.queries, c.docs, c.relevant)),
      anisotropy: anisotropy(c.docs),
    });
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
  }
  return reports;
}

// One row per corpus and 8-bit format (documents with one scale per token, then per document);
// fp8 may not have run.
function row(
  r: CorpusReport,
  format: string,
  f: Pick<
    FormatFidelity,
    'spearmanMean' | 'spearmanMin' | 'top10Overlap' | 'top20Overlap' | 'top20Decided' | 'top20OverlapDecided'
  >,
  recall: string,
  two: string,
): string[] {
  return [
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
}

function rowsOf(r: CorpusReport): string[][] {
  const fp32 = r.recall10 ? fixed(r.recall10.fp32, 3) : undefined;
  const int8Recall = r.recall10
    ? `${fp32}/${fixed(r.recall10.int8, 3)}/${fixed(r.recall10.twoStage, 3)}`
    : '-';
  // fp8 and the document-scale rows: no two-stage search of their own (it is exact either way)
  const other = (format: string, f: FormatFidelity | { unavailable: string }) =>
    'unavailable' in f
      ? [r.name, format, '-', '-', '-', '-', '-', '-', '-', 'not run (below)', '-']
      : row(r, format, f, f.recall10 !== undefined && fp32 ? `${fp32}/${fixed(f.recall10, 3)}/-` : '-', '-');
  return [
    row(r, 'int8', r, int8Recall, fixed(r.twoStageExact, 4)),
    other('fp8', r.fp8),
    other('int8, doc scales', r.documentScales.int8),
    other('fp8, doc scales', r.documentScales.fp8),
    other('int8, centered', r.centered.int8),
    other('fp8, centered', r.centered.fp8),
    other('int8, doc scales, centered', r.centered.documentScales.int8),
    other('fp8, doc scales, centered', r.centered.documentScales.fp8),
  ];
}

// The table of every corpus and 8-bit format, then each corpus's anisotropy and why fp8 did not run.
function printReports(reports: CorpusReport[]): void {
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
  for (const r of reports)
    console.log(
      `${r.name}: mean token cosine ${fixed(r.anisotropy.meanCosine, 3)}, mean unit token norm ${fixed(r.anisotropy.meanNorm, 3)}`,
    );
  const missing = reports.map((r) => r.fp8).find((f) => 'unavailable' in f);
  if (missing && 'unavailable' in missing) console.log(`fp8: ${missing.unavailable}`);
}
