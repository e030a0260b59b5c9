// `maxsim quantize`: documents to an int8 file (I8 tokens + F32 per-token scales + I64 offsets in one
// .safetensors), readable by every command with --docs F:embeddings --doc-scales F:scales
// --doc-offsets F:offsets, and the round-trip error of the quantization. With --scales document every
// token of a document stores the document's scale (the same file format). With --center the documents
// are quantized less their token mean, written as `mean` (F32 [d]; read back with --doc-mean F:mean),
// which scoring adds back (docs/eight-bit.md).
import { Command, Option } from 'commander';
import { batchToArrays } from '../io/load.js';
import type { NpyArray } from '../io/npy.js';
import { writeSafetensors } from '../io/safetensors.js';
import { quantize, roundTripError, type ScaleGranularity } from '../ops/quantize.js';
import { fixed, loadDocs } from './common.js';
import { refuseInsideCorpus } from './out-path.js';

interface QuantizeOptions {
  docs: string;
  docOffsets?: string;
  docLengths?: string;
  out: string;
  scales: ScaleGranularity;
  center?: boolean;
  checkFinite: boolean;
  json?: boolean;
}

export function quantizeCommand(): Command {
  return new Command('quantize')
    .description(
      'write documents as int8 (per-token symmetric, one float32 scale per token) to a .safetensors file ' +
        'holding embeddings (I8 [T, d]), scales (F32 [T]) and offsets (I64 [B+1])',
    )
    .requiredOption(
      '--docs <spec>',
      'float documents: dense [B, L, d] or packed [T, d] (with --doc-offsets or --doc-lengths)',
    )
    .option('--doc-offsets <spec>', 'packed documents: token offsets [B+1] (int32/int64)')
    .option('--doc-lengths <spec>', 'token counts [B]: of packed documents, or real lengths of dense ones')
    .requiredOption('--out <file.safetensors>', 'the int8 file to write')
    .addOption(
      new Option(
        '--scales <who>',
        "who shares a scale: each token its own, or all the tokens of a document (the GPU's faster document-scale kernels; slightly lower fidelity)",
      )
        .choices(['token', 'document'])
        .default('token'),
    )
    .option(
      '--center',
      "subtract the token mean first (written as mean, F32 [d]): better rankings where tokens share a common direction, as ColBERT models' do (docs/eight-bit.md)",
    )
    .option('--no-check-finite', 'skip the scan for NaN / Infinity (trusted input)')
    .option('--json', 'print the summary as JSON')
    .action((opts: QuantizeOptions) => {
      // before any work: a file written there could replace a segment or the MANIFEST
      refuseInsideCorpus(opts.out, '--out');
      const docs = loadDocs(opts);
      const q = quantize(docs, 'int8', { scales: opts.scales, center: opts.center === true });
      const arrays = batchToArrays(q);
      const tensors: Record<string, NpyArray> = {
        embeddings: arrays.embeddings,
        scales: arrays.scales!,
        offsets: arrays.offsets,
      };
      if (q.mean) tensors.mean = { dtype: 'float32', shape: [q.dim], data: q.mean };
      writeSafetensors(opts.out, tensors, {
        format: 'maxsim-int8',
        quantization:
          (opts.scales === 'document'
            ? "symmetric int8 with one scale per document (max|x| / 127 over the document's tokens), stored per token"
            : 'per-token symmetric int8, scale = max|x| / 127') +
          (q.mean ? ' of x - mean (value = int8 x scale + mean)' : ''),
      });
      const err = roundTripError(docs, q);
      const summary = {
        out: opts.out,
        documents: docs.count,
        scales: opts.scales,
        centered: q.mean !== undefined,
        tokens: arrays.scales!.shape[0],
        dim: docs.dim,
        ...err,
      };
      if (opts.json) console.log(JSON.stringify(summary));
      else
        console.log(
          `wrote ${summary.documents} documents (${summary.tokens} tokens, d = ${summary.dim}) as int8 to ${opts.out}; ` +
            `round-trip error: ${Object.entries(err)
              .map(([k, v]) => `${k} ${fixed(v as number, 6)}`)
              .join(', ')}`,
        );
    });
}
