// Documents of a corpus that keeps only its index (`corpus index --drop-tokens`), read as float32:
// decoded from the residuals where their segment keeps no tokens, else (segments appended since the
// last `corpus index`) their stored tokens converted.
import { InvalidArgumentError } from '../../errors.js';
import { decodeToFloat32 } from '../../floats.js';
import { dequantize } from '../../ops/quantize.js';
import { decodeDocuments } from '../../plaid/merge.js';
import type { FloatDType, TokenBatch } from '../../tensor.js';
import type { CorpusFile } from './reader.js';

// A corpus that keeps only its index: each document decoded from its segment's index, or (segments
// appended since the last `corpus index`) its stored tokens as float32.
export function readDecoded(file: CorpusFile, indices: ArrayLike<number>): TokenBatch {
  const parts: TokenBatch[] = [];
  for (let i = 0; i < indices.length; i++) {
    const x = indices[i];
    if (!Number.isInteger(x) || x < 0 || x >= file.info.documents)
      throw new InvalidArgumentError(
        `indices[${i}]`,
        `a document index in [0, ${file.info.documents})`,
        String(x),
      );
    const si = file.segmentOf(x);
    const s = file.segments[si];
    if (s.header.tokensDropped) parts.push(decodeDocuments(file.index!.segment(si)!, [x - s.firstDocument]));
    else {
      const doc = file.readStored([x]);
      parts.push(doc.dtype === 'int8' ? dequantize(doc) : toFloat32Batch(doc));
    }
  }
  return concatBatches(parts, file.info.dim);
}

function toFloat32Batch(b: TokenBatch): TokenBatch {
  if (b.dtype === 'float32') return b;
  return {
    ...b,
    dtype: 'float32',
    data: decodeToFloat32(b.data as Uint16Array, b.dtype as FloatDType, b.dim),
  };
}

function concatBatches(parts: TokenBatch[], dim: number): TokenBatch {
  const lengths = new Int32Array(parts.length);
  const starts = new Float64Array(parts.length);
  let total = 0;
  let maxLength = 0;
  parts.forEach((p, i) => {
    starts[i] = total;
    lengths[i] = p.lengths[0];
    total += lengths[i];
    maxLength = Math.max(maxLength, lengths[i]);
  });
  const data = new Float32Array(total * dim);
  parts.forEach((p, i) => {
    data.set(
      (p.data as Float32Array).subarray(p.starts[0] * dim, (p.starts[0] + lengths[i]) * dim),
      starts[i] * dim,
    );
  });
  return {
    kind: 'batch',
    layout: 'ragged',
    dtype: 'float32',
    data,
    dim,
    count: parts.length,
    maxLength,
    starts,
    lengths,
  };
}
