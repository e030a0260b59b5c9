// Host arrays on the CUDA engine: upload the documents, score, release. Callers that score the same
// documents repeatedly should keep them on the GPU with cuda().upload() instead.
import type { TokenBatch } from '../tensor.js';
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
