// Host arrays on the CUDA engine: upload the documents, score, release. Callers that score the same
// documents repeatedly should keep them on the GPU with cuda().upload() instead.
import type { ScaleGranularity } from '../ops/quantize.js';
import type { ScoreMatrix, TokenBatch } from '../tensor.js';
import { cuda } from './cuda.js';

export async function cudaScoreHost(
  queries: TokenBatch,
  docs: TokenBatch,
  options: { device?: number; variant?: string },
): Promise<Float32Array> {
  const gpu = await cuda({ device: options.device });
  const corpus = await gpu.upload(docs);
  try {
    const m = await corpus.score(queries, { variant: options.variant });
    return m.data;
  } finally {
    corpus.dispose();
  }
}

/**
 * Every query against every document in fp8 e4m3: the documents are uploaded, quantized to e4m3 on
 * the GPU (one float32 scale per token, or per document with scales: 'document'; less their mean
 * with center), and scored with float queries (quantized per token by the kernel call).
 */
export async function cudaScoreFp8Host(
  queries: TokenBatch,
  docs: TokenBatch,
  options: { device?: number; scales?: ScaleGranularity; center?: boolean } = {},
): Promise<ScoreMatrix> {
  const gpu = await cuda({ device: options.device });
  const f = await gpu.upload(docs);
  try {
    const e4m3 = await f.quantize('fp8', { scales: options.scales, center: options.center ?? false });
    try {
      return await e4m3.score(queries);
    } finally {
      e4m3.dispose();
    }
  } finally {
    f.dispose();
  }
}
