// `maxsim demo` (`npm start`): generate a ColBERT-like corpus with planted answers, search it with the
// fastest backend, and report the hits, recall@10 and throughput.
import { Command, Option } from 'commander';
import { MAX_THREADS } from '../backends/constants.js';
import { cpuInfo } from '../backends/cpu.js';
import { type BackendChoice, resolveBackend } from '../backends/select.js';
import { demoCorpus } from '../demo/corpus.js';
import { InvalidArgumentError } from '../errors.js';
import { topK } from '../ops/maxsim.js';
import { type FloatDType, type Hit, totalTokens } from '../tensor.js';
import { BACKEND_CHOICES, fixed, grouped, integerOption, parseDtype, printTable } from './common.js';

const RECALL_DEPTH = 10;
const SHOWN_HITS = 5;
const PLANTED_PER_QUERY = 3;

interface DemoOptions {
  docs: number;
  queries: number;
  seed: number;
  backend: BackendChoice;
  dtype?: FloatDType;
  threads?: number;
  json?: boolean;
}

function secondsSince(start: bigint): number {
  return Number(process.hrtime.bigint() - start) / 1e9;
}

export function demoCommand(): Command {
  return new Command('demo')
    .description(
      'search a generated ColBERT-like corpus with planted relevant documents (recall, throughput)',
    )
    .option('--docs <n>', 'documents', integerOption(1), 10_000)
    .option('--queries <n>', 'queries (3 planted relevant documents each)', integerOption(1), 8)
    .option('--seed <s>', 'generator seed', integerOption(0, 2 ** 32 - 1), 42)
    .addOption(new Option('--backend <name>', 'where to search').choices(BACKEND_CHOICES).default('auto'))
    .option(
      '--dtype <type>',
      'storage: f32, f16 or bf16 (default: f16 on CUDA, where the tensor cores take it; f32 on CPU)',
      parseDtype,
    )
    .option('--threads <n>', 'CPU worker threads (0 = all cores)', integerOption(0, MAX_THREADS))
    .option('--json', 'print JSON')
    .action(async (opts: DemoOptions) => {
      if (opts.docs < opts.queries * PLANTED_PER_QUERY) {
        throw new InvalidArgumentError(
          '--docs',
          `at least ${opts.queries * PLANTED_PER_QUERY} documents (${PLANTED_PER_QUERY} distinct planted ones per query)`,
          String(opts.docs),
        );
      }
      const backend = resolveBackend(opts.backend);
      const dtype = opts.dtype ?? (backend === 'cuda' ? 'float16' : 'float32');
      const generationStart = process.hrtime.bigint();
      const { docs, queries, relevant } = demoCorpus({
        docs: opts.docs,
        queries: opts.queries,
        seed: opts.seed,
        dtype,
        relevantPerQuery: PLANTED_PER_QUERY,
      });
      const generationSeconds = secondsSince(generationStart);

      const searchStart = process.hrtime.bigint();
      const hits = await topK(queries, docs, RECALL_DEPTH, { backend, threads: opts.threads });
      const searchSeconds = secondsSince(searchStart);

      const tokens = totalTokens(docs);
      const flops = 2 * queries.count * queries.maxLength * tokens * docs.dim;
      const pairsPerSecond = (queries.count * docs.count) / searchSeconds;
      const gflops = flops / searchSeconds / 1e9;
      const found = hits.map((row, q) => row.filter((h) => relevant[q].includes(h.index)).length);
      const foundTotal = found.reduce((a, b) => a + b, 0);
      const plantedTotal = queries.count * PLANTED_PER_QUERY;
      const recall = foundTotal / plantedTotal;
      const engine = backend === 'cpu' ? describeCpu(opts.threads) : 'cuda';

      if (opts.json) {
        const withPlanted = (row: Hit[], q: number) =>
          row.map((h) => ({ index: h.index, score: h.score, planted: relevant[q].includes(h.index) }));
        console.log(
          JSON.stringify({
            corpus: {
              docs: docs.count,
              tokens,
              queries: queries.count,
              queryLength: queries.maxLength,
              dim: docs.dim,
              dtype: docs.dtype,
              seed: opts.seed,
            },
            backend,
            engine,
            generationSeconds,
            searchSeconds,
            docsPerSecond: pairsPerSecond,
            gflops,
            recallAt10: recall,
            queries: hits.map((row, q) => ({
              query: q,
              relevant: relevant[q],
              recallAt10: found[q] / PLANTED_PER_QUERY,
              hits: withPlanted(row, q),
            })),
          }),
        );
        return;
      }

      const shortest = docs.lengths.reduce((a, b) => Math.min(a, b));
      console.log(
        `corpus: ${grouped(docs.count)} documents (${grouped(tokens)} tokens, ${shortest}-${docs.maxLength} each), ` +
          `${queries.count} queries x ${queries.maxLength} tokens, d = ${docs.dim}, ${docs.dtype}, seed ${opts.seed}`,
      );
      console.log(`generated in ${fixed(generationSeconds, 2)} s`);
      console.log(
        `searched on ${engine} in ${fixed(searchSeconds, 3)} s: ${grouped(pairsPerSecond)} docs/s ` +
          `(query x document pairs), ${fixed(gflops, 1)} GFLOP/s`,
      );
      console.log('');
      const indexWidth = String(docs.count - 1).length;
      const showHit = (h: Hit, q: number) =>
        `${String(h.index).padStart(indexWidth)} ${fixed(h.score, 2).padStart(6)}${relevant[q].includes(h.index) ? '*' : ' '}`;
      printTable(
        ['query', 'recall@10', `top ${SHOWN_HITS} hits: document score (* = planted)`],
        hits.map((row, q) => [
          String(q),
          `${found[q]}/${relevant[q].length}`,
          row
            .slice(0, SHOWN_HITS)
            .map((h) => showHit(h, q))
            .join('  '),
        ]),
      );
      console.log('');
      console.log(`recall@10: ${fixed(recall, 3)} (${foundTotal} of ${plantedTotal} planted documents)`);
    });
}

function describeCpu(threads: number | undefined): string {
  const cpu = cpuInfo();
  return `cpu (${cpu.isa}, ${threads || cpu.threads} threads)`;
}
