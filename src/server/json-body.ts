// JSON request bodies. A search body is mostly one base64 string (32 x 128 float16 queries: 11 KB), and
// JSON.parse plus the safety scans below cost ~15 us of the JS thread per request, ~12% of it in a
// GPU server's profile (bench/results/h200.md). So the long values of `b64` / `embeddings_b64` keys
// are lifted out of the bytes before parsing (a walk over the quotes: memchr, not a scan per
// character) and put back as strings after it; only the short rest goes through JSON.parse.
//
// Equivalence: strings are found by the JSON lexer's own rule (a quote opens a string outside one and
// closes it inside one unless escaped), and a lifted string holds no backslash and only ASCII (its
// latin1 and UTF-8 decodings agree), so replacing it by another string token leaves the body's
// validity and every other value unchanged. The one difference: a raw control character inside a
// lifted value, which JSON.parse refuses, reaches the base64 decoder, which refuses it too (readB64:
// canonical base64 only), naming the field. Anything unexpected (a body too short to bother, a danger
// word or \u escape outside the lifted values, a parse error) takes the full path, whose answers (and
// errors) are the usual ones. The walk is one pass over the body, at most MAX_STRINGS strings.

import { isAscii } from 'node:buffer';

/** Strings this long (bytes) are worth lifting out. */
const LONG = 1024;
/**
 * Strings walked at most: past it the body is no tensor body (it has its own cost in JSON.parse, and
 * the walk must not add a second one).
 */
const MAX_STRINGS = 4096;
/** Keys whose long values are lifted: base64 tensors, always decoded by readB64. */
const LIFTED_KEYS = new Set(['b64', 'embeddings_b64']);
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * Whether JSON text may hold a prototype-poisoning key: the words, or a \u escape that could spell
 * them (only such bodies need Fastify's guarded parser).
 */
export function mayPoison(text: string): boolean {
  return text.includes('__proto__') || text.includes('constructor') || text.includes('\\u');
}

/** Whether the quote at `at` is escaped (an odd run of backslashes before it). */
function escaped(buf: Buffer, at: number): boolean {
  let n = 0;
  for (let i = at - 1; i >= 0 && buf[i] === BACKSLASH; i--) n++;
  return (n & 1) === 1;
}

/** Whether bytes [from, to) hold only JSON whitespace and one ':'. */
function colonBetween(buf: Buffer, from: number, to: number): boolean {
  let colons = 0;
  for (let i = from; i < to; i++) {
    const c = buf[i];
    if (c === 0x3a) colons++;
    else if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return false;
  }
  return colons === 1;
}

/**
 * The body with the long values of LIFTED_KEYS replaced by placeholders ("\u0000" and their number:
 * no string of a body without \u escapes can hold a NUL), and those values; undefined when the body
 * does not qualify (the caller parses it whole).
 */
export function liftLongStrings(buf: Buffer): { text: string; values: string[] } | undefined {
  if (buf.length < 2 * LONG) return undefined;
  const parts: string[] = [];
  const values: string[] = [];
  let copied = 0; // bytes before this went into parts or values
  let pos = 0;
  let keyOpen = -1; // the last string's span, a key candidate
  let keyClose = -1;
  let slash = -2; // the next backslash at or after it (-1: none left; -2: not looked for yet)
  for (let walked = 0; ; walked++) {
    const open = buf.indexOf(QUOTE, pos);
    if (open < 0) break;
    if (walked >= MAX_STRINGS) return undefined;
    let close = buf.indexOf(QUOTE, open + 1);
    while (close > 0 && escaped(buf, close)) close = buf.indexOf(QUOTE, close + 1);
    if (close < 0) return undefined; // unterminated: the full parser says so
    if (
      close - open - 1 >= LONG &&
      keyOpen >= 0 &&
      LIFTED_KEYS.has(buf.toString('latin1', keyOpen + 1, keyClose)) &&
      colonBetween(buf, keyClose + 1, open)
    ) {
      // the first backslash from here on, found again only once passed (one scan of the body in all)
      if (slash !== -1 && slash <= open) slash = buf.indexOf(BACKSLASH, open + 1);
      if (slash >= 0 && slash < close) return undefined;
      // bytes past ASCII would decode as UTF-8 there, as latin1 here
      if (!isAscii(buf.subarray(open + 1, close))) return undefined;
      parts.push(buf.toString('utf8', copied, open + 1));
      values.push(buf.toString('latin1', open + 1, close));
      copied = close;
    }
    keyOpen = open;
    keyClose = close;
    pos = close + 1;
  }
  if (values.length === 0) return undefined;
  parts.push(buf.toString('utf8', copied));
  // the danger words of a prototype-poisoning key, or an escape that could spell one, outside the
  // lifted values (inside them a key cannot start)
  for (const p of parts) if (mayPoison(p)) return undefined;
  let text = parts[0];
  for (let i = 0; i < values.length; i++) text += `\\u0000${i}${parts[i + 1]}`;
  return { text, values };
}

/**
 * Puts the lifted values back in place of their placeholders in the parsed body (in place); false
 * when the count does not match (the caller parses the body whole).
 */
export function restoreLongStrings(root: unknown, values: string[]): boolean {
  let restored = 0;
  let bad = false;
  const stack: unknown[] = [root];
  // a placeholder's value, or undefined for any other value (objects go on the stack)
  const visit = (v: unknown): string | undefined => {
    if (typeof v === 'string') {
      if (v.length < 2 || v.charCodeAt(0) !== 0) return undefined;
      const i = Number(v.slice(1));
      if (!(Number.isInteger(i) && i >= 0 && i < values.length)) bad = true;
      else restored++;
      return values[i] ?? '';
    }
    if (typeof v === 'object' && v !== null) stack.push(v);
    return undefined;
  };
  while (stack.length > 0 && !bad) {
    const node = stack.pop();
    if (Array.isArray(node)) {
      for (let j = 0; j < node.length; j++) {
        const s = visit(node[j]);
        if (s !== undefined) node[j] = s;
      }
    } else if (typeof node === 'object' && node !== null) {
      const container = node as Record<string, unknown>;
      for (const key of Object.keys(container)) {
        const s = visit(container[key]);
        if (s !== undefined) container[key] = s;
      }
    }
  }
  return !bad && restored === values.length;
}

/**
 * The body parsed, or undefined where the fast path does not apply or fails (the caller then parses
 * the whole text its usual way, so errors are the usual ones).
 */
export function parseLifted(buf: Buffer): { value: unknown } | undefined {
  const lifted = liftLongStrings(buf);
  if (!lifted) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(lifted.text);
  } catch {
    return undefined;
  }
  return restoreLongStrings(value, lifted.values) ? { value } : undefined;
}

/**
 * Where a parsed body holds a key that could poison prototypes (`__proto__`, or `constructor` with a
 * `prototype` inside: the keys Fastify's guarded parser refuses), as a field path ('queries[0].__proto__'),
 * or undefined. (JSON.parse makes such keys own properties: walking them is safe.)
 */
export function poisonedKey(root: unknown): string | undefined {
  const stack: { value: unknown; path: string }[] = [{ value: root, path: '' }];
  while (stack.length > 0) {
    const { value, path } = stack.pop()!;
    if (typeof value !== 'object' || value === null) continue;
    if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--) stack.push({ value: value[i], path: `${path}[${i}]` });
      continue;
    }
    const keys = Object.keys(value);
    for (const key of keys) {
      const v = (value as Record<string, unknown>)[key];
      const at = path === '' ? key : `${path}.${key}`;
      if (key === '__proto__') return at;
      if (key === 'constructor' && typeof v === 'object' && v !== null && Object.hasOwn(v, 'prototype'))
        return `${at}.prototype`;
    }
    for (let k = keys.length - 1; k >= 0; k--)
      stack.push({
        value: (value as Record<string, unknown>)[keys[k]],
        path: path === '' ? keys[k] : `${path}.${keys[k]}`,
      });
  }
  return undefined;
}
