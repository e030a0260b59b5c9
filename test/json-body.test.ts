// The server's JSON body fast path (src/server/json-body.ts): long b64 / embeddings_b64 values lifted
// out of the bytes before JSON.parse. Whatever it returns must equal JSON.parse of the whole text, on
// generated bodies and on hostile mutations of them; where it declines, the server parses the whole
// text as before. The one allowed difference: a raw control character inside a lifted value (JSON.parse
// refuses the body; the base64 decoder refuses the value).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { liftLongStrings, parseLifted } from '../src/server/json-body.js';
import { rng, runSeed } from './helpers.js';

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';

function randomB64(rand: () => number, chars: number): string {
  let s = '';
  for (let i = 0; i < chars; i++) s += B64[Math.floor(rand() * 64)];
  return s;
}

function reference(text: string): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch {
    return { ok: false };
  }
}

// Every object of the value has the plain prototype (no __proto__ key turned into a prototype).
function plainObjects(v: unknown): boolean {
  if (Array.isArray(v)) return v.every(plainObjects);
  if (typeof v === 'object' && v !== null)
    return Object.getPrototypeOf(v) === Object.prototype && Object.values(v).every(plainObjects);
  return true;
}

function check(buf: Buffer, context: string) {
  const got = parseLifted(buf);
  if (!got) return false;
  assert.ok(plainObjects(got.value), `${context}: a poisoned prototype`);
  const want = reference(buf.toString('utf8'));
  if (want.ok) assert.deepStrictEqual(got.value, want.value, context);
  else {
    // the allowed difference: a lifted value holds a byte JSON.parse refuses in a string
    const lifted = liftLongStrings(buf);
    assert.ok(lifted, context);
    assert.ok(
      lifted.values.some((s) => Array.from(s).some((c) => c.charCodeAt(0) < 0x20)),
      `${context}: accepted a body JSON.parse refuses`,
    );
  }
  return true;
}

describe('JSON bodies with long base64 values', () => {
  test('a search body parses as JSON.parse parses it, whitespace and key order aside', () => {
    const rand = rng(runSeed + 901);
    const b64 = randomB64(rand, 10_924);
    for (const indent of [undefined, 0, 2, '\t']) {
      const body = { queries: { b64, dtype: 'float16', shape: [1, 32, 128] }, top_k: 10 };
      const buf = Buffer.from(JSON.stringify(body, null, indent));
      assert.ok(check(buf, `indent ${String(indent)}`), 'the fast path took it');
      const flipped = Buffer.from(
        JSON.stringify({ top_k: 3, queries: { shape: [2, 8, 64], dtype: 'float32', b64 } }),
      );
      assert.ok(check(flipped, 'keys reordered'));
    }
    // inline documents: embeddings_b64 in an array of objects, several lifted values
    const docs = Array.from({ length: 5 }, () => ({
      id: 'x',
      embeddings_b64: randomB64(rand, 2048),
      shape: [4, 128],
    }));
    assert.ok(check(Buffer.from(JSON.stringify({ queries: [[[1, 2]]], documents: docs })), 'documents'));
  });

  test('declines what it cannot prove: short bodies, escapes, danger words, keys, unterminated strings', () => {
    const rand = rng(runSeed + 902);
    const b64 = randomB64(rand, 3000);
    const cases: Array<[string, string]> = [
      ['short', JSON.stringify({ queries: { b64: 'AAAA' } })],
      ['an escaped quote in the value', `{"b64": "${b64.slice(0, 1500)}\\"${b64.slice(1500)}"}`],
      ['a \\u escape elsewhere', `{"b64": "${b64}", "x": "\\u0041"}`],
      ['__proto__ elsewhere', `{"b64": "${b64}", "__proto__": {"polluted": 1}}`],
      ['constructor elsewhere', `{"b64": "${b64}", "constructor": {"prototype": {}}}`],
      ['not a b64 key', `{"c64": "${b64}"}`],
      ['b64 as a value', `{"x": "b64", "y": "${b64}"}`],
      ['a long key', `{"${b64}": 1}`],
      ['unterminated', `{"b64": "${b64}`],
      ['no lifted value', `{"queries": [${'1,'.repeat(2000)}1]}`],
      ['too many strings before it', `{"ids": [${'"a",'.repeat(5000)}"a"], "b64": "${b64}"}`],
    ];
    for (const [name, text] of cases) {
      const got = parseLifted(Buffer.from(text));
      assert.equal(got, undefined, name);
    }
    // a forged placeholder cannot be written without a \u escape, and a raw NUL is invalid JSON
    assert.equal(parseLifted(Buffer.from(`{"b64": "${b64}", "x": "\u00000"}`)), undefined);
    // __proto__ inside the lifted value is content, not a key
    const inside = `{"b64": "${b64.slice(0, 1500)}__proto__${b64.slice(1500)}"}`;
    assert.ok(check(Buffer.from(inside), '__proto__ inside the value'));
    // backslash runs before quotes: escaped (odd) and not (even)
    const even = `{"k": "a\\\\", "b64": "${b64}"}`;
    assert.ok(check(Buffer.from(even), 'an even run'));
    const odd = `{"k": "a\\"", "b64": "${b64}"}`;
    assert.ok(check(Buffer.from(odd), 'an odd run'));
    // whitespace of every kind around the colon
    assert.ok(check(Buffer.from(`{"b64" \n\t\r: \n "${b64}"}`), 'whitespace'));
    // a duplicate key: JSON.parse keeps the last value, so a placeholder goes missing and the whole
    // body is parsed instead
    assert.equal(parseLifted(Buffer.from(`{"b64": "${b64}", "b64": "${b64.slice(7)}"}`)), undefined);
    // two colons, or something else between key and value: not lifted, and JSON.parse decides
    assert.equal(parseLifted(Buffer.from(`{"b64":: "${b64}"}`)), undefined);
  });

  test('generated bodies: equal to JSON.parse wherever the fast path answers', () => {
    const rand = rng(runSeed + 903);
    const tensor = fc.record({
      b64: fc.integer({ min: 0, max: 3000 }).map((n) => randomB64(rand, n)),
      dtype: fc.constantFrom('float16', 'float32'),
      shape: fc.array(fc.nat(64), { maxLength: 3 }),
    });
    const body = fc.letrec((tie) => ({
      node: fc.oneof(
        { depthSize: 'small' },
        fc.jsonValue({ maxDepth: 2 }),
        tensor,
        fc.array(tie('node'), { maxLength: 4 }),
        fc.dictionary(fc.constantFrom('queries', 'b64', 'embeddings_b64', 'x', 'é', 'top_k'), tie('node'), {
          maxKeys: 4,
        }),
      ),
    })).node;
    let taken = 0;
    fc.assert(
      fc.property(body, fc.constantFrom(undefined, 1, ' '), (v, indent) => {
        const text = JSON.stringify(v, null, indent);
        if (text === undefined) return;
        if (check(Buffer.from(text), text.slice(0, 200))) taken++;
      }),
      { numRuns: 400 },
    );
    assert.ok(taken > 20, `the fast path took only ${taken} of 400 bodies`);
  });

  test('hostile mutations: never a value JSON.parse would not give, never a poisoned prototype', () => {
    const rand = rng(runSeed + 904);
    const b64 = randomB64(rand, 4000);
    const seeds = [
      JSON.stringify({ queries: { b64, dtype: 'float16', shape: [1, 32, 128] }, top_k: 10 }),
      JSON.stringify({
        documents: [
          { id: 'a', embeddings_b64: b64 },
          { id: 'b', embeddings_b64: b64.slice(9) },
        ],
      }),
      `{"b64": "${b64}", "k": "a\\\\", "m": ["\\"", {"b64": "${b64}"}]}`,
    ];
    const junk = [
      '"',
      '\\',
      ':',
      ',',
      '{',
      '}',
      '[',
      ']',
      ' ',
      '\n',
      '\u0000',
      '\u001f',
      '\\u',
      '__proto__',
      'constructor',
      'b64',
      '"b64":',
      'é',
      '\u00ff',
    ];
    let taken = 0;
    for (let trial = 0; trial < 3000; trial++) {
      let text = seeds[trial % seeds.length];
      const edits = 1 + Math.floor(rand() * 3);
      for (let e = 0; e < edits; e++) {
        const at = Math.floor(rand() * (text.length + 1));
        const del = rand() < 0.5 ? Math.floor(rand() * 3) : 0;
        const ins = junk[Math.floor(rand() * junk.length)];
        text = text.slice(0, at) + ins + text.slice(at + del);
      }
      if (check(Buffer.from(text), `trial ${trial}: ${JSON.stringify(text.slice(0, 80))}`)) taken++;
    }
    assert.ok(taken > 300, `the fast path took only ${taken} of 3,000 mutated bodies`);
  });
});
