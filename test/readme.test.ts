// Every code block of README.md runs: TypeScript blocks are type-checked against the package's
// published types (imported as 'maxsim', as a user would) and run on small data; Python blocks run
// where python3 and numpy exist; shell blocks run with `maxsim` on the PATH. Blocks run in README
// order in one working directory, so a block may read the files an earlier one wrote.
// A line `<!-- doc-test: skip REASON -->` or `<!-- doc-test: gpu -->` just above a fence marks a block
// that never runs here (the reason is printed) or runs only where CUDA is usable.
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

export function readmeBlocks(text: string): Block[] {
  const lines = text.split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\w+)\s*$/.exec(lines[i]);
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

// Small inputs under the names the README's blocks use (d = 128: 3 queries of 32 tokens, 40 documents).
const PRELUDE = `
import { denseBatch, encodeFloats, raggedBatch, tokenMatrix, type TokenBatch, type TokenMatrix } from 'maxsim';
declare global {
  var queryEmbeddings: Float32Array;
  var docEmbeddings: Float32Array;
  var offsets: number[];
  var bits: Uint16Array;
  var query: TokenMatrix;
  var queries: TokenBatch;
  var docs: TokenBatch;
  var batch: TokenBatch;
  var ids: string[];
  var gradScores: Float32Array;
  var pPoints: Float32Array;
  var qPoints: Float32Array;
  var pOffsets: number[];
  var qOffsets: number[];
  var B: number;
}
let seed = 7;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648) * 2 - 1;
const floats = (n: number) => Float32Array.from({ length: n }, rand);
const lengths = Array.from({ length: 40 }, (_, i) => 1 + ((i * 37) % 90));
globalThis.offsets = [0];
for (const l of lengths) offsets.push(offsets[offsets.length - 1] + l);
globalThis.queryEmbeddings = floats(32 * 128);
globalThis.docEmbeddings = floats(offsets[offsets.length - 1] * 128);
globalThis.bits = encodeFloats(docEmbeddings, 'bfloat16') as Uint16Array;
globalThis.query = tokenMatrix(queryEmbeddings, 32, 128);
globalThis.queries = denseBatch(floats(3 * 32 * 128), { count: 3, length: 32, dim: 128 });
globalThis.docs = raggedBatch(docEmbeddings, offsets, { dim: 128 });
globalThis.batch = docs;
globalThis.ids = lengths.map((_, i) => \`doc-\${i}\`);
globalThis.gradScores = floats(3 * 40);
// two pairs of 3-d point clouds (Chamfer)
globalThis.B = 2;
globalThis.pOffsets = [0, 300, 500];
globalThis.qOffsets = [0, 250, 650];
globalThis.pPoints = floats(500 * 3);
globalThis.qPoints = floats(650 * 3);
export {};
`;

const PY_PRELUDE = `
import numpy as np
rng = np.random.default_rng(7)
doc_embeddings = [rng.standard_normal((int(n), 128), dtype=np.float32) for n in rng.integers(1, 90, 40)]
query_embeddings = [rng.standard_normal((32, 128), dtype=np.float32) for _ in range(3)]
`;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'maxsim-readme-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

const blocks = readmeBlocks(fs.readFileSync(path.join(packageRoot, 'README.md'), 'utf8'));
const cudaReason = cudaUnavailableReason();

function has(cmd: string, args: string[]): boolean {
  return spawnSync(cmd, args, { encoding: 'utf8' }).status === 0;
}

describe('README.md code blocks', () => {
  // The project, as a user's would be: 'maxsim' resolves to this package (its exports and types).
  const project = path.join(tmp, 'project');
  const work = path.join(tmp, 'work');
  const bin = path.join(tmp, 'bin');
  for (const d of [project, work, bin, path.join(project, 'node_modules')])
    fs.mkdirSync(d, { recursive: true });
  fs.symlinkSync(packageRoot, path.join(project, 'node_modules', 'maxsim'), 'dir');
  fs.writeFileSync(
    path.join(project, 'package.json'),
    JSON.stringify({ name: 'readme-blocks', type: 'module' }),
  );
  fs.writeFileSync(path.join(project, 'prelude.ts'), PRELUDE);
  const cli = path.join(bin, 'maxsim');
  fs.writeFileSync(
    cli,
    `#!/bin/sh\nexec "${process.execPath}" "${path.join(packageRoot, 'dist', 'src', 'cli', 'main.js')}" "$@"\n`,
  );
  fs.chmodSync(cli, 0o755);

  const ts = blocks.filter((b) => b.lang === 'ts');
  test('TypeScript blocks type-check against the published types', () => {
    ts.forEach((b) => {
      fs.writeFileSync(
        path.join(project, `block-${b.line}.ts`),
        `import './prelude.js';\n${b.code}\nexport {};\n`,
      );
    });
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
    const r = spawnSync(process.execPath, [tsc, '-p', project], { encoding: 'utf8', timeout: 120_000 });
    // name the README line of each error (block-<line>.ts: the block starts after that line)
    assert.equal(r.status, 0, `README blocks do not type-check:\n${r.stdout}${r.stderr}`);
  });

  for (const b of blocks) {
    const where = `README.md:${b.line} (${b.lang})`;
    let skip: string | false = false;
    if (b.directive?.kind === 'skip') skip = b.directive.reason || 'marked skip';
    else if (b.directive?.kind === 'gpu' && cudaReason) skip = `needs a GPU: ${cudaReason}`;
    else if (b.lang === 'python' && !has('python3', ['-c', 'import numpy']))
      skip = 'python3 with numpy is not available';
    else if (!['ts', 'sh', 'python'].includes(b.lang)) skip = `no runner for ${b.lang}`;
    test(`runs ${where}`, { skip }, () => {
      let r: ReturnType<typeof spawnSync>;
      const env = { ...process.env, PATH: `${bin}${path.delimiter}${process.env.PATH}` };
      if (b.lang === 'ts') {
        const js = path.join(project, 'out', `block-${b.line}.js`);
        assert.ok(fs.existsSync(js), `${where} was compiled (the type-check test must run first)`);
        r = spawnSync(process.execPath, [js], { cwd: work, encoding: 'utf8', env, timeout: 120_000 });
      } else if (b.lang === 'python') {
        r = spawnSync('python3', ['-c', `${PY_PRELUDE}\n${b.code}`], {
          cwd: work,
          encoding: 'utf8',
          env,
          timeout: 120_000,
        });
      } else {
        r = spawnSync('sh', ['-ec', b.code], { cwd: work, encoding: 'utf8', env, timeout: 120_000 });
      }
      assert.equal(r.status, 0, `${where} failed:\n${r.stdout}\n${r.stderr}`);
    });
  }
});
