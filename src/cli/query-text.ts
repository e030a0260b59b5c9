// `maxsim search --corpus c.msx --query-text "..." [--model DIR]`: queries given as text, encoded with
// the model the corpus was built with (its encoder.json) or the one named. Hooked into search.ts.

import * as fs from 'node:fs';
import type { Command } from 'commander';
import { loadColbert } from '../encode/colbert.js';
import { corpusEncoder } from '../encode/corpus-texts.js';
import { InvalidArgumentError } from '../errors.js';
import type { TokenBatch } from '../tensor.js';

export interface QueryTextOptions {
  queryText?: string[];
  model?: string;
  queries?: string;
  corpus?: string;
}

/** Adds --query-text / --model and lets --queries be left out when --query-text is given. */
export function queryTextOptions(command: Command): Command {
  const queries = command.options.find((o) => o.long === '--queries');
  if (queries) queries.mandatory = false;
  return command
    .option(
      '--query-text <text>',
      'with --corpus: a query as text (repeatable), encoded with --model or the model the corpus was built with',
      (v: string, prev: string[] | undefined) => [...(prev ?? []), v],
    )
    .option(
      '--model <dir>',
      'with --query-text: the ColBERT model directory (default: the one recorded in the corpus)',
    );
}

/** The encoded --query-text queries, or undefined when --queries is used. */
export async function queryTextBatch(opts: QueryTextOptions): Promise<TokenBatch | undefined> {
  if (opts.queryText === undefined) {
    if (opts.queries === undefined)
      throw new InvalidArgumentError(
        '--queries',
        'a queries file (or --query-text with --corpus)',
        'nothing',
      );
    return undefined;
  }
  if (opts.queries !== undefined)
    throw new InvalidArgumentError('--queries / --query-text', 'one of them', 'both');
  if (opts.corpus === undefined)
    throw new InvalidArgumentError('--query-text', 'used with --corpus', 'documents given with --docs');
  let model = opts.model;
  if (model === undefined) {
    const recorded = corpusEncoder(opts.corpus);
    if (!recorded)
      throw new InvalidArgumentError(
        '--model',
        'a model directory (the corpus records none: it was built from embeddings)',
        'nothing',
      );
    if (!fs.existsSync(recorded.model))
      throw new InvalidArgumentError(
        '--model',
        `a model directory (the corpus's ${recorded.model} is gone)`,
        'nothing',
      );
    model = recorded.model;
  }
  const encoder = await loadColbert(model);
  try {
    return await encoder.encodeQueries(opts.queryText);
  } finally {
    await encoder.close();
  }
}
