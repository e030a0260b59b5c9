// `maxsim corpus index DIR`: builds a corpus's compressed index, or encodes the segments appended
// since; and the index step that `corpus append` and `corpus compact` run when the corpus has one.
import { Command, Option } from 'commander';
import { InvalidArgumentError } from '../errors.js';
import type { CorpusInfo } from '../io/corpus/index.js';
import { type CorpusIndexResult, indexCorpus, REBUILD_DRIFT } from '../io/corpus/index-build.js';
import { readManifest } from '../io/corpus/manifest.js';
import { grouped } from './common.js';
import { Progress } from './progress.js';

/** The rows `corpus info` shows for an index. */
export function indexRows(info: CorpusInfo): [string, string][] {
  const ix = info.index;
  if (!ix) return [['index', 'none (`maxsim corpus index DIR` builds one)']];
  return [
    [
      'index',
      `${ix.bits}-bit residuals, ${grouped(ix.centroids)} centroids (sample of ${grouped(ix.sample)} tokens)`,
    ],
    ['index bytes per token', ix.bytesPerToken.toFixed(1)],
    ['index files', `${(ix.bytes / 1024 ** 2).toFixed(2)} MiB`],
    [
      'indexed segments',
      `${ix.indexedSegments}${ix.unindexedSegments > 0 ? ` (${ix.unindexedSegments} unindexed: scanned; \`maxsim corpus index\` encodes them)` : ''}`,
    ],
    [
      'index tokens',
      ix.tokens === 'dropped'
        ? 'dropped: only the index is stored; scores are MaxSim on the decoded residuals'
        : 'kept: scores are exact MaxSim (re-scored from the tokens)',
    ],
    ['index drift', `${ix.drift.toFixed(4)}${driftNote(ix)}`],
  ];
}

function driftNote(ix: NonNullable<CorpusInfo['index']>): string {
  if (ix.rebuildAdvised) return ` (above ${REBUILD_DRIFT}: \`maxsim corpus index --rebuild\` advised)`;
  if (ix.drift > REBUILD_DRIFT)
    return ` (above ${REBUILD_DRIFT}; the tokens were dropped, so a new corpus built from the source embeddings fits new centroids)`;
  return '';
}

function report(dir: string, r: CorpusIndexResult) {
  const what = r.trained
    ? `built the index: ${r.encoded} segment(s) encoded; relative reconstruction error ${(r.meanSquaredError / r.meanSquaredNorm).toFixed(4)}`
    : `encoded ${r.encoded} new segment(s) against the existing centroids`;
  if (r.info.index?.tokens === 'dropped')
    process.stderr.write('index: the corpus keeps only its index (token segments dropped)\n');
  process.stderr.write(`index: ${what}; drift ${r.drift.toFixed(4)} (${r.backend})\n`);
  if (r.backendNote) process.stderr.write(`index: ${r.backendNote}\n`);
  if (r.rebuildAdvised)
    process.stderr.write(
      `index: drift ${r.info.index!.drift.toFixed(4)} exceeds ${REBUILD_DRIFT}: new documents lie far from the centroids; run \`maxsim corpus index ${dir} --rebuild\`\n`,
    );
}

async function runIndex(
  dir: string,
  options: Parameters<typeof indexCorpus>[1] = {},
): Promise<CorpusIndexResult> {
  let bar: Progress | undefined;
  try {
    const r = await indexCorpus(dir, {
      ...options,
      onProgress: (p) => {
        if (p.stage !== 'encode' && p.stage !== 'publish') {
          process.stderr.write(
            `index: ${p.stage === 'sample' ? 'sampling' : 'fitting the codec on'} ${grouped(p.total)} tokens\n`,
          );
          return;
        }
        bar ??= new Progress('index', Math.max(1, p.total));
        bar.update(p.done);
      },
    });
    bar?.finish();
    report(dir, r);
    return r;
  } catch (e) {
    bar?.abandon();
    throw e;
  }
}

/** After an append or compact: encodes the new segments when the corpus has an index. */
export async function indexAfterWrite(
  dir: string,
  waitMs: number | undefined,
): Promise<CorpusInfo | undefined> {
  if (!readManifest(dir).index) return undefined;
  return (await runIndex(dir, { waitMs })).info;
}

function positive(flag: string, v: string | undefined, min = 1): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!/^\d+$/.test(v.trim()) || !Number.isSafeInteger(n) || n < min)
    throw new InvalidArgumentError(flag, `an integer >= ${min}`, JSON.stringify(v));
  return n;
}

export function indexCommand(
  printInfo: (info: CorpusInfo, json: boolean | undefined) => void,
  waitMs: (v: string | undefined) => number | undefined,
): Command {
  return new Command('index')
    .description(
      'build the compressed (PLAID-class) index of a corpus, or encode the segments appended since; searches then go through it',
    )
    .argument('<dir>', 'the corpus directory')
    .addOption(new Option('--bits <bits>', 'bits per residual dimension').choices(['2', '4']))
    .option('--centroids <K>', 'number of centroids (default 2^floor(log2(16 sqrt(tokens))))')
    .option('--sample <N>', 'tokens sampled to fit the centroids and buckets (default min(tokens, 64 K))')
    .option('--seed <n>', 'seed of the sample and k-means (default 1)')
    .option('--rebuild', 'fit new centroids and re-encode every segment (after drift)')
    .option(
      '--drop-tokens',
      'keep only the index: the token segments are replaced by token-less ones (a smaller corpus; scores are MaxSim on the decoded residuals)',
    )
    .addOption(
      new Option('--backend <backend>', 'where the index is built: auto (GPU when usable), cpu or cuda')
        .choices(['auto', 'cpu', 'cuda'])
        .default('auto'),
    )
    .option('--wait <seconds>', 'when another writer holds the corpus, wait up to this long')
    .option('--json', 'print the corpus summary as JSON')
    .action(
      async (
        dir: string,
        o: {
          bits?: string;
          centroids?: string;
          sample?: string;
          seed?: string;
          rebuild?: boolean;
          dropTokens?: boolean;
          backend?: 'auto' | 'cpu' | 'cuda';
          wait?: string;
          json?: boolean;
        },
      ) => {
        const r = await runIndex(dir, {
          bits: o.bits === undefined ? undefined : (Number(o.bits) as 2 | 4),
          centroids: positive('--centroids', o.centroids),
          sample: positive('--sample', o.sample),
          seed: positive('--seed', o.seed, 0),
          rebuild: o.rebuild === true,
          dropTokens: o.dropTokens === true,
          backend: o.backend,
          waitMs: waitMs(o.wait),
        });
        printInfo(r.info, o.json);
      },
    );
}
