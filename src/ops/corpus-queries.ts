// The queries of a corpus search: a TokenMatrix or TokenBatch as a batch, in the form the corpus
// dtype scores (int8 corpora: int8 queries), and a private packed copy read once.
import { InvalidArgumentError } from '../errors.js';
import type { CorpusDType } from '../io/corpus/index.js';
import { isTokenBatch, isTokenMatrix, matrixAsBatch, type TokenBatch, type TokenMatrix } from '../tensor.js';
import { quantize } from './quantize.js';

export function asQueries(queries: TokenMatrix | TokenBatch): TokenBatch {
  if (isTokenMatrix(queries)) return matrixAsBatch(queries);
  if (isTokenBatch(queries)) return queries;
  throw new InvalidArgumentError('queries', 'a TokenMatrix or TokenBatch', typeof queries);
}

/** Queries in the form the corpus dtype needs: int8 corpora score int8 queries (quantized here). */
export function queriesFor(dtype: CorpusDType, q: TokenBatch): TokenBatch {
  if (dtype === 'int8') return q.dtype === 'int8' ? q : quantize(q, 'int8');
  if (q.dtype === 'int8')
    throw new InvalidArgumentError('queries.dtype', `float queries (the corpus stores ${dtype})`, "'int8'");
  return q;
}

/**
 * A private packed copy of the queries (tokens, spans, scales): a search scores them block after
 * block with awaits in between, so the caller's arrays, which may change meanwhile, are read once,
 * here. Queries are small next to a corpus; the copy costs little.
 */
export function snapshotQueries(q: TokenBatch): TokenBatch {
  const { dim, count } = q;
  const starts = new Float64Array(count);
  const lengths = new Int32Array(count);
  let tokens = 0;
  let maxLength = 0;
  const available = Math.floor(q.data.length / dim);
  for (let i = 0; i < count; i++) {
    const s = q.starts[i];
    const l = q.lengths[i];
    if (!(Number.isSafeInteger(s) && s >= 0 && Number.isInteger(l) && l >= 0 && s + l <= available))
      throw new InvalidArgumentError(
        `queries item ${i}`,
        `a span inside its buffer of ${available} tokens`,
        `start ${s}, length ${l}`,
      );
    starts[i] = tokens;
    lengths[i] = l;
    tokens += l;
    if (l > maxLength) maxLength = l;
  }
  const data = new (q.data.constructor as new (n: number) => typeof q.data)(tokens * dim);
  const scales = q.scales ? new Float32Array(tokens) : undefined;
  for (let i = 0; i < count; i++) {
    const s = q.starts[i];
    const l = lengths[i];
    data.set(q.data.subarray(s * dim, (s + l) * dim) as never, starts[i] * dim);
    scales?.set(q.scales!.subarray(s, s + l), starts[i]);
  }
  return { ...q, layout: 'ragged', data, starts, lengths, maxLength, ...(scales ? { scales } : {}) };
}
