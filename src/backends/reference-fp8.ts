// The float64 reference of fp8 (e4m3) scoring, on the host (the element type itself is GPU-only).
// Moved out of cuda.ts unchanged.
import { InvalidArgumentError } from '../errors.js';

/** An fp8 corpus copied back to the host: e4m3 codes [tokens, dim], one float32 scale per token. */
export interface Fp8Tokens {
  kind: 'fp8';
  dim: number;
  count: number;
  data: Uint8Array;
  scales: Float32Array;
  /** First token of each item (items are packed in order). */
  starts: Float64Array;
  lengths: Int32Array;
}

/** The value of an e4m3 code (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; 0x7f / 0xff NaN). */
export function e4m3ToFloat(code: number): number {
  const sign = code & 0x80 ? -1 : 1;
  const e = (code >> 3) & 0xf;
  const m = code & 7;
  if (e === 15 && m === 7) return Number.NaN;
  return sign * (e === 0 ? m * 2 ** -9 : (1 + m / 8) * 2 ** (e - 7));
}

/** Float64 MaxSim of fp8 queries x fp8 documents on the dequantized values (code value x scale). */
export function referenceMaxsimFp8(queries: Fp8Tokens, docs: Fp8Tokens): Float64Array {
  if (queries.dim !== docs.dim)
    throw new InvalidArgumentError('queries.dim', `${docs.dim} (the dimension of docs)`, String(queries.dim));
  const d = docs.dim;
  const lut = Float64Array.from({ length: 256 }, (_, c) => e4m3ToFloat(c));
  const decode = (t: Fp8Tokens) => {
    const out = new Float64Array(t.data.length);
    for (let i = 0; i < out.length; i++) out[i] = lut[t.data[i]] * t.scales[Math.floor(i / d)];
    return out;
  };
  const qv = decode(queries);
  const dv = decode(docs);
  const out = new Float64Array(queries.count * docs.count);
  for (let q = 0; q < queries.count; q++) {
    for (let b = 0; b < docs.count; b++) {
      if (docs.lengths[b] === 0) {
        out[q * docs.count + b] = Number.NEGATIVE_INFINITY;
        continue;
      }
      let total = 0;
      for (let i = 0; i < queries.lengths[q]; i++) {
        const qo = (queries.starts[q] + i) * d;
        let best = Number.NEGATIVE_INFINITY;
        for (let j = 0; j < docs.lengths[b]; j++) {
          const dof = (docs.starts[b] + j) * d;
          let dot = 0;
          for (let k = 0; k < d; k++) dot += qv[qo + k] * dv[dof + k];
          if (dot > best) best = dot;
        }
        total += best;
      }
      out[q * docs.count + b] = total;
    }
  }
  return out;
}
