// The notebook and the map stay true (issue 34, 'Done means'): README.md within 300 lines and
// bench/NOTES.md within 400; every file ARCHITECTURE.md names (`src/io/corpus/writer.ts`,
// `stream_scan.cc`, `engine*.cc`) exists in the tree, and so does every environment variable the
// package reads in its list; the examples import the package as a user
// would ('maxsim', 'maxsim/...'), never the sources.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, test } from 'node:test';
import { packageRoot } from '../src/native.js';

const read = (file: string) => fs.readFileSync(path.join(packageRoot, file), 'utf8');
const lines = (file: string) => read(file).replace(/\n$/, '').split('\n').length;

/** Every file and folder under the root (folders with a trailing '/'), build outputs aside. */
function treeFiles(): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const e of fs.readdirSync(path.join(packageRoot, dir), { withFileTypes: true })) {
      if (['node_modules', 'dist', 'build', '.git', '.wt', '.gpu'].includes(e.name)) continue;
      const p = dir ? `${dir}/${e.name}` : e.name;
      if (e.isDirectory()) {
        out.push(`${p}/`);
        walk(p);
      } else out.push(p);
    }
  };
  walk('');
  return out;
}

const FILE = /\.(ts|mjs|js|cc|h|cu|cuh|py|json|gyp|md)$/;

/** File names in backticks: paths from any folder up (`io/corpus/lock.ts`), `*` for any characters. */
export function namedFiles(markdown: string): string[] {
  const names = new Set<string>();
  for (const m of markdown.matchAll(/`([^`\s]+)`/g)) {
    const name = m[1].replace(/[:,;)]+$/, '');
    // placeholders (`kernels_<isa>.cc`), URLs and routes are not files
    // (and `.cu`: an extension, not a file)
    if (name.includes('<') || name.includes('://') || name.startsWith('/') || name.startsWith('.')) continue;
    if (FILE.test(name) || /\.\*$/.test(name)) names.add(name);
  }
  return [...names].sort();
}

describe('the notebook and the map', () => {
  test('README.md <= 300 lines, bench/NOTES.md <= 400', () => {
    assert.ok(lines('README.md') <= 300, `README.md has ${lines('README.md')} lines`);
    assert.ok(lines('bench/NOTES.md') <= 400, `bench/NOTES.md has ${lines('bench/NOTES.md')} lines`);
  });

  test('every file ARCHITECTURE.md names exists', () => {
    const files = treeFiles();
    const names = namedFiles(read('ARCHITECTURE.md'));
    assert.ok(names.length > 50, `${names.length} file names found`);
    const missing = names.filter((name) => {
      const pattern = name.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*');
      const re = new RegExp(`(^|/)${pattern}$`);
      return !files.some((f) => re.test(f));
    });
    assert.deepEqual(missing, [], `ARCHITECTURE.md names files the tree lacks: ${missing.join(', ')}`);
  });

  test('ARCHITECTURE.md lists every environment variable the package reads', () => {
    const read = new Set<string>();
    const scan = (dir: string, pattern: RegExp) => {
      for (const f of fs.readdirSync(path.join(packageRoot, dir), { recursive: true }).map(String)) {
        if (!/\.(ts|cc|h|cu|cuh)$/.test(f)) continue;
        const text = fs.readFileSync(path.join(packageRoot, dir, f), 'utf8');
        for (const m of text.matchAll(pattern)) read.add(m[1]);
      }
    };
    scan('src', /process\.env\.([A-Z][A-Z0-9_]+)/g);
    scan('native', /getenv\("([A-Z][A-Z0-9_]+)"/g);
    assert.ok(read.has('MAXSIM_THREADS') && read.has('MAXSIM_KERNEL_DIR'), [...read].join(', '));
    const text = fs.readFileSync(path.join(packageRoot, 'ARCHITECTURE.md'), 'utf8');
    const unlisted = [...read].filter((v) => !text.includes(`\`${v}\``));
    assert.deepEqual(unlisted, [], `read but not in ARCHITECTURE.md: ${unlisted.join(', ')}`);
  });

  test('the engines are Node-free: nothing under native/cpu, native/cuda or native/common includes Node-API or a binding header', () => {
    const offenders: string[] = [];
    for (const dir of ['native/cpu', 'native/cuda', 'native/common'])
      for (const f of fs.readdirSync(path.join(packageRoot, dir), { recursive: true }).map(String)) {
        if (!/\.(cc|h|cu|cuh)$/.test(f)) continue;
        const text = fs.readFileSync(path.join(packageRoot, dir, f), 'utf8');
        if (/#include\s*[<"](napi\.h|node_api\.h|[^">]*binding\/)/.test(text)) offenders.push(`${dir}/${f}`);
      }
    assert.deepEqual(offenders, [], 'engine files that include Node-API or a binding header');
  });

  test('the names check finds what is missing', () => {
    assert.deepEqual(namedFiles('`src/io/corpus.ts`, `kernels_<isa>.cc`, `engine*.cc`, `/v1/info`, `.cu`'), [
      'engine*.cc',
      'src/io/corpus.ts',
    ]);
  });

  test('the examples import the package, not its sources', () => {
    const dir = path.join(packageRoot, 'examples');
    // examples/browser is a page a browser loads without a bundler: it imports the built module
    const sources = fs
      .readdirSync(dir, { recursive: true })
      .map(String)
      .filter((f) => /\.(ts|js|mjs)$/.test(f) && !f.includes('node_modules') && !f.startsWith('browser'));
    assert.ok(sources.length >= 5, `${sources.length} example files`);
    for (const f of sources) {
      const text = fs.readFileSync(path.join(dir, f), 'utf8');
      for (const m of text.matchAll(/from '([^']+)'/g))
        assert.ok(
          !m[1].startsWith('.') || !/(^|\/)src\//.test(m[1]),
          `examples/${f} imports ${m[1]}: import 'maxsim' as a user would`,
        );
      if (f.endsWith('.ts'))
        assert.match(text, /from 'maxsim(\/[a-z]+)?'/, `examples/${f} does not import 'maxsim'`);
    }
  });
});
