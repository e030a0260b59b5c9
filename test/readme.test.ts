// Every code block of README.md and of each docs/*.md page runs, as a reader would paste it: TypeScript
// blocks are type-checked against the package's published types (imported as 'maxsim', from a project
// whose node_modules holds this package) and run; shell blocks run with `maxsim` on the PATH; Python
// blocks run where python3 has the modules they import. Nothing is predefined: a block that needs data
// makes it, or reads the files an earlier block of the same page wrote. Each page runs in order in a
// working directory of its own, with PORT set to a free port for pages that start `maxsim serve`.
// A line `<!-- doc-test: skip REASON -->` or `<!-- doc-test: gpu -->` just above a fence marks a block
// that never runs here (the reason is printed) or runs only where CUDA is usable. `text` and `json`
// blocks are output, usage lines or data, not code; a fence of any other language fails the test.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, test } from 'node:test';
import { cudaUnavailableReason } from '../src/backends/select.js';
import { packageRoot } from '../src/native.js';

interface Block {
  lang: string;
  code: string;
  line: number;
  directive?: { kind: 'skip' | 'gpu'; reason: string };
}

const RUNNERS = ['ts', 'sh', 'bash', 'python'];
const NOT_CODE = ['text', 'json'];

export function docBlocks(text: string): Block[] {
  const lines = text.split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\w*)\s*$/.exec(lines[i]);
    if (!open) continue;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]); i++) body.push(lines[i]);
    const mark = /^<!-- doc-test: (skip|gpu)\s*(.*?)\s*-->$/.exec(lines[start - 1] ?? '');
    blocks.push({
      lang: open[1],
      code: body.join('\n'),
      line: start + 1,
      directive: mark ? { kind: mark[1] as 'skip' | 'gpu', reason: mark[2] } : undefined,
    });
  }
  return blocks;
}

const pages = [
  'README.md',
  ...fs
    .readdirSync(path.join(packageRoot, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => `docs/${f}`),
];
const slug = (page: string) => page.replace(/\.md$/, '').replace(/[^A-Za-z0-9]+/g, '-');

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-docs-'));
const project = path.join(tmp, 'project');
const bin = path.join(tmp, 'bin');
const workOf = (page: string) => path.join(tmp, 'work', slug(page));
after(() => {
  // a page that started `maxsim serve` in the background and failed before its last block stopped it
  for (const page of pages) {
    const pidFile = path.join(workOf(page), 'serve.pid');
    if (!fs.existsSync(pidFile)) continue;
    try {
      process.kill(Number(fs.readFileSync(pidFile, 'utf8').trim()));
    } catch {
      // already gone
    }
  }
  fs.rmSync(tmp, { recursive: true, force: true });
});

// The project, as a user's would be: 'maxsim' resolves to this package (its exports and types).
for (const d of [project, bin, path.join(project, 'node_modules')]) fs.mkdirSync(d, { recursive: true });
fs.symlinkSync(packageRoot, path.join(project, 'node_modules', 'maxsim'), 'dir');
fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'doc-blocks', type: 'module' }));
const cli = path.join(bin, 'maxsim');
fs.writeFileSync(
  cli,
  `#!/bin/sh\nexec "${process.execPath}" "${path.join(packageRoot, 'dist', 'src', 'cli', 'main.js')}" "$@"\n`,
);
fs.chmodSync(cli, 0o755);

const blocksOf = new Map(
  pages.map((p) => [p, docBlocks(fs.readFileSync(path.join(packageRoot, p), 'utf8'))] as const),
);
const tsFile = (page: string, b: Block) => `${slug(page)}-${b.line}`;
const cudaReason = cudaUnavailableReason();
// Blocks that name $MODEL (a ColBERT model directory; a reader's defaults to a real model) run with
// the tiny test model, where onnxruntime-node is installed.
const TINY_MODEL = path.join(packageRoot, 'test', 'fixtures', 'tiny-colbert');
const modelReason = !fs.existsSync(path.join(TINY_MODEL, 'model.onnx'))
  ? 'the tiny test model is not made'
  : !fs.existsSync(path.join(packageRoot, 'node_modules', 'onnxruntime-node'))
    ? 'onnxruntime-node is not installed'
    : undefined;

const available = new Map<string, boolean>();
function pythonHas(modules: string[]): boolean {
  const key = modules.join(',');
  if (!available.has(key)) {
    const r = spawnSync('python3', ['-c', `import ${key}`], { encoding: 'utf8' });
    available.set(key, r.status === 0);
  }
  return available.get(key) as boolean;
}
function pythonImports(code: string): string[] {
  const names = new Set<string>();
  for (const m of code.matchAll(/^\s*(?:import|from)\s+([\w.]+(?:\s*,\s*[\w.]+)*)/gm))
    for (const n of m[1].split(',')) names.add(n.trim().split('.')[0]);
  return [...names].filter((n) => !['base64', 'json', 'os', 'sys', 'pathlib'].includes(n)).sort();
}

function freePort(): number {
  const r = spawnSync(
    process.execPath,
    [
      '-e',
      "const s = require('node:net').createServer().listen(0, '127.0.0.1', () => { console.log(s.address().port); s.close(); });",
    ],
    { encoding: 'utf8' },
  );
  return Number(r.stdout.trim());
}

test('every fenced block is ts, sh, bash or python (or text / json for output and data)', () => {
  const other = pages.flatMap((p) =>
    (blocksOf.get(p) ?? [])
      .filter((b) => !RUNNERS.includes(b.lang) && !NOT_CODE.includes(b.lang))
      .map((b) => `${p}:${b.line} (${b.lang || 'no language'})`),
  );
  assert.deepEqual(other, []);
});

// GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens
function anchorsOf(file: string): Set<string> {
  const text = fs.readFileSync(file, 'utf8').replace(/^```[\s\S]*?^```/gm, '');
  return new Set(
    [...text.matchAll(/^#+\s+(.*)$/gm)].map((m) =>
      m[1]
        .trim()
        .toLowerCase()
        .replace(/[^\w\- ]/g, '')
        .replace(/ /g, '-'),
    ),
  );
}

test('every relative link of the pages names a file that exists, and a heading of it', () => {
  const broken: string[] = [];
  for (const page of pages) {
    const text = fs.readFileSync(path.join(packageRoot, page), 'utf8').replace(/^```[\s\S]*?^```/gm, '');
    for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/.test(m[1])) continue;
      const [file, anchor] = m[1].split('#');
      const target = file ? path.join(packageRoot, path.dirname(page), file) : path.join(packageRoot, page);
      if (!fs.existsSync(target)) broken.push(`${page}: ${m[1]} (no such file)`);
      else if (anchor && target.endsWith('.md') && !anchorsOf(target).has(anchor))
        broken.push(`${page}: ${m[1]} (no such heading)`);
    }
  }
  assert.deepEqual(broken, []);
});

test('TypeScript blocks type-check against the published types', () => {
  for (const page of pages)
    for (const b of blocksOf.get(page) ?? [])
      if (b.lang === 'ts')
        fs.writeFileSync(path.join(project, `${tsFile(page, b)}.ts`), `${b.code}\nexport {};\n`);
  fs.writeFileSync(
    path.join(project, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        strict: true,
        skipLibCheck: true,
        noUnusedLocals: false,
        types: ['node'],
        typeRoots: [path.join(packageRoot, 'node_modules', '@types')],
        outDir: 'out',
      },
      include: ['*.ts'],
    }),
  );
  const tsc = path.join(packageRoot, 'node_modules', 'typescript', 'bin', 'tsc');
  const r = spawnSync(process.execPath, [tsc, '-p', project], { encoding: 'utf8', timeout: 180_000 });
  // each error names its file: <page>-<line>.ts is the block whose fence opens on that line
  assert.equal(r.status, 0, `doc blocks do not type-check:\n${r.stdout}${r.stderr}`);
});

for (const page of pages) {
  describe(`${page} code blocks`, () => {
    const work = workOf(page);
    fs.mkdirSync(work, { recursive: true });
    const blocks = blocksOf.get(page) ?? [];
    const env: NodeJS.ProcessEnv = { ...process.env, PATH: `${bin}${path.delimiter}${process.env.PATH}` };
    if (blocks.some((b) => b.code.includes('maxsim serve'))) env.PORT = String(freePort());
    if (!modelReason) env.MODEL = TINY_MODEL;
    for (const b of blocks) {
      if (!RUNNERS.includes(b.lang)) continue;
      const where = `${page}:${b.line} (${b.lang})`;
      let skip: string | false = false;
      const missing = b.lang === 'python' ? pythonImports(b.code) : [];
      if (b.directive?.kind === 'skip') skip = b.directive.reason || 'marked skip';
      else if (b.directive?.kind === 'gpu' && cudaReason) skip = `needs a GPU: ${cudaReason}`;
      else if (/\$\{?MODEL\b/.test(b.code) && modelReason) skip = `needs a model: ${modelReason}`;
      else if (b.lang === 'python' && !pythonHas(missing))
        skip = `python3 with ${missing.join(', ')} is not available`;
      test(`runs ${where}`, { skip }, () => {
        let r: ReturnType<typeof spawnSync>;
        const opts = { cwd: work, encoding: 'utf8' as const, env, timeout: 120_000 };
        if (b.lang === 'ts') {
          const js = path.join(project, 'out', `${tsFile(page, b)}.js`);
          assert.ok(fs.existsSync(js), `${where} was compiled (the type-check test must run first)`);
          r = spawnSync(process.execPath, [js], opts);
        } else if (b.lang === 'python') {
          r = spawnSync('python3', ['-c', b.code], opts);
        } else {
          r = spawnSync(b.lang === 'bash' ? 'bash' : 'sh', ['-ec', b.code], opts);
        }
        assert.equal(r.status, 0, `${where} failed:\n${r.stdout}\n${r.stderr}`);
      });
    }
  });
}
