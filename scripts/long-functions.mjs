// Lists functions (declarations, methods, arrows, function expressions) longer than N lines in src/.
// Usage: node scripts/long-functions.mjs [N=120] [root=src]   (the house limit is ~120 lines)
import * as fs from 'node:fs';
import * as path from 'node:path';
import ts from 'typescript';

const limit = Number(process.argv[2] ?? 120);
const root = process.argv[3] ?? 'src';
const rows = [];
function walk(dir) {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) walk(p);
    else if (p.endsWith('.ts') && !p.endsWith('.d.ts')) scan(p);
  }
}
function nameOf(node, sf) {
  if (node.name) return node.name.getText(sf);
  const parent = node.parent;
  if (parent && ts.isVariableDeclaration(parent)) return parent.name.getText(sf);
  if (parent && ts.isPropertyAssignment(parent)) return parent.name.getText(sf);
  return '(anonymous)';
}
function scan(file) {
  const sf = ts.createSourceFile(file, fs.readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  const visit = (node) => {
    if (ts.isFunctionLike(node) && node.body) {
      const a = sf.getLineAndCharacterOfPosition(node.getStart(sf)).line;
      const b = sf.getLineAndCharacterOfPosition(node.end).line;
      if (b - a + 1 > limit) rows.push([b - a + 1, `${file}:${a + 1}`, nameOf(node, sf)]);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
}
walk(root);
rows.sort((x, y) => y[0] - x[0]);
for (const [n, at, name] of rows) console.log(`${String(n).padStart(5)}  ${at}  ${name}`);
