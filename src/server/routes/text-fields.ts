// Text fields beside embedding fields: which one a request sent (a field is texts or embeddings, never
// a mix: 400 naming it), and texts turned into the packed embeddings the routes score.

import type { EncodeKind } from '../../encode/queue.js';
import { InvalidArgumentError } from '../../errors.js';
import { type EncodedTokens, type PackedTokens, toFloat32 } from '../codecs.js';
import type { RouteContext } from '../context.js';

/**
 * Whether `value` is a list of texts: a non-empty array of strings. An array holding strings and
 * anything else is a 400 naming `field`; one without strings (or not an array) is embeddings.
 */
export function isTextList(value: unknown, field: string): boolean {
  if (!Array.isArray(value) || value.length === 0) return false;
  const strings = value.reduce((n: number, x) => n + (typeof x === 'string' ? 1 : 0), 0);
  if (strings === 0) return false;
  if (strings !== value.length) {
    const at = value.findIndex((x) => typeof x !== 'string');
    throw new InvalidArgumentError(
      field,
      'texts (all strings) or embeddings (none), not a mix',
      `${strings} strings and ${value.length - strings} other items (the first at ${field}[${at}])`,
    );
  }
  return true;
}

/** Texts of a field encoded as packed float32 rows (admitted, tokenized, through the queue). */
export async function encodeField(
  ctx: RouteContext,
  kind: EncodeKind,
  texts: readonly string[],
  field: string,
  signal: AbortSignal,
): Promise<PackedTokens> {
  const e: EncodedTokens = await ctx.text.encodeTexts(kind, texts, field, signal);
  return toFloat32(e);
}
