// `maxsim encode`: texts to token embeddings with a local ColBERT model (maxsim/encode). Queries go
// to a dense [N, query_length, d] array (the --queries input of score / search); documents to packed
// tokens [T, d] plus offsets [B+1] (the --docs / --doc-offsets inputs): in a .safetensors file as
// `embeddings` and `offsets`, or as OUT.npy beside OUT.offsets.npy.

import { Command, Option } from 'commander';
import { loadColbert } from '../encode/colbert.js';
import { readTexts } from '../encode/texts.js';
import { InvalidArgumentError } from '../errors.js';
import type { NpyArray } from '../io/array.js';
import { batchToArrays } from '../io/load.js';
import { writeNpy } from '../io/npy.js';
import { writeSafetensors } from '../io/safetensors.js';
import type { TokenBatch } from '../tensor.js';
import { integerOption, interruptSignal } from './common.js';
import { refuseInsideCorpus } from './out-path.js';
import { Progress } from './progress.js';

interface EncodeCliOptions {
  model: string;
  queries?: string;
  documents?: string;
  out: string;
  textField: string;
  dtype: 'float32' | 'float16';
  batchSize: number;
  threads?: number;
  truncate: boolean;
  allowRemote?: boolean;
  json?: boolean;
}

/** [N, L, d] with zero rows past each query's end (every query has L tokens with query expansion). */
function denseQueries(batch: TokenBatch): { array: NpyArray; lengths: Int32Array } {
  const { count, dim, maxLength } = batch;
  const Ctor = batch.data.constructor as new (n: number) => Float32Array | Uint16Array;
  const data = new Ctor(count * maxLength * dim);
  for (let b = 0; b < count; b++) {
    const s = batch.starts[b] * dim;
    data.set(batch.data.subarray(s, s + batch.lengths[b] * dim) as Float32Array, b * maxLength * dim);
  }
  return { array: { dtype: batch.dtype, shape: [count, maxLength, dim], data }, lengths: batch.lengths };
}

function sidecar(out: string, what: string): string {
  return `${out.replace(/\.npy$/i, '')}.${what}.npy`;
}

export function encodeCommand(): Command {
  return new Command('encode')
    .description(
      'encode texts with a local ColBERT model (ONNX encoder + tokenizer.json + PyLate config and projection) ' +
        "with ColBERT's rules as PyLate applies them; needs the optional packages onnxruntime-node and @huggingface/tokenizers",
    )
    .requiredOption(
      '--model <dir>',
      'the model directory (model.onnx or onnx/model.onnx, tokenizer.json, 1_Dense/)',
    )
    .option('--queries <file>', 'query texts: .txt (one a line) or .jsonl; written as [N, query_length, d]')
    .option('--documents <file>', 'document texts: .txt or .jsonl; written as packed [T, d] + offsets [B+1]')
    .requiredOption('--out <file>', 'OUT.npy (documents: and OUT.offsets.npy) or OUT.safetensors (one file)')
    .option('--text-field <name>', 'the text field of .jsonl records', 'text')
    .addOption(
      new Option('--dtype <type>', 'stored embedding dtype')
        .choices(['float32', 'float16'])
        .default('float32'),
    )
    .option('--batch-size <n>', 'texts per encoder run', integerOption(1, 65536), 32)
    .option(
      '--threads <n>',
      "onnxruntime's intra-op threads (default: its own choice)",
      integerOption(1, 1024),
    )
    .option(
      '--no-truncate',
      'a text longer than the query / document length is an error instead of truncated',
    )
    .option('--allow-remote', 'let --model be a Hugging Face id downloaded over the network')
    .option('--json', 'print the summary as JSON')
    .action(async (opts: EncodeCliOptions) => {
      if ((opts.queries === undefined) === (opts.documents === undefined))
        throw new InvalidArgumentError(
          '--queries / --documents',
          'exactly one of them',
          opts.queries ? 'both' : 'neither',
        );
      // before loading the model: a file written there could replace a segment or the MANIFEST
      refuseInsideCorpus(opts.out, '--out');
      const isQuery = opts.queries !== undefined;
      const file = (opts.queries ?? opts.documents)!;
      const { texts } = readTexts(file, isQuery ? '--queries' : '--documents', opts.textField);
      const started = performance.now();
      const encoder = await loadColbert(opts.model, {
        dtype: opts.dtype,
        batchSize: opts.batchSize,
        threads: opts.threads,
        allowRemote: opts.allowRemote,
      });
      const progress = new Progress(isQuery ? 'encoding queries' : 'encoding documents', texts.length);
      const interrupt = interruptSignal();
      const loaded = performance.now();
      let batch: TokenBatch;
      try {
        const options = {
          signal: interrupt.signal,
          truncate: opts.truncate,
          onProgress: (done: number) => progress.update(done),
        };
        batch = isQuery
          ? await encoder.encodeQueries(texts, options)
          : await encoder.encodeDocuments(texts, options);
        progress.finish();
      } catch (error) {
        progress.abandon();
        throw error;
      } finally {
        interrupt.dispose();
        await encoder.close();
      }
      const seconds = (performance.now() - loaded) / 1000;
      const written = write(opts.out, batch, isQuery);
      const tokens = batch.lengths.reduce((a, b) => a + b, 0);
      const summary = {
        out: written,
        kind: isQuery ? 'queries' : 'documents',
        texts: batch.count,
        tokens,
        dim: batch.dim,
        dtype: batch.dtype,
        loadSeconds: (loaded - started) / 1000,
        encodeSeconds: seconds,
        textsPerSecond: batch.count / seconds,
      };
      if (opts.json) console.log(JSON.stringify(summary));
      else
        console.log(
          `encoded ${summary.texts} ${summary.kind} (${tokens} tokens, d = ${batch.dim}, ${batch.dtype}) in ` +
            `${seconds.toFixed(2)} s (${summary.textsPerSecond.toFixed(1)} texts/s) to ${written.join(', ')}`,
        );
    });
}

function write(out: string, batch: TokenBatch, isQuery: boolean): string[] {
  const safetensors = /\.safetensors$/i.test(out);
  if (isQuery) {
    const { array, lengths } = denseQueries(batch);
    const uniform = lengths.every((l) => l === batch.maxLength);
    const lengthsArray: NpyArray = { dtype: 'int32', shape: [lengths.length], data: lengths };
    if (safetensors) {
      writeSafetensors(out, uniform ? { embeddings: array } : { embeddings: array, lengths: lengthsArray });
      return [out];
    }
    writeNpy(out, array);
    if (uniform) return [out];
    writeNpy(sidecar(out, 'lengths'), lengthsArray);
    return [out, sidecar(out, 'lengths')];
  }
  const arrays = batchToArrays(batch);
  if (safetensors) {
    writeSafetensors(out, { embeddings: arrays.embeddings, offsets: arrays.offsets });
    return [out];
  }
  writeNpy(out, arrays.embeddings);
  writeNpy(sidecar(out, 'offsets'), arrays.offsets);
  return [out, sidecar(out, 'offsets')];
}
