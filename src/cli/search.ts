// `maxsim search`: the top-k documents of every query, as JSON lines.
import { Command, Option } from 'commander';
import { TRANSFER_OPTIONS, type TransferOption } from '../backends/cuda-transfer.js';
import { type BackendChoice, cudaUnavailableReason, resolveBackend } from '../backends/select.js';
import { BackendUnavailableError, InvalidArgumentError } from '../errors.js';
import { openCorpus } from '../ops/corpus-search.js';
import { quantize, type ScaleGranularity, warnIfInt8Slower } from '../ops/quantize.js';
import { rankRows } from '../ops/shape.js';
import { twoStageTopK } from '../ops/two-stage.js';
import { type Hit, isTokenMatrix, matrixAsBatch } from '../tensor.js';
import {
  addInputOptions,
  checkScalesUse,
  FORMAT_CHOICES,
  formatOf,
  type InputOptions,
  integerOption,
  interruptSignal,
  jsonScore,
  loadInputs,
  loadQueries,
  numberOption,
  parseGpus,
  scalesOption,
  scoreInBlocks,
} from './common.js';
import { readIdList } from './corpus.js';
import { Progress } from './progress.js';
import { queryTextBatch } from './query-text.js';

interface SearchCommandOptions extends InputOptions {
  /** --query-text / --model (query-text.ts, added in main.ts) */
  queryText?: string[];
  model?: string;
  dtype?: string;
  corpus?: string;
  ids?: string;
  gpuMemory?: number;
  gpus?: 'all' | number[];
  pin?: boolean;
  transfer?: TransferOption;
  hostMemoryBudget?: number;
  stats?: boolean;
  exact?: boolean;
  nprobe?: number;
  candidates?: number;
  rescore?: number;
  prune?: number;
  verifyCorpus: boolean;
  backend: BackendChoice;
  threads?: number;
  topK: number;
  prefilter?: 'int8';
  scales?: ScaleGranularity;
}

// --exact: the full scan; --nprobe / --candidates / --rescore / --prune: settings of the search through the index
function indexOption(
  opts: SearchCommandOptions,
): false | { nprobe?: number; candidates?: number; rescore?: number; prune?: number } {
  const tuned = (['nprobe', 'candidates', 'rescore', 'prune'] as const).filter((k) => opts[k] !== undefined);
  if (opts.exact) {
    if (tuned.length > 0)
      throw new InvalidArgumentError(
        `--${tuned[0]}`,
        'no index setting with --exact (the full scan does not use the index)',
        `--exact --${tuned[0]} ${opts[tuned[0]]}`,
      );
    return false;
  }
  return Object.fromEntries(tuned.map((k) => [k, opts[k]]));
}

// the library names its options (index.rescore); the command line names the flag that was typed
function asFlag(e: unknown, exact: boolean | undefined): unknown {
  if (e instanceof InvalidArgumentError && /^index\.(nprobe|candidates|rescore|prune)$/.test(e.argument))
    return new InvalidArgumentError(`--${e.argument.slice(6)}`, e.expected, e.received);
  if (e instanceof InvalidArgumentError && e.argument === 'index' && exact)
    return new InvalidArgumentError('--exact', e.expected, '--exact');
  return e;
}

export function searchCommand(): Command {
  return addInputOptions(
    new Command('search').description(
      'rank documents for each query; prints one JSON line per query: ' +
        '{"query": i, "results": [{"index": b, "score": s}, ...]}, best first (an empty document scores null); ' +
        'with --corpus, results also carry the document "id"',
    ),
    false,
  )
    .option('--corpus <dir>', 'search an on-disk corpus (maxsim corpus build) instead of --docs, streamed')
    .option(
      '--ids <file>',
      'with --corpus: score only these documents (ids one per line; indices for a corpus without ids)',
    )
    .option('--gpu-memory <MiB>', 'with --corpus on CUDA: device memory the scan may use', integerOption(1))
    .option(
      '--gpus <list>',
      "with --corpus on CUDA: 'all' or device indices (0,1): each GPU streams a share of the blocks",
      parseGpus,
    )
    .option(
      '--pin',
      'with --corpus on CUDA: page-lock the corpus files whole first, so blocks reach the GPU by DMA alone',
    )
    .option('--no-pin', 'with --corpus on CUDA: never page-lock the files (--transfer copy)')
    .addOption(
      new Option(
        '--transfer <mode>',
        'with --corpus on CUDA: how blocks reach the GPU; auto pins the files ahead of the scan when ' +
          'they fit --host-memory-budget, else reads with O_DIRECT',
      )
        .choices(TRANSFER_OPTIONS)
        .default('auto'),
    )
    .option(
      '--host-memory-budget <MiB>',
      'with --corpus on CUDA, --transfer auto: host memory the files may keep page-locked (default: half of MemAvailable less what is pinned)',
      integerOption(0),
    )
    .option('--stats', 'with --corpus: print what the scan did (transfer mode and why, GB/s) on stderr')
    .option('--exact', 'with --corpus: the full scan even when the corpus has an index')
    .option(
      '--nprobe <n>',
      'with --corpus through its index: centroids probed per query token',
      integerOption(1),
    )
    .option(
      '--candidates <n>',
      'with --corpus through its index: documents kept by centroid interaction per segment',
      integerOption(1),
    )
    .option(
      '--rescore <n>',
      'with --corpus through its index: residual-scored documents re-scored exactly (at least --top-k)',
      integerOption(1),
    )
    .option(
      '--prune <x>',
      "with --corpus through its index: the CPU residual stage's token pruning, a number >= 0 (default 0.25; Infinity decodes every token)",
      numberOption(0, ' (Infinity: no pruning)'),
    )
    .option(
      '--no-verify-corpus',
      'with --corpus on the CPU: skip the CRC check of the chunks read (trusted, already verified corpora)',
    )
    .option('--top-k <k>', 'results per query', integerOption(0), 10)
    .addOption(
      new Option('--dtype <format>', 'rank by scores in this format: f32 (as given), int8, fp8 (GPU)')
        .choices(FORMAT_CHOICES)
        .default('f32'),
    )
    .addOption(
      new Option(
        '--prefilter <dtype>',
        'scan with int8 first, rescore the 4k best exactly (same results)',
      ).choices(['int8']),
    )
    .addOption(scalesOption())
    .action(async (opts: SearchCommandOptions) => {
      checkScalesUse(opts.scales, opts.prefilter === 'int8' || formatOf(opts.dtype) !== 'float');
      if (opts.corpus !== undefined) return searchCorpus(opts);
      refuseCorpusOnly(opts);
      return searchDocs(opts);
    });
}

// Options of the corpus scan given without --corpus, and --docs missing.
function refuseCorpusOnly(opts: SearchCommandOptions): void {
  const corpusOnly = opts.stats
    ? '--stats'
    : opts.exact || opts.nprobe !== undefined || opts.candidates !== undefined
      ? opts.exact
        ? '--exact'
        : opts.nprobe !== undefined
          ? '--nprobe'
          : '--candidates'
      : opts.hostMemoryBudget !== undefined
        ? '--host-memory-budget'
        : (opts.transfer ?? 'auto') !== 'auto'
          ? '--transfer'
          : undefined;
  if (corpusOnly)
    throw new InvalidArgumentError(
      corpusOnly,
      'used with --corpus (it concerns the streamed scan)',
      '--docs',
    );
  if (opts.ids !== undefined)
    throw new InvalidArgumentError('--ids', 'used with --corpus (ids name corpus documents)', '--docs');
  if (opts.docs === undefined)
    throw new InvalidArgumentError('--docs', 'a documents file (or --corpus <dir>)', 'neither');
}

// --docs: the queries against the documents file, in memory.
async function searchDocs(opts: SearchCommandOptions): Promise<void> {
  await queryTextBatch(opts);
  const { queries, docs } = loadInputs(opts);
  // Ctrl-C: the scoring stops at its next chunk of documents (main() exits 130 with one line)
  const interrupt = interruptSignal();
  const options = { backend: opts.backend, threads: opts.threads, signal: interrupt.signal };
  let results: Hit[][];
  try {
    if (opts.prefilter === 'int8') {
      // the scan's documents centered (docs/eight-bit.md): candidates as good or better, the
      // results the exact rescore either way
      const scan = quantize(docs, 'int8', { scales: opts.scales, center: docs.dtype !== 'int8' });
      const batch = isTokenMatrix(queries) ? matrixAsBatch(queries) : queries;
      results = await twoStageTopK(batch, docs, scan, opts.topK, options);
    } else {
      const format = formatOf(opts.dtype);
      // what topK does (rank the score rows), in blocks with progress for large inputs
      const m = await scoreInBlocks(
        queries,
        docs,
        format,
        { ...options, ...(format !== 'float' ? { scales: opts.scales } : {}) },
        'search',
      );
      results = rankRows(m, opts.topK);
    }
  } finally {
    interrupt.dispose();
  }
  const lines = results.map((hits, query) =>
    JSON.stringify({ query, results: hits.map((h) => ({ index: h.index, score: jsonScore(h.score) })) }),
  );
  if (lines.length > 0) console.log(lines.join('\n'));
}

async function searchCorpus(opts: SearchCommandOptions): Promise<void> {
  if (opts.docs !== undefined || opts.docOffsets !== undefined || opts.docLengths !== undefined)
    throw new InvalidArgumentError(
      '--corpus',
      'no --docs / --doc-offsets / --doc-lengths with it',
      '--docs as well',
    );
  if (opts.prefilter !== undefined)
    throw new InvalidArgumentError(
      '--prefilter',
      'no prefilter with --corpus (build an int8 corpus instead)',
      opts.prefilter,
    );
  if (opts.scales !== undefined)
    throw new InvalidArgumentError(
      '--scales',
      'no --scales with --corpus (an int8 corpus keeps the scales it was built with)',
      `--scales ${opts.scales}`,
    );
  if (opts.pin && opts.backend === 'cpu')
    throw new InvalidArgumentError(
      '--pin',
      "--backend cuda or auto (pinning feeds the GPU's copy engine)",
      '--backend cpu',
    );
  const transfer = opts.transfer ?? 'auto';
  if (opts.pin === false && transfer !== 'auto' && transfer !== 'copy')
    throw new InvalidArgumentError(
      '--no-pin',
      '--transfer copy or auto with it (--no-pin copies)',
      `--transfer ${transfer}`,
    );
  if (opts.pin === true && transfer !== 'auto' && transfer !== 'pin')
    throw new InvalidArgumentError('--pin', '--transfer pin or auto with it', `--transfer ${transfer}`);
  if (opts.backend === 'cpu' && (transfer !== 'auto' || opts.hostMemoryBudget !== undefined))
    throw new InvalidArgumentError(
      transfer !== 'auto' ? '--transfer' : '--host-memory-budget',
      '--backend cuda or auto (it decides how blocks reach the GPU)',
      '--backend cpu',
    );
  const corpus = openCorpus(opts.corpus!);
  // a corpus scores in the format it was built with: an int8 / fp8 --dtype that it does not hold would
  // be ignored, so it is refused (f32, the default, means as stored)
  const format = formatOf(opts.dtype);
  const stored = corpus.info.dtype === 'int8' ? 'int8' : 'float';
  if (format !== 'float' && format !== stored)
    throw new InvalidArgumentError(
      '--dtype',
      `f32 (as stored)${stored === 'int8' ? ' or int8' : ''}: --corpus scores in the format the corpus was built with, ${corpus.info.dtype} here (maxsim corpus build --dtype int8 makes an int8 corpus)`,
      `--dtype ${opts.dtype}`,
    );
  if (opts.pin) {
    const why = cudaUnavailableReason();
    if (why) throw new BackendUnavailableError(`--pin needs a GPU: ${why}`);
    await corpus.pin();
  }
  const queries = (await queryTextBatch(opts)) ?? loadQueries(opts);
  if (corpus.info.dtype === 'int8' && resolveBackend(opts.backend) === 'cpu')
    warnIfInt8Slower(corpus.info.dim, 'an int8 corpus');
  const bar = new Progress('search', corpus.info.documents);
  const interrupt = interruptSignal();
  let results: Awaited<ReturnType<typeof corpus.search>>;
  let stats: Awaited<ReturnType<typeof corpus.searchWithStats>>['stats'];
  try {
    ({ hits: results, stats } = await corpus.searchWithStats(queries, {
      topK: opts.topK,
      backend: opts.backend,
      threads: opts.threads,
      gpuMemory: opts.gpuMemory === undefined ? undefined : opts.gpuMemory * 1024 * 1024,
      devices: opts.gpus,
      transfer: opts.pin === false ? 'copy' : transfer,
      hostMemoryBudget: opts.hostMemoryBudget === undefined ? undefined : opts.hostMemoryBudget * 1024 * 1024,
      verify: opts.verifyCorpus,
      ids: opts.ids === undefined ? undefined : readIdList(opts.ids),
      index: indexOption(opts),
      onProgress: (p) => bar.update(p.documents),
      // Ctrl-C: the scan stops at its next block (main() exits 130 with one line)
      signal: interrupt.signal,
    }));
  } catch (e) {
    bar.abandon();
    throw asFlag(e, opts.exact);
  } finally {
    interrupt.dispose();
  }
  bar.finish();
  // stderr: stdout stays one JSON line per query
  if (stats.scores === 'residual')
    console.error('scores: MaxSim of the decoded residuals (the corpus keeps only its index: --drop-tokens)');
  if (opts.stats)
    console.error(
      `stats: ${JSON.stringify({ ...stats, GBps: stats.seconds > 0 ? +(stats.bytes / stats.seconds / 1e9).toFixed(2) : null })}`,
    );
  const lines = results.map((hits, query) =>
    JSON.stringify({
      query,
      results: hits.map((h) => ({ index: h.index, id: h.id, score: jsonScore(h.score) })),
    }),
  );
  if (lines.length > 0) console.log(lines.join('\n'));
}
