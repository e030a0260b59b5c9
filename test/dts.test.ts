// The shipped .d.ts compile with TypeScript 5.0 (checked by hand with typescript@5.0.4 and 5.6.3 on
// a packed install; see docs/service.md). This test guards what broke that: types written by a newer
// compiler (generic typed arrays such as Float64Array<ArrayBuffer>, which TypeScript 5.7 infers and
// older ones cannot read) and dependencies' types that need a newer compiler (Fastify's need
// NoInfer, TypeScript 5.4), reachable from any entry point of the package.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));
const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));

function reachable(): Map<string, string> {
  const seen = new Map<string, string>();
  const todo: string[] = Object.values(pkg.exports as Record<string, { types?: string } | string>)
    .map((e) => (typeof e === 'object' ? e.types : undefined))
    .filter((t): t is string => t !== undefined)
    .map((t) => path.join(root, t));
  while (todo.length > 0) {
    const file = todo.pop()!;
    if (seen.has(file) || !fs.existsSync(file)) continue;
    const text = fs.readFileSync(file, 'utf8');
    seen.set(file, text);
    for (const m of text.matchAll(/(?:from|import\()\s*'(\.[^']+)\.js'/g))
      todo.push(path.resolve(path.dirname(file), `${m[1]}.d.ts`));
  }
  return seen;
}

test('the shipped declarations need nothing newer than TypeScript 5.0', () => {
  const files = reachable();
  assert.ok(files.size > 10, `${files.size} declaration files reachable`);
  for (const [file, text] of files) {
    const where = path.relative(root, file);
    assert.doesNotMatch(
      text,
      /\b(Float(32|64)|U?Int(8|16|32)|BigU?Int64|Uint8Clamped)Array</,
      `${where}: a generic typed array`,
    );
    assert.doesNotMatch(
      text,
      /from '(fastify|@fastify\/[^']+|typebox)'/,
      `${where}: imports a dependency's types`,
    );
    assert.doesNotMatch(text, /\bNoInfer</, where);
  }
});
