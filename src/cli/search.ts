// `maxsim search`: the top-k documents of every query, as JSON lines.
import { Command, Option } from 'commander';
import type { BackendChoice } from '../backends/select.js';
import { topK, topKAll } from '../ops/maxsim.js';
import { quantize } from '../ops/quantize.js';
import { twoStageTopKAll } from '../ops/two-stage.js';
import type { Hit } from '../tensor.js';
import { addInputOptions, type InputOptions, integerOption, jsonScore, loadInputs } from './common.js';

interface SearchCommandOptions extends InputOptions {
  backend: BackendChoice;
  threads?: number;
  topK: number;
  prefilter?: 'int8';
}

export function searchCommand(): Command {
  return addInputOptions(
    new Command('search').description(
      'rank documents for each query; prints one JSON line per query: ' +
        '{"query": i, "results": [{"index": b, "score": s}, ...]}, best first (an empty document scores null)',
    ),
  )
    .option('--top-k <k>', 'results per query', integerOption(0), 10)
    .addOption(
      new Option(
        '--prefilter <dtype>',
        'scan with int8 first, rescore the 4k best exactly (same results)',
      ).choices(['int8']),
    )
    .action(async (opts: SearchCommandOptions) => {
      const { queries, docs } = loadInputs(opts);
      const options = { backend: opts.backend, threads: opts.threads };
      let results: Hit[][];
      if (opts.prefilter === 'int8') {
        results = await twoStageTopKAll(queries, docs, quantize(docs, 'int8'), opts.topK, options);
      } else {
        results =
          queries.kind === 'matrix'
            ? [await topK(queries, docs, opts.topK, options)]
            : await topKAll(queries, docs, opts.topK, options);
      }
      const lines = results.map((hits, query) =>
        JSON.stringify({ query, results: hits.map((h) => ({ index: h.index, score: jsonScore(h.score) })) }),
      );
      if (lines.length > 0) console.log(lines.join('\n'));
    });
}
