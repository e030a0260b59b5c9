// What the routes share: the embeddings of inline documents decoded, items as kernel batches, scores
// made JSON (a score that overflowed float32 is an error, never a null), rankings, and the search
// answer written as one string.

import { InvalidArgumentError } from '../errors.js';
import type { CorpusHit } from '../ops/corpus-search.js';
import { topKOfRow } from '../ops/topk.js';
import { raggedBatch, type TokenBatch } from '../tensor.js';
import {
  concatPacked,
  decodeEmbeddings,
  type EncodedTokens,
  type ItemLimit,
  type PackedTokens,
} from './codecs.js';
import { ScoreOverflowError } from './http-errors.js';
import type { InlineDocument } from './schemas.js';

/**
 * A score as JSON: null for a document without tokens (-Infinity), an error for a score beyond
 * float32 (+-Infinity from finite inputs, or NaN). `empty` says whether the document is known to
 * have no tokens (undefined: not known, -Infinity is taken for an empty document).
 */
export function jsonScore(s: number, empty?: boolean): number | null {
  if (Number.isFinite(s)) return s;
  if (s === Number.NEGATIVE_INFINITY && empty !== false) return null;
  throw new ScoreOverflowError(
    `a score overflowed float32 (${s}): the embeddings' products are too large to sum; scale them down`,
  );
}

/** Whether a hit's document has no tokens (undefined: not known). */
export type EmptyOf = (index: number, id: string) => boolean | undefined;

/**
 * `{"results": [[{id, index, score}, ...], ...]}` as JSON.stringify writes it, built directly. A
 * document without tokens scores -Infinity: written `"score":null,"empty":true` (as /v1/score writes
 * null for one); a -Infinity that is not an empty document's is an overflow (422).
 */
export function searchJson(hits: readonly (readonly CorpusHit[])[], emptyOf: EmptyOf): string {
  let out = '{"results":[';
  for (let r = 0; r < hits.length; r++) {
    if (r > 0) out += ',';
    out += '[';
    const row = hits[r];
    for (let i = 0; i < row.length; i++) {
      const h = row[i];
      if (i > 0) out += ',';
      // ids are arbitrary strings: JSON.stringify escapes them; the closure only for a non-finite score
      const s = h.score;
      out += Number.isFinite(s)
        ? `{"id":${JSON.stringify(h.id)},"index":${h.index},"score":${s}}`
        : `{"id":${JSON.stringify(h.id)},"index":${h.index},${scoreFields('score', s, () => emptyOf(h.index, h.id))}}`;
    }
    out += ']';
  }
  return `${out}]}`;
}

/** `"name":score`, or `"name":null,"empty":true` for a document without tokens (JSON text). */
function scoreFields(name: string, s: number, empty: () => boolean | undefined): string {
  if (Number.isFinite(s)) return `"${name}":${s}`;
  jsonScore(s, empty()); // throws unless an empty document's
  return `"${name}":null,"empty":true`;
}

/** A scored item as an object: `{[name]: score}`, or `{[name]: null, empty: true}` (see searchJson). */
export function scoreObject(name: string, s: number, empty: boolean | undefined): Record<string, unknown> {
  if (Number.isFinite(s)) return { [name]: s };
  jsonScore(s, empty);
  return { [name]: null, empty: true };
}

/** Packed float32 items as a batch for the kernels (values were checked when decoded). */
export function asBatch(p: PackedTokens): TokenBatch {
  return raggedBatch(p.data, p.offsets, { dim: p.dim, checkFinite: false });
}

/** A pass's queries (float32, or float16 / bfloat16 bits) as a batch for the kernels. */
export function encodedBatch(p: EncodedTokens): TokenBatch {
  return raggedBatch(p.values, p.offsets, { dim: p.dim, dtype: p.dtype, checkFinite: false });
}

/** Inline documents ({embeddings} or {embeddings_b64, shape, dtype}) packed into one float32 set. */
export function decodeDocuments(
  docs: readonly InlineDocument[],
  field: string,
  dim: number | undefined,
  limit?: ItemLimit,
): PackedTokens {
  if (limit && docs.length > limit.items)
    throw new InvalidArgumentError(
      field,
      `at most ${limit.items} documents (${limit.why})`,
      `${docs.length}`,
    );
  const parts: PackedTokens[] = [];
  let d = dim;
  docs.forEach((doc, i) => {
    const f = `${field}[${i}]`;
    if ((doc.embeddings === undefined) === (doc.embeddings_b64 === undefined))
      throw new InvalidArgumentError(
        `${f}.embeddings`,
        'either embeddings or embeddings_b64 (with shape and dtype)',
        doc.embeddings === undefined ? 'neither' : 'both',
      );
    let p: PackedTokens;
    if (doc.embeddings !== undefined) {
      p = decodeEmbeddings(doc.embeddings, `${f}.embeddings`, 'one', d);
    } else {
      // the tensor's dtype and shape are the document's own fields, its b64 is embeddings_b64 (a
      // missing shape is refused by readB64 as received 'undefined')
      const value = { b64: doc.embeddings_b64!, dtype: doc.dtype, shape: doc.shape as number[] };
      try {
        p = decodeEmbeddings(value, f, 'one', d);
      } catch (e) {
        if (e instanceof InvalidArgumentError && e.argument === `${f}.b64`)
          throw new InvalidArgumentError(`${f}.embeddings_b64`, e.expected, e.received);
        throw e;
      }
    }
    d = p.dim;
    parts.push(p);
  });
  if (d === undefined) throw new InvalidArgumentError(field, 'at least one document with tokens', 'none');
  return concatPacked(parts, d);
}

/** Ranks scores best first (ties: the earlier position), the first n. */
export function ranked(scores: Float32Array, n: number): { index: number; score: number }[] {
  return topKOfRow(scores, Math.min(n, scores.length));
}

/** Tokens of a packed set. */
export function tokensOf(p: { offsets: readonly number[] }): number {
  return p.offsets[p.offsets.length - 1];
}

/** Whether item i of a packed set has no tokens. */
export function isEmptyItem(p: { offsets: readonly number[] }, i: number): boolean {
  return p.offsets[i + 1] === p.offsets[i];
}
