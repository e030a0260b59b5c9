// Indexes that share a codec (one build's centroids and buckets) merged into one, or cut to some of
// their documents: the centroid ids and residual codes of the kept documents copied in order (codes
// re-packed into the 16-token block layout; whole blocks copied as bytes where source and destination
// line up), the bags and inverted lists rebuilt. No token is re-encoded, so the merged index decodes
// to exactly the vectors its parts decoded to. Also the decode of documents from an index (a corpus
// that keeps only its index reads documents this way).
import { InvalidArgumentError } from '../errors.js';
import type { TokenBatch } from '../tensor.js';
import { codeAt, decodeTokens } from './codec.js';
import type { NativeIndex } from './native.js';
import { buildLists, PlaidIndex } from './plaid.js';

function setCode(codes: Uint8Array, bits: number, d: number, t: number, k: number, code: number) {
  const bit = (t % 16) * bits;
  const at = Math.floor(t / 16) * d * 2 * bits + k * 2 * bits + (bit >> 3);
  codes[at] = (codes[at] & ~(((1 << bits) - 1) << (bit & 7))) | (code << (bit & 7));
}

/**
 * One index of the documents of `parts` in order (`keep[p]`: the ascending local documents of part p
 * to keep; undefined: all of them). Every part must have `codec`'s centroids and buckets.
 */
export function mergeIndexes(
  codec: PlaidIndex,
  parts: readonly PlaidIndex[],
  keep?: readonly (readonly number[] | undefined)[],
): PlaidIndex {
  const { k, d, bits } = codec.native;
  parts.forEach((p, i) => {
    if (p.native.centroids !== codec.native.centroids && !sameCodec(p, codec))
      throw new InvalidArgumentError(
        `parts[${i}]`,
        "an index encoded with the codec's centroids",
        'another codec',
      );
  });
  const docsOf = (p: number) => keep?.[p] ?? Array.from({ length: parts[p].count }, (_, i) => i);
  let docs = 0;
  let tokens = 0;
  parts.forEach((p, i) => {
    for (const b of docsOf(i)) {
      docs++;
      tokens += p.native.docOffsets[b + 1] - p.native.docOffsets[b];
    }
  });
  const padded = Math.ceil(tokens / 16) * 16;
  const cids = new Int32Array(padded);
  const blockBytes = d * 2 * bits;
  const codes = new Uint8Array((padded / 16) * blockBytes);
  const lengths = new Int32Array(docs);
  let t = 0;
  let b = 0;
  parts.forEach((p, i) => {
    const src = p.native;
    for (const doc of docsOf(i)) {
      let s = src.docOffsets[doc];
      const end = src.docOffsets[doc + 1];
      lengths[b++] = end - s;
      while (s < end) {
        if (s % 16 === 0 && t % 16 === 0 && end - s >= 16) {
          // a whole block lines up: its bytes as they are
          codes.set(
            src.codes.subarray((s / 16) * blockBytes, (s / 16 + 1) * blockBytes),
            (t / 16) * blockBytes,
          );
          cids.set(src.cids.subarray(s, s + 16), t);
          s += 16;
          t += 16;
          continue;
        }
        cids[t] = src.cids[s];
        for (let j = 0; j < d; j++) setCode(codes, bits, d, t, j, codeAt(src.codes, bits, d, s, j));
        s++;
        t++;
      }
    }
  });
  const native: NativeIndex = {
    k,
    d,
    docs,
    bits,
    centroids: codec.native.centroids,
    tables: codec.native.tables,
    cids,
    codes,
    ...buildLists(lengths, cids, k),
  };
  const stats = {
    ...codec.buildStats,
    tokens,
    bytesPerToken: tokens > 0 ? (codes.length + 4 * padded) / tokens : 0,
  };
  return new PlaidIndex(native, codec.buckets, undefined, stats);
}

// Same centroids and buckets, compared by value (indexes read from files hold their own copies).
function sameCodec(a: PlaidIndex, b: PlaidIndex): boolean {
  const eq = (x: Float32Array, y: Float32Array) =>
    x.length === y.length && x.every((v, i) => Object.is(v, y[i]));
  return (
    a.native.k === b.native.k &&
    a.native.d === b.native.d &&
    a.native.bits === b.native.bits &&
    eq(a.native.centroids, b.native.centroids) &&
    eq(a.buckets.weights, b.buckets.weights) &&
    eq(a.buckets.cutoffs, b.buckets.cutoffs)
  );
}

/** Documents `local` of an index, decoded (centroid + bucket weights) into a float32 batch. */
export function decodeDocuments(index: PlaidIndex, local: readonly number[]): TokenBatch {
  const n = index.native;
  const lengths = new Int32Array(local.length);
  const starts = new Float64Array(local.length);
  let total = 0;
  local.forEach((doc, i) => {
    starts[i] = total;
    lengths[i] = n.docOffsets[doc + 1] - n.docOffsets[doc];
    total += lengths[i];
  });
  const data = new Float32Array(total * n.d);
  let maxLength = 0;
  local.forEach((doc, i) => {
    data.set(
      decodeTokens(n.centroids, index.buckets, n.cids, n.codes, n.docOffsets[doc], n.docOffsets[doc + 1]),
      starts[i] * n.d,
    );
    maxLength = Math.max(maxLength, lengths[i]);
  });
  return {
    kind: 'batch',
    layout: 'ragged',
    dtype: 'float32',
    data,
    dim: n.d,
    count: local.length,
    maxLength,
    starts,
    lengths,
  };
}
