// `maxsim corpus build --texts docs.jsonl --model DIR`: documents encoded with a local ColBERT model
// and written as a new corpus, the model recorded beside it (encoder.json), so that
// `maxsim search --query-text` can find it. Hooked into corpus.ts's build command.

import type { Command } from 'commander';
import { buildCorpusFromTexts } from '../encode/corpus-texts.js';
import { readTexts } from '../encode/texts.js';
import { InvalidArgumentError } from '../errors.js';
import type { CorpusDType } from '../io/corpus/index.js';
import { openCorpus } from '../ops/corpus-search.js';
import { interruptSignal } from './common.js';
import { readIdList } from './corpus.js';
import { Progress } from './progress.js';

export interface TextBuildOptions {
  texts?: string;
  model?: string;
  textField: string;
  ids?: string;
  out: string;
  json?: boolean;
  batchSize?: number;
}

export function textOptions(command: Command): Command {
  return command
    .option(
      '--texts <file>',
      'document texts (.jsonl records with `text` and `id`, or .txt lines) instead of --docs',
    )
    .option('--model <dir>', 'with --texts: the ColBERT model directory that encodes them')
    .option('--text-field <name>', 'with --texts: the text field of .jsonl records', 'text');
}

/** The build action for --texts (the corpus dtype already parsed). */
export async function buildFromTexts(opts: TextBuildOptions, dtype: CorpusDType): Promise<void> {
  if (opts.model === undefined)
    throw new InvalidArgumentError('--model', 'a model directory (with --texts)', 'nothing');
  const records = readTexts(opts.texts!, '--texts', opts.textField);
  const ids = opts.ids !== undefined ? readIdList(opts.ids) : records.ids?.map(String);
  if (ids !== undefined && ids.length !== records.texts.length)
    throw new InvalidArgumentError('--ids', `${records.texts.length} ids (one per text)`, `${ids.length}`);
  const bar = new Progress('encode + build', records.texts.length);
  const interrupt = interruptSignal();
  try {
    const r = await buildCorpusFromTexts({
      out: opts.out,
      model: opts.model,
      texts: records.texts,
      ids,
      dtype,
      signal: interrupt.signal,
      onProgress: (done) => bar.update(done),
    });
    bar.finish();
    const corpus = openCorpus(opts.out);
    const info = corpus.info;
    corpus.close();
    const summary = { ...info, model: opts.model, encodeSeconds: r.seconds };
    if (opts.json) console.log(JSON.stringify(summary));
    else
      console.log(
        `built ${opts.out}: ${info.documents} documents, ${info.tokens} tokens, d = ${info.dim}, ${info.dtype}, ` +
          `encoded with ${opts.model} in ${r.seconds.toFixed(2)} s`,
      );
  } catch (e) {
    bar.abandon();
    throw e;
  } finally {
    interrupt.dispose();
  }
}
